/* qk_impl.h — what the integer 2-bit kernels of each SIMD level share
 * with the dispatcher (qk.c): the kernel shape and the tables.
 *
 * A kernel computes a tile of QK_ROWS rows × nt tokens (1 ≤ nt ≤ QK_TOKS)
 * over nb blocks of 256: each weight block is decoded once into byte
 * vectors and multiplied into every token's activations, so prefill pays
 * the decode once per tile and decode shares each activation load between
 * the rows. The rows of the next tile (next: where they start, or NULL)
 * are prefetched one tile ahead: 2-bit rows are shorter than a page, so
 * four of them are four short streams the hardware prefetcher does not
 * follow in time.
 *
 * out[r][t] is exactly quant_dot_act(row r, act[t]): integer sums per
 * block, then the reference's float arithmetic in block order.
 */
#ifndef DS4CL_QK_IMPL_H
#define DS4CL_QK_IMPL_H

#include "cpu/qk.h"

enum { QK_ROWS = 4, QK_TOKS = 4 };

typedef void (*qk_kernel)(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act,
                          int nt, int64_t nb, float out[QK_ROWS][QK_TOKS]);

/* Prefill: QK_PANEL_ROWS rows decoded once per call into a panel (one
 * qk_panel per block of 256) and multiplied into every token from there.
 * A panel keeps each row's weights as unsigned bytes four elements to a
 * dword and the rows side by side: the 32-bit lane r of w[k] is row r's
 * elements 4k … 4k+3, which vpdpbusd multiplies by a token's four
 * activation bytes broadcast to every lane. A block's integer sum then
 * ends in its row's own lane, with no horizontal sum per (row, token), and
 * the rows share each activation load. A short group repeats its last row.
 *   Q2_K: w = q · (scale & 15) (at most 45); m[p] the minimums of
 *     sub-blocks 2p and 2p+1 as two words (vpdpwssd against the bsums).
 *   IQ2_XXS: w = signed grid value + 64 (21 … 107); sc[g] group g's scale
 *     2·ls+1, m[g] the same in both words: the 64 · Σ q8 that the offset
 *     adds to a group's sum is taken back through the bsums. */
enum { QK_PANEL_ROWS = 16 };
typedef struct {
    _Alignas(64) uint8_t w[QK_K / 4][QK_PANEL_ROWS][4];
    uint32_t m[8][QK_PANEL_ROWS];
    int32_t sc[8][QK_PANEL_ROWS];
    float d[QK_PANEL_ROWS], dmin[QK_PANEL_ROWS];
} qk_panel;

/* Rows [r0, r0 + nr) (nr ≤ QK_PANEL_ROWS) of a matrix with nb blocks a
 * row, decoded into panel[0 … nb), times the T tokens of act:
 * y[t][r0 + i], exactly quant_dot_act's values. */
typedef void (*qk_panel_fn)(const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int nr, qk_panel *panel, int T,
                            const block_q8_K *const *act, float *const *y);

/* A level's panel function from its block decoder BLOCK (one block of
 * QK_PANEL_ROWS rows into a panel) and its token loop TOKENS (up to the
 * level's PANEL_TOKS tokens from the panels); QK_TGT is the level's
 * target attribute. A short group repeats its last row and token. */
#define QK_PANEL_FN(NAME, BLOCK, TOKENS)                                                                     \
    static QK_TGT void NAME(const uint8_t *w, size_t row_bytes, int64_t nb, int64_t r0, int nr, qk_panel *panel, \
                            int T, const block_q8_K *const *act, float *const *y)                            \
    {                                                                                                      \
        const uint8_t *rows[QK_PANEL_ROWS];                                                                \
        for (int r = 0; r < QK_PANEL_ROWS; r++) rows[r] = w + (size_t)(r0 + (r < nr ? r : nr - 1)) * row_bytes; \
        for (int64_t i = 0; i < nb; i++) BLOCK(rows, i, panel + i);                                        \
        for (int t0 = 0; t0 < T; t0 += PANEL_TOKS) {                                                       \
            int nt = T - t0 < PANEL_TOKS ? T - t0 : PANEL_TOKS;                                            \
            const block_q8_K *a[PANEL_TOKS];                                                               \
            for (int t = 0; t < PANEL_TOKS; t++) a[t] = act[t0 + (t < nt ? t : nt - 1)];                   \
            TOKENS(panel, nb, a, nt, y + t0, r0, nr);                                                      \
        }                                                                                                  \
    }

