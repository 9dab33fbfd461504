/* tokenizer.c — byte-level BPE with the DeepSeek pre-tokenizer.
 *
 * The vocabulary is turned into four structures at load time and nothing
 * else is kept: the raw bytes every token stands for (one arena), the id of
 * each of the 256 byte symbols, a hash table from an adjacent id pair to
 * (merge rank, merged id), and a hash table from raw bytes to the tokens
 * that BPE maps their own bytes to. BPE works on ids only: a piece starts
 * as its byte symbols and the lowest-rank adjacent pair (leftmost on ties)
 * is merged until no pair has a rank, which is the reference algorithm.
 * Most pieces of ordinary text are found whole in the last table and skip
 * merging; short others use a flat array scan, long ones a linked list with
 * a lazy heap, so a 100 KB run of letters stays O(n log n).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pretok.h"
#include "engine/tokenizer.h"
#include "base/utf8.h"

/* ---- allocation ------------------------------------------------------- */

/* ---- the tokenizer ------------------------------------------------------ */

typedef struct {
    uint64_t key; /* (left id << 32) | right id; EMPTY_KEY when free */
    int32_t rank;
    int32_t result;
} merge_slot;

#define EMPTY_KEY UINT64_MAX

struct ds4_tokenizer {
    int32_t n_vocab;
    unsigned char *bytes;  /* raw bytes of every token, concatenated */
    uint32_t *bytes_off;   /* n_vocab + 1 offsets into bytes */
    int32_t byte_token[256];
    merge_slot *merges;
    size_t merge_mask;
    int32_t special[DS4_TOK__COUNT];
    /* Raw bytes -> id for the tokens BPE turns their own bytes into: a
     * piece with those bytes is that one token, no merging needed (most
     * pieces of ordinary text are). */
    int32_t *whole;
    size_t whole_mask;
};

static const char *const special_strings[DS4_TOK__COUNT] = {
    [DS4_TOK_BOS] = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    [DS4_TOK_EOS] = "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    [DS4_TOK_USER] = "<\xef\xbd\x9cUser\xef\xbd\x9c>",
    [DS4_TOK_ASSISTANT] = "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
    [DS4_TOK_THINK] = "<think>",
    [DS4_TOK_THINK_END] = "</think>",
    [DS4_TOK_DSML] = "\xef\xbd\x9c" "DSML\xef\xbd\x9c",
};

const char *tokenizer_special_text(ds4_special which)
{
    return (unsigned)which < DS4_TOK__COUNT ? special_strings[which] : NULL;
}

/* ---- GPT-2 byte <-> code point map (doc/model.md §13.3) ------------------- */

