/* dsml_gram.c — tool schemas as name tables, and the DSML byte automaton
 * (see dsml_gram_impl.h for why it is plain data). */
#include "dsml/dsml_gram_impl.h"

#include "base/base.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- schema ---------------------------------------------------------------- */

static int cmp_tool(const void *a, const void *b)
{
    return strcmp(((const dsml_stool *)a)->name, ((const dsml_stool *)b)->name);
}

static int cmp_param(const void *a, const void *b)
{
    return strcmp(((const dsml_sparam *)a)->name, ((const dsml_sparam *)b)->name);
}

static uint8_t type_of_name(const char *t)
{
    if (!strcmp(t, "string")) return PT_STRING;
    if (!strcmp(t, "integer")) return PT_INT;
    if (!strcmp(t, "number")) return PT_NUM;
    if (!strcmp(t, "boolean")) return PT_BOOL;
    return PT_JSON;
}

static uint8_t type_class(struct json_object *prop)
{
    struct json_object *type, *en;
    if (json_object_object_get_ex(prop, "type", &type)) {
        if (json_object_is_type(type, json_type_string)) return type_of_name(json_object_get_string(type));
        if (json_object_is_type(type, json_type_array)) {
            bool str = false, other = false;
            for (size_t i = 0; i < json_object_array_length(type); i++) {
                const char *t = json_object_get_string(json_object_array_get_idx(type, i));
                if (t && !strcmp(t, "string")) str = true;
                else other = true;
            }
            return str ? (other ? PT_MIXED : PT_STRING) : PT_JSON;
        }
        return PT_UNKNOWN;
    }
    if (json_object_object_get_ex(prop, "enum", &en) && json_object_is_type(en, json_type_array)) {
        bool str = false, other = false;
        for (size_t i = 0; i < json_object_array_length(en); i++) {
            if (json_object_is_type(json_object_array_get_idx(en, i), json_type_string)) str = true;
            else other = true;
        }
        return str ? (other ? PT_MIXED : PT_STRING) : PT_JSON;
    }
    return PT_UNKNOWN;
}

static bool name_ok(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (*s == '"' || *s == '<' || *s == '>' || *s == '\n' || *s == '\r') return false;
    return true;
}

dsml_schema *dsml_schema_new(const char *const *schemas_json, size_t n, ds4_error *err)
{
    dsml_schema *s = xcalloc(1, sizeof *s);
    s->tools = xcalloc(n ? n : 1, sizeof *s->tools);
    for (size_t i = 0; i < n; i++) {
        struct json_object *root = json_tokener_parse(schemas_json[i]), *name, *params, *props, *req;
        if (!root || !json_object_is_type(root, json_type_object) ||
            !json_object_object_get_ex(root, "name", &name) || !json_object_is_type(name, json_type_string) ||
            !name_ok(json_object_get_string(name))) {
            ds4_error_set(err, "tool schema %zu is not an object with a valid \"name\"", i);
            json_object_put(root);
            dsml_schema_free(s);
            return NULL;
        }
        dsml_stool *t = &s->tools[s->n_tools++];
        t->name = xstrdup(json_object_get_string(name));
        t->len = strlen(t->name);
        if (json_object_object_get_ex(root, "parameters", &params) &&
            json_object_object_get_ex(params, "properties", &props) &&
            json_object_is_type(props, json_type_object)) {
            size_t np = (size_t)json_object_object_length(props);
            if (np > 64) {
                ds4_error_set(err, "tool %s has %zu parameters (at most 64)", t->name, np);
                json_object_put(root);
                dsml_schema_free(s);
                return NULL;
            }
            t->params = xcalloc(np ? np : 1, sizeof *t->params);
            json_object_object_foreach(props, key, val) {
                if (!name_ok(key)) continue;
                dsml_sparam *p = &t->params[t->n_params++];
                p->name = xstrdup(key);
                p->len = strlen(key);
                p->type = type_class(val);
            }
            qsort(t->params, t->n_params, sizeof *t->params, cmp_param);
            if (json_object_object_get_ex(params, "required", &req) && json_object_is_type(req, json_type_array)) {
                for (size_t k = 0; k < json_object_array_length(req); k++) {
                    const char *r = json_object_get_string(json_object_array_get_idx(req, k));
                    for (size_t j = 0; r && j < t->n_params; j++)
                        if (!strcmp(t->params[j].name, r)) {
                            t->params[j].required = true;
                            t->required |= 1ull << j;
                        }
                }
            }
        }
        json_object_put(root);
    }
    qsort(s->tools, s->n_tools, sizeof *s->tools, cmp_tool);
    for (size_t i = 1; i < s->n_tools; i++) {
        if (!strcmp(s->tools[i].name, s->tools[i - 1].name)) {
            ds4_error_set(err, "two tools are called %s", s->tools[i].name);
            dsml_schema_free(s);
            return NULL;
        }
    }
    return s;
}

