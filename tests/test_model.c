/* Tests of the DS4 binding on the golden model: the hyper-parameters its
 * README states, which optional tensors each layer kind has, and failures
 * (missing tensor, wrong shape, wrong type, inconsistent ratios, bad keys)
 * made by patching bytes of a copy, each naming the tensor or key. */
#include <string.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "tests/test.h"

static uint8_t *golden_copy(size_t *len)
{
    const char *path = test_golden_path("A/model.gguf");
    if (!path) SKIP("golden data not present");
    char *data = test_read_file(path, len);
    CHECK(data != NULL);
    /* test_read_file's buffer may not be aligned for F32 tensors */
    uint8_t *copy = test_alloc(*len + 64);
    uint8_t *aligned = copy + (64 - (uintptr_t)copy % 64) % 64;
    memcpy(aligned, data, *len);
    return aligned;
}

/* Offset just past a length-prefixed string equal to s (its record). */
static size_t find_record(const uint8_t *buf, size_t len, const char *s)
{
    uint64_t n = strlen(s);
    for (size_t i = 0; i + 8 + n <= len; i++)
        if (!memcmp(buf + i, &n, 8) && !memcmp(buf + i + 8, s, n)) return i + 8 + n;
    FAIL("record '%s' not found", s);
}

static void rename_record(uint8_t *buf, size_t len, const char *from, const char *to)
{
    CHECK(strlen(from) == strlen(to));
    size_t at = find_record(buf, len, from);
    memcpy(buf + at - strlen(from), to, strlen(to));
}

static void patch_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void patch_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void patch_tensor_dim(uint8_t *buf, size_t len, const char *name, int dim, uint64_t v)
{
    size_t at = find_record(buf, len, name);
    patch_u64(buf + at + 4 + 8 * dim, v);
}

static void patch_tensor_type(uint8_t *buf, size_t len, const char *name, uint32_t type)
{
    size_t at = find_record(buf, len, name);
    uint32_t nd;
    memcpy(&nd, buf + at, 4);
    patch_u32(buf + at + 4 + 8 * nd, type);
}

static ds4_model *bind_buf(const uint8_t *buf, size_t len, gguf_file **fp, ds4_error *err)
{
    gguf_file *f = gguf_open_memory(buf, len, err);
    CHECK_MSG(f != NULL, "open: %s", err->msg);
    *fp = f;
    return model_bind(f, err);
}

static void expect_bind_error(const uint8_t *buf, size_t len, const char *want)
{
    ds4_error err = { { 0 } };
    gguf_file *f;
    ds4_model *m = bind_buf(buf, len, &f, &err);
    if (m) {
        model_free(m);
        gguf_close(f);
        FAIL("bound a model that should fail with '%s'", want);
    }
    gguf_close(f);
    CHECK_CONTAINS(err.msg, want);
}

