/* test_cpu.c — the CPU backend's building blocks: the products over every
 * weight format against a double-precision reference, their independence
 * of how many rows and tokens share a call, and the thread pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "engine/quant.h"
#include "cpu/quant_f32_impl.h"
#include "cpu/threadpool.h"
#include "tests/test.h"

static uint32_t rnd_state = 12345;
static float frand(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return (float)(rnd_state % 20001) / 10000.0f - 1.0f;
}

/* rows × n weights of `type` (random, quantized), T activation rows; checks
 * every product against dequant(W)·x in double, and that computing the
 * tokens alone gives the same bits as together. */
static void check_type(uint32_t type, int64_t n, int rows, int T)
{
    size_t rb = (size_t)quant_row_bytes(type, (uint64_t)n);
    uint8_t *w = test_alloc(rb * (size_t)rows);
    float *tmp = test_alloc((size_t)n * 4), *deq = test_alloc((size_t)n * (size_t)rows * 4);
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++) tmp[i] = frand() * (type == GGML_TYPE_Q2_K ? 0.5f : 1.0f);
        CHECK(quant_quantize_row(type, tmp, n, w + (size_t)r * rb) == rb);
        quant_dequant_row_scalar(type, w + (size_t)r * rb, deq + (size_t)r * (size_t)n, n);
    }
    float *x = test_alloc((size_t)n * (size_t)T * 4), *y = test_alloc((size_t)rows * (size_t)T * 4);
    float *y1 = test_alloc((size_t)rows * 4);
    for (int64_t i = 0; i < n * T; i++) x[i] = frand();
    const float **xp = test_alloc((size_t)T * sizeof *xp);
    float **yp = test_alloc((size_t)T * sizeof *yp);
    for (int t = 0; t < T; t++) {
        xp[t] = x + (int64_t)t * n;
        yp[t] = y + (int64_t)t * rows;
    }
    float *scratch = aligned_alloc(64, (cpu_mm_scratch_floats(n) * 4 + 63) & ~(size_t)63);
    cpu_weight cw = { type, w, rb, n };
    cpu_mm_rows(&cw, 0, rows, T, xp, yp, scratch);
    for (int t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)deq[(size_t)r * (size_t)n + (size_t)i] * x[t * n + i];
                mag += fabs((double)deq[(size_t)r * (size_t)n + (size_t)i] * x[t * n + i]);
            }
            CHECK_MSG(fabs(y[t * rows + r] - ref) <= 1e-6 * mag + 1e-6, "%s n=%lld row %d token %d: %.9g vs %.9g",
                      quant_type_name(type), (long long)n, r, t, y[t * rows + r], ref);
        }
    /* each token alone, and rows in an odd split: the same bits */
    for (int t = 0; t < T; t++) {
        const float *x1 = xp[t];
        float *yy = y1;
        cpu_mm_rows(&cw, 0, 3 < rows ? 3 : rows, 1, &x1, &yy, scratch);
        if (rows > 3) cpu_mm_rows(&cw, 3, rows, 1, &x1, &yy, scratch);
        CHECK_MSG(memcmp(y1, y + t * rows, (size_t)rows * 4) == 0, "%s token %d alone differs", quant_type_name(type), t);
    }
    free(scratch);
}

TEST(cpu_kernels, products_match_a_double_reference_for_every_format)
{
    static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                      GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int64_t block = quant_type(types[i])->block_elems;
        check_type(types[i], block == 1 ? 300 : 512, 7, 9);  /* many tokens: the whole-row path */
        check_type(types[i], block == 1 ? 37 : 256, 5, 3);   /* few tokens; a ragged f32 tail */
    }
}

/* The 256-bit row decoders give the scalar decoders' bits: on random
 * bytes (every index, sign selector, scale and quant) with finite f16
 * factors of both signs, zero and subnormal ones included, and on rows
 * the quantizers wrote. */
TEST(cpu_kernels, x256_decoders_equal_the_scalar_ones)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c"))
        SKIP("this CPU has no AVX2, FMA and F16C");
#else
    SKIP("not an x86-64 build");
