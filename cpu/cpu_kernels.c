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
#include "cpu/cpu_kernels.h"

#include <string.h>

#include "engine/quant.h"
#include "engine/quant_impl.h"

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
static inline __attribute__((always_inline)) void prefetch_next(const prefetch_plan *pf, int64_t k)
{
    int64_t off = (k * pf->bytes_per_256) >> 8;
    for (int r = 0; r < ROWS; r++) _mm_prefetch((const char *)(pf->next[r] + off), _MM_HINT_T0);
}

/* At element k of the rows (a multiple of 32): the plan's prefetch, if
 * this step has one. */
static inline __attribute__((always_inline)) void prefetch_step(const prefetch_plan *pf, int64_t k)
{
    if (pf->next && !((k >> 5) & pf->step_mask)) prefetch_next(pf, k);
}

static void prefetch_plan_init(prefetch_plan *pf, const cpu_weight *w, const uint8_t *const *next)
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
static inline void q2k_shifted(const uint8_t *qs, uint8_t sh[3][64])
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
    static void FN(const uint8_t *const *rows, int64_t n, const float *const *x, vf acc[ROWS][TOKS],     \
                   const prefetch_plan *pf)
#endif

/* ---- fused decoders (AVX-512) ---------------------------------------------------
 *
 * dec_*(row, k) returns elements [k, k+16) of a row as f32 lanes, the same
 * values quant_dequant_row produces (every dequantization formula is exact
 * in f32 or rounds once, whatever the order). Multiplying them straight
 * into the accumulators therefore gives the bits of the buffered path
 * without the store and reload. */
#if defined(CPU_AVX512)
#define HAVE_FUSED 1

static inline float f16s(const void *p) { return _cvtsh_ss(quant_rd16(p)); }

/* Each decoder yields elements [k, k+32): lo = [k, k+16), hi = [k+16, k+32). */
static inline void dec_f32(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    const float *p = (const float *)(const void *)row + k;
    *lo = _mm512_loadu_ps(p);
    *hi = _mm512_loadu_ps(p + 16);
}

static inline void dec_f16(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    *lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k)));
    *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k + 32)));
}

static inline __m512 bf16x16(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static inline void dec_bf16(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    *lo = bf16x16(row + 2 * k);
    *hi = bf16x16(row + 2 * k + 32);
}

static inline void dec_q8_0(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    const block_q8_0 *b = (const block_q8_0 *)(const void *)row + (k >> 5);
    __m512 d = _mm512_set1_ps(f16s(&b->d));
    /* two 16-byte loads the sign extension takes as memory operands */
    __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)b->qs);
    __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(b->qs + 16));
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
}

static inline void dec_q4_K(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    const block_q4_K *b = (const block_q4_K *)(const void *)row + (k >> 8);
    int e = (int)(k & 255), j = e >> 5;
    uint8_t sc, m;
    quant_q4k_scale_min(b->scales, j, &sc, &m);
    __m256i bytes = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * (j >> 1)));
    if (j & 1) bytes = _mm256_srli_epi16(bytes, 4);
    bytes = _mm256_and_si256(bytes, _mm256_set1_epi8(15));
    /* dl·q is exact: the fused multiply-add rounds as dl·q − ml does */
    __m512 dl = _mm512_set1_ps(f16s(&b->d) * (float)sc), nml = _mm512_set1_ps(-(f16s(&b->dmin) * (float)m));
    *lo = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(bytes))), nml);
    *hi = _mm512_fmadd_ps(dl, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(bytes, 1))), nml);
}

