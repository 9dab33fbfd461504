/* Tests of the integer 2-bit kernels (engine/qk.h): every SIMD level this
 * CPU runs gives, for every (row, token), the bits of the scalar
 * reference quant_dot_act, for any tile or panel shape (short row
 * groups, short token passes, more than one token chunk), with extreme values that would
 * overflow a saturating or 16-bit sum; levels the CPU lacks are skipped
 * with the reason. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/qk.h"
#include "cpu/qk_impl.h"
#include "tests/test.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float gauss(void)
{
    double u = ((rnd() >> 11) + 1) * (1.0 / 9007199254740992.0), v = (rnd() >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Random quants with finite scales; every fifth block all-maximal (Q2_K:
 * quants 3, scales 15; IQ2_XXS: the grid row of 43s is not in the grid, so
 * the largest scale and all signs negative). */
static void random_rows(uint32_t type, uint8_t *w, int64_t rows, int64_t n)
{
    size_t rb = (size_t)quant_row_bytes(type, (uint64_t)n), bb = quant_type(type)->block_bytes;
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)rnd();
    for (size_t b = 0; b * bb < rb * (size_t)rows; b++) {
        uint8_t *p = w + b * bb;
        bool max = b % 5 == 3;
        uint16_t d = quant_f32_to_f16((float)(0.001 + 0.01 * (double)(rnd() % 100) / 100.0));
        if (type == GGML_TYPE_Q2_K) {
            uint16_t dm = quant_f32_to_f16(0.004f);
            if (max) memset(p, 0xff, 80);
            memcpy(p + 80, &d, 2);
            memcpy(p + 82, &dm, 2);
        } else {
            memcpy(p, &d, 2);
            if (max)
                for (int g = 0; g < 8; g++) {
                    /* selectors 127 (all eight signs negative), scale 15 */
                    uint32_t s = 0xffffffffu;
                    memcpy(p + 2 + 8 * g + 4, &s, 4);
                }
        }
    }
}

/* kernels: the level's set, or NULL for qk_rows(level). */
static void check_kernels(qk_level level, const qk_kernels *kernels)
{
    const uint32_t types[] = { GGML_TYPE_IQ2_XXS, GGML_TYPE_Q2_K };
    const int64_t ns[] = { 256, 1024 };
    /* 1-7 tokens run on tiles, 8 and more on Q2_K panels (8 or 4 tokens a
     * pass, a short last pass); rows [1, 38) end in a short tile and a
     * short panel */
    const int Ts[] = { 1, 2, 3, 4, 7, 8, 9, 70 };
    enum { ROWS = 38, MAXT = 70 };
    for (size_t ti = 0; ti < 2; ti++)
        for (size_t ni = 0; ni < 2; ni++) {
            uint32_t type = types[ti];
            int64_t n = ns[ni], nb = n / 256;
            size_t rb = (size_t)quant_row_bytes(type, (uint64_t)n);
            rng_state = 100 * ti + ni;
            uint8_t *w = test_alloc(rb * ROWS);
            random_rows(type, w, ROWS, n);
            block_q8_K *acts = test_alloc(sizeof(block_q8_K) * (size_t)(nb * MAXT));
            float *x = test_alloc(sizeof(float) * (size_t)n);
            const block_q8_K *ap[MAXT];
            for (int t = 0; t < MAXT; t++) {
                for (int64_t i = 0; i < n; i++) x[i] = gauss();
                if (t % 3 == 1)
                    for (int64_t i = 0; i < n; i++) x[i] = i % 2 ? 1.0f : -1.0f; /* ±127 everywhere */
                quant_act_q8_K(x, n, acts + t * nb);
                ap[t] = acts + t * nb;
            }
            float *y = test_alloc(sizeof(float) * ROWS * MAXT);
            float *yp[MAXT];
            for (int t = 0; t < MAXT; t++) yp[t] = y + t * ROWS;
            for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
                int T = Ts[k];
                /* rows [1, ROWS) (a short last group), y outside it untouched */
                for (int i = 0; i < ROWS * MAXT; i++) y[i] = NAN;
                if (kernels) qk_rows_with(kernels, type, w, rb, n, 1, ROWS, T, ap, yp);
                else qk_rows(level, type, w, rb, n, 1, ROWS, T, ap, yp);
                for (int t = 0; t < T; t++) {
                    CHECK(isnan(yp[t][0]));
                    for (int r = 1; r < ROWS; r++) {
                        float want = quant_dot_act(type, w + (size_t)r * rb, ap[t], n);
                        CHECK_MSG(memcmp(&yp[t][r], &want, 4) == 0, "%s %s n=%lld T=%d row %d token %d: %.9g, reference %.9g",
                                  qk_level_name(level), quant_type_name(type), (long long)n, T, r, t, yp[t][r], want);
                    }
                }
            }
        }
}

static void check_level(qk_level level)
{
    if (!qk_level_supported(level)) SKIP("this CPU does not run the %s level", qk_level_name(level));
    check_kernels(level, NULL);
}

TEST(qk, avx512vbmi_equals_the_reference) { check_level(QK_AVX512VBMI); }
TEST(qk, avx512_equals_the_reference) { check_level(QK_AVX512); }
TEST(qk, avx2vnni_equals_the_reference) { check_level(QK_AVX2VNNI); }

/* Where AVX-VNNI is missing but AVX-512 VNNI is there, the avx2vnni
 * source with the EVEX encodings of its dot instructions. */
TEST(qk, avx2vnni_source_with_evex_vnni_equals_the_reference)
{
    if (qk_level_supported(QK_AVX2VNNI)) SKIP("the avx2vnni level itself runs here (see its test)");
    if (!qk_level_supported(QK_AVX512)) SKIP("this CPU has neither AVX-VNNI nor AVX-512 VNNI");
    check_kernels(QK_AVX2VNNI, &qk_kernels_avx2vnni_evex);
}
TEST(qk, avx2_equals_the_reference) { check_level(QK_AVX2); }
TEST(qk, scalar_equals_the_reference) { check_level(QK_SCALAR); }

TEST(qk, level_names_parse_and_the_active_level_is_supported)
{
    for (int l = 0; l < QK_N_LEVELS; l++) CHECK_EQ_INT(qk_level_parse(qk_level_name((qk_level)l)), l);
    CHECK_EQ_INT(qk_level_parse("avx1024"), -1);
    CHECK_EQ_INT(qk_level_parse(NULL), -1);
    CHECK(qk_level_supported(QK_SCALAR));
    CHECK(qk_level_supported(qk_level_active()));
    /* a level implies the ones below it in its family */
    if (qk_level_supported(QK_AVX512VBMI)) CHECK(qk_level_supported(QK_AVX512));
    if (qk_level_supported(QK_AVX512) || qk_level_supported(QK_AVX2VNNI)) CHECK(qk_level_supported(QK_AVX2));
    CHECK(qk_supports(GGML_TYPE_IQ2_XXS, 4096));
    CHECK(qk_supports(GGML_TYPE_Q2_K, 2048));
    CHECK(!qk_supports(GGML_TYPE_Q2_K, 100));
    CHECK(!qk_supports(GGML_TYPE_Q4_K, 4096));
}
