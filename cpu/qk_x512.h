/* qk_x512.h — the 512-bit integer 2-bit kernels, included once per
 * AVX-512 level by qk_avx512vbmi.c and qk_avx512.c, which define
 *   QK_TGT   the function attribute naming the level's instructions,
 *   QK_VBMI  1 where vpermi2b / vpmultishiftqb may be used,
 *   QK_NAME  the kernel table's name.
 *
 * IQ2_XXS: a block's eight groups are eight qwords (four grid indices,
 * then four 7-bit sign selectors and a 4-bit scale). The 32 grid rows
 * become unsigned magnitudes 8/25/43, two groups per vector: with VBMI
 * looked up as 2-bit codes and spread (iq2_magnitudes), without loaded
 * from the grid table (iq2_grid4m); the sign bits become a 64-bit mask
 * that negates the matching activation bytes, and vpmaddubsw + vpdpwssd sum
 * magnitude × signed activation pairs weighted by the group scale 2·ls+1.
 * With more than one token the magnitudes are signed once per row
 * instead, and the activations, made unsigned (q8 + 128), are shared by the
 * rows.
 * Q2_K: each 32-byte half of the quants, broadcast to both halves of a
 * vector and shifted per half (vpsrlvw), gives 64 consecutive 2-bit quants;
 * multiplied by their 4-bit sub-block scale (≤ 45, still a byte) they feed
 * vpdpbusd directly against 64 contiguous activation bytes, and the
 * minimums go through the activation's bsums.
 * From eight tokens on (both formats), 16 rows at a time are decoded once
 * into a panel (qk_impl.h) and eight tokens a pass multiplied from it, one
 * vpdpbusd per four elements, row and token, with no horizontal sums.
 */
#include <immintrin.h>
#include <string.h>

#include "cpu/qk_impl.h"
#include "cpu/qk_tile.h"
#include "engine/quant_impl.h"

/* The sums of four vectors' lanes, [a, b, c, d]. */
static inline QK_TGT __m128i hsum4x512(__m512i a, __m512i b, __m512i c, __m512i d)
{
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
    __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* ---- IQ2_XXS ------------------------------------------------------------------ */

typedef struct {
    __m512i mag[4];  /* grid magnitudes of groups 2p, 2p+1 */
    __m512i sc[4];   /* 2·ls+1 as words: group 2p in the low half, 2p+1 in the high */
    __mmask64 neg[4]; /* negated elements of groups 2p, 2p+1 */
    uint16_t d;      /* the block's scale, f16 */
} iq2_dec;

/* The sign bytes of the eight groups (byte 4g+k: selector k of group g
 * with its parity as bit 7), 32 bytes. */
static inline QK_TGT __m256i iq2_sign_bytes(__m512i q)
{
#if QK_VBMI
    /* bytes 0..3 of each qword: the selectors at bits 32, 39, 46, 53; the
     * 128-entry ksigns table is two registers for vpermi2b */
    __m512i sel = _mm512_multishift_epi64_epi8(_mm512_set1_epi64(0x352E2720), q);
    __m512i ks_lo = _mm512_loadu_si512(quant_ksigns_iq2xs), ks_hi = _mm512_loadu_si512(quant_ksigns_iq2xs + 64);
    __m512i sb = _mm512_permutex2var_epi8(ks_lo, sel, ks_hi);
    static const uint8_t pick[64] = { 0,  1,  2,  3,  8,  9,  10, 11, 16, 17, 18, 19, 24, 25, 26, 27,
                                      32, 33, 34, 35, 40, 41, 42, 43, 48, 49, 50, 51, 56, 57, 58, 59 };
    return _mm512_castsi512_si256(_mm512_permutexvar_epi8(_mm512_loadu_si512(pick), sb));
#else
    /* each group's sign word to four dword lanes, shifted to its selectors
     * and packed to bytes; then the parity of all 32 at once, from a
     * nibble table */
    const __m512i shifts = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
    const __m256i par = _mm256_broadcastsi128_si256(_mm_set_epi64x(0x0080800080000080ll, (long long)0x8000008000808000ull));
    const __m256i m7 = _mm256_set1_epi8(127), m15 = _mm256_set1_epi8(15);
    __m512i a = _mm512_permutexvar_epi32(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), q);
    __m512i b = _mm512_permutexvar_epi32(_mm512_setr_epi32(9, 9, 9, 9, 11, 11, 11, 11, 13, 13, 13, 13, 15, 15, 15, 15), q);
    __m256i sel = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(_mm512_srlv_epi32(a, shifts))),
                                          _mm512_cvtepi32_epi8(_mm512_srlv_epi32(b, shifts)), 1);
    sel = _mm256_and_si256(sel, m7);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(sel, 4), m15);
    return _mm256_or_si256(sel, _mm256_xor_si256(_mm256_shuffle_epi8(par, _mm256_and_si256(sel, m15)),
                                                 _mm256_shuffle_epi8(par, hi)));