static bool byte_is_printable(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

static uint32_t byte_to_cp(unsigned b)
{
    if (byte_is_printable(b)) return b;
    unsigned k = 0; /* rank of b among the non-printable bytes */
    for (unsigned x = 0; x < b; x++) k += !byte_is_printable(x);
    return 0x100 + k;
}

static int cp_inverse[0x144];
static pthread_once_t cp_inverse_once = PTHREAD_ONCE_INIT;

static void cp_inverse_build(void)
{
    for (unsigned i = 0; i < 0x144; i++) cp_inverse[i] = -1;
    for (unsigned b = 0; b < 256; b++) cp_inverse[byte_to_cp(b)] = (int)b;
}

/* Byte a code point of a byte-level token stands for, or -1. */
static int cp_to_byte(uint32_t cp)
{
    pthread_once(&cp_inverse_once, cp_inverse_build);
    return cp < 0x144 ? cp_inverse[cp] : -1;
}

static size_t utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* Raw bytes of a token string: through the inverse byte map when every
 * character is a byte symbol, else the string itself (added tokens such as
 * "<｜User｜>" are stored literally). Returns the length written to out
 * (out holds at least len bytes). */
static size_t token_decode(const unsigned char *s, size_t len, unsigned char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += utf8_decode(s + i, len - i, &cp);
        int b = cp == UTF8_INVALID ? -1 : cp_to_byte(cp);
        if (b < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[n++] = (unsigned char)b;
    }
    return n;
}

/* ---- string -> id table used while building ----------------------------- */

typedef struct {
    const char *const *strs;
    const size_t *lens;
    int32_t *slots; /* id, or -1 */
    size_t mask;
} string_index;

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

static void index_build(string_index *ix, const char *const *strs, const size_t *lens, size_t n)
{
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    ix->strs = strs;
    ix->lens = lens;
    ix->mask = cap - 1;
    ix->slots = xmalloc(cap * sizeof *ix->slots);
    for (size_t i = 0; i < cap; i++) ix->slots[i] = -1;
    for (size_t id = 0; id < n; id++) {
        size_t h = (size_t)hash_bytes(strs[id], lens[id]) & ix->mask;
        for (;; h = (h + 1) & ix->mask) {
            int32_t cur = ix->slots[h];
            if (cur < 0) {
                ix->slots[h] = (int32_t)id;
                break;
            }
            if (lens[cur] == lens[id] && !memcmp(strs[cur], strs[id], lens[id])) {
                ix->slots[h] = (int32_t)id; /* duplicate string: the last id wins */
                break;
            }
        }
    }
}

static int32_t index_find(const string_index *ix, const char *s, size_t len)
{
    for (size_t h = (size_t)hash_bytes(s, len) & ix->mask;; h = (h + 1) & ix->mask) {
        int32_t cur = ix->slots[h];
        if (cur < 0) return -1;
        if (ix->lens[cur] == len && !memcmp(ix->strs[cur], s, len)) return cur;
    }
}

/* ---- merge table -------------------------------------------------------- */

static inline uint64_t pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline size_t pair_hash(uint64_t key, size_t mask)
{
    key ^= key >> 31;
    key *= 0x9E3779B97F4A7C15ULL;
    return (size_t)(key >> 20) & mask;
}

static inline const merge_slot *merge_find(const ds4_tokenizer *t, int32_t a, int32_t b)
{
    uint64_t key = pair_key(a, b);
    for (size_t h = pair_hash(key, t->merge_mask);; h = (h + 1) & t->merge_mask) {
        const merge_slot *m = &t->merges[h];
        if (m->key == key) return m;
        if (m->key == EMPTY_KEY) return NULL;
    }
}

/* ---- building ----------------------------------------------------------- */

static void index_whole_tokens(ds4_tokenizer *t);

static void printable(char *out, size_t size, const char *s, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F || c == '"' || c == '\\') o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
        else out[o++] = (char)c;
    }
    if (o < size) out[o] = 0;
}

void ds4_tokenizer_free(ds4_tokenizer *t)
{
    if (!t) return;
    free(t->bytes);
    free(t->bytes_off);
    free(t->merges);
    free(t->whole);
    free(t);
}

