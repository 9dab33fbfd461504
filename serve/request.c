/* request.c — the three APIs' request bodies as one normalized
 * conversation: system text, tool schemas, user / assistant / tool /
 * later system messages, and the sampling parameters. Every shape the
 * server does not understand is refused with a message the client can act
 * on. What the model cannot read (images, audio, files) or what happened
 * on another server (its encrypted reasoning, its hosted tools' calls and
 * results) is left out, with a placeholder where the model should know
 * something was there, and noted for the request log (serve_request's
 * notes). Claude Code's billing header never reaches the prompt (see
 * volatile_header). Nothing else is dropped except fields that do not
 * change the reply (metadata, store, user, cache_control, …). */
#include <errno.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

typedef struct json_object jo;

typedef struct {
    ds4_error *err;
} perr;

static int fail(perr *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(perr *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (e->err) vsnprintf(e->err->msg, sizeof e->err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

char *sv_strdup(const char *s)
{
    char *d = xstrdup(s ? s : "");
    return d;
}

static jo *get(jo *o, const char *key)
{
    jo *v = NULL;
    if (!o || !json_object_is_type(o, json_type_object) || !json_object_object_get_ex(o, key, &v)) return NULL;
    return json_object_is_type(v, json_type_null) ? NULL : v;
}

static int get_string(jo *o, const char *key, const char **out, bool required, perr *e)
{
    jo *v = get(o, key);
    *out = NULL;
    if (!v) return required ? fail(e, "'%s' is required", key) : 0;
    if (!json_object_is_type(v, json_type_string)) return fail(e, "'%s' must be a string", key);
    *out = json_object_get_string(v);
    return 0;
}

static int get_bool(jo *o, const char *key, bool *out, perr *e)
{
    jo *v = get(o, key);
    if (!v) return 0;
    if (!json_object_is_type(v, json_type_boolean)) return fail(e, "'%s' must be a boolean", key);
    *out = json_object_get_boolean(v);
    return 0;
}

static int get_number(jo *o, const char *key, double lo, double hi, bool *have, double *out, perr *e)
{
    jo *v = get(o, key);
    if (!v) return 0;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int))
        return fail(e, "'%s' must be a number", key);
    double d = json_object_get_double(v);
    if (!(d >= lo && d <= hi)) return fail(e, "'%s' must be between %g and %g", key, lo, hi);
    *have = true;
    *out = d;
    return 0;
}

static int get_int(jo *o, const char *key, long lo, long hi, bool *have, long *out, perr *e)
{
    jo *v = get(o, key);
    if (!v) return 0;
    if (!json_object_is_type(v, json_type_int)) return fail(e, "'%s' must be an integer", key);
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno || x < lo || x > hi) return fail(e, "'%s' must be between %ld and %ld", key, lo, hi);
    *have = true;
    *out = (long)x;
    return 0;
}

static const char *compact(jo *o)
{
    return json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
}

/* ---- building the request ---------------------------------------------------------- */

static sv_msg *add_msg(serve_request *r, sv_role role)
{
    if (r->n_msgs == r->cap_msgs) {
        r->cap_msgs = r->cap_msgs ? 2 * r->cap_msgs : 8;
        r->msgs = xrealloc(r->msgs, r->cap_msgs * sizeof *r->msgs);
    }
    sv_msg *m = &r->msgs[r->n_msgs++];
    memset(m, 0, sizeof *m);
    m->role = role;
    return m;
}

static void add_call(sv_msg *m, const char *id, const char *name, const char *args)
{
    m->calls = xrealloc(m->calls, (m->n_calls + 1) * sizeof *m->calls);
    m->calls[m->n_calls++] = (sv_call){ sv_strdup(id), sv_strdup(name), sv_strdup(args) };
}

static void add_system(serve_request *r, const char *text)
{
    if (!text || !*text) return;
    if (r->system.len) sb_puts(&r->system, "\n\n");
    sb_puts(&r->system, text);
}

/* Arguments as a compact JSON object (the DSML parameters are its members). */
static int args_object(const char *text, jo *obj, char **out, perr *e)
{
    jo *parsed = obj ? json_object_get(obj) : NULL;
    if (!parsed) {
        if (!text || !*text) text = "{}";
        parsed = json_tokener_parse(text);
    }
    if (!parsed || !json_object_is_type(parsed, json_type_object)) {
        json_object_put(parsed);
        return fail(e, "tool call arguments must be a JSON object");
    }
    *out = sv_strdup(compact(parsed));
    json_object_put(parsed);
    return 0;
}

