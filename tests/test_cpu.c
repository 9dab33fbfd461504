/* test_cpu.c — the CPU backend's building blocks: the products over every
 * weight format against a double-precision reference and the scalar
 * level's kernels, their independence of how many rows and tokens share a
 * call, every SIMD level this CPU runs (chosen through DS4CL_SIMD), and
 * the thread pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_kernels_impl.h"
#include "cpu/qk.h"
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
 * every product against dequant(W)·x in double and against the scalar
 * level's kernels within rounding, and that computing the tokens alone
 * gives the same bits as together. Returns how many products differ in
 * any bit from the scalar level's. */
static int check_type(uint32_t type, int64_t n, int rows, int T)
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
    float *ys = test_alloc((size_t)rows * (size_t)T * 4);
    float **ysp = test_alloc((size_t)T * sizeof *ysp);
    for (int t = 0; t < T; t++) ysp[t] = ys + (int64_t)t * rows;
    cpu_kernels_scalar.mm_rows(&cw, 0, rows, T, xp, ysp, scratch);
    int differ = 0;
    for (int t = 0; t < T; t++)
        for (int r = 0; r < rows; r++) {
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)deq[(size_t)r * (size_t)n + (size_t)i] * x[t * n + i];
                mag += fabs((double)deq[(size_t)r * (size_t)n + (size_t)i] * x[t * n + i]);
            }
            CHECK_MSG(fabs(y[t * rows + r] - ref) <= 1e-6 * mag + 1e-6, "%s n=%lld row %d token %d: %.9g vs %.9g",
                      quant_type_name(type), (long long)n, r, t, y[t * rows + r], ref);
            CHECK_MSG(fabs(y[t * rows + r] - ys[t * rows + r]) <= 1e-6 * mag + 1e-6,
                      "%s n=%lld row %d token %d: %.9g vs the scalar level's %.9g", quant_type_name(type), (long long)n,
                      r, t, y[t * rows + r], ys[t * rows + r]);
            differ += memcmp(&y[t * rows + r], &ys[t * rows + r], 4) != 0;
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
    return differ;
}

static const uint32_t all_types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                      GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };

/* Every format through both paths; the products differing from the
 * scalar level's in any bit. */
static int check_all_types(void)
{
    int differ = 0;
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        int64_t block = quant_type(all_types[i])->block_elems;
        differ += check_type(all_types[i], block == 1 ? 300 : 512, 7, 9); /* many tokens: the whole-row path */
        differ += check_type(all_types[i], block == 1 ? 37 : 256, 5, 3);  /* few tokens; a ragged f32 tail */
    }
    return differ;
}

TEST(cpu_kernels, products_match_a_double_reference_for_every_format)
{
    check_all_types();
}

/* The row helpers of the level in use against the scalar level's: the
 * conversions and the f32 axpy bit for bit (each rounds once per
 * element), the dots within rounding. */
static void check_helpers(void)
{
    enum { N = 301 };
    float a[N], b[N], back[N], sback[N], y[N] = { 0 }, sy[N] = { 0 }, y16[N] = { 0 }, sy16[N] = { 0 };
    uint16_t h[N], sh[N];
    double mag = 0;
    for (int i = 0; i < N; i++) {
        a[i] = frand() * 3.0f;
        b[i] = frand();
        mag += fabs((double)a[i] * b[i]);
    }
    cpu_f32_to_f16(h, a, N);
    cpu_kernels_scalar.f32_to_f16(sh, a, N);
    CHECK(memcmp(h, sh, sizeof h) == 0);
    cpu_f16_to_f32(back, h, N);
    cpu_kernels_scalar.f16_to_f32(sback, h, N);
    CHECK(memcmp(back, sback, sizeof back) == 0);
    CHECK_NEAR(cpu_dot_f32(a, b, N), cpu_kernels_scalar.dot_f32(a, b, N), 1e-6 * mag);
    CHECK_NEAR(cpu_dot_f16(h, b, N), cpu_kernels_scalar.dot_f16(h, b, N), 1e-6 * mag);
    cpu_axpy_f32(y, -0.75f, a, N);
    cpu_kernels_scalar.axpy_f32(sy, -0.75f, a, N);
    cpu_axpy_f16(y16, 1.25f, h, N);
    cpu_kernels_scalar.axpy_f16(sy16, 1.25f, h, N);
    CHECK(memcmp(y, sy, sizeof y) == 0);
    CHECK(memcmp(y16, sy16, sizeof y16) == 0);
}

