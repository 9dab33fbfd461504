/* qk_avx2vnni.c — the integer 2-bit kernels for AVX2 with AVX-VNNI, compiled for those
 * instructions whatever the build's -march (qk.c runs them only where
 * CPUID reports them). */
#include "cpu/qk_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define QK_VNNI 1
#define QK_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define QK_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#define QK_NAME qk_kernels_avx2vnni
#include "cpu/qk_x256.h"
#else
const qk_kernels qk_kernels_avx2vnni = { 0 };
#endif