static int add_tool_schema(serve_request *r, const char *name, const char *desc, jo *params, perr *e)
{
    if (!name || !*name) return fail(e, "every tool needs a name");
    if (params && !json_object_is_type(params, json_type_object))
        return fail(e, "tool '%s': its parameters must be a JSON schema object", name);
    jo *s = json_object_new_object();
    json_object_object_add(s, "name", json_object_new_string(name));
    if (desc) json_object_object_add(s, "description", json_object_new_string(desc));
    json_object_object_add(s, "parameters",
                           params ? json_object_get(params) : json_tokener_parse("{\"type\":\"object\",\"properties\":{}}"));
    r->tools = xrealloc(r->tools, (r->n_tools + 1) * sizeof *r->tools);
    r->tools[r->n_tools++] = sv_strdup(compact(s));
    json_object_put(s);
    return 0;
}

/* A part the model cannot read (it reads text only) or that ran elsewhere:
 * the placeholder (or nothing) takes its place in the prompt and the
 * reason goes to the request log, once per reason. */
static void left_out(serve_request *r, strbuf *out, const char *placeholder, const char *why)
{
    if (out && placeholder) sb_puts(out, placeholder);
    if (r->notes.len && strstr(sb_str(&r->notes), why)) return;
    if (r->notes.len) sb_puts(&r->notes, "; ");
    sb_puts(&r->notes, why);
}

static int content_text(serve_request *r, jo *v, strbuf *out, perr *e);

/* A document or search result as text: its title, then its text content
 * (Anthropic source "text" or "content"); other sources (PDF, URL, file
 * ids) cannot be read. */
static int document_text(serve_request *r, jo *p, const char *type, strbuf *out, perr *e)
{
    const char *title = NULL, *stype = NULL;
    jo *src = get(p, "source");
    if (get_string(p, "title", &title, false, e)) return -1;
    if (src && json_object_is_type(src, json_type_object) && get_string(src, "type", &stype, false, e)) return -1;
    jo *body = !strcmp(type, "search_result") ? get(p, "content")
               : stype && !strcmp(stype, "text")    ? get(src, "data")
               : stype && !strcmp(stype, "content") ? get(src, "content")
                                                    : NULL;
    if (!body) {
        left_out(r, out, "[a document the model cannot read]", "non-text documents (the model reads text only)");
        return 0;
    }
    if (title) sb_printf(out, "%s\n\n", title);
    return content_text(r, body, out, e);
}

/* One content part of any of the APIs: text is appended; media and
 * hosted-tool parts are left out with a note; 1 for a type that is no
 * content part at all. */
static int content_part(serve_request *r, jo *p, const char *type, strbuf *out, perr *e)
{
    static const char *const texts[] = { "text", "input_text", "output_text", "refusal", "summary_text", "reasoning_text" };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        if (strcmp(type, texts[i])) continue;
        const char *text;
        if (get_string(p, strcmp(type, "refusal") || get(p, "text") ? "text" : "refusal", &text, true, e)) return -1;
        sb_puts(out, text);
        return 0;
    }
    if (!strcmp(type, "image") || !strcmp(type, "image_url") || !strcmp(type, "input_image")) {
        left_out(r, out, "[an image the model cannot see]", "images (the model reads text only)");
    } else if (!strcmp(type, "input_audio") || !strcmp(type, "audio")) {
        left_out(r, out, "[audio the model cannot hear]", "audio (the model reads text only)");
    } else if (!strcmp(type, "file") || !strcmp(type, "input_file")) {
        left_out(r, out, "[a file the model cannot read]", "attached files (the model reads text only)");
    } else if (!strcmp(type, "document") || !strcmp(type, "search_result")) {
        return document_text(r, p, type, out, e);
    } else if (!strcmp(type, "tool_reference")) {
        /* a tool search's answer: the tool is in the tool block already */
        const char *name;
        if (get_string(p, "tool_name", &name, false, e)) return -1;
        if (name) sb_printf(out, "Tool %s is available.\n", name);
    } else if (!strcmp(type, "tool_addition") || !strcmp(type, "tool_removal")) {
        left_out(r, NULL, NULL, "tool additions and removals (the tool block lists every tool the request gives)");
    } else {
        return 1;
    }
    return 0;
}

/* Text of a content value: a string, or an array of parts (content_part);
 * a part of no known type is refused. */
static int content_text(serve_request *r, jo *v, strbuf *out, perr *e)
{
    if (!v) return 0;
    if (json_object_is_type(v, json_type_string)) {
        sb_puts(out, json_object_get_string(v));
        return 0;
    }
    if (!json_object_is_type(v, json_type_array)) return fail(e, "'content' must be a string or an array of parts");
    for (size_t i = 0; i < json_object_array_length(v); i++) {
        jo *p = json_object_array_get_idx(v, i);
        const char *type;
        if (!p || !json_object_is_type(p, json_type_object)) return fail(e, "content parts must be objects");
        if (get_string(p, "type", &type, true, e)) return -1;
        int rc = content_part(r, p, type, out, e);
        if (rc < 0) return -1;
        if (rc > 0) return fail(e, "content parts of type '%s' are not supported", type);
    }
    return 0;
}

/* A system or developer message: before the first turn it is part of the
 * system text; later it stays where it stands (render.c). */
