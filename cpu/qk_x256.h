/* qk_x256.h — the 256-bit integer 2-bit kernels, included once per AVX2
 * level by qk_avx2vnni.c and qk_avx2.c, which define
 *   QK_TGT   the function attribute naming the level's instructions,
 *   QK_VNNI  1 where the 256-bit vpdpbusd / vpdpwssd may be used,
 *   QK_NAME  the kernel table's name.
 *
 * IQ2_XXS: a group's four grid rows form one vector of magnitudes (loads
 * from the grid table); the block's 32 sign selectors become ksigns bytes
 * in one vector (parity from a nibble table), each group's spread to
 * bytes whose top bit is the sign, which vpsignb applies to the
 * activation bytes; vpmaddubsw sums magnitude × signed activation
 * pairs and the group scale 2·ls+1 weights them (vpmaddwd, or vpdpwssd).
 * Q2_K: each 32-byte quarter of the quants, shifted by 0/2/4/6 and
 * multiplied by the sub-block scale (≤ 45, still a byte), pairs with 32
 * contiguous activation bytes (vpdpbusd; without VNNI vpmaddubsw on the raw
 * quants, the scales applied by the vpmaddwd that widens the pairs).
 * From eight tokens on, both formats are multiplied from panels
 * (qk_impl.h), four tokens a pass, each panel vector as two halves of
 * eight rows.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/qk_impl.h"
#include "cpu/qk_tile.h"
#include "engine/quant_impl.h"

/* Q2_K quants × activations weighted by the sub-block scales: with VNNI
 * the quants are scaled once per row (Q2K_SCALED) and vpdpbusd sums them
 * against each token; without, vpmaddubsw sums raw quant pairs and the
 * scales ride on the vpmaddwd that widens them anyway. */
#if QK_VNNI
#define Q2K_SCALED 1
#define DOT_Q2K(acc, w, scw, s) QK_DPBUSD(acc, w, s)
#define DOT_S16(acc, a, b) QK_DPWSSD(acc, a, b)
#else
#define Q2K_SCALED 0
#define DOT_Q2K(acc, w, scw, s) qk_add_chain(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w, s), scw))
#define DOT_S16(acc, a, b) qk_add_chain(acc, _mm256_madd_epi16(a, b))
#endif

/* acc + v, kept a chain: a run of vpaddd that starts from zero is
 * otherwise reassociated by GCC into a tree, which keeps every product of
 * a block alive at once and spills them (26 stack stores a pass of four
 * rows). The empty asm hides the sum's value, so the next add waits on it. */
static inline QK_TGT __attribute__((always_inline, unused)) __m256i qk_add_chain(__m256i acc, __m256i v)
{
    acc = _mm256_add_epi32(acc, v);
    __asm__("" : "+x"(acc));
    return acc;
}



/* ---- IQ2_XXS ------------------------------------------------------------------ */

typedef struct {
    __m256i mag[8], sgn[8], sc[8];
    float d;
} iq2_dec;

/* The eight groups' sign bits at once: each group's four 7-bit selectors
 * spread to the bytes of a dword, the eighth bit of each byte its parity
 * (a nibble table), which is ksigns' value; and (scd) their scales. The
 * dwords are in the order vshufps leaves them: groups 0, 1, 4, 5 in the
 * low lane, 2, 3, 6, 7 in the high one. */
static inline QK_TGT __m256i iq2_sign_dwords(const uint8_t *qs, __m256i *scd)
{
    __m256 lo = _mm256_loadu_ps((const float *)(const void *)qs), hi = _mm256_loadu_ps((const float *)(const void *)(qs + 32));
    __m256i w = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
    /* the scales 2·ls+1, in both words of the same dwords */
    __m256i ls = _mm256_or_si256(_mm256_srli_epi32(w, 27), _mm256_set1_epi32(1));
    *scd = _mm256_or_si256(ls, _mm256_slli_epi32(ls, 16));
    const __m256i m7 = _mm256_set1_epi32(127), m15 = _mm256_set1_epi8(15);
    __m256i sb = _mm256_or_si256(
        _mm256_or_si256(_mm256_and_si256(w, m7), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 7), m7), 8)),
        _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 14), m7), 16),
                        _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w, 21), m7), 24)));
    const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128,
                                         -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
    __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(sb, m15)),
                                 _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi32(sb, 4), m15)));
    return _mm256_or_si256(sb, p);
}

