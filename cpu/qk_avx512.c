/* qk_avx512.c — the integer 2-bit kernels for AVX-512 without VBMI (F, BW, DQ, VL, VNNI), compiled for those
 * instructions whatever the build's -march (qk.c runs them only where
 * CPUID reports them). */
#include "cpu/qk_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_TGT __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx2,fma,f16c,bmi,bmi2")))
#define QK_VBMI 0
#define QK_NAME qk_kernels_avx512
#include "cpu/qk_x512.h"
#else
const qk_kernels qk_kernels_avx512 = { 0 };
#endif
