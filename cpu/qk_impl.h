/* qk_impl.h — what the integer 2-bit kernels of each SIMD level share
 * with the dispatcher (qk.c): the kernel shape and the tables.
 *
 * A kernel computes a tile of QK_ROWS rows × nt tokens (1 ≤ nt ≤ QK_TOKS)
 * over nb blocks of 256: each weight block is decoded once into byte
 * vectors and multiplied into every token's activations, so prefill pays
 * the decode once per tile and decode shares each activation load between
 * the rows. The rows of the next tile (next, or NULL) are prefetched one
 * tile ahead: 2-bit rows are shorter than a page, so four of them are four
 * short streams the hardware prefetcher does not follow in time.
 *
 * out[r][t] is exactly quant_dot_act(row r, act[t]): integer sums per
 * block, then the reference's float arithmetic in block order.
 */
#ifndef DS4CL_QK_IMPL_H
#define DS4CL_QK_IMPL_H

#include "cpu/qk.h"

enum { QK_ROWS = 4, QK_TOKS = 4 };

typedef void (*qk_kernel)(const uint8_t *const *rows, const uint8_t *const *next, const block_q8_K *const *act,
                          int nt, int64_t nb, float out[QK_ROWS][QK_TOKS]);

typedef struct {
    qk_kernel iq2_xxs, q2_K;
} qk_kernels;

/* Each level's kernels (NULL entries where the build cannot target it). */
extern const qk_kernels qk_kernels_avx512vbmi, qk_kernels_avx512, qk_kernels_avx2vnni, qk_kernels_avx2;
/* The avx2vnni source with EVEX-encoded VNNI (AVX-512 VNNI + VL): for
 * tests on CPUs without AVX-VNNI, never dispatched. */
extern const qk_kernels qk_kernels_avx2vnni_evex;

/* qk_rows with a given kernel set (NULL entries: the scalar reference). */
void qk_rows_with(const qk_kernels *k, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0,
                  int64_t r1, int T, const block_q8_K *const *act, float *const *y);

/* ksigns as ±1 bytes: byte j of qk_signs8[s] is −1 when bit j of
 * quant_ksigns_iq2xs[s] is set, else +1 (vpsignb's sign operand). */
extern const uint64_t *qk_signs8(void);
/* The IQ2_XXS grid as 2-bit codes (8 → 0, 25 → 1, 43 → 2), element j of
 * row i at bits 2j of entry i; 512 bytes, 64-byte aligned. */
extern const uint16_t *qk_grid_codes(void);

#endif
