/* test_forward.c — the forward pass's numerics building blocks and its
 * invariances: chunked prefill gives the bits of token-by-token decode
 * across window, compression and indexer boundaries, for any thread
 * count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/numerics.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

/* ---- rounding simulations (doc/model.md §2.2, §2.3) -------------------------------- */

TEST(forward_numerics, e4m3_rounds_to_nearest_even_code)
{
    CHECK(fp8_e4m3_round(1.0625f) == 1.0f);   /* tie between codes 56 and 57 */
    CHECK(fp8_e4m3_round(1.1875f) == 1.25f);  /* tie between 57 and 58 */
    CHECK(fp8_e4m3_round(448.0f) == 448.0f);
    CHECK(fp8_e4m3_round(-3.3f) == -3.25f);
    CHECK(fp8_e4m3_round(0x1p-9f) == 0x1p-9f); /* smallest subnormal */
    CHECK(fp8_e4m3_round(0x1.8p-10f) == 0x1p-9f);
    CHECK(fp8_e4m3_round(0x1p-10f) == 0.0f);   /* tie to code 0 */
    CHECK(fp8_e4m3_round(0.0f) == 0.0f);
}

TEST(forward_numerics, fp8_block_scale_and_tiny_blocks)
{
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = i == 5 ? 3.0f : 0.01f * (float)(i % 7);
    sim_fp8_blocks(x, 64);
    /* amax 3 → scale 2^ceil(log2(3/448)) = 2^-7: 3 = 384·2^-7 is exact */
    CHECK(x[5] == 3.0f);
    for (int i = 0; i < 64; i++) CHECK(fabsf(x[i] - (i == 5 ? 3.0f : 0.01f * (float)(i % 7))) <= 0.0625f * fabsf(x[i]) + 1e-9f);
    /* a block under 1e-4 uses the scale of amax = 1e-4: 2^-22 */
    float y[64];
    for (int i = 0; i < 64; i++) y[i] = i ? 0 : 3e-5f;
    sim_fp8_blocks(y, 64);
    float want = fp8_e4m3_round(3e-5f / 0x1p-22f) * 0x1p-22f;
    CHECK(y[0] == want);
}

TEST(forward_numerics, e2m1_rounds_ties_to_even_index)
{
    CHECK(fp4_e2m1_round(2.5f) == 2.0f);
    CHECK(fp4_e2m1_round(5.0f) == 4.0f);
    CHECK(fp4_e2m1_round(0.25f) == 0.0f);
    CHECK(fp4_e2m1_round(1.25f) == 1.0f);
    CHECK(fp4_e2m1_round(0.75f) == 1.0f);
    CHECK(fp4_e2m1_round(3.0f) == 3.0f);
    CHECK(fp4_e2m1_round(-5.5f) == -6.0f);
    float x[32] = { 3.0f, 1.25f, 0.7f };
    sim_fp4_blocks(x, 32); /* amax 3 → scale 0.5 */
    CHECK(x[0] == 3.0f);
    CHECK(x[1] == 1.0f);   /* 2.5 → 2 (·0.5) */
    CHECK(x[2] == 0.75f);  /* 1.4 → 1.5 */
}

TEST(forward_numerics, hadamard_is_an_orthonormal_involution)
{
    float x[128], y[128];
    double n0 = 0, n1 = 0;
    for (int i = 0; i < 128; i++) {
        x[i] = sinf((float)i * 0.37f) + 0.1f * (float)(i % 5);
        n0 += (double)x[i] * x[i];
    }
    memcpy(y, x, sizeof x);
    sim_hadamard(y, 128);
    for (int i = 0; i < 128; i++) n1 += (double)y[i] * y[i];
    CHECK_NEAR(n1, n0, 1e-4 * n0);
    sim_hadamard(y, 128);
    for (int i = 0; i < 128; i++) CHECK_NEAR(y[i], x[i], 1e-5);
    /* the first output is the scaled sum */
    float one[128];
    for (int i = 0; i < 128; i++) one[i] = 1.0f;
    sim_hadamard(one, 128);
    CHECK_NEAR(one[0], 128.0f * 0.08838834764831845f, 1e-4);
    CHECK_NEAR(one[1], 0.0f, 1e-6);
}

/* ---- RoPE (§2.1) ---------------------------------------------------------------------- */