static void add_system_msg(serve_request *r, strbuf *text)
{
    if (!r->n_msgs) add_system(r, sb_str(text));
    else if (text->len) add_msg(r, SV_SYSTEM)->text = sb_take(text);
}

static int parse_stop(serve_request *r, jo *v, perr *e)
{
    if (!v) return 0;
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 1;
    if (!json_object_is_type(v, json_type_array) && !json_object_is_type(v, json_type_string))
        return fail(e, "'stop' must be a string or an array of strings");
    if (n > 16) return fail(e, "at most 16 stop sequences");
    r->stop = xcalloc(n ? n : 1, sizeof *r->stop);
    for (size_t i = 0; i < n; i++) {
        jo *s = json_object_is_type(v, json_type_array) ? json_object_array_get_idx(v, i) : v;
        if (!s || !json_object_is_type(s, json_type_string)) return fail(e, "stop sequences must be strings");
        if (!json_object_get_string_len(s)) continue;
        r->stop[r->n_stop++] = sv_strdup(json_object_get_string(s));
    }
    return 0;
}

static int parse_sampling(serve_request *r, jo *o, const char *max_key, perr *e)
{
    double d;
    long l;
    bool have = false;
    if (get_number(o, "temperature", 0, 2, &r->have_temp, &d, e)) return -1;
    if (r->have_temp) r->temp = (float)d;
    if (get_number(o, "top_p", 0, 1, &r->have_top_p, &d, e)) return -1;
    if (r->have_top_p) r->top_p = (float)d;
    if (get_int(o, "top_k", 0, 1 << 20, &r->have_top_k, &l, e)) return -1;
    if (r->have_top_k) r->top_k = (int)l;
    if (get_int(o, "seed", INT64_MIN / 2, INT64_MAX / 2, &r->have_seed, &l, e)) return -1;
    if (r->have_seed) r->seed = (uint64_t)l;
    if (get_int(o, max_key, 1, 1 << 30, &have, &l, e)) return -1;
    if (have) r->max_tokens = (int)l;
    /* the older name */
    have = false;
    if (!r->max_tokens && get_int(o, "max_tokens", 1, 1 << 30, &have, &l, e)) return -1;
    if (have) r->max_tokens = (int)l;
    return get_bool(o, "stream", &r->stream, e);
}

/* "none"/"minimal" turn reasoning off; any other effort turns it on. */
static int effort_think(const char *effort)
{
    if (!effort) return -1;
    return strcmp(effort, "none") && strcmp(effort, "minimal") ? 1 : 0;
}

/* {"type":"enabled"|"disabled"} as DeepSeek's and Anthropic's APIs spell it. */
static int thinking_object(jo *v, int *think, perr *e)
{
    if (!v) return 0;
    const char *type;
    if (!json_object_is_type(v, json_type_object)) return fail(e, "'thinking' must be an object");
    if (get_string(v, "type", &type, true, e)) return -1;
    if (!strcmp(type, "enabled") || !strcmp(type, "adaptive")) *think = 1;
    else if (!strcmp(type, "disabled")) *think = 0;
    else return fail(e, "thinking type '%s' is not one of enabled, adaptive, disabled", type);
    return 0;
}

/* tool_choice: "auto" | "none" | "required" | {"type":"function",…name}
 * (OpenAI) or {"type":"auto"|"any"|"none"|"tool","name"} (Anthropic). */
static int parse_choice(serve_request *r, jo *v, perr *e)
{
    if (!v) return 0;
    const char *type = NULL, *name = NULL;
    if (json_object_is_type(v, json_type_string)) {
        type = json_object_get_string(v);
    } else if (json_object_is_type(v, json_type_object)) {
        if (get_string(v, "type", &type, true, e)) return -1;
        jo *fn = get(v, "function");
        if (get_string(fn ? fn : v, "name", &name, false, e)) return -1;
    } else {
        return fail(e, "'tool_choice' must be a string or an object");
    }
    if (!strcmp(type, "auto")) r->choice = SV_CHOICE_AUTO;
    else if (!strcmp(type, "none")) r->choice = SV_CHOICE_NONE;
    else if (!strcmp(type, "required") || !strcmp(type, "any")) r->choice = SV_CHOICE_REQUIRED;
    else if ((!strcmp(type, "function") || !strcmp(type, "tool")) && name) {
        r->choice = SV_CHOICE_NAMED;
        r->choice_name = sv_strdup(name);
    } else return fail(e, "tool_choice '%s' is not supported", type);
    return 0;
}

static int check_choice(serve_request *r, perr *e)
{
    if (r->choice == SV_CHOICE_NAMED) {
        for (size_t i = 0; i < r->n_tools; i++) {
            jo *s = json_tokener_parse(r->tools[i]);
            const char *n = json_object_get_string(get(s, "name"));
            bool hit = n && !strcmp(n, r->choice_name);
            json_object_put(s);
            if (hit) return 0;
        }
        return fail(e, "tool_choice names '%s', which is not among the tools", r->choice_name);
    }
    if (r->choice == SV_CHOICE_REQUIRED && !r->n_tools) return fail(e, "tool_choice requires a tool but none are given");
    return 0;
}

