/* registry.c — the tools in prompt order, their schemas, and tools_run:
 * argument parsing and checking against the schema, the permission
 * policy and the question to the front end, the call itself, and a result
 * that always fits the room the caller gave. */
#include "tools/tool_env.h"

#include "tools/web.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prompt order: looking before changing, then running, then the web. */
static const tool_def *const registry[] = {
    &tool_read,
    &tool_more,
    &tool_search,
    &tool_list,
    &tool_write,
    &tool_edit,
    &tool_bash,
    &tool_bash_status,
    &tool_bash_stop,
    /* ---- web tools (tools/web_search.c, tools/visit_page.c) ---- */
    &tool_web_search,
    &tool_visit_page,
};

const tool_def *const *tools_all(size_t *n)
{
    if (n) *n = sizeof registry / sizeof registry[0];
    return registry;
}

const tool_def *tools_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (!strcmp(registry[i]->name, name)) return registry[i];
    return NULL;
}

char *tools_schema_json(const tool_def *t)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "name", json_object_new_string(t->name));
    json_object_object_add(o, "description", json_object_new_string(t->description));
    json_object *params = json_tokener_parse(t->parameters_schema);
    if (!params) params = json_object_new_object();
    json_object_object_add(o, "parameters", params);
    const char *s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *r = xstrdup(s);
    json_object_put(o);
    return r;
}

void tool_result_free(tool_result *r)
{
    if (!r) return;
    free(r->text);
    r->text = NULL;
}

/* ---- arguments against the schema ----------------------------------------------------- */

static void list_params(json_object *props, strbuf *b)
{
    bool first = true;
    json_object_object_foreach(props, k, v) {
        (void)v;
        sb_printf(b, "%s%s", first ? "" : ", ", k);
        first = false;
    }
}

static bool parse_int_text(const char *s, long long *out)
{
    while (isspace((unsigned char)*s)) s++;
    if (!*s) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s) return false;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return false;
    *out = v;
    return true;
}

static bool parse_bool_text(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "1", "yes", NULL }, *const no[] = { "false", "0", "no", NULL };
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    for (size_t i = 0; yes[i]; i++)
        if (strlen(yes[i]) == n && !strncasecmp(s, yes[i], n)) { *out = true; return true; }
    for (size_t i = 0; no[i]; i++)
        if (strlen(no[i]) == n && !strncasecmp(s, no[i], n)) { *out = false; return true; }
    return false;
}

/* A copy of args with every value of the declared type; NULL with the
 * reason in err when a parameter is unknown, missing or of a wrong type. */