/* The 32 sign bits of a group: bit 7 of each selector byte is its parity. */
static inline uint32_t iq2_signs(uint32_t s)
{
#if defined(__BMI2__)
    uint32_t t = _pdep_u32(s, 0x7f7f7f7fu);
    uint32_t p = t ^ (t >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return t | (p & 0x01010101u) << 7;
#else
    return quant_ksigns_iq2xs[s & 127] | (uint32_t)quant_ksigns_iq2xs[(s >> 7) & 127] << 8 |
           (uint32_t)quant_ksigns_iq2xs[(s >> 14) & 127] << 16 | (uint32_t)quant_ksigns_iq2xs[(s >> 21) & 127] << 24;
#endif
}

/* acc[r][t] += row_r · x_t over n (a multiple of 32) for 4 rows, NT
 * tokens; lanes see elements in increasing order as in tile(). */
#define FUSED_ROW_STEP(R, DEC, NT)                                                                  \
    do {                                                                                            \
        vf w0, w1;                                                                                  \
        DEC(rows[R], k, &w0, &w1);                                                                  \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = _mm512_fmadd_ps(w0, x0[t], a##R[t]); \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = _mm512_fmadd_ps(w1, x1[t], a##R[t]); \
    } while (0)
#define FUSED_FN(NAME, DEC, NT)                                                                          \
    FUSED_SIG(fused_##NAME##_##NT)                                                                       \
    {                                                                                                    \
        ACC_LOAD(NT);                                                                              \
        for (int64_t k = 0; k < n; k += 32) {                                                            \
            prefetch_step(pf, k);                                                                        \
            vf x0[NT], x1[NT];                                                                           \
            _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                       \
                x0[t] = _mm512_loadu_ps(x[t] + k);                                                       \
                x1[t] = _mm512_loadu_ps(x[t] + k + 16);                                                  \
            }                                                                                            \
            FUSED_ROW_STEP(0, DEC, NT);                                                                  \
            FUSED_ROW_STEP(1, DEC, NT);                                                                  \
            FUSED_ROW_STEP(2, DEC, NT);                                                                  \
            FUSED_ROW_STEP(3, DEC, NT);                                                                  \
        }                                                                                                \
        ACC_STORE(NT);                                                                             \
    }
#define FUSED_TYPE(NAME, DEC) FUSED_FN(NAME, DEC, 1) FUSED_FN(NAME, DEC, 2) FUSED_FN(NAME, DEC, 3) FUSED_FN(NAME, DEC, 4)
FUSED_TYPE(f32, dec_f32)
FUSED_TYPE(f16, dec_f16)
FUSED_TYPE(bf16, dec_bf16)
FUSED_TYPE(q8_0, dec_q8_0)
FUSED_TYPE(q4_K, dec_q4_K)

/* ---- 2-bit formats, a 256-element block at a time ---------------------------------
 *
 * The scales, and for IQ2_XXS the sign bits with their parity, are
 * computed once per block and row with vector instructions into a small
 * state; each 32-element step then only looks its lanes up. Every value is
 * the reference dequantization's product, rounded as it rounds. */

typedef struct {
    const uint8_t *qs; /* the block's indices and sign words */
    uint32_t sg[8];    /* sign bits of elements 32j … 32j+31 */
    float db[8];       /* scale of each 32-element group */
} iq2_blk;

static inline void iq2_setup(const uint8_t *row, int64_t k0, iq2_blk *s)
{
    const block_iq2_xxs *b = (const block_iq2_xxs *)(const void *)row + (k0 >> 8);
    s->qs = (const uint8_t *)b->qs;
    float d = f16s(&b->d);
#if defined(__AVX512VBMI__) && defined(__AVX512BITALG__)
    /* group g is qword g: four index bytes, then 4 × 7 sign bits and a 4-bit scale */
    static const uint8_t pick[64] = { 0,  1,  2,  3,  8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                                      32, 33, 34, 35, 40, 41, 42, 43, 48, 49, 50, 51, 56, 57, 58, 59 };
    __m512i q = _mm512_loadu_si512(b->qs);
    __m512i f = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E2720), q), _mm512_set1_epi8(0x7f));
    /* bit 7 of a sign byte is the parity of its seven bits */
    __m512i par = _mm512_and_si512(_mm512_popcnt_epi8(f), _mm512_set1_epi8(1));
    f = _mm512_or_si512(f, _mm512_slli_epi16(par, 7));
    __m512i packed = _mm512_permutexvar_epi8(_mm512_loadu_si512(pick), f);
    _mm256_storeu_si256((__m256i *)(void *)s->sg, _mm512_castsi512_si256(packed));
    __m256 ls = _mm512_cvtepu64_ps(_mm512_srli_epi64(q, 60));
    __m256 db = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), _mm256_add_ps(_mm256_set1_ps(0.5f), ls)), _mm256_set1_ps(0.25f));
    _mm256_storeu_ps(s->db, db);
