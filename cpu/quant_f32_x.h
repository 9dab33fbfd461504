/* quant_f32_x.h — the f32-activation kernels of quant_f32_impl.h written
 * once for both x86 vector widths. A width's source defines, then includes
 * this file:
 *   QF_WIDTH  512 (AVX-512 F, BW, VL, DQ with F16C, FMA, BMI2) or 256
 *             (AVX2, FMA, F16C)
 *   QF_TGT    the width's target attribute
 *   QF_NAME   the quant_f32_kernels table it defines
 * Every product is dequant(W)·x in f32, reorganised for SIMD (per-block
 * partial sums scaled once; K-quant minimums folded in through
 * precomputed sums of x). Decode streams each weight byte once, so these
 * kernels decide how close the f32 products get to memory bandwidth. The
 * plain formats (F32, F16, BF16, Q8_0) and the sums are one code over
 * QF_VL lanes; the K-quants and IQ2_XXS are decoded differently at each
 * width (512: lane permutes from per-block tables and mask registers;
 * 256: int conversions and byte-wise sign flips), each where it is
 * fastest. */
#include "cpu/quant_f32_impl.h"

#include <immintrin.h>

#if QF_WIDTH == 512
#define QF_VL 16
typedef __m512 qf;
static inline QF_TGT qf qf_zero(void) { return _mm512_setzero_ps(); }
static inline QF_TGT qf qf_load(const float *p) { return _mm512_loadu_ps(p); }
static inline QF_TGT void qf_store(float *p, qf v) { _mm512_storeu_ps(p, v); }
static inline QF_TGT qf qf_set1(float f) { return _mm512_set1_ps(f); }
static inline QF_TGT qf qf_add(qf a, qf b) { return _mm512_add_ps(a, b); }
static inline QF_TGT qf qf_mul(qf a, qf b) { return _mm512_mul_ps(a, b); }
static inline QF_TGT qf qf_fma(qf a, qf b, qf c) { return _mm512_fmadd_ps(a, b, c); }
static inline QF_TGT float qf_sum(qf v) { return _mm512_reduce_add_ps(v); }

static inline QF_TGT qf ld_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

static inline QF_TGT qf ld_bf16(const uint16_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static inline QF_TGT qf ld_i8(const void *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
#elif QF_WIDTH == 256
#define QF_VL 8
typedef __m256 qf;
static inline QF_TGT qf qf_zero(void) { return _mm256_setzero_ps(); }
static inline QF_TGT qf qf_load(const float *p) { return _mm256_loadu_ps(p); }
static inline QF_TGT void qf_store(float *p, qf v) { _mm256_storeu_ps(p, v); }
static inline QF_TGT qf qf_set1(float f) { return _mm256_set1_ps(f); }
static inline QF_TGT qf qf_add(qf a, qf b) { return _mm256_add_ps(a, b); }
static inline QF_TGT qf qf_mul(qf a, qf b) { return _mm256_mul_ps(a, b); }
static inline QF_TGT qf qf_fma(qf a, qf b, qf c) { return _mm256_fmadd_ps(a, b, c); }

static inline QF_TGT float qf_sum(qf v)
{
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline QF_TGT qf ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline QF_TGT qf ld_bf16(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static inline QF_TGT qf ld_i8(const void *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}
#endif

/* ---- the plain formats, one code over QF_VL lanes ------------------------- */

static QF_TGT float dot_f32(const float *w, const float *x, int64_t n)
{
    qf a0 = qf_zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 4 * QF_VL <= n; i += 4 * QF_VL) {
        a0 = qf_fma(qf_load(w + i), qf_load(x + i), a0);
        a1 = qf_fma(qf_load(w + i + QF_VL), qf_load(x + i + QF_VL), a1);
        a2 = qf_fma(qf_load(w + i + 2 * QF_VL), qf_load(x + i + 2 * QF_VL), a2);
        a3 = qf_fma(qf_load(w + i + 3 * QF_VL), qf_load(x + i + 3 * QF_VL), a3);
    }
    for (; i + QF_VL <= n; i += QF_VL) a0 = qf_fma(qf_load(w + i), qf_load(x + i), a0);
#if QF_WIDTH == 512
    /* the tail in one masked multiply-add */
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_maskz_loadu_ps(m, x + i), a1);
        i = n;
    }
#endif
    float s = qf_sum(qf_add(qf_add(a0, a1), qf_add(a2, a3)));
    for (; i < n; i++) s += w[i] * x[i];
    return s;
}

static QF_TGT float dot_f16(const uint16_t *w, const float *x, int64_t n)
{
    qf a0 = qf_zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 4 * QF_VL <= n; i += 4 * QF_VL) {
        a0 = qf_fma(ld_f16(w + i), qf_load(x + i), a0);
        a1 = qf_fma(ld_f16(w + i + QF_VL), qf_load(x + i + QF_VL), a1);
        a2 = qf_fma(ld_f16(w + i + 2 * QF_VL), qf_load(x + i + 2 * QF_VL), a2);
        a3 = qf_fma(ld_f16(w + i + 3 * QF_VL), qf_load(x + i + 3 * QF_VL), a3);
    }
    for (; i + QF_VL <= n; i += QF_VL) a0 = qf_fma(ld_f16(w + i), qf_load(x + i), a0);
    float s = qf_sum(qf_add(qf_add(a0, a1), qf_add(a2, a3)));
    for (; i < n; i++) s += quant_f16_to_f32(w[i]) * x[i];
    return s;
}

