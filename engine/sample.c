/* sample.c — token sampling: greedy, or temperature with top-k, min-p and
 * top-p filters, from a seeded xoshiro256** stream.
 *
 * Filter semantics (probabilities after temperature): min-p keeps tokens
 * with p >= min_p * p_max, top-k keeps the k most likely, top-p keeps the
 * most likely tokens until their mass reaches top_p of what min-p/top-k
 * left; at least one token always survives. Ordering is by logit, ties to
 * the lower id, so a given seed and logits always give the same choice.
 *
 * Cost per token stays O(n_vocab) plus O(k log n) for top-p: min-p is a
 * threshold pass, top-k a quickselect, top-p pops a heap only as far as the
 * nucleus reaches; nothing sorts the vocabulary.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ds4.h"

typedef struct {
    float logit;
    int32_t id;
} cand;

struct ds4_sampler {
    ds4_sampling p;
    uint64_t s[4];
    float *work; /* writable logits for the hook */
    size_t work_cap;
    cand *c;
    float *w; /* weights of the candidates */
    size_t c_cap;
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double uniform01(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

ds4_sampler *ds4_sampler_new(const ds4_sampling *params)
{
    ds4_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (params) s->p = *params;
    else {
        s->p.temperature = 1.0f;
        s->p.top_p = 1.0f;
    }
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->s[i] = splitmix64(&x);
    return s;
}

void ds4_sampler_free(ds4_sampler *s)
{
    if (!s) return;
    free(s->work);
    free(s->c);
    free(s->w);
    free(s);
}

/* a ranks before b: higher logit, then lower id. */
static inline bool before(const cand *a, const cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int32_t argmax(const float *l, int n)
{
    int32_t best = -1;
    float bv = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (l[i] > bv) { /* NaN and -inf never win; ties keep the lower id */
            bv = l[i];
            best = i;
        }
    }
    return best;
}

/* Rearranges c[0..n) so that its first k entries are the k best (any order). */
static void select_top(cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the k-th best lies in [lo, hi) */
    while (hi - lo > 1) {
        /* median of three as pivot */
        size_t mid = lo + (hi - lo) / 2;
        cand a = c[lo], b = c[mid], d = c[hi - 1], pivot;
        if (before(&a, &b)) pivot = before(&b, &d) ? b : (before(&a, &d) ? d : a);
        else pivot = before(&a, &d) ? a : (before(&b, &d) ? d : b);
        /* three-way partition: [lo, lt) before pivot, [lt, gt) equal, [gt, hi) after */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (before(&c[i], &pivot)) {
                cand t = c[lt]; c[lt] = c[i]; c[i] = t;
                lt++;
                i++;
            } else if (before(&pivot, &c[i])) {
                gt--;
                cand t = c[gt]; c[gt] = c[i]; c[i] = t;
            } else {
                i++;
            }
        }
        if (k <= lt) hi = lt;
        else if (k <= gt) return;
        else lo = gt;
    }
}

/* Max-heap by `before` over c[0..n). */
static void sift_down(cand *c, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, best = i;
        if (l < n && before(&c[l], &c[best])) best = l;
        if (l + 1 < n && before(&c[l + 1], &c[best])) best = l + 1;
        if (best == i) return;
        cand t = c[i]; c[i] = c[best]; c[best] = t;
        i = best;
    }
}

/* Moves the most likely candidates, best first, to the end of c until
 * they hold `need` of the mass; returns how many (at least one). */
static size_t nucleus(cand *c, size_t n, float m, float inv_t, double need)
{
    for (size_t i = n / 2; i-- > 0;) sift_down(c, n, i);
    double mass = 0;
    size_t taken = 0, heap = n;
    while (heap > 0) {
        cand top = c[0];
        c[0] = c[heap - 1];
        c[heap - 1] = top; /* popped entries collect at the tail */
        heap--;
        sift_down(c, heap, 0);
        taken++;
        mass += expf((top.logit - m) * inv_t);
        if (mass >= need) break;
    }
    /* the tail holds them worst-first; put the best first */
    for (size_t i = 0; i < taken / 2; i++) {
        cand t = c[n - taken + i]; c[n - taken + i] = c[n - 1 - i]; c[n - 1 - i] = t;
    }
    return taken;
}

int32_t ds4_sample(ds4_sampler *s, const float *logits, int n_vocab, ds4_sample_hook hook, void *ud)
{
    if (!s || !logits || n_vocab <= 0) return -1;
    const float *l = logits;
    bool greedy = !(s->p.temperature > 0);
    if (hook) {
        if ((size_t)n_vocab > s->work_cap) {
            s->work_cap = (size_t)n_vocab;
            s->work = xrealloc(s->work, s->work_cap * sizeof *s->work);
        }
        memcpy(s->work, logits, (size_t)n_vocab * sizeof *s->work);
        hook(ud, s->work, n_vocab, &greedy);
        l = s->work;
    }
    int32_t best = argmax(l, n_vocab);
    if (best < 0 || greedy || isinf(l[best])) return best; /* +inf: nothing to weigh */
    float m = l[best], t = s->p.temperature, inv_t = 1.0f / t;

    /* min-p is a logit threshold: p_i >= min_p * p_max  <=>  l_i >= m + T ln(min_p). */
    float floor_logit = -INFINITY;
    if (s->p.min_p > 0) floor_logit = s->p.min_p >= 1 ? m : m + t * logf(s->p.min_p);
    if ((size_t)n_vocab > s->c_cap) {
        s->c_cap = (size_t)n_vocab;
        s->c = xrealloc(s->c, s->c_cap * sizeof *s->c);
        s->w = xrealloc(s->w, s->c_cap * sizeof *s->w);
    }
    cand *c = s->c;
    size_t n = 0;
    for (int i = 0; i < n_vocab; i++) {
        float v = l[i];
        if (v >= floor_logit && v > -INFINITY) c[n++] = (cand){ v, i };
    }
    if (s->p.top_k > 0 && (size_t)s->p.top_k < n) {
        select_top(c, n, (size_t)s->p.top_k);
        n = (size_t)s->p.top_k;
    }
    float *w = s->w;
    double total = 0;
    for (size_t i = 0; i < n; i++) total += w[i] = expf((c[i].logit - m) * inv_t);
    if (s->p.top_p < 1) {
        double need = (s->p.top_p > 0 ? s->p.top_p : 0) * total;
        size_t kept = nucleus(c, n, m, inv_t, need);
        c += n - kept;
        n = kept;
        total = 0;
        for (size_t i = 0; i < n; i++) total += w[i] = expf((c[i].logit - m) * inv_t);
    }
    double r = uniform01(s->s) * total, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += w[i];
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}