/* ---- OpenAI chat completions --------------------------------------------------------- */

static int chat_tools(serve_request *r, jo *tools, perr *e)
{
    if (!tools) return 0;
    if (!json_object_is_type(tools, json_type_array)) return fail(e, "'tools' must be an array");
    for (size_t i = 0; i < json_object_array_length(tools); i++) {
        jo *t = json_object_array_get_idx(tools, i);
        const char *type, *name, *desc;
        if (get_string(t, "type", &type, false, e)) return -1;
        if (type && strcmp(type, "function")) {
            /* custom (free-form) tools have no JSON schema to call them by */
            left_out(r, NULL, NULL, "tools other than functions");
            continue;
        }
        jo *fn = get(t, "function");
        if (!fn || !json_object_is_type(fn, json_type_object)) return fail(e, "each tool needs a 'function' object");
        if (get_string(fn, "name", &name, true, e) || get_string(fn, "description", &desc, false, e)) return -1;
        if (add_tool_schema(r, name, desc, get(fn, "parameters"), e)) return -1;
    }
    return 0;
}

static int chat_assistant(serve_request *r, jo *m, perr *e)
{
    sv_msg *a = add_msg(r, SV_ASSISTANT);
    strbuf text = { 0 };
    int rc = content_text(r, get(m, "content"), &text, e);
    a->text = sb_take(&text);
    if (rc) return -1;
    const char *reasoning;
    if (get_string(m, "reasoning_content", &reasoning, false, e)) return -1;
    if (reasoning) a->reasoning = sv_strdup(reasoning);
    jo *calls = get(m, "tool_calls");
    if (!calls) return 0;
    if (!json_object_is_type(calls, json_type_array)) return fail(e, "'tool_calls' must be an array");
    for (size_t i = 0; i < json_object_array_length(calls); i++) {
        jo *c = json_object_array_get_idx(calls, i), *fn = get(c, "function");
        const char *id, *name, *args;
        if (get_string(c, "id", &id, false, e)) return -1;
        if (!fn || !json_object_is_type(fn, json_type_object)) return fail(e, "each tool call needs a 'function' object");
        if (get_string(fn, "name", &name, true, e) || get_string(fn, "arguments", &args, false, e)) return -1;
        char *obj;
        if (args_object(args, NULL, &obj, e)) return -1;
        add_call(a, id, name, obj);
        free(obj);
    }
    return 0;
}

static int chat_messages(serve_request *r, jo *msgs, perr *e)
{
    if (!msgs || !json_object_is_type(msgs, json_type_array)) return fail(e, "'messages' must be an array");
    for (size_t i = 0; i < json_object_array_length(msgs); i++) {
        jo *m = json_object_array_get_idx(msgs, i);
        const char *role;
        if (!m || !json_object_is_type(m, json_type_object)) return fail(e, "messages[%zu] must be an object", i);
        if (get_string(m, "role", &role, true, e)) return -1;
        strbuf text = { 0 };
        int rc = 0;
        if (!strcmp(role, "system") || !strcmp(role, "developer")) {
            rc = content_text(r, get(m, "content"), &text, e);
            if (!rc) add_system_msg(r, &text);
        } else if (!strcmp(role, "user")) {
            rc = content_text(r, get(m, "content"), &text, e);
            if (!rc) add_msg(r, SV_USER)->text = sb_take(&text);
        } else if (!strcmp(role, "assistant")) {
            rc = chat_assistant(r, m, e);
        } else if (!strcmp(role, "tool")) {
            const char *id;
            rc = get_string(m, "tool_call_id", &id, false, e);
            if (!rc) rc = content_text(r, get(m, "content"), &text, e);
            if (!rc) {
                sv_msg *t = add_msg(r, SV_TOOL);
                t->text = sb_take(&text);
                t->call_id = sv_strdup(id);
            }
        } else {
            rc = fail(e, "messages[%zu]: unknown role '%s'", i, role);
        }
        sb_free(&text);
        if (rc) return -1;
    }
    return 0;
}

static int parse_chat(serve_request *r, jo *o, perr *e)
{
    const char *effort;
    if (chat_messages(r, get(o, "messages"), e) || chat_tools(r, get(o, "tools"), e) ||
        parse_choice(r, get(o, "tool_choice"), e) || parse_sampling(r, o, "max_completion_tokens", e) ||
        parse_stop(r, get(o, "stop"), e) || get_string(o, "reasoning_effort", &effort, false, e) ||
        thinking_object(get(o, "thinking"), &r->think, e))
        return -1;
    if (effort) r->think = effort_think(effort);
    jo *so = get(o, "stream_options");
    if (so && get_bool(so, "include_usage", &r->include_usage, e)) return -1;
    jo *n = get(o, "n");
    if (n && (!json_object_is_type(n, json_type_int) || json_object_get_int(n) != 1))
        return fail(e, "only n = 1 is supported");
    return 0;
}

