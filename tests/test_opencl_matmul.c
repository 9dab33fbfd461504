/* test_opencl_matmul.c — the OpenCL matmul and moe ops against the CPU ops
 * on random data (tests/opencl_util.h): every weight format, decode and
 * prefill token counts (including counts that are not a multiple of the
 * tile), grouped rows, odd row counts, weights split over several device
 * buffers, experts repeated within a token or used by none, the SwiGLU
 * clamp on and off; each in both kernel shapes (IQ2_XXS included: the
 * tables the kernels take are uploaded from the engine's). Also: a token
 * gives the same bits alone and inside a chunk, and ds4cl-bench --cl-bench
 * runs. Skips where no OpenCL device exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "opencl/cl_runtime.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

static const clo_kernel_shape shapes[] = { CLO_SHAPE_CPU, CLO_SHAPE_GPU };
static const uint32_t all_types[] = { GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16,   GGML_TYPE_Q8_0,
                                      GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
static const int token_counts[] = { 1, 2, 5, 64, 67 };

/* f32 rounding of sums of a few hundred products in another order,
 * relative to the largest output of a token (seen: below 5e-7) */
#define TOL 3e-6

static oclt *open_with(const mk_spec *spec, clo_kernel_shape shape, uint64_t max_alloc)
{
    clo_options o = { .shape = shape, .max_alloc = max_alloc };
    return oclt_open_with(spec, &o);
}

/* y = W·x on both sides; x random in [-1, 1). Returns y. */
static oclt_buf check_matmul(oclt *f, const ds4_tensor *W, int T, int n_groups)
{
    size_t in = (size_t)W->ne[0] * (size_t)n_groups, out = (size_t)W->ne[1];
    oclt_buf x = oclt_floats(f, (size_t)T * in, -1, 1), y = oclt_zeros(f, (size_t)T * out * 4);
    OCLT_BOTH(f, OPS->matmul(CTX, W, BUF(x), T, n_groups, BUF(y)));
    OCLT_CLOSE(f, y, (size_t)T * out, out, TOL);
    return y;
}

/* ---- matmul ------------------------------------------------------------------------- */

static void matmul_formats(clo_kernel_shape shape)
{
    oclt *f = open_with(NULL, shape, 0);
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        const ds4_tensor *W = oclt_tensor(f, all_types[i], 512, 37, 1, 0.3f);
        for (size_t j = 0; j < sizeof token_counts / sizeof token_counts[0]; j++) check_matmul(f, W, token_counts[j], 1);
    }
    oclt_close(f);
}

TEST(opencl_matmul, every_format_decode_and_prefill_cpu_shape) { matmul_formats(CLO_SHAPE_CPU); }
TEST(opencl_matmul, every_format_decode_and_prefill_gpu_shape) { matmul_formats(CLO_SHAPE_GPU); }

TEST(opencl_matmul, plain_types_with_rows_not_a_multiple_of_32)
{
    for (size_t s = 0; s < 2; s++) {
        oclt *f = open_with(NULL, shapes[s], 0);
        const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
        const int64_t lens[] = { 7, 77, 300 };
        for (size_t i = 0; i < 3; i++)
            for (size_t j = 0; j < 3; j++) {
                const ds4_tensor *W = oclt_tensor(f, types[i], lens[j], 13, 1, 1.0f);
                check_matmul(f, W, 1, 1);
                check_matmul(f, W, 9, 1);
            }
        oclt_close(f);
    }
}

