/* qk_tile.h — what the 256- and 512-bit tiles (qk_x256.h, qk_x512.h)
 * share at the end of a block and of a tile: the float arithmetic that
 * must be the reference's, written once. Included after QK_TGT. */
#ifndef DS4CL_QK_TILE_H
#define DS4CL_QK_TILE_H

#include <immintrin.h>

#include "cpu/qk_impl.h"

/* The sums of four vectors' lanes, [a, b, c, d]. */
static inline QK_TGT __m128i hsum4x256(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    __m256i u = _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
    return _mm_add_epi32(_mm256_castsi256_si128(u), _mm256_extracti128_si256(u, 1));
}

/* IQ2_XXS: a block's integer sums is (lane r: row r) into sum, as the
 * reference rounds them: (d · act d) · sum; the 1/8 comes at the end. */
static inline QK_TGT __attribute__((always_inline)) void qk_iq2_block_add(__m128 *sum, __m128 d4, float ad, __m128i is)
{
    *sum = _mm_add_ps(*sum, _mm_mul_ps(_mm_mul_ps(d4, _mm_set1_ps(ad)), _mm_cvtepi32_ps(is)));
}

/* Q2_K: dall · isum − dmin · summs, as the reference rounds it. */
static inline QK_TGT __attribute__((always_inline)) void qk_q2k_block_add(__m128 *sum, __m128 d4, __m128 m4, float ad,
                                                                          __m128i is, __m128i ms)
{
    __m128 a = _mm_set1_ps(ad);
    __m128 f = _mm_sub_ps(_mm_mul_ps(_mm_mul_ps(a, d4), _mm_cvtepi32_ps(is)), _mm_mul_ps(_mm_mul_ps(a, m4), _mm_cvtepi32_ps(ms)));
    *sum = _mm_add_ps(*sum, f);
}

/* out[r][t] = scale · lane r of sum[t] (scale a power of two: exact). */
static inline QK_TGT void qk_tile_out(const __m128 *sum, int nt, float scale, float out[QK_ROWS][QK_TOKS])
{
    for (int t = 0; t < nt; t++) {
        float v[4];
        _mm_storeu_ps(v, sum[t]);
        for (int r = 0; r < QK_ROWS; r++) out[r][t] = scale * v[r];
    }
}

#endif