#endif
}

#if QK_VBMI
/* The magnitudes of a block's 32 grid rows, two groups per vector. Each
 * grid row is 8 two-bit codes (qk_grid_codes): the 32 codes words are
 * looked up four 64-entry tables at a time (vpermi2w, the index's two top
 * bits choosing among them), then spread to one code per byte and mapped
 * to 8, 25 or 43 (vpermb, vpmultishiftqb). */
static inline QK_TGT void iq2_magnitudes(__m256i idx32, const uint16_t *codes, __m512i mag[4])
{
    const __m512i *t = (const __m512i *)(const void *)codes;
    __m512i iw = _mm512_cvtepu8_epi16(idx32);
    __m512i r0 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t), iw, _mm512_loadu_si512(t + 1));
    __m512i r1 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 2), iw, _mm512_loadu_si512(t + 3));
    __m512i r2 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 4), iw, _mm512_loadu_si512(t + 5));
    __m512i r3 = _mm512_permutex2var_epi16(_mm512_loadu_si512(t + 6), iw, _mm512_loadu_si512(t + 7));
    __mmask32 b6 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(0x40));
    __mmask32 b7 = _mm512_test_epi16_mask(iw, _mm512_set1_epi16(0x80));
    __m512i c = _mm512_mask_blend_epi16(b7, _mm512_mask_blend_epi16(b6, r0, r1), _mm512_mask_blend_epi16(b6, r2, r3));
    /* qsel word 4q + k: q (every word of qword q of a spread reads code word q) */
    const __m512i qsel = _mm512_srli_epi16(
        _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7,
                         6, 5, 4, 3, 2, 1, 0),
        2);
    /* byte j of a qword: bits 2j.. of its code word (copied to every word of
     * it); vpermb reads 6 bits, so the table repeats the three magnitudes
     * every four entries */
    const __m512i ctl = _mm512_set1_epi64(0x0e0c0a0806040200ll);
    const __m512i lut = _mm512_set4_epi32(0x002b1908, 0x002b1908, 0x002b1908, 0x002b1908);
#define IQ2_SPREAD(P)                                                                                          \
    mag[P] = _mm512_permutexvar_epi8(                                                                          \
        _mm512_multishift_epi64_epi8(ctl, _mm512_permutexvar_epi16(_mm512_add_epi16(qsel, _mm512_set1_epi16(8 * (P))), c)), lut)
    IQ2_SPREAD(0);
    IQ2_SPREAD(1);
    IQ2_SPREAD(2);
    IQ2_SPREAD(3);
#undef IQ2_SPREAD
}

#else
/* Without VBMI, each group's four grid rows are loaded from the 2 KB
 * table (it stays in L1): a 64-bit load and three masked broadcast
 * loads. The code lookup's vpermw and vpermt2w are two to three port-5
 * uops each on Skylake-SP, the CPUs this level is for, where these loads
 * cost a load port and a p05 merge. Masked broadcasts rather than the
 * vpblendd of qk_x256.h's iq2_grid4: vpblendd has no EVEX form, and GCC,
 * putting the broadcasts in the upper 16 registers, copies each back. */
static inline QK_TGT __attribute__((always_inline)) __m256i iq2_grid4m(const uint8_t *q)
{
    const long long *grid = (const long long *)(const void *)quant_iq2xxs_grid;
    __m256i a = _mm256_castsi128_si256(_mm_loadl_epi64((const __m128i *)(const void *)(grid + q[0])));
    a = _mm256_mask_set1_epi64(a, 0x2, grid[q[1]]);
    a = _mm256_mask_set1_epi64(a, 0x4, grid[q[2]]);
    return _mm256_mask_set1_epi64(a, 0x8, grid[q[3]]);
}
#endif

/* A block's scales (q: its eight group qwords): sc[p] holds 2·ls+1 of
 * group 2p in every word of its low half and of group 2p + 1 in the high. */
static inline QK_TGT __attribute__((always_inline)) void iq2_scales(__m512i q, __m512i sc[4])
{
    __m512i ls = _mm512_add_epi64(_mm512_slli_epi64(_mm512_srli_epi64(q, 60), 1), _mm512_set1_epi64(1));
    ls = _mm512_shuffle_epi8(ls, _mm512_set4_epi32(0x09080908, 0x09080908, 0x01000100, 0x01000100));
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++)
        sc[p] = _mm512_permutexvar_epi64(_mm512_setr_epi64(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                                           2 * p + 1), ls);
}