TEST(opencl_matmul, grouped_rows_and_the_fixture_projections)
{
    for (size_t s = 0; s < 2; s++) {
        oclt *f = open_with(NULL, shapes[s], 0);
        /* 4 groups of 9 rows: groups that end inside a row block */
        const ds4_tensor *W = oclt_tensor(f, GGML_TYPE_Q8_0, 128, 36, 1, 0.5f);
        for (size_t j = 0; j < sizeof token_counts / sizeof token_counts[0]; j++) {
            check_matmul(f, W, token_counts[j], 4);
            check_matmul(f, W, token_counts[j], 9);
        }
        const ds4_layer *L = &f->m->layers[2];
        for (int T = 1; T <= 65; T += 64) {
            check_matmul(f, &L->attn_output_a, T, f->hp->n_out_group);
            check_matmul(f, &L->attn_q_b, T, 1);
            check_matmul(f, &L->ffn_gate_shexp, T, 1);
            check_matmul(f, &f->m->output, T, 1);
        }
        OCLT_CL_FAILS(f, OPS->matmul(CTX, W, NULL, 1, 5, NULL), "groups");
        oclt_close(f);
    }
}

/* CPU devices walk the prefill tiles of long rows panel by panel (matmul.cl,
 * tile_ids: 384 KiB of rows per panel, 32 rows a work-group): rows of
 * 8192 Q8_0 weights make one work-group a panel, rows of 4096 two, so 96
 * rows (three work-groups) end in a partial panel; 20 tokens are four
 * token blocks. Every tile must still be computed exactly once. */
TEST(opencl_matmul, prefill_tiles_of_long_rows_walked_in_panels)
{
    for (size_t s = 0; s < 2; s++) {
        oclt *f = open_with(NULL, shapes[s], 0);
        const int lens[] = { 8192, 4096, 1024 };
        for (int i = 0; i < 3; i++) {
            const ds4_tensor *W = oclt_tensor(f, GGML_TYPE_Q8_0, lens[i], 96, 1, 0.3f);
            check_matmul(f, W, 20, 1);
            check_matmul(f, W, 67, 1);
        }
        oclt_close(f);
    }
}

TEST(opencl_matmul, weights_split_over_several_buffers)
{
    for (size_t s = 0; s < 2; s++) {
        /* buffers of at most 64 KiB: a 136 KiB matrix lands in three pieces */
        oclt *f = open_with(NULL, shapes[s], 64 << 10);
        const ds4_tensor *W = oclt_tensor(f, GGML_TYPE_Q8_0, 256, 512, 1, 0.5f);
        const ds4_tensor *G = oclt_tensor(f, GGML_TYPE_F32, 64, 700, 1, 0.5f);
        clo_weight_info wi;
        clo_weights(f->ctx[OCLT_CL], &wi);
        CHECK(wi.split >= 2);
        for (int T = 1; T <= 6; T += 5) {
            check_matmul(f, W, T, 1);
            check_matmul(f, W, T, 8);
            check_matmul(f, G, T, 7);
        }
        oclt_close(f);
    }
}

/* The CPU-shaped kernels give a token the same bits alone as inside a chunk. */
TEST(opencl_matmul, a_token_alone_and_in_a_chunk_agree_bit_for_bit)
{
    oclt *f = open_with(NULL, CLO_SHAPE_CPU, 0);
    const int out = 21, C = OCLT_CL;
    const ds4_ops *ops = f->ops[C];
    void *ctx = f->ctx[C];
    /* short rows in two token blocks; rows longer than a prefill tile's
     * walk over them (40 chunks of 32 against 32) in five blocks, more
     * than a tile of dequantized rows takes at once */
    const struct { int n, T; } cases[] = { { 256, 11 }, { 1280, 30 } };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
            const int n = cases[k].n, T = cases[k].T;
            const ds4_tensor *W = oclt_tensor(f, all_types[i], n, out, 1, 0.3f);
            oclt_buf xs = oclt_floats(f, (size_t)T * n, -1, 1), ys = oclt_zeros(f, (size_t)T * out * 4);
            OCLT_BOTH(f, OPS->matmul(CTX, W, BUF(xs), T, 1, BUF(ys)));
            OCLT_CLOSE(f, ys, (size_t)T * out, out, TOL);
            float *chunk = oclt_read(f, ys, C), one[21];
            oclt_buf x1 = oclt_zeros(f, (size_t)n * 4), y1 = oclt_zeros(f, out * 4);
            for (int t = 0; t < T; t++) {
                CHECK(ops->copy(ctx, x1.b[C], 0, xs.b[C], (size_t)t * n * 4, (size_t)n * 4) == 0);
                CHECK(ops->matmul(ctx, W, x1.b[C], 1, 1, y1.b[C]) == 0);
                CHECK(ops->read(ctx, y1.b[C], 0, one, sizeof one) == 0);
                CHECK_MSG(memcmp(one, chunk + t * out, sizeof one) == 0, "%s, rows of %d: token %d differs alone",
                          quant_type_name(all_types[i]), n, t);
            }
        }
    oclt_close(f);
}

