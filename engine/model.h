/* model.h — the DS4 model bound to a GGUF: every hyper-parameter read from
 * deepseek4.* metadata and every tensor bound by name with its shape and
 * type checked.
 *
 * Nothing here assumes the Flash shape: any file whose tensors agree with
 * its own metadata binds (the tiny test fixtures, Flash, Pro). Shapes are
 * GGUF order [ne0, ne1, ne2]: a matrix [in, out] has `out` rows of `in`
 * elements (y[r] = W[r]·x); expert tensors [in, out, n_expert] hold expert e
 * at byte offset e·out·row_bytes.
 *
 * Accepted types: norms, sinks, HC scale/base, router bias: F32. Dense
 * projections (attention, shared expert, output head, router, compressors,
 * indexer, HC mixers) and the embedding: F32, F16, BF16 or Q8_0. Compressor
 * `ape`: F32 or F16. Routed experts: IQ2_XXS, Q2_K or Q4_K (gate and up of a
 * layer share a type). tid2eid: I32 with every entry < n_expert.
 *
 * Binding also rejects files whose tensors contradict the metadata:
 * compressor tensors on a ratio-0 layer, indexer tensors on a layer whose
 * ratio is not 4, tid2eid on a non-hash layer.
 */
#ifndef DS4CL_MODEL_H
#define DS4CL_MODEL_H

#include "engine/ds4.h"
#include "engine/gguf.h"

/* A view of one tensor in the mapping; data == NULL means absent (only for
 * the optional tensors named below). Dims past n_dims are 1. */
typedef struct {
    const char *name;
    const void *data;
    uint32_t type; /* ggml type id (engine/quant.h) */
    int n_dims;
    int64_t ne[4];
    uint64_t row_bytes; /* bytes of one ne[0] row */
    uint64_t nbytes;
} ds4_tensor;

static inline bool ds4_tensor_present(const ds4_tensor *t) { return t->data != NULL; }

typedef struct {
    /* shape */
    int n_layer, n_embd, n_vocab;
    int n_head, n_head_kv, head_dim, value_dim;
    int n_rot, n_nope;           /* RoPE on the last n_rot dims of each head */
    int q_lora, o_lora, n_out_group;
    int n_expert, n_expert_used, n_expert_shared, n_ff_exp;
    int n_expert_group, n_expert_group_used; /* always 0: no group-limited routing */
    int n_hash_layer;            /* layers 0..n_hash_layer-1 route by token id */
    int n_swa;                   /* raw sliding window (rows, including the current token) */
    int n_indexer_head, indexer_head_dim, indexer_top_k;
    int n_hc, hc_sinkhorn_iters;
    /* numerics */
    float hc_eps, rms_eps;
    float rope_base;             /* layers with compress ratio 0 */
    float compress_rope_base;    /* compressed layers (with YaRN) */
    float yarn_factor, yarn_beta_fast, yarn_beta_slow;
    int64_t yarn_orig_ctx;
    float expert_weights_scale;
    bool expert_weights_norm;
    int64_t n_ctx_train;         /* deepseek4.context_length; 0 when absent */
    /* per layer (n_layer entries each) */
    int *compress_ratio;         /* 0 = raw window only */
    float *swiglu_clamp;         /* ≤ 1e-6 means no clamp */
    /* derived */
    int q_dim;                   /* n_head·head_dim */
    int hc_dim;                  /* n_hc·n_embd */
    int mix_hc;                  /* 2·n_hc + n_hc² */
    int heads_per_group;         /* n_head / n_out_group */
    int group_dim;               /* heads_per_group·head_dim: attn_output_a row length */
    int shared_ff;               /* n_ff_exp·n_expert_shared */
} ds4_hparams;

/* Compressor width factor of a ratio: 2 overlapping lanes for ratio 4, else 1. */
static inline int ds4_compress_lanes(int ratio) { return ratio == 4 ? 2 : 1; }

typedef struct {
    int ratio;  /* compress ratio of this layer */
    bool hash;  /* routes by token id (tid2eid) */

    ds4_tensor hc_attn_fn, hc_attn_scale, hc_attn_base;
    ds4_tensor attn_norm, attn_q_a, attn_q_a_norm, attn_q_b, attn_kv, attn_kv_a_norm;
    ds4_tensor attn_sinks, attn_output_a, attn_output_b;
    /* ratio != 0 */
    ds4_tensor comp_ape, comp_kv, comp_gate, comp_norm;
    /* ratio == 4 */
    ds4_tensor idx_q_b, idx_proj, idx_comp_ape, idx_comp_kv, idx_comp_gate, idx_comp_norm;

    ds4_tensor hc_ffn_fn, hc_ffn_scale, hc_ffn_base, ffn_norm, ffn_gate_inp;
    ds4_tensor exp_probs_b; /* required on non-hash layers, optional on hash layers */
    ds4_tensor tid2eid;     /* hash layers only */
    ds4_tensor ffn_gate_exps, ffn_up_exps, ffn_down_exps;
    ds4_tensor ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
} ds4_layer;

typedef struct ds4_model {
    const gguf_file *file; /* not owned */
    ds4_hparams hp;
    ds4_tensor token_embd, output_hc_fn, output_hc_base, output_hc_scale, output_norm, output;
    ds4_layer *layers; /* n_layer */
    char name[128];    /* general.name, or "" */
    uint64_t weights_bytes; /* tensor bytes of the whole file */
} ds4_model;

ds4_model *model_bind(const gguf_file *f, ds4_error *err);
void model_free(ds4_model *m);

/* Fills the shape fields, name and weights_bytes of info. */
void model_describe(const ds4_model *m, ds4_model_info *info);

/* Per-session state for n_ctx tokens (doc/model.md §9) with f32 storage
 * of every cached row and frontier: state_size() (engine/state_size.h) of
 * this model's shape, without working memory:
 *   raw window     Σ_layers n_swa·head_dim
 *   compressed     Σ_{R≠0} floor(n_ctx/R)·head_dim
 *   frontier       Σ_{R≠0} 2·(C·R)·(C·head_dim)          (kv + score, C = lanes)
 *   indexer rows   Σ_{R=4} floor(n_ctx/4)·indexer_head_dim
 *   idx frontier   Σ_{R=4} 2·(2·4)·(2·indexer_head_dim)
 * floats × 4 bytes, plus n_vocab logits and n_ctx token ids × 4 bytes.
 * Backends add their own scratch and padding on top. */
uint64_t model_context_bytes(const ds4_model *m, int n_ctx);

#endif
