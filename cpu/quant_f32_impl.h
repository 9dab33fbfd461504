/* quant_f32_impl.h — what the CPU backend's f32-activation kernels share:
 * one table of kernels per x86 SIMD width, which quant_f32.c picks from at
 * run time (the level qk.h decides: CPUID, or DS4CL_SIMD), and the 256-bit
 * row decoders. Each level's file is compiled for its own instructions
 * whatever the build's -march, so every level can be tested on a CPU that
 * has it. */
#ifndef DS4CL_QUANT_F32_IMPL_H
#define DS4CL_QUANT_F32_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/quant_impl.h"

/* dequant(W)·x for one row of n elements. The K-quants take the sums of x
 * over each 16 (Q2_K) or 32 (Q4_K) elements, which a matvec computes once
 * for all rows (sums). dequant_row gives the scalar decoder's values. */
typedef struct {
    float (*dot_f32)(const float *w, const float *x, int64_t n);
    float (*dot_f16)(const uint16_t *w, const float *x, int64_t n);
    float (*dot_bf16)(const uint16_t *w, const float *x, int64_t n);
    float (*dot_q8_0)(const void *w, const float *x, int64_t n);
    float (*dot_q2_K)(const void *w, const float *x, const float *xsum16, int64_t n);
    float (*dot_q4_K)(const void *w, const float *x, const float *xsum32, int64_t n);
    float (*dot_iq2_xxs)(const void *w, const float *x, int64_t n);
    void (*sums)(const float *x, int64_t n, int group, float *out);
    void (*dequant_row)(uint32_t type, const void *row, float *y, int64_t n);
} quant_f32_kernels;

/* Both from the template quant_f32_x.h; all zeros off x86-64 (no such
 * level there). */
extern const quant_f32_kernels quant_f32_x512; /* quant_f32_x512.c */
extern const quant_f32_kernels quant_f32_x256; /* quant_f32_x256.c */

/* n elements of a Q8_0, Q2_K, Q4_K or IQ2_XXS row decoded to f32 with
 * 256-bit vectors, every value the scalar decoder's (quant_x256.c);
 * false (nothing written) for other formats or off x86-64. Any build has
 * it; call it only where the CPU has AVX2, FMA and F16C. */
bool quant_x256_dequant_row(uint32_t type, const void *row, float *y, int64_t n);

#endif
