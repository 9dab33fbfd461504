/* Tests of the quant formats: type table, half-precision conversions,
 * hand-built blocks with known values for every type, vector kernels
 * against dequant·x, quantizer error bounds, ds4's activation formats and
 * the IQ2_XXS tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "tests/test.h"

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform(void) { return (float)((rnd() >> 11) * (1.0 / 9007199254740992.0)); }

static float gauss(void)
{
    float u = uniform() + 1e-7f, v = uniform();
    return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}

static uint16_t h(float f) { return quant_f32_to_f16(f); }

TEST(quant, type_table)
{
    static const struct { uint32_t t; const char *name; uint32_t be, bb; } want[] = {
        { GGML_TYPE_F32, "F32", 1, 4 },       { GGML_TYPE_F16, "F16", 1, 2 },
        { GGML_TYPE_BF16, "BF16", 1, 2 },     { GGML_TYPE_I32, "I32", 1, 4 },
        { GGML_TYPE_Q8_0, "Q8_0", 32, 34 },   { GGML_TYPE_Q2_K, "Q2_K", 256, 84 },
        { GGML_TYPE_Q4_K, "Q4_K", 256, 144 }, { GGML_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66 },
        { GGML_TYPE_Q8_K, "Q8_K", 256, 292 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const quant_type_info *t = quant_type(want[i].t);
        CHECK(t != NULL);
        CHECK_STR_EQ(t->name, want[i].name);
        CHECK_STR_EQ(quant_type_name(want[i].t), want[i].name);
        CHECK_EQ_INT(t->block_elems, want[i].be);
        CHECK_EQ_INT(t->block_bytes, want[i].bb);
        CHECK(t->storable == (want[i].t != GGML_TYPE_Q8_K));
    }
    CHECK(quant_type(14) == NULL);
    CHECK(quant_type(2) == NULL);
    CHECK(quant_type(1000) == NULL);
    CHECK_STR_EQ(quant_type_name(14), "Q6_K");
    CHECK_STR_EQ(quant_type_name(1000), "?");
    CHECK_EQ_INT(quant_row_bytes(GGML_TYPE_Q8_0, 4096), 4352);
    CHECK_EQ_INT(quant_row_bytes(GGML_TYPE_IQ2_XXS, 4096), 1056);
    CHECK_EQ_INT(quant_row_bytes(GGML_TYPE_Q2_K, 2048), 672);
    CHECK_EQ_INT(quant_row_bytes(GGML_TYPE_Q4_K, 4096), 2304);
    CHECK_EQ_INT(quant_row_bytes(14, 256), 0);
}

TEST(quant, f16_to_f32_special_values)
{
    CHECK(quant_f16_to_f32(0x3c00) == 1.0f);
    CHECK(quant_f16_to_f32(0xc000) == -2.0f);
    CHECK(quant_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(quant_f16_to_f32(0x0400) == ldexpf(1.0f, -14));
    CHECK(quant_f16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(quant_f16_to_f32(0x03ff) == 1023.0f * ldexpf(1.0f, -24));
    CHECK(quant_f16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    CHECK(quant_f16_to_f32(0x0000) == 0.0f && !signbit(quant_f16_to_f32(0x0000)));
    CHECK(quant_f16_to_f32(0x8000) == 0.0f && signbit(quant_f16_to_f32(0x8000)));
    CHECK(isinf(quant_f16_to_f32(0x7c00)) && quant_f16_to_f32(0x7c00) > 0);
    CHECK(isinf(quant_f16_to_f32(0xfc00)) && quant_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(quant_f16_to_f32(0x7e00)));
    CHECK(isnan(quant_f16_to_f32(0x7c01)));
    CHECK(quant_f16_to_f32(0x3555) == 0.25f + 0x155 * ldexpf(1.0f, -12));
}

TEST(quant, f16_round_trip_all_values)
{
    for (uint32_t i = 0; i < 65536; i++) {
        float f = quant_f16_to_f32((uint16_t)i);
        uint16_t back = quant_f32_to_f16(f);
        if (isnan(f)) {
            CHECK_MSG(isnan(quant_f16_to_f32(back)), "NaN 0x%04x came back as 0x%04x", i, back);
        } else {
            CHECK_MSG(back == i, "0x%04x → %g → 0x%04x", i, f, back);
        }
    }
}

TEST(quant, f32_to_f16_rounds_to_nearest_even)
{
    CHECK_EQ_INT(h(1.0f + ldexpf(1.0f, -11)), 0x3c00);     /* tie → even */
    CHECK_EQ_INT(h(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02); /* tie → even (up) */
    CHECK_EQ_INT(h(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    CHECK_EQ_INT(h(65504.0f), 0x7bff);
    CHECK_EQ_INT(h(65519.0f), 0x7bff);
    CHECK_EQ_INT(h(65520.0f), 0x7c00);
    CHECK_EQ_INT(h(1e10f), 0x7c00);
    CHECK_EQ_INT(h(-1e10f), 0xfc00);
    CHECK_EQ_INT(h(INFINITY), 0x7c00);
    CHECK_EQ_INT(h(-0.0f), 0x8000);
    CHECK(isnan(quant_f16_to_f32(h(NAN))));
    /* subnormal results */
    CHECK_EQ_INT(h(ldexpf(1.0f, -25)), 0x0000);                 /* tie → even (0) */
    CHECK_EQ_INT(h(ldexpf(1.0f, -25) * 1.0001f), 0x0001);
    CHECK_EQ_INT(h(ldexpf(1.0f, -24) * 1.5f), 0x0002);          /* tie → even (2) */
    CHECK_EQ_INT(h(ldexpf(1.0f, -24) * 2.5f), 0x0002);
    CHECK_EQ_INT(h(ldexpf(1.0f, -14) - ldexpf(1.0f, -25)), 0x0400); /* rounds up into the normals */
    CHECK_EQ_INT(h(ldexpf(1.0f, -30)), 0x0000);
    CHECK_EQ_INT(h(-ldexpf(1.0f, -24)), 0x8001);
}

TEST(quant, bf16_conversions)
{
    CHECK(quant_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(quant_bf16_to_f32(0xc000) == -2.0f);
    CHECK(isinf(quant_bf16_to_f32(0x7f80)));
    CHECK(isnan(quant_bf16_to_f32(0x7fc0)));
    CHECK_EQ_INT(quant_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ_INT(quant_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);     /* tie → even */
    CHECK_EQ_INT(quant_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82); /* tie → even */
    CHECK_EQ_INT(quant_f32_to_bf16(INFINITY), 0x7f80);
    CHECK(isnan(quant_bf16_to_f32(quant_f32_to_bf16(NAN))));
    CHECK_EQ_INT(quant_f32_to_bf16(3.4e38f), 0x7f80); /* rounds past the largest finite */
    float sub = ldexpf(1.0f, -130);                   /* f32 subnormal, kept by bf16 */
    CHECK(quant_bf16_to_f32(quant_f32_to_bf16(sub)) == sub);
    for (uint32_t i = 0; i < 65536; i++) {
        float f = quant_bf16_to_f32((uint16_t)i);
        if (!isnan(f)) CHECK_EQ_INT(quant_f32_to_bf16(f), i);
    }
}

TEST(quant, iq2xxs_tables_match_checksums)
{
    const uint64_t *g = quant_iq2xxs_grid;
    CHECK(g[0] == 0x0808080808080808ull);
    CHECK(g[1] == 0x080808080808082bull);
    CHECK(g[2] == 0x0808080808081919ull);
    CHECK(g[128] == 0x082b2b0808082b08ull);
    CHECK(g[255] == 0x2b2b2b1908081908ull);
    uint64_t sum = 0, fnv = 14695981039346656037ull;
    int hist[256] = { 0 };
    for (int i = 0; i < 256; i++) {
        sum += g[i];
        for (int j = 0; j < 8; j++) {
            uint8_t byte = (uint8_t)(g[i] >> (8 * j));
            hist[byte]++;
            fnv = (fnv ^ byte) * 1099511628211ull;
        }
    }
    CHECK(sum == 0x8b267e217ce24363ull);
    CHECK_EQ_INT(hist[8], 1127);
    CHECK_EQ_INT(hist[25], 556);
    CHECK_EQ_INT(hist[43], 365);
    CHECK_EQ_INT(hist[8] + hist[25] + hist[43], 2048);
    /* FNV-1a-64 of the 2048 little-endian bytes (the spec's printed value
     * 0x5bd45ef8a547a7e8 does not match its own table; this is ggml's). */
    CHECK(fnv == 0xbb4ee025b5ac6e8eull);
    /* Rows derive from the compact 2-bit list: entry i's field j picks
     * {8, 25, 43}; spot-check a few list entries. */
    static const struct { int i; uint16_t k; } kgrid[] = { { 1, 2 }, { 17, 128 }, { 100, 6148 }, { 255, 43268 } };
    static const uint8_t val[3] = { 8, 25, 43 };
    for (size_t t = 0; t < sizeof kgrid / sizeof kgrid[0]; t++)
        for (int j = 0; j < 8; j++)
            CHECK_EQ_INT((uint8_t)(g[kgrid[t].i] >> (8 * j)), val[(kgrid[t].k >> (2 * j)) & 3]);
    for (int s = 0; s < 128; s++) {
        uint8_t k = quant_ksigns_iq2xs[s];
        CHECK_EQ_INT(k & 127, s);
        CHECK_EQ_INT(__builtin_popcount(k) % 2, 0);
    }
}

/* Dequantizes with the public entry and checks against want[]. */
static void check_dequant(uint32_t type, const void *block, const float *want, int n)
{
    float got[256], got_scalar[256];
    quant_dequant_row(type, block, got, n);
    quant_dequant_row_scalar(type, block, got_scalar, n);
    for (int i = 0; i < n; i++) {
        CHECK_MSG(got[i] == want[i], "%s element %d: got %.9g, want %.9g", quant_type_name(type), i, got[i], want[i]);
        CHECK_MSG(got_scalar[i] == want[i], "%s element %d (scalar): got %.9g, want %.9g", quant_type_name(type), i,
                  got_scalar[i], want[i]);
    }
}

TEST(quant, known_values_plain_types)
{
    float f32[4] = { 1.5f, -2.0f, 0.0f, 1e-3f }, want[4];
    check_dequant(GGML_TYPE_F32, f32, f32, 4);
    uint16_t f16[4] = { 0x3c00, 0xc000, 0x3800, 0x0001 };
    float wf16[4] = { 1.0f, -2.0f, 0.5f, ldexpf(1.0f, -24) };
    check_dequant(GGML_TYPE_F16, f16, wf16, 4);
    uint16_t bf[4] = { 0x3f80, 0xc040, 0x0000, 0x4120 };
    float wbf[4] = { 1.0f, -3.0f, 0.0f, 10.0f };
    check_dequant(GGML_TYPE_BF16, bf, wbf, 4);
    int32_t i32[4] = { 7, -1, 0, 255 };
    for (int i = 0; i < 4; i++) want[i] = (float)i32[i];
    check_dequant(GGML_TYPE_I32, i32, want, 4);
}

TEST(quant, known_values_q8_0)
{
    block_q8_0 b;
    b.d = 0x3800; /* 0.5 */
    float want[32];
    for (int i = 0; i < 32; i++) {
        b.qs[i] = (int8_t)(i * 8 - 128);
        want[i] = 0.5f * (float)(i * 8 - 128);
    }
    check_dequant(GGML_TYPE_Q8_0, &b, want, 32);
}

TEST(quant, known_values_q2_K)
{
    block_q2_K b;
    b.d = 0x3c00;    /* 1.0 */
    b.dmin = 0x3800; /* 0.5 */
    memset(b.scales, 0x21, sizeof b.scales); /* scale 1, min 2 */
    b.scales[5] = 0x03;                      /* sub-block 5: scale 3, min 0 */
    memset(b.qs, 0xe4, sizeof b.qs);         /* 2-bit fields 0,1,2,3 at shifts 0,2,4,6 */
    float want[256];
    for (int e = 0; e < 256; e++) {
        int q = (e % 128) / 32; /* the shift group picks the field */
        want[e] = (e / 16 == 5) ? 3.0f * q : 1.0f * q - 0.5f * 2.0f;
    }
    check_dequant(GGML_TYPE_Q2_K, &b, want, 256);
    /* the layout: d and dmin at the end */
    CHECK_EQ_INT((const uint8_t *)&b.d - (const uint8_t *)&b, 80);
}

TEST(quant, known_values_q4_K)
{
    block_q4_K b;
    b.d = 0x3c00;    /* 1.0 */
    b.dmin = 0x3c00; /* 1.0 */
    int sc[8] = { 1, 2, 3, 4, 37, 6, 7, 63 }, mn[8] = { 0, 1, 2, 3, 4, 50, 6, 7 };
    memset(b.scales, 0, sizeof b.scales);
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    memset(b.qs, 0x53, sizeof b.qs); /* low nibble 3, high nibble 5 */
    float want[256];
    for (int e = 0; e < 256; e++) {
        int j = e / 32, q = (j & 1) ? 5 : 3;
        want[e] = (float)(sc[j] * q - mn[j]);
    }
    check_dequant(GGML_TYPE_Q4_K, &b, want, 256);
}

TEST(quant, known_values_iq2_xxs)
{
    block_iq2_xxs b;
    memset(&b, 0, sizeof b);
    b.d = 0x4000; /* 2.0 */
    uint8_t *qs = (uint8_t *)b.qs;
    /* group 0: rows 0, 1, 2, 255; signs none, s=1, none, s=127; ls = 3 */
    qs[0] = 0;
    qs[1] = 1;
    qs[2] = 2;
    qs[3] = 255;
    uint32_t w = 0u | 1u << 7 | 0u << 14 | 127u << 21 | 3u << 28;
    memcpy(qs + 4, &w, 4);
    /* group 7: row 128, s=3 (two negatives), ls = 15 */
    qs[56] = qs[57] = qs[58] = qs[59] = 128;
    w = 3u | 3u << 7 | 3u << 14 | 3u << 21 | 15u << 28;
    memcpy(qs + 60, &w, 4);
    float want[256];
    const float f0 = 2.0f * 7.0f / 8.0f, f7 = 2.0f * 31.0f / 8.0f;
    for (int e = 0; e < 256; e++) want[e] = 2.0f * 1.0f / 8.0f * 8.0f; /* zero groups: row 0, ls 0 */
    for (int j = 0; j < 8; j++) want[j] = f0 * 8;                     /* row 0: all 8 */
    for (int j = 0; j < 8; j++) want[8 + j] = f0 * (j == 0 ? 43 : 8) * (j == 0 || j == 7 ? -1 : 1);
    for (int j = 0; j < 8; j++) want[16 + j] = f0 * (j < 2 ? 25 : 8);
    static const uint8_t row255[8] = { 0x08, 0x19, 0x08, 0x08, 0x19, 0x2b, 0x2b, 0x2b };
    for (int j = 0; j < 8; j++) want[24 + j] = -f0 * row255[j];
    static const uint8_t row128[8] = { 0x08, 0x2b, 0x08, 0x08, 0x08, 0x2b, 0x2b, 0x08 };
    for (int k = 0; k < 4; k++)
        for (int j = 0; j < 8; j++) want[224 + 8 * k + j] = f7 * row128[j] * (j < 2 ? -1 : 1);
    check_dequant(GGML_TYPE_IQ2_XXS, &b, want, 256);
}

/* Random but sane blocks: random bytes with the f16 scales replaced. */
static void random_row(uint32_t type, void *row, int64_t n)
{
    uint8_t *p = row;
    size_t bytes = (size_t)quant_row_bytes(type, (uint64_t)n);
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rnd();
    const quant_type_info *t = quant_type(type);
    for (int64_t b = 0; b < n / t->block_elems; b++) {
        uint8_t *blk = p + b * t->block_bytes;
        uint16_t d = h(0.001f + uniform() * 0.1f), dm = h(uniform() * 0.05f);
        switch (type) {
        case GGML_TYPE_Q8_0:
        case GGML_TYPE_IQ2_XXS: memcpy(blk, &d, 2); break;
        case GGML_TYPE_Q2_K: memcpy(blk + 80, &d, 2); memcpy(blk + 82, &dm, 2); break;
        case GGML_TYPE_Q4_K: memcpy(blk, &d, 2); memcpy(blk + 2, &dm, 2); break;
        default: break;
        }
    }
    if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16)
        for (int64_t i = 0; i < n; i++) {
            uint16_t v = type == GGML_TYPE_F16 ? h(gauss()) : quant_f32_to_bf16(gauss());
            memcpy(p + 2 * i, &v, 2);
        }
    if (type == GGML_TYPE_F32)
        for (int64_t i = 0; i < n; i++) {
            float v = gauss();
            memcpy(p + 4 * i, &v, 4);
        }
}

static const uint32_t dot_types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                      GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };

TEST(quant, dot_equals_dequant_times_x)
{
    rng_state = 1;
    const int64_t lens[] = { 256, 512, 4096, 2048 + 256 };
    for (size_t ti = 0; ti < sizeof dot_types / sizeof dot_types[0]; ti++) {
        uint32_t type = dot_types[ti];
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            int64_t n = lens[li];
            uint8_t *row = test_alloc((size_t)quant_row_bytes(type, (uint64_t)n));
            float *x = test_alloc((size_t)n * 4), *w = test_alloc((size_t)n * 4);
            random_row(type, row, n);
            for (int64_t i = 0; i < n; i++) x[i] = gauss();
            quant_dequant_row_scalar(type, row, w, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            float got = quant_dot(type, row, x, n), sc = quant_dot_scalar(type, row, x, n);
            CHECK_MSG(fabs(got - ref) <= 1e-5 * mag + 1e-30, "%s n=%lld: dot %.9g vs %.9g (mag %g)",
                      quant_type_name(type), (long long)n, got, ref, mag);
            CHECK_MSG(fabs(sc - ref) <= 1e-5 * mag + 1e-30, "%s n=%lld: scalar %.9g vs %.9g",
                      quant_type_name(type), (long long)n, sc, ref);
        }
    }
}

TEST(quant, dot_handles_odd_lengths_of_plain_types)
{
    rng_state = 2;
    const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 };
    for (size_t ti = 0; ti < 3; ti++)
        for (int64_t n = 1; n < 80; n += 7) {
            uint8_t row[80 * 4];
            float x[80], w[80];
            random_row(types[ti], row, n);
            for (int64_t i = 0; i < n; i++) x[i] = gauss();
            quant_dequant_row_scalar(types[ti], row, w, n);
            double ref = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)w[i] * x[i];
                mag += fabs((double)w[i] * x[i]);
            }
            CHECK_MSG(fabs(quant_dot(types[ti], row, x, n) - ref) <= 1e-5 * mag + 1e-30, "%s n=%lld",
                      quant_type_name(types[ti]), (long long)n);
        }
}