#else
    for (int g = 0; g < 8; g++) {
        uint32_t w = quant_rd32(s->qs + 8 * g + 4);
        s->sg[g] = iq2_signs(w);
        s->db[g] = d * (0.5f + (float)(w >> 28)) * 0.25f;
    }
#endif
}

static inline void dec_iq2_blk(const iq2_blk *s, int j, __m512 *lo, __m512 *hi)
{
    const uint8_t *idx = s->qs + 8 * j;
    uint32_t sg = s->sg[j];
    /* grid bytes are 8, 25 or 43: lanes look up db·8, db·25, db·43 at
     * indices 8, 9 and 11 (the byte mod 16), the reference's products */
    const __m512 mags = _mm512_setr_ps(0, 0, 0, 0, 0, 0, 0, 0, 8, 25, 0, 43, 0, 0, 0, 0);
    __m512 tbl = _mm512_mul_ps(_mm512_set1_ps(s->db[j]), mags);
    __m128i g0 = _mm_set_epi64x((long long)quant_iq2xxs_grid[idx[1]], (long long)quant_iq2xxs_grid[idx[0]]);
    __m128i g1 = _mm_set_epi64x((long long)quant_iq2xxs_grid[idx[3]], (long long)quant_iq2xxs_grid[idx[2]]);
    __m512 v0 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(g0), tbl);
    __m512 v1 = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(g1), tbl);
    *lo = _mm512_mask_sub_ps(v0, (__mmask16)sg, _mm512_setzero_ps(), v0);
    *hi = _mm512_mask_sub_ps(v1, (__mmask16)(sg >> 16), _mm512_setzero_ps(), v1);
}

/* Elements 32j … 32j+31 are sub-blocks 2j and 2j+1: bits 2(j % 4) of
 * bytes 32(j / 4) … of the quants. Per block, d·(scale & 15) and
 * −dmin·(scale >> 4) of the 16 sub-blocks, and the quants shifted right
 * by 2, 4 and 6 (q2k_shifted). A sub-block's 16 values
 * are then one zero-extending load and a vpermps from its table,
 * d·(scale & 15)·q − dmin·(scale >> 4) for q = 0..3 four times over
 * (d·(scale & 15)·q is exact, so the fused multiply-add rounds as the
 * reference's subtraction does). Shifting and masking the quants every
 * step, and tables of four sub-blocks built with two permutes each, put
 * more work on the one port Intel cores shuffle on (llvm-mca: 28.6 ->
 * 22.6 cycles a step of four rows on Cascade Lake; on Zen 4, which splits
 * 512-bit shuffles in two anyway, it measures the same within 1 %). */
typedef struct {
    const uint8_t *qs;
    float dl[16], nml[16];
    _Alignas(32) uint8_t sh[3][64]; /* the quants >> 2, 4, 6 */
} q2k_blk;

static inline void q2k_setup(const uint8_t *row, int64_t k0, q2k_blk *s)
{
    const block_q2_K *b = (const block_q2_K *)(const void *)row + (k0 >> 8);
    s->qs = b->qs;
    __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)b->scales));
    __m512 lo4 = _mm512_cvtepi32_ps(_mm512_and_si512(sc, _mm512_set1_epi32(15)));
    __m512 hi4 = _mm512_cvtepi32_ps(_mm512_srli_epi32(sc, 4));
    _mm512_storeu_ps(s->dl, _mm512_mul_ps(_mm512_set1_ps(f16s(&b->d)), lo4));
    /* an exact negation, −0 included, as the scalar minus gives */
    _mm512_storeu_ps(s->nml, _mm512_xor_ps(_mm512_mul_ps(_mm512_set1_ps(f16s(&b->dmin)), hi4), _mm512_set1_ps(-0.0f)));
    q2k_shifted(b->qs, s->sh);
}

