/* dsml_mask.c — the structural token mask.
 *
 * In structure, a token is allowed when a strict copy of the automaton
 * accepts all its bytes. Trying 129280 tokens per step would cost about a
 * millisecond, so tokens are bucketed by first byte (and, for the very
 * common space-led tokens, by second byte): the automaton first says which
 * single bytes it accepts, and only the buckets of those bytes are tried.
 * Structural states repeat from call to call (the same tag, the same tool
 * name prefix), so allowed sets are cached by automaton state.
 */
#include "dsml/dsml_gram_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { F_CONTROL = 1, F_BAR = 2 };

#define N_BUCKETS (256 + 257)
#define SPACE_BUCKET(b2) (256 + (b2)) /* b2 = 256: the token is a single space */

struct dsml_vocab {
    int n;
    char *arena;
    uint32_t *off, *len;
    uint8_t *flags;
    int32_t eos, dsml;
    uint32_t bucket_start[N_BUCKETS + 1];
    int32_t *bucket_ids;
};

static bool has_bar(const char *s, size_t n)
{
    for (size_t i = 0; i + 2 < n; i++)
        if ((unsigned char)s[i] == 0xef && (unsigned char)s[i + 1] == 0xbd && (unsigned char)s[i + 2] == 0x9c)
            return true;
    return false;
}

static int bucket_of(const char *s, size_t n)
{
    unsigned char b = (unsigned char)s[0];
    if (b != ' ') return b;
    return SPACE_BUCKET(n > 1 ? (unsigned char)s[1] : 256);
}

dsml_vocab *dsml_vocab_new(int n_vocab, dsml_token_bytes_fn bytes, void *ud,
                           int32_t eos, int32_t dsml, const int32_t *control, size_t n_control)
{
    dsml_vocab *v = xcalloc(1, sizeof *v);
    v->n = n_vocab;
    v->eos = eos;
    v->dsml = dsml;
    v->off = xcalloc((size_t)n_vocab, sizeof *v->off);
    v->len = xcalloc((size_t)n_vocab, sizeof *v->len);
    v->flags = xcalloc((size_t)n_vocab, 1);
    size_t total = 0;
    for (int i = 0; i < n_vocab; i++) {
        size_t n = 0;
        if (!bytes(ud, i, &n)) n = 0;
        total += n;
    }
    v->arena = xmalloc(total ? total : 1);
    size_t at = 0;
    for (int i = 0; i < n_vocab; i++) {
        size_t n = 0;
        const char *s = bytes(ud, i, &n);
        if (!s) n = 0;
        memcpy(v->arena + at, s ? s : "", n);
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint32_t)n;
        if (has_bar(s ? s : "", n)) v->flags[i] |= F_BAR;
        at += n;
    }
    if (eos >= 0 && eos < n_vocab) v->flags[eos] |= F_CONTROL;
    for (size_t k = 0; k < n_control; k++)
        if (control[k] >= 0 && control[k] < n_vocab && control[k] != dsml) v->flags[control[k]] |= F_CONTROL;

    uint32_t count[N_BUCKETS] = { 0 };
    for (int i = 0; i < n_vocab; i++)
        if (v->len[i] && !(v->flags[i] & F_CONTROL)) count[bucket_of(v->arena + v->off[i], v->len[i])]++;
    v->bucket_start[0] = 0;
    for (int b = 0; b < N_BUCKETS; b++) v->bucket_start[b + 1] = v->bucket_start[b] + count[b];
    v->bucket_ids = xmalloc((v->bucket_start[N_BUCKETS] + 1) * sizeof *v->bucket_ids);
    uint32_t fill[N_BUCKETS];
    memcpy(fill, v->bucket_start, sizeof fill);
    for (int i = 0; i < n_vocab; i++)
        if (v->len[i] && !(v->flags[i] & F_CONTROL))
            v->bucket_ids[fill[bucket_of(v->arena + v->off[i], v->len[i])]++] = i;
    return v;
}

void dsml_vocab_free(dsml_vocab *v)
{
    if (!v) return;
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->flags);
    free(v->bucket_ids);
    free(v);
}

/* ---- masker ------------------------------------------------------------------ */