/* A block's sign dwords and scales with each 128-bit lane duplicated:
 * sa/ca hold groups 0, 1, 4, 5 (iq2_sign_dwords' low lane) in both lanes,
 * sb/cb groups 2, 3, 6, 7, so that one in-lane vpshufb (or vpshufd) per
 * group spreads them: no cross-lane shuffle per group, which on Intel
 * cores would compete with every other shuffle for port 5. */
typedef struct {
    __m256i sa, sb, ca, cb;
} iq2_sgn;

static inline QK_TGT __attribute__((always_inline)) void iq2_signs(const uint8_t *qs, iq2_sgn *s)
{
    __m256i scd, sd = iq2_sign_dwords(qs, &scd);
    s->sa = _mm256_permute2x128_si256(sd, sd, 0x00);
    s->sb = _mm256_permute2x128_si256(sd, sd, 0x11);
    s->ca = _mm256_permute2x128_si256(scd, scd, 0x00);
    s->cb = _mm256_permute2x128_si256(scd, scd, 0x11);
}

/* The four grid rows of a group's indices q[0..3] (the 2 KB
 * table stays in L1): one plain 64-bit load and three broadcast loads
 * blended in. vpblendd runs on any vector port, where vpinsrq and
 * vinserti128 (or a vpermw lookup of 2-bit codes) would each take another
 * shuffle on Intel cores' port 5, the one their other shuffles need. */
static inline QK_TGT __attribute__((always_inline)) __m256i iq2_grid4(const uint8_t *q)
{
    const long long *grid = (const long long *)(const void *)quant_iq2xxs_grid;
    __m256i a = _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(const void *)(grid + q[0])));
    a = _mm256_blend_epi32(a, _mm256_set1_epi64x(grid[q[1]]), 0x0C);
    a = _mm256_blend_epi32(a, _mm256_set1_epi64x(grid[q[2]]), 0x30);
    return _mm256_blend_epi32(a, _mm256_set1_epi64x(grid[q[3]]), 0xC0);
}

/* Group g of a block: its magnitudes, signs (byte j of the 32 negative
 * where weight j is: its sign bit, selected by the bit mask, plus 127,
 * which vpsignb reads as ±) and scale 2·ls+1 as words. */
static inline QK_TGT __attribute__((always_inline)) void iq2_group(const uint8_t *qs, const iq2_sgn *s, int g,
                                                                   __m256i *mag, __m256i *sgn, __m256i *sc)
{
    /* byte j of a group's 32 takes bit j % 8 of its sign byte j / 8, which
     * is byte 4p + j / 8 of the lane-duplicated dwords (p: the group's
     * place in its lane) */
    const __m256i rep = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3,
                                         3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll), m127 = _mm256_set1_epi8(127);
    *mag = iq2_grid4(qs + 8 * g);
    int hi = (g & 2) != 0, p = (g & 1) | (g & 4) >> 1;
    __m256i x = _mm256_shuffle_epi8(hi ? s->sb : s->sa, _mm256_add_epi8(rep, _mm256_set1_epi8((char)(4 * p))));
    *sgn = _mm256_add_epi8(_mm256_and_si256(x, bit), m127);
    __m256i c = hi ? s->cb : s->ca;
    switch (p) { /* vpshufd's control must be a constant at any optimization level */
    case 0: *sc = _mm256_shuffle_epi32(c, 0x00); break;
    case 1: *sc = _mm256_shuffle_epi32(c, 0x55); break;
    case 2: *sc = _mm256_shuffle_epi32(c, 0xAA); break;
    default: *sc = _mm256_shuffle_epi32(c, 0xFF); break;
    }
}