static inline __m512 q2k_sub(const q2k_blk *s, const uint8_t *q, int sub)
{
    const __m512 v = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    __m512 tab = _mm512_fmadd_ps(_mm512_set1_ps(s->dl[sub]), v, _mm512_set1_ps(s->nml[sub]));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q)), tab);
}

static inline void dec_q2k_blk(const q2k_blk *s, int j, __m512 *lo, __m512 *hi)
{
    const uint8_t *q = ((j & 3) ? s->sh[(j & 3) - 1] : s->qs) + 32 * (j >> 2);
    *lo = q2k_sub(s, q, 2 * j);
    *hi = q2k_sub(s, q + 16, 2 * j + 1);
}

#define BLK_ROW_STEP(R, DEC, NT)                                                                    \
    do {                                                                                            \
        vf w0, w1;                                                                                  \
        DEC(&s##R, j, &w0, &w1);                                                                    \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = _mm512_fmadd_ps(w0, x0[t], a##R[t]); \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = _mm512_fmadd_ps(w1, x1[t], a##R[t]); \
    } while (0)
#define FUSED_BLK_FN(NAME, STATE, SETUP, DEC, NT)                                                        \
    FUSED_SIG(fused_##NAME##_##NT)                                                                       \
    {                                                                                                    \
        ACC_LOAD(NT);                                                                              \
        for (int64_t k0 = 0; k0 < n; k0 += 256) {                                                        \
            STATE s0, s1, s2, s3;                                                                        \
            SETUP(rows[0], k0, &s0);                                                                     \
            SETUP(rows[1], k0, &s1);                                                                     \
            SETUP(rows[2], k0, &s2);                                                                     \
            SETUP(rows[3], k0, &s3);                                                                     \
            for (int j = 0; j < 8; j++) {                                                                \
                int64_t k = k0 + 32 * j;                                                                 \
                prefetch_step(pf, k);                                                                    \
                vf x0[NT], x1[NT];                                                                       \
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) {                                   \
                    x0[t] = _mm512_loadu_ps(x[t] + k);                                                   \
                    x1[t] = _mm512_loadu_ps(x[t] + k + 16);                                              \
                }                                                                                        \
                BLK_ROW_STEP(0, DEC, NT);                                                                \
                BLK_ROW_STEP(1, DEC, NT);                                                                \
                BLK_ROW_STEP(2, DEC, NT);                                                                \
                BLK_ROW_STEP(3, DEC, NT);                                                                \
            }                                                                                            \
        }                                                                                                \
        ACC_STORE(NT);                                                                             \
    }
#define FUSED_BLK_TYPE(NAME, STATE, SETUP, DEC)                                                          \
    FUSED_BLK_FN(NAME, STATE, SETUP, DEC, 1)                                                             \
    FUSED_BLK_FN(NAME, STATE, SETUP, DEC, 2)                                                             \
    FUSED_BLK_FN(NAME, STATE, SETUP, DEC, 3) FUSED_BLK_FN(NAME, STATE, SETUP, DEC, 4)
FUSED_BLK_TYPE(q2_K, q2k_blk, q2k_setup, dec_q2k_blk)
FUSED_BLK_TYPE(iq2_xxs, iq2_blk, iq2_setup, dec_iq2_blk)

typedef void (*fused_fn)(const uint8_t *const *, int64_t, const float *const *, vf[ROWS][TOKS], const prefetch_plan *);
#define FUSED_ROW(NAME) { fused_##NAME##_1, fused_##NAME##_2, fused_##NAME##_3, fused_##NAME##_4 }

static const fused_fn *fused_for(uint32_t type)
{
    static const fused_fn f32[] = FUSED_ROW(f32), f16[] = FUSED_ROW(f16), bf16[] = FUSED_ROW(bf16),
                          q8_0[] = FUSED_ROW(q8_0), q2_K[] = FUSED_ROW(q2_K), q4_K[] = FUSED_ROW(q4_K),
                          iq2[] = FUSED_ROW(iq2_xxs);
    switch (type) {
    case GGML_TYPE_F32: return f32;
    case GGML_TYPE_F16: return f16;
    case GGML_TYPE_BF16: return bf16;
    case GGML_TYPE_Q8_0: return q8_0;
    case GGML_TYPE_Q2_K: return q2_K;
    case GGML_TYPE_Q4_K: return q4_K;
    case GGML_TYPE_IQ2_XXS: return iq2;
    default: return NULL;
    }
}

/* Whole row [0, n) into buf with the same decoders. */
static bool dequant_fast(uint32_t type, const uint8_t *row, int64_t n, float *buf)
{
    if (n % 32) return false;
    switch (type) {
#define DQ(T, DEC)                                                \
    case T:                                                       \
        for (int64_t k = 0; k < n; k += 32) {                     \
            __m512 lo, hi;                                        \
            DEC(row, k, &lo, &hi);                                \
            _mm512_storeu_ps(buf + k, lo);                        \
            _mm512_storeu_ps(buf + k + 16, hi);                   \
        }                                                         \
        return true;
        DQ(GGML_TYPE_F16, dec_f16)
        DQ(GGML_TYPE_BF16, dec_bf16)
        DQ(GGML_TYPE_Q8_0, dec_q8_0)
        DQ(GGML_TYPE_Q4_K, dec_q4_K)
#undef DQ
#define DQ_BLK(T, STATE, SETUP, DEC)                              \
    case T:                                                       \
        if (n % 256) return false;                                \
        for (int64_t k0 = 0; k0 < n; k0 += 256) {                 \
            STATE s;                                              \
            SETUP(row, k0, &s);                                   \
            for (int j = 0; j < 8; j++) {                         \
                __m512 lo, hi;                                    \
                DEC(&s, j, &lo, &hi);                             \
                _mm512_storeu_ps(buf + k0 + 32 * j, lo);          \
                _mm512_storeu_ps(buf + k0 + 32 * j + 16, hi);     \
            }                                                     \
        }                                                         \
        return true;
        DQ_BLK(GGML_TYPE_Q2_K, q2k_blk, q2k_setup, dec_q2k_blk)
        DQ_BLK(GGML_TYPE_IQ2_XXS, iq2_blk, iq2_setup, dec_iq2_blk)
#undef DQ_BLK
    default: return false;
    }
}
#endif

/* ---- fused decoders (AVX2) ---------------------------------------------------
 *
 * The same idea in 8 lanes for the routed experts' formats and Q8_0 (the
 * attention projections, the shared expert, the output head): each 8 weights
 * are decoded in registers, the values quant_dequant_row gives, and
 * multiplied straight into the accumulators in the order the buffered
 * tiles use (one multiply-add per 8 elements, k ascending), so the bits
 * are the buffered path's. */
#if defined(CPU_AVX2)
#define HAVE_FUSED2 1

/* IQ2_XXS: a block's scales and sign bits are worked out once per block
 * and row in vectors (x256_iq2_setup): db[g] = d·(0.5 + ls)·0.25 as the
 * reference rounds it, and sg[g] the 32 sign bits of group g (each 7-bit
 * selector spread to a byte, bit 7 its parity from a nibble table). */
typedef struct {
    uint32_t sg[8];
    float db[8];
} x256_iq2_blk;

static inline void x256_iq2_setup(const block_iq2_xxs *b, x256_iq2_blk *s)
{
    const uint8_t *qs = (const uint8_t *)b->qs;
    __m256 lo = _mm256_loadu_ps((const float *)(const void *)qs), hi = _mm256_loadu_ps((const float *)(const void *)(qs + 32));
    /* the selector words, groups in order (vshufps leaves g0 g1 g4 g5 | g2 g3 g6 g7) */
    __m256i w = _mm256_permute4x64_epi64(_mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), 0xd8);
    /* 4 × 7 bits to bytes: 14-bit halves to words, then 7-bit quarters to bytes */
    __m256i x = _mm256_or_si256(_mm256_and_si256(w, _mm256_set1_epi32(0x3fff)),
                                _mm256_slli_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x0fffc000)), 2));
    __m256i sb = _mm256_or_si256(_mm256_and_si256(x, _mm256_set1_epi32(0x007f007f)),
                                 _mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x3f803f80)), 1));
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128,
                                         -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    const __m256i m15 = _mm256_set1_epi8(15);
    __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(sb, m15)),
                                 _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi32(sb, 4), m15)));
    _mm256_storeu_si256((__m256i *)(void *)s->sg, _mm256_or_si256(sb, p));
    __m256 ls = _mm256_cvtepi32_ps(_mm256_srli_epi32(w, 28));
    __m256 d = _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b->d)));
    _mm256_storeu_ps(s->db, _mm256_mul_ps(_mm256_mul_ps(d, _mm256_add_ps(_mm256_set1_ps(0.5f), ls)), _mm256_set1_ps(0.25f)));
}

