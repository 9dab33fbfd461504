/* cpu_kernels_x.h — the CPU backend's dequantize-and-multiply tiles and
 * row helpers, written once for every SIMD width. A level's source
 * defines, then includes this file:
 *   CK_WIDTH  512, 256 or 0 (portable scalar lanes)
 *   CK_VBMI   1: the 512-bit IQ2_XXS block setup with VBMI's byte permutes
 *   CK_TGT    the level's target attribute (empty for the scalar one)
 *   CK_NAME   the cpu_kernel_set it defines (cpu_kernels_impl.h)
 *
 * A product walks a row in pieces of PIECE elements: each piece of up to
 * four rows is dequantized into an L1-resident buffer, then multiplied into
 * the (row, token) accumulators. When more than four tokens share the rows
 * (prefill), whole rows are dequantized once into the scratch and the
 * tokens are taken four at a time, in blocks small enough for their
 * activations to stay in L2. Both paths feed every accumulator the same
 * sequence of lane-wise multiply-adds, so the results are identical.
 */
#include "cpu/cpu_kernels_impl.h"

#include <string.h>

#include "engine/quant.h"
#include "engine/quant_impl.h"
#include "cpu/quant_f32_impl.h"

#if CK_WIDTH == 512
#include <immintrin.h>
#define CPU_AVX512 1
#define CPU_VL 16
typedef __m512 vf;
static inline CK_TGT vf v_zero(void) { return _mm512_setzero_ps(); }
static inline CK_TGT vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline CK_TGT vf v_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
static inline CK_TGT vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline CK_TGT float v_sum(vf v) { return _mm512_reduce_add_ps(v); }
#elif CK_WIDTH == 256
#include <immintrin.h>
#define CPU_AVX2 1
#define CPU_VL 8
typedef __m256 vf;
static inline CK_TGT vf v_zero(void) { return _mm256_setzero_ps(); }
static inline CK_TGT vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline CK_TGT vf v_load_n(const float *p, int n)
{
    static const int32_t m[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };
    return _mm256_maskload_ps(p, _mm256_loadu_si256((const __m256i *)(m + 8 - n)));
}
static inline CK_TGT vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline CK_TGT float v_sum(vf v)
{
    __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_add_ps(m, _mm_movehl_ps(m, m));
    m = _mm_add_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
#else
#define CPU_VL 8
typedef struct {
    float l[CPU_VL];
} vf;
static inline CK_TGT vf v_zero(void) { return (vf){ { 0 } }; }
static inline CK_TGT vf v_load(const float *p)
{
    vf v;
    memcpy(v.l, p, sizeof v.l);
    return v;
}
static inline CK_TGT vf v_load_n(const float *p, int n)
{
    vf v = v_zero();
    memcpy(v.l, p, (size_t)n * sizeof(float));
    return v;
}
static inline CK_TGT vf v_fma(vf a, vf b, vf c)
{
    for (int i = 0; i < CPU_VL; i++) c.l[i] += a.l[i] * b.l[i];
    return c;
}
static inline CK_TGT float v_sum(vf v)
{
    float a = (v.l[0] + v.l[4]) + (v.l[2] + v.l[6]), b = (v.l[1] + v.l[5]) + (v.l[3] + v.l[7]);
    return a + b;
}
#endif

/* Rows the fused decoders do not cover, with this level's decoders (the
 * scalar decoder's values at every width), so a level is all its own. */
#if CK_WIDTH == 512
#define CK_DEQUANT_ROW quant_f32_x512.dequant_row
#elif CK_WIDTH == 256
#define CK_DEQUANT_ROW quant_f32_x256.dequant_row
#else
#define CK_DEQUANT_ROW quant_dequant_row_scalar
#endif

static CK_TGT void f16_to_f32(float *dst, const uint16_t *src, int64_t n);

/* The four rows' accumulators live in registers for the whole row pass. */
#define ACC_LOAD(NT)                                                                                     \
    vf a0[NT], a1[NT], a2[NT], a3[NT];                                                                   \
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                               \
        a0[t] = acc[0][t];                                                                               \
        a1[t] = acc[1][t];                                                                               \
        a2[t] = acc[2][t];                                                                               \
        a3[t] = acc[3][t];                                                                               \
    }