TEST(opencl_matmul, refuses_bad_shapes_and_buffers)
{
    oclt *f = oclt_open(NULL);
    const ds4_tensor *W = oclt_tensor(f, GGML_TYPE_F16, 64, 10, 1, 1.0f);
    const ds4_tensor *I = oclt_tensor(f, GGML_TYPE_I32, 64, 10, 1, 1.0f);
    oclt_buf x = oclt_floats(f, 64, -1, 1), y = oclt_zeros(f, 40);
    OCLT_CL_FAILS(f, OPS->matmul(CTX, W, BUF(x), 2, 1, BUF(y)), "outside a buffer");
    OCLT_CL_FAILS(f, OPS->matmul(CTX, W, BUF(x), 1, 3, BUF(y)), "groups");
    OCLT_CL_FAILS(f, OPS->matmul(CTX, I, BUF(x), 1, 1, BUF(y)), "I32");
    oclt_close(f);
}

/* ---- moe ------------------------------------------------------------------------------- */

typedef struct {
    const ds4_tensor *gate, *up, *down;
} experts;

/* Expert ids for T tokens: slot choices from the first n_used experts
 * (the others get no token); every third token repeats an expert in two
 * of its slots. */
static int32_t *pick_experts(oclt *f, int T, int n_used)
{
    const int k = f->hp->n_expert_used;
    int32_t *sel = test_alloc((size_t)T * (size_t)k * 4);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < k; i++) {
            sel[t * k + i] = (int32_t)oclt_randi(f, (uint32_t)n_used);
            if (t % 3 == 0 && i == k - 1) sel[t * k + i] = sel[t * k];
        }
    return sel;
}

static void run_moe(oclt *f, const experts *ex, int T, float clamp, const int32_t *selv)
{
    const int k = f->hp->n_expert_used, D = (int)ex->gate->ne[0];
    oclt_buf sel = oclt_ints(f, selv, (size_t)T * (size_t)k);
    oclt_buf w = oclt_floats(f, (size_t)T * (size_t)k, 0.05f, 0.6f);
    oclt_buf x = oclt_floats(f, (size_t)T * (size_t)D, -2, 2), y = oclt_zeros(f, (size_t)T * (size_t)D * 4);
    OCLT_BOTH(f, OPS->moe(CTX, ex->gate, ex->up, ex->down, BUF(x), BUF(sel), BUF(w), T, clamp, BUF(y)));
    OCLT_CLOSE(f, y, (size_t)T * (size_t)D, (size_t)D, TOL);
}

static void moe_cases(oclt *f, const experts *ex)
{
    const float clamps[] = { 0.0f, 0.4f };
    for (size_t j = 0; j < sizeof token_counts / sizeof token_counts[0]; j++)
        for (size_t c = 0; c < 2; c++) {
            int T = token_counts[j];
            run_moe(f, ex, T, clamps[c], pick_experts(f, T, f->hp->n_expert - 5));
        }
}

static void moe_formats(clo_kernel_shape shape)
{
    /* the fixture's q2 and q4 experts, then mixed formats */
    for (int q = 0; q < 2; q++) {
        mk_spec spec;
        mk_spec_tiny(&spec);
        mk_set_quant(&spec, q ? "q4" : "q2");
        oclt *f = open_with(&spec, shape, 0);
        for (int l = 0; l < 2; l++) {
            const ds4_layer *L = &f->m->layers[l * 3];
            experts ex = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
            moe_cases(f, &ex);
        }
        if (q == 1) {
            const int D = f->hp->n_embd, F = f->hp->n_ff_exp, E = f->hp->n_expert;
            experts ex = { oclt_tensor(f, GGML_TYPE_Q2_K, D, F, E, 0.1f), NULL, oclt_tensor(f, GGML_TYPE_IQ2_XXS, F, D, E, 0.1f) };
            ex.up = oclt_tensor(f, GGML_TYPE_Q2_K, D, F, E, 0.1f);
            moe_cases(f, &ex);
        }
        oclt_close(f);
    }
}