/* Group g's magnitudes as db·8, db·25, db·43 (lanes 0, 1, 3: the grid
 * bytes mod 8) and its sign bits in every lane. */
typedef struct {
    __m256 tbl;
    __m256i sg;
} x256_iq2_grp;

static inline x256_iq2_grp x256_iq2_group(const block_iq2_xxs *b, const x256_iq2_blk *s, int g)
{
    (void)b;
    x256_iq2_grp r = { _mm256_mul_ps(_mm256_set1_ps(s->db[g]), _mm256_setr_ps(8, 25, 0, 43, 0, 0, 0, 0)),
                       _mm256_set1_epi32((int)s->sg[g]) };
    return r;
}

/* Elements 32g + 8c … +7: grid row c of group g looked up in the table, a
 * set sign bit (bit 8c + lane, shifted to bit 31) flipping the float's
 * sign, −0 included. */
static inline __m256 x256_iq2(const block_iq2_xxs *b, int g, int c, const x256_iq2_grp *t)
{
    const uint8_t *qs = (const uint8_t *)b->qs + 8 * g;
    __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(quant_iq2xxs_grid + qs[c])));
    __m256i sh = _mm256_sub_epi32(_mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24), _mm256_set1_epi32(8 * c));
    __m256i neg = _mm256_and_si256(_mm256_sllv_epi32(t->sg, sh), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(t->tbl, idx), _mm256_castsi256_ps(neg));
}