/* ---- Anthropic messages ----------------------------------------------------------------- */

/* Blocks about the tools Anthropic runs itself (web search, code
 * execution, MCP connectors): their calls and results happened on another
 * server, and this one has no such tools to go on with. */
static bool hosted_block(const char *type)
{
    static const char *const kinds[] = { "server_tool_use", "mcp_tool_use", "mcp_tool_result", "container_upload" };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(type, kinds[i])) return true;
    size_t n = strlen(type), k = strlen("_tool_result");
    return n > k && !strcmp(type + n - k, "_tool_result"); /* web_search_, code_execution_, … */
}

static int anthropic_tool_result(serve_request *r, jo *b, strbuf *text, perr *e)
{
    const char *id;
    strbuf res = { 0 };
    if (get_string(b, "tool_use_id", &id, true, e) || content_text(r, get(b, "content"), &res, e)) {
        sb_free(&res);
        return -1;
    }
    /* text before a result is a message of its own, in order */
    if (text->len) add_msg(r, SV_USER)->text = sb_take(text);
    sv_msg *t = add_msg(r, SV_TOOL);
    t->text = sb_take(&res);
    t->call_id = sv_strdup(id);
    return 0;
}

static int anthropic_block(serve_request *r, bool user, sv_msg *a, jo *b, strbuf *text, strbuf *thinking, perr *e)
{
    const char *type, *s;
    if (!b || !json_object_is_type(b, json_type_object)) return fail(e, "content blocks must be objects");
    if (get_string(b, "type", &type, true, e)) return -1;
    if (!user && !strcmp(type, "thinking")) {
        if (get_string(b, "thinking", &s, true, e)) return -1;
        sb_puts(thinking, s);
        return 1;
    }
    if (!user && !strcmp(type, "redacted_thinking")) {
        left_out(r, NULL, NULL, "redacted thinking (encrypted by another server)");
        return 0;
    }
    if (!user && !strcmp(type, "tool_use")) {
        const char *id, *name;
        char *obj = NULL;
        if (get_string(b, "id", &id, false, e) || get_string(b, "name", &name, true, e) ||
            args_object(NULL, get(b, "input"), &obj, e))
            return -1;
        add_call(a, id, name, obj);
        free(obj);
        return 0;
    }
    if (user && !strcmp(type, "tool_result")) return anthropic_tool_result(r, b, text, e);
    if (hosted_block(type)) {
        left_out(r, NULL, NULL, "server tool calls and results (they ran on another server)");
        return 0;
    }
    int rc = content_part(r, b, type, text, e);
    if (rc > 0) return fail(e, "content blocks of type '%s' are not supported here", type);
    return rc;
}

static int anthropic_blocks(serve_request *r, const char *role, jo *content, perr *e)
{
    bool user = !strcmp(role, "user");
    if (json_object_is_type(content, json_type_string)) {
        sv_msg *m = add_msg(r, user ? SV_USER : SV_ASSISTANT);
        m->text = sv_strdup(json_object_get_string(content));
        return 0;
    }
    if (!json_object_is_type(content, json_type_array)) return fail(e, "'content' must be a string or an array of blocks");
    strbuf text = { 0 }, thinking = { 0 };
    sv_msg *a = user ? NULL : add_msg(r, SV_ASSISTANT);
    bool have_thinking = false;
    int rc = 0;
    for (size_t i = 0; i < json_object_array_length(content) && rc >= 0; i++) {
        rc = anthropic_block(r, user, a, json_object_array_get_idx(content, i), &text, &thinking, e);
        if (rc > 0) have_thinking = true;
    }
    if (rc >= 0) {
        if (user && text.len) add_msg(r, SV_USER)->text = sb_take(&text);
        if (a) {
            a->text = sb_take(&text);
            if (have_thinking) a->reasoning = sb_take(&thinking);
        }
    }
    sb_free(&text);
    sb_free(&thinking);
    return rc < 0 ? -1 : 0;
}

/* The billing header Claude Code (2.1.36 and later) puts first in the
 * system prompt ("x-anthropic-billing-header: cc_version=…; cch=…;")
 * changes with every request; in the prompt it would make every request a
 * cold prefill of the whole conversation. It is metadata for Anthropic's
 * billing, not an instruction, so it never reaches the prompt. */
static bool volatile_header(const char *text)
{
    while (*text == ' ' || *text == '\n' || *text == '\t') text++;
    return !strncmp(text, "x-anthropic-billing-header:", strlen("x-anthropic-billing-header:"));
}