ds4_tokenizer *tokenizer_build(const char *const *tokens, const size_t *token_lens, size_t n_tokens,
                               const char *const *merges, const size_t *merge_lens, size_t n_merges,
                               ds4_error *err)
{
    if (n_tokens < 256 + DS4_TOK__COUNT || n_tokens > (size_t)INT32_MAX / 2) {
        ds4_error_set(err, "tokenizer: vocabulary of %zu tokens is not plausible", n_tokens);
        return NULL;
    }
    if (n_merges > (size_t)INT32_MAX / 4) {
        ds4_error_set(err, "tokenizer: %zu merges is not plausible", n_merges);
        return NULL;
    }
    ds4_tokenizer *t = xcalloc(1, sizeof *t);
    t->n_vocab = (int32_t)n_tokens;
    string_index ix;
    index_build(&ix, tokens, token_lens, n_tokens);
    char shown[160];

    /* Raw bytes of every token. */
    size_t total = 0;
    for (size_t id = 0; id < n_tokens; id++) {
        if (token_lens[id] > 4096) {
            ds4_error_set(err, "tokenizer: token %zu is %zu bytes long", id, token_lens[id]);
            goto fail;
        }
        total += token_lens[id];
    }
    if (total > UINT32_MAX) {
        ds4_error_set(err, "tokenizer: token strings total %zu bytes", total);
        goto fail;
    }
    t->bytes = xmalloc(total);
    t->bytes_off = xmalloc((n_tokens + 1) * sizeof *t->bytes_off);
    size_t at = 0;
    for (size_t id = 0; id < n_tokens; id++) {
        t->bytes_off[id] = (uint32_t)at;
        size_t n = token_decode((const unsigned char *)tokens[id], token_lens[id], t->bytes + at);
        if (n > DS4_DETOK_MAX - 8) {
            printable(shown, sizeof shown, tokens[id], token_lens[id] < 40 ? token_lens[id] : 40);
            ds4_error_set(err, "tokenizer: token %zu (\"%s...\") stands for %zu bytes, more than %d",
                          id, shown, n, DS4_DETOK_MAX - 8);
            goto fail;
        }
        at += n;
    }
    t->bytes_off[n_tokens] = (uint32_t)at;

    /* The 256 byte symbols. */
    for (unsigned b = 0; b < 256; b++) {
        char sym[4];
        size_t n = utf8_encode(byte_to_cp(b), sym);
        t->byte_token[b] = index_find(&ix, sym, n);
        if (t->byte_token[b] < 0) {
            ds4_error_set(err, "tokenizer: the vocabulary lacks the symbol of byte 0x%02x (\"%.*s\")",
                          b, (int)n, sym);
            goto fail;
        }
    }

    /* Merges: each "A B" becomes (id A, id B) -> (rank, id AB). */
    size_t cap = 16;
    while (cap < n_merges * 2) cap *= 2;
    t->merge_mask = cap - 1;
    t->merges = xmalloc(cap * sizeof *t->merges);
    for (size_t i = 0; i < cap; i++) t->merges[i].key = EMPTY_KEY;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (size_t r = 0; r < n_merges; r++) {
        const char *m = merges[r];
        size_t len = merge_lens[r];
        const char *sp = memchr(m, ' ', len);
        if (!sp || sp == m || sp == m + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp - m) - 1)) {
            printable(shown, sizeof shown, m, len < 60 ? len : 60);
            ds4_error_set(err, "tokenizer: merge %zu (\"%s\") is not of the form \"A B\"", r, shown);
            free(joined);
            goto fail;
        }
        size_t la = (size_t)(sp - m), lb = len - la - 1;
        if (la + lb > joined_cap) {
            joined_cap = (la + lb) * 2;
            joined = xrealloc(joined, joined_cap);
        }
        memcpy(joined, m, la);
        memcpy(joined + la, sp + 1, lb);
        int32_t a = index_find(&ix, m, la), b = index_find(&ix, sp + 1, lb);
        int32_t ab = index_find(&ix, joined, la + lb);
        if (a < 0 || b < 0 || ab < 0) {
            const char *what = a < 0 ? "left operand" : b < 0 ? "right operand" : "result";
            printable(shown, sizeof shown, m, len < 60 ? len : 60);
            ds4_error_set(err, "tokenizer: the %s of merge %zu (\"%s\") is not in the vocabulary",
                          what, r, shown);
            free(joined);
            goto fail;
        }
        uint64_t key = pair_key(a, b);
        for (size_t h = pair_hash(key, t->merge_mask);; h = (h + 1) & t->merge_mask) {
            merge_slot *s = &t->merges[h];
            if (s->key == key) break; /* repeated merge: the lower rank stays */
            if (s->key == EMPTY_KEY) {
                s->key = key;
                s->rank = (int32_t)r;
                s->result = ab;
                break;
            }
        }
    }
    free(joined);

    index_whole_tokens(t);

    /* The specials, by string. */
    for (int k = 0; k < DS4_TOK__COUNT; k++) {
        t->special[k] = index_find(&ix, special_strings[k], strlen(special_strings[k]));
        if (t->special[k] < 0) {
            ds4_error_set(err, "tokenizer: required token \"%s\" is missing from the vocabulary",
                          special_strings[k]);
            goto fail;
        }
    }
    free(ix.slots);
    return t;

fail:
    free(ix.slots);
    ds4_tokenizer_free(t);
    return NULL;
}

/* ---- queries ------------------------------------------------------------ */

int ds4_vocab_size(const ds4_tokenizer *t) { return t ? t->n_vocab : 0; }

int32_t ds4_token_special(const ds4_tokenizer *t, ds4_special which)
{
    if (!t || (unsigned)which >= DS4_TOK__COUNT) return -1;
    return t->special[which];
}

bool tokenizer_is_special(const ds4_tokenizer *t, int32_t id)
{
    for (int k = 0; k < DS4_TOK__COUNT; k++)
        if (t->special[k] == id) return true;
    return false;
}

const char *ds4_token_bytes(const ds4_tokenizer *t, int32_t id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->bytes_off[id + 1] - t->bytes_off[id];
    return (const char *)t->bytes + t->bytes_off[id];
}

/* ---- BPE ---------------------------------------------------------------- */

