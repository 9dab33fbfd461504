/* state_size.c — session bytes per context size from hyper-parameters. */
#include "engine/state_size.h"

#include <string.h>

static uint64_t frontier_elems(int ratio, int width, int lanes)
{
    /* kv and score, (lanes·R) rows of (lanes·width) */
    return 2ull * (uint64_t)lanes * (uint64_t)ratio * (uint64_t)lanes * (uint64_t)width;
}

void state_size(const state_shape *s, int n_ctx, state_bytes *out)
{
    memset(out, 0, sizeof *out);
    if (n_ctx < 1) n_ctx = 1;
    const uint64_t ce = (uint64_t)s->cache_elem_bytes, se = (uint64_t)s->state_elem_bytes;
    const uint64_t ring = (uint64_t)(s->raw_ring_rows > 0 ? s->raw_ring_rows : s->n_swa);
    const uint64_t hd = (uint64_t)s->head_dim;
    uint64_t max_visible = 0; /* compressed rows one query attends to, worst layer */
    uint64_t max_indexer_rows = 0;

    for (int l = 0; l < s->n_layer; l++) {
        out->raw_window += ring * hd * ce;
        int r = s->compress_ratio ? s->compress_ratio[l] : 0;
        if (r <= 0) continue;
        int lanes = r == s->overlap_ratio ? 2 : 1;
        uint64_t rows = (uint64_t)n_ctx / (uint64_t)r;
        out->compressed_rows += rows * hd * ce;
        out->frontiers += frontier_elems(r, s->head_dim, lanes) * se;
        uint64_t visible = rows;
        if (s->indexer_dim > 0 && r == s->indexer_ratio) {
            out->indexer_rows += rows * (uint64_t)s->indexer_dim * ce;
            out->frontiers += frontier_elems(r, s->indexer_dim, lanes) * se;
            if (s->indexer_top_k > 0 && visible > (uint64_t)s->indexer_top_k) visible = (uint64_t)s->indexer_top_k;
            if (rows > max_indexer_rows) max_indexer_rows = rows;
        }
        if (visible > max_visible) max_visible = visible;
    }
    out->logits_tokens = (uint64_t)s->n_vocab * 4 + (uint64_t)n_ctx * 4;
    out->state = out->raw_window + out->compressed_rows + out->indexer_rows + out->frontiers + out->logits_tokens;

    if (s->prefill_chunk > 0) {
        uint64_t t = (uint64_t)(s->prefill_chunk < n_ctx ? s->prefill_chunk : n_ctx);
        uint64_t qd = (uint64_t)s->n_head * hd;
        uint64_t per_token = 2ull * (uint64_t)s->n_hc * (uint64_t)s->n_embd /* HC in/out */
                             + 2ull * (uint64_t)s->n_embd                  /* x, norm */
                             + (uint64_t)s->q_lora + 2ull * qd + hd        /* q path, attn out, kv */
                             + (uint64_t)s->n_out_group * (uint64_t)s->o_lora
                             + 3ull * (uint64_t)s->n_expert_used * (uint64_t)s->n_ff
                             + (uint64_t)s->indexer_n_head * (uint64_t)s->indexer_dim
                             + max_indexer_rows;                           /* indexer scores */
        uint64_t scores = (uint64_t)s->n_swa + t + max_visible; /* one head at a time */
        out->scratch = t * (per_token + scores) * 4;
    }
    out->total = out->state + out->scratch;
}

uint64_t state_size_total(const state_shape *s, int n_ctx)
{
    state_bytes b;
    state_size(s, n_ctx, &b);
    return b.total;
}
