/* quant_f32_x256.c — the f32-activation kernels with 256-bit vectors
 * (AVX2, FMA, F16C), from the template quant_f32_x.h. Compiled for those
 * instructions whatever the build's -march; quant_f32.c runs them only
 * where the CPU has them. */
#include "cpu/quant_f32_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QF_WIDTH 256
#define QF_TGT __attribute__((target("avx2,fma,f16c")))
#define QF_NAME quant_f32_x256
#include "cpu/quant_f32_x.h"
#else
const quant_f32_kernels quant_f32_x256 = { 0 };
#endif