TEST(opencl_moe, every_expert_format_cpu_shape) { moe_formats(CLO_SHAPE_CPU); }
TEST(opencl_moe, every_expert_format_gpu_shape) { moe_formats(CLO_SHAPE_GPU); }

TEST(opencl_moe, expert_tensors_split_over_several_buffers)
{
    for (size_t s = 0; s < 2; s++) {
        /* 64 KiB buffers: a few experts per piece, and the decode path
         * falls back to the sorted kernels */
        oclt *f = open_with(NULL, shapes[s], 64 << 10);
        clo_weight_info wi;
        clo_weights(f->ctx[OCLT_CL], &wi);
        CHECK(wi.split >= 3);
        const ds4_layer *L = &f->m->layers[1];
        experts ex = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
        for (int T = 1; T <= 7; T += 6) run_moe(f, &ex, T, 0.5f, pick_experts(f, T, f->hp->n_expert));
        oclt_close(f);
    }
}

/* Fused decode and the sorted prefill path give the same bits: T tokens
 * whose slots pick among the first n_used experts, as one chunk and one
 * by one. */
static void moe_alone_vs_chunk(oclt *f, const experts *ex, int T, int n_used)
{
    const int k = f->hp->n_expert_used, D = (int)ex->gate->ne[0], C = OCLT_CL;
    int32_t *selv = pick_experts(f, T, n_used);
    float *wv = test_alloc((size_t)T * (size_t)k * 4);
    for (int i = 0; i < T * k; i++) wv[i] = oclt_randf(f, 0.1f, 0.5f);
    oclt_buf sel = oclt_ints(f, selv, (size_t)T * (size_t)k), w = oclt_bytes(f, wv, (size_t)T * (size_t)k * 4);
    oclt_buf x = oclt_floats(f, (size_t)T * (size_t)D, -2, 2), y = oclt_zeros(f, (size_t)T * (size_t)D * 4);
    OCLT_BOTH(f, OPS->moe(CTX, ex->gate, ex->up, ex->down, BUF(x), BUF(sel), BUF(w), T, 0.5f, BUF(y)));
    OCLT_CLOSE(f, y, (size_t)T * (size_t)D, (size_t)D, TOL);
    float *chunk = oclt_read(f, y, C), *one = test_alloc((size_t)D * 4);
    const ds4_ops *ops = f->ops[C];
    void *ctx = f->ctx[C];
    oclt_buf x1 = oclt_zeros(f, (size_t)D * 4), y1 = oclt_zeros(f, (size_t)D * 4);
    oclt_buf s1 = oclt_zeros(f, (size_t)k * 4), w1 = oclt_zeros(f, (size_t)k * 4);
    for (int t = 0; t < T; t++) {
        CHECK(ops->copy(ctx, x1.b[C], 0, x.b[C], (size_t)t * (size_t)D * 4, (size_t)D * 4) == 0);
        CHECK(ops->write(ctx, s1.b[C], 0, selv + t * k, (size_t)k * 4) == 0);
        CHECK(ops->write(ctx, w1.b[C], 0, wv + t * k, (size_t)k * 4) == 0);
        CHECK(ops->moe(ctx, ex->gate, ex->up, ex->down, x1.b[C], s1.b[C], w1.b[C], 1, 0.5f, y1.b[C]) == 0);
        CHECK(ops->read(ctx, y1.b[C], 0, one, (size_t)D * 4) == 0);
        CHECK_MSG(memcmp(one, chunk + (size_t)t * (size_t)D, (size_t)D * 4) == 0, "D %d: token %d differs alone", D, t);
    }
}