void dsml_schema_free(dsml_schema *s)
{
    if (!s) return;
    for (size_t i = 0; i < s->n_tools; i++) {
        for (size_t j = 0; j < s->tools[i].n_params; j++) free(s->tools[i].params[j].name);
        free(s->tools[i].params);
        free(s->tools[i].name);
    }
    free(s->tools);
    free(s);
}

int dsml_schema_tool(const dsml_schema *s, const char *name)
{
    for (size_t i = 0; s && i < s->n_tools; i++)
        if (!strcmp(s->tools[i].name, name)) return (int)i;
    return -1;
}

int dsml_schema_param(const dsml_schema *s, int tool, const char *name)
{
    if (!s || tool < 0) return -1;
    const dsml_stool *t = &s->tools[tool];
    for (size_t i = 0; i < t->n_params; i++)
        if (!strcmp(t->params[i].name, name)) return (int)i;
    return -1;
}

/* ---- automaton --------------------------------------------------------------- */

/* Opener candidates outside a block. */
enum { L_TC = 0, L_TC2, L_INV, L_INV2, L_CLS, L_COUNT };
static const char *const text_lits[L_COUNT] = {
    "<" DSML_D "tool_calls>",
    "<DSML" DSML_BAR "tool_calls>",
    "<" DSML_D "invoke",
    "<DSML" DSML_BAR "invoke",
    "</" DSML_D,
};
static const uint8_t text_lit_len[L_COUNT] = { 22, 19, 17, 14, 12 };
/* Bytes after which a candidate is committed markup (the marker is whole). */
static const uint8_t text_lit_commit[L_COUNT] = { 11, 8, 11, 8, 12 };
#define OPENERS ((1u << L_TC) | (1u << L_TC2) | (1u << L_INV) | (1u << L_INV2))

static const char value_close[] = "</" DSML_D "parameter";
#define VALUE_CLOSE_LEN 21
#define VALUE_CLOSE_COMMIT 12

static const char think_end[] = "</think>";

#define STRICT_WS_MAX 4
#define TEXT_WS_HOLD_MAX 64
#define NAME_MAX_LEN 256

/* The last 7 bytes of the window: "｜DSML" and "DSML｜". */
#define WIN7(b0, b1, b2, b3, b4, b5, b6)                                                   \
    (((uint64_t)(b0) << 48) | ((uint64_t)(b1) << 40) | ((uint64_t)(b2) << 32) |          \
     ((uint64_t)(b3) << 24) | ((uint64_t)(b4) << 16) | ((uint64_t)(b5) << 8) | (uint64_t)(b6))
static const uint64_t win_bar_dsml = WIN7(0xef, 0xbd, 0x9c, 'D', 'S', 'M', 'L');
static const uint64_t win_dsml_bar = WIN7('D', 'S', 'M', 'L', 0xef, 0xbd, 0x9c);

static bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool is_key_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

void gram_init(dsml_gram *g, bool thinking)
{
    memset(g, 0, sizeof *g);
    g->st = thinking ? G_THINK : G_TEXT;
    g->tool = g->cur = -1;
}

static gram_ev fail(dsml_gram *g, int err)
{
    if (g->strict) return EV_REJECT;
    g->st = G_ERROR;
    g->err = (uint8_t)err;
    g->hold = 0;
    return EV_ERROR;
}

