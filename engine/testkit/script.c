/* script.c — the scripted test engine (`--engine script:FILE`).
 *
 * A backend that replays assistant replies from a JSON Lines file instead
 * of computing them, so the agent, the tools and the front ends can be
 * tested end to end, deterministically and in milliseconds, through the
 * very same engine API, sampler and DSML parser. One object per line, one
 * line per generation call, in order:
 *
 *   {"assistant": "plan</think>Reading it.\n\n<｜DSML｜tool_calls>…"}
 *
 * Keys:
 *   assistant         the reply, everything after the assistant prefix.
 *                     Tokenized with the model's tokenizer as trusted text,
 *                     so "</think>" and "｜DSML｜" become the special tokens
 *                     the model itself would emit; EOS follows.
 *   delay_ms          time each generated token takes (tests of Ctrl+C).
 *   prefill_delay_ms  time each token takes to read in the prefill that
 *                     starts this reply (the one ending with the assistant
 *                     prefix), until a cancel stops such a read.
 *   expect            text that must occur in the prompt since the last
 *                     reply (the user turn or tool results); when it does
 *                     not, the reply is "script: expected …" instead.
 *   match             text that picks this entry by the prompt instead of
 *                     by order: whenever the whole prompt being answered
 *                     contains it, this entry is the reply (the first such
 *                     entry in the file wins), as often as that happens,
 *                     and the entries in order stay where they were. For
 *                     the side requests real clients make (a title, a
 *                     summary) at times a test cannot predict.
 * Blank lines and lines starting with '#' are skipped. Entries without
 * "match" are replayed in order; after the last one every reply is empty
 * (EOS at once).
 *
 * A generation call starts when an evaluation ends with the assistant
 * prefix (<｜Assistant｜> then <think> or </think>). The logits put the
 * scripted token 100 nats above every other one, so any sampler settings
 * pick it; whatever is actually sampled, the script moves on. The -m model
 * is needed for its tokenizer only. A snapshot's payload is the cursor.
 */
#include "engine/backend.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    ds4_tokens toks;   /* reply tokens followed by EOS */
    int delay_ms;
    int prefill_delay_ms;
    char *expect;
    char *match;
} script_entry;

typedef struct {
    script_entry *entries;
    size_t n;
    int32_t eos, assistant, think, think_end;
} script_engine;

typedef struct {
    ds4_engine *e;
    script_engine *se;
    size_t n_tokens;     /* tokens the state holds */
    size_t next;         /* index of the next entry to start */
    long cur;            /* entry being replayed, -1 none */
    size_t k;            /* tokens of it already produced */
    size_t started_at;   /* n_tokens when cur started */
    ds4_tokens override; /* the reply instead of cur's, when non-empty */
    long delay_spent;    /* entry whose prompt delay a cancel already ended */
} script_state;

static void entries_free(script_engine *se)
{
    for (size_t i = 0; i < se->n; i++) {
        ds4_tokens_free(&se->entries[i].toks);
        free(se->entries[i].expect);
        free(se->entries[i].match);
    }
    free(se->entries);
}

static int int_field(struct json_object *o, const char *key, int *out, size_t line, ds4_error *err)
{
    struct json_object *v;
    if (!json_object_object_get_ex(o, key, &v)) return 0;
    if (!json_object_is_type(v, json_type_int) || json_object_get_int(v) < 0 || json_object_get_int(v) > 600000)
        return ds4_error_set(err, "script line %zu: \"%s\" must be a number of milliseconds", line, key);
    *out = json_object_get_int(v);
    return 0;
}

