/* model.c — DS4 binding: hyper-parameters from deepseek4.* metadata, then
 * every tensor by name with its shape derived from those hyper-parameters. */
#include "engine/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "engine/state_size.h"

#define ARCH "deepseek4"

/* ---- metadata ----------------------------------------------------------------- */

typedef struct {
    const gguf_file *f;
    ds4_error *err;
} binder;

static int key_missing(binder *b, const char *key)
{
    return ds4_error_set(b->err, "model: required metadata key '%s' is missing", key);
}

/* Integer key (any integer type) within [lo, hi]. */
static int get_int(binder *b, const char *key, int64_t lo, int64_t hi, bool required, int64_t dflt,
                   int64_t *out)
{
    int64_t i = gguf_find_key(b->f, key);
    if (i < 0) {
        if (required) return key_missing(b, key);
        *out = dflt;
        return 0;
    }
    gguf_type t = gguf_kv_type(b->f, (size_t)i);
    int64_t v;
    if (t == GGUF_TYPE_BOOL || !gguf_kv_as_int(b->f, (size_t)i, &v))
        return ds4_error_set(b->err, "model: metadata key '%s' has type %s, expected an integer (at byte %llu)",
                             key, gguf_type_name(t), (unsigned long long)gguf_kv_offset(b->f, (size_t)i));
    if (v < lo || v > hi)
        return ds4_error_set(b->err, "model: metadata key '%s' = %lld is outside %lld..%lld", key,
                             (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int get_i(binder *b, const char *key, int64_t lo, int64_t hi, int *out)
{
    int64_t v;
    if (get_int(b, key, lo, hi, true, 0, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* Float key (float or integer type), finite and > min_excl. */
static int get_float(binder *b, const char *key, double min_excl, float *out)
{
    int64_t i = gguf_find_key(b->f, key);
    if (i < 0) return key_missing(b, key);
    gguf_type t = gguf_kv_type(b->f, (size_t)i);
    double v;
    if (t == GGUF_TYPE_BOOL || !gguf_kv_as_float(b->f, (size_t)i, &v))
        return ds4_error_set(b->err, "model: metadata key '%s' has type %s, expected a number (at byte %llu)",
                             key, gguf_type_name(t), (unsigned long long)gguf_kv_offset(b->f, (size_t)i));
    if (!isfinite(v) || !(v > min_excl))
        return ds4_error_set(b->err, "model: metadata key '%s' = %g must be a finite number > %g", key, v,
                             min_excl);
    *out = (float)v;
    return 0;
}

#define K(name) ARCH "." name
#define INT_MAX_DIM (1 << 30)

static int read_hparams(binder *b, ds4_hparams *hp)
{
    const gguf_file *f = b->f;
    gguf_str arch;
    if (!gguf_get_str(f, "general.architecture", &arch)) {
        int64_t i = gguf_find_key(f, "general.architecture");
        if (i < 0) return key_missing(b, "general.architecture");
        return ds4_error_set(b->err, "model: metadata key 'general.architecture' has type %s, expected STRING",
                             gguf_type_name(gguf_kv_type(f, (size_t)i)));
    }
    if (!gguf_str_eq(arch, ARCH)) {
        char a[64];
        snprintf(a, sizeof a, "%.*s", (int)(arch.len < 48 ? arch.len : 48), arch.ptr);
        return ds4_error_set(b->err, "model: general.architecture is '%s', expected '" ARCH "'", a);
    }
    if (get_i(b, K("block_count"), 1, 4096, &hp->n_layer) ||
        get_i(b, K("embedding_length"), 1, INT_MAX_DIM, &hp->n_embd) ||
        get_i(b, K("vocab_size"), 1, INT_MAX_DIM, &hp->n_vocab) ||
        get_i(b, K("attention.head_count"), 1, 65536, &hp->n_head) ||
        get_i(b, K("attention.head_count_kv"), 1, 1, &hp->n_head_kv) ||
        get_i(b, K("attention.key_length"), 1, 65536, &hp->head_dim) ||
        get_i(b, K("attention.value_length"), 1, 65536, &hp->value_dim) ||
        get_i(b, K("rope.dimension_count"), 2, 65536, &hp->n_rot) ||
        get_i(b, K("attention.q_lora_rank"), 1, INT_MAX_DIM, &hp->q_lora) ||
        get_i(b, K("attention.output_lora_rank"), 1, INT_MAX_DIM, &hp->o_lora) ||
        get_i(b, K("attention.output_group_count"), 1, 65536, &hp->n_out_group) ||
        get_i(b, K("expert_count"), 1, 65536, &hp->n_expert) ||
        get_i(b, K("expert_used_count"), 1, 65536, &hp->n_expert_used) ||
        get_i(b, K("expert_feed_forward_length"), 1, INT_MAX_DIM, &hp->n_ff_exp) ||
        get_i(b, K("expert_shared_count"), 1, 64, &hp->n_expert_shared) ||
        get_i(b, K("hash_layer_count"), 0, 4096, &hp->n_hash_layer) ||
        get_i(b, K("attention.sliding_window"), 1, INT_MAX_DIM, &hp->n_swa) ||
        get_i(b, K("attention.indexer.head_count"), 1, 65536, &hp->n_indexer_head) ||
        get_i(b, K("attention.indexer.key_length"), 1, 65536, &hp->indexer_head_dim) ||
        get_i(b, K("attention.indexer.top_k"), 1, INT_MAX_DIM, &hp->indexer_top_k) ||
        get_i(b, K("hyper_connection.count"), 1, 64, &hp->n_hc) ||
        get_i(b, K("hyper_connection.sinkhorn_iterations"), 1, 1000, &hp->hc_sinkhorn_iters))
        return -1;
    int64_t v;
    if (get_int(b, K("expert_group_count"), 0, 0, false, 0, &v)) return -1;
    hp->n_expert_group = (int)v;
    if (get_int(b, K("expert_group_used_count"), 0, 0, false, 0, &v)) return -1;
    hp->n_expert_group_used = (int)v;
    if (get_int(b, K("rope.scaling.original_context_length"), 1, INT64_MAX, true, 0, &hp->yarn_orig_ctx) ||
        get_int(b, K("context_length"), 0, INT64_MAX, false, 0, &hp->n_ctx_train))
        return -1;
    if (get_float(b, K("hyper_connection.epsilon"), 0.0, &hp->hc_eps) ||
        get_float(b, K("attention.layer_norm_rms_epsilon"), 0.0, &hp->rms_eps) ||
        get_float(b, K("rope.freq_base"), 0.0, &hp->rope_base) ||
        get_float(b, K("attention.compress_rope_freq_base"), 0.0, &hp->compress_rope_base) ||
        get_float(b, K("rope.scaling.factor"), 0.0, &hp->yarn_factor) ||
        get_float(b, K("rope.scaling.yarn_beta_fast"), -INFINITY, &hp->yarn_beta_fast) ||
        get_float(b, K("rope.scaling.yarn_beta_slow"), -INFINITY, &hp->yarn_beta_slow) ||
        get_float(b, K("expert_weights_scale"), 0.0, &hp->expert_weights_scale))
        return -1;
    int64_t ki = gguf_find_key(f, K("expert_weights_norm"));
    if (ki < 0) return key_missing(b, K("expert_weights_norm"));
    if (!gguf_get_bool(f, K("expert_weights_norm"), &hp->expert_weights_norm))
        return ds4_error_set(b->err, "model: metadata key '" K("expert_weights_norm") "' has type %s, expected BOOL",
                             gguf_type_name(gguf_kv_type(f, (size_t)ki)));

    /* The tokenizer's ids index the embedding and the logits: one entry per row. */
    gguf_array toks;
    if (gguf_get_array(f, "tokenizer.ggml.tokens", &toks) && toks.n != (uint64_t)hp->n_vocab)
        return ds4_error_set(b->err, "model: tokenizer.ggml.tokens has %llu entries but " K("vocab_size") " is %d "
                             "(at byte %llu)", (unsigned long long)toks.n, hp->n_vocab,
                             (unsigned long long)gguf_kv_offset(f, (size_t)gguf_find_key(f, "tokenizer.ggml.tokens")));

    /* Consistency of the shape. */
    if (hp->value_dim != hp->head_dim)
        return ds4_error_set(b->err, "model: attention.value_length %d differs from key_length %d "
                                     "(keys and values share one row)", hp->value_dim, hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return ds4_error_set(b->err, "model: rope.dimension_count %d must be even and ≤ key_length %d",
                             hp->n_rot, hp->head_dim);
    if (hp->n_head % hp->n_out_group)
        return ds4_error_set(b->err, "model: attention.head_count %d is not a multiple of output_group_count %d",
                             hp->n_head, hp->n_out_group);
    if (hp->n_expert_used > hp->n_expert)
        return ds4_error_set(b->err, "model: expert_used_count %d exceeds expert_count %d",
                             hp->n_expert_used, hp->n_expert);
    if (hp->n_hash_layer > hp->n_layer)
        return ds4_error_set(b->err, "model: hash_layer_count %d exceeds block_count %d", hp->n_hash_layer,
                             hp->n_layer);
    if ((int64_t)hp->n_head * hp->head_dim > INT_MAX_DIM || (int64_t)hp->n_hc * hp->n_embd > INT_MAX_DIM ||
        (int64_t)hp->n_ff_exp * hp->n_expert_shared > INT_MAX_DIM ||
        (int64_t)hp->n_out_group * hp->o_lora > INT_MAX_DIM ||
        (int64_t)hp->n_indexer_head * hp->indexer_head_dim > INT_MAX_DIM)
        return ds4_error_set(b->err, "model: derived dimensions overflow");
    hp->n_nope = hp->head_dim - hp->n_rot;
    hp->q_dim = hp->n_head * hp->head_dim;
    hp->hc_dim = hp->n_hc * hp->n_embd;
    hp->mix_hc = 2 * hp->n_hc + hp->n_hc * hp->n_hc;
    hp->heads_per_group = hp->n_head / hp->n_out_group;
    hp->group_dim = hp->heads_per_group * hp->head_dim;
    hp->shared_ff = hp->n_ff_exp * hp->n_expert_shared;

    /* Per-layer arrays: at least n_layer entries (a trailing MTP entry is ignored). */
    hp->compress_ratio = calloc((size_t)hp->n_layer, sizeof *hp->compress_ratio);
    hp->swiglu_clamp = calloc((size_t)hp->n_layer, sizeof *hp->swiglu_clamp);
    if (!hp->compress_ratio || !hp->swiglu_clamp) return ds4_error_set(b->err, "out of memory");
    gguf_array a;
    const char *rk = K("attention.compress_ratios");
    if (!gguf_get_array(f, rk, &a)) {
        int64_t i = gguf_find_key(f, rk);
        if (i < 0) return key_missing(b, rk);
        return ds4_error_set(b->err, "model: metadata key '%s' has type %s, expected ARRAY of INT32/UINT32",
                             rk, gguf_type_name(gguf_kv_type(f, (size_t)i)));
    }
    if (a.elem_type != GGUF_TYPE_INT32 && a.elem_type != GGUF_TYPE_UINT32)
        return ds4_error_set(b->err, "model: '%s' is an array of %s, expected INT32 or UINT32", rk,
                             gguf_type_name(a.elem_type));
    if (a.n < (uint64_t)hp->n_layer)
        return ds4_error_set(b->err, "model: '%s' has %llu entries, fewer than block_count %d", rk,
                             (unsigned long long)a.n, hp->n_layer);
    for (int l = 0; l < hp->n_layer; l++) {
        int64_t r;
        gguf_array_int(&a, (uint64_t)l, &r);
        if (r < 0 || r > (1 << 20))
            return ds4_error_set(b->err, "model: '%s'[%d] = %lld is not a valid compress ratio", rk, l,
                                 (long long)r);
        hp->compress_ratio[l] = (int)r;
    }
    const char *ck = K("swiglu_clamp_exp");
    if (!gguf_get_array(f, ck, &a)) {
        int64_t i = gguf_find_key(f, ck);
        if (i < 0) return key_missing(b, ck);
        return ds4_error_set(b->err, "model: metadata key '%s' has type %s, expected ARRAY of FLOAT32", ck,
                             gguf_type_name(gguf_kv_type(f, (size_t)i)));
    }
    if (a.elem_type != GGUF_TYPE_FLOAT32 && a.elem_type != GGUF_TYPE_FLOAT64)
        return ds4_error_set(b->err, "model: '%s' is an array of %s, expected FLOAT32 or FLOAT64", ck,
                             gguf_type_name(a.elem_type));
    if (a.n < (uint64_t)hp->n_layer)
        return ds4_error_set(b->err, "model: '%s' has %llu entries, fewer than block_count %d", ck,
                             (unsigned long long)a.n, hp->n_layer);
    for (int l = 0; l < hp->n_layer; l++) {
        double c;
        gguf_array_float(&a, (uint64_t)l, &c);
        if (!isfinite(c) || c < 0.0)
            return ds4_error_set(b->err, "model: '%s'[%d] = %g is not a valid clamp", ck, l, c);
        hp->swiglu_clamp[l] = (float)c;
    }
    for (int l = 0; l < hp->n_layer; l++)
        if (hp->compress_ratio[l] == 4 && hp->n_rot > hp->indexer_head_dim)
            return ds4_error_set(b->err, "model: rope.dimension_count %d exceeds indexer key_length %d",
                                 hp->n_rot, hp->indexer_head_dim);
    return 0;
}

/* ---- tensors ------------------------------------------------------------------- */

enum { T_F32 = 1, T_DENSE = 2, T_APE = 4, T_EXPERT = 8, T_I32 = 16 };

static bool type_allowed(uint32_t type, int set)
{
    switch (type) {
    case GGML_TYPE_F32: return set & (T_F32 | T_DENSE | T_APE);
    case GGML_TYPE_F16: return set & (T_DENSE | T_APE);
    case GGML_TYPE_BF16:
    case GGML_TYPE_Q8_0: return set & T_DENSE;
    case GGML_TYPE_IQ2_XXS:
    case GGML_TYPE_Q2_K:
    case GGML_TYPE_Q4_K: return set & T_EXPERT;
    case GGML_TYPE_I32: return set & T_I32;
    default: return false;
    }
}

static const char *allowed_names(int set)
{
    switch (set) {
    case T_F32: return "F32";
    case T_DENSE: return "F32, F16, BF16 or Q8_0";
    case T_APE: return "F32 or F16";
    case T_EXPERT: return "IQ2_XXS, Q2_K or Q4_K";
    case T_I32: return "I32";
    default: return "?";
    }
}

static void fmt_dims(char *buf, size_t size, int n, const int64_t *ne)
{
    size_t o = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < n && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)ne[i]);
    if (o < size) snprintf(buf + o, size - o, "]");
}

/* Binds `name` (printf-formatted) with the given dims and type set. A
 * missing optional tensor leaves *t zeroed and succeeds. */
__attribute__((format(printf, 7, 8)))
static int bind_tensor(binder *b, ds4_tensor *t, bool required, int set, int n_dims, const int64_t *ne,
                       const char *fmt, ...)
{
    char name[GGUF_MAX_NAME + 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    memset(t, 0, sizeof *t);
    const gguf_tensor *g = gguf_get_tensor(b->f, name);
    if (!g) {
        if (required) return ds4_error_set(b->err, "model: required tensor '%s' is missing", name);
        return 0;
    }
    int64_t gne[4];
    for (int i = 0; i < 4; i++) gne[i] = (int64_t)g->ne[i];
    bool ok = (int)g->n_dims == n_dims;
    for (int i = 0; ok && i < n_dims; i++) ok = gne[i] == ne[i];
    if (!ok) {
        char want[128], got[128];
        fmt_dims(want, sizeof want, n_dims, ne);
        fmt_dims(got, sizeof got, (int)g->n_dims, gne);
        return ds4_error_set(b->err, "model: tensor '%s' has shape %s, expected %s", name, got, want);
    }
    if (!type_allowed(g->type, set))
        return ds4_error_set(b->err, "model: tensor '%s' has type %s, expected %s", name,
                             quant_type_name(g->type), allowed_names(set));
    t->name = g->name;
    t->data = g->data;
    t->type = g->type;
    t->n_dims = (int)g->n_dims;
    for (int i = 0; i < 4; i++) t->ne[i] = gne[i];
    t->row_bytes = g->row_bytes;
    t->nbytes = g->nbytes;
    return 0;
}

#define DIMS(...) ((const int64_t[]){ __VA_ARGS__ })
#define NDIMS(...) ((int)(sizeof((const int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)))
#define BIND(t, req, set, dims, ...) bind_tensor(b, (t), (req), (set), NDIMS dims, DIMS dims, __VA_ARGS__)

/* A tensor that must not exist on this layer (metadata says so). */
static int forbid(binder *b, int l, const char *suffix, const char *why)
{
    char name[GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    if (gguf_find_tensor(b->f, name) >= 0)
        return ds4_error_set(b->err, "model: tensor '%s' is present but %s", name, why);
    return 0;
}

static int bind_layer(binder *b, const ds4_hparams *hp, int l, ds4_layer *L)
{
    const int64_t D = hp->n_embd, hd = hp->head_dim, R = hp->compress_ratio[l];
    L->ratio = (int)R;
    L->hash = l < hp->n_hash_layer;
    if (BIND(&L->hc_attn_fn, true, T_DENSE, (hp->hc_dim, hp->mix_hc), "blk.%d.hc_attn_fn.weight", l) ||
        BIND(&L->hc_attn_scale, true, T_F32, (3), "blk.%d.hc_attn_scale.weight", l) ||
        BIND(&L->hc_attn_base, true, T_F32, (hp->mix_hc), "blk.%d.hc_attn_base.weight", l) ||
        BIND(&L->attn_norm, true, T_F32, (D), "blk.%d.attn_norm.weight", l) ||
        BIND(&L->attn_q_a, true, T_DENSE, (D, hp->q_lora), "blk.%d.attn_q_a.weight", l) ||
        BIND(&L->attn_q_a_norm, true, T_F32, (hp->q_lora), "blk.%d.attn_q_a_norm.weight", l) ||
        BIND(&L->attn_q_b, true, T_DENSE, (hp->q_lora, hp->q_dim), "blk.%d.attn_q_b.weight", l) ||
        BIND(&L->attn_kv, true, T_DENSE, (D, hd), "blk.%d.attn_kv.weight", l) ||
        BIND(&L->attn_kv_a_norm, true, T_F32, (hd), "blk.%d.attn_kv_a_norm.weight", l) ||
        BIND(&L->attn_sinks, true, T_F32, (hp->n_head), "blk.%d.attn_sinks.weight", l) ||
        BIND(&L->attn_output_a, true, T_DENSE, (hp->group_dim, (int64_t)hp->n_out_group * hp->o_lora),
             "blk.%d.attn_output_a.weight", l) ||
        BIND(&L->attn_output_b, true, T_DENSE, ((int64_t)hp->n_out_group * hp->o_lora, D),
             "blk.%d.attn_output_b.weight", l))
        return -1;

    if (R != 0) {
        int64_t W = ds4_compress_lanes((int)R) * hd;
        if (BIND(&L->comp_ape, true, T_APE, (W, R), "blk.%d.attn_compressor_ape.weight", l) ||
            BIND(&L->comp_kv, true, T_DENSE, (D, W), "blk.%d.attn_compressor_kv.weight", l) ||
            BIND(&L->comp_gate, true, T_DENSE, (D, W), "blk.%d.attn_compressor_gate.weight", l) ||
            BIND(&L->comp_norm, true, T_F32, (hd), "blk.%d.attn_compressor_norm.weight", l))
            return -1;
    } else {
        static const char *const comp[] = { "attn_compressor_ape.weight", "attn_compressor_kv.weight",
                                            "attn_compressor_gate.weight", "attn_compressor_norm.weight" };
        for (size_t i = 0; i < sizeof comp / sizeof comp[0]; i++)
            if (forbid(b, l, comp[i], "the layer's compress ratio is 0")) return -1;
    }
    if (R == 4) {
        int64_t id = hp->indexer_head_dim, W = 2 * id;
        if (BIND(&L->idx_q_b, true, T_DENSE, (hp->q_lora, (int64_t)hp->n_indexer_head * id),
                 "blk.%d.indexer.attn_q_b.weight", l) ||
            BIND(&L->idx_proj, true, T_DENSE, (D, hp->n_indexer_head), "blk.%d.indexer.proj.weight", l) ||
            BIND(&L->idx_comp_ape, true, T_APE, (W, 4), "blk.%d.indexer_compressor_ape.weight", l) ||
            BIND(&L->idx_comp_kv, true, T_DENSE, (D, W), "blk.%d.indexer_compressor_kv.weight", l) ||
            BIND(&L->idx_comp_gate, true, T_DENSE, (D, W), "blk.%d.indexer_compressor_gate.weight", l) ||
            BIND(&L->idx_comp_norm, true, T_F32, (id), "blk.%d.indexer_compressor_norm.weight", l))
            return -1;
    } else {
        static const char *const idx[] = { "indexer.attn_q_b.weight", "indexer.proj.weight",
                                           "indexer_compressor_ape.weight", "indexer_compressor_kv.weight",
                                           "indexer_compressor_gate.weight", "indexer_compressor_norm.weight" };
        for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)
            if (forbid(b, l, idx[i], "indexer tensors belong to ratio-4 layers only")) return -1;
    }

    const int64_t E = hp->n_expert, F = hp->n_ff_exp, SF = hp->shared_ff;
    if (BIND(&L->hc_ffn_fn, true, T_DENSE, (hp->hc_dim, hp->mix_hc), "blk.%d.hc_ffn_fn.weight", l) ||
        BIND(&L->hc_ffn_scale, true, T_F32, (3), "blk.%d.hc_ffn_scale.weight", l) ||
        BIND(&L->hc_ffn_base, true, T_F32, (hp->mix_hc), "blk.%d.hc_ffn_base.weight", l) ||
        BIND(&L->ffn_norm, true, T_F32, (D), "blk.%d.ffn_norm.weight", l) ||
        BIND(&L->ffn_gate_inp, true, T_DENSE, (D, E), "blk.%d.ffn_gate_inp.weight", l) ||
        BIND(&L->exp_probs_b, !L->hash, T_F32, (E), "blk.%d.exp_probs_b.bias", l) ||
        BIND(&L->ffn_gate_exps, true, T_EXPERT, (D, F, E), "blk.%d.ffn_gate_exps.weight", l) ||
        BIND(&L->ffn_up_exps, true, T_EXPERT, (D, F, E), "blk.%d.ffn_up_exps.weight", l) ||
        BIND(&L->ffn_down_exps, true, T_EXPERT, (F, D, E), "blk.%d.ffn_down_exps.weight", l) ||
        BIND(&L->ffn_gate_shexp, true, T_DENSE, (D, SF), "blk.%d.ffn_gate_shexp.weight", l) ||
        BIND(&L->ffn_up_shexp, true, T_DENSE, (D, SF), "blk.%d.ffn_up_shexp.weight", l) ||
        BIND(&L->ffn_down_shexp, true, T_DENSE, (SF, D), "blk.%d.ffn_down_shexp.weight", l))
        return -1;
    if (L->ffn_gate_exps.type != L->ffn_up_exps.type)
        return ds4_error_set(b->err, "model: tensor '%s' has type %s but '%s' has %s (gate and up must match)",
                             L->ffn_up_exps.name, quant_type_name(L->ffn_up_exps.type), L->ffn_gate_exps.name,
                             quant_type_name(L->ffn_gate_exps.type));
    if (L->hash) {
        if (BIND(&L->tid2eid, true, T_I32, (hp->n_expert_used, hp->n_vocab), "blk.%d.ffn_gate_tid2eid.weight", l))
            return -1;
        /* The forward pass indexes expert tensors with these: check them all. */
        const uint8_t *p = L->tid2eid.data;
        for (uint64_t i = 0; i < (uint64_t)hp->n_expert_used * (uint64_t)hp->n_vocab; i++) {
            int32_t e;
            memcpy(&e, p + 4 * i, 4);
            if (e < 0 || e >= hp->n_expert)
                return ds4_error_set(b->err, "model: tensor '%s' entry %llu (token %llu) is expert %d, outside 0..%d",
                                     L->tid2eid.name, (unsigned long long)i,
                                     (unsigned long long)(i / (uint64_t)hp->n_expert_used), e, hp->n_expert - 1);
        }
    } else if (forbid(b, l, "ffn_gate_tid2eid.weight", "the layer is not a hash-routed layer")) {
        return -1;
    }
    return 0;
}

ds4_model *model_bind(const gguf_file *f, ds4_error *err)
{
    ds4_model *m = calloc(1, sizeof *m);
    if (!m) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    m->file = f;
    binder bb = { f, err }, *b = &bb;
    ds4_hparams *hp = &m->hp;
    if (read_hparams(b, hp)) goto fail;
    const int64_t D = hp->n_embd, V = hp->n_vocab;
    if (BIND(&m->token_embd, true, T_DENSE, (D, V), "token_embd.weight") ||
        BIND(&m->output_hc_fn, true, T_DENSE, (hp->hc_dim, hp->n_hc), "output_hc_fn.weight") ||
        BIND(&m->output_hc_base, true, T_F32, (hp->n_hc), "output_hc_base.weight") ||
        BIND(&m->output_hc_scale, true, T_F32, (1), "output_hc_scale.weight") ||
        BIND(&m->output_norm, true, T_F32, (D), "output_norm.weight") ||
        BIND(&m->output, true, T_DENSE, (D, V), "output.weight"))
        goto fail;
    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers) {
        ds4_error_set(err, "out of memory");
        goto fail;
    }
    for (int l = 0; l < hp->n_layer; l++)
        if (bind_layer(b, hp, l, &m->layers[l])) goto fail;

    gguf_str name;
    if (gguf_get_str(f, "general.name", &name))
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name.len < sizeof m->name ? name.len : sizeof m->name - 1),
                 name.ptr);
    for (size_t i = 0; i < gguf_n_tensors(f); i++) m->weights_bytes += gguf_tensor_at(f, i)->nbytes;
    return m;
fail:
    model_free(m);
    return NULL;
}

void model_free(ds4_model *m)
{
    if (!m) return;
    free(m->hp.compress_ratio);
    free(m->hp.swiglu_clamp);
    free(m->layers);
    free(m);
}

void model_describe(const ds4_model *m, ds4_model_info *info)
{
    const ds4_hparams *hp = &m->hp;
    info->n_vocab = hp->n_vocab;
    info->n_layer = hp->n_layer;
    info->n_embd = hp->n_embd;
    info->n_head = hp->n_head;
    info->head_dim = hp->head_dim;
    info->n_expert = hp->n_expert;
    info->n_expert_used = hp->n_expert_used;
    info->n_ctx_train = hp->n_ctx_train > INT32_MAX ? INT32_MAX : (int)hp->n_ctx_train;
    snprintf(info->name, sizeof info->name, "%s", m->name);
    info->identity = gguf_identity(m->file);
    info->weights_bytes = m->weights_bytes;
}

uint64_t model_context_bytes(const ds4_model *m, int n_ctx)
{
    const ds4_hparams *hp = &m->hp;
    state_shape sh = {
        .n_layer = hp->n_layer,
        .compress_ratio = hp->compress_ratio,
        .head_dim = hp->head_dim,
        .n_swa = hp->n_swa,
        .indexer_dim = hp->indexer_head_dim,
        .indexer_ratio = 4,
        .overlap_ratio = 4,
        .n_vocab = hp->n_vocab,
        .cache_elem_bytes = 4,
        .state_elem_bytes = 4,
    };
    state_bytes b;
    state_size(&sh, n_ctx, &b);
    return b.state;
}