/* A lenient-only construct: rejected by a strict copy, noted otherwise. */
static bool deviate(dsml_gram *g)
{
    if (g->strict) return false;
    g->dev = 1;
    return true;
}
#define STRICT_ONLY(g) do { if (!deviate(g)) return EV_REJECT; } while (0)

static const char *const tag_names[] = { "", "tool_calls", "invoke", "parameter" };
static const uint8_t tag_len[] = { 0, 10, 6, 9 };

/* Strict name candidates for the name attribute of the tag being read. */
static void name_range(dsml_gram *g, const dsml_schema *s)
{
    g->nlen = 0;
    g->lo = 0;
    g->hi = 0;
    if (!s) return;
    if (g->tag == TAG_INVOKE) g->hi = (int16_t)s->n_tools;
    else if (g->tool >= 0) g->hi = (int16_t)s->tools[g->tool].n_params;
}

static const char *cand_name(const dsml_gram *g, const dsml_schema *s, int k, size_t *len)
{
    if (g->tag == TAG_INVOKE) {
        *len = s->tools[k].len;
        return s->tools[k].name;
    }
    *len = s->tools[g->tool].params[k].len;
    return s->tools[g->tool].params[k].name;
}

/* Narrows [lo, hi) to names continuing with c at nlen; for parameters
 * there must remain one that was not given yet, so the strict language
 * never walks into a dead end. */
static bool name_narrow(dsml_gram *g, const dsml_schema *s, unsigned char c)
{
    int lo = g->lo, hi = g->hi;
    size_t at = g->nlen;
    while (lo < hi) {
        size_t len;
        const char *n = cand_name(g, s, lo, &len);
        if (len > at && (unsigned char)n[at] == c) break;
        lo++;
    }
    int h = lo;
    while (h < hi) {
        size_t len;
        const char *n = cand_name(g, s, h, &len);
        if (!(len > at && (unsigned char)n[at] == c)) break;
        h++;
    }
    if (lo >= h) return false;
    if (g->tag == TAG_PARAM) {
        bool any = false;
        for (int k = lo; k < h && !any; k++) any = !(g->used >> k & 1);
        if (!any) return false;
    }
    g->lo = (int16_t)lo;
    g->hi = (int16_t)h;
    return true;
}

/* The candidate whose whole name was read, or -1. */
static int name_exact(const dsml_gram *g, const dsml_schema *s)
{
    for (int k = g->lo; k < g->hi; k++) {
        size_t len;
        cand_name(g, s, k, &len);
        if (len == g->nlen && !(g->tag == TAG_PARAM && (g->used >> k & 1))) return k;
    }
    return -1;
}

static bool names_known(const dsml_gram *g, const dsml_schema *s)
{
    return s && (g->tag == TAG_INVOKE || g->tool >= 0);
}

static uint8_t param_type(const dsml_gram *g, const dsml_schema *s)
{
    if (!s || g->tool < 0 || g->cur < 0) return PT_UNKNOWN;
    return s->tools[g->tool].params[g->cur].type;
}

/* Strict: a parameter may open only while one is left to give. */
static bool param_left(const dsml_gram *g, const dsml_schema *s)
{
    if (!s || g->tool < 0) return true;
    size_t n = s->tools[g->tool].n_params;
    uint64_t all = n >= 64 ? ~0ull : (1ull << n) - 1;
    return (g->used & all) != all;
}

