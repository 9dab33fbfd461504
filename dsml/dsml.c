/* dsml.c — the streaming DSML parser: runs the byte automaton, keeps back
 * bytes that may still turn out to be markup, and assembles tool calls
 * into JSON argument objects (json-c); and the gathering of its reasoning
 * and text a token at a time for the front ends that stream them. */
#include "dsml/dsml_gram_impl.h"
#include "base/base.h"
#include "base/utf8.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STANZA_MAX (16u << 20)

enum { R_NONE = 0, R_THINK, R_TEXT, R_VALUE };

typedef struct {
    char *name;
    strbuf value;
    int8_t string; /* 1 string="true", 0 string="false" (or other), -1 missing */
} pparam;

struct dsml_parser {
    const dsml_schema *schema;
    dsml_event_fn fn;
    void *ud;
    dsml_gram g;
    int region;
    bool text_started;
    strbuf pend;        /* content of the current region not yet emitted */
    strbuf stanza;
    strbuf name;        /* the name attribute being read */
    bool call_open;
    char *call_name;
    pparam *params;
    size_t n_params, cap_params;
    dsml_call *calls;
    size_t n_calls, cap_calls;
    dsml_error_kind ekind;
    char error[512];
};

static void emit(dsml_parser *p, dsml_event_type type, const char *name, const char *text, size_t len)
{
    if (!p->fn) return;
    dsml_event ev = { .type = type, .call = (int)p->n_calls, .name = name, .text = text, .len = len };
    p->fn(p->ud, &ev);
}

/* Length of the longest prefix of s[0..n) that does not end inside a
 * UTF-8 sequence (invalid bytes count as complete). */
static size_t utf8_complete(const char *s, size_t n)
{
    size_t i = n, back = 0;
    while (i > 0 && back < 4) {
        unsigned char c = (unsigned char)s[i - 1];
        if ((c & 0xc0) != 0x80) {
            size_t need = c >= 0xf0 && c < 0xf8 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            return back + 1 < need ? i - 1 : n;
        }
        i--;
        back++;
    }
    return n;
}

static void param_text(dsml_parser *p, const char *s, size_t n)
{
    if (!n || !p->n_params) return;
    pparam *pp = &p->params[p->n_params - 1];
    sb_append(&pp->value, s, n);
    emit(p, DSML_EV_VALUE, pp->name, s, n);
}

/* Emits pend[0..n) in the current region. */
static void emit_region(dsml_parser *p, size_t n)
{
    if (!n) return;
    const char *s = p->pend.s;
    switch (p->region) {
    case R_THINK:
        emit(p, DSML_EV_THINK, NULL, s, n);
        break;
    case R_TEXT: {
        size_t skip = 0;
        if (!p->text_started) {
            while (skip < n && (s[skip] == ' ' || s[skip] == '\n' || s[skip] == '\r' || s[skip] == '\t')) skip++;
            if (skip < n) p->text_started = true;
        }
        if (skip < n) emit(p, DSML_EV_TEXT, NULL, s + skip, n - skip);
        break;
    }
    case R_VALUE:
        param_text(p, s, n);
        break;
    default:
        break;
    }
}

static void pend_consume(dsml_parser *p, size_t n)
{
    memmove(p->pend.s, p->pend.s + n, p->pend.len - n);
    p->pend.len -= n;
    if (p->pend.s) p->pend.s[p->pend.len] = 0;
}

/* Emits what is no longer held back, on a UTF-8 boundary. */
static void flush_settled(dsml_parser *p, size_t hold)
{
    if (p->pend.len <= hold) return;
    size_t n = utf8_complete(p->pend.s, p->pend.len - hold);
    emit_region(p, n);
    pend_consume(p, n);
}

/* The region ends: its settled bytes go out, the `held` markup bytes at
 * the end are dropped. */
static void end_region(dsml_parser *p, size_t held)
{
    size_t n = p->pend.len > held ? p->pend.len - held : 0;
    emit_region(p, n);
    sb_clear(&p->pend);
}

static void set_error(dsml_parser *p, dsml_error_kind kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_error(dsml_parser *p, dsml_error_kind kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error, sizeof p->error, fmt, ap);
    va_end(ap);
    p->ekind = kind;
    p->g.st = G_ERROR;
    emit(p, DSML_EV_ERROR, NULL, p->error, strlen(p->error));
}

