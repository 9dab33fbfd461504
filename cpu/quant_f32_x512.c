/* quant_f32_x512.c — the f32-activation kernels with 512-bit vectors
 * (AVX-512 F, BW, VL with F16C, FMA, BMI2): every product is dequant(W)·x
 * in f32, reorganised for SIMD (per-block partial sums scaled once; K-quant
 * minimums folded in through precomputed sums of x). Decode streams each
 * weight byte once, so these kernels decide how close the CPU backend gets
 * to memory bandwidth. Compiled for those instructions whatever the
 * build's -march; quant_f32.c runs them only where the CPU has them. */
#include "cpu/quant_f32_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define X512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")))

static inline X512 __m512 cvt_i8x16(const void *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}

static X512 float dot_f32(const float *w, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), a0);
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

static inline X512 __m512 ld_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline X512 __m512 ld_bf16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static X512 float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        a0 = _mm512_fmadd_ps(ld_f16(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(ld_f16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(ld_f16(w + i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(ld_f16(w + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(ld_f16(w + i), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    for (; i < n; i++) s += quant_f16_to_f32(w[i]) * x[i];
    return s;
}

static X512 float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm512_fmadd_ps(ld_bf16(w + i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(ld_bf16(w + i + 16), _mm512_loadu_ps(x + i + 16), a1);
    }
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(ld_bf16(w + i), _mm512_loadu_ps(x + i), a0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; i++) s += quant_bf16_to_f32(w[i]) * x[i];
    return s;
}

static X512 float dot_q8_0(const void *w, const float *x, int64_t n)
{
    const block_q8_0 *b = w;
    int64_t nb = n / QK8_0, i = 0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (; i + 2 <= nb; i += 2, x += 64) {
        __m512 t0 = _mm512_mul_ps(cvt_i8x16(b[i].qs), _mm512_loadu_ps(x));
        __m512 t1 = _mm512_mul_ps(cvt_i8x16(b[i + 1].qs), _mm512_loadu_ps(x + 32));
        t0 = _mm512_fmadd_ps(cvt_i8x16(b[i].qs + 16), _mm512_loadu_ps(x + 16), t0);
        t1 = _mm512_fmadd_ps(cvt_i8x16(b[i + 1].qs + 16), _mm512_loadu_ps(x + 48), t1);
        acc0 = _mm512_fmadd_ps(t0, _mm512_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d))), acc0);
        acc1 = _mm512_fmadd_ps(t1, _mm512_set1_ps(_cvtsh_ss(quant_rd16(&b[i + 1].d))), acc1);
    }
    if (i < nb) {
        __m512 t0 = _mm512_mul_ps(cvt_i8x16(b[i].qs), _mm512_loadu_ps(x));
        t0 = _mm512_fmadd_ps(cvt_i8x16(b[i].qs + 16), _mm512_loadu_ps(x + 16), t0);
        acc0 = _mm512_fmadd_ps(t0, _mm512_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d))), acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static X512 float dot_q2_K(const void *w, const float *x, const float *xs, int64_t n)
{
    const block_q2_K *b = w;
    int64_t nb = n / QK_K;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, accm = acc0;
    const __m512i three = _mm512_set1_epi32(3);
    for (int64_t i = 0; i < nb; i++, x += QK_K, xs += 16) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b[i].scales));
        __m512 mins = _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4));
        accm = _mm512_fmadd_ps(_mm512_mul_ps(mins, _mm512_set1_ps(dmin)), _mm512_loadu_ps(xs), accm);
        float dl[16];
        _mm512_storeu_ps(dl, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15))),
                                           _mm512_set1_ps(d)));
        for (int h = 0; h < 2; h++) {
            __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 32 * h)));
            __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + 32 * h + 16)));
            const float *xh = x + 128 * h;
            const float *dh = dl + 8 * h;
