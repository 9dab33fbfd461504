/* cpu_kernels_x512.h — the 512-bit fused decoders of the CPU kernels
 * template: included by cpu_kernels_x.h where CK_WIDTH is 512, with its
 * vf, ROWS, TOKS, prefetch_plan and CK_TGT in scope; nothing else includes
 * it. */
/* ---- fused decoders (AVX-512) ---------------------------------------------------
 *
 * dec_*(row, k) returns elements [k, k+16) of a row as f32 lanes, the same
 * values quant_dequant_row produces (every dequantization formula is exact
 * in f32 or rounds once, whatever the order). Multiplying them straight
 * into the accumulators therefore gives the bits of the buffered path
 * without the store and reload. */
#define HAVE_FUSED 1

static inline CK_TGT float f16s(const void *p) { return _cvtsh_ss(quant_rd16(p)); }

/* Each decoder yields elements [k, k+32): lo = [k, k+16), hi = [k+16, k+32). */
static inline CK_TGT void dec_f32(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    const float *p = (const float *)(const void *)row + k;
    *lo = _mm512_loadu_ps(p);
    *hi = _mm512_loadu_ps(p + 16);
}

static inline CK_TGT void dec_f16(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    *lo = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k)));
    *hi = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(row + 2 * k + 32)));
}

static inline CK_TGT __m512 bf16x16(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

static inline CK_TGT void dec_bf16(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    *lo = bf16x16(row + 2 * k);
    *hi = bf16x16(row + 2 * k + 32);
}

static inline CK_TGT void dec_q8_0(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
{
    const block_q8_0 *b = (const block_q8_0 *)(const void *)row + (k >> 5);
    __m512 d = _mm512_set1_ps(f16s(&b->d));
    /* two 16-byte loads the sign extension takes as memory operands */
    __m128i q0 = _mm_loadu_si128((const __m128i *)(const void *)b->qs);
    __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(b->qs + 16));
    *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d);
    *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d);
}

static inline CK_TGT void dec_q4_K(const uint8_t *row, int64_t k, __m512 *lo, __m512 *hi)
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
static inline CK_TGT uint32_t iq2_signs(uint32_t s)
{
    uint32_t t = _pdep_u32(s, 0x7f7f7f7fu);
    uint32_t p = t ^ (t >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return t | (p & 0x01010101u) << 7;
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

static inline CK_TGT void iq2_setup(const uint8_t *row, int64_t k0, iq2_blk *s)
{
    const block_iq2_xxs *b = (const block_iq2_xxs *)(const void *)row + (k0 >> 8);
    s->qs = (const uint8_t *)b->qs;
    float d = f16s(&b->d);
#if CK_VBMI
    /* group g is qword g: four index bytes, then 4 × 7 sign bits and a 4-bit scale */
    static const uint8_t pick[64] = { 0,  1,  2,  3,  8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                                      32, 33, 34, 35, 40, 41, 42, 43, 48, 49, 50, 51, 56, 57, 58, 59 };
    __m512i q = _mm512_loadu_si512(b->qs);
    __m512i f = _mm512_and_si512(_mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E2720), q), _mm512_set1_epi8(0x7f));
    /* bit 7 of a sign byte is the parity of its seven bits: the parities
     * of its two nibbles from a table (-128 where odd), xored */
    const __m512i par = _mm512_broadcast_i32x4(_mm_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0));
    const __m512i m15 = _mm512_set1_epi8(15);
    __m512i p = _mm512_xor_si512(_mm512_shuffle_epi8(par, _mm512_and_si512(f, m15)),
                                 _mm512_shuffle_epi8(par, _mm512_and_si512(_mm512_srli_epi16(f, 4), m15)));
    f = _mm512_or_si512(f, p);
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

static inline CK_TGT void dec_iq2_blk(const iq2_blk *s, int j, __m512 *lo, __m512 *hi)
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

static inline CK_TGT void q2k_setup(const uint8_t *row, int64_t k0, q2k_blk *s)
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

static inline CK_TGT __m512 q2k_sub(const q2k_blk *s, const uint8_t *q, int sub)
{
    const __m512 v = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
    __m512 tab = _mm512_fmadd_ps(_mm512_set1_ps(s->dl[sub]), v, _mm512_set1_ps(s->nml[sub]));
    return _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)q)), tab);
}

static inline CK_TGT void dec_q2k_blk(const q2k_blk *s, int j, __m512 *lo, __m512 *hi)
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

static CK_TGT const fused_fn *fused_for(uint32_t type)
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
static CK_TGT bool dequant_fast(uint32_t type, const uint8_t *row, int64_t n, float *buf)
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