static void gram_error(dsml_parser *p)
{
    int e = p->g.err;
    dsml_error_kind kind = e == GE_IN_THINK ? DSML_ERR_IN_THINK
                         : e == GE_INCOMPLETE ? DSML_ERR_INCOMPLETE : DSML_ERR_SYNTAX;
    if (kind == DSML_ERR_SYNTAX && p->stanza.len) {
        /* Show where it went wrong: the tail of the block, one line. */
        size_t start = p->stanza.len > 80 ? p->stanza.len - 80 : 0;
        while (start < p->stanza.len && ((unsigned char)p->stanza.s[start] & 0xc0) == 0x80) start++;
        char tail[81];
        size_t k = 0;
        for (size_t i = start; i < p->stanza.len; i++)
            tail[k++] = p->stanza.s[i] == '\n' ? ' ' : p->stanza.s[i];
        tail[k] = 0;
        set_error(p, kind, "%s near \"%s\"", gram_error_text(e), tail);
    } else {
        set_error(p, kind, "%s", gram_error_text(e));
    }
}

/* ---- arguments ----------------------------------------------------------------- */

static const char escaped_close[] = "&lt;/" DSML_D "parameter>";
static const char real_close[] = "</" DSML_D "parameter>";

static char *unescape_value(const char *s, size_t n, size_t *out_len)
{
    strbuf b = { 0 };
    size_t el = sizeof escaped_close - 1;
    size_t i = 0;
    while (i < n) {
        if (n - i >= el && !memcmp(s + i, escaped_close, el)) {
            sb_puts(&b, real_close);
            i += el;
        } else {
            sb_putc(&b, s[i++]);
        }
    }
    *out_len = b.len;
    return sb_take(&b);
}

