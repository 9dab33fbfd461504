/* quant.h — the ggml tensor formats a DS4 GGUF stores, and the kernels
 * that read them.
 *
 * Weights: F32, F16, BF16, I32, Q8_0 (32 per block), Q2_K, Q4_K, IQ2_XXS
 * (256 per block). Layouts: doc/model.md §12.2.
 * Rows are whole blocks; a matrix is rows of `row_bytes` each.
 *
 * Two families of products:
 *  - f32 activations (quant_dot, quant_matvec): exactly dequant(W)·x in f32,
 *    any summation order. The engine's reference numerics are the portable
 *    scalar versions here (quant_*_scalar). The entry points without
 *    _scalar are the CPU backend's (cpu/quant_f32.c): vectorised with the
 *    widest SIMD level the CPU runs, picked at run time (cpu/qk.h: CPUID or
 *    DS4CL_SIMD), and within f32 rounding of the scalar versions (the
 *    decoders bit for bit). Nothing in engine/ calls them.
 *  - quantized activations (quant_act_*, quant_dot_act, quant_matvec_act):
 *    the reference CPU arithmetic (doc/model.md §12.3): Q8_0 weights against per-32 int8 blocks
 *    with an f32 scale, K-quant/IQ2 weights against Q8_K blocks of 256, with
 *    integer inner sums. Faster, but not dequant(W)·x.
 *
 * Quantizers from f32 exist for every weight type (fixtures, tests); they
 * aim for small error, not for ggml's exact choices.
 */
#ifndef DS4CL_QUANT_H
#define DS4CL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q8_K = 15, /* activation blocks only, never stored */
    GGML_TYPE_IQ2_XXS = 16,
    GGML_TYPE_I32 = 26,
    GGML_TYPE_BF16 = 30,
};

#define QK8_0 32
#define QK_K 256

typedef struct {
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
    bool storable; /* may appear in a file (Q8_K may not) */
} quant_type_info;

/* NULL for types this engine does not handle. */
const quant_type_info *quant_type(uint32_t type);
/* Name of any ggml type id ("Q6_K", …), "?" when unknown. */
const char *quant_type_name(uint32_t type);
/* Bytes of n elements (n a multiple of the block size); 0 for unknown types. */
uint64_t quant_row_bytes(uint32_t type, uint64_t n);

/* ---- scalar conversions (IEEE binary16 / bfloat16, round to nearest even) */

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f);

/* ---- block layouts ---------------------------------------------------------- */

typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0; /* 34 bytes */

typedef struct {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
} block_q2_K; /* 84 bytes */

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
} block_q4_K; /* 144 bytes */

typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs; /* 66 bytes */

/* Activation blocks. */
typedef struct {
    float d;
    int8_t qs[QK8_0];
} block_q8_0a; /* Q8_0-style with an f32 scale (ds4's activation format) */

typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;

/* ---- f32-activation kernels ------------------------------------------------- */

/* Dequantize n elements (a whole number of blocks) of one row. I32 values
 * are converted to float. */
void quant_dequant_row(uint32_t type, const void *row, float *y, int64_t n);

/* dequant(row)·x over n elements. Types: F32, F16, BF16, Q8_0, Q2_K, Q4_K,
 * IQ2_XXS. */
float quant_dot(uint32_t type, const void *row, const float *x, int64_t n);

/* y[r] = W[r]·x for r in [r0, r1): W row r starts at w + r·row_bytes and
 * has n elements; y is indexed by the absolute row. Safe to call from
 * several threads on disjoint row ranges of the same y. */
void quant_matvec(uint32_t type, const void *w, size_t row_bytes, const float *x,
                  int64_t n, float *y, int64_t r0, int64_t r1);

/* Batched: Y[t][r] = W[r]·X[t] for r in [r0, r1) and t in [0, T); X[t]
 * starts at x + t·x_stride, Y[t] at y + t·y_stride (indexed by the absolute
 * row). Bit-identical to quant_matvec on each X[t], so a batched prefill
 * gives the same numbers as one-token decode; weight rows are reused from
 * cache across the T activations. Thread-safe on disjoint row ranges. */
void quant_matmul(uint32_t type, const void *w, size_t row_bytes, const float *x, size_t x_stride, int64_t n,
                  int64_t T, float *y, size_t y_stride, int64_t r0, int64_t r1);

/* Portable scalar versions of the above (the vector kernels are checked
 * against them). */
float quant_dot_scalar(uint32_t type, const void *row, const float *x, int64_t n);
void quant_dequant_row_scalar(uint32_t type, const void *row, float *y, int64_t n);

/* "avx512", "avx2" or "scalar": what quant_dot/quant_matvec run on (the
 * run-time level, cpu/qk.h). */
const char *quant_simd_name(void);

/* ---- quantized-activation kernels (ds4's integer arithmetic) ------------- */

/* ceil(n/32) blocks; a final partial block is zero-padded. */
void quant_act_q8_0(const float *x, int64_t n, block_q8_0a *out);
/* n a multiple of 256. */
void quant_act_q8_K(const float *x, int64_t n, block_q8_K *out);

/* Which activation format a weight type pairs with: GGML_TYPE_Q8_0 (blocks
 * block_q8_0a) or GGML_TYPE_Q8_K; -1 for types without an integer path. */
int quant_act_type(uint32_t weight_type);
/* Bytes of the activation blocks for n inputs of that weight type. */
size_t quant_act_bytes(uint32_t weight_type, int64_t n);
/* Quantizes x for weight_type into act (quant_act_bytes of room). */
void quant_act(uint32_t weight_type, const float *x, int64_t n, void *act);

/* row·act for Q8_0 (act: block_q8_0a) or Q2_K / Q4_K / IQ2_XXS
 * (act: block_q8_K). */
float quant_dot_act(uint32_t type, const void *row, const void *act, int64_t n);
void quant_matvec_act(uint32_t type, const void *w, size_t row_bytes, const void *act,
                      int64_t n, float *y, int64_t r0, int64_t r1);

/* ---- quantizers -------------------------------------------------------------- */

/* Quantizes n elements of x (a whole number of blocks) into out
 * (quant_row_bytes(type, n) bytes). Returns the bytes written, 0 for a
 * type it cannot produce. I32 rounds to the nearest integer. */
size_t quant_quantize_row(uint32_t type, const float *x, int64_t n, void *out);

/* ---- IQ2_XXS tables ---------------------------------------------------------- */

/* 256 grid rows of 8 magnitudes (bytes, each 8, 25 or 43; LSB first). */
extern const uint64_t quant_iq2xxs_grid[256];
/* ksigns[s]: s with bit 7 set when popcount(s) is odd. */
extern const uint8_t quant_ksigns_iq2xs[128];

#endif