#define Q2_STEP(s)                                                                                  \
    do {                                                                                            \
        __m512 f0 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(q0, 2 * (s)), three));    \
        __m512 f1 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(q1, 2 * (s)), three));    \
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(f0, _mm512_loadu_ps(xh + 32 * (s))),                   \
                               _mm512_set1_ps(dh[2 * (s)]), acc0);                                 \
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(f1, _mm512_loadu_ps(xh + 32 * (s) + 16)),              \
                               _mm512_set1_ps(dh[2 * (s) + 1]), acc1);                             \
    } while (0)
            Q2_STEP(0);
            Q2_STEP(1);
            Q2_STEP(2);
            Q2_STEP(3);
#undef Q2_STEP
        }
    }
    return _mm512_reduce_add_ps(_mm512_sub_ps(_mm512_add_ps(acc0, acc1), accm));
}

/* Q4_K: each sub-block's 4-bit codes index a 16-entry table of its
 * dequantized values (d·sc·q − dmin·m, one f32 rounding), looked up with a
 * lane permute: no int→float conversion, minimums folded in. */
static X512 float dot_q4_K(const void *w, const float *x, const float *xs, int64_t n)
{
    (void)xs;
    const block_q4_K *b = w;
    int64_t nb = n / QK_K;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i m4 = _mm512_set1_epi32(15);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d)), dmin = _cvtsh_ss(quant_rd16(&b[i].dmin));
        for (int c = 0; c < 4; c++) {
            uint8_t sc0, m0, sc1, m1;
            quant_q4k_scale_min(b[i].scales, 2 * c, &sc0, &m0);
            quant_q4k_scale_min(b[i].scales, 2 * c + 1, &sc1, &m1);
            __m512 t0 = _mm512_fmadd_ps(iota, _mm512_set1_ps(d * (float)sc0), _mm512_set1_ps(-dmin * (float)m0));
            __m512 t1 = _mm512_fmadd_ps(iota, _mm512_set1_ps(d * (float)sc1), _mm512_set1_ps(-dmin * (float)m1));
            const uint8_t *q = b[i].qs + 32 * c;
            const float *xc = x + 64 * c;
            __m512i v0 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
            __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(q + 16)));
            acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_and_si512(v0, m4), t0), _mm512_loadu_ps(xc), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_and_si512(v1, m4), t0), _mm512_loadu_ps(xc + 16), acc1);
            acc0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), t1), _mm512_loadu_ps(xc + 32), acc0);
            acc1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), t1), _mm512_loadu_ps(xc + 48), acc1);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* IQ2_XXS group scales (2·ls + 1)/8 for ls = 0..15. */
static const float iq2_ls[16] = { 0.125f, 0.375f, 0.625f, 0.875f, 1.125f, 1.375f, 1.625f, 1.875f,
                                   2.125f, 2.375f, 2.625f, 2.875f, 3.125f, 3.375f, 3.625f, 3.875f };

/* The 32 sign bits of a group from its four 7-bit selectors: spread them
 * to bytes, then bit 7 of each byte = parity of its low 7 bits (that is
 * ksigns[s]). */
static inline X512 uint32_t iq2_signs(uint32_t s)
{
    uint32_t t = _pdep_u32(s, 0x7f7f7f7fu);
    uint32_t p = t ^ (t >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return t | (p & 0x01010101u) << 7;
}

/* The grid as floats (8 KB, stays in L1 while a matrix streams by): two
 * rows are one 512-bit vector without any int→float conversion. */
static float iq2_gridf[256][8];

__attribute__((constructor)) static void iq2_gridf_init(void)
{
    for (int i = 0; i < 256; i++)
        for (int j = 0; j < 8; j++) iq2_gridf[i][j] = (float)(uint8_t)(quant_iq2xxs_grid[i] >> (8 * j));
}

static inline X512 __m512 iq2_grid16(const uint8_t *idx, __mmask16 neg)
{
    __m512 g = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(iq2_gridf[idx[0]])),
                                  _mm256_loadu_ps(iq2_gridf[idx[1]]), 1);
    return _mm512_mask_sub_ps(g, neg, _mm512_setzero_ps(), g);
}