TEST(model, binds_golden_model)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    ds4_error err = { { 0 } };
    gguf_file *f;
    ds4_model *m = bind_buf(buf, len, &f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    const ds4_hparams *hp = &m->hp;
    CHECK_EQ_INT(hp->n_layer, 6);
    CHECK_EQ_INT(hp->n_embd, 256);
    CHECK_EQ_INT(hp->n_vocab, 311);
    CHECK_EQ_INT(hp->n_head, 8);
    CHECK_EQ_INT(hp->n_head_kv, 1);
    CHECK_EQ_INT(hp->head_dim, 512);
    CHECK_EQ_INT(hp->n_rot, 64);
    CHECK_EQ_INT(hp->n_nope, 448);
    CHECK_EQ_INT(hp->q_lora, 256);
    CHECK_EQ_INT(hp->o_lora, 128);
    CHECK_EQ_INT(hp->n_out_group, 4);
    CHECK_EQ_INT(hp->heads_per_group, 2);
    CHECK_EQ_INT(hp->group_dim, 1024);
    CHECK_EQ_INT(hp->n_swa, 16);
    CHECK_EQ_INT(hp->n_expert, 16);
    CHECK_EQ_INT(hp->n_expert_used, 6);
    CHECK_EQ_INT(hp->n_ff_exp, 256);
    CHECK_EQ_INT(hp->n_expert_shared, 1);
    CHECK_EQ_INT(hp->shared_ff, 256);
    CHECK_EQ_INT(hp->n_hash_layer, 3);
    CHECK_EQ_INT(hp->n_indexer_head, 4);
    CHECK_EQ_INT(hp->indexer_head_dim, 128);
    CHECK_EQ_INT(hp->indexer_top_k, 8);
    CHECK_EQ_INT(hp->n_hc, 4);
    CHECK_EQ_INT(hp->hc_sinkhorn_iters, 20);
    CHECK_EQ_INT(hp->mix_hc, 24);
    CHECK_EQ_INT(hp->hc_dim, 1024);
    CHECK_EQ_INT(hp->q_dim, 4096);
    CHECK_EQ_INT(hp->n_expert_group, 0);
    CHECK_EQ_INT(hp->n_ctx_train, 1048576);
    CHECK_EQ_INT(hp->yarn_orig_ctx, 65536);
    CHECK_NEAR(hp->expert_weights_scale, 1.5, 0);
    CHECK(hp->expert_weights_norm);
    CHECK_NEAR(hp->rope_base, 10000, 0);
    CHECK_NEAR(hp->compress_rope_base, 160000, 0);
    CHECK_NEAR(hp->yarn_factor, 16, 0);
    CHECK_NEAR(hp->yarn_beta_fast, 32, 0);
    CHECK_NEAR(hp->yarn_beta_slow, 1, 0);
    CHECK_NEAR(hp->rms_eps, 1e-6, 1e-12);
    CHECK_NEAR(hp->hc_eps, 1e-6, 1e-12);
    static const int ratios[6] = { 0, 0, 4, 128, 4, 128 };
    for (int l = 0; l < 6; l++) {
        const ds4_layer *L = &m->layers[l];
        CHECK_EQ_INT(hp->compress_ratio[l], ratios[l]);
        CHECK_EQ_INT(L->ratio, ratios[l]);
        CHECK_NEAR(hp->swiglu_clamp[l], 10.0, 0);
        CHECK(L->hash == (l < 3));
        CHECK(ds4_tensor_present(&L->comp_kv) == (ratios[l] != 0));
        CHECK(ds4_tensor_present(&L->idx_q_b) == (ratios[l] == 4));
        CHECK(ds4_tensor_present(&L->tid2eid) == (l < 3));
        CHECK(ds4_tensor_present(&L->exp_probs_b) == (l >= 3));
        CHECK_EQ_INT(L->ffn_gate_exps.type, GGML_TYPE_IQ2_XXS);
        CHECK_EQ_INT(L->ffn_up_exps.type, GGML_TYPE_IQ2_XXS);
        CHECK_EQ_INT(L->ffn_down_exps.type, GGML_TYPE_Q2_K);
        CHECK_EQ_INT(L->attn_q_b.type, GGML_TYPE_Q8_0);
        CHECK_EQ_INT(L->hc_attn_fn.type, GGML_TYPE_F16);
        CHECK_EQ_INT(L->ffn_gate_exps.ne[2], 16);
        CHECK_EQ_INT(L->ffn_gate_exps.row_bytes, 66);
        if (ratios[l] == 4) CHECK_EQ_INT(L->comp_ape.ne[0], 1024);
        if (ratios[l] == 128) CHECK_EQ_INT(L->comp_ape.ne[1], 128);
    }
    CHECK_STR_EQ(m->layers[3].attn_kv.name, "blk.3.attn_kv.weight");
    CHECK(m->layers[3].attn_kv.data == gguf_get_tensor(f, "blk.3.attn_kv.weight")->data);
    CHECK_EQ_INT(m->token_embd.type, GGML_TYPE_F16);
    CHECK_EQ_INT(m->output.type, GGML_TYPE_Q8_0);
    CHECK_EQ_INT(m->output.ne[1], 311);
    CHECK_STR_EQ(m->name, "ds4-tiny-A");

    uint64_t total = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) total += gguf_tensor_at(f, i)->nbytes;
    CHECK_EQ_INT(m->weights_bytes, total);
    ds4_model_info info;
    memset(&info, 0, sizeof info);
    model_describe(m, &info);
    CHECK_EQ_INT(info.n_layer, 6);
    CHECK_EQ_INT(info.n_vocab, 311);
    CHECK_EQ_INT(info.n_embd, 256);
    CHECK_EQ_INT(info.n_head, 8);
    CHECK_EQ_INT(info.head_dim, 512);
    CHECK_EQ_INT(info.n_expert, 16);
    CHECK_EQ_INT(info.n_expert_used, 6);
    CHECK_EQ_INT(info.n_ctx_train, 1048576);
    CHECK_STR_EQ(info.name, "ds4-tiny-A");
    CHECK(info.identity == gguf_identity(f));
    CHECK_EQ_INT(info.weights_bytes, total);

    /* doc/model.md §9 for 1000 tokens: 6 windows of 16 rows; ratio-4 layers 2 and 4:
     * 250 rows + frontier 2·8·1024 + 250 indexer rows + 2·8·256; ratio-128
     * layers 3 and 5: 7 rows + 2·128·512; logits 311; 1000 token ids. */
    uint64_t floats = 6 * 16 * 512 + 2 * (250 * 512 + 2 * 8 * 1024 + 250 * 128 + 2 * 8 * 256) +
                      2 * (7 * 512 + 2 * 128 * 512) + 311;
    CHECK_EQ_INT(model_context_bytes(m, 1000), floats * 4 + 1000 * 4);
    CHECK(model_context_bytes(m, 2000) > model_context_bytes(m, 1000));
    /* below the window the whole window is still counted (it is allocated) */
    CHECK_EQ_INT(model_context_bytes(m, 8), (6 * 16 * 512 + 2 * (2 * 8 * 1024 + 2 * 8 * 256) + 2 * (2 * 128 * 512) +
                                             2 * (2 * 512 + 2 * 128) + 311) * 4 + 8 * 4);
    model_free(m);
    gguf_close(f);
}

