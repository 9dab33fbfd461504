/* test_cpu_ops.c — discrete choices of the CPU backend's operations on
 * exact ties, which random weights almost never produce but real runs do
 * (indexer rows whose head dots are all ≤ 0 score exactly 0): the router
 * keeps the lower expert id, the indexer the lower row, as the reference
 * does (doc/model.md §6.5, §7). Thread counts must not change the choice.
 * Also the routed experts in 8-bit activation arithmetic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_ops.h"
#include "engine/gguf.h"
#include "engine/testkit/mkmodel.h"
#include "engine/model.h"
#include "tests/test.h"

typedef struct {
    gguf_file *f;
    ds4_model *m;
    void *ctx;
} tiny_ops;

/* The golden shape with a byte-level vocabulary: 16 experts (6 used),
 * 4 indexer heads × 128, top-k 8, routing layers from layer 3 on. */
static void tiny_open(tiny_ops *t, int threads)
{
    mk_spec s;
    mk_spec_tiny(&s);
    const char *path = test_tmp_path("tiny-%d.gguf", threads);
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    t->f = gguf_open(path, &err);
    CHECK_MSG(t->f != NULL, "%s", err.msg);
    t->m = model_bind(t->f, &err);
    CHECK_MSG(t->m != NULL, "%s", err.msg);
    t->ctx = cpu_ops_new(t->m, threads, &err);
    CHECK_MSG(t->ctx != NULL, "%s", err.msg);
}

static void tiny_close(tiny_ops *t)
{
    cpu_ops_free(t->ctx);
    model_free(t->m);
    gguf_close(t->f);
}

static ds4_buf *buf_of(tiny_ops *t, const void *data, size_t bytes)
{
    ds4_buf *b = cpu_ops.alloc(t->ctx, bytes);
    CHECK(b != NULL);
    if (data) CHECK(cpu_ops.write(t->ctx, b, 0, data, bytes) == 0);
    return b;
}

/* Router logits for T tokens with exact ties at the selection boundary. */
static void check_router(int threads)
{
    tiny_ops t;
    tiny_open(&t, threads);
    const ds4_hparams *hp = &t.m->hp;
    int E = hp->n_expert, k = hp->n_expert_used;
    CHECK_EQ_INT(E, 16);
    CHECK_EQ_INT(k, 6);
    enum { T = 3 };
    float logits[T][16];
    /* token 0: all equal → experts 0..5 */
    for (int e = 0; e < E; e++) logits[0][e] = 0.25f;
    /* token 1: 14 and 3 clearly best, then an 8-way tie for 4 places
     * (ids 1, 2, 5, 6, 9, 10, 12, 15) → 1, 2, 5, 6 */
    for (int e = 0; e < E; e++) logits[1][e] = -3.0f;
    logits[1][14] = 2.0f;
    logits[1][3] = 1.5f;
    static const int tied[] = { 15, 12, 10, 9, 6, 5, 2, 1 };
    for (int i = 0; i < 8; i++) logits[1][tied[i]] = 0.5f;
    /* token 2: distinct values, the largest at high ids */
    for (int e = 0; e < E; e++) logits[2][e] = 0.1f * (float)e;
    int32_t tokens[T] = { 1, 2, 3 };
    ds4_buf *lg = buf_of(&t, logits, sizeof logits), *tok = buf_of(&t, tokens, sizeof tokens);
    ds4_buf *sel = buf_of(&t, NULL, T * (size_t)k * 4), *w = buf_of(&t, NULL, T * (size_t)k * 4);
    /* no bias, no hash table: plain top-k by probability */
    CHECK(cpu_ops.router(t.ctx, lg, NULL, NULL, tok, T, sel, w) == 0);
    int32_t got[T][6];
    float wt[T][6];
    CHECK(cpu_ops.read(t.ctx, sel, 0, got, sizeof got) == 0);
    CHECK(cpu_ops.read(t.ctx, w, 0, wt, sizeof wt) == 0);
    static const int32_t want[T][6] = {
        { 0, 1, 2, 3, 4, 5 },
        { 14, 3, 1, 2, 5, 6 },
        { 15, 14, 13, 12, 11, 10 },
    };
    for (int i = 0; i < T; i++)
        for (int j = 0; j < k; j++)
            CHECK_MSG(got[i][j] == want[i][j], "%d threads, token %d slot %d: expert %d, expected %d", threads, i, j,
                      got[i][j], want[i][j]);
    /* equal probabilities get equal weights: scale / k each when normalised */
    if (hp->expert_weights_norm)
        for (int j = 0; j < k; j++) CHECK_NEAR(wt[0][j], hp->expert_weights_scale / (float)k, 1e-6);
    cpu_ops.release(t.ctx, lg);
    cpu_ops.release(t.ctx, tok);
    cpu_ops.release(t.ctx, sel);
    cpu_ops.release(t.ctx, w);
    tiny_close(&t);
}