TEST(forward_numerics, rope_frequencies_match_the_spec_table)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    const ds4_hparams *hp = &e->model->hp;
    ds4_rope comp, plain;
    rope_params(hp, 1, &comp);
    rope_params(hp, 0, &plain);
    CHECK_EQ_INT(comp.n_rot, 64);
    float cs[32], sn[32];
    /* at p = 1 the angle of pair k is ω_k */
    static const double want[32] = { 1.0, 6.876560e-1, 4.728708e-1, 3.251725e-1, 2.236068e-1, 1.537646e-1,
                                     1.057371e-1, 7.271077e-2, 5.0e-2, 3.438280e-2, 2.364354e-2, 1.625862e-2,
                                     1.118034e-2, 7.688228e-3, 5.286856e-3, 3.635539e-3, 2.265625e-3, 1.396801e-3,
                                     8.496897e-4, 5.080820e-4, 2.969778e-4, 1.681800e-4, 9.086784e-5, 4.544423e-5,
                                     1.953125e-5, 5.372313e-6, 3.694303e-6, 2.540410e-6, 1.746928e-6, 1.201286e-6,
                                     8.260713e-7, 5.680529e-7 };
    rope_cos_sin(&comp, 1, 0, cs, sn);
    for (int k = 0; k < 32; k++) {
        double th = atan2((double)sn[k], (double)cs[k]);
        CHECK_MSG(fabs(th - want[k]) <= 1e-5 * want[k] + 1e-9, "pair %d: %.7g vs %.7g", k, th, want[k]);
        CHECK_NEAR((double)cs[k] * cs[k] + (double)sn[k] * sn[k], 1.0, 1e-6); /* no YaRN magnitude */
    }
    rope_cos_sin(&plain, 1, 0, cs, sn);
    CHECK_NEAR(atan2(sn[1], cs[1]), 0.7498942, 1e-6);
    CHECK_NEAR(atan2(sn[31], cs[31]), 1.333521e-4, 1e-9);
    /* inverse undoes forward */
    float c2[32], s2[32];
    rope_cos_sin(&comp, 12345, 1, c2, s2);
    rope_cos_sin(&comp, 12345, 0, cs, sn);
    for (int k = 0; k < 32; k++) {
        CHECK(c2[k] == cs[k]);
        CHECK(s2[k] == -sn[k]);
    }
    ds4_engine_close(e);
}

/* ---- invariances ---------------------------------------------------------------------- */

/* 160 tokens cross the raw window (16), the first ratio-4 and ratio-128
 * rows, and the indexer's top-8 limit (36 tokens) of the golden model. */
static void check_chunks(ds4_quant_sim qs)
{
    ds4_engine *e = fwd_test_engine(qs, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 160, 311, 7);
    int V = 311;
    float *ref = test_alloc((size_t)V * 4), *got = test_alloc((size_t)V * 4);
    /* one token at a time: a session eval per token */
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, 200, &err);
    CHECK(s != NULL);
    for (size_t i = 0; i < ids.n; i++) CHECK_EQ_INT(ds4_session_eval(s, ids.ids[i], NULL, &err), DS4_OK);
    memcpy(ref, ds4_session_logits(s), (size_t)V * 4);
    ds4_session_close(s);
    static const int chunks[] = { 3, 4, 17, 64, 256 };
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        fwd_logits_after(e, 200, chunks[c], ids.ids, ids.n, got);
        CHECK_MSG(memcmp(ref, got, (size_t)V * 4) == 0, "chunk %d differs from token-by-token", chunks[c]);
    }
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

TEST(forward_chunks, prefill_equals_token_by_token_release_numerics) { check_chunks(DS4_QSIM_FULL); }
TEST(forward_chunks, prefill_equals_token_by_token_without_simulations) { check_chunks(DS4_QSIM_NONE); }

TEST(forward_threads, logits_do_not_depend_on_the_thread_count)
{
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 90, 311, 11);
    float *a = test_alloc(311 * 4), *b = test_alloc(311 * 4);
    ds4_engine *e1 = fwd_test_engine(DS4_QSIM_FULL, 1);
    fwd_logits_after(e1, 128, 32, ids.ids, ids.n, a);
    ds4_engine_close(e1);
    ds4_engine *e3 = fwd_test_engine(DS4_QSIM_FULL, 3);
    fwd_logits_after(e3, 128, 32, ids.ids, ids.n, b);
    ds4_model_info info;
    ds4_engine_info(e3, &info);
    CHECK_CONTAINS(info.device_name, "3 threads");
    /* the release numerics' default expert arithmetic, named at start */
    CHECK_CONTAINS(info.device_name, "experts Q8_K");
    ds4_engine_close(e3);
    CHECK(memcmp(a, b, 311 * 4) == 0);
    ds4_tokens_free(&ids);
}

/* A trace hook sees every stage once per token and layer. */
typedef struct {
    int attn_norm, experts, logits;
} trace_count;

static void count_trace(void *ud, const char *name, int layer, int64_t pos, const void *data, size_t bytes)
{
    (void)layer;
    (void)pos;
    (void)data;
    trace_count *c = ud;
    if (!strcmp(name, "attn_norm") && bytes == 256 * 4) c->attn_norm++;
    if (!strcmp(name, "experts") && bytes == 6 * 4) c->experts++;
    if (!strcmp(name, "logits") && bytes == 311 * 4) c->logits++;
}

TEST(forward_trace, hook_reports_every_token_and_layer)
{
    ds4_engine *e = fwd_test_engine(DS4_QSIM_FULL, 1);
    trace_count c = { 0 };
    fwd_set_trace(fwd_of(e), count_trace, &c);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 10, 311, 3);
    float *lg = test_alloc(311 * 4);
    fwd_logits_after(e, 16, 4, ids.ids, ids.n, lg);
    CHECK_EQ_INT(c.attn_norm, 10 * 6);
    CHECK_EQ_INT(c.experts, 10 * 6);
    CHECK_EQ_INT(c.logits, 1);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}
