/* state_size.h — how many bytes a DS4 session needs for a context of
 * n_ctx tokens, computed from hyper-parameters (doc/model.md §9), for
 * memory planning before anything is allocated.
 *
 * Persistent state, per layer l with compression ratio R = ratio[l]:
 *   raw window        ring_rows × head_dim                 (every layer)
 *   compressed rows   floor(n_ctx / R) × head_dim          (R ≠ 0)
 *   compressor state  kv + score: 2 × (C·R) × (C·head_dim) (R ≠ 0; C = 2 on
 *                     overlapping layers, R == overlap_ratio, else 1)
 *   indexer rows      floor(n_ctx / R) × indexer_dim       (R == indexer_ratio)
 *   indexer state     2 × (C·R) × (C·indexer_dim)          (R == indexer_ratio)
 * plus the last logits (n_vocab f32) and the token ids (n_ctx int32).
 * Cached rows use cache_elem_bytes per element, frontiers
 * state_elem_bytes.
 *
 * Working memory of one prefill chunk of T = min(prefill_chunk, n_ctx)
 * tokens, f32: hyper-connection streams in and out, the sub-layer input
 * and its norm, low-rank q, full q and the attention output, the raw KV
 * row, the grouped low-rank output, routed-expert gate/up/mid, the
 * indexer's per-token scores over all its rows (top-k selection needs them
 * whole), and the attention scores of one head over the rows a query can
 * see (its raw window, the chunk, and the compressed rows: all of them for
 * non-indexed layers, at most indexer_top_k for indexed ones). An engine
 * that materialises the scores of all heads at once needs n_head times
 * that term; a streaming kernel needs less.
 *
 * Nothing here is specific to one model size: every width comes from the
 * shape the caller fills in (from the GGUF's deepseek4.* metadata).
 */
#ifndef DS4CL_STATE_SIZE_H
#define DS4CL_STATE_SIZE_H

#include <stdint.h>

typedef struct {
    int n_layer;
    const int *compress_ratio; /* n_layer entries: 0 = raw window only, else R */
    int head_dim;              /* attention KV row width (K and V share it) */
    int n_swa;                 /* raw window rows */
    int raw_ring_rows;         /* physical rows kept per layer; 0 = n_swa */
    int indexer_dim;           /* indexer key row width; 0 = no indexer */
    int indexer_ratio;         /* layers with this ratio carry the indexer */
    int overlap_ratio;         /* layers with this ratio pool two overlapping windows */
    int n_vocab;
    int cache_elem_bytes;      /* cached row element: 2 (f16) or 4 (f32) */
    int state_elem_bytes;      /* compressor frontier element: 4 (f32) */

    /* working memory (all 0 = leave it out) */
    int prefill_chunk;         /* tokens computed together */
    int n_embd, n_hc, n_head, q_lora, n_out_group, o_lora;
    int n_expert_used, n_ff;
    int indexer_n_head, indexer_top_k;
} state_shape;

typedef struct {
    uint64_t raw_window;      /* all layers' raw rings */
    uint64_t compressed_rows; /* attention compressed rows */
    uint64_t indexer_rows;    /* indexer compressed rows */
    uint64_t frontiers;       /* compressor and indexer streaming state */
    uint64_t logits_tokens;   /* last logits and token ids */
    uint64_t state;           /* sum of the above: what a snapshot holds */
    uint64_t scratch;         /* working memory of one prefill chunk */
    uint64_t total;           /* state + scratch */
} state_bytes;

/* Fills out for a session of n_ctx tokens (n_ctx ≥ 1). */
void state_size(const state_shape *s, int n_ctx, state_bytes *out);

/* out->total alone. */
uint64_t state_size_total(const state_shape *s, int n_ctx);

#endif
