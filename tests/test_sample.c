/* Sampler: greedy and its ties, seeded determinism, the softmax
 * distribution, each filter, the hook, and a full-size vocabulary. The
 * statistical checks use fixed seeds and wide bounds: deterministic, and
 * still far from passing with a wrong distribution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ds4.h"
#include "tests/test.h"

static ds4_sampler *sampler(float temp, int top_k, float top_p, float min_p, uint64_t seed)
{
    ds4_sampling p = { .temperature = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p, .seed = seed };
    ds4_sampler *s = ds4_sampler_new(&p);
    CHECK(s != NULL);
    return s;
}

/* Frequencies of n draws over a small vocabulary. */
static void draw(ds4_sampler *s, const float *logits, int nv, int n, double *freq)
{
    for (int i = 0; i < nv; i++) freq[i] = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ds4_sample(s, logits, nv, NULL, NULL);
        CHECK(id >= 0 && id < nv);
        freq[id] += 1.0 / n;
    }
}

TEST(sample, greedy_and_ties)
{
    ds4_sampler *s = sampler(0, 0, 1, 0, 1);
    float l[] = { 1, 3, 3, 2 };
    CHECK_EQ_INT(ds4_sample(s, l, 4, NULL, NULL), 1);
    float nan_first[] = { NAN, 0.5f, -INFINITY, 0.5f };
    CHECK_EQ_INT(ds4_sample(s, nan_first, 4, NULL, NULL), 1);
    float masked[] = { -INFINITY, -INFINITY, NAN };
    CHECK_EQ_INT(ds4_sample(s, masked, 3, NULL, NULL), -1);
    ds4_sampler_free(s);
    /* temperature sampling with everything masked also says -1 */
    s = sampler(1, 0, 1, 0, 1);
    CHECK_EQ_INT(ds4_sample(s, masked, 3, NULL, NULL), -1);
    ds4_sampler_free(s);
}

TEST(sample, same_seed_same_choices)
{
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)(i % 5) * 0.3f;
    ds4_sampler *a = sampler(1, 0, 1, 0, 1234), *b = sampler(1, 0, 1, 0, 1234), *c = sampler(1, 0, 1, 0, 4321);
    int differ = 0;
    for (int i = 0; i < 2000; i++) {
        int32_t x = ds4_sample(a, l, 16, NULL, NULL), y = ds4_sample(b, l, 16, NULL, NULL);
        CHECK_EQ_INT(x, y);
        differ += x != ds4_sample(c, l, 16, NULL, NULL);
    }
    CHECK(differ > 500);
    ds4_sampler_free(a);
    ds4_sampler_free(b);
    ds4_sampler_free(c);
}

TEST(sample, follows_softmax_with_temperature)
{
    float l[] = { 0, 1, 2, 3 };
    double freq[4];
    for (int pass = 0; pass < 2; pass++) {
        float t = pass ? 0.5f : 1.0f;
        ds4_sampler *s = sampler(t, 0, 1, 0, 7 + pass);
        draw(s, l, 4, 40000, freq);
        double z = 0, p[4];
        for (int i = 0; i < 4; i++) z += p[i] = exp(l[i] / t);
        for (int i = 0; i < 4; i++) CHECK_NEAR(freq[i], p[i] / z, 0.015);
        ds4_sampler_free(s);
    }
}

/* probabilities 0.5, 0.3, 0.15, 0.05 at temperature 1 */
static const float four[] = { 2.30258509f, 1.79175947f, 1.09861229f, 0.0f };

TEST(sample, top_k_keeps_the_k_best)
{
    double freq[8];
    ds4_sampler *s = sampler(1, 2, 1, 0, 11);
    draw(s, four, 4, 20000, freq);
    CHECK(freq[2] == 0 && freq[3] == 0);
    CHECK_NEAR(freq[0], 0.5 / 0.8, 0.02);
    ds4_sampler_free(s);
    /* ties at the boundary go to the lower ids */
    float flat[8] = { 0 };
    s = sampler(1, 3, 1, 0, 12);
    draw(s, flat, 8, 3000, freq);
    for (int i = 0; i < 8; i++) CHECK(i < 3 ? freq[i] > 0.25 : freq[i] == 0);
    ds4_sampler_free(s);
}