/* Q2_K: per block, d·(scale & 15) and −dmin·(scale >> 4) of the 16
 * sub-blocks. Elements 32j + 8c … +7 are bits 2(j % 4) of bytes
 * 32(j / 4) + 8c … of the quants, in sub-block 2j + c/2; the group's two
 * tables hold d·(scale & 15)·q − dmin·(scale >> 4) for q = 0..3, twice, so
 * that only the quant's two low index bits matter (d·(scale & 15)·q is
 * exact, so the fused multiply-add rounds as the buffered subtraction
 * does). The quants shifted right by 2, 4 and 6 are copied once per block
 * (q2k_shifted), so that a step is a zero-extending load and a vpermps. Shifting every step's eight
 * dwords took 24 more operations a block, on the ports that vpermps and
 * vpmovzxbd need (one thread of a Zen 4: 4.3 -> 4.8 GB/s). */
typedef struct {
    float dl[16], nml[16];
    _Alignas(32) uint8_t sh[3][64]; /* the quants >> 2, 4, 6 */
} x256_q2k_blk;

static inline void x256_q2k_setup(const block_q2_K *b, x256_q2k_blk *s)
{
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    __m256 d = _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b->d))), dmin = _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b->dmin)));
    const __m256i m15 = _mm256_set1_epi32(15);
    for (int h = 0; h < 2; h++) {
        __m256i v = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(sc, 8) : sc);
        __m256 dl = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_and_si256(v, m15)));
        __m256 ml = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4)));
        _mm256_storeu_ps(s->dl + 8 * h, dl);
        _mm256_storeu_ps(s->nml + 8 * h, _mm256_xor_ps(ml, _mm256_set1_ps(-0.0f)));
    }
    q2k_shifted(b->qs, s->sh);
}