#endif
    static const uint32_t types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
    static const uint16_t factors[] = { 0x3c00, 0xbc00, 0x1c00, 0x0000, 0x8000, 0x0001, 0x83ff, 0x7bff, 0x2e66 };
    enum { N = 4096 };
    float *a = test_alloc(N * 4), *b = test_alloc(N * 4), *src = test_alloc(N * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        const quant_type_info *t = quant_type(type);
        size_t rb = (size_t)quant_row_bytes(type, N);
        uint8_t *row = test_alloc(rb);
        for (int pass = 0; pass < 12; pass++) {
            if (pass < 9) {
                for (size_t i = 0; i < rb; i++) row[i] = (uint8_t)(frand() * 1e4f);
                /* the f16 factors: d (and dmin) at the block's known offsets */
                for (size_t blk = 0; blk < rb / t->block_bytes; blk++) {
                    uint8_t *p = row + blk * t->block_bytes;
                    uint16_t f = factors[(pass + blk) % 9], g = factors[(pass + 3 * blk + 1) % 9];
                    size_t off = type == GGML_TYPE_Q2_K ? 80 : 0;
                    memcpy(p + off, &f, 2);
                    if (type == GGML_TYPE_Q2_K || type == GGML_TYPE_Q4_K) memcpy(p + off + 2, &g, 2);
                }
            } else {
                for (int i = 0; i < N; i++) src[i] = frand() * (pass == 9 ? 1.0f : pass == 10 ? 1e-3f : 40.0f);
                CHECK(quant_quantize_row(type, src, N, row) == rb);
            }
            memset(a, 0xa5, N * 4);
            memset(b, 0x5a, N * 4);
            quant_dequant_row_scalar(type, row, a, N);
            CHECK(quant_x256_dequant_row(type, row, b, N));
            int bad = -1;
            for (int i = 0; i < N && bad < 0; i++)
                if (memcmp(&a[i], &b[i], 4)) bad = i;
            CHECK_MSG(bad < 0, "%s pass %d element %d: %.9g vs scalar %.9g", quant_type_name(type), pass, bad,
                      bad < 0 ? 0.0 : (double)b[bad], bad < 0 ? 0.0 : (double)a[bad]);
        }
    }
    CHECK(!quant_x256_dequant_row(GGML_TYPE_F16, src, a, 16));
}

TEST(cpu_kernels, f16_rows_and_helpers)
{
    float a[300], b[300];
    uint16_t h[300];
    for (int i = 0; i < 300; i++) {
        a[i] = frand();
        b[i] = frand();
    }
    cpu_f32_to_f16(h, a, 300);
    for (int i = 0; i < 300; i++) CHECK(h[i] == quant_f32_to_f16(a[i]));
    float back[300];
    cpu_f16_to_f32(back, h, 300);
    double ref = 0, ref16 = 0;
    for (int i = 0; i < 300; i++) {
        CHECK(back[i] == quant_f16_to_f32(h[i]));
        ref += (double)a[i] * b[i];
        ref16 += (double)back[i] * b[i];
    }
    CHECK_NEAR(cpu_dot_f32(a, b, 300), ref, 1e-4);
    CHECK_NEAR(cpu_dot_f16(h, b, 300), ref16, 1e-4);
    float y[300] = { 0 }, y16[300] = { 0 };
    cpu_axpy_f32(y, 0.5f, a, 300);
    cpu_axpy_f16(y16, 0.5f, h, 300);
    for (int i = 0; i < 300; i++) {
        CHECK(y[i] == 0.5f * a[i]);
        CHECK(y16[i] == 0.5f * back[i]);
    }
}

typedef struct {
    atomic_int *hits;
    atomic_int bad_worker;
    int n_threads;
} pool_job;

static void mark(void *arg, int64_t task, int worker)
{
    pool_job *j = arg;
    atomic_fetch_add(&j->hits[task], 1);
    if (worker < 0 || worker >= j->n_threads) atomic_store(&j->bad_worker, 1);
}

TEST(cpu_threadpool, every_task_runs_once_per_loop)
{
    for (int nt = 1; nt <= 4; nt++) {
        threadpool *tp = tp_new(nt);
        CHECK(tp != NULL);
        CHECK_EQ_INT(tp_threads(tp), nt);
        enum { N = 257 };
        atomic_int hits[N];
        pool_job j = { hits, 0, nt };
        for (int i = 0; i < N; i++) atomic_init(&hits[i], 0);
        for (int round = 0; round < 300; round++) tp_run(tp, round % 7 == 0 ? 1 : N, mark, &j);
        int ones = 0;
        for (int i = 0; i < N; i++) ones += atomic_load(&hits[i]);
        /* 300 loops: 43 of one task, 257 of N tasks */
        CHECK_EQ_INT(atomic_load(&hits[0]), 300);
        CHECK_EQ_INT(ones, 300 + 257 * (N - 1));
        CHECK_EQ_INT(atomic_load(&j.bad_worker), 0);
        tp_free(tp);
    }
    CHECK(tp_cpu_count() >= 1);
}

TEST(cpu_kernels, indexer_score_over_all_heads_at_once)
{
    if (!cpu_indexer_fast(64)) SKIP("no vector indexer kernel in this build");
    enum { HD = 128, NH = 64 };
    float *q = test_alloc(HD * NH * 4), *qT = test_alloc(HD * NH * 4), *w = test_alloc(NH * 4), *k = test_alloc(HD * 4);
    for (int h = 0; h < NH; h++) {
        w[h] = frand();
        for (int d = 0; d < HD; d++) q[h * HD + d] = frand();
    }
    for (int d = 0; d < HD; d++) {
        k[d] = frand();
        for (int h = 0; h < NH; h++) qT[d * NH + h] = q[h * HD + d];
    }
    double ref = 0, mag = 0;
    for (int h = 0; h < NH; h++) {
        double dot = 0;
        for (int d = 0; d < HD; d++) dot += (double)q[h * HD + d] * k[d];
        if (dot > 0) ref += dot * w[h];
        mag += fabs(dot * w[h]);
    }
    CHECK_NEAR(cpu_indexer_score(qT, w, k, HD, NH), ref, 1e-5 * mag + 1e-6);
    CHECK(!cpu_indexer_fast(4));
}