static json_object *check_args(const tool_def *t, json_object *args, strbuf *err)
{
    json_object *schema = json_tokener_parse(t->parameters_schema);
    json_object *props = NULL, *required = NULL;
    if (schema) {
        json_object_object_get_ex(schema, "properties", &props);
        json_object_object_get_ex(schema, "required", &required);
    }
    json_object *out = json_object_new_object();
    bool ok = true;
    json_object_object_foreach(args, key, val) {
        json_object *spec = NULL, *type = NULL;
        if (!props || !json_object_object_get_ex(props, key, &spec)) {
            sb_printf(err, "unknown parameter '%s' for %s (its parameters: ", key, t->name);
            if (props) list_params(props, err);
            sb_puts(err, ")");
            ok = false;
            break;
        }
        if (!val) continue; /* null: as if absent */
        json_object_object_get_ex(spec, "type", &type);
        const char *ty = type ? json_object_get_string(type) : "string";
        json_type jt = json_object_get_type(val);
        json_object *nv = NULL;
        if (!strcmp(ty, "integer")) {
            long long v;
            if (jt == json_type_int) nv = json_object_get(val);
            else if (jt == json_type_double && json_object_get_double(val) == (double)(long long)json_object_get_double(val))
                nv = json_object_new_int64((long long)json_object_get_double(val));
            else if (jt == json_type_string && parse_int_text(json_object_get_string(val), &v))
                nv = json_object_new_int64(v);
        } else if (!strcmp(ty, "number")) {
            if (jt == json_type_int || jt == json_type_double) nv = json_object_get(val);
            else if (jt == json_type_string) {
                char *end;
                const char *s = json_object_get_string(val);
                double d = strtod(s, &end);
                if (end != s && !*end) nv = json_object_new_double(d);
            }
        } else if (!strcmp(ty, "boolean")) {
            bool b;
            if (jt == json_type_boolean) nv = json_object_get(val);
            else if (jt == json_type_int && (json_object_get_int64(val) == 0 || json_object_get_int64(val) == 1))
                nv = json_object_new_boolean(json_object_get_int64(val) != 0);
            else if (jt == json_type_string && parse_bool_text(json_object_get_string(val), &b))
                nv = json_object_new_boolean(b);
        } else { /* string: numbers, booleans and JSON values given unquoted become their text */
            if (jt == json_type_string) nv = json_object_get(val);
            else nv = json_object_new_string(json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
        }
        if (!nv) {
            const char *shown = json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN);
            sb_printf(err, "parameter '%s' of %s must be %s %s, not %.80s%s", key, t->name,
                      !strcmp(ty, "integer") ? "an" : "a", ty, shown, strlen(shown) > 80 ? "…" : "");
            ok = false;
            break;
        }
        json_object_object_add(out, key, nv);
    }
    if (ok && required) {
        for (size_t i = 0; i < json_object_array_length(required); i++) {
            const char *name = json_object_get_string(json_object_array_get_idx(required, i));
            json_object *v;
            if (!json_object_object_get_ex(out, name, &v) || !v) {
                sb_printf(err, "%s needs the parameter '%s'", t->name, name);
                ok = false;
                break;
            }
        }
    }
    json_object_put(schema);
    if (!ok) {
        json_object_put(out);
        return NULL;
    }
    return out;
}

/* ---- running a call ------------------------------------------------------------------ */

static void set_text(tool_result *out, strbuf *b)
{
    free(out->text);
    out->text = sb_take(b);
}

static void unknown_tool(const char *name, tool_result *out)
{
    strbuf b = {0};
    sb_printf(&b, "Tool error: there is no tool named '%s'. The tools are: ", name ? name : "");
    size_t n;
    const tool_def *const *all = tools_all(&n);
    for (size_t i = 0; i < n; i++) sb_printf(&b, "%s%s", i ? ", " : "", all[i]->name);
    sb_putc(&b, '.');
    set_text(out, &b);
    out->is_error = true;
}