static gram_ev step_text(dsml_gram *g, unsigned char c)
{
    if (g->pos == 0) {
        if (c == '<') {
            g->lits = (1u << L_COUNT) - 1;
            g->pos = 1;
            g->hold = (uint16_t)(g->ws + 1);
            return EV_CONTENT;
        }
        if (is_ws(c)) {
            if (g->ws < TEXT_WS_HOLD_MAX) g->ws++;
        } else {
            g->ws = 0;
        }
        g->hold = g->ws;
        return EV_CONTENT;
    }
    uint8_t next = 0;
    for (int k = 0; k < L_COUNT; k++)
        if ((g->lits >> k & 1) && g->pos < text_lit_len[k] && (unsigned char)text_lits[k][g->pos] == c)
            next |= (uint8_t)(1u << k);
    if (!next) {
        for (int k = 0; k < L_COUNT; k++)
            if ((g->lits >> k & 1) && g->pos >= text_lit_commit[k]) return fail(g, GE_STRAY);
        g->pos = 0;
        g->lits = 0;
        g->ws = 0;
        return step_text(g, c);
    }
    g->lits = next;
    g->pos++;
    for (int k = 0; k < L_COUNT; k++) {
        if (!(next >> k & 1) || g->pos != text_lit_len[k]) continue;
        if (k == L_CLS) return fail(g, GE_STRAY);
        /* The typo forms are committed markup once their bar is in: a
         * strict copy must be able to finish them (the mask never leads
         * into a dead end), and what follows is canonical anyway. */
        if (k == L_TC || k == L_TC2) {
            g->st = G_WS;
            g->level = 0;
            g->implicit = 0;
            g->ncalls = 0;
            g->ws = 0;
            g->pos = 0;
            g->hold = 0;
            g->dev = 0;
            return EV_BLOCK;
        }
        g->st = G_CAND_DELIM;
        g->hold = (uint16_t)(g->ws + g->pos);
        return EV_CONTENT;
    }
    g->hold = (uint16_t)(g->ws + g->pos);
    return EV_CONTENT;
}

/* JSON scalars a strict value must be: integers, numbers, booleans. The
 * caps keep a sampled number from running on forever and within what the
 * tools can hold: an integer fits 64 bits, an exponent two digits. */
#define SCALAR_MAX 24
#define INT_MAX_LEN 18
#define EXP_MAX_DIGITS 2

static bool scalar_step(dsml_gram *g, unsigned char c)
{
    if (g->vn >= (g->vk == PT_INT ? INT_MAX_LEN : SCALAR_MAX)) return false;
    g->vn++;
    if (g->vk == PT_BOOL) {
        if (g->vs == 0) g->vs = c == 't' ? 1 : c == 'f' ? 2 : 3;
        const char *lit = g->vs == 1 ? "true" : "false";
        return g->vs != 3 && g->vn <= strlen(lit) && (unsigned char)lit[g->vn - 1] == c;
    }
    bool digit = c >= '0' && c <= '9', frac = g->vk == PT_NUM;
    /* 0 start, 1 '-', 2 leading 0, 3 integer digits, 4 '.', 5 fraction,
     * 6 'e', 7 exponent sign, 8 exponent digits */
    switch (g->vs) {
    case 0: g->vs = c == '-' ? 1 : c == '0' ? 2 : digit ? 3 : 9; break;
    case 1: g->vs = c == '0' ? 2 : digit ? 3 : 9; break;
    case 2: g->vs = frac && c == '.' ? 4 : frac && (c == 'e' || c == 'E') ? 6 : 9; break;
    case 3: g->vs = digit ? 3 : frac && c == '.' ? 4 : frac && (c == 'e' || c == 'E') ? 6 : 9; break;
    case 4: g->vs = digit ? 5 : 9; break;
    case 5: g->vs = digit ? 5 : (c == 'e' || c == 'E') ? 6 : 9; break;
    case 6: g->vs = (c == '+' || c == '-') ? 7 : digit ? 8 : 9; break;
    case 7: case 8: g->vs = digit ? 8 : 9; break;
    default: g->vs = 9; break;
    }
    if (g->vs == 8 && ++g->ve > EXP_MAX_DIGITS) return false;
    /* Stay completable within the cap (a '.' or 'e' needs a digit after). */
    bool open_end = g->vs == 1 || g->vs == 4 || g->vs == 6 || g->vs == 7;
    if (open_end && g->vn + 1 > (g->vk == PT_INT ? INT_MAX_LEN : SCALAR_MAX)) return false;
    return g->vs != 9;
}

static bool scalar_complete(const dsml_gram *g)
{
    if (g->vk == PT_BOOL) return (g->vs == 1 && g->vn == 4) || (g->vs == 2 && g->vn == 5);
    return g->vs == 2 || g->vs == 3 || g->vs == 5 || g->vs == 8;
}