static int anthropic_system(serve_request *r, jo *sys, perr *e)
{
    strbuf s = { 0 };
    int rc = 0;
    if (sys && json_object_is_type(sys, json_type_string)) {
        const char *text = json_object_get_string(sys);
        if (volatile_header(text)) text = strchr(text, '\n') ? strchr(text, '\n') + 1 : "";
        sb_puts(&s, text);
    } else if (sys && json_object_is_type(sys, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(sys) && !rc; i++) {
            jo *b = json_object_array_get_idx(sys, i);
            const char *type, *text;
            if (!b || !json_object_is_type(b, json_type_object)) {
                rc = fail(e, "system blocks must be objects");
                break;
            }
            rc = get_string(b, "type", &type, true, e);
            if (rc || strcmp(type, "text")) {
                if (!rc) rc = fail(e, "system blocks of type '%s' are not supported", type);
                break;
            }
            rc = get_string(b, "text", &text, true, e);
            if (!rc && !volatile_header(text)) sb_puts(&s, text);
        }
    } else if (sys) {
        rc = fail(e, "'system' must be a string or an array of text blocks");
    }
    if (!rc) add_system(r, sb_str(&s));
    sb_free(&s);
    return rc;
}

static int parse_messages(serve_request *r, jo *o, perr *e)
{
    if (anthropic_system(r, get(o, "system"), e)) return -1;
    jo *msgs = get(o, "messages"), *tools = get(o, "tools");
    if (!msgs || !json_object_is_type(msgs, json_type_array)) return fail(e, "'messages' must be an array");
    for (size_t i = 0; i < json_object_array_length(msgs); i++) {
        jo *m = json_object_array_get_idx(msgs, i);
        const char *role;
        if (!m || !json_object_is_type(m, json_type_object)) return fail(e, "messages.%zu must be an object", i);
        if (get_string(m, "role", &role, true, e)) return -1;
        jo *c = get(m, "content");
        if (!c) return fail(e, "messages.%zu: 'content' is required", i);
        if (!strcmp(role, "system") || !strcmp(role, "developer")) {
            /* Claude Code sends reminders as system turns among the messages */
            strbuf text = { 0 };
            int rc = content_text(r, c, &text, e);
            if (!rc) add_system_msg(r, &text);
            sb_free(&text);
            if (rc) return -1;
            continue;
        }
        if (strcmp(role, "user") && strcmp(role, "assistant"))
            return fail(e, "messages.%zu: unknown role '%s' (user, assistant or system)", i, role);
        if (anthropic_blocks(r, role, c, e)) return -1;
    }
    if (tools && !json_object_is_type(tools, json_type_array)) return fail(e, "'tools' must be an array");
    for (size_t i = 0; tools && i < json_object_array_length(tools); i++) {
        jo *t = json_object_array_get_idx(tools, i);
        const char *name, *desc, *type;
        if (get_string(t, "type", &type, false, e)) return -1;
        if (type && strcmp(type, "custom")) {
            /* server tools (web search, …) run elsewhere */
            left_out(r, NULL, NULL, "tools other than functions");
            continue;
        }
        if (get_string(t, "name", &name, true, e) || get_string(t, "description", &desc, false, e)) return -1;
        if (add_tool_schema(r, name, desc, get(t, "input_schema"), e)) return -1;
    }
    r->think = 0;
    if (thinking_object(get(o, "thinking"), &r->think, e) || parse_choice(r, get(o, "tool_choice"), e) ||
        parse_sampling(r, o, "max_tokens", e) || parse_stop(r, get(o, "stop_sequences"), e))
        return -1;
    return 0;
}

/* ---- OpenAI responses ---------------------------------------------------------------------- */

static sv_msg *last_assistant(serve_request *r)
{
    if (r->n_msgs && r->msgs[r->n_msgs - 1].role == SV_ASSISTANT) return &r->msgs[r->n_msgs - 1];
    sv_msg *a = add_msg(r, SV_ASSISTANT);
    a->text = sv_strdup("");
    return a;
}

/* A tool's output as text: a string, content parts, or any other JSON
 * written compactly. */
static int output_text(serve_request *r, jo *out, strbuf *text, perr *e)
{
    if (!out || json_object_is_type(out, json_type_string) || json_object_is_type(out, json_type_array))
        return content_text(r, out, text, e);
    const char *type = NULL;
    if (json_object_is_type(out, json_type_object) && get_string(out, "type", &type, false, e)) return -1;
    if (type && !strcmp(type, "computer_screenshot")) left_out(r, text, "[a screenshot the model cannot see]", "images (the model reads text only)");
    else sb_puts(text, compact(out));
    return 0;
}

static int add_result(serve_request *r, const char *id, jo *out, perr *e)
{
    strbuf text = { 0 };
    if (output_text(r, out, &text, e)) {
        sb_free(&text);
        return -1;
    }
    sv_msg *t = add_msg(r, SV_TOOL);
    t->text = sb_take(&text);
    t->call_id = sv_strdup(id);
    return 0;
}

