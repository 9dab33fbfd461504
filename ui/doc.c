/* doc.c — the transcript's blocks, the agent's events applied to them, and
 * their layout (see doc.h). */
#include "ui/doc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/render.h"

typedef struct {
    doc_kind kind;
    strbuf text;
    bool open;            /* still streaming */
    bool is_error;        /* a notice that reports a problem */
    tool_view tool;       /* DOC_TOOL */
    unsigned version;     /* bumped on every change */
    /* the last layout */
    bool laid;
    int lay_width;
    unsigned lay_version;
    bool lay_folded;
    line_list lines;
} block;

struct ui_doc {
    block *b;
    size_t n, cap;
    bool show_thinking;
    size_t *off;          /* first line of each block (its gap excluded) */
    size_t cap_off;
    size_t total;
};

static const ui_line g_empty_line = { (char *)"", 0, NULL, 0, 0, 0 };

ui_doc *ui_doc_new(void)
{
    ui_doc *d = xcalloc(1, sizeof *d);
    return d;
}

static void block_free(block *b)
{
    sb_free(&b->text);
    ui_tool_view_free(&b->tool);
    ui_lines_free(&b->lines);
}

void ui_doc_clear(ui_doc *d)
{
    for (size_t i = 0; i < d->n; i++) block_free(&d->b[i]);
    d->n = 0;
    d->total = 0;
}

void ui_doc_free(ui_doc *d)
{
    if (!d) return;
    ui_doc_clear(d);
    free(d->b);
    free(d->off);
    free(d);
}

size_t ui_doc_blocks(const ui_doc *d) { return d->n; }

doc_kind ui_doc_block_kind(const ui_doc *d, size_t i) { return d->b[i].kind; }

void ui_doc_set_show_thinking(ui_doc *d, bool on) { d->show_thinking = on; }

bool ui_doc_show_thinking(const ui_doc *d) { return d->show_thinking; }

static block *push_block(ui_doc *d, doc_kind kind)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 32;
        d->b = xrealloc(d->b, d->cap * sizeof *d->b);
    }
    block *b = &d->b[d->n++];
    memset(b, 0, sizeof *b);
    b->kind = kind;
    b->version = 1;
    return b;
}

static void close_open(ui_doc *d)
{
    for (size_t i = d->n; i-- > 0;) {
        block *b = &d->b[i];
        if (b->open && b->kind != DOC_TOOL) {
            b->open = false;
            b->version++;
        }
        if (b->kind == DOC_USER) break;
    }
}

/* Text appended to a block that is still empty loses its leading
 * newlines: the model often opens an answer with a blank line. */
static void append_text(block *b, const char *s, size_t n)
{
    if (!b->text.len)
        while (n && (*s == '\n' || *s == '\r')) s++, n--;
    if (!n) return;
    sb_append(&b->text, s, n);
    b->version++;
}

static block *open_text_block(ui_doc *d, doc_kind kind)
{
    if (d->n && d->b[d->n - 1].kind == kind && d->b[d->n - 1].open) return &d->b[d->n - 1];
    close_open(d);
    block *b = push_block(d, kind);
    b->open = true;
    return b;
}

/* The block of call `call` of the reply being streamed. */
static block *tool_block(ui_doc *d, int call)
{
    for (size_t i = d->n; i-- > 0;) {
        block *b = &d->b[i];
        if (b->kind == DOC_TOOL) {
            if (b->tool.call == call) return b;
            continue;
        }
        /* notices and what commands printed meanwhile lie in between */
        if (b->kind != DOC_NOTICE && b->kind != DOC_ERROR && b->kind != DOC_COMMAND && b->kind != DOC_INFO) break;
    }
    return NULL;
}

static block *tool_block_or_new(ui_doc *d, const agent_event *e)
{
    block *b = tool_block(d, e->call_index);
    if (b) return b;
    close_open(d);
    b = push_block(d, DOC_TOOL);
    b->tool.tool = xstrdup(e->tool ? e->tool : "tool");
    b->tool.call = e->call_index;
    return b;
}