static inline QK_TGT void iq2_decode(const block_iq2_xxs *b, iq2_dec *s)
{
    const uint8_t *qs = (const uint8_t *)b->qs;
    iq2_sgn sg;
    iq2_signs(qs, &sg);
    for (int g = 0; g < 8; g++) iq2_group(qs, &sg, g, &s->mag[g], &s->sgn[g], &s->sc[g]);
    s->d = _cvtsh_ss(quant_rd16(&b->d));
}

/* Each group decoded and at once multiplied into the tile's tokens, its
 * vectors never leaving the registers. */
static inline QK_TGT __attribute__((always_inline)) void
iq2_tile(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, const int nt,
         int64_t nb, float out[QK_ROWS][QK_TOKS])
{
    /* lane r of sum[t]: row r's running sum, rounded as the reference's */
    __m128 sum[QK_TOKS];
    for (int t = 0; t < nt; t++) sum[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_block(next, i, sizeof(block_iq2_xxs));
        __m256i acc[QK_ROWS][QK_TOKS];
        uint32_t dh[QK_ROWS];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < QK_ROWS; r++) {
            const block_iq2_xxs *b = (const block_iq2_xxs *)(const void *)rows[r] + i;
            const uint8_t *qs = (const uint8_t *)b->qs;
            iq2_sgn sg;
            iq2_signs(qs, &sg);
            dh[r] = quant_rd16(&b->d);
            for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int g = 0; g < 8; g++) {
                __m256i mag, sgn, sc;
                iq2_group(qs, &sg, g, &mag, &sgn, &sc);
                for (int t = 0; t < nt; t++) {
                    __m256i q8 = _mm256_loadu_si256((const __m256i *)(const void *)(act[t][i].qs + 32 * g));
                    acc[r][t] = DOT_S16(acc[r][t], _mm256_maddubs_epi16(mag, _mm256_sign_epi8(q8, sgn)), sc);
                }
            }
        }
        __m128 d4 = _mm_cvtph_ps(QK_F16X4(dh));
        for (int t = 0; t < nt; t++) {
            qk_iq2_block_add(&sum[t], d4, act[t][i].d, hsum4x256(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
        }
    }
    qk_tile_out(sum, nt, 0.125f, out);
}

/* ---- Q2_K ------------------------------------------------------------------- */

typedef struct {
    __m256i w[8];   /* [4h + k]: q of elements 128h + 32k … +31, times its scale where Q2K_SCALED */
    __m256i scw[8]; /* their scales as words (unused where Q2K_SCALED) */
    __m256i mins; /* scale >> 4 as words */
    float d, dmin;
} q2k_dec;

static inline QK_TGT void q2k_decode(const block_q2_K *b, q2k_dec *s)
{
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    __m256i lo = _mm256_broadcastsi128_si256(_mm_and_si128(sc, _mm_set1_epi8(15)));
    /* vpshufb controls putting sub-block 2k's scale in every word of the low
     * lane and 2k+1's in the high lane */
    const __m256i ctl0 = _mm256_setr_epi32((int)0x80008000u, (int)0x80008000u, (int)0x80008000u, (int)0x80008000u,
                                           (int)0x80018001u, (int)0x80018001u, (int)0x80018001u, (int)0x80018001u);
    const __m256i three = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * h));
        for (int k = 0; k < 4; k++) {
            int sub = 8 * h + 2 * k;
            __m256i scw = _mm256_shuffle_epi8(lo, _mm256_add_epi32(ctl0, _mm256_set1_epi32(sub * 0x00010001)));
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three);
            s->w[4 * h + k] = Q2K_SCALED ? _mm256_mullo_epi16(v, scw) : v;
            s->scw[4 * h + k] = scw;
        }
    }
    s->mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_andnot_si128(_mm_set1_epi8(15), sc), 4));
    s->d = _cvtsh_ss(quant_rd16(&b->d));
    s->dmin = _cvtsh_ss(quant_rd16(&b->dmin));
}