static inline QK_TGT __attribute__((always_inline)) void iq2_decode(const block_iq2_xxs *b, const uint16_t *codes, iq2_dec *s)
{
    __m512i q = _mm512_loadu_si512(b->qs);
    /* the sign masks straight from the vector (through memory, they cost a
     * store-forwarding stall a block) */
    __m256i sb = iq2_sign_bytes(q);
    __m128i sb0 = _mm256_castsi256_si128(sb), sb1 = _mm256_extracti128_si256(sb, 1);
    s->neg[0] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(sb0));
    s->neg[1] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(sb0, 1));
    s->neg[2] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(sb1));
    s->neg[3] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(sb1, 1));
#if QK_VBMI
    /* the 32 grid indices, four per qword, in order */
    const __m512i pick_idx = _mm512_set4_epi32(-1, -1, 0x0b0a0908, 0x03020100);
    __m512i idx = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_shuffle_epi8(q, pick_idx));
    iq2_magnitudes(_mm512_castsi512_si256(idx), codes, s->mag);
#else
    (void)codes;
    const uint8_t *qs = (const uint8_t *)b->qs;
    _Pragma("GCC unroll 4")
    for (int p = 0; p < 4; p++)
        s->mag[p] = _mm512_inserti64x4(_mm512_castsi256_si512(iq2_grid4m(qs + 16 * p)), iq2_grid4m(qs + 16 * p + 8), 1);
#endif
    iq2_scales(q, s->sc);
    s->d = quant_rd16(&b->d);
}

#if QK_VBMI
/* Two rows' blocks decoded together: the two rows' 64 grid indices and 64
 * sign selectors each fill one vector, so the code lookup (bytes: two
 * 128-entry vpermi2b tables per half of the code words, the index's top
 * bit choosing) and the ksigns lookup are done once for both. Row u's
 * vector p then gathers, into qword k, the low and high code bytes of its
 * grid row 8p + k, which vpmultishiftqb spreads as iq2_magnitudes does. */
static inline QK_TGT __attribute__((always_inline)) void iq2_decode2(const block_iq2_xxs *ba, const block_iq2_xxs *bb,
                                                                     const uint8_t *cb, iq2_dec s[2])
{
    __m512i qa = _mm512_loadu_si512(ba->qs), qb = _mm512_loadu_si512(bb->qs);
    /* byte j < 32: byte 8(j / 4) + j % 4 of qa (row a's j-th index or
     * selector), byte 32 + j: the same of qb */
    const __m512i pick = _mm512_set_epi8(123, 122, 121, 120, 115, 114, 113, 112, 107, 106, 105, 104, 99, 98, 97, 96, 91,
                                         90, 89, 88, 83, 82, 81, 80, 75, 74, 73, 72, 67, 66, 65, 64, 59, 58, 57, 56, 51,
                                         50, 49, 48, 43, 42, 41, 40, 35, 34, 33, 32, 27, 26, 25, 24, 19, 18, 17, 16, 11,
                                         10, 9, 8, 3, 2, 1, 0);
    const __m512i at = _mm512_set1_epi64(0x352E2720);
    __m512i sel = _mm512_permutex2var_epi8(_mm512_multishift_epi64_epi8(at, qa), pick, _mm512_multishift_epi64_epi8(at, qb));
    __m512i sgn = _mm512_permutex2var_epi8(_mm512_loadu_si512(quant_ksigns_iq2xs), sel,
                                           _mm512_loadu_si512(quant_ksigns_iq2xs + 64));
    /* written out: the lane is an immediate, which a loop gives only once
     * unrolled (not at -O1), and an array of the lanes went through memory */
    __m128i x0 = _mm512_castsi512_si128(sgn), x1 = _mm512_extracti32x4_epi32(sgn, 1);
    __m128i x2 = _mm512_extracti32x4_epi32(sgn, 2), x3 = _mm512_extracti32x4_epi32(sgn, 3);
    s[0].neg[0] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(x0));
    s[0].neg[1] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(x0, 1));
    s[0].neg[2] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(x1));
    s[0].neg[3] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(x1, 1));
    s[1].neg[0] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(x2));
    s[1].neg[1] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(x2, 1));
    s[1].neg[2] = _cvtu64_mask64((uint64_t)_mm_cvtsi128_si64(x3));
    s[1].neg[3] = _cvtu64_mask64((uint64_t)_mm_extract_epi64(x3, 1));
    __m512i idx = _mm512_permutex2var_epi8(qa, pick, qb);
    __mmask64 top = _mm512_movepi8_mask(idx);
    const __m512i *t = (const __m512i *)(const void *)cb;
    __m512i lo = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(_mm512_load_si512(t), idx, _mm512_load_si512(t + 1)),
                                        _mm512_permutex2var_epi8(_mm512_load_si512(t + 2), idx, _mm512_load_si512(t + 3)));
    __m512i hi = _mm512_mask_blend_epi8(top, _mm512_permutex2var_epi8(_mm512_load_si512(t + 4), idx, _mm512_load_si512(t + 5)),
                                        _mm512_permutex2var_epi8(_mm512_load_si512(t + 6), idx, _mm512_load_si512(t + 7)));
    /* qword k: byte 0 the low code byte of grid row k, byte 1 its high one */
    const __m512i spread = _mm512_set1_epi64(0x4000);
    const __m512i row = _mm512_set_epi64(0x0707, 0x0606, 0x0505, 0x0404, 0x0303, 0x0202, 0x0101, 0);
    const __m512i ctl = _mm512_set1_epi64(0x0e0c0a0806040200ll);
    const __m512i lut = _mm512_set4_epi32(0x002b1908, 0x002b1908, 0x002b1908, 0x002b1908);
    _Pragma("GCC unroll 2")
    for (int u = 0; u < 2; u++) {
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 4; p++) {
            __m512i sp = _mm512_add_epi8(_mm512_add_epi8(spread, row), _mm512_set1_epi16((short)((32 * u + 8 * p) * 0x0101)));
            __m512i w = _mm512_permutex2var_epi8(lo, sp, hi);
            s[u].mag[p] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(ctl, w), lut);
        }
        iq2_scales(u ? qb : qa, s[u].sc);
    }
    s[0].d = quant_rd16(&ba->d);
    s[1].d = quant_rd16(&bb->d);
}
#define IQ2_PAIR 2
#else
#define IQ2_PAIR 1
#endif

