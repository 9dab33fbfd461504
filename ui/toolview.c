/* toolview.c — one tool call as the user sees it, drawn again from its
 * parameters whenever more of them stream in: a header naming what is
 * done to what, the payload that matters (an edit's old and new lines, a
 * file's new content, a command's live output) and the result's first
 * lines. Long parts are cut with a count of what is not shown. */
#include "ui/render.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DIFF_MAX_LINES 24   /* per side of an edit */
#define WRITE_MAX_LINES 12
#define CMD_MAX_LINES 6
#define OUTPUT_TAIL_LINES 8
#define RESULT_MAX_LINES 3
#define ERROR_MAX_LINES 6
#define PROGRESS_KEEP (32u * 1024u)

static const char *const BULLET = "\xe2\x97\x8f ";    /* ● */
static const char *const ELBOW = "  \xe2\x8e\xbf ";   /* ⎿ */
static const char *const ELLIPSIS = "\xe2\x80\xa6";  /* … */

void ui_tool_view_free(tool_view *t)
{
    free(t->tool);
    for (size_t i = 0; i < t->n_params; i++) {
        free(t->params[i].name);
        sb_free(&t->params[i].value);
    }
    free(t->params);
    sb_free(&t->progress);
    free(t->result);
    free(t->not_run);
    memset(t, 0, sizeof *t);
}

const char *ui_tool_param_get(const tool_view *t, const char *name)
{
    for (size_t i = 0; i < t->n_params; i++)
        if (!strcmp(t->params[i].name, name)) return sb_str(&t->params[i].value);
    return NULL;
}

tool_param *ui_tool_param_get_or_add(tool_view *t, const char *name)
{
    for (size_t i = 0; i < t->n_params; i++)
        if (!strcmp(t->params[i].name, name)) return &t->params[i];
    tool_param *grown = xrealloc(t->params, (t->n_params + 1) * sizeof *grown);
    t->params = grown;
    tool_param *p = &t->params[t->n_params++];
    memset(p, 0, sizeof *p);
    p->name = xstrdup(name ? name : "");
    return p;
}

void ui_tool_view_set_args(tool_view *t, const char *args_json)
{
    t->parsed = true;
    struct json_object *o = args_json ? json_tokener_parse(args_json) : NULL;
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return; /* keep what streamed */
    }
    for (size_t i = 0; i < t->n_params; i++) {
        free(t->params[i].name);
        sb_free(&t->params[i].value);
    }
    t->n_params = 0;
    json_object_object_foreach(o, key, val) {
        tool_param *p = ui_tool_param_get_or_add(t, key);
        if (json_object_is_type(val, json_type_string))
            sb_append(&p->value, json_object_get_string(val), (size_t)json_object_get_string_len(val));
        else if (val)
            sb_puts(&p->value, json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN));
        else
            sb_puts(&p->value, "null");
    }
    json_object_put(o);
}

void ui_tool_view_add_progress(tool_view *t, const char *s, size_t n)
{
    sb_append(&t->progress, s, n);
    if (t->progress.len > PROGRESS_KEEP * 2) {
        /* keep the newest part, from a line start */
        size_t cut = t->progress.len - PROGRESS_KEEP;
        while (cut < t->progress.len && t->progress.s[cut - 1] != '\n') cut++;
        memmove(t->progress.s, t->progress.s + cut, t->progress.len - cut);
        t->progress.len -= cut;
        t->progress.s[t->progress.len] = 0;
        t->progress_cut = true;
    }
}

/* ---- pieces ------------------------------------------------------------------------ */

static size_t count_lines(const char *s, size_t n)
{
    if (!n) return 0;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return s[n - 1] == '\n' ? c : c + 1;
}

/* Offset of the start of line k (0-based) of s. */
static size_t line_start(const char *s, size_t n, size_t k)
{
    size_t i = 0;
    while (k && i < n) {
        const char *nl = memchr(s + i, '\n', n - i);
        if (!nl) return n;
        i = (size_t)(nl - s) + 1;
        k--;
    }
    return i;
}

static void note_line(line_list *out, const char *indent, const char *fmt, size_t count)
{
    char buf[128];
    snprintf(buf, sizeof buf, fmt, count);
    ui_line l = { 0 };
    ui_line_adds(&l, indent, 0);
    ui_line_adds(&l, buf, UI_C_MUTED);
    ui_lines_push(out, &l);
}

