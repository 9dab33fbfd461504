/* quant_f32_x512.c — the f32-activation kernels with 512-bit vectors
 * (AVX-512 F, BW, VL, DQ with F16C, FMA, BMI2), from the template
 * quant_f32_x.h. Compiled for those instructions whatever the build's
 * -march; quant_f32.c runs them only where the CPU has them. */
#include "cpu/quant_f32_impl.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define QF_WIDTH 512
#define QF_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")))
#define QF_NAME quant_f32_x512
#include "cpu/quant_f32_x.h"
#else
const quant_f32_kernels quant_f32_x512 = { 0 };
#endif