static gram_ev open_tag_done(dsml_gram *g, const dsml_schema *s)
{
    if (g->tag == TAG_INVOKE) {
        if (!(g->have & HAVE_NAME)) return fail(g, GE_NONAME_INVOKE);
        if (g->level == 1) g->ncalls++; /* lenient: the previous invoke was left open */
        g->level = 1;
        g->used = 0;
        g->st = G_WS;
        g->ws = 0;
        return EV_INVOKE_OPEN;
    }
    if (!(g->have & HAVE_NAME)) return fail(g, GE_NONAME_PARAM);
    if (!(g->have & HAVE_STRING)) STRICT_ONLY(g);
    if (g->cur >= 0) g->used |= 1ull << g->cur;
    g->vk = g->vs = g->vn = g->ve = 0;
    uint8_t pt = param_type(g, s);
    if ((g->have & HAVE_STRING) && !(g->have & STRING_TRUE) && (pt == PT_INT || pt == PT_NUM || pt == PT_BOOL))
        g->vk = pt;
    g->st = G_VALUE;
    g->pos = 0;
    g->hold = 0;
    return EV_PARAM_OPEN;
}

static gram_ev close_tail(dsml_gram *g, unsigned char c, bool in_value)
{
    if (c == '>') {
        if (in_value) {
            g->st = G_WS;
            g->ws = 0;
            g->pos = 0;
            g->hold = 0;
            return EV_PARAM_CLOSE;
        }
        if (g->tag == TAG_INVOKE) {
            g->ncalls++;
            g->level = 0;
            g->tool = -1;
            g->dev = 0;
            g->st = G_WS;
            g->ws = 0;
            return EV_INVOKE_CLOSE;
        }
        if (g->level == 1) g->ncalls++;
        if (g->ncalls == 0) return fail(g, GE_EMPTY);
        g->level = 0;
        g->st = G_DONE;
        g->ws = 0;
        return EV_DONE;
    }
    if (g->strict) return EV_REJECT;
    if (in_value) g->hold++;
    if (g->bpos == 0 && is_ws(c)) return in_value ? EV_CONTENT : EV_STRUCT;
    if (!g->sep && (unsigned char)DSML_BAR[g->bpos] == c) {
        deviate(g);
        if (++g->bpos == 3) {
            g->bpos = 0;
            g->sep = 1;
        }
        return in_value ? EV_CONTENT : EV_STRUCT;
    }
    return fail(g, GE_TAG);
}

