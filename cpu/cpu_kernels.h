/* cpu_kernels.h — the CPU backend's inner loops: weight-times-activation
 * products over any weight format, and the f32/f16 row helpers of the
 * attention and indexer.
 *
 * The SIMD level is chosen at run time, once: the level qk.h reports (the
 * best one CPUID and the OS allow, or the one DS4CL_SIMD names), the same
 * for these kernels as for the integer and f32-activation ones. avx512 and
 * avx512vbmi run 16-lane kernels, avx2 and avx2vnni 8-lane ones with fused
 * multiply-add, scalar portable C (8 lanes, multiply then add).
 *
 * Products are exactly dequant(W)·x in f32 with one fixed arithmetic per
 * (row, token) pair and level: the row is dequantized in pieces into an
 * f32 buffer and multiplied into a vector accumulator of the level's lanes
 * (element k goes to lane k mod lanes), then the lanes are summed in a
 * fixed order. That arithmetic does not depend on how many rows or tokens
 * are computed together, so within a level a token in a prefill chunk and
 * the same token decoded alone give identical bits, for any thread count;
 * different levels agree within rounding. Rows are tiled four at a time
 * and tokens up to four at a time to reuse each dequantized row across
 * tokens (prefill) and each activation load across rows (decode).
 */
#ifndef DS4CL_CPU_KERNELS_H
#define DS4CL_CPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t type;       /* ggml type */
    const uint8_t *data; /* row 0 */
    size_t row_bytes;
    int64_t n;           /* elements per row */
} cpu_weight;

/* Floats of per-thread scratch cpu_mm_rows needs for rows of n elements. */
size_t cpu_mm_scratch_floats(int64_t n);

/* y[t][r] = W[r]·x[t] for rows r in [r0, r1) and tokens t < T; y[t] is
 * indexed by the absolute row. scratch: cpu_mm_scratch_floats(w->n)
 * floats, 64-byte aligned. */
void cpu_mm_rows(const cpu_weight *w, int64_t r0, int64_t r1, int T, const float *const *x, float *const *y,
                 float *scratch);

/* a·b over n floats, fixed lane order (see above). */
float cpu_dot_f32(const float *a, const float *b, int64_t n);
/* f16 row · f32 vector. */
float cpu_dot_f16(const uint16_t *h, const float *b, int64_t n);
/* y += s·a for an f32 / f16 row a. */
void cpu_axpy_f32(float *y, float s, const float *a, int64_t n);
void cpu_axpy_f16(float *y, float s, const uint16_t *a, int64_t n);
/* f32 ↔ f16 rows (round to nearest even). */
void cpu_f32_to_f16(uint16_t *dst, const float *src, int64_t n);
void cpu_f16_to_f32(float *dst, const uint16_t *src, int64_t n);

/* Indexer score of one key row k [hd] against a token's queries stored
 * transposed, qT [hd][nh], with per-head weights already scaled:
 * Σ_h wscaled[h]·max(0, q_h·k). Only where cpu_indexer_fast(nh). */
bool cpu_indexer_fast(int nh);
float cpu_indexer_score(const float *qT, const float *wscaled, const float *k, int hd, int nh);

/* The width of the level in use: "avx512", "avx2" or "scalar". */
const char *cpu_kernels_isa(void);

#endif