static void denied(tool_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void denied(tool_result *out, const char *fmt, ...)
{
    strbuf b = {0};
    sb_puts(&b, "Tool error: ");
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    set_text(out, &b);
    out->is_error = true;
    out->denied = true;
}

void tools_run(tool_env *env, const char *name, const char *args_json,
               const tool_call_ctx *ctx, tool_result *out)
{
    memset(out, 0, sizeof *out);
    tool_call_ctx no_ctx = {0};
    if (!ctx) ctx = &no_ctx;
    const tool_def *t = tools_find(name);
    if (!t) {
        unknown_tool(name, out);
        return;
    }
    if (!env) {
        tool_fail(out, "%s cannot run: no tool environment", t->name);
        return;
    }
    json_object *raw = NULL;
    const char *p = args_json ? args_json : "";
    while (isspace((unsigned char)*p)) p++;
    if (*p) {
        json_tokener *tok = json_tokener_new();
        raw = json_tokener_parse_ex(tok, p, (int)strlen(p));
        enum json_tokener_error jerr = json_tokener_get_error(tok);
        size_t used = tok->char_offset;
        json_tokener_free(tok);
        if (jerr != json_tokener_success || !raw) {
            json_object_put(raw);
            tool_fail(out, "the arguments of %s are not valid JSON (%s at offset %zu)", t->name,
                      json_tokener_error_desc(jerr), used);
            return;
        }
        while (isspace((unsigned char)p[used])) used++;
        if (p[used]) {
            json_object_put(raw);
            tool_fail(out, "the arguments of %s are not valid JSON (extra text at offset %zu)",
                      t->name, used);
            return;
        }
    } else {
        raw = json_object_new_object();
    }
    if (!json_object_is_type(raw, json_type_object)) {
        json_object_put(raw);
        tool_fail(out, "the arguments of %s must be a JSON object of named parameters", t->name);
        return;
    }
    strbuf err = {0};
    json_object *args = check_args(t, raw, &err);
    json_object_put(raw);
    if (!args) {
        tool_fail(out, "%s", sb_str(&err));
        sb_free(&err);
        return;
    }
    sb_free(&err);

    char summary[512];
    t->summarize(args, summary, sizeof summary);
    const char *why = NULL;
    perm_decision d = perm_decide(env, t, args, &why);
    if (d == PERM_DENY) {
        denied(out, "%s was denied by the rule at %s. Do not retry it; choose another way or ask the user.",
               summary, why ? why : "?");
        json_object_put(args);
        return;
    }
    if (d == PERM_ASK) {
        /* bash says "[without sandbox]" in its summary already */
        const char *reason = t == &tool_bash ? NULL : perm_ask_reason(env, t, args);
        char question[640];
        snprintf(question, sizeof question, "%s%s%s%s", summary, reason ? " (" : "", reason ? reason : "",
                 reason ? ")" : "");
        if (!env->cfg.interactive || !ctx->confirm) {
            char *rule = tools_always_rule(env, t, args);
            /* --yes and --allow do not cover writes outside the workspace
             * or into .git: only a rule naming the path does */
            bool path_only = t->cls == TOOL_CLASS_WRITE && reason;
            if (path_only)
                denied(out, "%s needs approval and this run cannot ask (denied by policy). --yes and "
                            "--allow do not cover this; the user can allow it with a rule such as \"%s\" "
                            "in .ds4cl/rules.",
                       question, rule ? rule : "");
            else
                denied(out, "%s needs approval and this run cannot ask (denied by policy). The user can "
                            "allow it with --yes, --allow %s, or a rule such as \"%s\" in .ds4cl/rules.",
                       question, t->name, rule ? rule : "");
            free(rule);
            json_object_put(args);
            return;
        }
        tool_confirm answer = ctx->confirm(ctx->ud, t->name, question);
        if (answer == TOOL_CONFIRM_TIMEOUT) {
            denied(out, "nobody answered the approval question in time, so %s was not run. The user may "
                        "be away: do not retry it now; go on without it or end your reply with a question.",
                   question);
            json_object_put(args);
            return;
        }
        if (answer != TOOL_CONFIRM_YES && answer != TOOL_CONFIRM_ALWAYS) {
            denied(out, "the user declined: %s. Do not retry the same call; ask the user what to do instead.",
                   question);
            json_object_put(args);
            return;
        }
        if (answer == TOOL_CONFIRM_ALWAYS) perm_add_session_rule(env, t, args);
    }
    if (tool_cancelled(ctx)) {
        tool_fail(out, "interrupted before %s ran", t->name);
        json_object_put(args);
        return;
    }

    int rc = t->run(env, args, ctx, out);
    if (!out->text) {
        if (rc != 0) tool_fail(out, "%s failed without a message", t->name);
        else {
            out->text = xstrdup("(no output)");
        }
    }
    out->is_error = strncmp(out->text, "Tool error: ", 12) == 0;
    size_t cap = tool_result_cap(ctx);
    size_t len = strlen(out->text);
    if (len > cap) {
        strbuf b = { out->text, len, len + 1 };
        text_fit(&b, cap);
        out->text = b.s;
    }
    if (t == &tool_visit_page && !out->is_error && env->web && web_has_remainder(env->web))
        tool_pager_set_web(env);
    json_object_put(args);
}