#define ACC_STORE(NT)                                                                                    \
    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                               \
        acc[0][t] = a0[t];                                                                               \
        acc[1][t] = a1[t];                                                                               \
        acc[2][t] = a2[t];                                                                               \
        acc[3][t] = a3[t];                                                                               \
    }

#if defined(CPU_AVX512) || defined(CPU_AVX2)
/* Streaming four rows at once defeats the hardware prefetcher: each row
 * group starts three cold streams, and a row of a 2-bit format is shorter
 * than a page. While a group is multiplied, the same offsets of the next
 * group's rows are prefetched, so they arrive one group ahead (a few KB
 * to a few tens of KB, well inside L2). Only loads move; the arithmetic is
 * untouched. */
typedef struct {
    const uint8_t *const *next; /* the next group's ROWS rows, or NULL */
    int64_t bytes_per_256;      /* row bytes per 256 elements */
    int64_t step_mask;          /* prefetch on steps of 32 elements with (k/32) & mask == 0 */
} prefetch_plan;

/* always inlined: a call whose only effect is a prefetch counts as pure and
 * would be dropped */
static inline __attribute__((always_inline)) CK_TGT void prefetch_next(const prefetch_plan *pf, int64_t k)
{
    int64_t off = (k * pf->bytes_per_256) >> 8;
    for (int r = 0; r < ROWS; r++) _mm_prefetch((const char *)(pf->next[r] + off), _MM_HINT_T0);
}

/* At element k of the rows (a multiple of 32): the plan's prefetch, if
 * this step has one. */
static inline __attribute__((always_inline)) CK_TGT void prefetch_step(const prefetch_plan *pf, int64_t k)
{
    if (pf->next && !((k >> 5) & pf->step_mask)) prefetch_next(pf, k);
}

static CK_TGT void prefetch_plan_init(prefetch_plan *pf, const cpu_weight *w, const uint8_t *const *next)
{
    pf->next = next;
    pf->bytes_per_256 = (int64_t)w->row_bytes * 256 / (w->n > 0 ? w->n : 1);
    /* one prefetch per 64 bytes or less: every 2^j steps of 32 elements */
    int64_t steps = pf->bytes_per_256 > 0 ? 64 * 8 / pf->bytes_per_256 : 1, p2 = 1;
    while (p2 * 2 <= steps) p2 *= 2;
    pf->step_mask = p2 - 1;
}

/* A Q2_K block's 64 quant bytes shifted right by 2, 4 and 6, for the
 * kernels that read quant q of a byte from its own copy: a 16-bit shift
 * brings in bits of the neighbouring byte, but only above the quant's two,
 * where the kernels' tables repeat themselves. */
static inline CK_TGT void q2k_shifted(const uint8_t *qs, uint8_t sh[3][64])
{
    for (int h = 0; h < 2; h++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * h));
        _mm256_store_si256((__m256i *)(void *)(sh[0] + 32 * h), _mm256_srli_epi16(q, 2));
        _mm256_store_si256((__m256i *)(void *)(sh[1] + 32 * h), _mm256_srli_epi16(q, 4));
        _mm256_store_si256((__m256i *)(void *)(sh[2] + 32 * h), _mm256_srli_epi16(q, 6));
    }
}

/* A fused kernel: four rows of n weights times NT ≤ TOKS tokens, into acc. */
#define FUSED_SIG(FN)                                                                                    \
    static CK_TGT void FN(const uint8_t *const *rows, int64_t n, const float *const *x, vf acc[ROWS][TOKS],     \
                   const prefetch_plan *pf)
#endif

#if CK_WIDTH == 512
#include "cpu/cpu_kernels_x512.h"
#elif CK_WIDTH == 256
#include "cpu/cpu_kernels_x256.h"
#endif

/* ---- dequantization of a row range --------------------------------------- */

static CK_TGT int64_t block_elems(uint32_t type)
{
    const quant_type_info *t = quant_type(type);
    return t ? t->block_elems : 1;
}

/* Row piece [k0, k0+m) as f32: into buf, or straight from the weights for
 * F32 rows. k0 and m are multiples of the block size (except a final F32/
 * F16/BF16 piece). */
