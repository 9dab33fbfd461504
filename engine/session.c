/* session.c — a session is a token prefix plus the backend state that
 * evaluated it. sync() reuses the longest common prefix, so an agent whose
 * transcript only grows prefills only the new suffix; snapshots wrap the
 * backend's payload in a checked container. */
#include "engine/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ds4_session {
    ds4_engine *e;
    void *st;
    int n_ctx;
    ds4_tokens toks;
    float *logits;       /* n_vocab */
    size_t logits_at;    /* logits are valid after toks[logits_at-1]; 0 = none */
    size_t last_prefilled;
};

ds4_session *ds4_session_open(ds4_engine *e, int n_ctx, ds4_error *err)
{
    if (n_ctx < 1) {
        ds4_error_set(err, "context size must be positive (got %d)", n_ctx);
        return NULL;
    }
    if (e->opt.plan_only) {
        ds4_error_set(err, "this engine was opened to plan memory only; it cannot run a session");
        return NULL;
    }
    ds4_session *s = xcalloc(1, sizeof *s);
    s->e = e;
    s->n_ctx = n_ctx;
    s->logits = xcalloc((size_t)e->n_vocab, sizeof *s->logits);
    s->st = e->sess->state_new(e, n_ctx, err);
    if (!s->st) {
        free(s->logits);
        free(s);
        return NULL;
    }
    e->n_sessions++;
    return s;
}

void ds4_session_close(ds4_session *s)
{
    if (!s) return;
    s->e->sess->state_free(s->st);
    s->e->n_sessions--;
    ds4_tokens_free(&s->toks);
    free(s->logits);
    free(s);
}

static void reset_state(ds4_session *s)
{
    s->e->sess->reset(s->st);
    s->toks.n = 0;
    s->logits_at = 0;
}

/* After a failed rewind: the state of the snapshot base when its tokens
 * begin ids[0..n) (fewer than n), else nothing. Returns the tokens kept. */
static size_t start_from_base(ds4_session *s, const int32_t *ids, size_t n, const void *base, size_t base_len)
{
    ds4_error ignored = { "" };
    if (base && ds4_session_restore(s, base, base_len, &ignored) == 0 && s->toks.n < n &&
        !memcmp(s->toks.ids, ids, s->toks.n * sizeof *ids))
        return s->toks.n;
    reset_state(s);
    return 0;
}

static size_t snapshot_tokens_begin(const void *base, size_t base_len, const int32_t *ids, size_t n);

ds4_status ds4_session_sync(ds4_session *s, const int32_t *ids, size_t n,
                            const ds4_callbacks *cb, ds4_error *err)
{
    return ds4_session_sync_from(s, ids, n, NULL, 0, cb, err);
}

ds4_status ds4_session_sync_from(ds4_session *s, const int32_t *ids, size_t n, const void *base, size_t base_len,
                                 const ds4_callbacks *cb, ds4_error *err)
{
    s->last_prefilled = 0;
    if (n > (size_t)s->n_ctx) {
        ds4_error_set(err, "%zu tokens do not fit the context of %d", n, s->n_ctx);
        return DS4_ERROR;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->e->n_vocab) {
            ds4_error_set(err, "token id %d at position %zu is outside the vocabulary (%d)",
                          ids[i], i, s->e->n_vocab);
            return DS4_ERROR;
        }
    }
    if (n == 0) {
        reset_state(s);
        return DS4_OK;
    }
    size_t keep = 0;
    while (keep < s->toks.n && keep < n && s->toks.ids[keep] == ids[keep]) keep++;
    if (keep == n && keep == s->toks.n && s->logits_at == n) return DS4_OK;
    /* The logits of the last token must be recomputed when the new prefix
     * ends inside (or exactly at the end of) the cached one without them. */
    if (keep == n) keep = n - 1;
    /* A base further along than what the session shares with ids (an
     * empty session: a cached system prompt) saves reading its tokens. A
     * restore that fails leaves the session as it was. */
    if (base && snapshot_tokens_begin(base, base_len, ids, n) > keep) {
        ds4_error ignored = { "" };
        if (ds4_session_restore(s, base, base_len, &ignored) == 0) keep = s->toks.n;
    }
    if (keep < s->toks.n) {
        if (!s->e->sess->rewind || s->e->sess->rewind(s->st, keep) != 0)
            keep = start_from_base(s, ids, n, base, base_len);
        s->toks.n = keep;
        if (s->logits_at > keep) s->logits_at = 0;
    }
    long done = s->e->sess->eval(s->st, ids, keep, n - keep, s->logits, cb, err);
    if (done < 0) {
        reset_state(s);
        return DS4_ERROR;
    }
    ds4_tokens_append(&s->toks, ids + keep, (size_t)done);
    s->last_prefilled = (size_t)done;
    if (done > 0) s->logits_at = s->toks.n;
    return (size_t)done < n - keep ? DS4_INTERRUPTED : DS4_OK;
}

