/* kvstate.h — the canonical layout of a DS4 session's state in a
 * snapshot (the backend payload inside the container of session.c).
 *
 * Every backend that computes DS4 writes and reads exactly this, whatever
 * its own memory layout (rings, padding, device buffers), so a session
 * saved on one backend resumes on another. All values little-endian.
 *
 *   header (40 bytes)
 *     char  magic[8]     "DS4KVST1"
 *     u32   cache_type   0 = f32 rows, 1 = f16 rows (IEEE half)
 *     u32   n_layer
 *     u32   head_dim     attention row width
 *     u32   indexer_dim  indexer row width
 *     u32   n_swa        raw window rows
 *     u32   reserved     0
 *     u64   n_tokens     tokens the state holds (= the container's)
 *
 *   then for each layer l (ratio R = compress_ratio[l], C = 2 if R = 4
 *   else 1, W = C·head_dim, Wi = 2·indexer_dim), with n = n_tokens:
 *     raw rows       positions max(0, n−n_swa) … n−1, oldest first,
 *                    head_dim cache elements each
 *     if R ≠ 0:
 *       compressed   rows 0 … ⌊n/R⌋−1, head_dim cache elements each
 *       frontier     tokens max(0, cut−(C−1)·R) … n−1 with cut = n − n mod R,
 *                    each W f32 values a then W f32 scores b + ape[p mod R]
 *     if R = 4:
 *       indexer rows rows 0 … ⌊n/4⌋−1, indexer_dim cache elements each
 *       indexer frontier  the same tokens as the frontier, Wi f32 values
 *                    then Wi f32 scores
 *
 * The frontier tokens are exactly those a streaming compressor still
 * needs: the previous window's lane-A candidates and the current window's
 * tokens so far. A snapshot with cache_type different from the loading
 * session's is converted (f16 → f32 exactly; f32 → f16 rounds to nearest
 * even).
 */
#ifndef DS4CL_KVSTATE_H
#define DS4CL_KVSTATE_H

#include <stdint.h>

#define KVSTATE_MAGIC "DS4KVST1"
#define KVSTATE_HEADER 40u

#endif