#define CACHE_SLOTS 4096
#define CACHE_PROBES 8

typedef struct {
    bool used;
    uint64_t hash;
    dsml_gram key;
    int32_t *ids;
    size_t n;
} cache_entry;

struct dsml_masker {
    const dsml_vocab *v;
    const dsml_schema *s;
    cache_entry *cache;
    int32_t *scratch;
    size_t cap;
    float *saved;
    size_t saved_cap;
    uint64_t hits, misses;
};

dsml_masker *dsml_masker_new(const dsml_vocab *v, const dsml_schema *schema)
{
    dsml_masker *m = xcalloc(1, sizeof *m);
    m->v = v;
    m->s = schema;
    m->cache = xcalloc(CACHE_SLOTS, sizeof *m->cache);
    return m;
}

void dsml_masker_free(dsml_masker *m)
{
    if (!m) return;
    for (size_t i = 0; i < CACHE_SLOTS; i++) free(m->cache[i].ids);
    free(m->cache);
    free(m->scratch);
    free(m->saved);
    free(m);
}

void dsml_masker_stats(const dsml_masker *m, uint64_t *hits, uint64_t *misses)
{
    *hits = m->hits;
    *misses = m->misses;
}

/* The fields that decide what the strict language accepts from here;
 * everything else is zeroed so equal futures share a cache slot. */
static void normalize(dsml_gram *k, const dsml_gram *g)
{
    *k = *g;
    k->strict = 1;
    k->hold = 0;
    k->win = 0;
    k->err = 0;
    if (k->ncalls > 1) k->ncalls = 1;
    if (k->level == 0) k->used = 0;
    if (k->keylen < sizeof k->keybuf) memset(k->keybuf + k->keylen, 0, sizeof k->keybuf - k->keylen);
    if (k->svlen < sizeof k->sval) memset(k->sval + k->svlen, 0, sizeof k->sval - k->svlen);
    bool attrs = k->st >= G_ATTR_SEP && k->st <= G_ATTR_VAL;
    bool tagname = k->st == G_TAGNAME || k->st == G_TAGEND || k->st == G_CLOSE_TAIL;
    if (!attrs) {
        /* nothing of the last tag's attributes matters any more */
        k->key = k->keylen = k->have = k->svlen = 0;
        memset(k->keybuf, 0, sizeof k->keybuf);
        memset(k->sval, 0, sizeof k->sval);
        k->lo = k->hi = 0;
        k->nlen = 0;
        k->cur = -1;
        if (!tagname) k->tag = 0;
    }
    if (k->st != G_D && !tagname) k->close = 0;
    if (k->st != G_CLOSE_TAIL && k->st != G_VALUE && !attrs) k->sep = 0;
    if (k->st != G_CLOSE_TAIL && k->st != G_VALUE) k->bpos = 0;
    if (k->st == G_WS || k->st == G_LT || attrs) k->pos = 0;
    if (k->st != G_VALUE) k->vk = k->vs = k->vn = k->ve = 0;
    if (k->st != G_WS) k->ws = 0;
    if (k->st != G_TEXT && k->st != G_CAND_DELIM) k->lits = 0;
}