/* Decodes block i of rows r … r + IQ2_PAIR − 1 into s (cb: with VBMI,
 * qk_grid_code_bytes(), fetched once per tile: a call in the block loop
 * costs a vzeroupper and the reload of every constant it clobbered). */
static inline QK_TGT __attribute__((always_inline)) void iq2_decode_rows(const uint8_t *const *rows, int r, int64_t i,
                                                                         const uint8_t *cb, iq2_dec s[IQ2_PAIR])
{
#if QK_VBMI
    iq2_decode2((const block_iq2_xxs *)(const void *)rows[r] + i, (const block_iq2_xxs *)(const void *)rows[r + 1] + i,
                cb, s);
#else
    (void)cb;
    iq2_decode((const block_iq2_xxs *)(const void *)rows[r] + i, NULL, s);
#endif
}

/* Row s's block sums against the tile's tokens, into acc[t].
 * One token (many = 0): the sign bits negate the activation bytes, which
 * vpmaddubsw multiplies by the unsigned magnitudes. More tokens: the
 * row's magnitudes are signed once instead, and the activations enter
 * vpmaddubsw as its unsigned operand, q8 + 128 (au, made once per token
 * for the four rows); the 128·Σ(2·ls+1)·w that this adds to the block sum
 * is subtracted up front, so the integers are the same. */
static inline QK_TGT __attribute__((always_inline)) void iq2_row_sums(const iq2_dec *s, const block_q8_K *const *act,
                                                                      int64_t i, int nt, int many,
                                                                      const __m512i au[QK_TOKS][4], __m512i acc[QK_TOKS])
{
    if (!many) {
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = act[t] + i;
            __m512i ac = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                __m512i q8 = _mm512_loadu_si512(a->qs + 64 * p);
                q8 = _mm512_mask_sub_epi8(q8, s->neg[p], _mm512_setzero_si512(), q8);
                ac = _mm512_dpwssd_epi32(ac, _mm512_maddubs_epi16(s->mag[p], q8), s->sc[p]);
            }
            acc[t] = ac;
        }
        return;
    }
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512i w[4], c = _mm512_setzero_si512();
    for (int p = 0; p < 4; p++) {
        w[p] = _mm512_mask_sub_epi8(s->mag[p], s->neg[p], _mm512_setzero_si512(), s->mag[p]);
        c = _mm512_dpwssd_epi32(c, _mm512_maddubs_epi16(bias, w[p]), s->sc[p]);
    }
    c = _mm512_sub_epi32(_mm512_setzero_si512(), c);
    for (int t = 0; t < nt; t++) {
        __m512i ac = c;
        for (int p = 0; p < 4; p++) ac = _mm512_dpwssd_epi32(ac, _mm512_maddubs_epi16(au[t][p], w[p]), s->sc[p]);
        acc[t] = ac;
    }
}