TEST(model, names_missing_tensor)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    rename_record(buf, len, "blk.3.attn_kv.weight", "blk.3.attn_kx.weight");
    expect_bind_error(buf, len, "required tensor 'blk.3.attn_kv.weight' is missing");
}

TEST(model, names_missing_global_tensor)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    rename_record(buf, len, "output_norm.weight", "output_norX.weight");
    expect_bind_error(buf, len, "required tensor 'output_norm.weight' is missing");
}

TEST(model, names_wrong_shape)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    patch_tensor_dim(buf, len, "blk.4.attn_sinks.weight", 0, 4);
    expect_bind_error(buf, len, "tensor 'blk.4.attn_sinks.weight' has shape [4], expected [8]");
}

TEST(model, names_wrong_shape_of_expert_tensor)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    patch_tensor_dim(buf, len, "blk.1.ffn_down_exps.weight", 2, 8);
    expect_bind_error(buf, len, "tensor 'blk.1.ffn_down_exps.weight' has shape [256, 256, 8], expected [256, 256, 16]");
}

TEST(model, names_wrong_type)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    patch_tensor_type(buf, len, "blk.0.attn_norm.weight", GGML_TYPE_F16);
    expect_bind_error(buf, len, "tensor 'blk.0.attn_norm.weight' has type F16, expected F32");
}

/* Layer 3 claims ratio 4: its compressor has the ratio-128 shape. */
TEST(model, rejects_ratio_that_disagrees_with_tensors)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.attention.compress_ratios");
    /* type ARRAY, elem INT32, count 7, then the entries */
    patch_u32(buf + at + 4 + 4 + 8 + 4 * 3, 4);
    expect_bind_error(buf, len, "tensor 'blk.3.attn_compressor_ape.weight' has shape [512, 128], expected [1024, 4]");
}

TEST(model, rejects_compressor_on_ratio_0_layer)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.attention.compress_ratios");
    patch_u32(buf + at + 4 + 4 + 8 + 4 * 2, 0);
    expect_bind_error(buf, len, "tensor 'blk.2.attn_compressor_ape.weight' is present but the layer's compress ratio is 0");
}

TEST(model, rejects_ratio_without_compressor)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.attention.compress_ratios");
    patch_u32(buf + at + 4 + 4 + 8 + 4 * 1, 128);
    expect_bind_error(buf, len, "required tensor 'blk.1.attn_compressor_ape.weight' is missing");
}

TEST(model, rejects_negative_ratio)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.attention.compress_ratios");
    patch_u32(buf + at + 4 + 4 + 8 + 4 * 5, (uint32_t)-4);
    expect_bind_error(buf, len, "'deepseek4.attention.compress_ratios'[5] = -4 is not a valid compress ratio");
}

TEST(model, rejects_ratio_array_shorter_than_layers)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.block_count");
    patch_u32(buf + at + 4, 8);
    expect_bind_error(buf, len, "'deepseek4.attention.compress_ratios' has 7 entries, fewer than block_count 8");
}

TEST(model, rejects_indexer_on_ratio_128_layer)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    /* make layer 4's indexer tensors look like layer 5's */
    rename_record(buf, len, "blk.4.indexer.attn_q_b.weight", "blk.5.indexer.attn_q_b.weight");
    expect_bind_error(buf, len, "required tensor 'blk.4.indexer.attn_q_b.weight' is missing");
}

TEST(model, rejects_stray_indexer_tensor)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    /* layer 1 (ratio 0, bound before layer 4) gets layer 4's indexer projection */
    rename_record(buf, len, "blk.4.indexer.proj.weight", "blk.1.indexer.proj.weight");
    expect_bind_error(buf, len, "tensor 'blk.1.indexer.proj.weight' is present but indexer tensors belong to ratio-4 layers only");
}