/* The lines of text, each after mark in style, at most max of them (the
 * first ones, or with tail the last ones), wrapped anywhere. */
static void text_lines(line_list *out, const char *text, size_t len, int width, const char *mark, ui_style mstyle,
                       ui_style style, size_t max, bool tail)
{
    size_t total = count_lines(text, len);
    size_t from = 0, upto = total;
    if (total > max) {
        if (tail) from = total - max;
        else upto = max;
    }
    if (tail && from) note_line(out, "    ", "\xe2\x80\xa6 %zu earlier lines", from);
    size_t i = line_start(text, len, from);
    char more[64];
    snprintf(more, sizeof more, "%*s", ui_text_width(mark, strlen(mark)), "");
    wrap_prefix wp = { mark, mstyle, more, mstyle };
    for (size_t k = from; k < upto && i <= len; k++) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        ui_line para = { 0 };
        size_t e = end;
        if (e > i && text[e - 1] == '\r') e--;
        ui_line_add(&para, text + i, e - i, style);
        ui_wrap_para(out, &para, width, &wp, false);
        ui_line_free(&para);
        i = end + 1;
    }
    if (!tail && total > upto) note_line(out, "    ", "\xe2\x80\xa6 %zu more lines", total - upto);
}

static ui_style header_style(const tool_view *t)
{
    if (t->asking) return UI_C_NOTICE | UI_BOLD;
    if (t->not_run || t->denied || (t->done && t->is_error)) return UI_C_ERROR | UI_BOLD;
    if (t->done) return UI_C_OK | UI_BOLD;
    return UI_C_TOOL | UI_BOLD;
}

/* First line of s, at most max bytes. */
static size_t first_line_len(const char *s, size_t max)
{
    const char *nl = strchr(s, '\n');
    size_t n = nl ? (size_t)(nl - s) : strlen(s);
    return n < max ? n : max;
}

static void add_value(ui_line *h, const char *v, ui_style style, size_t max)
{
    size_t n = first_line_len(v, max);
    ui_line_add(h, v, n, style);
    if (n < strlen(v)) ui_line_add(h, ELLIPSIS, strlen(ELLIPSIS), style);
}

static void header_read(ui_line *h, const tool_view *t)
{
    const char *path = ui_tool_param_get(t, "path");
    const char *start = ui_tool_param_get(t, "start_line");
    const char *max = ui_tool_param_get(t, "max_lines");
    const char *whole = ui_tool_param_get(t, "whole");
    ui_line_adds(h, t->done ? "Read " : "Reading ", UI_BOLD);
    add_value(h, path && *path ? path : ELLIPSIS, UI_C_PATH, 400);
    char range[96];
    const char *s = start && *start ? start : "1";
    if (whole && !strcmp(whole, "true")) snprintf(range, sizeof range, " %.20s:EOF", s);
    else snprintf(range, sizeof range, " %.20s:%.20s", s, max && *max ? max : "500");
    ui_line_adds(h, range, UI_C_NUMBER);
    if (!t->done) ui_line_adds(h, ELLIPSIS, 0);
}

static void header_generic(ui_line *h, const tool_view *t)
{
    const char *name = t->tool ? t->tool : "tool";
    const char *v;
    if (!strcmp(name, "search") && (v = ui_tool_param_get(t, "query"))) {
        ui_line_adds(h, "Search ", UI_BOLD);
        add_value(h, v, UI_C_CODE, 200);
        const char *p = ui_tool_param_get(t, "path");
        if (p && *p) {
            ui_line_adds(h, " in ", 0);
            add_value(h, p, UI_C_PATH, 200);
        }
        return;
    }
    if ((!strcmp(name, "bash_status") || !strcmp(name, "bash_stop")) && (v = ui_tool_param_get(t, "job"))) {
        ui_line_adds(h, !strcmp(name, "bash_stop") ? "Stop job " : "Job ", UI_BOLD);
        add_value(h, v, UI_C_NUMBER, 40);
        return;
    }
    if (!strcmp(name, "more")) {
        ui_line_adds(h, "More of the last read", UI_BOLD);
        return;
    }
    if (!strcmp(name, "list")) {
        ui_line_adds(h, "List ", UI_BOLD);
        v = ui_tool_param_get(t, "path");
        add_value(h, v && *v ? v : ".", UI_C_PATH, 300);
        return;
    }
    if (!strcmp(name, "web_search") && (v = ui_tool_param_get(t, "query"))) {
        ui_line_adds(h, "Web search ", UI_BOLD);
        add_value(h, v, UI_C_CODE, 300);
        return;
    }
    if (!strcmp(name, "visit_page") && (v = ui_tool_param_get(t, "url"))) {
        ui_line_adds(h, "Visit ", UI_BOLD);
        add_value(h, v, UI_C_PATH | UI_UNDERLINE, 300);
        return;
    }
    ui_line_adds(h, name, UI_BOLD);
    for (size_t i = 0; i < t->n_params; i++) {
        ui_line_adds(h, " ", 0);
        ui_line_adds(h, t->params[i].name, UI_C_MUTED);
        ui_line_adds(h, "=", UI_C_MUTED);
        const char *pv = sb_str(&t->params[i].value);
        bool num = *pv && strspn(pv, "0123456789-.") == strlen(pv);
        add_value(h, pv, num ? UI_C_NUMBER : 0, 120);
    }
}

