/* cpu_kernels_x256.h — the 256-bit fused decoders of the CPU kernels
 * template: included by cpu_kernels_x.h where CK_WIDTH is 256, with its
 * vf, ROWS, TOKS, prefetch_plan and CK_TGT in scope; nothing else includes
 * it. */
/* ---- fused decoders (AVX2) ---------------------------------------------------
 *
 * The same idea in 8 lanes for the routed experts' formats and Q8_0 (the
 * attention projections, the shared expert, the output head): each 8 weights
 * are decoded in registers, the values quant_dequant_row gives, and
 * multiplied straight into the accumulators in the order the buffered
 * tiles use (one multiply-add per 8 elements, k ascending), so the bits
 * are the buffered path's. */
#define HAVE_FUSED2 1

/* IQ2_XXS: a block's scales and sign bits are worked out once per block
 * and row in vectors (x256_iq2_setup): db[g] = d·(0.5 + ls)·0.25 as the
 * reference rounds it, and sg[g] the 32 sign bits of group g (each 7-bit
 * selector spread to a byte, bit 7 its parity from a nibble table). */
typedef struct {
    uint32_t sg[8];
    float db[8];
} x256_iq2_blk;

static inline CK_TGT void x256_iq2_setup(const block_iq2_xxs *b, x256_iq2_blk *s)
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

static inline CK_TGT x256_iq2_grp x256_iq2_group(const block_iq2_xxs *b, const x256_iq2_blk *s, int g)
{
    (void)b;
    x256_iq2_grp r = { _mm256_mul_ps(_mm256_set1_ps(s->db[g]), _mm256_setr_ps(8, 25, 0, 43, 0, 0, 0, 0)),
                       _mm256_set1_epi32((int)s->sg[g]) };
    return r;
}

/* Elements 32g + 8c … +7: grid row c of group g looked up in the table, a
 * set sign bit (bit 8c + lane, shifted to bit 31) flipping the float's
 * sign, −0 included. */
static inline CK_TGT __m256 x256_iq2(const block_iq2_xxs *b, int g, int c, const x256_iq2_grp *t)
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

static inline CK_TGT void x256_q2k_setup(const block_q2_K *b, x256_q2k_blk *s)
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

static inline CK_TGT x256_q2k_grp x256_q2k_group(const block_q2_K *b, const x256_q2k_blk *s, int j)
{
    const __m256 q = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    x256_q2k_grp r = { { _mm256_fmadd_ps(_mm256_set1_ps(s->dl[2 * j]), q, _mm256_set1_ps(s->nml[2 * j])),
                         _mm256_fmadd_ps(_mm256_set1_ps(s->dl[2 * j + 1]), q, _mm256_set1_ps(s->nml[2 * j + 1])) },
                       ((j & 3) ? s->sh[(j & 3) - 1] : b->qs) + 32 * (j >> 2) };
    return r;
}

static inline CK_TGT __m256 x256_q2k(const block_q2_K *b, int j, int c, const x256_q2k_grp *t)
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
static inline __attribute__((always_inline)) CK_TGT void x256_q8_0_span(const uint8_t *const *rows, int64_t k0, __m256 w[ROWS][4])
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

static CK_TGT const fused_fn *fused_for(uint32_t type)
{
    static const fused_fn q2_K[] = { x256_q2_K_1, x256_q2_K_2, x256_q2_K_3, x256_q2_K_4 },
                          iq2[] = { x256_iq2_xxs_1, x256_iq2_xxs_2, x256_iq2_xxs_3, x256_iq2_xxs_4 },
                          q8_0[] = { x256_q8_0_1, x256_q8_0_2, x256_q8_0_3, x256_q8_0_4 };
    return type == GGML_TYPE_Q2_K ? q2_K : type == GGML_TYPE_IQ2_XXS ? iq2 : type == GGML_TYPE_Q8_0 ? q8_0 : NULL;
}