/* A complete JSON value spanning all of s (whitespace aside), or NULL. */
static struct json_object *parse_json_exact(const char *s, size_t n, bool *ok)
{
    while (n && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
    *ok = false;
    if (n == 0) {
        *ok = true;
        return NULL; /* an empty JSON value is null */
    }
    if (n > (size_t)0x7fffffff) return NULL;
    struct json_tokener *tok = json_tokener_new();
    if (!tok) abort();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    struct json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    size_t used = json_tokener_get_parse_end(tok);
    /* A bare number is only known complete at the end of input. */
    if (!o && jerr == json_tokener_continue) {
        o = json_tokener_parse_ex(tok, "", 1);
        jerr = json_tokener_get_error(tok);
        used = n;
    }
    json_tokener_free(tok);
    if (o && jerr == json_tokener_success && used == n) {
        *ok = true;
        return o;
    }
    json_object_put(o);
    return NULL;
}

static int close_call(dsml_parser *p)
{
    if (!p->call_open) return 0;
    p->call_open = false;
    int tool = dsml_schema_tool(p->schema, p->call_name);
    struct json_object *args = json_object_new_object();
    int rc = 0;
    for (size_t i = 0; i < p->n_params && rc == 0; i++) {
        pparam *pp = &p->params[i];
        if (json_object_object_get_ex(args, pp->name, NULL)) continue; /* first occurrence wins */
        int pi = dsml_schema_param(p->schema, tool, pp->name);
        uint8_t type = pi >= 0 ? p->schema->tools[tool].params[pi].type : PT_UNKNOWN;
        size_t vlen;
        char *v = unescape_value(sb_str(&pp->value), pp->value.len, &vlen);
        struct json_object *val = NULL;
        bool ok = false;
        if (pp->string == 1) {
            /* A number or boolean the schema wants as such, written as a
             * string, is taken for what it says. */
            if (PT_IS_JSON(type)) {
                val = parse_json_exact(v, vlen, &ok);
                if (ok && (!val || json_object_is_type(val, json_type_string))) {
                    json_object_put(val);
                    ok = false;
                }
            }
            if (!ok) val = json_object_new_string_len(v, (int)vlen);
        } else {
            val = parse_json_exact(v, vlen, &ok);
            if (!ok) {
                if (pp->string == -1 || type == PT_STRING) {
                    val = json_object_new_string_len(v, (int)vlen);
                } else {
                    const char *show = v;
                    set_error(p, DSML_ERR_SYNTAX,
                              "parameter \"%s\" of tool \"%s\" is marked string=\"false\" but its value is not JSON: %.60s%s",
                              pp->name, p->call_name, show, vlen > 60 ? "…" : "");
                    rc = -1;
                }
            } else if (type == PT_STRING && val && !json_object_is_type(val, json_type_string) && pp->string == -1) {
                json_object_put(val);
                val = json_object_new_string_len(v, (int)vlen);
            }
        }
        free(v);
        if (rc == 0) json_object_object_add(args, pp->name, val);
    }
    if (rc == 0) {
        if (p->n_calls == p->cap_calls) {
            p->cap_calls = p->cap_calls ? p->cap_calls * 2 : 4;
            p->calls = xrealloc(p->calls, p->cap_calls * sizeof *p->calls);
        }
        const char *js = json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
        dsml_call *c = &p->calls[p->n_calls];
        c->name = p->call_name;
        c->args_json = xstrdup(js);
        p->call_name = NULL;
        emit(p, DSML_EV_CALL_END, c->name, c->args_json, strlen(c->args_json));
        p->n_calls++;
    }
    json_object_put(args);
    for (size_t i = 0; i < p->n_params; i++) {
        free(p->params[i].name);
        sb_free(&p->params[i].value);
    }
    p->n_params = 0;
    return rc;
}

/* ---- driving the automaton ----------------------------------------------------- */

static void stanza_put(dsml_parser *p, const char *s, size_t n)
{
    sb_append(&p->stanza, s, n);
}

static void on_byte(dsml_parser *p, unsigned char c)
{
    size_t old_hold = p->g.hold;
    bool in_block = p->g.st >= G_WS && p->g.st <= G_VALUE;
    gram_ev ev = gram_step(&p->g, p->schema, c);
    if (in_block || ev == EV_BLOCK) {
        if (ev != EV_BLOCK) stanza_put(p, (const char *)&c, 1);
        if (p->stanza.len > STANZA_MAX && p->g.st != G_ERROR && p->g.st != G_DONE) {
            p->g.st = G_ERROR;
            p->g.err = GE_TOO_LONG;
            gram_error(p);
            return;
        }
    }
    switch (ev) {
    case EV_CONTENT:
        if (p->region == R_NONE) p->region = p->g.st == G_THINK ? R_THINK : p->g.st == G_VALUE ? R_VALUE : R_TEXT;
        sb_putc(&p->pend, (char)c);
        flush_settled(p, p->g.hold);
        break;
    case EV_STRUCT:
    case EV_REJECT:
        break;
    case EV_NAME_BEGIN:
        sb_clear(&p->name);
        break;
    case EV_ATTRV:
        if (p->g.key == KEY_NAME) sb_putc(&p->name, (char)c);
        break;
    case EV_THINK_END:
        end_region(p, old_hold);
        p->region = R_TEXT;
        emit(p, DSML_EV_THINK_END, NULL, NULL, 0);
        break;
    case EV_BLOCK:
        end_region(p, old_hold);
        p->region = R_NONE;
        sb_clear(&p->stanza);
        stanza_put(p, "<" DSML_D "tool_calls>", 22);
        if (p->g.implicit) stanza_put(p, "\n<" DSML_D "invoke ", 19);
        emit(p, DSML_EV_BLOCK, NULL, NULL, 0);
        break;
    case EV_INVOKE_OPEN:
        if (p->call_open && close_call(p) != 0) return;
        p->call_open = true;
        free(p->call_name);
        p->call_name = xstrdup(sb_str(&p->name));
        emit(p, DSML_EV_CALL, p->call_name, NULL, 0);
        break;
    case EV_PARAM_OPEN: {
        if (p->n_params == p->cap_params) {
            p->cap_params = p->cap_params ? p->cap_params * 2 : 8;
            p->params = xrealloc(p->params, p->cap_params * sizeof *p->params);
        }
        pparam *pp = &p->params[p->n_params++];
        memset(pp, 0, sizeof *pp);
        pp->name = xstrdup(sb_str(&p->name));
        pp->string = (p->g.have & HAVE_STRING) ? (p->g.have & STRING_TRUE ? 1 : 0) : -1;
        p->region = R_VALUE;
        emit(p, DSML_EV_PARAM, pp->name, NULL, 0);
        break;
    }
    case EV_PARAM_CLOSE:
        end_region(p, old_hold);
        p->region = R_NONE;
        break;
    case EV_INVOKE_CLOSE:
        close_call(p);
        break;
    case EV_DONE:
        if (close_call(p) != 0) return;
        emit(p, DSML_EV_DONE, NULL, NULL, 0);
        break;
    case EV_ERROR:
        end_region(p, p->region == R_THINK ? 0 : old_hold);
        p->region = R_NONE;
        gram_error(p);
        break;
    }
}

dsml_parser *dsml_parser_new(const dsml_schema *schema, bool thinking, dsml_event_fn fn, void *ud)
{
    dsml_parser *p = xcalloc(1, sizeof *p);
    p->schema = schema;
    p->fn = fn;
    p->ud = ud;
    dsml_parser_reset(p, thinking);
    return p;
}

static void clear_calls(dsml_parser *p)
{
    for (size_t i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].args_json);
    }
    p->n_calls = 0;
    for (size_t i = 0; i < p->n_params; i++) {
        free(p->params[i].name);
        sb_free(&p->params[i].value);
    }
    p->n_params = 0;
    free(p->call_name);
    p->call_name = NULL;
    p->call_open = false;
}

