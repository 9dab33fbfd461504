/* cpu_kernels_avx512vbmi.c — the CPU kernels for AVX-512 with VBMI (F, BW,
 * DQ, VL, VNNI, VBMI), compiled for those instructions whatever the
 * build's -march (cpu_kernels.c runs them only where CPUID reports them). */
#include "cpu/cpu_kernels_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CK_WIDTH 512
#define CK_VBMI 1
#define CK_TGT __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi,bmi2")))
#define CK_NAME cpu_kernels_avx512vbmi
#include "cpu/cpu_kernels_x.h"
#else
const cpu_kernel_set cpu_kernels_avx512vbmi = { 0 };
#endif
