/* cpu_kernels_impl.h — what the CPU kernels of each SIMD level share with
 * their dispatcher (cpu_kernels.c): one table of the cpu_kernels.h entry
 * points per level, each built from the template cpu_kernels_x.h and
 * compiled for its own instructions whatever the build's -march, so that
 * the level qk.h decides at run time (CPUID, or DS4CL_SIMD) picks the
 * table and every level can be tested on a CPU that has it.
 *
 * Within one table the results' contract of cpu_kernels.h holds; between
 * tables the lane count (CPU_VL: 16, 8, 8 for scalar) and the fused
 * multiply-add differ, so results agree within rounding only.
 */
#ifndef DS4CL_CPU_KERNELS_IMPL_H
#define DS4CL_CPU_KERNELS_IMPL_H

#include "cpu/cpu_kernels.h"
#include "cpu/qk.h"

enum { PIECE = 256, ROWS = 4, TOKS = 4 };

typedef struct {
    const char *name; /* "avx512", "avx2" or "scalar" */
    void (*mm_rows)(const cpu_weight *w, int64_t r0, int64_t r1, int T, const float *const *x, float *const *y,
                    float *scratch);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f16)(const uint16_t *h, const float *b, int64_t n);
    void (*axpy_f32)(float *y, float s, const float *a, int64_t n);
    void (*axpy_f16)(float *y, float s, const uint16_t *a, int64_t n);
    void (*f32_to_f16)(uint16_t *dst, const float *src, int64_t n);
    void (*f16_to_f32)(float *dst, const uint16_t *src, int64_t n);
    bool (*indexer_fast)(int nh);
    float (*indexer_score)(const float *qT, const float *wscaled, const float *k, int hd, int nh);
} cpu_kernel_set;

/* The levels' tables; all zeros where the build cannot target the level
 * (off x86-64). avx512vbmi differs from avx512 in the IQ2_XXS block setup
 * only, with the same results. */
extern const cpu_kernel_set cpu_kernels_avx512vbmi, cpu_kernels_avx512, cpu_kernels_avx2, cpu_kernels_scalar;

/* The table level l runs (avx2vnni has the avx2 one): the scalar table
 * where the build has none for it. Whether the CPU runs l is the
 * caller's question (qk_level_supported). */
const cpu_kernel_set *cpu_kernels_for(qk_level l);

#endif