static void result_lines(line_list *out, const tool_view *t, int width)
{
    if (t->asking) {
        ui_line l = { 0 };
        ui_line_adds(&l, ELBOW, UI_C_MUTED);
        ui_line_adds(&l, "waiting for your answer", UI_C_NOTICE);
        ui_lines_push(out, &l);
        return;
    }
    if (t->not_run) {
        ui_line l = { 0 };
        ui_line_adds(&l, ELBOW, UI_C_MUTED);
        ui_line_adds(&l, t->not_run, UI_C_ERROR);
        ui_lines_push(out, &l);
        return;
    }
    if (!t->done || !t->result) return;
    const char *r = t->result;
    if (t->denied || t->is_error) {
        ui_line para = { 0 };
        if (t->denied) ui_line_adds(&para, "denied: ", UI_C_ERROR | UI_BOLD);
        const char *body = r;
        if (!strncmp(body, "Tool error: ", 12)) body += 12;
        size_t n = first_line_len(body, 2000);
        ui_line_add(&para, body, n, UI_C_ERROR);
        wrap_prefix wp = { ELBOW, UI_C_MUTED, "    ", 0 };
        ui_wrap_para(out, &para, width, &wp, true);
        ui_line_free(&para);
        if (!t->denied && body[n] == '\n')
            text_lines(out, body + n + 1, strlen(body + n + 1), width, "    ", 0, UI_C_ERROR, ERROR_MAX_LINES - 1, false);
        return;
    }
    size_t len = strlen(r);
    size_t n = first_line_len(r, len);
    ui_line para = { 0 };
    ui_line_add(&para, r, n, UI_C_MUTED);
    size_t rest = count_lines(r, len);
    if (rest > 1) {
        char more[64];
        snprintf(more, sizeof more, " (+%zu line%s)", rest - 1, rest - 1 == 1 ? "" : "s");
        ui_line_adds(&para, more, UI_C_MUTED);
    }
    wrap_prefix wp = { ELBOW, UI_C_MUTED, "    ", 0 };
    ui_wrap_para(out, &para, width, &wp, true);
    ui_line_free(&para);
}

static void render_bash(line_list *out, const tool_view *t, int width)
{
    const char *cmd = ui_tool_param_get(t, "command");
    const char *sandbox = ui_tool_param_get(t, "sandbox");
    ui_style hs = header_style(t);
    size_t clen = cmd ? strlen(cmd) : 0;
    ui_line para = { 0 };
    ui_line_adds(&para, BULLET, hs);
    ui_line_adds(&para, "$ ", hs);
    size_t n1 = cmd ? first_line_len(cmd, clen) : 0;
    ui_line_add(&para, cmd ? cmd : "", n1, UI_BOLD);
    if (sandbox && !strcmp(sandbox, "false")) ui_line_adds(&para, "  (outside the sandbox)", UI_C_NOTICE);
    wrap_prefix wp = { "", 0, "    ", 0 };
    ui_wrap_para(out, &para, width, &wp, true);
    ui_line_free(&para);
    if (cmd && n1 < clen)
        text_lines(out, cmd + n1 + 1, clen - n1 - 1, width, "    ", 0, UI_BOLD, CMD_MAX_LINES, false);
    /* the live tail, and after the end the last lines it printed */
    if (t->progress.len) {
        if (t->progress_cut) ui_lines_push_text(out, "    \xe2\x80\xa6 (earlier output not kept)", UI_C_MUTED);
        text_lines(out, t->progress.s, t->progress.len, width, "  \xe2\x94\x82 ", UI_C_MUTED, 0, OUTPUT_TAIL_LINES,
                   true);
    }
    if (t->done && t->result && !t->denied && !t->not_run) {
        /* the job line says how it ended: "job 1: exit status 0 after 0.1 s" */
        const char *r = t->result;
        size_t n = first_line_len(r, 300);
        bool ok = !t->is_error && strstr(r, "exit status 0 ") && strstr(r, "exit status 0 ") < r + n;
        ui_line l = { 0 };
        ui_line_add(&l, r, n, ok ? UI_C_MUTED : UI_C_ERROR);
        wrap_prefix wp = { ELBOW, UI_C_MUTED, "    ", 0 };
        ui_wrap_para(out, &l, width, &wp, true);
        ui_line_free(&l);
        return;
    }
    result_lines(out, t, width);
}

