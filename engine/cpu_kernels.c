/* cpu_kernels.c — dequantize-and-multiply tiles, and row helpers.
 *
 * A product walks a row in pieces of PIECE elements: each piece of up to
 * four rows is dequantized into an L1-resident buffer, then multiplied into
 * the (row, token) accumulators. When more than four tokens share the rows
 * (prefill), whole rows are dequantized once into the scratch and the
 * tokens are taken four at a time, in blocks small enough for their
 * activations to stay in L2. Both paths feed every accumulator the same
 * sequence of lane-wise multiply-adds, so the results are identical.
 */
#include "engine/cpu_kernels.h"

#include <string.h>

#include "engine/quant.h"

#if defined(__AVX512F__) && defined(__F16C__)
#include <immintrin.h>
#define CPU_AVX512 1
#define CPU_VL 16
typedef __m512 vf;
static inline vf v_zero(void) { return _mm512_setzero_ps(); }
static inline vf v_load(const float *p) { return _mm512_loadu_ps(p); }
static inline vf v_load_n(const float *p, int n) { return _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p); }
static inline vf v_fma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline float v_sum(vf v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define CPU_AVX2 1
#define CPU_VL 8
typedef __m256 vf;
static inline vf v_zero(void) { return _mm256_setzero_ps(); }
static inline vf v_load(const float *p) { return _mm256_loadu_ps(p); }
static inline vf v_load_n(const float *p, int n)
{
    static const int32_t m[16] = { -1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0 };
    return _mm256_maskload_ps(p, _mm256_loadu_si256((const __m256i *)(m + 8 - n)));
}
static inline vf v_fma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline float v_sum(vf v)
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
static inline vf v_zero(void) { return (vf){ { 0 } }; }
static inline vf v_load(const float *p)
{
    vf v;
    memcpy(v.l, p, sizeof v.l);
    return v;
}
static inline vf v_load_n(const float *p, int n)
{
    vf v = v_zero();
    memcpy(v.l, p, (size_t)n * sizeof(float));
    return v;
}
static inline vf v_fma(vf a, vf b, vf c)
{
    for (int i = 0; i < CPU_VL; i++) c.l[i] += a.l[i] * b.l[i];
    return c;
}
static inline float v_sum(vf v)
{
    float a = (v.l[0] + v.l[4]) + (v.l[2] + v.l[6]), b = (v.l[1] + v.l[5]) + (v.l[3] + v.l[7]);
    return a + b;
}
#endif

enum { PIECE = 256, ROWS = 4, TOKS = 4 };

const char *cpu_kernels_isa(void)
{
#if defined(CPU_AVX512)
    return "avx512";
#elif defined(CPU_AVX2)
    return "avx2";
#else
    return "scalar";
#endif
}

/* ---- dequantization of a row range --------------------------------------- */

static int64_t block_elems(uint32_t type)
{
    const quant_type_info *t = quant_type(type);
    return t ? t->block_elems : 1;
}

/* Row piece [k0, k0+m) as f32: into buf, or straight from the weights for
 * F32 rows. k0 and m are multiples of the block size (except a final F32/
 * F16/BF16 piece). */
static const float *piece(const cpu_weight *w, const uint8_t *row, int64_t k0, int64_t m, float *buf)
{
    if (w->type == GGML_TYPE_F32) return (const float *)(const void *)row + k0;
    const quant_type_info *t = quant_type(w->type);
    quant_dequant_row(w->type, row + k0 / t->block_elems * t->block_bytes, buf, m);
    return buf;
}

/* ---- tiles ------------------------------------------------------------------ */

/* acc[r][t] += Σ_j w[r][j]·x[t][j] over j < m, lane-wise. NR ≤ ROWS rows,
 * NT ≤ TOKS tokens; the macro instantiates the fixed shapes. */
#define TILE_FN(NR, NT)                                                                                 \
    static inline void tile_##NR##x##NT(const float *const *w, const float *const *x, int64_t m,        \
                                        vf acc[ROWS][TOKS])                                             \
    {                                                                                                   \
        int64_t j = 0;                                                                                  \
        for (; j + CPU_VL <= m; j += CPU_VL) {                                                          \
            vf xv[NT];                                                                                  \
            for (int t = 0; t < NT; t++) xv[t] = v_load(x[t] + j);                                      \
            for (int r = 0; r < NR; r++) {                                                              \
                vf wv = v_load(w[r] + j);                                                               \
                for (int t = 0; t < NT; t++) acc[r][t] = v_fma(wv, xv[t], acc[r][t]);                   \
            }                                                                                           \
        }                                                                                               \
        if (j < m) {                                                                                    \
            int rest = (int)(m - j);                                                                    \
            vf xv[NT];                                                                                  \
            for (int t = 0; t < NT; t++) xv[t] = v_load_n(x[t] + j, rest);                              \
            for (int r = 0; r < NR; r++) {                                                              \
                vf wv = v_load_n(w[r] + j, rest);                                                       \
                for (int t = 0; t < NT; t++) acc[r][t] = v_fma(wv, xv[t], acc[r][t]);                   \
            }                                                                                           \
        }                                                                                               \
    }