static inline QK_TGT __attribute__((always_inline)) void
iq2_tile(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, const int nt,
         const int many, int64_t nb, float out[QK_ROWS][QK_TOKS])
{
    /* lane r of sum[t]: row r's running sum, rounded as the reference's */
    __m128 sum[QK_TOKS];
    for (int t = 0; t < nt; t++) sum[t] = _mm_setzero_ps();
    const uint8_t *cb = QK_VBMI ? qk_grid_code_bytes() : NULL;
    for (int64_t i = 0; i < nb; i++) {
        prefetch_block(next, i, sizeof(block_iq2_xxs));
        __m512i au[QK_TOKS][4], acc[QK_ROWS][QK_TOKS];
        if (many)
            for (int t = 0; t < nt; t++)
                for (int p = 0; p < 4; p++)
                    au[t][p] = _mm512_xor_si512(_mm512_loadu_si512(act[t][i].qs + 64 * p), _mm512_set1_epi8((char)0x80));
        uint32_t dh[QK_ROWS];
        _Pragma("GCC unroll 4")
        for (int r0 = 0; r0 < QK_ROWS; r0 += IQ2_PAIR) {
            iq2_dec sp[IQ2_PAIR];
            iq2_decode_rows(rows, r0, i, cb, sp);
            _Pragma("GCC unroll 2")
            for (int u = 0; u < IQ2_PAIR; u++) {
                dh[r0 + u] = sp[u].d;
                iq2_row_sums(&sp[u], act, i, nt, many, au, acc[r0 + u]);
            }
        }
        __m128 d4 = _mm_cvtph_ps(QK_F16X4(dh));
        for (int t = 0; t < nt; t++) {
            qk_iq2_block_add(&sum[t], d4, act[t][i].d, hsum4x512(acc[0][t], acc[1][t], acc[2][t], acc[3][t]));
        }
    }
    qk_tile_out(sum, nt, 0.125f, out);
}

/* ---- Q2_K ------------------------------------------------------------------- */

typedef struct {
    __m512i w[4];  /* q·(scale & 15) of elements 64j … 64j+63 */
    __m256i mins; /* scale >> 4 as words */
    float d, dmin;
} q2k_dec;

static inline QK_TGT void q2k_decode(const block_q2_K *b, q2k_dec *s)
{
    __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
    __m512i lo = _mm512_broadcast_i32x4(_mm_and_si128(sc, _mm_set1_epi8(15)));
    const __m512i three = _mm512_set1_epi8(3);
    /* vpshufb controls putting sub-block 4j + lane's scale in every word of
     * a 16-byte lane (a byte times a word scale ≤ 45 stays in its byte) */
    const __m512i ctl0 = _mm512_setr_epi32((int)0x80008000u, (int)0x80008000u, (int)0x80008000u, (int)0x80008000u,
                                           (int)0x80018001u, (int)0x80018001u, (int)0x80018001u, (int)0x80018001u,
                                           (int)0x80028002u, (int)0x80028002u, (int)0x80028002u, (int)0x80028002u,
                                           (int)0x80038003u, (int)0x80038003u, (int)0x80038003u, (int)0x80038003u);
    for (int h = 0; h < 2; h++) {
        /* elements 128h + 32s + l are bits 2s of byte l of the half's 32 bytes:
         * 64j … 64j+63 are shifts 4jj and 4jj+2 (j = 2h + jj) of both copies */
        __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * h)));
        for (int jj = 0; jj < 2; jj++) {
            int j = 2 * h + jj;
            __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * jj)), _mm256_set1_epi16((short)(4 * jj + 2)), 1);
            __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, cnt), three);
            __m512i scw = _mm512_shuffle_epi8(lo, _mm512_add_epi32(ctl0, _mm512_set1_epi32(4 * j * 0x00010001)));
            s->w[j] = _mm512_mullo_epi16(v, scw);
        }
    }
    s->mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_andnot_si128(_mm_set1_epi8(15), sc), 4));
    s->d = _cvtsh_ss(quant_rd16(&b->d));
    s->dmin = _cvtsh_ss(quant_rd16(&b->dmin));
}

/* Every row's block decoded first, then each token's activations loaded
 * once for the four rows. */
static inline QK_TGT __attribute__((always_inline)) void
q2k_tile(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, const int nt,
         int64_t nb, float out[QK_ROWS][QK_TOKS])
{
    __m128 sum[QK_TOKS];
    for (int t = 0; t < nt; t++) sum[t] = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        prefetch_block(next, i, sizeof(block_q2_K));
        q2k_dec s[QK_ROWS];
        float dw[QK_ROWS], dm[QK_ROWS];
        for (int r = 0; r < QK_ROWS; r++) {
            q2k_decode((const block_q2_K *)(const void *)rows[r] + i, &s[r]);
            dw[r] = s[r].d;
            dm[r] = s[r].dmin;
        }
        __m128 d4 = _mm_loadu_ps(dw), m4 = _mm_loadu_ps(dm);
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = act[t] + i;
            __m512i q8[4], acc[QK_ROWS];
            __m256i accm[QK_ROWS];
            for (int j = 0; j < 4; j++) q8[j] = _mm512_loadu_si512(a->qs + 64 * j);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)a->bsums);
            for (int r = 0; r < QK_ROWS; r++) {
                __m512i ac = _mm512_dpbusd_epi32(_mm512_setzero_si512(), s[r].w[0], q8[0]);
                for (int j = 1; j < 4; j++) ac = _mm512_dpbusd_epi32(ac, s[r].w[j], q8[j]);
                acc[r] = ac;
                accm[r] = _mm256_madd_epi16(s[r].mins, bs);
            }
            qk_q2k_block_add(&sum[t], d4, m4, a->d, hsum4x512(acc[0], acc[1], acc[2], acc[3]),
                             hsum4x256(accm[0], accm[1], accm[2], accm[3]));
        }
    }
    qk_tile_out(sum, nt, 1.0f, out);
}