TEST(cpu_ops, router_ties_go_to_the_lower_expert_id)
{
    check_router(1);
    check_router(2);
}

/* 16 visible indexer rows (position 63, ratio 4), top-k 8: rows 2, 5 and
 * 9 score above 0; scores are Σ max(0, ·), so every other row, negative
 * dot or zero, ties at exactly 0 and the lowest five of them fill the
 * selection, listed in increasing row order. */
static void check_indexer(int threads, ds4_cache_type ct)
{
    tiny_ops t;
    tiny_open(&t, threads);
    const ds4_hparams *hp = &t.m->hp;
    int nh = hp->n_indexer_head, hd = hp->indexer_head_dim, K = hp->indexer_top_k;
    CHECK_EQ_INT(K, 8);
    enum { NROWS = 16 };
    size_t esz = ct == DS4_CACHE_F16 ? 2 : 4;
    float *q = test_alloc((size_t)nh * (size_t)hd * 4), *wts = test_alloc((size_t)nh * 4);
    float *rows = test_alloc((size_t)NROWS * (size_t)hd * 4);
    for (int h = 0; h < nh; h++) {
        wts[h] = 1.0f;
        for (int d = 0; d < hd; d++) q[h * hd + d] = d == 0 ? 1.0f : 0.0f;
    }
    /* row c's first dim decides its score: positive for 2, 5, 9 (9 the
     * highest), negative or zero elsewhere (clamped to a score of 0) */
    for (int c = 0; c < NROWS; c++) rows[(size_t)c * (size_t)hd] = c % 3 == 0 ? -1.0f : 0.0f;
    rows[2 * (size_t)hd] = 0.5f;
    rows[5 * (size_t)hd] = 0.25f;
    rows[9 * (size_t)hd] = 1.0f;
    ds4_buf *qb = buf_of(&t, q, (size_t)nh * (size_t)hd * 4), *wb = buf_of(&t, wts, (size_t)nh * 4);
    ds4_buf *f32rows = buf_of(&t, rows, (size_t)NROWS * (size_t)hd * 4);
    ds4_buf *kb = buf_of(&t, NULL, (size_t)NROWS * (size_t)hd * esz);
    CHECK(cpu_ops.store_rows(t.ctx, f32rows, NROWS, hd, kb, ct, 0, 0) == 0);
    ds4_buf *sel = buf_of(&t, NULL, (size_t)K * 4);
    CHECK(cpu_ops.indexer(t.ctx, qb, wb, kb, ct, 4, 63, 1, sel) == 0);
    int32_t got[8];
    CHECK(cpu_ops.read(t.ctx, sel, 0, got, sizeof got) == 0);
    static const int32_t want[8] = { 0, 1, 2, 3, 4, 5, 6, 9 };
    for (int j = 0; j < K; j++)
        CHECK_MSG(got[j] == want[j], "%d threads, cache %s, slot %d: row %d, expected %d", threads,
                  ct == DS4_CACHE_F16 ? "f16" : "f32", j, got[j], want[j]);
    cpu_ops.release(t.ctx, qb);
    cpu_ops.release(t.ctx, wb);
    cpu_ops.release(t.ctx, f32rows);
    cpu_ops.release(t.ctx, kb);
    cpu_ops.release(t.ctx, sel);
    tiny_close(&t);
}

