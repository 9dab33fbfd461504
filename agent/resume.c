/* resume.c — a resumed conversation whose last reply made tool calls that
 * never got a result (the process was killed while they ran, or the
 * journal could not take the result): each call gets one now, saying the
 * call may or may not have taken effect, and for write and edit what the
 * file holds now, so the model checks instead of assuming either way. */
#include "agent/agent_impl.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

static const char *arg_str(struct json_object *args, const char *key)
{
    struct json_object *v;
    if (!args || !json_object_object_get_ex(args, key, &v) || !json_object_is_type(v, json_type_string)) return NULL;
    return json_object_get_string(v);
}

/* What the file a write or edit call touched holds now, as a sentence. */
static void file_state(agent *a, const char *tool, const char *args_json, strbuf *out)
{
    struct json_object *args = json_tokener_parse(args_json ? args_json : "");
    const char *path = arg_str(args, "path");
    if (!path || !*path) {
        json_object_put(args);
        return;
    }
    strbuf full = { 0 };
    if (path[0] != '/') sb_printf(&full, "%s/", a->workspace);
    sb_puts(&full, path);
    size_t len = 0;
    char *now = file_read_regular(sb_str(&full), &len);
    int err = errno;
    if (!strcmp(tool, "write")) {
        const char *content = arg_str(args, "content");
        if (!now)
            sb_printf(out, " %s cannot be read now (%s): the write did not happen.", path, strerror(err));
        else if (content && strlen(content) == len && !memcmp(now, content, len))
            sb_printf(out, " %s now holds exactly the content of this call: the write took effect.", path);
        else
            sb_printf(out, " %s does not hold the content of this call (%zu bytes now): the write did not take "
                           "effect.", path, len);
    } else {
        const char *old = arg_str(args, "old"), *new_text = arg_str(args, "new");
        bool has_old = now && old && *old && strstr(now, old);
        bool has_new = now && new_text && *new_text && strstr(now, new_text);
        if (!now)
            sb_printf(out, " %s cannot be read now (%s).", path, strerror(err));
        else if (!old || !*old)
            sb_printf(out, " Whether the line range of %s was replaced cannot be told: read it.", path);
        else if (has_new && !has_old)
            sb_printf(out, " %s holds the new text and not the old: the edit took effect.", path);
        else if (has_old && !has_new)
            sb_printf(out, " %s still holds the old text and not the new: the edit did not take effect.", path);
        else
            sb_printf(out, " Whether %s was changed cannot be told from its text: read it.", path);
    }
    free(now);
    sb_free(&full);
    json_object_put(args);
}

void agent_answer_unanswered(agent *a, const char *reply, size_t len)
{
    if (!reply || !len || !a->dschema) return;
    /* a reply sampled with thinking on holds its reasoning first */
    bool thinking = memmem(reply, len, "</think>", 8) != NULL;
    dsml_parser *p = dsml_parser_new(a->dschema, thinking, NULL, NULL);
    dsml_feed(p, reply, len);
    dsml_finish(p);
    size_t n = dsml_get_state(p) == DSML_DONE ? dsml_n_calls(p) : 0;
    if (n == 0) {
        dsml_parser_free(p);
        return;
    }
    agent_tool_call *v = xcalloc(n, sizeof *v);
    strbuf msg = { 0 };
    for (size_t i = 0; i < n; i++) {
        const dsml_call *c = dsml_call_at(p, i);
        strbuf r = { 0 };
        sb_puts(&r, "Tool error: interrupted: ds4cl stopped while this call ran, before its result was saved. It may "
                    "or may not have taken effect; check before relying on it or repeating it.");
        if (!strcmp(c->name, "write") || !strcmp(c->name, "edit")) file_state(a, c->name, c->args_json, &r);
        sb_printf(&msg, "Tool result %zu (%s):\n%s\n", i + 1, c->name, sb_str(&r));
        v[i] = (agent_tool_call){ .name = c->name, .args_json = c->args_json, .result = sb_take(&r), .is_error = true };
    }
    agent_notice(a, "the last reply's %zu tool call%s got no result (ds4cl stopped while %s ran): the model is told "
                    "%s may or may not have taken effect", n, n == 1 ? "" : "s", n == 1 ? "it" : "they",
                 n == 1 ? "it" : "they");
    agent_add_tool_results(a, sb_str(&msg), v, n);
    for (size_t i = 0; i < n; i++) free((char *)v[i].result);
    free(v);
    sb_free(&msg);
    dsml_parser_free(p);
}