/* One token: each 64 quants of a row multiplied in as soon as they are
 * decoded (as q2k_decode does it), in registers; with more tokens the
 * decoded rows above share each activation load instead. */
static inline QK_TGT __attribute__((always_inline)) void
q2k_tile_one(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, const int nt,
             int64_t nb, float out[QK_ROWS][QK_TOKS])
{
    (void)nt;
    const block_q8_K *a = act[0];
    __m128 sum = _mm_setzero_ps();
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i ctl0 = _mm512_setr_epi32((int)0x80008000u, (int)0x80008000u, (int)0x80008000u, (int)0x80008000u,
                                           (int)0x80018001u, (int)0x80018001u, (int)0x80018001u, (int)0x80018001u,
                                           (int)0x80028002u, (int)0x80028002u, (int)0x80028002u, (int)0x80028002u,
                                           (int)0x80038003u, (int)0x80038003u, (int)0x80038003u, (int)0x80038003u);
    for (int64_t i = 0; i < nb; i++) {
        prefetch_block(next, i, sizeof(block_q2_K));
        __m512i acc[QK_ROWS];
        __m256i accm[QK_ROWS];
        uint32_t dh[QK_ROWS];
        /* the token's block once for the four rows (its quants straddle
         * cache lines: four loads a row would be eight) */
        __m512i q8[4];
        for (int j = 0; j < 4; j++) q8[j] = _mm512_loadu_si512(a[i].qs + 64 * j);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(const void *)a[i].bsums);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < QK_ROWS; r++) {
            const block_q2_K *b = (const block_q2_K *)(const void *)rows[r] + i;
            __m128i sc = _mm_loadu_si128((const __m128i *)(const void *)b->scales);
            __m512i lo = _mm512_broadcast_i32x4(_mm_and_si128(sc, _mm_set1_epi8(15)));
            __m256i mins = _mm256_cvtepu8_epi16(_mm_srli_epi16(_mm_andnot_si128(_mm_set1_epi8(15), sc), 4));
            /* d and dmin side by side: one conversion for both */
            dh[r] = quant_rd16(&b->d) | (uint32_t)quant_rd16(&b->dmin) << 16;
            __m512i ac2[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * h)));
                _Pragma("GCC unroll 2")
                for (int jj = 0; jj < 2; jj++) {
                    int j = 2 * h + jj;
                    __m512i cnt =
                        _mm512_inserti64x4(_mm512_set1_epi16((short)(4 * jj)), _mm256_set1_epi16((short)(4 * jj + 2)), 1);
                    __m512i v = _mm512_and_si512(_mm512_srlv_epi16(q, cnt), three);
                    __m512i scw = _mm512_shuffle_epi8(lo, _mm512_add_epi32(ctl0, _mm512_set1_epi32(4 * j * 0x00010001)));
                    ac2[jj] = _mm512_dpbusd_epi32(ac2[jj], _mm512_mullo_epi16(v, scw), q8[j]);
                }
            }
            acc[r] = _mm512_add_epi32(ac2[0], ac2[1]);
            accm[r] = _mm256_madd_epi16(mins, bs);
        }
        __m256 dd = _mm256_cvtph_ps(QK_F16X8(dh));
        __m128 d4 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(0, 2, 4, 6, 0, 0, 0, 0)));
        __m128 m4 = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dd, _mm256_setr_epi32(1, 3, 5, 7, 0, 0, 0, 0)));
        qk_q2k_block_add(&sum, d4, m4, a[i].d, hsum4x512(acc[0], acc[1], acc[2], acc[3]),
                         hsum4x256(accm[0], accm[1], accm[2], accm[3]));
    }
    float v[4];
    _mm_storeu_ps(v, sum);
    for (int r = 0; r < QK_ROWS; r++) out[r][0] = v[r];
}

/* ---- panels (prefill) ------------------------------------------------------------ */

/* Sixteen rows' 256 weight bytes each, in element order, into a panel's w:
 * every 16 × 16 dword square transposed so that a vector holds one dword
 * of each row. */