static void render_edit(line_list *out, const tool_view *t, int width)
{
    ui_style hs = header_style(t);
    const char *path = ui_tool_param_get(t, "path");
    const char *old = ui_tool_param_get(t, "old");
    const char *nw = ui_tool_param_get(t, "new");
    const char *start = ui_tool_param_get(t, "start_line");
    const char *end = ui_tool_param_get(t, "end_line");
    ui_line h = { 0 };
    ui_line_adds(&h, BULLET, hs);
    ui_line_adds(&h, t->done ? "Edit " : "Editing ", UI_BOLD);
    add_value(&h, path && *path ? path : ELLIPSIS, UI_C_PATH, 400);
    if (!old && start && *start) {
        char r[96];
        snprintf(r, sizeof r, " lines %.20s-%.20s", start, end && *end ? end : start);
        ui_line_adds(&h, r, UI_C_NUMBER);
    }
    wrap_prefix wp = { "", 0, "    ", 0 };
    ui_wrap_para(out, &h, width, &wp, true);
    ui_line_free(&h);
    if (old && *old) text_lines(out, old, strlen(old), width, "  - ", UI_C_DEL, UI_C_DEL, DIFF_MAX_LINES, false);
    if (nw && *nw) text_lines(out, nw, strlen(nw), width, "  + ", UI_C_ADD, UI_C_ADD, DIFF_MAX_LINES, false);
    result_lines(out, t, width);
}

static void render_write(line_list *out, const tool_view *t, int width)
{
    ui_style hs = header_style(t);
    const char *path = ui_tool_param_get(t, "path");
    const char *content = ui_tool_param_get(t, "content");
    ui_line h = { 0 };
    ui_line_adds(&h, BULLET, hs);
    ui_line_adds(&h, t->done ? "Write " : "Writing ", UI_BOLD);
    add_value(&h, path && *path ? path : ELLIPSIS, UI_C_PATH, 400);
    if (content) {
        char c[64];
        size_t nl = count_lines(content, strlen(content));
        snprintf(c, sizeof c, " (%zu line%s)", nl, nl == 1 ? "" : "s");
        ui_line_adds(&h, c, UI_C_MUTED);
    }
    wrap_prefix wp = { "", 0, "    ", 0 };
    ui_wrap_para(out, &h, width, &wp, true);
    ui_line_free(&h);
    if (content && *content)
        text_lines(out, content, strlen(content), width, "  + ", UI_C_ADD, UI_C_ADD, WRITE_MAX_LINES, false);
    result_lines(out, t, width);
}

void ui_tool_render(line_list *out, const tool_view *t, int width)
{
    const char *name = t->tool ? t->tool : "";
    if (!strcmp(name, "bash")) {
        render_bash(out, t, width);
        return;
    }
    if (!strcmp(name, "edit")) {
        render_edit(out, t, width);
        return;
    }
    if (!strcmp(name, "write")) {
        render_write(out, t, width);
        return;
    }
    ui_line h = { 0 };
    ui_line_adds(&h, BULLET, header_style(t));
    if (!strcmp(name, "read")) header_read(&h, t);
    else header_generic(&h, t);
    wrap_prefix wp = { "", 0, "    ", 0 };
    ui_wrap_para(out, &h, width, &wp, true);
    ui_line_free(&h);
    if (t->progress.len)
        text_lines(out, t->progress.s, t->progress.len, width, "  \xe2\x94\x82 ", UI_C_MUTED, 0, OUTPUT_TAIL_LINES, true);
    result_lines(out, t, width);
}