void ui_doc_add(ui_doc *d, doc_kind kind, const char *text, size_t len)
{
    close_open(d);
    block *b = push_block(d, kind);
    if (text) sb_append(&b->text, text, len);
    if (!b->text.s) sb_puts(&b->text, "");
}

void ui_doc_adds(ui_doc *d, doc_kind kind, const char *text)
{
    ui_doc_add(d, kind, text, text ? strlen(text) : 0);
}

void ui_doc_add_tool(ui_doc *d, const char *tool, const char *args_json, const char *result, bool is_error, bool denied)
{
    close_open(d);
    block *b = push_block(d, DOC_TOOL);
    b->tool.tool = xstrdup(tool ? tool : "tool");
    b->tool.call = -1;
    ui_tool_view_set_args(&b->tool, args_json);
    b->tool.result = xstrdup(result ? result : "");
    b->tool.done = true;
    b->tool.is_error = is_error;
    b->tool.denied = denied;
}

static const char *find_bytes(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = 0; i + k <= n; i++)
        if (!memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

void ui_doc_add_reply(ui_doc *d, const char *raw, size_t len)
{
    const char *end_think = find_bytes(raw, len, "</think>");
    const char *text = raw;
    if (end_think) {
        size_t tl = (size_t)(end_think - raw);
        while (tl && (raw[tl - 1] == '\n' || raw[tl - 1] == ' ')) tl--;
        if (tl) ui_doc_add(d, DOC_THINKING, raw, tl);
        text = end_think + strlen("</think>");
    }
    size_t n = len - (size_t)(text - raw);
    /* the DSML opener, also without its leading bar */
    const char *dsml = find_bytes(text, n, "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c");
    if (dsml) {
        n = (size_t)(dsml - text);
        if (n && text[n - 1] == '<') n--;
    }
    while (n && (*text == '\n' || *text == ' ')) text++, n--;
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    if (n) ui_doc_add(d, DOC_ANSWER, text, n);
}

/* Calls of the current request that got no result will not get one. */
static void mark_not_run(ui_doc *d, const char *why)
{
    for (size_t i = d->n; i-- > 0;) {
        block *b = &d->b[i];
        if (b->kind == DOC_USER) break;
        if (b->kind != DOC_TOOL || b->tool.done || b->tool.not_run) continue;
        b->tool.not_run = xstrdup(why);
        b->tool.asking = false;
        b->version++;
    }
}

void ui_doc_end_turn(ui_doc *d, const char *reason)
{
    close_open(d);
    bool stopped = reason && !strcmp(reason, AGENT_END_INTERRUPTED);
    bool plain = !reason || !strcmp(reason, AGENT_END_DONE);
    char why[96];
    snprintf(why, sizeof why, "not run%s%s", plain ? "" : ": ", plain ? "" : stopped ? "interrupted" : reason);
    mark_not_run(d, why);
    if (reason && strcmp(reason, AGENT_END_DONE) && strcmp(reason, AGENT_END_INTERRUPTED) &&
        strcmp(reason, AGENT_END_ERROR)) {
        char msg[128];
        snprintf(msg, sizeof msg, "The turn ended: %s.", reason);
        ui_doc_adds(d, DOC_NOTICE, msg);
    }
}

void ui_doc_event(ui_doc *d, const agent_event *e)
{
    block *b;
    switch (e->type) {
    case AGENT_EV_USER:
        ui_doc_add(d, DOC_USER, e->text, e->len);
        break;
    case AGENT_EV_THINKING:
        append_text(open_text_block(d, DOC_THINKING), e->text, e->len);
        break;
    case AGENT_EV_TEXT:
        b = open_text_block(d, DOC_ANSWER);
        append_text(b, e->text, e->len);
        break;
    case AGENT_EV_TOOL_START:
        close_open(d);
        b = push_block(d, DOC_TOOL);
        b->tool.tool = xstrdup(e->tool ? e->tool : "tool");
        b->tool.call = e->call_index;
        break;
    case AGENT_EV_TOOL_PARAM:
        b = tool_block_or_new(d, e);
        sb_append(&ui_tool_param_get_or_add(&b->tool, e->name ? e->name : "")->value, e->text ? e->text : "",
                  e->text ? e->len : 0);
        b->version++;
        break;
    case AGENT_EV_TOOL_CALL:
        b = tool_block_or_new(d, e);
        ui_tool_view_set_args(&b->tool, e->args_json);
        b->version++;
        break;
    case AGENT_EV_TOOL_PROGRESS:
        b = tool_block_or_new(d, e);
        ui_tool_view_add_progress(&b->tool, e->text ? e->text : "", e->text ? e->len : 0);
        b->version++;
        break;
    case AGENT_EV_TOOL_RESULT:
        b = tool_block_or_new(d, e);
        free(b->tool.result);
        b->tool.result = xstrdup(e->text ? e->text : "");
        b->tool.done = true;
        b->tool.asking = false;
        b->tool.is_error = e->is_error;
        b->tool.denied = e->denied;
        b->version++;
        break;
    case AGENT_EV_CONFIRM:
        b = tool_block_or_new(d, e);
        b->tool.asking = true;
        b->version++;
        break;
    case AGENT_EV_NOTICE:
        /* a problem reported while calls stream (a malformed block): they
         * will not run */
        if (e->is_error) mark_not_run(d, "not run: the call was malformed");
        ui_doc_add(d, DOC_NOTICE, e->text, e->len);
        d->b[d->n - 1].is_error = e->is_error;
        break;
    case AGENT_EV_COMPACTION:
        ui_doc_add(d, DOC_COMPACTION, e->text, e->len);
        break;
    case AGENT_EV_ERROR:
        ui_doc_add(d, DOC_ERROR, e->text, e->len);
        break;
    case AGENT_EV_TURN_END:
        ui_doc_end_turn(d, e->text);
        break;
    }
}

/* ---- layout ------------------------------------------------------------------------ */

static size_t count_lines(const char *s, size_t n)
{
    size_t c = 1;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    if (n && s[n - 1] == '\n') c--;
    return c;
}

/* Each line of text after a prefix (the first line's, then the others'). */
static void plain_lines(line_list *out, const char *text, size_t len, int width, const char *p1, const char *p2,
                        ui_style pst, ui_style st)
{
    size_t i = 0;
    bool first = true;
    do {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        ui_line para = { 0 };
        ui_line_add(&para, text + i, end - i, st);
        wrap_prefix wp = { first ? p1 : p2, pst, p2, pst };
        ui_wrap_para(out, &para, width, &wp, true);
        ui_line_free(&para);
        first = false;
        i = end + 1;
        if (!nl) break;
    } while (i < len);
}

static bool folded(const ui_doc *d, const block *b)
{
    if (d->show_thinking) return false;
    if (b->kind == DOC_THINKING) return !b->open;
    return b->kind == DOC_COMPACTION;
}

static void render_block(const ui_doc *d, block *b, int width)
{
    line_list *out = &b->lines;
    const char *t = sb_str(&b->text);
    size_t n = b->text.len;
    char head[160];
    switch (b->kind) {
    case DOC_BANNER:
    case DOC_INFO:
        ui_md_render_info(out, t, n, width);
        break;
    case DOC_ANSWER:
        ui_md_render(out, t, n, width, 0, b->open);
        break;
    case DOC_USER:
        plain_lines(out, t, n, width, "\xe2\x80\xba ", "  ", UI_C_USER | UI_BOLD, UI_C_USER | UI_BOLD);
        break;
    case DOC_THINKING:
        if (folded(d, b)) {
            size_t lines = count_lines(t, n);
            snprintf(head, sizeof head, "Thought for %zu line%s \xc2\xb7 Ctrl+O shows reasoning", lines,
                     lines == 1 ? "" : "s");
            plain_lines(out, head, strlen(head), width, "\xe2\x9c\xbb ", "  ", UI_C_MUTED, UI_C_MUTED);
        } else {
            ui_lines_push_text(out, b->open ? "\xe2\x9c\xbb Thinking\xe2\x80\xa6" : "\xe2\x9c\xbb Thinking", UI_C_MUTED);
            plain_lines(out, t, n, width, "  ", "  ", UI_C_THINK, UI_C_THINK | UI_ITALIC);
        }
        break;
    case DOC_TOOL:
        ui_tool_render(out, &b->tool, width);
        break;
    case DOC_NOTICE:
        plain_lines(out, t, n, width, "\xe2\x9c\xa6 ", "  ", b->is_error ? UI_C_ERROR : UI_C_NOTICE,
                    b->is_error ? UI_C_ERROR : UI_C_NOTICE);
        break;
    case DOC_ERROR:
        plain_lines(out, t, n, width, "\xe2\x9c\x97 ", "  ", UI_C_ERROR | UI_BOLD, UI_C_ERROR);
        break;
    case DOC_COMMAND:
        plain_lines(out, t, n, width, "\xe2\x80\xba ", "  ", UI_C_MUTED, UI_C_MUTED);
        break;
    case DOC_COMPACTION:
        if (folded(d, b)) {
            static const char fold[] = "Context compacted \xc2\xb7 Ctrl+O shows the summary";
            plain_lines(out, fold, strlen(fold), width, "\xe2\x9f\xb3 ", "  ", UI_C_NOTICE | UI_BOLD, UI_C_NOTICE | UI_BOLD);
        } else {
            static const char open[] = "Context compacted; the summary the model continues from:";
            plain_lines(out, open, strlen(open), width, "\xe2\x9f\xb3 ", "  ", UI_C_NOTICE | UI_BOLD, UI_C_NOTICE | UI_BOLD);
            plain_lines(out, t, n, width, "  ", "  ", UI_C_MUTED, UI_C_MUTED);
        }
        break;
    case DOC_KINDS:
        break;
    }
    if (!out->n) ui_lines_push_text(out, "", 0);
}

size_t ui_doc_layout(ui_doc *d, int width)
{
    if (width < 8) width = 8;
    if (d->cap_off < d->n) {
        d->cap_off = d->n + 32;
        d->off = xrealloc(d->off, d->cap_off * sizeof *d->off);
    }
    size_t total = 0;
    for (size_t i = 0; i < d->n; i++) {
        block *b = &d->b[i];
        bool f = folded(d, b);
        if (!b->laid || b->lay_width != width || b->lay_version != b->version || b->lay_folded != f) {
            ui_lines_free(&b->lines);
            render_block(d, b, width);
            b->laid = true;
            b->lay_width = width;
            b->lay_version = b->version;
            b->lay_folded = f;
        }
        if (i > 0) total++; /* the gap */
        d->off[i] = total;
        total += b->lines.n;
    }
    d->total = total;
    return total;
}

const ui_line *ui_doc_line(const ui_doc *d, size_t i)
{
    if (i >= d->total || !d->n) return &g_empty_line;
    size_t lo = 0, hi = d->n;
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (d->off[mid] <= i) lo = mid;
        else hi = mid;
    }
    const block *b = &d->b[lo];
    if (i < d->off[lo] || i - d->off[lo] >= b->lines.n) return &g_empty_line;
    return &b->lines.v[i - d->off[lo]];
}

void ui_doc_render_markdown(const char *text, size_t len, int width, ui_line **out, size_t *n)
{
    line_list ls = { *out, *n, *n };
    ui_md_render(&ls, text, len, width, 0, false);
    *out = ls.v;
    *n = ls.n;
}