TEST(cpu_ops, indexer_ties_go_to_the_lower_row)
{
    check_indexer(1, DS4_CACHE_F32);
    check_indexer(2, DS4_CACHE_F32);
    check_indexer(2, DS4_CACHE_F16);
}

/* The routed experts in 8-bit activation arithmetic (cpu_expert_arith
 * Q8K): T tokens at once give every token the bits it gets alone and with
 * any thread count (the integer products do not depend on the tile), and
 * land near the exact f32 products without equalling them. */
static void moe_run(int threads, bool q8k, int T, int t0, const float *x, const int32_t *sel, const float *wt,
                    float *y)
{
    tiny_ops t;
    tiny_open(&t, threads);
    const ds4_hparams *hp = &t.m->hp;
    const ds4_layer *L = &t.m->layers[hp->n_layer - 1];
    int64_t D = hp->n_embd;
    int k = hp->n_expert_used;
    cpu_ops_set_expert_arith(t.ctx, q8k ? CPU_EXPERTS_Q8K : CPU_EXPERTS_F32);
    ds4_buf *xb = buf_of(&t, x + t0 * D, (size_t)(T * D) * 4), *sb = buf_of(&t, sel + t0 * k, (size_t)(T * k) * 4);
    ds4_buf *wb = buf_of(&t, wt + t0 * k, (size_t)(T * k) * 4), *yb = buf_of(&t, NULL, (size_t)(T * D) * 4);
    CHECK(cpu_ops.moe(t.ctx, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, xb, sb, wb, T, hp->swiglu_clamp[0],
                      yb) == 0);
    CHECK(cpu_ops.read(t.ctx, yb, 0, y + t0 * D, (size_t)(T * D) * 4) == 0);
    cpu_ops.release(t.ctx, xb);
    cpu_ops.release(t.ctx, sb);
    cpu_ops.release(t.ctx, wb);
    cpu_ops.release(t.ctx, yb);
    tiny_close(&t);
}

TEST(cpu_ops, q8k_experts_are_batch_and_thread_invariant_and_near_f32)
{
    enum { T = 7, D = 256, K = 6 };
    static float x[T * D], wt[T * K], prefill[T * D], alone[T * D], two[T * D], f32[T * D];
    static int32_t sel[T * K];
    uint32_t s = 12345;
    for (int i = 0; i < T * D; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((int32_t)(s >> 8) % 2000) / 1000.0f;
    }
    for (int t = 0; t < T; t++)
        for (int j = 0; j < K; j++) {
            sel[t * K + j] = (t + 3 * j) % 16; /* distinct within a token, shared across tokens */
            wt[t * K + j] = 0.1f + 0.05f * (float)j;
        }
    moe_run(1, true, T, 0, x, sel, wt, prefill);
    for (int t = 0; t < T; t++) moe_run(1, true, 1, t, x, sel, wt, alone);
    moe_run(2, true, T, 0, x, sel, wt, two);
    moe_run(1, false, T, 0, x, sel, wt, f32);
    CHECK(memcmp(prefill, alone, sizeof prefill) == 0);
    CHECK(memcmp(prefill, two, sizeof prefill) == 0);
    double num = 0, den = 0;
    for (int i = 0; i < T * D; i++) {
        num += ((double)prefill[i] - f32[i]) * ((double)prefill[i] - f32[i]);
        den += (double)f32[i] * f32[i];
    }
    CHECK_MSG(den > 0 && num > 0, "the 8-bit path gave the f32 products exactly (or nothing)");
    CHECK_MSG(sqrt(num / den) < 0.05, "relative distance to f32 %.3g", sqrt(num / den));
}