static int parse_line(ds4_engine *e, script_engine *se, const char *text, size_t line, ds4_error *err)
{
    struct json_tokener *tok = json_tokener_new();
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)strlen(text));
    enum json_tokener_error jerr = json_tokener_get_error(tok);
    json_tokener_free(tok);
    if (!o || jerr != json_tokener_success || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return ds4_error_set(err, "script line %zu is not a JSON object%s%s", line,
                             jerr != json_tokener_success ? ": " : "",
                             jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "");
    }
    struct json_object *v;
    if (!json_object_object_get_ex(o, "assistant", &v) || !json_object_is_type(v, json_type_string)) {
        json_object_put(o);
        return ds4_error_set(err, "script line %zu has no \"assistant\" text", line);
    }
    json_object_object_foreach(o, key, val) {
        (void)val;
        if (strcmp(key, "assistant") && strcmp(key, "delay_ms") && strcmp(key, "prefill_delay_ms") &&
            strcmp(key, "expect") && strcmp(key, "match")) {
            ds4_error_set(err, "script line %zu: unknown key \"%s\"", line, key);
            json_object_put(o);
            return -1;
        }
    }
    script_entry en = { 0 };
    const char *reply = json_object_get_string(v);
    ds4_tokenize_trusted(e->tok, reply, (size_t)json_object_get_string_len(v), &en.toks);
    ds4_tokens_push(&en.toks, se->eos);
    if (int_field(o, "delay_ms", &en.delay_ms, line, err) || int_field(o, "prefill_delay_ms", &en.prefill_delay_ms, line, err)) {
        ds4_tokens_free(&en.toks);
        json_object_put(o);
        return -1;
    }
    if (json_object_object_get_ex(o, "expect", &v)) {
        if (!json_object_is_type(v, json_type_string)) {
            ds4_tokens_free(&en.toks);
            json_object_put(o);
            return ds4_error_set(err, "script line %zu: \"expect\" must be text", line);
        }
        en.expect = xstrdup(json_object_get_string(v));
    }
    if (json_object_object_get_ex(o, "match", &v)) {
        if (!json_object_is_type(v, json_type_string) || !json_object_get_string_len(v)) {
            ds4_tokens_free(&en.toks);
            free(en.expect);
            json_object_put(o);
            return ds4_error_set(err, "script line %zu: \"match\" must be text", line);
        }
        en.match = xstrdup(json_object_get_string(v));
    }
    json_object_put(o);
    se->entries = xrealloc(se->entries, (se->n + 1) * sizeof *se->entries);
    se->entries[se->n++] = en;
    return 0;
}

static int script_check(const ds4_engine_options *opt, ds4_error *err)
{
    if (!opt->script_path) return ds4_error_set(err, "the script engine needs a script file (--engine script:FILE)");
    return 0;
}

static int script_open(ds4_engine *e, ds4_error *err)
{
    size_t len;
    char *text = file_read_all(e->script_path, &len);
    if (!text) return ds4_error_set(err, "cannot read script %s: %s", e->script_path, strerror(errno));
    script_engine *se = xcalloc(1, sizeof *se);
    se->eos = ds4_token_special(e->tok, DS4_TOK_EOS);
    se->assistant = ds4_token_special(e->tok, DS4_TOK_ASSISTANT);
    se->think = ds4_token_special(e->tok, DS4_TOK_THINK);
    se->think_end = ds4_token_special(e->tok, DS4_TOK_THINK_END);
    size_t line = 0;
    int rc = 0;
    /* strtok_r would skip empty lines and so miscount; walk by hand. */
    for (char *p = text; rc == 0 && p && *p; ) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        line++;
        char *s = p;
        while (*s == ' ' || *s == '\t' || *s == '\r') s++;
        if (*s && *s != '#') rc = parse_line(e, se, s, line, err);
        p = nl ? nl + 1 : NULL;
    }
    free(text);
    if (rc != 0) {
        entries_free(se);
        free(se);
        return -1;
    }
    e->impl = se;
    return 0;
}

static void script_close(ds4_engine *e)
{
    script_engine *se = e->impl;
    entries_free(se);
    free(se);
    e->impl = NULL;
}

static void script_describe(const ds4_engine *e, ds4_model_info *info)
{
    const script_engine *se = e->impl;
    snprintf(info->device_name, sizeof info->device_name, "script (%zu replies)", se->n);
}