static uint64_t hash_gram(const dsml_gram *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static void push(dsml_masker *m, size_t *n, int32_t id)
{
    if (*n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->scratch = xrealloc(m->scratch, m->cap * sizeof *m->scratch);
    }
    m->scratch[(*n)++] = id;
}

static bool token_ok(const dsml_masker *m, const dsml_gram *start, int32_t id)
{
    const dsml_vocab *v = m->v;
    const unsigned char *b = (const unsigned char *)v->arena + v->off[id];
    uint32_t n = v->len[id];
    dsml_gram t = *start;
    bool bar_checked = !(v->flags[id] & F_BAR) || id == v->dsml;
    for (uint32_t i = 0; i < n; i++) {
        /* In structure the DSML marker must be the model's DSML token, not
         * byte pieces that spell it. */
        if (!bar_checked && b[i] == 0xef && i + 2 < n && b[i + 1] == 0xbd && b[i + 2] == 0x9c && gram_constrained(&t))
            return false;
        gram_ev ev = gram_step(&t, m->s, b[i]);
        if (ev == EV_REJECT || ev == EV_ERROR) return false;
    }
    return true;
}

static size_t compute_allowed(dsml_masker *m, const dsml_gram *g)
{
    const dsml_vocab *v = m->v;
    dsml_gram start = *g;
    start.strict = 1;
    size_t n = 0;
    bool first[256];
    for (int c = 0; c < 256; c++) {
        dsml_gram t = start;
        gram_ev ev = gram_step(&t, m->s, (unsigned char)c);
        first[c] = ev != EV_REJECT && ev != EV_ERROR;
    }
    for (int c = 0; c < 256; c++) {
        if (!first[c] || c == ' ') continue;
        for (uint32_t i = v->bucket_start[c]; i < v->bucket_start[c + 1]; i++)
            if (token_ok(m, &start, v->bucket_ids[i])) push(m, &n, v->bucket_ids[i]);
    }
    if (first[' ']) {
        dsml_gram after = start;
        gram_step(&after, m->s, ' ');
        for (int c = 0; c <= 256; c++) {
            if (c < 256) {
                dsml_gram t = after;
                gram_ev ev = gram_step(&t, m->s, (unsigned char)c);
                if (ev == EV_REJECT || ev == EV_ERROR) continue;
            }
            int b = SPACE_BUCKET(c);
            for (uint32_t i = v->bucket_start[b]; i < v->bucket_start[b + 1]; i++)
                if (token_ok(m, &start, v->bucket_ids[i])) push(m, &n, v->bucket_ids[i]);
        }
    }
    if (v->eos >= 0 && v->eos < v->n) {
        dsml_gram t = start;
        if (gram_eos(&t) == EV_DONE) push(m, &n, v->eos);
    }
    return n;
}

static const int32_t *allowed_for(dsml_masker *m, const dsml_gram *g, size_t *n)
{
    dsml_gram key;
    normalize(&key, g);
    uint64_t h = hash_gram(&key);
    /* open addressing over a few slots; a full run evicts its first */
    cache_entry *e = NULL;
    for (size_t probe = 0; probe < CACHE_PROBES; probe++) {
        cache_entry *c = &m->cache[(h + probe) % CACHE_SLOTS];
        if (c->used && c->hash == h && !memcmp(&c->key, &key, sizeof key)) {
            m->hits++;
            *n = c->n;
            return c->ids;
        }
        if (!c->used && !e) e = c;
    }
    if (!e) e = &m->cache[h % CACHE_SLOTS];
    m->misses++;
    size_t cnt = compute_allowed(m, g);
    free(e->ids);
    e->ids = xmalloc((cnt ? cnt : 1) * sizeof *e->ids);
    memcpy(e->ids, m->scratch, cnt * sizeof *e->ids);
    e->n = cnt;
    e->hash = h;
    e->key = key;
    e->used = true;
    *n = cnt;
    return e->ids;
}

int dsml_mask_allowed(dsml_masker *m, const dsml_parser *p, const int32_t **ids)
{
    const dsml_gram *g = dsml_parser_gram(p);
    if (!gram_constrained(g)) return -1;
    size_t n;
    *ids = allowed_for(m, g, &n);
    return (int)n;
}

int dsml_mask_apply(dsml_masker *m, const dsml_parser *p, float *logits, int n_vocab)
{
    const dsml_gram *g = dsml_parser_gram(p);
    if (!gram_constrained(g)) return n_vocab;
    size_t n;
    const int32_t *ids = allowed_for(m, g, &n);
    /* An empty set would be a bug in the grammar; sampling freely then
     * lets the parser report the malformed call instead of stalling. */
    if (n == 0) return n_vocab;
    if (n > m->saved_cap) {
        m->saved_cap = n;
        m->saved = xrealloc(m->saved, n * sizeof *m->saved);
    }
    for (size_t i = 0; i < n; i++) m->saved[i] = ids[i] < n_vocab ? logits[ids[i]] : 0;
    for (int i = 0; i < n_vocab; i++) logits[i] = -INFINITY;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < n_vocab) {
            logits[ids[i]] = m->saved[i];
            kept++;
        }
    return (int)kept;
}
