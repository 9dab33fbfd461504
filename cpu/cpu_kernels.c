/* cpu_kernels.c — the entry points of cpu_kernels.h, forwarded to the
 * table of the SIMD level in use: qk.h's run-time level (CPUID, or
 * DS4CL_SIMD naming one), the same level the integer 2-bit and the
 * f32-activation kernels run. The tables are built from cpu_kernels_x.h
 * in the cpu_kernels_<level>.c files. */
#include "cpu/cpu_kernels.h"

#include <pthread.h>

#include "cpu/cpu_kernels_impl.h"

const cpu_kernel_set *cpu_kernels_for(qk_level l)
{
    const cpu_kernel_set *k = l == QK_AVX512VBMI ? &cpu_kernels_avx512vbmi
                              : l == QK_AVX512   ? &cpu_kernels_avx512
                              : l == QK_AVX2 || l == QK_AVX2VNNI ? &cpu_kernels_avx2
                                                                 : &cpu_kernels_scalar;
    return k->mm_rows ? k : &cpu_kernels_scalar;
}

static const cpu_kernel_set *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void pick(void)
{
    active = cpu_kernels_for(qk_level_active());
}

static const cpu_kernel_set *kernels(void)
{
    pthread_once(&active_once, pick);
    return active;
}

const char *cpu_kernels_isa(void)
{
    return kernels()->name;
}

size_t cpu_mm_scratch_floats(int64_t n)
{
    int64_t piece_floats = ROWS * PIECE, rows = ROWS * ((n + 15) & ~(int64_t)15);
    return (size_t)(rows > piece_floats ? rows : piece_floats) + 64;
}

void cpu_mm_rows(const cpu_weight *w, int64_t r0, int64_t r1, int T, const float *const *x, float *const *y,
                 float *scratch)
{
    kernels()->mm_rows(w, r0, r1, T, x, y, scratch);
}

float cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    return kernels()->dot_f32(a, b, n);
}

float cpu_dot_f16(const uint16_t *h, const float *b, int64_t n)
{
    return kernels()->dot_f16(h, b, n);
}

void cpu_axpy_f32(float *y, float s, const float *a, int64_t n)
{
    kernels()->axpy_f32(y, s, a, n);
}

void cpu_axpy_f16(float *y, float s, const uint16_t *a, int64_t n)
{
    kernels()->axpy_f16(y, s, a, n);
}

void cpu_f32_to_f16(uint16_t *dst, const float *src, int64_t n)
{
    kernels()->f32_to_f16(dst, src, n);
}

void cpu_f16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
    kernels()->f16_to_f32(dst, src, n);
}

bool cpu_indexer_fast(int nh)
{
    return kernels()->indexer_fast(nh);
}

float cpu_indexer_score(const float *qT, const float *wscaled, const float *k, int hd, int nh)
{
    return kernels()->indexer_score(qT, wscaled, k, hd, nh);
}