static uint64_t script_session_bytes(const ds4_engine *e, int n_ctx)
{
    (void)e;
    return (uint64_t)n_ctx * sizeof(int32_t);
}

static void *script_state_new(ds4_engine *e, int n_ctx, ds4_error *err)
{
    (void)n_ctx;
    (void)err;
    script_state *st = xcalloc(1, sizeof *st);
    st->e = e;
    st->se = e->impl;
    st->cur = -1;
    st->delay_spent = -1;
    return st;
}

static void script_state_free(void *p)
{
    script_state *st = p;
    ds4_tokens_free(&st->override);
    free(st);
}

/* Sleeps ms, polling cancel every millisecond; true when cancelled. */
static bool nap(int ms, const ds4_callbacks *cb)
{
    for (int i = 0; i < ms; i++) {
        if (cb && cb->cancel && cb->cancel(cb->ud)) return true;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    return false;
}

static bool cancelled(const ds4_callbacks *cb) { return cb && cb->cancel && cb->cancel(cb->ud); }

/* The next entry in order from i on (entries with "match" are not in the order). */
static size_t in_order(const script_engine *se, size_t i)
{
    while (i < se->n && se->entries[i].match) i++;
    return i;
}

static const script_entry *next_entry(const script_state *st)
{
    size_t i = in_order(st->se, st->next);
    return i < st->se->n ? &st->se->entries[i] : NULL;
}

/* The prompt bytes from the previous reply's EOS (or the start, when
 * whole) to end. */
static char *prompt_text(const script_state *st, const int32_t *tokens, size_t end, bool whole)
{
    size_t from = whole ? 0 : end;
    while (from > 0 && tokens[from - 1] != st->se->eos) from--;
    strbuf b = { 0 };
    for (size_t i = from; i < end; i++) {
        size_t len;
        const char *s = ds4_token_bytes(st->e->tok, tokens[i], &len);
        if (s) sb_append(&b, s, len);
    }
    return sb_take(&b);
}

/* A generation call begins: pick the reply (or replay the current one when
 * the same prompt is evaluated again). */
static void start_reply(script_state *st, const int32_t *tokens)
{
    if (st->cur >= 0 && st->started_at == st->n_tokens) {
        st->k = 0;
        return;
    }
    st->cur = -1;
    bool any_match = false;
    for (size_t i = 0; i < st->se->n && !any_match; i++) any_match = st->se->entries[i].match != NULL;
    if (any_match) {
        char *prompt = prompt_text(st, tokens, st->n_tokens, true);
        for (size_t i = 0; i < st->se->n && st->cur < 0; i++)
            if (st->se->entries[i].match && strstr(prompt, st->se->entries[i].match)) st->cur = (long)i;
        free(prompt);
    }
    if (st->cur < 0) {
        st->next = in_order(st->se, st->next);
        st->cur = st->next < st->se->n ? (long)st->next++ : -1;
    }
    st->k = 0;
    st->started_at = st->n_tokens;
    ds4_tokens_truncate(&st->override, 0);
    if (st->cur < 0) return;
    const script_entry *en = &st->se->entries[st->cur];
    if (!en->expect) return;
    char *prompt = prompt_text(st, tokens, st->n_tokens, false);
    if (!strstr(prompt, en->expect)) {
        /* Say so in the reply, where a test sees it. */
        char msg[512];
        snprintf(msg, sizeof msg, "script: expected \"%.200s\" in the prompt, not found", en->expect);
        ds4_tokenize(st->e->tok, msg, strlen(msg), &st->override);
        ds4_tokens_push(&st->override, st->se->eos);
    }
    free(prompt);
}

static void fill_logits(const script_state *st, float *logits)
{
    int n = st->e->n_vocab;
    int32_t want = st->se->eos;
    if (st->cur >= 0) {
        const ds4_tokens *r = st->override.n ? &st->override : &st->se->entries[st->cur].toks;
        if (st->k < r->n) want = r->ids[st->k];
    }
    for (int i = 0; i < n; i++) logits[i] = -50.0f;
    logits[want] = 50.0f;
}

static bool ends_with_assistant_prefix(const script_state *st, const int32_t *tokens, size_t n)
{
    if (n >= 2 && tokens[n - 2] == st->se->assistant &&
        (tokens[n - 1] == st->se->think || tokens[n - 1] == st->se->think_end))
        return true;
    return n >= 1 && tokens[n - 1] == st->se->assistant;
}

static long script_eval(void *p, const int32_t *tokens, size_t pos, size_t n, float *logits,
                        const ds4_callbacks *cb, ds4_error *err)
{
    (void)err;
    script_state *st = p;
    st->n_tokens = pos;
    /* Decoding: the token right after what this reply produced so far. */
    bool decoding = n == 1 && st->cur >= 0 && pos == st->started_at + st->k;
    int delay = 0;
    if (decoding) {
        delay = st->se->entries[st->cur].delay_ms;
    } else if (ends_with_assistant_prefix(st, tokens, pos + n)) {
        /* only the read that starts a reply is slow, not the system
         * prompt read at start-up nor a rebuild */
        const script_entry *en = next_entry(st);
        delay = en && st->delay_spent != (long)st->next ? en->prefill_delay_ms : 0;
    }
    size_t done = 0;
    while (done < n) {
        if (cancelled(cb) || (delay && nap(delay, cb))) {
            /* A slow prompt tests Ctrl+C once; reading the rest is quick. */
            if (!decoding) st->delay_spent = (long)st->next;
            break;
        }
        done++;
        st->n_tokens = pos + done;
        if (decoding) st->k++;
        if (cb && cb->progress && !decoding) cb->progress(cb->ud, (int)done, (int)n, 0);
    }
    if (done == 0) return 0;
    if (!decoding && ends_with_assistant_prefix(st, tokens, st->n_tokens)) start_reply(st, tokens);
    fill_logits(st, logits);
    return (long)done;
}

static int script_rewind(void *p, size_t n)
{
    script_state *st = p;
    if (st->cur >= 0) st->k = n >= st->started_at ? n - st->started_at : 0;
    st->n_tokens = n;
    return 0;
}

static void script_reset(void *p)
{
    script_state *st = p;
    st->n_tokens = 0;
}

static uint64_t script_kv_bytes(void *p)
{
    const script_state *st = p;
    return st->n_tokens * sizeof(int32_t);
}

static int script_save(void *p, strbuf *out, ds4_error *err)
{
    (void)err;
    const script_state *st = p;
    sb_printf(out, "ds4cl-script 1 %zu %ld %zu %zu\n", st->next, st->cur, st->k, st->started_at);
    return 0;
}

static int script_load(void *p, const void *payload, size_t len, size_t n_tokens, ds4_error *err)
{
    script_state *st = p;
    char buf[128];
    if (len == 0 || len >= sizeof buf) return ds4_error_set(err, "script snapshot payload is damaged");
    memcpy(buf, payload, len);
    buf[len] = 0;
    size_t next, k, started;
    long cur;
    if (sscanf(buf, "ds4cl-script 1 %zu %ld %zu %zu", &next, &cur, &k, &started) != 4 || next > st->se->n ||
        cur >= (long)st->se->n || cur < -1)
        return ds4_error_set(err, "script snapshot payload does not fit this script");
    st->next = next;
    st->cur = cur;
    st->k = k;
    st->started_at = started;
    st->n_tokens = n_tokens;
    return 0;
}

static const ds4_backend_ops script_backend = {
    .id = DS4_BACKEND_SCRIPT,
    .name = "script",
    .needs_model = false,
    .check = script_check,
    .open = script_open,
    .close = script_close,
    .describe = script_describe,
    .session_bytes = script_session_bytes,
    .session = { .state_new = script_state_new,
                 .state_free = script_state_free,
                 .eval = script_eval,
                 .rewind = script_rewind,
                 .reset = script_reset,
                 .kv_bytes = script_kv_bytes,
                 .save = script_save,
                 .load = script_load },
};
DS4_BACKEND_REGISTER(script_backend)