TEST(model, rejects_tid2eid_on_non_hash_layer)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.hash_layer_count");
    patch_u32(buf + at + 4, 2);
    /* layer 2 is now a top-k layer: give it a router bias (layer 3's) */
    rename_record(buf, len, "blk.3.exp_probs_b.bias", "blk.2.exp_probs_b.bias");
    expect_bind_error(buf, len, "tensor 'blk.2.ffn_gate_tid2eid.weight' is present but the layer is not a hash-routed layer");
}

TEST(model, rejects_out_of_range_hash_expert)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open_memory(buf, len, &err);
    CHECK(f != NULL);
    const gguf_tensor *t = gguf_get_tensor(f, "blk.1.ffn_gate_tid2eid.weight");
    CHECK(t != NULL);
    size_t off = (size_t)((const uint8_t *)t->data - buf) + 4 * 6 * 10 + 4 * 2;
    gguf_close(f);
    patch_u32(buf + off, 16);
    expect_bind_error(buf, len, "tensor 'blk.1.ffn_gate_tid2eid.weight' entry 62 (token 10) is expert 16, outside 0..15");
}

TEST(model, rejects_missing_router_bias_on_topk_layer)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    rename_record(buf, len, "blk.5.exp_probs_b.bias", "blk.5.exp_probs_b.bia_");
    expect_bind_error(buf, len, "required tensor 'blk.5.exp_probs_b.bias' is missing");
}

TEST(model, names_missing_key)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    rename_record(buf, len, "deepseek4.expert_count", "deepseek4.expert_cnunt");
    expect_bind_error(buf, len, "required metadata key 'deepseek4.expert_count' is missing");
}

TEST(model, names_key_of_wrong_type)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.embedding_length");
    patch_u32(buf + at, GGUF_TYPE_FLOAT32);
    expect_bind_error(buf, len, "metadata key 'deepseek4.embedding_length' has type FLOAT32, expected an integer");
    buf = golden_copy(&len);
    at = find_record(buf, len, "deepseek4.expert_weights_norm");
    patch_u32(buf + at, GGUF_TYPE_UINT8);
    expect_bind_error(buf, len, "metadata key 'deepseek4.expert_weights_norm' has type UINT8, expected BOOL");
    buf = golden_copy(&len);
    at = find_record(buf, len, "deepseek4.rope.freq_base");
    patch_u32(buf + at, GGUF_TYPE_INT32); /* same width, read as an integer: accepted as a number */
    ds4_error err = { { 0 } };
    gguf_file *f;
    ds4_model *m = bind_buf(buf, len, &f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    model_free(m);
    gguf_close(f);
}

TEST(model, rejects_other_architecture)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "general.architecture");
    memcpy(buf + at + 4 + 8, "llama", 5);
    expect_bind_error(buf, len, "general.architecture is 'llamaeek4', expected 'deepseek4'");
}

TEST(model, rejects_several_kv_heads)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.attention.head_count_kv");
    patch_u32(buf + at + 4, 2);
    expect_bind_error(buf, len, "'deepseek4.attention.head_count_kv' = 2 is outside 1..1");
}

TEST(model, rejects_group_routing)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.expert_group_count");
    patch_u32(buf + at + 4, 8);
    expect_bind_error(buf, len, "'deepseek4.expert_group_count' = 8 is outside 0..0");
}

TEST(model, rejects_overflowing_derived_dimensions)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    patch_u32(buf + find_record(buf, len, "deepseek4.attention.head_count") + 4, 65536);
    patch_u32(buf + find_record(buf, len, "deepseek4.attention.key_length") + 4, 65536);
    patch_u32(buf + find_record(buf, len, "deepseek4.attention.value_length") + 4, 65536);
    expect_bind_error(buf, len, "derived dimensions overflow");
}

/* Token ids index the embedding and the logits: a tokenizer with more or
 * fewer entries than vocab_size is refused before anything reads a row. */
TEST(model, rejects_tokenizer_that_disagrees_with_vocab_size)
{
    size_t len;
    uint8_t *buf = golden_copy(&len);
    size_t at = find_record(buf, len, "deepseek4.vocab_size");
    uint32_t type;
    memcpy(&type, buf + at, 4);
    CHECK_EQ_INT(type, GGUF_TYPE_UINT32);
    patch_u32(buf + at + 4, 312);
    expect_bind_error(buf, len, "tokenizer.ggml.tokens has 311 entries but deepseek4.vocab_size is 312");
    patch_u32(buf + at + 4, 300);
    expect_bind_error(buf, len, "tokenizer.ggml.tokens has 311 entries but deepseek4.vocab_size is 300");
}
