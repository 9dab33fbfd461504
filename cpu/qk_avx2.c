/* qk_avx2.c — the integer 2-bit kernels for AVX2 (with FMA and F16C), compiled for those
 * instructions whatever the build's -march (qk.c runs them only where
 * CPUID reports them). */
#include "cpu/qk_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_TGT __attribute__((target("avx2,fma,f16c")))
#define QK_VNNI 0
#define QK_NAME qk_kernels_avx2
#include "cpu/qk_x256.h"
#else
const qk_kernels qk_kernels_avx2 = { 0 };
#endif
