/* quant_f32.c — the f32-activation entry points of quant.h (quant_dot,
 * quant_matvec, quant_matmul, quant_dequant_row): dequant(W)·x in f32 with
 * the widest vectors this CPU runs, decided at run time from the SIMD level
 * qk.h reports (CPUID, or DS4CL_SIMD naming a level, so a test can run
 * each one). The engine's reference arithmetic (quant_dot_scalar,
 * quant_dequant_row_scalar) is where the scalar level goes and what every
 * level is checked against. */
#include "engine/quant.h"

#include <pthread.h>
#include <stdlib.h>

#include "cpu/qk.h"
#include "cpu/quant_f32_impl.h"

static const quant_f32_kernels *active;
static pthread_once_t active_once = PTHREAD_ONCE_INIT;

static void pick(void)
{
    qk_level l = qk_level_active();
    if (l >= QK_AVX512 && quant_f32_x512.dot_f32) active = &quant_f32_x512;
    else if (l >= QK_AVX2 && quant_f32_x256.dot_f32) active = &quant_f32_x256;
    else active = NULL;
}

/* NULL on the scalar level. */
static const quant_f32_kernels *kernels(void)
{
    pthread_once(&active_once, pick);
    return active;
}

const char *quant_simd_name(void)
{
    const quant_f32_kernels *k = kernels();
    return k == &quant_f32_x512 ? "avx512" : k ? "avx2" : "scalar";
}

void quant_dequant_row(uint32_t type, const void *row, float *y, int64_t n)
{
    const quant_f32_kernels *k = kernels();
    if (k) k->dequant_row(type, row, y, n);
    else quant_dequant_row_scalar(type, row, y, n);
}

/* One row with precomputed activation sums (K-quants only use them). */
static float dot_row(const quant_f32_kernels *k, uint32_t type, const void *row, const float *x, const float *xs,
                     int64_t n)
{
    switch (type) {
    case GGML_TYPE_F32: return k->dot_f32(row, x, n);
    case GGML_TYPE_F16: return k->dot_f16(row, x, n);
    case GGML_TYPE_BF16: return k->dot_bf16(row, x, n);
    case GGML_TYPE_Q8_0: return k->dot_q8_0(row, x, n);
    case GGML_TYPE_Q2_K: return k->dot_q2_K(row, x, xs, n);
    case GGML_TYPE_Q4_K: return k->dot_q4_K(row, x, xs, n);
    case GGML_TYPE_IQ2_XXS: return k->dot_iq2_xxs(row, x, n);
    default: return quant_dot_scalar(type, row, x, n);
    }
}

static int sum_group(uint32_t type)
{
    return type == GGML_TYPE_Q2_K ? 16 : type == GGML_TYPE_Q4_K ? 32 : 0;
}

float quant_dot(uint32_t type, const void *row, const float *x, int64_t n)
{
    const quant_f32_kernels *k = kernels();
    if (!k) return quant_dot_scalar(type, row, x, n);
    int g = sum_group(type);
    if (!g) return dot_row(k, type, row, x, NULL, n);
    float stackbuf[512];
    float *xs = n / g <= 512 ? stackbuf : malloc((size_t)(n / g) * sizeof *xs);
    if (!xs) return quant_dot_scalar(type, row, x, n);
    k->sums(x, n, g, xs);
    float r = dot_row(k, type, row, x, xs, n);
    if (xs != stackbuf) free(xs);
    return r;
}

void quant_matvec(uint32_t type, const void *w, size_t row_bytes, const float *x, int64_t n, float *y, int64_t r0,
                  int64_t r1)
{
    const uint8_t *base = w;
    const quant_f32_kernels *k = kernels();
    int g = k ? sum_group(type) : 0;
    float stackbuf[1024];
    float *xs = NULL;
    if (g) {
        xs = n / g <= 1024 ? stackbuf : malloc((size_t)(n / g) * sizeof *xs);
        if (!xs) k = NULL;
        else k->sums(x, n, g, xs);
    }
    for (int64_t r = r0; r < r1; r++)
        y[r] = k ? dot_row(k, type, base + (size_t)r * row_bytes, x, xs, n)
                 : quant_dot_scalar(type, base + (size_t)r * row_bytes, x, n);
    if (xs && xs != stackbuf) free(xs);
}

/* Rows in tiles of QUANT_TILE so a tile of weight rows stays in L1/L2 while
 * every activation row passes over it: prefill reads each weight byte once
 * per chunk instead of once per token. Each (row, token) product is the
 * same dot_row call quant_matvec makes, so results are bit-identical. */
#define QUANT_TILE 8

void quant_matmul(uint32_t type, const void *w, size_t row_bytes, const float *x, size_t x_stride, int64_t n,
                  int64_t T, float *y, size_t y_stride, int64_t r0, int64_t r1)
{
    const uint8_t *base = w;
    const quant_f32_kernels *k = kernels();
    int g = k ? sum_group(type) : 0;
    float *xs = NULL;
    int64_t ng = g ? n / g : 0;
    if (g) {
        xs = malloc((size_t)(ng * T) * sizeof *xs);
        if (!xs) {
            for (int64_t t = 0; t < T; t++)
                quant_matvec(type, w, row_bytes, x + (size_t)t * x_stride, n, y + (size_t)t * y_stride, r0, r1);
            return;
        }
        for (int64_t t = 0; t < T; t++) k->sums(x + (size_t)t * x_stride, n, g, xs + t * ng);
    }
    for (int64_t rt = r0; rt < r1; rt += QUANT_TILE) {
        int64_t re = rt + QUANT_TILE < r1 ? rt + QUANT_TILE : r1;
        for (int64_t t = 0; t < T; t++) {
            const float *xt = x + (size_t)t * x_stride;
            float *yt = y + (size_t)t * y_stride;
            for (int64_t r = rt; r < re; r++)
                yt[r] = k ? dot_row(k, type, base + (size_t)r * row_bytes, xt, xs ? xs + t * ng : NULL, n)
                          : quant_dot_scalar(type, base + (size_t)r * row_bytes, xt, n);
        }
    }
    free(xs);
}