TEST(quant, vector_dequant_matches_scalar_bit_for_bit)
{
    rng_state = 3;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof dot_types[0]; ti++) {
        uint32_t type = dot_types[ti];
        uint8_t row[1024 * 4];
        float a[1024], b[1024];
        random_row(type, row, 1024);
        quant_dequant_row(type, row, a, 1024);
        quant_dequant_row_scalar(type, row, b, 1024);
        CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s (%s)", quant_type_name(type), quant_simd_name());
    }
}

TEST(quant, matvec_fills_only_its_row_range)
{
    rng_state = 4;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof dot_types[0]; ti++) {
        uint32_t type = dot_types[ti];
        const int64_t n = 512, rows = 9;
        size_t rb = (size_t)quant_row_bytes(type, n);
        uint8_t *w = test_alloc(rb * rows);
        float x[512], y[9];
        for (int64_t r = 0; r < rows; r++) random_row(type, w + r * rb, n);
        for (int i = 0; i < n; i++) x[i] = gauss();
        for (int r = 0; r < rows; r++) y[r] = -12345.0f;
        quant_matvec(type, w, rb, x, n, y, 2, 7);
        for (int r = 0; r < rows; r++) {
            if (r < 2 || r >= 7) {
                CHECK(y[r] == -12345.0f);
                continue;
            }
            float want = quant_dot(type, w + r * rb, x, n);
            CHECK_MSG(y[r] == want, "%s row %d", quant_type_name(type), r);
        }
    }
}