ds4_status ds4_session_eval(ds4_session *s, int32_t id, const ds4_callbacks *cb, ds4_error *err)
{
    if (s->toks.n + 1 > (size_t)s->n_ctx) {
        ds4_error_set(err, "the context of %d tokens is full", s->n_ctx);
        return DS4_ERROR;
    }
    if (id < 0 || id >= s->e->n_vocab) {
        ds4_error_set(err, "token id %d is outside the vocabulary (%d)", id, s->e->n_vocab);
        return DS4_ERROR;
    }
    ds4_tokens_push(&s->toks, id);
    long done = s->e->sess->eval(s->st, s->toks.ids, s->toks.n - 1, 1, s->logits, cb, err);
    if (done < 0) {
        reset_state(s);
        return DS4_ERROR;
    }
    if (done == 0) {
        s->toks.n--;
        return DS4_INTERRUPTED;
    }
    s->last_prefilled = 1;
    s->logits_at = s->toks.n;
    return DS4_OK;
}

/* A step's members, checked before anything changes. */
static int check_step(ds4_session *const *s, const int32_t *ids, int n, ds4_error *err)
{
    if (n < 1 || !s) return ds4_error_set(err, "a step needs at least one session (got %d)", n);
    for (int i = 0; i < n; i++) {
        if (!s[i]) return ds4_error_set(err, "session %d of the step is missing", i);
        if (s[i]->e != s[0]->e) return ds4_error_set(err, "session %d belongs to another engine than session 0", i);
        for (int j = 0; j < i; j++)
            if (s[j] == s[i]) return ds4_error_set(err, "session %d appears twice in the step (also as %d)", i, j);
        if (s[i]->toks.n + 1 > (size_t)s[i]->n_ctx)
            return ds4_error_set(err, "the context of %d tokens of session %d is full", s[i]->n_ctx, i);
        if (ids[i] < 0 || ids[i] >= s[i]->e->n_vocab)
            return ds4_error_set(err, "token id %d of session %d is outside the vocabulary (%d)", ids[i], i,
                                 s[i]->e->n_vocab);
    }
    return 0;
}

/* Takes back member s's last token, stepped by ds4_session_eval, with the
 * logits it had before: a rewind by one, or else a reset. */
static void undo_step(ds4_session *s, const float *logits, size_t logits_at, size_t last_prefilled)
{
    if (!s->e->sess->rewind || s->e->sess->rewind(s->st, s->toks.n - 1) != 0) {
        reset_state(s);
        return;
    }
    s->toks.n--;
    memcpy(s->logits, logits, (size_t)s->e->n_vocab * sizeof *logits);
    s->logits_at = logits_at;
    s->last_prefilled = last_prefilled;
}

/* The step one member after another; a member interrupted or failed
 * takes back the members stepped before it. */
