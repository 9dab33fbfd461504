/* qk_avx512vbmi.c — the integer 2-bit kernels for AVX-512 with VBMI (F, BW, DQ, VL, VNNI, VBMI), compiled for those
 * instructions whatever the build's -march (qk.c runs them only where
 * CPUID reports them). */
#include "cpu/qk_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_TGT __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512vbmi,avx2,fma,f16c,bmi,bmi2")))
#define QK_VBMI 1
#define QK_NAME qk_kernels_avx512vbmi
#include "cpu/qk_x512.h"
#else
const qk_kernels qk_kernels_avx512vbmi = { 0 };
#endif