TEST(quant, matmul_equals_matvec_bit_for_bit)
{
    rng_state = 8;
    for (size_t ti = 0; ti < sizeof dot_types / sizeof dot_types[0]; ti++) {
        uint32_t type = dot_types[ti];
        const int64_t n = 512, rows = 21, T = 5;
        const size_t xs = 520, ys = 24; /* strides wider than the rows */
        size_t rb = (size_t)quant_row_bytes(type, n);
        uint8_t *w = test_alloc(rb * rows);
        float *x = test_alloc(sizeof(float) * xs * T), *y = test_alloc(sizeof(float) * ys * T), one[24];
        for (int64_t r = 0; r < rows; r++) random_row(type, w + r * rb, n);
        for (size_t i = 0; i < xs * T; i++) x[i] = gauss();
        for (size_t i = 0; i < ys * T; i++) y[i] = -7.0f;
        quant_matmul(type, w, rb, x, xs, n, T, y, ys, 3, 20);
        for (int64_t t = 0; t < T; t++) {
            quant_matvec(type, w, rb, x + t * xs, n, one, 3, 20);
            for (int64_t r = 0; r < (int64_t)ys; r++) {
                if (r < 3 || r >= 20) CHECK(y[t * ys + r] == -7.0f);
                else CHECK_MSG(y[t * ys + r] == one[r], "%s t=%lld r=%lld", quant_type_name(type), (long long)t, (long long)r);
            }
        }
    }
}