static inline QK_TGT __attribute__((always_inline)) void
q2k_tile(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, const int nt,
         int64_t nb, float out[QK_ROWS][QK_TOKS])
{
    __m128 sum[QK_TOKS];
    for (int t = 0; t < nt; t++) sum[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_block(next, i, sizeof(block_q2_K));
        __m256i acc[QK_ROWS][QK_TOKS], accm[QK_ROWS][QK_TOKS];
        uint32_t dh[QK_ROWS];
        /* each quarter of a row's quants multiplied into the tokens as soon
         * as it is decoded (as q2k_decode does it), in registers */
        const __m256i ctl0 = _mm256_setr_epi32((int)0x80008000u, (int)0x80008000u, (int)0x80008000u, (int)0x80008000u,
                                               (int)0x80018001u, (int)0x80018001u, (int)0x80018001u, (int)0x80018001u);
        const __m256i three = _mm256_set1_epi8(3);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < QK_ROWS; r++) {
            const block_q2_K *b = (const block_q2_K *)(const void *)rows[r] + i;
            __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
            __m256i lo = _mm256_broadcastsi128_si256(_mm_and_si128(sc, _mm_set1_epi8(15)));
            __m256i mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_andnot_si128(_mm_set1_epi8(15), sc), 4));
            /* d and dmin side by side: one conversion for both */
            dh[r] = quant_rd16(&b->d) | (uint32_t)quant_rd16(&b->dmin) << 16;
            for (int t = 0; t < nt; t++) acc[r][t] = _mm256_setzero_si256();
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * h));
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) {
                    int sub = 8 * h + 2 * k;
                    __m256i scw = _mm256_shuffle_epi8(lo, _mm256_add_epi32(ctl0, _mm256_set1_epi32(sub * 0x00010001)));
                    __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three);
                    __m256i w = Q2K_SCALED ? _mm256_mullo_epi16(v, scw) : v;
                    for (int t = 0; t < nt; t++) {
                        __m256i q8 = _mm256_loadu_si256((const __m256i *)(const void *)(act[t][i].qs + 128 * h + 32 * k));
                        acc[r][t] = DOT_Q2K(acc[r][t], w, scw, q8);
                    }
                }
            }
            for (int t = 0; t < nt; t++)
                accm[r][t] = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)(const void *)act[t][i].bsums));
        }
        __m256 dd = _mm256_cvtph_ps(QK_F16X8(dh));
        __m128 d4 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
        __m128 m4 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(1, 3, 5, 7, 0, 0, 0, 0)));
        for (int t = 0; t < nt; t++) {
            qk_q2k_block_add(&sum[t], d4, m4, act[t][i].d, hsum4x256(acc[0][t], acc[1][t], acc[2][t], acc[3][t]),
                             hsum4x256(accm[0][t], accm[1][t], accm[2][t], accm[3][t]));
        }
    }
    qk_tile_out(sum, nt, 1.0f, out);
}

/* ---- panels (prefill) ------------------------------------------------------------ */

/* Sixteen rows' 256 weight bytes each, in element order, into a panel's w:
 * every 8 × 8 dword square transposed so that each half of a panel vector
 * holds one dword of eight rows. */
static inline QK_TGT void panel_transpose(const uint8_t (*tmp)[QK_K], qk_panel *P)
{
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 8; c++) {
            __m256i v[8], t[8], u[8];
            for (int r = 0; r < 8; r++) v[r] = _mm256_load_si256((const __m256i *)(const void *)(tmp[8 * h + r] + 32 * c));
            for (int k = 0; k < 4; k++) {
                t[2 * k] = _mm256_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
                t[2 * k + 1] = _mm256_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
            }
            /* u[4g + k], 128-bit lane L: element 4L + k of rows 4g … 4g+3 */
            for (int g = 0; g < 2; g++) {
                u[4 * g] = _mm256_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
                u[4 * g + 1] = _mm256_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
                u[4 * g + 2] = _mm256_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
                u[4 * g + 3] = _mm256_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
            }
            for (int k = 0; k < 4; k++) {
                _mm256_store_si256((__m256i *)(void *)P->w[8 * c + k][8 * h], _mm256_permute2x128_si256(u[k], u[4 + k], 0x20));
                _mm256_store_si256((__m256i *)(void *)P->w[8 * c + 4 + k][8 * h],
                                   _mm256_permute2x128_si256(u[k], u[4 + k], 0x31));
            }
        }
}

