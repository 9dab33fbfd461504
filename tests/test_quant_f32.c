/* The CPU backend's f32-activation kernels: each SIMD width's table
 * against the engine's scalar reference, and the width in use following
 * the run-time level (DS4CL_SIMD), as the integer kernels' does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/qk.h"
#include "cpu/quant_f32_impl.h"
#include "engine/quant.h"
#include "tests/test.h"

static uint32_t seed = 987654321u;
static float frand(void)
{
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return (float)(seed % 20001) / 10000.0f - 1.0f;
}

static float table_dot(const quant_f32_kernels *k, uint32_t type, const void *row, const float *x, int64_t n)
{
    int g = type == GGML_TYPE_Q2_K ? 16 : type == GGML_TYPE_Q4_K ? 32 : 0;
    float xs[64] = { 0 };
    if (g) k->sums(x, n, g, xs);
    switch (type) {
    case GGML_TYPE_F32: return k->dot_f32(row, x, n);
    case GGML_TYPE_F16: return k->dot_f16(row, x, n);
    case GGML_TYPE_BF16: return k->dot_bf16(row, x, n);
    case GGML_TYPE_Q8_0: return k->dot_q8_0(row, x, n);
    case GGML_TYPE_Q2_K: return k->dot_q2_K(row, x, xs, n);
    case GGML_TYPE_Q4_K: return k->dot_q4_K(row, x, xs, n);
    default: return k->dot_iq2_xxs(row, x, n);
    }
}

/* Every format through one width's table: products within f32 rounding of
 * the scalar reference, decoded rows bit for bit. */
static void check_width(const quant_f32_kernels *k, const char *name)
{
    static const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                      GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
    enum { N = 1024 };
    float *src = test_alloc(N * 4), *x = test_alloc(N * 4), *a = test_alloc(N * 4), *b = test_alloc(N * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t type = types[ti];
        uint8_t *row = test_alloc((size_t)quant_row_bytes(type, N));
        for (int i = 0; i < N; i++) src[i] = frand(), x[i] = frand();
        CHECK(quant_quantize_row(type, src, N, row) > 0);
        double mag = 0;
        quant_dequant_row_scalar(type, row, a, N);
        for (int i = 0; i < N; i++) mag += fabs((double)a[i] * x[i]);
        float want = quant_dot_scalar(type, row, x, N), got = table_dot(k, type, row, x, N);
        CHECK_MSG(fabs((double)got - want) <= 1e-5 * mag + 1e-30, "%s %s: %.9g vs scalar %.9g", name,
                  quant_type_name(type), (double)got, (double)want);
        memset(b, 0x5a, N * 4);
        k->dequant_row(type, row, b, N);
        CHECK_MSG(memcmp(a, b, N * 4) == 0, "%s %s: decoded row differs from the scalar one", name,
                  quant_type_name(type));
    }
}

TEST(quant_f32, every_width_this_cpu_runs_matches_the_reference)
{
    int ran = 0;
    if (qk_level_supported(QK_AVX2)) check_width(&quant_f32_x256, "avx2"), ran++;
    if (qk_level_supported(QK_AVX512)) check_width(&quant_f32_x512, "avx512"), ran++;
    if (!ran) SKIP("this CPU runs neither the avx2 nor the avx512 level");
}

/* The width quant_dot runs is the run-time level's: DS4CL_SIMD=scalar makes
 * it the scalar reference exactly, whatever the build's -march. */
TEST(quant_f32, width_follows_ds4cl_simd)
{
    setenv("DS4CL_SIMD", "scalar", 1);
    CHECK_STR_EQ(qk_level_name(qk_level_active()), "scalar");
    CHECK_STR_EQ(quant_simd_name(), "scalar");
    enum { N = 512 };
    float src[N], x[N];
    for (int i = 0; i < N; i++) src[i] = frand(), x[i] = frand();
    uint8_t row[N * 4];
    CHECK(quant_quantize_row(GGML_TYPE_Q4_K, src, N, row) > 0);
    float got = quant_dot(GGML_TYPE_Q4_K, row, x, N), want = quant_dot_scalar(GGML_TYPE_Q4_K, row, x, N);
    CHECK(memcmp(&got, &want, sizeof got) == 0);
}

TEST(quant_f32, a_named_level_is_the_width_in_use)
{
    if (!qk_level_supported(QK_AVX2)) SKIP("this CPU does not run the avx2 level");
    setenv("DS4CL_SIMD", "avx2", 1);
    CHECK_STR_EQ(quant_simd_name(), "avx2");
}