/* Relative RMS error of quantize → dequantize on Gaussian data. */
static double roundtrip_error(uint32_t type, int64_t n)
{
    float *x = test_alloc((size_t)n * 4), *y = test_alloc((size_t)n * 4);
    uint8_t *q = test_alloc((size_t)quant_row_bytes(type, (uint64_t)n));
    for (int64_t i = 0; i < n; i++) x[i] = gauss() * 0.02f;
    CHECK_EQ_INT(quant_quantize_row(type, x, n, q), quant_row_bytes(type, (uint64_t)n));
    quant_dequant_row(type, q, y, n);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += (double)(x[i] - y[i]) * (x[i] - y[i]);
        s += (double)x[i] * x[i];
    }
    return sqrt(e / s);
}

TEST(quant, quantize_error_bounds)
{
    rng_state = 5;
    static const struct { uint32_t type; double max_err; } bounds[] = {
        { GGML_TYPE_F32, 0.0 },      { GGML_TYPE_F16, 5e-4 },    { GGML_TYPE_BF16, 4e-3 },
        { GGML_TYPE_Q8_0, 0.008 },   { GGML_TYPE_Q4_K, 0.1 },    { GGML_TYPE_Q2_K, 0.38 },
        { GGML_TYPE_IQ2_XXS, 0.38 },
    };
    for (size_t i = 0; i < sizeof bounds / sizeof bounds[0]; i++) {
        double e = roundtrip_error(bounds[i].type, 4096);
        CHECK_MSG(e <= bounds[i].max_err, "%s: relative RMS error %.4f > %.4f", quant_type_name(bounds[i].type), e,
                  bounds[i].max_err);
    }
    /* The quantizers do better than nothing: a zero row would be error 1. */
    CHECK(roundtrip_error(GGML_TYPE_IQ2_XXS, 1024) < 0.6);
}

