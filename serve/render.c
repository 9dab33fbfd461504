/* render.c — a normalized conversation as the model's token transcript,
 * laid out as the agent lays out its own (engine/chat.c, agent/prompt.c):
 * BOS, the tool block, the system text, then user turns, assistant turns
 * and one tool message per call block ("Tool result N (name):\n…"),
 * with later system messages as plain text where they stand (DS4 has no
 * system role marker), ending with the assistant prefix of the reply to
 * sample.
 *
 * Assistant turns the server wrote come back as the very tokens sampled
 * (the reply memory, keyed by the tokens before the reply and by what a
 * client can send back of it: the visible text and the calls); others are rendered in the canonical DSML shape of
 * the tool block, markup as trusted text and values as untrusted, so a
 * value can never become a control token. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

#define MEMO_MAX 1024
#define MEMO_MAGIC 0x31534d454d534453ull /* "DSSMEMS1" */

typedef struct {
    uint64_t key;
    uint64_t used;
    int32_t *ids;
    size_t n;
} memo_entry;

struct sv_memo {
    pthread_mutex_t mu;
    memo_entry *v;
    size_t n;
    uint64_t clock;
};

static uint64_t fnv(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator no byte string ends with */
}

/* A hash of the tokens before the reply, continued as they grow. */
typedef struct {
    uint64_t h;
    size_t n;
} ctx_hash;

static void ctx_hash_to(ctx_hash *c, const int32_t *ids, size_t n)
{
    if (!c->n && !c->h) c->h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)(ids + c->n);
    for (size_t i = 0; i < (n - c->n) * sizeof *ids; i++) c->h = (c->h ^ p[i]) * 0x100000001b3ull;
    c->n = n;
}

/* The key: what came before the reply (two conversations may well get the
 * same short answer, each after its own reasoning), its text and calls. */
static uint64_t memo_key(uint64_t before, const char *text, const sv_call *calls, size_t n_calls)
{
    uint64_t h = before;
    h = fnv(h, text ? text : "", text ? strlen(text) : 0);
    for (size_t i = 0; i < n_calls; i++) {
        h = fnv(h, calls[i].name, strlen(calls[i].name));
        h = fnv(h, calls[i].args, strlen(calls[i].args));
    }
    return h;
}