/* Level l chosen through DS4CL_SIMD, as a user would: the kernels in use
 * are that level's (isa), and agree with the scalar level's within
 * rounding; a vector level's fused multiply-adds or wider lanes show in
 * some product's last bits, so the scalar kernels did not stand in. */
static void check_level(qk_level l, const char *isa)
{
    if (!qk_level_supported(l)) SKIP("this CPU does not run the %s level", qk_level_name(l));
    setenv("DS4CL_SIMD", qk_level_name(l), 1);
    CHECK_STR_EQ(qk_level_error(), "");
    CHECK_STR_EQ(cpu_kernels_isa(), isa);
    CHECK_STR_EQ(cpu_kernels_for(l)->name, isa);
    int differ = check_all_types();
    if (l == QK_SCALAR) CHECK_EQ_INT(differ, 0);
    else CHECK_MSG(differ > 0, "the %s level gave the scalar level's bits for every product", qk_level_name(l));
    check_helpers();
}

TEST(cpu_kernels, scalar_level_through_ds4cl_simd) { check_level(QK_SCALAR, "scalar"); }
TEST(cpu_kernels, avx2_level_through_ds4cl_simd) { check_level(QK_AVX2, "avx2"); }
TEST(cpu_kernels, avx2vnni_level_through_ds4cl_simd) { check_level(QK_AVX2VNNI, "avx2"); }
TEST(cpu_kernels, avx512_level_through_ds4cl_simd) { check_level(QK_AVX512, "avx512"); }
TEST(cpu_kernels, avx512vbmi_level_through_ds4cl_simd) { check_level(QK_AVX512VBMI, "avx512"); }

/* The avx512vbmi kernels differ from the avx512 ones in the IQ2_XXS
 * block setup only, which must not change a bit. */
TEST(cpu_kernels, avx512vbmi_equals_avx512_bit_for_bit)
{
    if (!qk_level_supported(QK_AVX512VBMI)) SKIP("this CPU does not run the avx512vbmi level");
    for (size_t i = 0; i < sizeof all_types / sizeof all_types[0]; i++) {
        enum { N = 1024, R = 6, T = 5 };
        uint32_t type = all_types[i];
        size_t rb = (size_t)quant_row_bytes(type, N);
        uint8_t *w = test_alloc(rb * R);
        float *src = test_alloc(N * 4), *x = test_alloc(N * T * 4), *y = test_alloc(R * T * 4), *z = test_alloc(R * T * 4);
        for (int r = 0; r < R; r++) {
            for (int k = 0; k < N; k++) src[k] = frand();
            CHECK(quant_quantize_row(type, src, N, w + r * rb) == rb);
        }
        for (int k = 0; k < N * T; k++) x[k] = frand();
        const float *xp[T];
        float *yp[T], *zp[T];
        for (int t = 0; t < T; t++) xp[t] = x + t * N, yp[t] = y + t * R, zp[t] = z + t * R;
        float *scratch = aligned_alloc(64, (cpu_mm_scratch_floats(N) * 4 + 63) & ~(size_t)63);
        cpu_weight cw = { type, w, rb, N };
        cpu_kernels_avx512vbmi.mm_rows(&cw, 0, R, T, xp, yp, scratch);
        cpu_kernels_avx512.mm_rows(&cw, 0, R, T, xp, zp, scratch);
        free(scratch);
        CHECK_MSG(memcmp(y, z, R * T * 4) == 0, "%s: avx512vbmi and avx512 differ", quant_type_name(type));
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