TEST(quant, quantize_special_rows)
{
    float zero[256] = { 0 }, out[256];
    uint32_t types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
    uint8_t q[300];
    for (size_t i = 0; i < 4; i++) {
        quant_quantize_row(types[i], zero, 256, q);
        quant_dequant_row(types[i], q, out, 256);
        for (int j = 0; j < 256; j++) CHECK_MSG(out[j] == 0.0f, "%s of zeros", quant_type_name(types[i]));
    }
    float pos[256];
    for (int j = 0; j < 256; j++) pos[j] = 1.0f + (float)(j % 7);
    quant_quantize_row(GGML_TYPE_Q4_K, pos, 256, q);
    quant_dequant_row(GGML_TYPE_Q4_K, q, out, 256);
    for (int j = 0; j < 256; j++) CHECK_NEAR(out[j], pos[j], 0.35);
    int32_t iv[4];
    float f[4] = { 1.4f, -2.6f, 7.0f, 0.0f };
    quant_quantize_row(GGML_TYPE_I32, f, 4, iv);
    CHECK(iv[0] == 1 && iv[1] == -3 && iv[2] == 7 && iv[3] == 0);
    CHECK_EQ_INT(quant_quantize_row(GGML_TYPE_Q8_K, f, 4, q), 0);
}