static CK_TGT const float *piece(const cpu_weight *w, const uint8_t *row, int64_t k0, int64_t m, float *buf)
{
    if (w->type == GGML_TYPE_F32) return (const float *)(const void *)row + k0;
    const quant_type_info *t = quant_type(w->type);
#if defined(HAVE_FUSED)
    if (dequant_fast(w->type, row + k0 / t->block_elems * t->block_bytes, m, buf)) return buf;
#endif
    CK_DEQUANT_ROW(w->type, row + k0 / t->block_elems * t->block_bytes, buf, m);
    return buf;
}


/* ---- tiles ------------------------------------------------------------------ */

/* acc[r][t] += Σ_j w[r][j]·x[t][j] over j < m, lane-wise. NR ≤ ROWS rows,
 * NT ≤ TOKS tokens; the macro instantiates the fixed shapes. */
#define TILE_ROW(R, WV, XV, NT)                                                                  \
    do {                                                                                          \
        vf w_ = WV;                                                                               \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = v_fma(w_, XV[t], a##R[t]); \
    } while (0)
#define TILE_FN(NR, NT)                                                                                 \
    static inline CK_TGT void tile_##NR##x##NT(const float *const *w, const float *const *x, int64_t m,        \
                                        vf acc[ROWS][TOKS])                                             \
    {                                                                                                   \
        ACC_LOAD(NT);                                                                                   \
        int64_t j = 0;                                                                                  \
        for (; j + CPU_VL <= m; j += CPU_VL) {                                                          \
            vf xv[NT];                                                                                  \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) xv[t] = v_load(x[t] + j);              \
            TILE_ROW(0, v_load(w[0] + j), xv, NT);                                                      \
            TILE_ROW(1, v_load(w[1] + j), xv, NT);                                                      \
            TILE_ROW(2, v_load(w[2] + j), xv, NT);                                                      \
            TILE_ROW(3, v_load(w[3] + j), xv, NT);                                                      \
        }                                                                                               \
        if (j < m) {                                                                                    \
            int rest = (int)(m - j);                                                                    \
            vf xv[NT];                                                                                  \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) xv[t] = v_load_n(x[t] + j, rest);      \
            TILE_ROW(0, v_load_n(w[0] + j, rest), xv, NT);                                              \
            TILE_ROW(1, v_load_n(w[1] + j, rest), xv, NT);                                              \
            TILE_ROW(2, v_load_n(w[2] + j, rest), xv, NT);                                              \
            TILE_ROW(3, v_load_n(w[3] + j, rest), xv, NT);                                              \
        }                                                                                               \
        ACC_STORE(NT);                                                                                  \
    }
TILE_FN(4, 1)
TILE_FN(4, 2)
TILE_FN(4, 3)
TILE_FN(4, 4)

static CK_TGT void tile(int nt, const float *const *w, const float *const *x, int64_t m, vf acc[ROWS][TOKS])
{
    switch (nt) {
    case 1: tile_4x1(w, x, m, acc); break;
    case 2: tile_4x2(w, x, m, acc); break;
    case 3: tile_4x3(w, x, m, acc); break;
    default: tile_4x4(w, x, m, acc); break;
    }
}

static CK_TGT void store(int64_t r0, int nr, int t0, int nt, vf acc[ROWS][TOKS], float *const *y)
{
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) y[t0 + t][r0 + r] = v_sum(acc[r][t]);
}

/* Up to TOKS tokens: pieces of the row group in L1, all accumulators in
 * registers. */
static CK_TGT void group_few(const cpu_weight *w, const uint8_t *const *rows, const uint8_t *const *next, int nr,
                      int64_t r0, int T, const float *const *x, float *const *y, float *buf)
{
    vf acc[ROWS][TOKS];
    for (int r = 0; r < ROWS; r++)
        for (int t = 0; t < TOKS; t++) acc[r][t] = v_zero();
#if defined(HAVE_FUSED) || defined(HAVE_FUSED2)
    const fused_fn *ff = w->n % 32 == 0 ? fused_for(w->type) : NULL;
    if (ff) {
        (void)buf;
        prefetch_plan pf;
        prefetch_plan_init(&pf, w, next);
        ff[T - 1](rows, w->n, x, acc, &pf);
        store(r0, nr, 0, T, acc, y);
        return;
    }
#else
    (void)next;
#endif
    int64_t step = block_elems(w->type) > PIECE ? block_elems(w->type) : PIECE;
    for (int64_t k = 0; k < w->n; k += step) {
        int64_t m = w->n - k < step ? w->n - k : step;
        const float *wp[ROWS], *xp[TOKS];
        for (int r = 0; r < ROWS; r++) wp[r] = piece(w, rows[r], k, m, buf + r * step);
        for (int t = 0; t < T; t++) xp[t] = x[t] + k;
        tile(T, wp, xp, m, acc);
    }
    store(r0, nr, 0, T, acc, y);
}