gram_ev gram_step(dsml_gram *g, const dsml_schema *s, unsigned char c)
{
    switch (g->st) {
    case G_THINK: {
        g->win = g->win << 8 | c;
        uint64_t w7 = g->win & 0x00ffffffffffffffull;
        if (w7 == win_bar_dsml || w7 == win_dsml_bar) return fail(g, GE_IN_THINK);
        if ((unsigned char)think_end[g->pos] == c) g->pos++;
        else g->pos = c == '<';
        if (g->pos == 8) {
            g->st = G_TEXT;
            g->pos = 0;
            g->ws = 0;
            g->hold = 0;
            return EV_THINK_END;
        }
        g->hold = g->pos;
        return EV_CONTENT;
    }
    case G_TEXT:
        return step_text(g, c);
    case G_CAND_DELIM:
        if (is_ws(c)) {
            if (c != ' ') STRICT_ONLY(g);
            g->st = G_ATTR_SEP;
            g->tag = TAG_INVOKE;
            g->close = 0;
            g->level = 0;
            g->implicit = 1;
            g->ncalls = 0;
            g->sep = 1;
            g->have = 0;
            g->tool = g->cur = -1;
            g->pos = 0;
            g->hold = 0;
            g->ws = 0;
            g->dev = 0;
            return EV_BLOCK;
        }
        return fail(g, c == '>' ? GE_NONAME_INVOKE : GE_STRAY);
    case G_WS:
        if (is_ws(c)) {
            if (++g->ws > STRICT_WS_MAX) STRICT_ONLY(g);
            if (g->ws > 60000) g->ws = 60000;
            return EV_STRUCT;
        }
        if (c == '<') {
            g->st = G_LT;
            return EV_STRUCT;
        }
        return fail(g, GE_TEXT);
    case G_LT:
        if (c == '/') {
            if (g->level == 0 && g->ncalls == 0 && g->strict) return EV_REJECT;
            if (g->level == 1 && s && g->tool >= 0 && (s->tools[g->tool].required & ~g->used) && g->strict)
                return EV_REJECT;
            g->st = G_D;
            g->close = 1;
            g->pos = 0;
            return EV_STRUCT;
        }
        if ((unsigned char)DSML_D[0] == c) {
            if (g->strict && g->level == 1 && !param_left(g, s)) return EV_REJECT;
            g->st = G_D;
            g->close = 0;
            g->pos = 1;
            return EV_STRUCT;
        }
        return fail(g, GE_TAG);
    case G_D:
        if ((unsigned char)DSML_D[g->pos] != c) return fail(g, GE_TAG);
        if (++g->pos == DSML_D_LEN) {
            g->st = G_TAGNAME;
            g->pos = 0;
            g->tag = TAG_NONE;
        }
        return EV_STRUCT;
    case G_TAGNAME: {
        if (g->pos == 0) {
            /* The three names differ in their first byte. */
            uint8_t t = c == 't' ? TAG_TOOL_CALLS : c == 'i' ? TAG_INVOKE : c == 'p' ? TAG_PARAM : TAG_NONE;
            uint8_t canon = g->close ? (g->level ? TAG_INVOKE : TAG_TOOL_CALLS)
                                     : (g->level ? TAG_PARAM : TAG_INVOKE);
            bool alt = g->level == 1 && ((g->close && t == TAG_TOOL_CALLS) || (!g->close && t == TAG_INVOKE));
            if (t == TAG_NONE || (t != canon && !alt)) return fail(g, GE_TAG);
            if (t != canon) STRICT_ONLY(g);
            g->tag = t;
        }
        if ((unsigned char)tag_names[g->tag][g->pos] != c) return fail(g, GE_TAG);
        if (++g->pos == tag_len[g->tag]) {
            g->pos = 0;
            if (g->close) {
                g->st = G_CLOSE_TAIL;
                g->sep = 0;
                g->bpos = 0;
            } else {
                g->st = G_TAGEND;
            }
        }
        return EV_STRUCT;
    }
    case G_TAGEND:
        if (is_ws(c)) {
            if (c != ' ') STRICT_ONLY(g);
            g->st = G_ATTR_SEP;
            g->sep = 1;
            g->have = 0;
            g->cur = -1;
            if (g->tag == TAG_INVOKE) g->tool = -1;
            return EV_STRUCT;
        }
        if (c == '>') return fail(g, g->tag == TAG_INVOKE ? GE_NONAME_INVOKE : GE_NONAME_PARAM);
        return fail(g, GE_TAG);
    case G_CLOSE_TAIL:
        return close_tail(g, c, false);
    case G_ATTR_SEP: {
        bool all_given = g->tag == TAG_INVOKE ? (g->have & HAVE_NAME) : (g->have & HAVE_STRING);
        if (is_ws(c)) {
            if (c != ' ' || g->sep || all_given) STRICT_ONLY(g);
            if (g->sep < 255) g->sep++;
            return EV_STRUCT;
        }
        if (c == '>') {
            if (g->sep) STRICT_ONLY(g);
            return open_tag_done(g, s);
        }
        if (is_key_char(c)) {
            if (g->sep != 1 || all_given) STRICT_ONLY(g);
            /* Strict order: name, then (parameters) string. */
            char want = (g->have & HAVE_NAME) ? 's' : 'n';
            if (c != want) STRICT_ONLY(g);
            g->st = G_ATTR_KEY;
            g->keylen = 1;
            g->keybuf[0] = (char)c;
            return EV_STRUCT;
        }
        return fail(g, GE_ATTR);
    }
    case G_ATTR_KEY:
        if (is_key_char(c)) {
            if (g->keylen < sizeof g->keybuf) g->keybuf[g->keylen] = (char)c;
            if (g->keylen < 255) g->keylen++;
            const char *want = (g->have & HAVE_NAME) ? "string" : "name";
            if (g->keylen > strlen(want) || want[g->keylen - 1] != (char)c) STRICT_ONLY(g);
            return EV_STRUCT;
        }
        if (c == '=' || is_ws(c)) {
            if (g->keylen == 4 && !memcmp(g->keybuf, "name", 4)) g->key = KEY_NAME;
            else if (g->keylen == 6 && !memcmp(g->keybuf, "string", 6) && g->tag == TAG_PARAM) g->key = KEY_STRING;
            else g->key = KEY_OTHER;
            if (g->key == KEY_OTHER || (g->key == KEY_STRING && !(g->have & HAVE_NAME))) STRICT_ONLY(g);
            if ((g->key == KEY_NAME && (g->have & HAVE_NAME)) || (g->key == KEY_STRING && (g->have & HAVE_STRING)))
                return fail(g, GE_DUP_ATTR);
            if (c != '=') STRICT_ONLY(g);
            g->st = c == '=' ? G_ATTR_Q : G_ATTR_EQ;
            return EV_STRUCT;
        }
        return fail(g, GE_ATTR);
    case G_ATTR_EQ:
        if (is_ws(c)) return EV_STRUCT;
        if (c == '=') {
            g->st = G_ATTR_Q;
            return EV_STRUCT;
        }
        return fail(g, GE_ATTR);
    case G_ATTR_Q:
        if (is_ws(c)) {
            STRICT_ONLY(g);
            return EV_STRUCT;
        }
        if (c != '"') return fail(g, GE_ATTR);
        g->st = G_ATTR_VAL;
        g->svlen = 0;
        if (g->key == KEY_NAME) {
            name_range(g, s);
            return EV_NAME_BEGIN;
        }
        return EV_STRUCT;
    case G_ATTR_VAL:
        if (c == '"') {
            g->st = G_ATTR_SEP;
            g->sep = 0;
            if (g->key == KEY_NAME) {
                if (g->nlen == 0) return fail(g, g->tag == TAG_INVOKE ? GE_NONAME_INVOKE : GE_NONAME_PARAM);
                g->have |= HAVE_NAME;
                int k = names_known(g, s) ? name_exact(g, s) : -1;
                if (names_known(g, s) && k < 0) STRICT_ONLY(g);
                if (g->tag == TAG_INVOKE) g->tool = (int16_t)k;
                else g->cur = (int16_t)k;
                if (s && g->tag == TAG_PARAM && g->tool < 0) deviate(g);
            } else if (g->key == KEY_STRING) {
                g->have |= HAVE_STRING;
                bool t = g->svlen == 4 && !memcmp(g->sval, "true", 4);
                bool f = g->svlen == 5 && !memcmp(g->sval, "false", 5);
                if (t) g->have |= STRING_TRUE;
                uint8_t pt = param_type(g, s);
                if (!(t || f) || (PT_IS_STRINGY(pt) && !t) || (PT_IS_JSON(pt) && !f)) STRICT_ONLY(g);
            }
            return EV_STRUCT;
        }
        if (c == '<' || c == '>' || c == '\n' || c == '\r') return fail(g, GE_ATTR);
        if (g->key == KEY_NAME) {
            if (g->nlen >= NAME_MAX_LEN) return fail(g, GE_ATTR);
            if (names_known(g, s) && (g->lo >= g->hi || !name_narrow(g, s, c))) {
                STRICT_ONLY(g);
                g->lo = g->hi = 0;
            }
            g->nlen++;
            return EV_ATTRV;
        }
        if (g->key == KEY_STRING) {
            if (g->svlen < sizeof g->sval) g->sval[g->svlen] = (char)c;
            if (g->svlen < 255) g->svlen++;
            if (g->strict) {
                uint8_t pt = param_type(g, s);
                bool pt_ok = g->svlen <= 4 && !memcmp("true", g->sval, g->svlen) && !PT_IS_JSON(pt);
                bool pf_ok = g->svlen <= 5 && !memcmp("false", g->sval, g->svlen) && !PT_IS_STRINGY(pt);
                if (!pt_ok && !pf_ok) return EV_REJECT;
            }
            return EV_STRUCT;
        }
        return EV_STRUCT;
    case G_VALUE:
        if (g->pos == VALUE_CLOSE_LEN) return close_tail(g, c, true);
        if (g->pos > 0) {
            if ((unsigned char)value_close[g->pos] == c) {
                g->pos++;
                g->hold++;
                if (g->pos == VALUE_CLOSE_LEN) {
                    g->sep = 0;
                    g->bpos = 0;
                }
                return EV_CONTENT;
            }
            /* A scalar holds no '<': it can only have been a close tag. */
            if (g->pos >= VALUE_CLOSE_COMMIT || g->vk) {
                if (g->strict) return EV_REJECT;
                if (g->vk) {
                    deviate(g);
                    g->vk = 0;
                }
            }
            g->pos = 0;
        }
        if (c == '<') {
            if (g->vk && !scalar_complete(g)) {
                STRICT_ONLY(g);
                g->vk = 0;
            }
            g->pos = 1;
            g->hold = 1;
            return EV_CONTENT;
        }
        g->hold = 0;
        if (g->vk && !scalar_step(g, c)) {
            STRICT_ONLY(g);
            g->vk = 0;
        }
        return EV_CONTENT;
    case G_DONE:
        if (is_ws(c)) return EV_STRUCT;
        return g->strict ? EV_REJECT : EV_STRUCT;
    case G_ERROR:
    default:
        return EV_ERROR;
    }
}

