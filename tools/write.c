/* write.c — the `write` tool: create or replace a file atomically. */
#include "tools/tool_env.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static size_t count_lines(const char *s, size_t n)
{
    line_index li;
    lines_split(s, n, &li);
    size_t k = li.n;
    lines_free(&li);
    return k;
}

static int run_write(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    (void)ctx;
    const char *path = targ_str(args, "path");
    json_object *cv;
    json_object_object_get_ex(args, "content", &cv);
    const char *content = json_object_get_string(cv);
    size_t len = (size_t)json_object_get_string_len(cv);
    if (!*path) return tool_fail(out, "write needs a non-empty path");
    char *target = tool_real_target(env, path);
    const char *shown = tool_display_path(env, target);
    struct stat st;
    bool existed = stat(target, &st) == 0;
    if (existed && S_ISDIR(st.st_mode)) {
        int rc = tool_fail(out, "%s is a directory; give the path of a file", shown);
        free(target);
        return rc;
    }
    if (existed && !S_ISREG(st.st_mode)) {
        int rc = tool_fail(out, "%s is not a regular file (a device, socket or pipe); not writing to it", shown);
        free(target);
        return rc;
    }
    size_t old_lines = 0;
    if (existed) {
        size_t olen;
        char *old = file_read_all(target, &olen);
        if (old) {
            old_lines = count_lines(old, olen);
            free(old);
        }
    }
    ds4_error err = { "" };
    if (file_write_atomic(target, content, len, -1, true, &err) != 0) {
        int rc = tool_fail(out, "%s was not written (%s); any previous content is unchanged", shown, err.msg);
        free(target);
        return rc;
    }
    /* keep the owner when root replaces someone else's file */
    if (existed && geteuid() == 0 && (st.st_uid != 0 || st.st_gid != 0)) {
        if (chown(target, st.st_uid, st.st_gid) != 0) { /* the content is written; the owner is secondary */ }
    }
    line_index li;
    lines_split(content, len, &li);
    strbuf b = {0};
    if (existed)
        sb_printf(&b, "Replaced %s: %zu line%s, %zu bytes (it had %zu line%s)", shown, li.n, li.n == 1 ? "" : "s",
                  len, old_lines, old_lines == 1 ? "" : "s");
    else sb_printf(&b, "Created %s: %zu line%s, %zu bytes", shown, li.n, li.n == 1 ? "" : "s", len);
    if (len && content[len - 1] != '\n' && content[len - 1] != '\r') sb_puts(&b, "; no newline at the end");
    sb_putc(&b, '\n');
    if (existed && st.st_nlink > 1)
        sb_printf(&b, "Note: %s had %lu hard links; the other names keep the old content.\n", shown,
                  (unsigned long)st.st_nlink);
    struct stat nst;
    if (stat(target, &nst) == 0) {
        seen_forget(env, target);
        seen_mark_text(env, target, content, &li, 0, li.n);
        seen_set_version(env, target, &nst);
    }
    lines_free(&li);
    free(target);
    return tool_ok(out, &b);
}

static void summarize_write(json_object *args, char *buf, size_t size)
{
    json_object *cv = NULL;
    json_object_object_get_ex(args, "content", &cv);
    size_t lines = 0;
    if (cv) {
        line_index li;
        lines_split(json_object_get_string(cv), (size_t)json_object_get_string_len(cv), &li);
        lines = li.n;
        lines_free(&li);
    }
    char head[400];
    tool_summary_clip(head, sizeof head, "write: ", targ_str(args, "path"));
    snprintf(buf, size, "%s (%zu line%s)", head, lines, lines == 1 ? "" : "s");
}

const tool_def tool_write = {
    .name = "write",
    .description =
        "Create a file or replace its whole content. Missing parent directories are created; an "
        "existing file keeps its permissions. The write is atomic: on any failure the old "
        "content stays. Use it for new files and deliberate rewrites; to change part of an "
        "existing file use edit, which costs far fewer tokens.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"file to write\"},"
        "\"content\":{\"type\":\"string\",\"description\":\"the complete new content\"}},"
        "\"required\":[\"path\",\"content\"]}",
    .cls = TOOL_CLASS_WRITE,
    .run = run_write,
    .summarize = summarize_write,
};