TEST(quant, act_q8_0_follows_ds4)
{
    float x[40];
    for (int i = 0; i < 40; i++) x[i] = (float)(i - 20) * 0.25f;
    block_q8_0a a[2];
    quant_act_q8_0(x, 40, a);
    CHECK(a[0].d == 5.0f / 127.0f);
    CHECK_EQ_INT(a[0].qs[0], -127);
    CHECK_EQ_INT(a[0].qs[20], 0);
    /* second block: 8 values (3.0 .. 4.75), zero padded */
    CHECK(a[1].d == 4.75f / 127.0f);
    CHECK_EQ_INT(a[1].qs[7], 127);
    CHECK_EQ_INT(a[1].qs[8], 0);
    CHECK_EQ_INT(a[1].qs[31], 0);
    for (int i = 0; i < 32; i++) CHECK(fabsf(a[0].qs[i] * a[0].d - x[i]) <= a[0].d * 0.5f + 1e-6f);
    float z[32] = { 0 };
    quant_act_q8_0(z, 32, a);
    CHECK(a[0].d == 0.0f && a[0].qs[5] == 0);
}

TEST(quant, act_q8_K_follows_ds4)
{
    rng_state = 6;
    float x[512];
    for (int i = 0; i < 512; i++) x[i] = gauss();
    x[100] = 9.0f;  /* largest magnitude of block 0, positive */
    x[300] = -9.0f; /* largest of block 1, negative */
    block_q8_K a[2];
    quant_act_q8_K(x, 512, a);
    CHECK_EQ_INT(a[0].qs[100], -127); /* the largest element maps to -127 */
    CHECK_EQ_INT(a[1].qs[300 - 256], -127);
    CHECK_NEAR(a[0].d, -9.0 / 127.0, 1e-7);
    CHECK_NEAR(a[1].d, 9.0 / 127.0, 1e-7);
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 16; t++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += a[b].qs[16 * t + i];
            CHECK_EQ_INT(a[b].bsums[t], s);
        }
    for (int i = 0; i < 256; i++) CHECK(fabsf(a[0].qs[i] * a[0].d - x[i]) <= fabsf(a[0].d) * 0.5f + 1e-6f);
}