TEST(opencl_moe, a_token_alone_and_in_a_chunk_agree_bit_for_bit)
{
    oclt *f = open_with(NULL, CLO_SHAPE_CPU, 0);
    const ds4_layer *L = &f->m->layers[4];
    experts ex = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
    moe_alone_vs_chunk(f, &ex, 9, 7);
    /* rows longer than one of the prefill tiles' walks over a row (72 and
     * 40 chunks of 32 against 32, the last walk partial) and an expert
     * with more pairs than a tile takes at once (~80 against 24) */
    const int D = 2304, F = 1280, E = f->hp->n_expert;
    experts wide = { oclt_tensor(f, GGML_TYPE_Q2_K, D, F, E, 0.1f), oclt_tensor(f, GGML_TYPE_Q2_K, D, F, E, 0.1f),
                     oclt_tensor(f, GGML_TYPE_Q2_K, F, D, E, 0.1f) };
    moe_alone_vs_chunk(f, &wide, 40, 3);
    oclt_close(f);
}

/* An id outside [0, n_expert) adds nothing (the device cannot refuse it):
 * the same as that slot with weight 0. */
TEST(opencl_moe, an_expert_id_out_of_range_adds_nothing)
{
    for (size_t s = 0; s < 2; s++) {
        oclt *f = open_with(NULL, shapes[s], 0);
        const int k = f->hp->n_expert_used, D = f->hp->n_embd, E = f->hp->n_expert;
        const ds4_layer *L = &f->m->layers[0];
        for (int T = 1; T <= 6; T += 5) {
            int32_t *selv = pick_experts(f, T, E), *bad = test_alloc((size_t)T * (size_t)k * 4);
            memcpy(bad, selv, (size_t)T * (size_t)k * 4);
            float *wv = test_alloc((size_t)T * (size_t)k * 4), *w0 = test_alloc((size_t)T * (size_t)k * 4);
            for (int i = 0; i < T * k; i++) wv[i] = w0[i] = oclt_randf(f, 0.1f, 0.5f);
            for (int t = 0; t < T; t++) {
                int i = t % k;
                bad[t * k + i] = t % 2 ? E + 3 : -1;
                w0[t * k + i] = 0.0f;
            }
            oclt_buf x = oclt_floats(f, (size_t)T * (size_t)D, -2, 2);
            oclt_buf sa = oclt_ints(f, bad, (size_t)T * (size_t)k), sb = oclt_ints(f, selv, (size_t)T * (size_t)k);
            oclt_buf wa = oclt_bytes(f, wv, (size_t)T * (size_t)k * 4), wb = oclt_bytes(f, w0, (size_t)T * (size_t)k * 4);
            oclt_buf ya = oclt_zeros(f, (size_t)T * (size_t)D * 4), yb = oclt_zeros(f, (size_t)T * (size_t)D * 4);
            const int C = OCLT_CL;
            const ds4_ops *ops = f->ops[C];
            void *ctx = f->ctx[C];
            CHECK(ops->moe(ctx, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, x.b[C], sa.b[C], wa.b[C], T, 0,
                           ya.b[C]) == 0);
            CHECK(ops->moe(ctx, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, x.b[C], sb.b[C], wb.b[C], T, 0,
                           yb.b[C]) == 0);
            float *a = oclt_read(f, ya, C), *b = oclt_read(f, yb, C);
            for (size_t i = 0; i < (size_t)T * (size_t)D; i++)
                CHECK_MSG(a[i] == b[i], "element %zu: %.9g with a bad id, %.9g with weight 0", i, a[i], b[i]);
        }
        oclt_close(f);
    }
}