sv_memo *sv_memo_new(void)
{
    sv_memo *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void sv_memo_free(sv_memo *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) free(m->v[i].ids);
    free(m->v);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void memo_put_key(sv_memo *m, uint64_t key, const int32_t *ids, size_t n)
{
    memo_entry *slot = NULL;
    for (size_t i = 0; i < m->n && !slot; i++)
        if (m->v[i].key == key) slot = &m->v[i];
    if (!slot && m->n < MEMO_MAX) {
        if (!m->v) {
            m->v = xcalloc(MEMO_MAX, sizeof *m->v);
        }
        slot = &m->v[m->n++];
    }
    if (!slot) {
        slot = &m->v[0];
        for (size_t i = 1; i < m->n; i++)
            if (m->v[i].used < slot->used) slot = &m->v[i];
    }
    free(slot->ids);
    slot->ids = xmalloc((n ? n : 1) * sizeof *ids);
    memcpy(slot->ids, ids, n * sizeof *ids);
    slot->n = n;
    slot->key = key;
    slot->used = ++m->clock;
}

void sv_memo_put(sv_memo *m, const int32_t *before, size_t n_before, const char *text, const sv_call *calls,
                 size_t n_calls, const int32_t *ids, size_t n)
{
    ctx_hash c = { 0 };
    ctx_hash_to(&c, before, n_before);
    pthread_mutex_lock(&m->mu);
    memo_put_key(m, memo_key(c.h, text, calls, n_calls), ids, n);
    pthread_mutex_unlock(&m->mu);
}

/* Appends the remembered tokens; false when there are none. */
static bool memo_get(sv_memo *m, ctx_hash *before, const char *text, const sv_call *calls, size_t n_calls,
                     ds4_tokens *out)
{
    if (!m) return false;
    ctx_hash_to(before, out->ids, out->n);
    uint64_t key = memo_key(before->h, text, calls, n_calls);
    bool hit = false;
    pthread_mutex_lock(&m->mu);
    for (size_t i = 0; i < m->n && !hit; i++) {
        if (m->v[i].key != key) continue;
        ds4_tokens_append(out, m->v[i].ids, m->v[i].n);
        m->v[i].used = ++m->clock;
        hit = true;
    }
    pthread_mutex_unlock(&m->mu);
    return hit;
}

/* File: magic, count, then per entry key, length, ids (host order: the
 * file never leaves the machine that wrote it). */
int sv_memo_save(sv_memo *m, const char *path)
{
    strbuf b = { 0 };
    pthread_mutex_lock(&m->mu);
    uint64_t head[2] = { MEMO_MAGIC, m->n };
    sb_append(&b, (const char *)head, sizeof head);
    for (size_t i = 0; i < m->n; i++) {
        uint64_t h[2] = { m->v[i].key, m->v[i].n };
        sb_append(&b, (const char *)h, sizeof h);
        sb_append(&b, (const char *)m->v[i].ids, m->v[i].n * sizeof(int32_t));
    }
    pthread_mutex_unlock(&m->mu);
    int rc = file_write_atomic(path, b.s, b.len, 0600, true, NULL);
    sb_free(&b);
    return rc;
}

void sv_memo_load(sv_memo *m, const char *path)
{
    size_t len = 0;
    char *data = file_read_all(path, &len);
    if (!data) return;
    uint64_t head[2];
    size_t at = sizeof head;
    if (len >= at) memcpy(head, data, sizeof head);
    if (len >= at && head[0] == MEMO_MAGIC) {
        pthread_mutex_lock(&m->mu);
        for (uint64_t i = 0; i < head[1] && at + 16 <= len; i++) {
            uint64_t h[2];
            memcpy(h, data + at, sizeof h);
            at += sizeof h;
            if (h[1] > (len - at) / sizeof(int32_t)) break;
            int32_t *ids = xmalloc((h[1] ? h[1] : 1) * sizeof *ids);
            memcpy(ids, data + at, h[1] * sizeof *ids);
            at += h[1] * sizeof *ids;
            memo_put_key(m, h[0], ids, h[1]);
            free(ids);
        }
        pthread_mutex_unlock(&m->mu);
    }
    free(data);
}

/* ---- rendering ------------------------------------------------------------------------ */

static void trusted(const ds4_tokenizer *t, ds4_tokens *out, const char *s)
{
    ds4_tokenize_trusted(t, s, strlen(s), out);
}

static void plain(const ds4_tokenizer *t, ds4_tokens *out, const char *s, size_t n)
{
    if (n) ds4_tokenize(t, s, n, out);
}

#define D "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

/* A value with "</｜DSML｜parameter>" written as "&lt;/｜DSML｜parameter>",
 * as the tool block tells the model to. */
static void value_text(const ds4_tokenizer *t, ds4_tokens *out, const char *v)
{
    static const char close[] = "</" D "parameter>";
    strbuf b = { 0 };
    for (const char *hit; (hit = strstr(v, close)); v = hit + 1) {
        sb_append(&b, v, (size_t)(hit - v));
        sb_puts(&b, "&lt;");
    }
    sb_puts(&b, v);
    plain(t, out, sb_str(&b), b.len);
    sb_free(&b);
}

static void render_calls(const ds4_tokenizer *t, ds4_tokens *out, const sv_call *calls, size_t n)
{
    trusted(t, out, "<" D "tool_calls>\n");
    for (size_t i = 0; i < n; i++) {
        trusted(t, out, "<" D "invoke name=\"");
        plain(t, out, calls[i].name, strlen(calls[i].name));
        trusted(t, out, "\">\n");
        struct json_object *args = json_tokener_parse(calls[i].args);
        json_object_object_foreach(args, key, val)
        {
            bool str = json_object_is_type(val, json_type_string);
            trusted(t, out, "<" D "parameter name=\"");
            plain(t, out, key, strlen(key));
            trusted(t, out, str ? "\" string=\"true\">" : "\" string=\"false\">");
            value_text(t, out,
                       str ? json_object_get_string(val)
                           : json_object_to_json_string_ext(val, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
            trusted(t, out, "</" D "parameter>\n");
        }
        json_object_put(args);
        trusted(t, out, "</" D "invoke>\n");
    }
    trusted(t, out, "</" D "tool_calls>");
}

static void render_assistant(const ds4_tokenizer *t, sv_memo *memo, ctx_hash *before, const sv_msg *m,
                             ds4_tokens *out)
{
    if (memo_get(memo, before, m->text, m->calls, m->n_calls, out)) return;
    bool reasoned = m->reasoning && *m->reasoning;
    ds4_chat_assistant_prefix(t, out, reasoned ? DS4_THINK_HIGH : DS4_THINK_NONE);
    if (reasoned) {
        plain(t, out, m->reasoning, strlen(m->reasoning));
        ds4_tokens_push(out, ds4_token_special(t, DS4_TOK_THINK_END));
    }
    const char *text = m->text ? m->text : "";
    plain(t, out, text, strlen(text));
    if (m->n_calls) {
        if (*text) plain(t, out, "\n\n", 2);
        render_calls(t, out, m->calls, m->n_calls);
    }
    ds4_chat_assistant_end(t, out);
}

/* A system message among the turns. DS4's format has no system marker:
 * system text is plain text with no role token, so it is written as that,
 * where it stands; after a turn's own text (a user message or tool
 * results) it follows a blank line, so that it does not run on into it. */
static void render_system(const ds4_tokenizer *t, ds4_tokens *out, const char *text)
{
    if (!text || !*text) return;
    int32_t last = out->n ? out->ids[out->n - 1] : -1;
    bool after_text = last != ds4_token_special(t, DS4_TOK_EOS) && last != ds4_token_special(t, DS4_TOK_BOS);
    strbuf s = { 0 };
    if (after_text) sb_puts(&s, "\n\n");
    sb_puts(&s, text);
    ds4_chat_system(t, out, sb_str(&s), false);
    sb_free(&s);
}

/* The name of the call id answers, from the assistant message at a. */
static const char *call_name(const sv_msg *a, const char *id, size_t fallback)
{
    for (size_t i = 0; id && *id && i < a->n_calls; i++)
        if (a->calls[i].id && !strcmp(a->calls[i].id, id)) return a->calls[i].name;
    return fallback < a->n_calls ? a->calls[fallback].name : "tool";
}

int sv_render(const ds4_tokenizer *t, sv_memo *memo, const serve_request *r, bool think, ds4_tokens *out,
              ds4_error *err)
{
    (void)err;
    out->n = 0;
    ds4_think mode = think ? DS4_THINK_HIGH : DS4_THINK_NONE;
    ds4_chat_begin(t, out, mode);
    if (r->n_tools) {
        char *block = ds4_chat_tools_block((const char *const *)r->tools, r->n_tools);
        ds4_chat_system(t, out, block, true);
        free(block);
    }
    if (r->system.len) {
        strbuf s = { 0 };
        if (r->n_tools) sb_puts(&s, "\n\n");
        sb_append(&s, r->system.s, r->system.len);
        ds4_chat_system(t, out, sb_str(&s), false);
        sb_free(&s);
    }
    const sv_msg *asst = NULL;
    ctx_hash before = { 0 };
    for (size_t i = 0; i < r->n_msgs; i++) {
        const sv_msg *m = &r->msgs[i];
        if (m->role == SV_USER) {
            ds4_chat_user(t, out, m->text);
        } else if (m->role == SV_ASSISTANT) {
            render_assistant(t, memo, &before, m, out);
            asst = m;
        } else if (m->role == SV_SYSTEM) {
            render_system(t, out, m->text);
        } else {
            /* one tool message for the run of results, as the agent writes it */
            strbuf msg = { 0 };
            size_t k = 0;
            for (; i + k < r->n_msgs && r->msgs[i + k].role == SV_TOOL; k++) {
                const sv_msg *res = &r->msgs[i + k];
                sb_printf(&msg, "Tool result %zu (%s):\n%s\n", k + 1, asst ? call_name(asst, res->call_id, k) : "tool",
                          res->text ? res->text : "");
            }
            ds4_chat_tool_result(t, out, sb_str(&msg));
            sb_free(&msg);
            i += k - 1;
        }
    }
    ds4_chat_assistant_prefix(t, out, mode);
    return 0;
}