/* Block i of the panel's rows, each decoded as the tiles do (Q2_K quants
 * scaled here where the tiles leave it to vpmaddwd). */
static inline QK_TGT void q2k_panel_block(const uint8_t *const *rows, int64_t i, qk_panel *P)
{
    _Alignas(32) uint8_t tmp[QK_PANEL_ROWS][QK_K];
    _Alignas(32) uint16_t mins[QK_PANEL_ROWS][16];
    for (int r = 0; r < QK_PANEL_ROWS; r++) {
        q2k_dec s;
        q2k_decode((const block_q2_K *)(const void *)rows[r] + i, &s);
        for (int j = 0; j < 8; j++)
            _mm256_store_si256((__m256i *)(void *)(tmp[r] + 32 * j),
                               Q2K_SCALED ? s.w[j] : _mm256_mullo_epi16(s.w[j], s.scw[j]));
        _mm256_store_si256((__m256i *)(void *)mins[r], s.mins);
        P->d[r] = s.d;
        P->dmin[r] = s.dmin;
    }
    panel_transpose((const uint8_t(*)[QK_K])tmp, P);
    for (int p = 0; p < 8; p++)
        for (int r = 0; r < QK_PANEL_ROWS; r++) P->m[p][r] = mins[r][2 * p] | (uint32_t)mins[r][2 * p + 1] << 16;
}

static inline QK_TGT void iq2_panel_block(const uint8_t *const *rows, int64_t i, qk_panel *P)
{
    _Alignas(32) uint8_t tmp[QK_PANEL_ROWS][QK_K];
    const __m256i off = _mm256_set1_epi8(64);
    for (int r = 0; r < QK_PANEL_ROWS; r++) {
        const block_iq2_xxs *b = (const block_iq2_xxs *)(const void *)rows[r] + i;
        iq2_dec s;
        iq2_decode(b, &s);
        for (int g = 0; g < 8; g++) {
            __m256i w = _mm256_add_epi8(_mm256_sign_epi8(s.mag[g], s.sgn[g]), off);
            _mm256_store_si256((__m256i *)(void *)(tmp[r] + 32 * g), w);
            int32_t ls = 2 * (int32_t)(quant_rd32((const uint8_t *)b->qs + 8 * g + 4) >> 28) + 1;
            P->sc[g][r] = ls;
            P->m[g][r] = (uint32_t)ls | (uint32_t)ls << 16;
        }
        P->d[r] = s.d;
    }
    panel_transpose((const uint8_t(*)[QK_K])tmp, P);
}

/* The token loops unrolled, so that the accumulators stay in registers. */
#define QK_UNROLL _Pragma("GCC unroll 16")

enum { PANEL_TOKS = 4 };

/* PANEL_TOKS tokens (a short tile repeats its last token) over all nb
 * blocks of the panel, its two halves (rows 0-7, 8-15) side by side.
 * Without VNNI two vpmaddubsw pair sums (each at most 2 · 45 · 128) add
 * in 16 bits before vpmaddwd widens them. */