TILE_FN(4, 1)
TILE_FN(4, 2)
TILE_FN(4, 3)
TILE_FN(4, 4)

static void tile(int nt, const float *const *w, const float *const *x, int64_t m, vf acc[ROWS][TOKS])
{
    switch (nt) {
    case 1: tile_4x1(w, x, m, acc); break;
    case 2: tile_4x2(w, x, m, acc); break;
    case 3: tile_4x3(w, x, m, acc); break;
    default: tile_4x4(w, x, m, acc); break;
    }
}

size_t cpu_mm_scratch_floats(int64_t n)
{
    int64_t piece_floats = ROWS * PIECE, rows = ROWS * ((n + 15) & ~(int64_t)15);
    return (size_t)(rows > piece_floats ? rows : piece_floats) + 64;
}

static void store(int64_t r0, int nr, int t0, int nt, vf acc[ROWS][TOKS], float *const *y)
{
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) y[t0 + t][r0 + r] = v_sum(acc[r][t]);
}

/* Up to TOKS tokens: pieces of the row group in L1, all accumulators in
 * registers. */
static void group_few(const cpu_weight *w, const uint8_t *const *rows, int nr, int64_t r0, int T,
                      const float *const *x, float *const *y, float *buf)
{
    vf acc[ROWS][TOKS];
    for (int r = 0; r < ROWS; r++)
        for (int t = 0; t < TOKS; t++) acc[r][t] = v_zero();
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
static void group_many(const cpu_weight *w, const uint8_t *const *rows, int nr, int64_t r0, int T,
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

void cpu_mm_rows(const cpu_weight *w, int64_t r0, int64_t r1, int T, const float *const *x, float *const *y,
                 float *scratch)
{
    /* token blocks sized so their activations stay in L2 next to the rows */
    int64_t tb = (int64_t)(96 * 1024) / (w->n > 0 ? w->n : 1);
    tb = tb < TOKS ? TOKS : tb > 64 ? 64 : tb & ~(int64_t)3;
    for (int t0 = 0; t0 < T; t0 += (int)tb) {
        int nt = T - t0 < tb ? T - t0 : (int)tb;
        for (int64_t r = r0; r < r1; r += ROWS) {
            int nr = r1 - r < ROWS ? (int)(r1 - r) : ROWS;
            const uint8_t *rows[ROWS];
            /* a short group repeats its last row; the extra results are dropped */
            for (int i = 0; i < ROWS; i++) rows[i] = w->data + (size_t)(r + (i < nr ? i : nr - 1)) * w->row_bytes;
            if (nt <= TOKS)
                group_few(w, rows, nr, r, nt, x + t0, y + t0, scratch);
            else
                group_many(w, rows, nr, r, nt, x + t0, y + t0, scratch);
        }
    }
}

/* ---- row helpers --------------------------------------------------------------- */

float cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    vf acc = v_zero();
    int64_t j = 0;
    for (; j + CPU_VL <= n; j += CPU_VL) acc = v_fma(v_load(a + j), v_load(b + j), acc);
    if (j < n) acc = v_fma(v_load_n(a + j, (int)(n - j)), v_load_n(b + j, (int)(n - j)), acc);
    return v_sum(acc);
}

float cpu_dot_f16(const uint16_t *h, const float *b, int64_t n)
{
    float buf[PIECE];
    vf acc = v_zero();
    for (int64_t k = 0; k < n; k += PIECE) {
        int64_t m = n - k < PIECE ? n - k : PIECE;
        cpu_f16_to_f32(buf, h + k, m);
        int64_t j = 0;
        for (; j + CPU_VL <= m; j += CPU_VL) acc = v_fma(v_load(buf + j), v_load(b + k + j), acc);
        if (j < m) acc = v_fma(v_load_n(buf + j, (int)(m - j)), v_load_n(b + k + j, (int)(m - j)), acc);
    }
    return v_sum(acc);
}

void cpu_axpy_f32(float *y, float s, const float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += s * a[i];
}

void cpu_axpy_f16(float *y, float s, const uint16_t *a, int64_t n)
{
    float buf[PIECE];
    for (int64_t k = 0; k < n; k += PIECE) {
        int64_t m = n - k < PIECE ? n - k : PIECE;
        cpu_f16_to_f32(buf, a + k, m);
        for (int64_t i = 0; i < m; i++) y[k + i] += s * buf[i];
    }
}

void cpu_f32_to_f16(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

void cpu_f16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
#if defined(CPU_AVX512) || defined(CPU_AVX2)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
#endif
    for (; i < n; i++) dst[i] = quant_f16_to_f32(src[i]);
}