gram_ev gram_eos(dsml_gram *g)
{
    switch (g->st) {
    case G_THINK:
        return EV_CONTENT;
    case G_TEXT:
        for (int k = 0; k < L_COUNT; k++)
            if ((g->lits >> k & 1) && g->pos >= text_lit_commit[k] && g->pos > 0) return fail(g, GE_INCOMPLETE);
        return EV_CONTENT;
    case G_DONE:
        return EV_DONE;
    case G_ERROR:
        return EV_ERROR;
    case G_WS:
        if (g->implicit && g->level == 0 && g->ncalls > 0) {
            g->st = G_DONE;
            return EV_DONE;
        }
        return fail(g, GE_INCOMPLETE);
    default:
        return fail(g, GE_INCOMPLETE);
    }
}

bool gram_constrained(const dsml_gram *g)
{
    if (g->dev) return false;
    switch (g->st) {
    case G_TEXT:
        if (g->pos == 0) return false;
        for (int k = 0; k < L_COUNT; k++)
            if ((g->lits >> k & 1) && (OPENERS >> k & 1) && g->pos >= text_lit_commit[k]) return true;
        return false;
    case G_CAND_DELIM: case G_WS: case G_LT: case G_D: case G_TAGNAME: case G_TAGEND:
    case G_CLOSE_TAIL: case G_ATTR_SEP: case G_ATTR_KEY: case G_ATTR_EQ: case G_ATTR_Q: case G_ATTR_VAL:
        return true;
    case G_VALUE:
        return g->vk || g->pos >= VALUE_CLOSE_COMMIT;
    default:
        return false;
    }
}