void dsml_parser_reset(dsml_parser *p, bool thinking)
{
    clear_calls(p);
    gram_init(&p->g, thinking);
    p->region = R_NONE;
    p->text_started = false;
    sb_clear(&p->pend);
    sb_clear(&p->stanza);
    sb_clear(&p->name);
    p->ekind = DSML_ERR_NONE;
    p->error[0] = 0;
}

void dsml_parser_free(dsml_parser *p)
{
    if (!p) return;
    clear_calls(p);
    free(p->calls);
    free(p->params);
    sb_free(&p->pend);
    sb_free(&p->stanza);
    sb_free(&p->name);
    free(p);
}

void dsml_feed(dsml_parser *p, const char *bytes, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p->g.st == G_DONE || p->g.st == G_ERROR) return;
        on_byte(p, (unsigned char)bytes[i]);
    }
}

void dsml_finish(dsml_parser *p)
{
    if (p->g.st == G_ERROR || p->g.st == G_DONE) return;
    gram_ev ev = gram_eos(&p->g);
    if (ev == EV_DONE) {
        /* A bare invoke block ends with the stream. */
        if (p->call_open && close_call(p) != 0) return;
        sb_clear(&p->pend);
        emit(p, DSML_EV_DONE, NULL, NULL, 0);
        return;
    }
    if (ev == EV_ERROR) {
        sb_clear(&p->pend);
        gram_error(p);
        return;
    }
    /* Text or reasoning: what was held back goes out, except trailing
     * whitespace of the answer. */
    if (p->region == R_TEXT) {
        size_t n = p->pend.len;
        while (n && (p->pend.s[n - 1] == ' ' || p->pend.s[n - 1] == '\n' || p->pend.s[n - 1] == '\r' ||
                     p->pend.s[n - 1] == '\t'))
            n--;
        emit_region(p, n);
    } else {
        emit_region(p, p->pend.len);
    }
    sb_clear(&p->pend);
    p->g.hold = 0;
    p->g.pos = 0;
    p->g.lits = 0;
}

dsml_state dsml_get_state(const dsml_parser *p)
{
    switch (p->g.st) {
    case G_DONE: return DSML_DONE;
    case G_ERROR: return DSML_ERROR;
    case G_THINK: case G_TEXT: return DSML_OK;
    default: return DSML_IN_BLOCK;
    }
}

dsml_error_kind dsml_error_kind_of(const dsml_parser *p) { return p->ekind; }
const char *dsml_error(const dsml_parser *p) { return p->error; }
size_t dsml_n_calls(const dsml_parser *p) { return p->n_calls; }
const dsml_call *dsml_call_at(const dsml_parser *p, size_t i) { return i < p->n_calls ? &p->calls[i] : NULL; }

const char *dsml_stanza(const dsml_parser *p, size_t *len)
{
    if (len) *len = p->stanza.len;
    return sb_str(&p->stanza);
}

bool dsml_answering(const dsml_parser *p) { return p->g.st != G_THINK; }
bool dsml_wants_greedy(const dsml_parser *p) { return gram_greedy(&p->g); }
bool dsml_constrained(const dsml_parser *p) { return gram_constrained(&p->g); }