typedef struct {
    __m256 tbl[2];
    const uint8_t *q; /* group j's 32 quant bytes, shifted to put its bits lowest */
} x256_q2k_grp;

static inline x256_q2k_grp x256_q2k_group(const block_q2_K *b, const x256_q2k_blk *s, int j)
{
    const __m256 q = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    x256_q2k_grp r = { { _mm256_fmadd_ps(_mm256_set1_ps(s->dl[2 * j]), q, _mm256_set1_ps(s->nml[2 * j])),
                         _mm256_fmadd_ps(_mm256_set1_ps(s->dl[2 * j + 1]), q, _mm256_set1_ps(s->nml[2 * j + 1])) },
                       ((j & 3) ? s->sh[(j & 3) - 1] : b->qs) + 32 * (j >> 2) };
    return r;
}

static inline __m256 x256_q2k(const block_q2_K *b, int j, int c, const x256_q2k_grp *t)
{
    (void)b, (void)j;
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(t->q + 8 * c)));
    return _mm256_permutevar8x32_ps(t->tbl[c >> 1], v);
}

#define X256_STEP(R, DEC, NT)                                                                              \
    do {                                                                                                   \
        __m256 w_ = DEC;                                                                                   \
        _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) a##R[t] = _mm256_fmadd_ps(w_, xv[t], a##R[t]); \
    } while (0)
/* BLK: the per-block state BSETUP fills for a row; GRP: the per-group one
 * GSETUP derives from it, which DEC reads. */