bool gram_greedy(const dsml_gram *g)
{
    switch (g->st) {
    case G_TEXT:
        return g->pos >= 2 && (g->lits & OPENERS);
    case G_CAND_DELIM: case G_WS: case G_LT: case G_D: case G_TAGNAME: case G_TAGEND:
    case G_CLOSE_TAIL: case G_ATTR_SEP: case G_ATTR_KEY: case G_ATTR_EQ: case G_ATTR_Q: case G_ATTR_VAL:
        return true;
    case G_VALUE:
        return g->pos >= 2;
    default:
        return false;
    }
}

const char *gram_error_text(int err)
{
    switch (err) {
    case GE_STRAY: return "DSML markup outside a valid tool_calls block";
    case GE_TAG: return "unexpected DSML tag";
    case GE_TEXT: return "unexpected text between DSML tags";
    case GE_NONAME_INVOKE: return "tool invoke without name";
    case GE_NONAME_PARAM: return "tool parameter without name";
    case GE_ATTR: return "malformed attribute in a DSML tag";
    case GE_DUP_ATTR: return "repeated attribute in a DSML tag";
    case GE_IN_THINK: return "tool calls are not allowed inside <think></think>; finish thinking first";
    case GE_EMPTY: return "empty tool call block";
    case GE_INCOMPLETE: return "incomplete DSML tool call";
    case GE_TOO_LONG: return "tool call block too large";
    default: return "";
    }
}