static int responses_message(serve_request *r, jo *it, const char *role, size_t i, perr *e)
{
    if (!role) return fail(e, "input[%zu]: a message needs a role", i);
    strbuf text = { 0 };
    int rc = content_text(r, get(it, "content"), &text, e);
    if (!rc) {
        if (!strcmp(role, "system") || !strcmp(role, "developer")) add_system_msg(r, &text);
        else if (!strcmp(role, "user")) add_msg(r, SV_USER)->text = sb_take(&text);
        else if (!strcmp(role, "assistant")) {
            sv_msg *a = last_assistant(r);
            if (a->n_calls) a = add_msg(r, SV_ASSISTANT); /* text after calls: a later reply */
            free(a->text);
            a->text = sb_take(&text);
        } else rc = fail(e, "input[%zu]: unknown role '%s'", i, role);
    }
    sb_free(&text);
    return rc;
}

/* Calls of the tools a client runs itself besides functions: a custom
 * (free-form) tool's input is the one argument "input"; a built-in one
 * (local_shell, shell, apply_patch, computer) takes its action object. */
static int responses_other_call(serve_request *r, jo *it, const char *type, perr *e)
{
    const char *id, *name = NULL, *input;
    if (get_string(it, "call_id", &id, false, e)) return -1;
    if (!id && get_string(it, "id", &id, true, e)) return -1;
    jo *args;
    if (!strcmp(type, "custom_tool_call")) {
        if (get_string(it, "name", &name, true, e) || get_string(it, "input", &input, false, e)) return -1;
        args = json_object_new_object();
        json_object_object_add(args, "input", json_object_new_string(input ? input : ""));
    } else {
        jo *action = get(it, "action") ? get(it, "action") : get(it, "operation");
        args = action && json_object_is_type(action, json_type_object) ? json_object_get(action) : json_object_new_object();
    }
    char *kind = sv_strdup(type);
    kind[strlen(kind) - strlen("_call")] = 0;
    add_call(last_assistant(r), id, name ? name : kind, compact(args));
    free(kind);
    json_object_put(args);
    return 0;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

static int responses_item(serve_request *r, jo *it, size_t i, perr *e)
{
    static const char *const client_calls[] = { "custom_tool_call", "local_shell_call", "shell_call", "apply_patch_call",
                                                "computer_call" };
    const char *type, *role;
    if (!it || !json_object_is_type(it, json_type_object)) return fail(e, "input[%zu] must be an object", i);
    if (get_string(it, "type", &type, false, e) || get_string(it, "role", &role, false, e)) return -1;
    if (!type) type = "message";
    if (!strcmp(type, "message")) return responses_message(r, it, role, i, e);
    if (!strcmp(type, "function_call")) {
        const char *id, *name, *args;
        char *obj;
        if (get_string(it, "call_id", &id, true, e) || get_string(it, "name", &name, true, e) ||
            get_string(it, "arguments", &args, false, e) || args_object(args, NULL, &obj, e))
            return -1;
        add_call(last_assistant(r), id, name, obj);
        free(obj);
        return 0;
    }
    for (size_t k = 0; k < sizeof client_calls / sizeof *client_calls; k++)
        if (!strcmp(type, client_calls[k])) return responses_other_call(r, it, type, e);
    if (ends_with(type, "_call_output")) {
        const char *id;
        if (get_string(it, "call_id", &id, false, e)) return -1;
        if (!id && get_string(it, "id", &id, true, e)) return -1;
        return add_result(r, id, get(it, "output"), e);
    }
    if (!strcmp(type, "reasoning")) {
        /* the next assistant reply's reasoning, when the client sends it back */
        strbuf text = { 0 };
        jo *parts = get(it, "content") ? get(it, "content") : get(it, "summary");
        int rc = parts ? content_text(r, parts, &text, e) : 0;
        if (!rc) {
            if (!text.len && get(it, "encrypted_content")) left_out(r, NULL, NULL, "encrypted reasoning (another server's)");
            sv_msg *a = add_msg(r, SV_ASSISTANT);
            a->text = sv_strdup("");
            a->reasoning = sb_take(&text);
        }
        sb_free(&text);
        return rc;
    }
    if (!strcmp(type, "item_reference")) {
        left_out(r, NULL, NULL, "item references (this server keeps no items: send them whole)");
        return 0;
    }
    if (ends_with(type, "_call") || !strncmp(type, "mcp_", 4)) {
        /* web_search_call, file_search_call, code_interpreter_call, … */
        left_out(r, NULL, NULL, "hosted tool calls (they ran on another server)");
        return 0;
    }
    if (!strcmp(type, "compaction") || !strcmp(type, "compaction_summary")) {
        left_out(r, NULL, NULL, "encrypted compaction items (another server's)");
        return 0;
    }
    return fail(e, "input[%zu]: items of type '%s' are not supported", i, type);
}

static int parse_responses(serve_request *r, jo *o, perr *e)
{
    const char *instructions;
    if (get_string(o, "instructions", &instructions, false, e)) return -1;
    add_system(r, instructions);
    if (get(o, "previous_response_id")) return fail(e, "previous_response_id is not supported: send the whole input");
    jo *in = get(o, "input");
    if (!in) return fail(e, "'input' is required");
    if (json_object_is_type(in, json_type_string)) {
        add_msg(r, SV_USER)->text = sv_strdup(json_object_get_string(in));
    } else if (json_object_is_type(in, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(in); i++)
            if (responses_item(r, json_object_array_get_idx(in, i), i, e)) return -1;
    } else {
        return fail(e, "'input' must be a string or an array of items");
    }
    jo *tools = get(o, "tools");
    if (tools && !json_object_is_type(tools, json_type_array)) return fail(e, "'tools' must be an array");
    for (size_t i = 0; tools && i < json_object_array_length(tools); i++) {
        jo *t = json_object_array_get_idx(tools, i);
        const char *type, *name, *desc;
        if (get_string(t, "type", &type, true, e)) return -1;
        if (strcmp(type, "function")) {
            /* hosted tools run elsewhere; custom and namespaced ones have no
             * JSON schema of their own to call them by */
            left_out(r, NULL, NULL, "tools other than functions");
            continue;
        }
        if (get_string(t, "name", &name, true, e) || get_string(t, "description", &desc, false, e)) return -1;
        if (add_tool_schema(r, name, desc, get(t, "parameters"), e)) return -1;
    }
    jo *reasoning = get(o, "reasoning");
    if (reasoning) {
        const char *effort;
        if (!json_object_is_type(reasoning, json_type_object)) return fail(e, "'reasoning' must be an object");
        if (get_string(reasoning, "effort", &effort, false, e)) return -1;
        r->think = effort ? effort_think(effort) : 1;
    }
    return parse_choice(r, get(o, "tool_choice"), e) || parse_sampling(r, o, "max_output_tokens", e);
}

/* ---- entry points ------------------------------------------------------------------------------ */

/* Tool results must answer calls of the assistant message before them. */
static int check_order(serve_request *r, perr *e)
{
    for (size_t i = 0; i < r->n_msgs; i++) {
        if (r->msgs[i].role != SV_TOOL) continue;
        size_t k = i;
        while (k > 0 && (r->msgs[k - 1].role == SV_TOOL || r->msgs[k - 1].role == SV_SYSTEM)) k--;
        if (k == 0 || r->msgs[k - 1].role != SV_ASSISTANT || !r->msgs[k - 1].n_calls)
            return fail(e, "a tool result must follow an assistant message with tool calls");
    }
    if (!r->n_msgs && !r->count_only) return fail(e, "the conversation has no messages");
    return 0;
}

serve_request *serve_request_parse(serve_api api, const char *body, size_t len, ds4_error *err)
{
    perr e = { err };
    if (err) err->msg[0] = 0;
    json_tokener *tok = json_tokener_new_ex(64);
    if (!tok) abort();
    jo *o = json_tokener_parse_ex(tok, body ? body : "", (int)(len > (size_t)INT32_MAX ? INT32_MAX : len));
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (!o || je != json_tokener_success) {
        json_object_put(o);
        fail(&e, "the body is not valid JSON: %s",
             je == json_tokener_continue ? "it ends too early" : json_tokener_error_desc(je));
        return NULL;
    }
    while (used < len && strchr(" \t\r\n", body[used])) used++;
    if (used < len || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        fail(&e, "the body must be one JSON object");
        return NULL;
    }
    serve_request *r = xcalloc(1, sizeof *r);
    r->api = api;
    r->think = -1;
    const char *model;
    int rc = get_string(o, "model", &model, false, &e);
    if (!rc) r->model = sv_strdup(model);
    if (!rc) rc = api == SERVE_API_CHAT ? parse_chat(r, o, &e)
                  : api == SERVE_API_MESSAGES ? parse_messages(r, o, &e)
                                              : parse_responses(r, o, &e);
    if (!rc) rc = check_choice(r, &e);
    if (!rc) rc = check_order(r, &e);
    json_object_put(o);
    if (rc) {
        serve_request_free(r);
        return NULL;
    }
    return r;
}

void serve_request_free(serve_request *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_msgs; i++) {
        sv_msg *m = &r->msgs[i];
        free(m->text);
        free(m->reasoning);
        free(m->call_id);
        for (size_t k = 0; k < m->n_calls; k++) {
            free(m->calls[k].id);
            free(m->calls[k].name);
            free(m->calls[k].args);
        }
        free(m->calls);
    }
    free(r->msgs);
    for (size_t i = 0; i < r->n_tools; i++) free(r->tools[i]);
    free(r->tools);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->choice_name);
    free(r->model);
    sb_free(&r->system);
    sb_free(&r->notes);
    free(r);
}