/* A tile function FN(rows, next, act, nt, nb, out) for a fixed token
 * count NT (so that its loops over the tokens unroll), and a level's
 * kernel that picks one of its four by the tile's token count. */
#define QK_FIXED(FN, NT)                                                                               \
    static QK_TGT void FN##_##NT(const uint8_t *const *rows, const uint8_t *next,                      \
                                 const block_q8_K *const *act, int64_t nb, float out[QK_ROWS][QK_TOKS]) \
    {                                                                                                  \
        FN(rows, next, act, NT, nb, out);                                                              \
    }
#define QK_KERNEL_FN(NAME, T1, T2, T3, T4)                                                             \
    static QK_TGT void NAME(const uint8_t *const *rows, const uint8_t *next, const block_q8_K *const *act, \
                            int nt, int64_t nb, float out[QK_ROWS][QK_TOKS])                           \
    {                                                                                                  \
        switch (nt) {                                                                                  \
        case 1: T1(rows, next, act, nb, out); break;                                                   \
        case 2: T2(rows, next, act, nb, out); break;                                                   \
        case 3: T3(rows, next, act, nb, out); break;                                                   \
        default: T4(rows, next, act, nb, out); break;                                                  \
        }                                                                                              \
    }

/* The tiles' per-row f16 factors as a vector: one f16 per row (X4), or a
 * pair per row (X8: d, dmin). Built from scalars with vpinsr (a store of
 * each row's factor and a vector load of the four would stall store
 * forwarding every block); a macro, not intrinsics taking the row as an
 * immediate, so that it compiles at any optimization level. */
#define QK_F16X4(v) _mm_setr_epi16((short)(v)[0], (short)(v)[1], (short)(v)[2], (short)(v)[3], 0, 0, 0, 0)
#define QK_F16X8(v) _mm_setr_epi32((int)(v)[0], (int)(v)[1], (int)(v)[2], (int)(v)[3])

/* Block i of a tile was prefetched as the stretch of the rows below it:
 * a tile's rows are contiguous, QK_ROWS · nb blocks, so block i covers
 * bytes [QK_ROWS · i · bytes, QK_ROWS · (i + 1) · bytes) of the tile's
 * span, and the same stretch of the span that starts at next is fetched.
 * An asm statement: GCC takes a function whose only effect is a prefetch
 * for a pure one and drops its calls, which left these kernels without a
 * single prefetch instruction and their decode rows at a third of the
 * speed they reach from cache. */
#if defined(__x86_64__) && defined(__GNUC__)
static inline void prefetch_block(const uint8_t *next, int64_t i, int64_t bytes)
{
    if (!next) return;
    const char *p = (const char *)next + QK_ROWS * i * bytes;
    for (int64_t k = 0; k < QK_ROWS * bytes; k += 64) __asm__ volatile("prefetcht0 %0" : : "m"(p[k]));
}
#endif

typedef struct {
    qk_kernel iq2_xxs, q2_K;
    qk_panel_fn iq2_panel, q2k_panel; /* NULL: prefill runs on the tiles too */
} qk_kernels;

/* Each level's kernels (NULL entries where the build cannot target it). */
extern const qk_kernels qk_kernels_avx512vbmi, qk_kernels_avx512, qk_kernels_avx2vnni, qk_kernels_avx2;
/* The avx2vnni source with EVEX-encoded VNNI (AVX-512 VNNI + VL): for
 * tests on CPUs without AVX-VNNI, never dispatched. */
extern const qk_kernels qk_kernels_avx2vnni_evex;

/* qk_rows with a given kernel set (NULL entries: the scalar reference). */
void qk_rows_with(const qk_kernels *k, uint32_t type, const uint8_t *w, size_t row_bytes, int64_t n, int64_t r0,
                  int64_t r1, int T, const block_q8_K *const *act, float *const *y);

/* The IQ2_XXS grid as 2-bit codes (8 → 0, 25 → 1, 43 → 2), element j of
 * row i at bits 2j of entry i; 512 bytes, 64-byte aligned. */
extern const uint16_t *qk_grid_codes(void);
/* The same codes split into bytes: the low bytes of the 256 entries, then
 * the high bytes (two 128-entry vpermi2b tables each); 64-byte aligned. */
extern const uint8_t *qk_grid_code_bytes(void);

#endif