static inline QK_TGT void q2k_panel_tokens(const qk_panel *P, int64_t nb, const block_q8_K *const *a, int nt,
                                           float *const *y, int64_t r0, int nr)
{
    __m256 sum[PANEL_TOKS][2];
    QK_UNROLL
    for (int t = 0; t < PANEL_TOKS; t++) sum[t][0] = sum[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, P++) {
        __m256i acc[PANEL_TOKS][2], accm[PANEL_TOKS][2];
        const int8_t *q[PANEL_TOKS];
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            acc[t][0] = acc[t][1] = accm[t][0] = accm[t][1] = _mm256_setzero_si256();
            q[t] = a[t][i].qs;
        }
#if QK_VNNI
        _Pragma("GCC unroll 8")
        for (int k = 0; k < QK_K / 4; k++) {
            __m256i w0 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][0]);
            __m256i w1 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][8]);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                __m256i b = _mm256_set1_epi32((int)quant_rd32(q[t] + 4 * k));
                acc[t][0] = QK_DPBUSD(acc[t][0], w0, b);
                acc[t][1] = QK_DPBUSD(acc[t][1], w1, b);
            }
        }
#else
        const __m256i ones = _mm256_set1_epi16(1);
        _Pragma("GCC unroll 4")
        for (int k = 0; k < QK_K / 4; k += 2) {
            __m256i w0 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][0]);
            __m256i w1 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][8]);
            __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)P->w[k + 1][0]);
            __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)P->w[k + 1][8]);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                __m256i b = _mm256_set1_epi32((int)quant_rd32(q[t] + 4 * k));
                __m256i c = _mm256_set1_epi32((int)quant_rd32(q[t] + 4 * k + 4));
                __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, b), _mm256_maddubs_epi16(x0, c));
                __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(w1, b), _mm256_maddubs_epi16(x1, c));
                acc[t][0] = _mm256_add_epi32(acc[t][0], _mm256_madd_epi16(p0, ones));
                acc[t][1] = _mm256_add_epi32(acc[t][1], _mm256_madd_epi16(p1, ones));
            }
        }
#endif
        for (int p = 0; p < 8; p++) {
            __m256i m0 = _mm256_load_si256((const __m256i *)(const void *)P->m[p]);
            __m256i m1 = _mm256_load_si256((const __m256i *)(const void *)(P->m[p] + 8));
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                __m256i b = _mm256_set1_epi32((int)quant_rd32(a[t][i].bsums + 2 * p));
                accm[t][0] = DOT_S16(accm[t][0], m0, b);
                accm[t][1] = DOT_S16(accm[t][1], m1, b);
            }
        }
        QK_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256 d = _mm256_load_ps(P->d + 8 * h), dm = _mm256_load_ps(P->dmin + 8 * h);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                __m256 ad = _mm256_set1_ps(a[t][i].d);
                /* dall·isum − dmin·summs, as the reference rounds it */
                __m256 f = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(ad, d), _mm256_cvtepi32_ps(acc[t][h])),
                                         _mm256_mul_ps(_mm256_mul_ps(ad, dm), _mm256_cvtepi32_ps(accm[t][h])));
                sum[t][h] = _mm256_add_ps(sum[t][h], f);
            }
        }
    }
    for (int t = 0; t < nt; t++) {
        _Alignas(32) float v[QK_PANEL_ROWS];
        _mm256_store_ps(v, sum[t][0]);
        _mm256_store_ps(v + 8, sum[t][1]);
        memcpy(y[t] + r0, v, sizeof(float) * (size_t)nr);
    }
}

/* Four elements of a panel's two halves times a token's four activation
 * bytes b, into acc[0] and acc[1] (without VNNI: vpmaddubsw, whose pair
 * sums of 107 · 128 · 2 do not saturate, then vpmaddwd). */
#if QK_VNNI
#define PANEL_DOT4(acc, w0, w1, b)                                                                       \
    do {                                                                                                 \
        (acc)[0] = QK_DPBUSD((acc)[0], w0, b);                                                           \
        (acc)[1] = QK_DPBUSD((acc)[1], w1, b);                                                           \
    } while (0)
#else
#define PANEL_DOT4(acc, w0, w1, b)                                                                       \
    do {                                                                                                 \
        (acc)[0] = _mm256_add_epi32((acc)[0], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, b), ones));     \
        (acc)[1] = _mm256_add_epi32((acc)[1], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, b), ones));     \
    } while (0)
#endif

/* The same for an IQ2_XXS panel: per group, eight dot steps per token
 * into a group sum, which its scale multiplies (vpmulld) into the
 * block's. */