static ds4_status step_each(ds4_session *const *s, const int32_t *ids, int n, const ds4_callbacks *cb,
                            ds4_error *err)
{
    const size_t nv = (size_t)s[0]->e->n_vocab;
    float *saved = xmalloc((size_t)n * nv * sizeof *saved);
    size_t *at = xmalloc(2 * (size_t)n * sizeof *at);
    ds4_status rc = DS4_OK;
    for (int i = 0; i < n && rc == DS4_OK; i++) {
        memcpy(saved + (size_t)i * nv, s[i]->logits, nv * sizeof *saved);
        at[2 * i] = s[i]->logits_at;
        at[2 * i + 1] = s[i]->last_prefilled;
        rc = ds4_session_eval(s[i], ids[i], cb, err);
        if (rc != DS4_OK)
            for (int j = 0; j < i; j++) undo_step(s[j], saved + (size_t)j * nv, at[2 * j], at[2 * j + 1]);
    }
    free(saved);
    free(at);
    return rc;
}

ds4_status ds4_sessions_eval(ds4_session *const *s, const int32_t *ids, int n, const ds4_callbacks *cb,
                             ds4_error *err)
{
    if (check_step(s, ids, n, err)) return DS4_ERROR;
    const ds4_session_ops *so = s[0]->e->sess;
    if (n == 1) return ds4_session_eval(s[0], ids[0], cb, err);
    if (!so->eval_batch) return step_each(s, ids, n, cb, err);
    void **st = xmalloc((size_t)n * sizeof *st);
    const int32_t **tok = xmalloc((size_t)n * sizeof *tok);
    size_t *pos = xmalloc((size_t)n * sizeof *pos);
    float **lg = xmalloc((size_t)n * sizeof *lg);
    for (int i = 0; i < n; i++) {
        ds4_tokens_push(&s[i]->toks, ids[i]);
        st[i] = s[i]->st;
        tok[i] = s[i]->toks.ids;
        pos[i] = s[i]->toks.n - 1;
        lg[i] = s[i]->logits;
    }
    int done = so->eval_batch(st, tok, pos, n, lg, cb, err);
    free(st);
    free(tok);
    free(pos);
    free(lg);
    for (int i = 0; i < n; i++) {
        if (done == n) {
            s[i]->last_prefilled = 1;
            s[i]->logits_at = s[i]->toks.n;
        } else if (done == -1) {
            reset_state(s[i]);
        } else {
            s[i]->toks.n--;
        }
    }
    if (done == n) return DS4_OK;
    if (done == 0) return DS4_INTERRUPTED;
    if (done == -1) return DS4_ERROR;
    return step_each(s, ids, n, cb, err);
}

const float *ds4_session_logits(const ds4_session *s)
{
    return s->toks.n > 0 && s->logits_at == s->toks.n ? s->logits : NULL;
}

size_t ds4_session_n_tokens(const ds4_session *s) { return s->toks.n; }
const int32_t *ds4_session_tokens(const ds4_session *s) { return s->toks.ids; }
int ds4_session_n_ctx(const ds4_session *s) { return s->n_ctx; }
size_t ds4_session_last_prefilled(const ds4_session *s) { return s->last_prefilled; }

uint64_t ds4_session_kv_bytes(const ds4_session *s)
{
    return s->e->sess->kv_bytes ? s->e->sess->kv_bytes(s->st) : 0;
}

/* ---- snapshots -----------------------------------------------------------
 *
 * Layout (little-endian):
 *   magic "DS4CLKV1" | u32 version | u32 n_vocab | u64 identity |
 *   u32 n_ctx | u32 logits_valid | u64 n_tokens | u64 payload_len |
 *   u32 crc32(body) | u32 crc32(header so far)
 *   body: i32 tokens[n_tokens] | f32 logits[n_vocab] if valid | payload
 */

#define SNAP_MAGIC "DS4CLKV1"
#define SNAP_VERSION 1u
#define SNAP_HEADER 56u

