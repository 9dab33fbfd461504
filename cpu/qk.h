/* qk.h — integer products of the 2-bit expert formats (IQ2_XXS, Q2_K)
 * against activations quantized per 256 to Q8_K, with one kernel set per
 * x86 SIMD level chosen at run time.
 *
 * Every kernel gives, for each (row, token) pair, exactly the float that
 * quant_dot_act (the scalar reference) gives: the inner sums are integers,
 * and the per-block scaling and accumulation are done in the reference's
 * order. So the level, the number of rows or tokens computed together and
 * the thread split never change a result.
 *
 * The level is the best one the CPU reports (CPUID and the OS's saved
 * vector state), unless DS4CL_SIMD names one: avx512vbmi, avx512, avx2vnni,
 * avx2 or scalar. A named level the CPU lacks is refused (the default is
 * kept and qk_level_error says why), so a test or a bench can run every
 * level this CPU has and skip the rest with a reason.
 */
#ifndef DS4CL_QK_H
#define DS4CL_QK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/quant.h"

typedef enum {
    QK_SCALAR = 0,
    QK_AVX2,       /* AVX2 + FMA + F16C */
    QK_AVX2VNNI,   /* + AVX-VNNI (256-bit vpdpbusd / vpdpwssd) */
    QK_AVX512,     /* AVX-512 F/BW/DQ/VL + VNNI */
    QK_AVX512VBMI, /* + VBMI (vpermb, vpermi2b, vpmultishiftqb) */
    QK_N_LEVELS
} qk_level;

/* "scalar", "avx2", "avx2vnni", "avx512", "avx512vbmi". */
const char *qk_level_name(qk_level l);
/* Parses a level name; -1 when unknown. */
int qk_level_parse(const char *name);
/* Whether this CPU (and OS) can run level l. */
bool qk_level_supported(qk_level l);
/* The level in use: DS4CL_SIMD's when it names a supported one, else the
 * best supported. Decided once. */
qk_level qk_level_active(void);
/* Why DS4CL_SIMD was not followed ("" when it was, or is unset). */
const char *qk_level_error(void);

/* Whether type has integer kernels here (IQ2_XXS, Q2_K) for rows of n. */
bool qk_supports(uint32_t type, int64_t n);

/* y[t][r] = row r · act[t] (the quant_dot_act value) for rows r in
 * [r0, r1) of a matrix starting at w, and tokens t < T. act[t] holds the
 * n/256 Q8_K blocks of token t; y[t] is indexed by the absolute row.
 * level: a supported level (qk_level_active() for the engine). */
void qk_rows(qk_level level, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0, int64_t r1,
             int T, const block_q8_K *const *act, float *const *y);

#endif