static X512 float dot_iq2_xxs(const void *w, const float *x, int64_t n)
{
    const block_iq2_xxs *b = w;
    int64_t nb = n / QK_K;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        float d = _cvtsh_ss(quant_rd16(&b[i].d));
        const uint8_t *qs = (const uint8_t *)b[i].qs;
        for (int g = 0; g < 8; g += 2) {
            const uint8_t *q0 = qs + 8 * g, *q1 = q0 + 8;
            uint32_t s0 = quant_rd32(q0 + 4), s1 = quant_rd32(q1 + 4);
            uint32_t n0 = iq2_signs(s0), n1 = iq2_signs(s1);
            const float *xg = x + 32 * g;
            __m512 t0 = _mm512_mul_ps(iq2_grid16(q0, (__mmask16)n0), _mm512_loadu_ps(xg));
            __m512 t1 = _mm512_mul_ps(iq2_grid16(q1, (__mmask16)n1), _mm512_loadu_ps(xg + 32));
            t0 = _mm512_fmadd_ps(iq2_grid16(q0 + 2, (__mmask16)(n0 >> 16)), _mm512_loadu_ps(xg + 16), t0);
            t1 = _mm512_fmadd_ps(iq2_grid16(q1 + 2, (__mmask16)(n1 >> 16)), _mm512_loadu_ps(xg + 48), t1);
            acc0 = _mm512_fmadd_ps(t0, _mm512_set1_ps(d * iq2_ls[s0 >> 28]), acc0);
            acc1 = _mm512_fmadd_ps(t1, _mm512_set1_ps(d * iq2_ls[s1 >> 28]), acc1);
        }
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

static X512 void sums(const float *x, int64_t n, int group, float *out)
{
    int64_t ng = n / group;
    if (group == 16) {
        for (int64_t g = 0; g < ng; g++) out[g] = _mm512_reduce_add_ps(_mm512_loadu_ps(x + 16 * g));
    } else {
        for (int64_t g = 0; g < ng; g++)
            out[g] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(x + group * g),
                                                        _mm512_loadu_ps(x + group * g + 16)));
    }
}

static X512 void dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    switch (type) {
    case GGML_TYPE_F16: {
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, ld_f16((const uint16_t *)p + i));
        for (; i < n; i++) y[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
        break;
    }
    case GGML_TYPE_Q8_0: {
        const block_q8_0 *b = row;
        for (int64_t i = 0; i < n / QK8_0; i++) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d)));
            _mm512_storeu_ps(y + 32 * i, _mm512_mul_ps(cvt_i8x16(b[i].qs), d));
            _mm512_storeu_ps(y + 32 * i + 16, _mm512_mul_ps(cvt_i8x16(b[i].qs + 16), d));
        }
        break;
    }
    case GGML_TYPE_IQ2_XXS: {
        const block_iq2_xxs *b = row;
        for (int64_t i = 0; i < n / QK_K; i++) {
            float d = _cvtsh_ss(quant_rd16(&b[i].d));
            const uint8_t *qs = (const uint8_t *)b[i].qs;
            for (int g = 0; g < 8; g++) {
                const uint8_t *q = qs + 8 * g;
                uint32_t s = quant_rd32(q + 4), neg = iq2_signs(s);
                __m512 db = _mm512_set1_ps(d * iq2_ls[s >> 28]);
                float *o = y + QK_K * i + 32 * g;
                _mm512_storeu_ps(o, _mm512_mul_ps(db, iq2_grid16(q, (__mmask16)neg)));
                _mm512_storeu_ps(o + 16, _mm512_mul_ps(db, iq2_grid16(q + 2, (__mmask16)(neg >> 16))));
            }
        }
        break;
    }
    default: quant_dequant_row_scalar(type, row, y, n); break;
    }
}

const quant_f32_kernels quant_f32_x512 = {
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
const quant_f32_kernels quant_f32_x512 = { 0 };
#endif