/* Pieces up to this many bytes use the array scan. */
#define SMALL_PIECE 48
/* Longest piece looked up as a whole token (longer ones are never one). */
#define WHOLE_MAX 256

typedef struct {
    const ds4_tokenizer *t;
    ds4_tokens *out;
    /* scratch for long pieces, grown on demand */
    int32_t *sym, *prev, *next;
    uint64_t *heap;
    size_t cap, heap_cap;
} bpe_ctx;

static void bpe_small(bpe_ctx *c, const unsigned char *p, size_t n)
{
    const ds4_tokenizer *t = c->t;
    int32_t sym[SMALL_PIECE], rank[SMALL_PIECE], res[SMALL_PIECE];
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_token[p[i]];
    for (size_t i = 0; i + 1 < m; i++) {
        const merge_slot *s = merge_find(t, sym[i], sym[i + 1]);
        rank[i] = s ? s->rank : INT32_MAX;
        res[i] = s ? s->result : -1;
    }
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        sym[best] = res[best];
        /* close the gap; plain loops beat memmove calls at these sizes */
        for (size_t i = best + 1; i + 1 < m; i++) sym[i] = sym[i + 1];
        for (size_t i = best + 1; i + 2 < m; i++) {
            rank[i] = rank[i + 1];
            res[i] = res[i + 1];
        }
        m--;
        if (best > 0) {
            const merge_slot *s = merge_find(t, sym[best - 1], sym[best]);
            rank[best - 1] = s ? s->rank : INT32_MAX;
            res[best - 1] = s ? s->result : -1;
        }
        if (best + 1 < m) {
            const merge_slot *s = merge_find(t, sym[best], sym[best + 1]);
            rank[best] = s ? s->rank : INT32_MAX;
            res[best] = s ? s->result : -1;
        }
    }
    ds4_tokens_append(c->out, sym, m);
}

static void heap_push(bpe_ctx *c, size_t *n, uint64_t v)
{
    if (*n == c->heap_cap) {
        c->heap_cap = c->heap_cap ? c->heap_cap * 2 : 256;
        c->heap = xrealloc(c->heap, c->heap_cap * sizeof *c->heap);
    }
    uint64_t *h = c->heap;
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (h[parent] <= v) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = v;
}

static uint64_t heap_pop(bpe_ctx *c, size_t *n)
{
    uint64_t *h = c->heap, top = h[0], v = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= len) break;
        size_t s = l + 1 < len && h[l + 1] < h[l] ? l + 1 : l;
        if (h[s] >= v) break;
        h[i] = h[s];
        i = s;
    }
    if (len) h[i] = v;
    return top;
}

/* Queues the pair starting at node i when it has a merge; the heap key
 * orders by rank, then by position (leftmost first). */
static void queue_pair(bpe_ctx *c, size_t *hn, int32_t i)
{
    if (i < 0 || c->next[i] < 0) return;
    const merge_slot *s = merge_find(c->t, c->sym[i], c->sym[c->next[i]]);
    if (s) heap_push(c, hn, ((uint64_t)(uint32_t)s->rank << 32) | (uint32_t)i);
}

static void bpe_large(bpe_ctx *c, const unsigned char *p, size_t n)
{
    if (n > c->cap) {
        c->cap = n * 2;
        c->sym = xrealloc(c->sym, c->cap * sizeof *c->sym);
        c->prev = xrealloc(c->prev, c->cap * sizeof *c->prev);
        c->next = xrealloc(c->next, c->cap * sizeof *c->next);
    }
    for (size_t i = 0; i < n; i++) {
        c->sym[i] = c->t->byte_token[p[i]];
        c->prev[i] = (int32_t)i - 1;
        c->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < n; i++) queue_pair(c, &hn, (int32_t)i);
    while (hn) {
        uint64_t top = heap_pop(c, &hn);
        int32_t i = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        int32_t j = c->next[i];
        if (c->sym[i] < 0 || j < 0) continue; /* stale: node gone or now last */
        const merge_slot *s = merge_find(c->t, c->sym[i], c->sym[j]);
        if (!s || s->rank != rank) continue;  /* stale: the pair changed */
        c->sym[i] = s->result;
        c->sym[j] = -1;
        c->next[i] = c->next[j];
        if (c->next[j] >= 0) c->prev[c->next[j]] = i;
        queue_pair(c, &hn, c->prev[i]);
        queue_pair(c, &hn, i);
    }
    for (int32_t i = 0; i >= 0; i = c->next[i]) ds4_tokens_push(c->out, c->sym[i]);
}