#define X256_FN(NAME, BLOCK, BLK, BSETUP, GRP, GSETUP, DEC, NT)                                            \
    FUSED_SIG(x256_##NAME##_##NT)                                                                          \
    {                                                                                                      \
        ACC_LOAD(NT);                                                                                \
        for (int64_t k0 = 0; k0 < n; k0 += 256) {                                                          \
            const BLOCK *b0 = (const BLOCK *)(const void *)rows[0] + (k0 >> 8);                            \
            const BLOCK *b1 = (const BLOCK *)(const void *)rows[1] + (k0 >> 8);                            \
            const BLOCK *b2 = (const BLOCK *)(const void *)rows[2] + (k0 >> 8);                            \
            const BLOCK *b3 = (const BLOCK *)(const void *)rows[3] + (k0 >> 8);                            \
            BLK s0, s1, s2, s3;                                                                            \
            BSETUP(b0, &s0);                                                                               \
            BSETUP(b1, &s1);                                                                               \
            BSETUP(b2, &s2);                                                                               \
            BSETUP(b3, &s3);                                                                               \
            for (int j = 0; j < 8; j++) {                                                                  \
                int64_t k = k0 + 32 * j;                                                                   \
                prefetch_step(pf, k);                                                                      \
                GRP t0 = GSETUP(b0, &s0, j), t1 = GSETUP(b1, &s1, j), t2 = GSETUP(b2, &s2, j),             \
                    t3 = GSETUP(b3, &s3, j);                                                               \
                _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                      \
                    vf xv[NT];                                                                             \
                    _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x[t] + k + 8 * c); \
                    X256_STEP(0, DEC(b0, j, c, &t0), NT);                                                  \
                    X256_STEP(1, DEC(b1, j, c, &t1), NT);                                                  \
                    X256_STEP(2, DEC(b2, j, c, &t2), NT);                                                  \
                    X256_STEP(3, DEC(b3, j, c, &t3), NT);                                                  \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        ACC_STORE(NT);                                                                               \
    }
/* Q8_0: d·q, a block of 32 a step. Always inlined: GCC kept it a call,
 * and every step's call spilled and reloaded all the accumulators. */
static inline __attribute__((always_inline)) void x256_q8_0_span(const uint8_t *const *rows, int64_t k0, __m256 w[ROWS][4])
{
    for (int r = 0; r < ROWS; r++) {
        const block_q8_0 *b = (const block_q8_0 *)(const void *)rows[r] + (k0 >> 5);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(quant_rd16(&b->d)));
        for (int c = 0; c < 4; c++)
            w[r][c] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
                                           _mm_loadl_epi64((const __m128i *)(const void *)(b->qs + 8 * c)))));
    }
}
#define X256_Q8_FN(NT)                                                                                     \
    FUSED_SIG(x256_q8_0_##NT)                                                                              \
    {                                                                                                      \
        ACC_LOAD(NT);                                                                                \
        for (int64_t k = 0; k < n; k += 32) {                                                              \
            prefetch_step(pf, k);                                                                          \
            __m256 w[ROWS][4];                                                                             \
            x256_q8_0_span(rows, k, w);                                                                    \
            for (int c = 0; c < 4; c++) {                                                                  \
                vf xv[NT];                                                                                 \
                _Pragma("GCC unroll 4") for (int t = 0; t < NT; t++) xv[t] = _mm256_loadu_ps(x[t] + k + 8 * c); \
                X256_STEP(0, w[0][c], NT);                                                                 \
                X256_STEP(1, w[1][c], NT);                                                                 \
                X256_STEP(2, w[2][c], NT);                                                                 \
                X256_STEP(3, w[3][c], NT);                                                                 \
            }                                                                                              \
        }                                                                                                  \
        ACC_STORE(NT);                                                                               \
    }
X256_Q8_FN(1)
X256_Q8_FN(2)
X256_Q8_FN(3)
X256_Q8_FN(4)
#define X256_TYPE(NAME, BLOCK, ...)                                                                        \
    X256_FN(NAME, BLOCK, __VA_ARGS__, 1)                                                                   \
    X256_FN(NAME, BLOCK, __VA_ARGS__, 2) X256_FN(NAME, BLOCK, __VA_ARGS__, 3) X256_FN(NAME, BLOCK, __VA_ARGS__, 4)
X256_TYPE(q2_K, block_q2_K, x256_q2k_blk, x256_q2k_setup, x256_q2k_grp, x256_q2k_group, x256_q2k)
X256_TYPE(iq2_xxs, block_iq2_xxs, x256_iq2_blk, x256_iq2_setup, x256_iq2_grp, x256_iq2_group, x256_iq2)

typedef void (*fused_fn)(const uint8_t *const *, int64_t, const float *const *, vf[ROWS][TOKS], const prefetch_plan *);

static const fused_fn *fused_for(uint32_t type)
{
    static const fused_fn q2_K[] = { x256_q2_K_1, x256_q2_K_2, x256_q2_K_3, x256_q2_K_4 },
                          iq2[] = { x256_iq2_xxs_1, x256_iq2_xxs_2, x256_iq2_xxs_3, x256_iq2_xxs_4 },
                          q8_0[] = { x256_q8_0_1, x256_q8_0_2, x256_q8_0_3, x256_q8_0_4 };
    return type == GGML_TYPE_Q2_K ? q2_K : type == GGML_TYPE_IQ2_XXS ? iq2 : type == GGML_TYPE_Q8_0 ? q8_0 : NULL;
}
#endif

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
#if defined(HAVE_FUSED)
    if (dequant_fast(w->type, row + k0 / t->block_elems * t->block_bytes, m, buf)) return buf;
#endif
    quant_dequant_row(w->type, row + k0 / t->block_elems * t->block_bytes, buf, m);
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
    static inline void tile_##NR##x##NT(const float *const *w, const float *const *x, int64_t m,        \
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
static void group_few(const cpu_weight *w, const uint8_t *const *rows, const uint8_t *const *next, int nr,
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

bool cpu_indexer_fast(int nh)
{
#if defined(CPU_AVX512)
    return nh % 16 == 0 && nh <= 256;
#else
    (void)nh;
    return false;
#endif
}

float cpu_indexer_score(const float *qT, const float *wscaled, const float *k, int hd, int nh)
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
        cpu_f16_to_f32(tail, h + j, n - j);
        acc = v_fma(v_load_n(tail, (int)(n - j)), v_load_n(b + j, (int)(n - j)), acc);
    }
    return v_sum(acc);
#else
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
#endif
}

void cpu_axpy_f32(float *y, float s, const float *a, int64_t n)
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

void cpu_axpy_f16(float *y, float s, const uint16_t *a, int64_t n)
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