/* Many tokens: whole rows dequantized once, tokens in L2-sized blocks. */
static CK_TGT void group_many(const cpu_weight *w, const uint8_t *const *rows, int nr, int64_t r0, int T,
                       const float *const *x, float *const *y, float *buf)
{
    int64_t n = w->n, stride = (n + 15) & ~(int64_t)15;
    const float *wp[ROWS];
    for (int r = 0; r < ROWS; r++) wp[r] = piece(w, rows[r], 0, n, buf + r * stride);
    for (int t0 = 0; t0 < T; t0 += TOKS) {
        int nt = T - t0 < TOKS ? T - t0 : TOKS;
        vf acc[ROWS][TOKS];
        for (int r = 0; r < ROWS; r++)
            for (int t = 0; t < TOKS; t++) acc[r][t] = v_zero();
        /* the same piece boundaries as group_few, so the lane sums match */
        int64_t step = block_elems(w->type) > PIECE ? block_elems(w->type) : PIECE;
        for (int64_t k = 0; k < n; k += step) {
            int64_t m = n - k < step ? n - k : step;
            const float *wk[ROWS], *xk[TOKS];
            for (int r = 0; r < ROWS; r++) wk[r] = wp[r] + k;
            for (int t = 0; t < nt; t++) xk[t] = x[t0 + t] + k;
            tile(nt, wk, xk, m, acc);
        }
        store(r0, nr, t0, nt, acc, y);
    }
}

static CK_TGT void mm_rows(const cpu_weight *w, int64_t r0, int64_t r1, int T, const float *const *x, float *const *y,
                           float *scratch)
{
    /* token blocks sized so their activations stay in L2 next to the rows */
    int64_t tb = (int64_t)(96 * 1024) / (w->n > 0 ? w->n : 1);
    tb = tb < TOKS ? TOKS : tb > 64 ? 64 : tb & ~(int64_t)3;
    for (int t0 = 0; t0 < T; t0 += (int)tb) {
        int nt = T - t0 < tb ? T - t0 : (int)tb;
        for (int64_t r = r0; r < r1; r += ROWS) {
            int nr = r1 - r < ROWS ? (int)(r1 - r) : ROWS;
            const uint8_t *rows[ROWS], *next[ROWS];
            /* a short group repeats its last row; the extra results are dropped */
            for (int i = 0; i < ROWS; i++) rows[i] = w->data + (size_t)(r + (i < nr ? i : nr - 1)) * w->row_bytes;
            int64_t rn = r + ROWS;
            int nn = r1 - rn < ROWS ? (int)(r1 - rn) : ROWS;
            for (int i = 0; i < ROWS && nn > 0; i++)
                next[i] = w->data + (size_t)(rn + (i < nn ? i : nn - 1)) * w->row_bytes;
            if (nt <= TOKS)
                group_few(w, rows, nn > 0 ? next : NULL, nr, r, nt, x + t0, y + t0, scratch);
            else
                group_many(w, rows, nr, r, nt, x + t0, y + t0, scratch);
        }
    }
}

/* ---- row helpers --------------------------------------------------------------- */

static CK_TGT bool indexer_fast(int nh)
{
#if defined(CPU_AVX512)
    return nh % 16 == 0 && nh <= 256;
#else
    (void)nh;
    return false;
#endif
}

static CK_TGT float indexer_score(const float *qT, const float *wscaled, const float *k, int hd, int nh)
{
#if defined(CPU_AVX512)
    /* lanes are heads: dots of every head with k at once, no per-head reduction */
    __m512 acc[16];
    int nv = nh / 16;
    for (int v = 0; v < nv; v++) acc[v] = _mm512_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m512 kd = _mm512_set1_ps(k[d]);
        const float *q = qT + (int64_t)d * nh;
        for (int v = 0; v < nv; v++) acc[v] = _mm512_fmadd_ps(_mm512_loadu_ps(q + 16 * v), kd, acc[v]);
    }
    __m512 s = _mm512_setzero_ps();
    for (int v = 0; v < nv; v++)
        s = _mm512_fmadd_ps(_mm512_max_ps(acc[v], _mm512_setzero_ps()), _mm512_loadu_ps(wscaled + 16 * v), s);
    return _mm512_reduce_add_ps(s);