static inline QK_TGT void iq2_panel_tokens(const qk_panel *P, int64_t nb, const block_q8_K *const *a, int nt,
                                           float *const *y, int64_t r0, int nr)
{
#if !QK_VNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 sum[PANEL_TOKS][2];
    QK_UNROLL
    for (int t = 0; t < PANEL_TOKS; t++) sum[t][0] = sum[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, P++) {
        __m256i tot[PANEL_TOKS][2], corr[PANEL_TOKS][2];
        const int8_t *q[PANEL_TOKS];
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            tot[t][0] = tot[t][1] = corr[t][0] = corr[t][1] = _mm256_setzero_si256();
            q[t] = a[t][i].qs;
        }
        for (int g = 0; g < 8; g++) {
            __m256i acc[PANEL_TOKS][2];
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) acc[t][0] = acc[t][1] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int k = 8 * g; k < 8 * g + 8; k++) {
                __m256i w0 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][0]);
                __m256i w1 = _mm256_load_si256((const __m256i *)(const void *)P->w[k][8]);
                QK_UNROLL
                for (int t = 0; t < PANEL_TOKS; t++) {
                    __m256i b = _mm256_set1_epi32((int)quant_rd32(q[t] + 4 * k));
                    PANEL_DOT4(acc[t], w0, w1, b);
                }
            }
            QK_UNROLL
            for (int h = 0; h < 2; h++) {
                __m256i sc = _mm256_load_si256((const __m256i *)(const void *)(P->sc[g] + 8 * h));
                __m256i mv = _mm256_load_si256((const __m256i *)(const void *)(P->m[g] + 8 * h));
                QK_UNROLL
                for (int t = 0; t < PANEL_TOKS; t++) {
                    __m256i bs = _mm256_set1_epi32((int)quant_rd32(a[t][i].bsums + 2 * g));
                    tot[t][h] = _mm256_add_epi32(tot[t][h], _mm256_mullo_epi32(acc[t][h], sc));
                    corr[t][h] = DOT_S16(corr[t][h], mv, bs);
                }
            }
        }
        QK_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256 d = _mm256_load_ps(P->d + 8 * h);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                __m256i is = _mm256_sub_epi32(tot[t][h], _mm256_slli_epi32(corr[t][h], 6));
                __m256 f = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a[t][i].d)), _mm256_cvtepi32_ps(is));
                sum[t][h] = _mm256_add_ps(sum[t][h], f);
            }
        }
    }
    const __m256 eighth = _mm256_set1_ps(0.125f);
    for (int t = 0; t < nt; t++) {
        _Alignas(32) float v[QK_PANEL_ROWS];
        _mm256_store_ps(v, _mm256_mul_ps(eighth, sum[t][0]));
        _mm256_store_ps(v + 8, _mm256_mul_ps(eighth, sum[t][1]));
        memcpy(y[t] + r0, v, sizeof(float) * (size_t)nr);
    }
}

QK_PANEL_FN(q2k_panel, q2k_panel_block, q2k_panel_tokens)
QK_PANEL_FN(iq2_panel, iq2_panel_block, iq2_panel_tokens)

/* ---- fixed token counts --------------------------------------------------------- */

QK_FIXED(iq2_tile, 1)
QK_FIXED(iq2_tile, 2)
QK_FIXED(iq2_tile, 3)
QK_FIXED(iq2_tile, 4)
QK_FIXED(q2k_tile, 1)
QK_FIXED(q2k_tile, 2)
QK_FIXED(q2k_tile, 3)
QK_FIXED(q2k_tile, 4)

QK_KERNEL_FN(iq2_kernel, iq2_tile_1, iq2_tile_2, iq2_tile_3, iq2_tile_4)
QK_KERNEL_FN(q2k_kernel, q2k_tile_1, q2k_tile_2, q2k_tile_3, q2k_tile_4)

const qk_kernels QK_NAME = { iq2_kernel, q2k_kernel, iq2_panel, q2k_panel };