static uint32_t crc32_update(uint32_t crc, const void *data, size_t len)
{
    static uint32_t table[256];
    static int ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const unsigned char *p = data;
    crc = ~crc;
    while (len--) crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

int ds4_session_snapshot(const ds4_session *s, void **buf, size_t *len, ds4_error *err)
{
    strbuf payload = { 0 };
    if (s->e->sess->save(s->st, &payload, err) != 0) {
        sb_free(&payload);
        return -1;
    }
    bool logits_valid = ds4_session_logits(s) != NULL;
    size_t tok_bytes = s->toks.n * sizeof(int32_t);
    size_t logit_bytes = logits_valid ? (size_t)s->e->n_vocab * sizeof(float) : 0;
    size_t total = SNAP_HEADER + tok_bytes + logit_bytes + payload.len;
    unsigned char *out = malloc(total);
    if (!out) {
        sb_free(&payload);
        return ds4_error_set(err, "out of memory for a snapshot of %zu bytes", total);
    }
    unsigned char *body = out + SNAP_HEADER;
    /* Tokens and logits are stored in host order: both are little-endian on
     * every platform this engine supports (checked by the magic round trip). */
    if (tok_bytes) memcpy(body, s->toks.ids, tok_bytes); /* an empty session has no token array */
    memcpy(body + tok_bytes, s->logits, logit_bytes);
    memcpy(body + tok_bytes + logit_bytes, sb_str(&payload), payload.len);
    memcpy(out, SNAP_MAGIC, 8);
    le_put_u32(out + 8, SNAP_VERSION);
    le_put_u32(out + 12, (uint32_t)s->e->n_vocab);
    le_put_u64(out + 16, s->e->identity);
    le_put_u32(out + 24, (uint32_t)s->n_ctx);
    le_put_u32(out + 28, logits_valid);
    le_put_u64(out + 32, s->toks.n);
    le_put_u64(out + 40, payload.len);
    le_put_u32(out + 48, crc32_update(0, body, total - SNAP_HEADER));
    le_put_u32(out + 52, crc32_update(0, out, 52));
    sb_free(&payload);
    *buf = out;
    *len = total;
    return 0;
}

/* How many tokens the snapshot base holds when they begin ids and are
 * fewer than n, judged from its header alone (restore checks the rest);
 * else 0. */
static size_t snapshot_tokens_begin(const void *base, size_t base_len, const int32_t *ids, size_t n)
{
    const unsigned char *p = base;
    if (base_len < SNAP_HEADER || memcmp(p, SNAP_MAGIC, 8) != 0 || le_get_u32(p + 52) != crc32_update(0, p, 52))
        return 0;
    uint64_t n_tokens = le_get_u64(p + 32);
    if (n_tokens == 0 || n_tokens >= n || n_tokens > (base_len - SNAP_HEADER) / sizeof(int32_t)) return 0;
    return memcmp(p + SNAP_HEADER, ids, (size_t)n_tokens * sizeof(int32_t)) ? 0 : (size_t)n_tokens;
}

int ds4_snapshot_tokens(const void *buf, size_t len, ds4_tokens *out)
{
    const unsigned char *p = buf;
    if (len < SNAP_HEADER || memcmp(p, SNAP_MAGIC, 8) != 0 || le_get_u32(p + 52) != crc32_update(0, p, 52))
        return -1;
    uint64_t n_tokens = le_get_u64(p + 32);
    if (n_tokens > (len - SNAP_HEADER) / sizeof(int32_t)) return -1;
    /* host order, as restore reads them */
    ds4_tokens_append(out, (const int32_t *)(const void *)(p + SNAP_HEADER), (size_t)n_tokens);
    return 0;
}

int ds4_session_restore(ds4_session *s, const void *buf, size_t len, ds4_error *err)
{
    const unsigned char *p = buf;
    if (len < SNAP_HEADER || memcmp(p, SNAP_MAGIC, 8) != 0)
        return ds4_error_set(err, "not a ds4cl session snapshot (bad magic)");
    if (le_get_u32(p + 52) != crc32_update(0, p, 52))
        return ds4_error_set(err, "snapshot header is damaged (checksum mismatch)");
    if (le_get_u32(p + 8) != SNAP_VERSION)
        return ds4_error_set(err, "snapshot version %u is not supported (expected %u)",
                             le_get_u32(p + 8), SNAP_VERSION);
    if (le_get_u64(p + 16) != s->e->identity || le_get_u32(p + 12) != (uint32_t)s->e->n_vocab)
        return ds4_error_set(err, "snapshot belongs to another model (identity %016llx, this model %016llx)",
                             (unsigned long long)le_get_u64(p + 16), (unsigned long long)s->e->identity);
    uint32_t n_ctx = le_get_u32(p + 24);
    uint64_t n_tokens = le_get_u64(p + 32), payload_len = le_get_u64(p + 40);
    bool logits_valid = le_get_u32(p + 28) != 0;
    if (n_tokens > (uint64_t)s->n_ctx)
        return ds4_error_set(err, "snapshot holds %llu tokens, more than this session's context of %d"
                             " (it was saved with a context of %u)",
                             (unsigned long long)n_tokens, s->n_ctx, n_ctx);
    uint64_t logit_bytes = logits_valid ? (uint64_t)s->e->n_vocab * sizeof(float) : 0;
    uint64_t need = SNAP_HEADER + n_tokens * sizeof(int32_t) + logit_bytes;
    if (payload_len > len || need > len - payload_len || need + payload_len != len)
        return ds4_error_set(err, "snapshot is truncated or has trailing bytes (%zu bytes, expected %llu)",
                             len, (unsigned long long)(need + payload_len));
    if (le_get_u32(p + 48) != crc32_update(0, p + SNAP_HEADER, len - SNAP_HEADER))
        return ds4_error_set(err, "snapshot is damaged (checksum mismatch)");
    const unsigned char *body = p + SNAP_HEADER;
    size_t tok_bytes = (size_t)n_tokens * sizeof(int32_t);
    for (uint64_t i = 0; i < n_tokens; i++) {
        int32_t id;
        memcpy(&id, body + i * 4, 4);
        if (id < 0 || id >= s->e->n_vocab)
            return ds4_error_set(err, "snapshot token %llu is outside the vocabulary", (unsigned long long)i);
    }
    /* Load into a fresh state first so a payload error leaves the session
     * as it was. */
    void *st = s->e->sess->state_new(s->e, s->n_ctx, err);
    if (!st) return -1;
    if (s->e->sess->load(st, body + tok_bytes + logit_bytes, (size_t)payload_len, (size_t)n_tokens, err) != 0) {
        s->e->sess->state_free(st);
        return -1;
    }
    s->e->sess->state_free(s->st);
    s->st = st;
    s->toks.n = 0;
    ds4_tokens_append(&s->toks, (const int32_t *)(const void *)body, (size_t)n_tokens);
    if (logits_valid) {
        memcpy(s->logits, body + tok_bytes, (size_t)logit_bytes);
        s->logits_at = s->toks.n;
    } else {
        s->logits_at = 0;
    }
    s->last_prefilled = 0;
    return 0;
}

int ds4_session_save(const ds4_session *s, const char *path, ds4_error *err)
{
    void *buf;
    size_t len;
    if (ds4_session_snapshot(s, &buf, &len, err) != 0) return -1;
    int rc = file_write_atomic(path, buf, len, 0600, true, err);
    free(buf);
    return rc;
}

int ds4_session_load(ds4_session *s, const char *path, ds4_error *err)
{
    size_t len;
    char *buf = file_read_all(path, &len);
    if (!buf) return ds4_error_set(err, "cannot read snapshot %s: %s", path, strerror(errno));
    int rc = ds4_session_restore(s, buf, len, err);
    free(buf);
    return rc;
}