TEST(opencl_moe, refuses_bad_types_shapes_and_buffers)
{
    oclt *f = oclt_open(NULL);
    const ds4_layer *L = &f->m->layers[0];
    const int k = f->hp->n_expert_used, D = f->hp->n_embd;
    oclt_buf x = oclt_floats(f, (size_t)D, -1, 1), y = oclt_zeros(f, (size_t)D * 4);
    oclt_buf sel = oclt_zeros(f, (size_t)k * 4), w = oclt_zeros(f, (size_t)k * 4);
    const ds4_tensor *q8 = oclt_tensor(f, GGML_TYPE_Q8_0, D, f->hp->n_ff_exp, f->hp->n_expert, 0.1f);
    OCLT_CL_FAILS(f, OPS->moe(CTX, q8, q8, &L->ffn_down_exps, BUF(x), BUF(sel), BUF(w), 1, 0, BUF(y)), "Q8_0");
    const ds4_tensor *half = oclt_tensor(f, GGML_TYPE_Q2_K, f->hp->n_ff_exp, D / 2, f->hp->n_expert, 0.1f);
    OCLT_CL_FAILS(f, OPS->moe(CTX, &L->ffn_gate_exps, &L->ffn_up_exps, half, BUF(x), BUF(sel), BUF(w), 1, 0, BUF(y)),
                  "shapes");
    OCLT_CL_FAILS(f, OPS->moe(CTX, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, BUF(x), BUF(sel), BUF(w), 2, 0,
                              BUF(y)),
                  "outside a buffer");
    oclt_close(f);
}

/* ---- the benchmark ----------------------------------------------------------------- */

/* ds4cl-bench --cl-bench on the rows whose name holds `only`, small
 * enough for a test; its output in *text, its exit status returned. */
static int run_cl_bench(const char *only, char **text)
{
    return test_runf(text, "XDG_CACHE_HOME=%s %s/ds4cl-bench --cl-bench --reps 1 --rotate-mb 4 --roof-mb 64 --only %s",
                     oclt_cache_dir(), test_bindir(), only);
}

/* The row starting with `row` (newline first) is there with a positive
 * time and rate. */
static void check_row_rates(const char *text, const char *row)
{
    const char *at = strstr(text, row);
    CHECK_MSG(at != NULL, "no row %s in:\n%s", row + 1, text);
    if (!at) return;
    double ms = 0, gbps = 0;
    CHECK(sscanf(at + strlen(row), "%lf,%lf", &ms, &gbps) == 2);
    CHECK_MSG(ms > 0 && gbps > 0, "ms %g, GB/s %g", ms, gbps);
}

/* ds4cl-bench --cl-bench prints the roofs and one CSV row per selected
 * shape with positive rates (speed itself is the bench's business). */
TEST(opencl_bench, cl_bench_prints_roofs_and_rows)
{
    oclt_require_device();
    char *text;
    int rc = run_cl_bench("router", &text);
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", text);
    CHECK_CONTAINS(text, "kind,name,type,in,out,groups,T,weight_bytes,ms,gbps,pct_read_roof,gflops,pct_fma_peak");
    CHECK_CONTAINS(text, "roof,stream_read,");
    CHECK_CONTAINS(text, "roof,fma_peak,");
    check_row_rates(text, "\ndecode,router,F16,4096,256,1,1,2097152,");
    CHECK(strstr(text, "prefill,") == NULL);
    rc = test_runf(&text, "%s/ds4cl-bench --cl-bench --reps 0", test_bindir());
    CHECK(rc == 2);
    CHECK_CONTAINS(text, "usage: ds4cl-bench --cl-bench");
}

/* The integer-arithmetic probe checks its products against the engine's
 * quant_dot_act before timing them (a wrong kernel fails the run), then
 * reports GB/s like a decode row. */
TEST(opencl_bench, the_integer_probe_agrees_with_the_engine_and_reports_its_rate)
{
    oclt_require_device();
    char *text;
    int rc = run_cl_bench("iq2_", &text);
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", text);
    check_row_rates(text, "\nprobe,iq2_int8,IQ2_XXS,4096,2048,1,1,2162688,");
    check_row_rates(text, "\nprobe,iq2_lookups,IQ2_XXS,4096,2048,1,1,2162688,");
    CHECK(strstr(text, "\ndecode,") == NULL);
}
