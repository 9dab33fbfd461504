/* quant_f32_x256.c — the f32-activation kernels with 256-bit vectors
 * (AVX2, FMA, F16C): the same products as quant_f32_x512.c, eight lanes at
 * a time. Compiled for those instructions whatever the build's -march;
 * quant_f32.c runs them only where the CPU has them. */
#include "cpu/quant_f32_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define X256 __attribute__((target("avx2,fma,f16c")))

static inline X256 float hsum8(__m256 v)
{
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline X256 __m256 cvt_i8x8(const void *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

static inline X256 __m256 ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline X256 __m256 ld_bf16(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static X256 float dot_f32(const float *w, const float *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static X256 float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(ld_f16(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(ld_f16(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(ld_f16(w + i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(ld_f16(w + i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(ld_f16(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) s += quant_f16_to_f32(w[i]) * x[i];
    return s;
}

static X256 float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(ld_bf16(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(ld_bf16(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(ld_bf16(w + i), _mm256_loadu_ps(x + i), a0);
    float s = hsum8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += quant_bf16_to_f32(w[i]) * x[i];
    return s;
}

static X256 float dot_q8_0(const void *w, const float *x, int64_t n)
{
    const block_q8_0 *b = w;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, x += 32) {
        __m256 t = _mm256_mul_ps(cvt_i8x8(b[i].qs), _mm256_loadu_ps(x));
        t = _mm256_fmadd_ps(cvt_i8x8(b[i].qs + 8), _mm256_loadu_ps(x + 8), t);
        t = _mm256_fmadd_ps(cvt_i8x8(b[i].qs + 16), _mm256_loadu_ps(x + 16), t);
        t = _mm256_fmadd_ps(cvt_i8x8(b[i].qs + 24), _mm256_loadu_ps(x + 24), t);
        acc = _mm256_fmadd_ps(t, _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d))), acc);
    }
    return hsum8(acc);
}

static X256 float dot_q2_K(const void *w, const float *x, const float *xs, int64_t n)
{
    const block_q2_K *b = w;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    const __m256i three = _mm256_set1_epi32(3);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, xs += 16) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        for (int t = 0; t < 16; t++) summ += dmin * (float)(b[i].scales[t] >> 4) * xs[t];
        for (int t = 0; t < 16; t++) {
            int h = t / 8, s = (t % 8) / 2, l0 = (t & 1) * 16;
            const uint8_t *q = b[i].qs + 32 * h + l0;
            const float *xt = x + 16 * t;
            __m256i v0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)q));
            __m256i v1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8)));
            __m256 f0 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v0, 2 * s), three));
            __m256 f1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(v1, 2 * s), three));
            __m256 p = _mm256_mul_ps(f0, _mm256_loadu_ps(xt));
            p = _mm256_fmadd_ps(f1, _mm256_loadu_ps(xt + 8), p);
            acc = _mm256_fmadd_ps(p, _mm256_set1_ps(d * (float)(b[i].scales[t] & 15)), acc);
        }
    }
    return hsum8(acc) - summ;
}

static X256 float dot_q4_K(const void *w, const float *x, const float *xs, int64_t n)
{
    const block_q4_K *b = w;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0.0f;
    const __m256i m4 = _mm256_set1_epi32(15);
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K, xs += 8) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_q4k_scale_min(b[i].scales, j, &sc, &m);
            summ += dmin * (float)m * xs[j];
            const uint8_t *q = b[i].qs + 32 * (j / 2);
            const float *xj = x + 32 * j;
            __m256 p = _mm256_setzero_ps();
            for (int k = 0; k < 4; k++) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * k)));
                v = (j & 1) ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, m4);
                p = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_loadu_ps(xj + 8 * k), p);
            }
            acc = _mm256_fmadd_ps(p, _mm256_set1_ps(d * (float)sc), acc);
        }
    }
    return hsum8(acc) - summ;
}

/* 32 signed grid values of IQ2_XXS group g as int8 lanes. */
static inline X256 __m256i iq2_group(const uint8_t *g, uint32_t *sw)
{
    uint32_t s = quant_rd32(g + 4);
    *sw = s;
    __m256i v = _mm256_set_epi64x((long long)quant_iq2xxs_grid[g[3]], (long long)quant_iq2xxs_grid[g[2]],
                                  (long long)quant_iq2xxs_grid[g[1]], (long long)quant_iq2xxs_grid[g[0]]);
    uint32_t neg = (uint32_t)quant_ksigns_iq2xs[s & 127] | (uint32_t)quant_ksigns_iq2xs[(s >> 7) & 127] << 8 |
                   (uint32_t)quant_ksigns_iq2xs[(s >> 14) & 127] << 16 |
                   (uint32_t)quant_ksigns_iq2xs[(s >> 21) & 127] << 24;
    /* Spread sign byte k over lane bytes 8k..8k+7, test bit j of byte 8k+j. */
    const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(0x8040201008040201ll);
    __m256i m = _mm256_shuffle_epi8(_mm256_set1_epi32((int)neg), spread);
    m = _mm256_cmpeq_epi8(_mm256_and_si256(m, bits), bits);
    return _mm256_sub_epi8(_mm256_xor_si256(v, m), m);
}

static X256 float dot_iq2_xxs(const void *w, const float *x, int64_t n)
{
    const block_iq2_xxs *b = w;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d));
        const uint8_t *qs = (const uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g++) {
            uint32_t s;
            __m256i v = iq2_group(qs + 8 * g, &s);
            __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
            const float *xg = x + 32 * g;
            __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), _mm256_loadu_ps(xg));
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), _mm256_loadu_ps(xg + 8), t);
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), _mm256_loadu_ps(xg + 16), t);
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), _mm256_loadu_ps(xg + 24), t);
            acc = _mm256_fmadd_ps(t, _mm256_set1_ps(d * (0.5f + (float)(s >> 28)) * 0.25f), acc);
        }
    }
    return hsum8(acc);
}

static X256 void sums(const float *x, int64_t n, int group, float *out)
{
    int64_t ng = n / group;
    for (int64_t g = 0; g < ng; g++) {
        __m256 s = _mm256_loadu_ps(x + group * g);
        for (int k = 8; k < group; k += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + group * g + k));
        out[g] = hsum8(s);
    }
}

static X256 void dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    if (type == GGML_TYPE_F16) {
        int64_t i = 0;
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, ld_f16((const uint16_t *)p + i));
        for (; i < n; i++) y[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
        return;
    }
    if (!quant_x256_dequant_row(type, row, y, n)) quant_dequant_row_scalar(type, row, y, n);
}

const quant_f32_kernels quant_f32_x256 = {
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .dot_bf16 = dot_bf16,
    .dot_q8_0 = dot_q8_0,
    .dot_q2_K = dot_q2_K,
    .dot_q4_K = dot_q4_K,
    .dot_iq2_xxs = dot_iq2_xxs,
    .sums = sums,
    .dequant_row = dequant_row,
};

#else
const quant_f32_kernels quant_f32_x256 = { 0 };
#endif
