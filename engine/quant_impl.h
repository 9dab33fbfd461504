/* quant_impl.h — what the quant modules share internally: the block
 * decoders' helpers, the scalar kernels and the vector kernels. */
#ifndef DS4CL_QUANT_IMPL_H
#define DS4CL_QUANT_IMPL_H

#include <stdbool.h>
#include <string.h>

#include "engine/quant.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#define QUANT_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define QUANT_AVX2 1
#endif

static inline uint16_t quant_rd16(const void *p)
{
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

static inline uint32_t quant_rd32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Q4_K: 6-bit scale and min of sub-block j (0..7). */
static inline void quant_q4k_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Vector kernels (cpu/quant_simd.c); only defined when QUANT_AVX512/QUANT_AVX2.
 * Q2_K/Q4_K take the sums of x over each 16 (Q2_K) or 32 (Q4_K) elements,
 * which a matvec computes once for all rows. */
float quant_simd_dot_f32(const float *w, const float *x, int64_t n);
float quant_simd_dot_f16(const uint16_t *w, const float *x, int64_t n);
float quant_simd_dot_bf16(const uint16_t *w, const float *x, int64_t n);
float quant_simd_dot_q8_0(const void *w, const float *x, int64_t n);
float quant_simd_dot_q2_K(const void *w, const float *x, const float *xsum16, int64_t n);
float quant_simd_dot_q4_K(const void *w, const float *x, const float *xsum32, int64_t n);
float quant_simd_dot_iq2_xxs(const void *w, const float *x, int64_t n);
void quant_simd_dequant_row(uint32_t type, const void *row, float *y, int64_t n);
void quant_simd_sums(const float *x, int64_t n, int group, float *out);

/* n elements of a Q8_0, Q2_K, Q4_K or IQ2_XXS row decoded to f32 with
 * 256-bit vectors, every value the scalar decoder's (cpu/quant_x256.c);
 * false (nothing written) for other formats or off x86-64. Any build has
 * it; call it only where the CPU has AVX2, FMA and F16C. */
bool quant_x256_dequant_row(uint32_t type, const void *row, float *y, int64_t n);

#endif