TEST(quant, integer_dots_equal_dequantized_products)
{
    rng_state = 7;
    const uint32_t types[] = { GGML_TYPE_Q8_0, GGML_TYPE_Q2_K, GGML_TYPE_Q4_K, GGML_TYPE_IQ2_XXS };
    const int64_t n = 1024;
    for (size_t ti = 0; ti < 4; ti++) {
        uint32_t type = types[ti];
        size_t rb = (size_t)quant_row_bytes(type, n);
        uint8_t *row = test_alloc(rb * 3);
        float x[1024], w[1024], xa[1024];
        for (int r = 0; r < 3; r++) random_row(type, row + r * rb, n);
        for (int i = 0; i < n; i++) x[i] = gauss();
        void *act = test_alloc(quant_act_bytes(type, n));
        quant_act(type, x, n, act);
        /* the activation as the integer path sees it */
        if (quant_act_type(type) == GGML_TYPE_Q8_0) {
            const block_q8_0a *a = act;
            for (int i = 0; i < n; i++) xa[i] = a[i / 32].d * a[i / 32].qs[i % 32];
        } else {
            const block_q8_K *a = act;
            for (int i = 0; i < n; i++) xa[i] = a[i / 256].d * a[i / 256].qs[i % 256];
        }
        float y[3];
        quant_matvec_act(type, row, rb, act, n, y, 0, 3);
        for (int r = 0; r < 3; r++) {
            quant_dequant_row_scalar(type, row + r * rb, w, n);
            double ref = 0, mag = 0;
            for (int i = 0; i < n; i++) {
                ref += (double)w[i] * xa[i];
                mag += fabs((double)w[i] * xa[i]);
            }
            CHECK_MSG(fabs(y[r] - ref) <= 2e-5 * mag, "%s row %d: %.9g vs %.9g", quant_type_name(type), r, y[r], ref);
            /* and close to the f32-activation product */
            float f = quant_dot(type, row + r * rb, x, n);
            CHECK_MSG(fabs(y[r] - f) <= 0.05 * mag, "%s row %d: int %.6g vs f32 %.6g", quant_type_name(type), r, y[r], f);
        }
    }
    CHECK_EQ_INT(quant_act_type(GGML_TYPE_F16), -1);
    CHECK_EQ_INT(quant_act_bytes(GGML_TYPE_Q8_0, 40), 2 * sizeof(block_q8_0a));
    CHECK_EQ_INT(quant_act_bytes(GGML_TYPE_Q2_K, 512), 2 * sizeof(block_q8_K));
}