static inline QK_TGT void panel_transpose(const uint8_t (*tmp)[QK_K], qk_panel *P)
{
    for (int c = 0; c < 4; c++) {
        __m512i v[16], t[16], u[16];
        for (int r = 0; r < 16; r++) v[r] = _mm512_load_si512(tmp[r] + 64 * c);
        for (int k = 0; k < 8; k++) {
            t[2 * k] = _mm512_unpacklo_epi32(v[2 * k], v[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_epi32(v[2 * k], v[2 * k + 1]);
        }
        /* u[4g + k], 128-bit lane L: element 4L + k of rows 4g … 4g+3 */
        for (int g = 0; g < 4; g++) {
            u[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
            u[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
            u[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
            u[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
        }
        /* then the 4 × 4 transpose of the lanes */
        for (int k = 0; k < 4; k++) {
            __m512i x0 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0x44), x1 = _mm512_shuffle_i32x4(u[k], u[4 + k], 0xee);
            __m512i y0 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0x44);
            __m512i y1 = _mm512_shuffle_i32x4(u[8 + k], u[12 + k], 0xee);
            _mm512_store_si512(P->w[16 * c + k], _mm512_shuffle_i32x4(x0, y0, 0x88));
            _mm512_store_si512(P->w[16 * c + 4 + k], _mm512_shuffle_i32x4(x0, y0, 0xdd));
            _mm512_store_si512(P->w[16 * c + 8 + k], _mm512_shuffle_i32x4(x1, y1, 0x88));
            _mm512_store_si512(P->w[16 * c + 12 + k], _mm512_shuffle_i32x4(x1, y1, 0xdd));
        }
    }
}

/* Block i of the panel's rows, each decoded as the tiles do. */
static inline QK_TGT void q2k_panel_block(const uint8_t *const *rows, int64_t i, qk_panel *P)
{
    _Alignas(64) uint8_t tmp[QK_PANEL_ROWS][QK_K];
    _Alignas(32) uint16_t mins[QK_PANEL_ROWS][16];
    for (int r = 0; r < QK_PANEL_ROWS; r++) {
        q2k_dec s;
        q2k_decode((const block_q2_K *)(const void *)rows[r] + i, &s);
        for (int j = 0; j < 4; j++) _mm512_store_si512(tmp[r] + 64 * j, s.w[j]);
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
    const uint16_t *codes = QK_VBMI ? qk_grid_codes() : NULL; /* without VBMI, the grid rows are loaded */
    _Alignas(64) uint8_t tmp[QK_PANEL_ROWS][QK_K];
    const __m512i off = _mm512_set1_epi8(64);
    for (int r = 0; r < QK_PANEL_ROWS; r++) {
        const block_iq2_xxs *b = (const block_iq2_xxs *)(const void *)rows[r] + i;
        iq2_dec s;
        iq2_decode(b, codes, &s);
        for (int p = 0; p < 4; p++) {
            __m512i w = _mm512_mask_sub_epi8(s.mag[p], s.neg[p], _mm512_setzero_si512(), s.mag[p]);
            _mm512_store_si512(tmp[r] + 64 * p, _mm512_add_epi8(w, off));
        }
        P->d[r] = _cvtsh_ss(s.d);
        for (int g = 0; g < 8; g++) {
            int32_t ls = 2 * (int32_t)(quant_rd32((const uint8_t *)b->qs + 8 * g + 4) >> 28) + 1;
            P->sc[g][r] = ls;
            P->m[g][r] = (uint32_t)ls | (uint32_t)ls << 16;
        }
    }
    panel_transpose((const uint8_t(*)[QK_K])tmp, P);
}

/* The token loops unrolled, so that the accumulators stay in registers. */
#define QK_UNROLL _Pragma("GCC unroll 16")

enum { PANEL_TOKS = 8 };

/* PANEL_TOKS tokens (a short pass repeats its last token) over all nb
 * blocks of a Q2_K panel: per block, 64 vpdpbusd per token, each weight
 * vector loaded once for the pass's tokens. */
static inline QK_TGT void q2k_panel_tokens(const qk_panel *P, int64_t nb, const block_q8_K *const *a, int nt,
                                           float *const *y, int64_t r0, int nr)
{
    __m512 sum[PANEL_TOKS];
    QK_UNROLL
    for (int t = 0; t < PANEL_TOKS; t++) sum[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, P++) {
        __m512i acc[PANEL_TOKS], accm[PANEL_TOKS];
        const int8_t *q[PANEL_TOKS];
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            acc[t] = _mm512_setzero_si512();
            accm[t] = _mm512_setzero_si512();
            q[t] = a[t][i].qs;
        }
        _Pragma("GCC unroll 8")
        for (int k = 0; k < QK_K / 4; k++) {
            __m512i wv = _mm512_load_si512(P->w[k]);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++)
                acc[t] = _mm512_dpbusd_epi32(acc[t], wv, _mm512_set1_epi32((int)quant_rd32(q[t] + 4 * k)));
        }
        for (int p = 0; p < 8; p++) {
            __m512i mv = _mm512_load_si512(P->m[p]);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++)
                accm[t] = _mm512_dpwssd_epi32(accm[t], mv, _mm512_set1_epi32((int)quant_rd32(a[t][i].bsums + 2 * p)));
        }
        __m512 d = _mm512_load_ps(P->d), dm = _mm512_load_ps(P->dmin);
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            __m512 ad = _mm512_set1_ps(a[t][i].d);
            /* dall·isum − dmin·summs, as the reference rounds it */
            __m512 f = _mm512_sub_ps(_mm512_mul_ps(_mm512_mul_ps(ad, d), _mm512_cvtepi32_ps(acc[t])),
                                     _mm512_mul_ps(_mm512_mul_ps(ad, dm), _mm512_cvtepi32_ps(accm[t])));
            sum[t] = _mm512_add_ps(sum[t], f);
        }
    }
    __mmask16 keep = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y[t] + r0, keep, sum[t]);
}