static QF_TGT float dot_bf16(const uint16_t *w, const float *x, int64_t n)
{
    qf a0 = qf_zero(), a1 = a0;
    int64_t i = 0;
    for (; i + 2 * QF_VL <= n; i += 2 * QF_VL) {
        a0 = qf_fma(ld_bf16(w + i), qf_load(x + i), a0);
        a1 = qf_fma(ld_bf16(w + i + QF_VL), qf_load(x + i + QF_VL), a1);
    }
    for (; i + QF_VL <= n; i += QF_VL) a0 = qf_fma(ld_bf16(w + i), qf_load(x + i), a0);
    float s = qf_sum(qf_add(a0, a1));
    for (; i < n; i++) s += quant_bf16_to_f32(w[i]) * x[i];
    return s;
}

/* One Q8_0 block's Σ q·x (32 / QF_VL vectors), its scale applied once. */
static inline QF_TGT qf q8_0_block(const block_q8_0 *b, const float *x)
{
    qf t = qf_mul(ld_i8(b->qs), qf_load(x));
    for (int k = QF_VL; k < QK8_0; k += QF_VL) t = qf_fma(ld_i8(b->qs + k), qf_load(x + k), t);
    return t;
}

static QF_TGT float dot_q8_0(const void *w, const float *x, int64_t n)
{
    const block_q8_0 *b = w;
    int64_t nb = n / QK8_0, i = 0;
    qf acc0 = qf_zero(), acc1 = acc0;
#if QF_WIDTH == 512
    /* Two blocks a step into two accumulators, so that the two short
     * chains of multiply-adds overlap. A 256-bit block is four long
     * already, and pairing those measured 8 % slower (Zen 3). */
    for (; i + 2 <= nb; i += 2, x += 2 * QK8_0) {
        qf t0 = q8_0_block(&b[i], x), t1 = q8_0_block(&b[i + 1], x + QK8_0);
        acc0 = qf_fma(t0, qf_set1(_cvtsh_ss(quant_rd16(&b[i].d))), acc0);
        acc1 = qf_fma(t1, qf_set1(_cvtsh_ss(quant_rd16(&b[i + 1].d))), acc1);
    }
#endif
    for (; i < nb; i++, x += QK8_0) acc0 = qf_fma(q8_0_block(&b[i], x), qf_set1(_cvtsh_ss(quant_rd16(&b[i].d))), acc0);
    return qf_sum(qf_add(acc0, acc1));
}

static QF_TGT void sums(const float *x, int64_t n, int group, float *out)
{
    int64_t ng = n / group;
    for (int64_t g = 0; g < ng; g++) {
        qf s = qf_load(x + group * g);
        for (int k = QF_VL; k < group; k += QF_VL) s = qf_add(s, qf_load(x + group * g + k));
        out[g] = qf_sum(s);
    }
}

static inline QF_TGT void dequant_f16(const uint8_t *p, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + QF_VL <= n; i += QF_VL) qf_store(y + i, ld_f16((const uint16_t *)p + i));
    for (; i < n; i++) y[i] = quant_f16_to_f32(quant_rd16(p + 2 * i));
}

/* ---- the K-quants and IQ2_XXS, each width its own decoding --------------- */

#if QF_WIDTH == 512
static QF_TGT float dot_q2_K(const void *w, const float *x, const float *xs, int64_t n)
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
static QF_TGT float dot_q4_K(const void *w, const float *x, const float *xs, int64_t n)
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
static inline QF_TGT uint32_t iq2_signs(uint32_t s)
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

static inline QF_TGT __m512 iq2_grid16(const uint8_t *idx, __mmask16 neg)
{
    __m512 g = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(iq2_gridf[idx[0]])),
                                  _mm256_loadu_ps(iq2_gridf[idx[1]]), 1);
    return _mm512_mask_sub_ps(g, neg, _mm512_setzero_ps(), g);
}

static QF_TGT float dot_iq2_xxs(const void *w, const float *x, int64_t n)
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

static QF_TGT void dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    switch (type) {
    case GGML_TYPE_F16: dequant_f16(p, y, n); break;
    case GGML_TYPE_Q8_0: {
        const block_q8_0 *b = row;
        for (int64_t i = 0; i < n / QK8_0; i++) {
            __m512 d = _mm512_set1_ps(_cvtsh_ss(quant_rd16(&b[i].d)));
            _mm512_storeu_ps(y + 32 * i, _mm512_mul_ps(ld_i8(b[i].qs), d));
            _mm512_storeu_ps(y + 32 * i + 16, _mm512_mul_ps(ld_i8(b[i].qs + 16), d));
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
#else
static QF_TGT float dot_q2_K(const void *w, const float *x, const float *xs, int64_t n)
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
    return qf_sum(acc) - summ;
}

static QF_TGT float dot_q4_K(const void *w, const float *x, const float *xs, int64_t n)
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
    return qf_sum(acc) - summ;
}

/* 32 signed grid values of IQ2_XXS group g as int8 lanes. */
static inline QF_TGT __m256i iq2_group(const uint8_t *g, uint32_t *sw)
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

static QF_TGT float dot_iq2_xxs(const void *w, const float *x, int64_t n)
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
    return qf_sum(acc);
}

static QF_TGT void dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    const uint8_t *p = row;
    if (type == GGML_TYPE_F16) dequant_f16(p, y, n);
    else if (!quant_x256_dequant_row(type, row, y, n)) quant_dequant_row_scalar(type, row, y, n);
}
#endif

const quant_f32_kernels QF_NAME = {
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
