/* qk_avx2vnni_evex.c — the avx2vnni level's source (qk_x256.h with its
 * 256-bit vpdpbusd / vpdpwssd) built with the EVEX encodings of those
 * instructions (AVX-512 VNNI + VL) instead of the VEX ones (AVX-VNNI).
 * Never dispatched: it lets the tests check that level's arithmetic on
 * AVX-512 CPUs that lack AVX-VNNI. */
#include "cpu/qk_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QK_TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni")))
#define QK_VNNI 1
#define QK_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define QK_DPWSSD(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#define QK_NAME qk_kernels_avx2vnni_evex
#include "cpu/qk_x256.h"
#else
const qk_kernels qk_kernels_avx2vnni_evex = { 0 };
#endif