const dsml_gram *dsml_parser_gram(const dsml_parser *p) { return &p->g; }

const char *dsml_syntax_reminder(void)
{
    return "A tool call goes after the reasoning, as one block in exactly this shape (whitespace between tags only):\n"
           "<" DSML_D "tool_calls>\n"
           "<" DSML_D "invoke name=\"TOOL_NAME\">\n"
           "<" DSML_D "parameter name=\"TEXT_PARAM\" string=\"true\">raw text</" DSML_D "parameter>\n"
           "<" DSML_D "parameter name=\"OTHER_PARAM\" string=\"false\">JSON value</" DSML_D "parameter>\n"
           "</" DSML_D "invoke>\n"
           "</" DSML_D "tool_calls>\n"
           "Use only the tool and parameter names from the schemas.";
}

/* ---- reasoning and text a token at a time ------------------------------------------ */

void dsml_gather_take(dsml_gather *g, bool all, dsml_gather_fn fn, void *ud)
{
    size_t n = all ? g->buf.len : utf8_complete_len(g->buf.s, g->buf.len);
    if (!n) return;
    strbuf v = { 0 };
    utf8_append_valid(&v, g->buf.s, n);
    memmove(g->buf.s, g->buf.s + n, g->buf.len - n);
    g->buf.len -= n;
    g->buf.s[g->buf.len] = 0;
    fn(ud, g->type, v.s, v.len);
    sb_free(&v);
}

void dsml_gather_add(dsml_gather *g, dsml_event_type type, const char *s, size_t n, dsml_gather_fn fn, void *ud)
{
    if (g->buf.len && g->type != type) dsml_gather_take(g, true, fn, ud);
    g->type = type;
    sb_append(&g->buf, s, n);
}

void dsml_gather_free(dsml_gather *g)
{
    sb_free(&g->buf);
}

/* "a, b (required), c": the names a refusal offers instead. */
static void list_names(strbuf *b, const dsml_schema *s, int tool)
{
    size_t n = tool < 0 ? s->n_tools : s->tools[tool].n_params;
    for (size_t i = 0; i < n; i++) {
        if (i) sb_puts(b, ", ");
        if (tool < 0) {
            sb_puts(b, s->tools[i].name);
        } else {
            sb_puts(b, s->tools[tool].params[i].name);
            if (s->tools[tool].required >> i & 1) sb_puts(b, " (required)");
        }
    }
}

bool dsml_refuse_name(dsml_parser *p, const char *wanted, size_t len)
{
    if (!p->schema || p->g.st != G_ATTR_VAL || p->g.key != KEY_NAME) return false;
    bool invoke = p->g.tag == TAG_INVOKE;
    int tool = invoke ? -1 : dsml_schema_tool(p->schema, p->call_name ? p->call_name : "");
    if (!invoke && tool < 0) return false; /* an unknown tool's names are not checked */
    /* the name as the model meant it: what was read, then its next bytes
     * up to the closing quote (when they reach it, the name is whole) */
    strbuf got = { 0 };
    sb_puts(&got, sb_str(&p->name));
    size_t k = 0;
    while (k < len && wanted[k] != '"' && wanted[k] != '>' && wanted[k] != '\n') k++;
    sb_append(&got, wanted, k);
    bool whole = k < len && wanted[k] == '"';
    const char *more = whole ? "" : "…";
    strbuf b = { 0 };
    if (invoke) {
        sb_printf(&b, "there is no tool named \"%s%s\"; the tools are ", sb_str(&got), more);
    } else {
        const char *tname = p->schema->tools[tool].name;
        int known = whole ? dsml_schema_param(p->schema, tool, sb_str(&got)) : -1;
        if (known >= 0)
            sb_printf(&b, "the %s call gives the parameter \"%s\" twice; %s takes ", tname, sb_str(&got), tname);
        else
            sb_printf(&b, "%s has no parameter \"%s%s\"; %s takes ", tname, sb_str(&got), more, tname);
    }
    list_names(&b, p->schema, tool);
    set_error(p, DSML_ERR_SYNTAX, "%s", sb_str(&b));
    sb_free(&b);
    sb_free(&got);
    return true;
}