#else
    (void)qT;
    (void)wscaled;
    (void)k;
    (void)hd;
    (void)nh;
    return 0.0f;
#endif
}

static CK_TGT float dot_f32(const float *a, const float *b, int64_t n)
{
    vf acc = v_zero();
    int64_t j = 0;
    for (; j + CPU_VL <= n; j += CPU_VL) acc = v_fma(v_load(a + j), v_load(b + j), acc);
    if (j < n) acc = v_fma(v_load_n(a + j, (int)(n - j)), v_load_n(b + j, (int)(n - j)), acc);
    return v_sum(acc);
}

static CK_TGT float dot_f16(const uint16_t *h, const float *b, int64_t n)
{
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    /* converted in registers: the lanes see the values and order of the
     * buffered loop below */
    vf acc = v_zero();
    int64_t j = 0;
    for (; j + CPU_VL <= n; j += CPU_VL) {
#if defined(CPU_AVX512)
        vf hv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(h + j)));
#else
        vf hv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(h + j)));
#endif
        acc = v_fma(hv, v_load(b + j), acc);
    }
    if (j < n) {
        float tail[CPU_VL];
        f16_to_f32(tail, h + j, n - j);
        acc = v_fma(v_load_n(tail, (int)(n - j)), v_load_n(b + j, (int)(n - j)), acc);
    }
    return v_sum(acc);
#else
    float buf[PIECE];
    vf acc = v_zero();
    for (int64_t k = 0; k < n; k += PIECE) {
        int64_t m = n - k < PIECE ? n - k : PIECE;
        f16_to_f32(buf, h + k, m);
        int64_t j = 0;
        for (; j + CPU_VL <= m; j += CPU_VL) acc = v_fma(v_load(buf + j), v_load(b + k + j), acc);
        if (j < m) acc = v_fma(v_load_n(buf + j, (int)(m - j)), v_load_n(b + k + j, (int)(m - j)), acc);
    }
    return v_sum(acc);
#endif
}

static CK_TGT void axpy_f32(float *y, float s, const float *a, int64_t n)
{
    int64_t i = 0;
#if defined(CPU_AVX512)
    __m512 sv = _mm512_set1_ps(s);
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(sv, _mm512_loadu_ps(a + i))));
#elif defined(CPU_AVX2)
    __m256 sv = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(sv, _mm256_loadu_ps(a + i))));
#endif
    for (; i < n; i++) y[i] += s * a[i];
}

static CK_TGT void axpy_f16(float *y, float s, const uint16_t *a, int64_t n)
{
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    /* y + s·a with a separate multiply and add, as the scalar loop rounds */
    int64_t i = 0;
#if defined(CPU_AVX512)
    __m512 sv = _mm512_set1_ps(s);
    for (; i + 16 <= n; i += 16) {
        __m512 av = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(a + i)));
        _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_loadu_ps(y + i), _mm512_mul_ps(sv, av)));
    }
#else
    __m256 sv = _mm256_set1_ps(s);
    for (; i + 8 <= n; i += 8) {
        __m256 av = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(a + i)));
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_mul_ps(sv, av)));
    }
#endif
    for (; i < n; i++) y[i] += s * quant_f16_to_f32(a[i]);
    return;
#endif
    float buf[PIECE];
    for (int64_t k = 0; k < n; k += PIECE) {
        int64_t m = n - k < PIECE ? n - k : PIECE;
        f16_to_f32(buf, a + k, m);
        for (int64_t i = 0; i < m; i++) y[k + i] += s * buf[i];
    }
}

static CK_TGT void f32_to_f16(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

static CK_TGT void f16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}

const cpu_kernel_set CK_NAME = {
#if CK_WIDTH == 512
    .name = "avx512",
#elif CK_WIDTH == 256
    .name = "avx2",
#else
    .name = "scalar",
#endif
    .mm_rows = mm_rows,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .f32_to_f16 = f32_to_f16,
    .f16_to_f32 = f16_to_f32,
    .indexer_fast = indexer_fast,
    .indexer_score = indexer_score,
};