/* The same for an IQ2_XXS panel: per group, eight vpdpbusd per token into
 * a group sum, which its scale multiplies (vpmulld) into the block's. */
static inline QK_TGT void iq2_panel_tokens(const qk_panel *P, int64_t nb, const block_q8_K *const *a, int nt,
                                           float *const *y, int64_t r0, int nr)
{
    __m512 sum[PANEL_TOKS];
    QK_UNROLL
    for (int t = 0; t < PANEL_TOKS; t++) sum[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++, P++) {
        __m512i tot[PANEL_TOKS], corr[PANEL_TOKS];
        const int8_t *q[PANEL_TOKS];
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            tot[t] = _mm512_setzero_si512();
            corr[t] = _mm512_setzero_si512();
            q[t] = a[t][i].qs;
        }
        for (int g = 0; g < 8; g++) {
            __m512i acc[PANEL_TOKS];
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) acc[t] = _mm512_setzero_si512();
            _Pragma("GCC unroll 8")
            for (int k = 8 * g; k < 8 * g + 8; k++) {
                __m512i wv = _mm512_load_si512(P->w[k]);
                QK_UNROLL
                for (int t = 0; t < PANEL_TOKS; t++)
                    acc[t] = _mm512_dpbusd_epi32(acc[t], wv, _mm512_set1_epi32((int)quant_rd32(q[t] + 4 * k)));
            }
            __m512i sc = _mm512_load_si512(P->sc[g]), mv = _mm512_load_si512(P->m[g]);
            QK_UNROLL
            for (int t = 0; t < PANEL_TOKS; t++) {
                tot[t] = _mm512_add_epi32(tot[t], _mm512_mullo_epi32(acc[t], sc));
                corr[t] = _mm512_dpwssd_epi32(corr[t], mv, _mm512_set1_epi32((int)quant_rd32(a[t][i].bsums + 2 * g)));
            }
        }
        __m512 d = _mm512_load_ps(P->d);
        QK_UNROLL
        for (int t = 0; t < PANEL_TOKS; t++) {
            __m512i is = _mm512_sub_epi32(tot[t], _mm512_slli_epi32(corr[t], 6));
            __m512 f = _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(a[t][i].d)), _mm512_cvtepi32_ps(is));
            sum[t] = _mm512_add_ps(sum[t], f);
        }
    }
    __mmask16 keep = (__mmask16)((1u << nr) - 1);
    for (int t = 0; t < nt; t++) _mm512_mask_storeu_ps(y[t] + r0, keep, _mm512_mul_ps(_mm512_set1_ps(0.125f), sum[t]));
}

QK_PANEL_FN(q2k_panel, q2k_panel_block, q2k_panel_tokens)
QK_PANEL_FN(iq2_panel, iq2_panel_block, iq2_panel_tokens)

/* ---- fixed token counts --------------------------------------------------------- */

#define QK_FIXED_IQ2(NT, MANY)                                                                         \
    static QK_TGT void iq2_tile_##NT(const uint8_t *const *rows, const uint8_t *next,                  \
                                     const block_q8_K *const *act, int64_t nb, float out[QK_ROWS][QK_TOKS]) \
    {                                                                                                  \
        iq2_tile(rows, next, act, NT, MANY, nb, out);                                                  \
    }
QK_FIXED_IQ2(1, 0)
QK_FIXED_IQ2(2, 1)
QK_FIXED_IQ2(3, 1)
QK_FIXED_IQ2(4, 1)
QK_FIXED(q2k_tile_one, 1)
QK_FIXED(q2k_tile, 2)
QK_FIXED(q2k_tile, 3)
QK_FIXED(q2k_tile, 4)

QK_KERNEL_FN(iq2_kernel, iq2_tile_1, iq2_tile_2, iq2_tile_3, iq2_tile_4)
QK_KERNEL_FN(q2k_kernel, q2k_tile_one_1, q2k_tile_2, q2k_tile_3, q2k_tile_4)

const qk_kernels QK_NAME = { iq2_kernel, q2k_kernel, iq2_panel, q2k_panel };