TEST(sample, top_p_keeps_the_nucleus)
{
    double freq[4];
    ds4_sampler *s = sampler(1, 0, 0.7f, 0, 13);
    draw(s, four, 4, 20000, freq);
    CHECK(freq[2] == 0 && freq[3] == 0);
    CHECK_NEAR(freq[1], 0.3 / 0.8, 0.02);
    ds4_sampler_free(s);
    s = sampler(1, 0, 0.9f, 0, 14); /* 0.5 + 0.3 < 0.9: the third joins */
    draw(s, four, 4, 20000, freq);
    CHECK(freq[3] == 0 && freq[2] > 0.1);
    ds4_sampler_free(s);
    s = sampler(1, 0, 0.0f, 0, 15); /* nothing requested: the best still survives */
    draw(s, four, 4, 1000, freq);
    CHECK(freq[1] == 0 && freq[2] == 0 && freq[3] == 0);
    ds4_sampler_free(s);
}

TEST(sample, min_p_drops_the_unlikely)
{
    double freq[4];
    ds4_sampler *s = sampler(1, 0, 1, 0.2f, 16); /* keeps p >= 0.1 */
    draw(s, four, 4, 20000, freq);
    CHECK(freq[3] == 0);
    CHECK_NEAR(freq[2], 0.15 / 0.95, 0.02);
    ds4_sampler_free(s);
    s = sampler(1, 0, 1, 0.7f, 17); /* keeps p >= 0.35 */
    draw(s, four, 4, 2000, freq);
    CHECK(freq[1] == 0 && freq[2] == 0 && freq[3] == 0);
    ds4_sampler_free(s);
    /* at temperature 2 the distribution flattens and 0.05 passes 0.2 * p_max */
    s = sampler(2, 0, 1, 0.2f, 18);
    draw(s, four, 4, 20000, freq);
    CHECK(freq[3] > 0.05);
    ds4_sampler_free(s);
}

typedef struct {
    int masked;
    bool force;
    int calls;
} hook_state;

static void hook(void *ud, float *logits, int n, bool *greedy)
{
    hook_state *h = ud;
    h->calls++;
    if (h->masked >= 0) logits[h->masked] = -INFINITY;
    if (h->masked == -2)
        for (int i = 0; i < n; i++) logits[i] = -INFINITY;
    if (h->force) *greedy = true;
}

TEST(sample, hook_masks_and_forces_greedy)
{
    float l[] = { 0.1f, 0.9f, 0.5f, 0.4f };
    float before[4];
    memcpy(before, l, sizeof l);
    ds4_sampler *s = sampler(1, 0, 1, 0, 19);
    hook_state h = { .masked = 1, .force = false };
    for (int i = 0; i < 2000; i++) CHECK(ds4_sample(s, l, 4, hook, &h) != 1);
    CHECK_EQ_INT(h.calls, 2000);
    CHECK(!memcmp(l, before, sizeof l)); /* the caller's logits are untouched */
    h.force = true;
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(ds4_sample(s, l, 4, hook, &h), 2);
    h.masked = -1;
    CHECK_EQ_INT(ds4_sample(s, l, 4, hook, &h), 1);
    h.masked = -2;
    h.force = false;
    CHECK_EQ_INT(ds4_sample(s, l, 4, hook, &h), -1);
    ds4_sampler_free(s);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

TEST(sample, full_vocabulary_filters)
{
    enum { N = 129280 };
    float *l = malloc(N * sizeof *l), *sorted = malloc(N * sizeof *sorted);
    uint64_t x = 99;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        l[i] = (float)((x >> 40) % 100000) / 8000.0f; /* spread 0..12.5 */
    }
    memcpy(sorted, l, N * sizeof *l);
    qsort(sorted, N, sizeof *sorted, cmp_desc);
    /* top-k 40: the choice is never below the 40th best logit */
    ds4_sampler *s = sampler(1, 40, 1, 0, 21);
    for (int i = 0; i < 200; i++) {
        int32_t id = ds4_sample(s, l, N, NULL, NULL);
        if (!(id >= 0 && l[id] >= sorted[39])) {
            free(l);
            free(sorted);
            FAIL("top-k chose %d", id);
        }
    }
    ds4_sampler_free(s);
    /* top-p 0.5: the choice lies in the smallest prefix holding half the mass */
    double z = 0, acc = 0;
    for (int i = 0; i < N; i++) z += exp(sorted[i] - sorted[0]);
    float cut = sorted[0];
    for (int i = 0; i < N && acc < 0.5 * z; i++) {
        acc += exp(sorted[i] - sorted[0]);
        cut = sorted[i];
    }
    s = sampler(1, 0, 0.5f, 0, 22);
    int below = 0, distinct_hits = 0;
    int32_t first = -1;
    for (int i = 0; i < 300; i++) {
        int32_t id = ds4_sample(s, l, N, NULL, NULL);
        below += !(id >= 0 && l[id] >= cut);
        if (first < 0) first = id;
        distinct_hits += id != first;
    }
    ds4_sampler_free(s);
    free(l);
    free(sorted);
    CHECK_EQ_INT(below, 0);
    CHECK(distinct_hits > 0);
}
