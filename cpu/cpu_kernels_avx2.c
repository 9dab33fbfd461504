/* cpu_kernels_avx2.c — the CPU kernels for AVX2 (with FMA and F16C),
 * compiled for those instructions whatever the build's -march
 * (cpu_kernels.c runs them only where CPUID reports them). */
#include "cpu/cpu_kernels_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CK_WIDTH 256
#define CK_VBMI 0
#define CK_TGT __attribute__((target("avx2,fma,f16c")))
#define CK_NAME cpu_kernels_avx2
#include "cpu/cpu_kernels_x.h"
#else
const cpu_kernel_set cpu_kernels_avx2 = { 0 };
#endif