static void bpe_ctx_free(bpe_ctx *c)
{
    free(c->sym);
    free(c->prev);
    free(c->next);
    free(c->heap);
}

static int32_t whole_find(const ds4_tokenizer *t, const unsigned char *p, size_t n)
{
    for (size_t h = (size_t)hash_bytes(p, n) & t->whole_mask;; h = (h + 1) & t->whole_mask) {
        int32_t id = t->whole[h];
        if (id < 0) return -1;
        uint32_t off = t->bytes_off[id];
        if (t->bytes_off[id + 1] - off == n && !memcmp(t->bytes + off, p, n)) return id;
    }
}

static void bpe_piece(void *ud, const unsigned char *p, size_t n)
{
    bpe_ctx *c = ud;
    if (n == 1) {
        ds4_tokens_push(c->out, c->t->byte_token[p[0]]);
        return;
    }
    if (n <= WHOLE_MAX) {
        int32_t id = whole_find(c->t, p, n);
        if (id >= 0) {
            ds4_tokens_push(c->out, id);
            return;
        }
    }
    if (n <= SMALL_PIECE) bpe_small(c, p, n);
    else bpe_large(c, p, n);
}

static void index_whole_tokens(ds4_tokenizer *t)
{
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2) cap *= 2;
    t->whole_mask = cap - 1;
    t->whole = xmalloc(cap * sizeof *t->whole);
    for (size_t i = 0; i < cap; i++) t->whole[i] = -1;
    ds4_tokens out = { 0 };
    bpe_ctx c = { .t = t, .out = &out };
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t off = t->bytes_off[id], n = t->bytes_off[id + 1] - off;
        if (n < 2 || n > WHOLE_MAX) continue;
        out.n = 0;
        if (n <= SMALL_PIECE) bpe_small(&c, t->bytes + off, n);
        else bpe_large(&c, t->bytes + off, n);
        if (out.n != 1 || out.ids[0] != id) continue;
        size_t h = (size_t)hash_bytes(t->bytes + off, n) & t->whole_mask;
        while (t->whole[h] >= 0) h = (h + 1) & t->whole_mask;
        t->whole[h] = id;
    }
    ds4_tokens_free(&out);
    bpe_ctx_free(&c);
}

/* ---- entry points ------------------------------------------------------- */

int ds4_tokenize(const ds4_tokenizer *t, const char *text, size_t len, ds4_tokens *out)
{
    if (!t || !out || (!text && len)) return -1;
    if (!len) return 0;
    bpe_ctx c = { .t = t, .out = out };
    pretok_split((const unsigned char *)text, len, bpe_piece, &c);
    bpe_ctx_free(&c);
    return 0;
}

/* Finds the special string starting at s[0..n), in the reference order. */
static int special_at(const char *s, size_t n, size_t *len)
{
    for (int k = 0; k < DS4_TOK__COUNT; k++) {
        size_t l = strlen(special_strings[k]);
        if (l <= n && !memcmp(s, special_strings[k], l)) {
            *len = l;
            return k;
        }
    }
    return -1;
}

size_t tokenizer_first_special(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '<' && (unsigned char)s[i] != 0xEF) continue;
        size_t sl;
        if (special_at(s + i, n - i, &sl) >= 0) return i;
    }
    return n;
}

int ds4_tokenize_trusted(const ds4_tokenizer *t, const char *text, size_t len, ds4_tokens *out)
{
    if (!t || !out || (!text && len)) return -1;
    if (!len) return 0;
    bpe_ctx c = { .t = t, .out = out };
    size_t seg = 0;
    for (size_t i = 0; i < len; i++) {
        /* Every special starts with '<' or with the first byte of "｜". */
        if (text[i] != '<' && (unsigned char)text[i] != 0xEF) continue;
        size_t sl;
        int k = special_at(text + i, len - i, &sl);
        if (k < 0) continue;
        pretok_split((const unsigned char *)text + seg, i - seg, bpe_piece, &c);
        ds4_tokens_push(out, t->special[k]);
        i += sl - 1;
        seg = i + 1;
    }
    pretok_split((const unsigned char *)text + seg, len - seg, bpe_piece, &c);
    bpe_ctx_free(&c);
    return 0;
}
