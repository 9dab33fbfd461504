/* more.c — the `more` tool: the next lines of whatever output was left
 * unfinished (a read, a search, a web page). */
#include "tools/tool_env.h"

#include "tools/web.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Lines of files among the output lines [a, z) now count as shown. */
static void mark_shown(tool_env *env, size_t a, size_t z)
{
    pager_mark *m = env->pager.marks;
    size_t n = env->pager.nmarks, lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m[mid].out_line < a) lo = mid + 1;
        else hi = mid;
    }
    size_t checked = SIZE_MAX;
    bool current = false;
    for (size_t i = lo; i < n && m[i].out_line < z; i++) {
        if (m[i].file != checked) {
            pager_file *f = &env->pager.files[m[i].file];
            struct stat st;
            current = stat(f->path, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino &&
                      st.st_size == f->size && st.st_mtim.tv_sec == f->mtime.tv_sec &&
                      st.st_mtim.tv_nsec == f->mtime.tv_nsec && seen_version_matches(env, f->path, &st);
            checked = m[i].file;
        }
        if (current) seen_mark(env, env->pager.files[m[i].file].path, m[i].line, 1, &m[i].hash);
    }
}

static int more_text(tool_env *env, size_t count, const tool_call_ctx *ctx, tool_result *out)
{
    line_index li;
    lines_split(env->pager.text, env->pager.len, &li);
    size_t a = env->pager.next_line;
    if (a >= li.n) {
        lines_free(&li);
        tool_pager_clear(env);
        return tool_fail(out, "the previous output has been shown completely");
    }
    size_t cap = tool_result_cap(ctx);
    size_t budget = cap > 400 ? cap - 400 : cap / 2;
    size_t z = a, used = 0;
    while (z < li.n && z - a < count) {
        size_t l = li.end[z] - li.start[z];
        if (z > a && used + l > budget) break;
        used += l;
        z++;
    }
    mark_shown(env, a, z);
    strbuf b = {0};
    sb_printf(&b, "[%s, continued: lines %zu-%zu of %zu]\n", env->pager.label, a + 1, z, li.n);
    sb_append(&b, env->pager.text + li.start[a], li.end[z - 1] - li.start[a]);
    if (b.s[b.len - 1] != '\n') sb_putc(&b, '\n');
    if (z < li.n) {
        sb_printf(&b, "[%zu more lines; call more to continue]\n", li.n - z);
        env->pager.next_line = z;
    } else {
        sb_puts(&b, "[end of output]\n");
        tool_pager_clear(env);
    }
    lines_free(&li);
    return tool_ok(out, &b);
}

static int run_more(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    long long count = 0;
    bool given = targ_int(args, "count", &count);
    if (given && count < 1) return tool_fail(out, "count must be 1 or more (got %lld)", count);
    size_t n = given ? (size_t)count : env->pager.page_lines;
    switch (env->pager.kind) {
    case PAGER_NONE:
        return tool_fail(out, "there is no previous output to continue (more continues a read, search "
                              "or web page that did not fit in one result)");
    case PAGER_FILE: {
        char *path = xstrdup(env->pager.label);
        int rc = read_file_range(env, path, env->pager.next_line + 1, n, false, env->pager.raw, ctx, out);
        free(path);
        return rc;
    }
    case PAGER_TEXT:
        return more_text(env, n, ctx, out);
    case PAGER_WEB: {
        char *part = env->web ? web_take_remainder(env->web, tool_result_cap(ctx)) : NULL;
        if (!env->web || !web_has_remainder(env->web)) tool_pager_clear(env);
        if (!part) return tool_fail(out, "the rest of the web page is no longer available");
        strbuf b = { part, strlen(part), strlen(part) + 1 };
        return tool_ok(out, &b);
    }
    }
    return tool_fail(out, "there is no previous output to continue");
}

static void summarize_more(json_object *args, char *buf, size_t size)
{
    long long count;
    if (targ_int(args, "count", &count)) snprintf(buf, size, "more: %lld lines", count);
    else snprintf(buf, size, "more");
}

const tool_def tool_more = {
    .name = "more",
    .description =
        "Continue the last output that did not fit in one result: the next lines of the last "
        "read (re-read from disk, with line numbers), the next matches of the last search, or "
        "the next part of the last web page. count sets how many lines (default: as many as the "
        "previous call showed).",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"count\":{\"type\":\"integer\",\"description\":\"how many lines to show\"}}}",
    .cls = TOOL_CLASS_READ,
    .run = run_more,
    .summarize = summarize_more,
};
