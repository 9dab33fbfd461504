/* Tests of the GGUF writer and the fixture generator: generated files load
 * and bind, carry the golden model's layout, are deterministic, have sanely
 * scaled weights, and the binding errors they provoke name the tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/gguf_write.h"
#include "engine/testkit/mkmodel.h"
#include "engine/model.h"
#include "engine/npm_vocab.h"
#include "engine/quant.h"
#include "tests/test.h"

typedef struct {
    void *buf;
    size_t len;
    gguf_file *f;
    ds4_model *m;
} fixture;

static void fixture_free(fixture *x)
{
    model_free(x->m);
    gguf_close(x->f);
    free(x->buf);
}

static void make(const mk_spec *s, fixture *x)
{
    ds4_error err = { { 0 } };
    memset(x, 0, sizeof *x);
    CHECK_MSG(mk_write_memory(s, &x->buf, &x->len, &err) == 0, "write: %s", err.msg);
    x->f = gguf_open_memory(x->buf, x->len, &err);
    CHECK_MSG(x->f != NULL, "open: %s", err.msg);
    x->m = model_bind(x->f, &err);
}

/* Generates and expects the binding to fail with `want`. */
static void expect_bind_error(const mk_spec *s, const char *want)
{
    fixture x;
    ds4_error err = { { 0 } };
    memset(&x, 0, sizeof x);
    CHECK_MSG(mk_write_memory(s, &x.buf, &x.len, &err) == 0, "write: %s", err.msg);
    x.f = gguf_open_memory(x.buf, x.len, &err);
    CHECK_MSG(x.f != NULL, "open: %s", err.msg);
    x.m = model_bind(x.f, &err);
    bool bound = x.m != NULL;
    fixture_free(&x);
    CHECK_MSG(!bound, "bound a model that should fail with '%s'", want);
    CHECK_CONTAINS(err.msg, want);
}

TEST(mkmodel, writer_round_trip)
{
    gguf_writer *w = gguf_writer_new(64);
    ds4_error err = { { 0 } };
    gguf_writer_str(w, "general.architecture", "x");
    gguf_writer_u32(w, "a.u32", 7);
    gguf_writer_i32(w, "a.i32", -7);
    gguf_writer_u64(w, "a.u64", 1ull << 40);
    gguf_writer_f32(w, "a.f32", 0.25f);
    gguf_writer_bool(w, "a.bool", true);
    int32_t ints[3] = { 1, -2, 3 };
    gguf_writer_array(w, "a.ints", GGUF_TYPE_INT32, ints, 3);
    const char *strs[2] = { "one", "" };
    gguf_writer_str_array(w, "a.strs", strs, NULL, 2);
    CHECK(gguf_writer_tensor(w, "t.f32", GGML_TYPE_F32, 2, (const uint64_t[]){ 3, 2 }, &err) == 0);
    CHECK(gguf_writer_tensor(w, "t.q8", GGML_TYPE_Q8_0, 1, (const uint64_t[]){ 64 }, &err) == 0);
    CHECK(gguf_writer_tensor(w, "bad", GGML_TYPE_Q8_0, 1, (const uint64_t[]){ 48 }, &err) != 0);
    CHECK_CONTAINS(err.msg, "not a multiple of the Q8_0 block size");
    CHECK_EQ_INT(gguf_writer_data_bytes(w), 64 + 128);
    CHECK(gguf_writer_open_memory(w, &err) == 0);
    float v[6] = { 1, 2, 3, 4, 5, 6 };
    CHECK(gguf_writer_write(w, v, 10, &err) == 0); /* chunks split anywhere */
    CHECK(gguf_writer_write(w, (char *)v + 10, 14, &err) == 0);
    uint8_t q8[68];
    memset(q8, 0, sizeof q8);
    CHECK(gguf_writer_close(w, NULL, NULL, &err) != 0);
    CHECK_CONTAINS(err.msg, "tensor 't.q8' is missing 68 bytes");
    CHECK(gguf_writer_write(w, q8, sizeof q8, &err) == 0);
    CHECK(gguf_writer_write(w, q8, 1, &err) != 0);
    void *buf;
    size_t len;
    CHECK(gguf_writer_close(w, &buf, &len, &err) == 0);
    gguf_writer_free(w);

    gguf_file *f = gguf_open_memory(buf, len, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    CHECK_EQ_INT(gguf_alignment(f), 64); /* the writer added general.alignment */
    uint32_t u;
    int32_t i;
    uint64_t u64;
    float fl;
    bool b;
    CHECK(gguf_get_u32(f, "a.u32", &u) && u == 7);
    CHECK(gguf_get_i32(f, "a.i32", &i) && i == -7);
    CHECK(gguf_get_u64(f, "a.u64", &u64) && u64 == 1ull << 40);
    CHECK(gguf_get_f32(f, "a.f32", &fl) && fl == 0.25f);
    CHECK(gguf_get_bool(f, "a.bool", &b) && b);
    gguf_array a;
    int64_t iv;
    CHECK(gguf_get_array(f, "a.ints", &a) && a.n == 3 && gguf_array_int(&a, 1, &iv) && iv == -2);
    CHECK(gguf_get_array(f, "a.strs", &a) && gguf_str_eq(gguf_array_str(&a, 0), "one"));
    const gguf_tensor *t = gguf_get_tensor(f, "t.f32");
    CHECK(t && t->nbytes == 24 && memcmp(t->data, v, 24) == 0);
    CHECK(gguf_get_tensor(f, "t.q8") != NULL);
    gguf_close(f);
    free(buf);
}

TEST(mkmodel, writer_file_is_atomic)
{
    const char *path = test_tmp_path("w.gguf");
    ds4_error err = { { 0 } };
    gguf_writer *w = gguf_writer_new(0);
    CHECK(gguf_writer_tensor(w, "t", GGML_TYPE_F32, 1, (const uint64_t[]){ 4 }, &err) == 0);
    CHECK(gguf_writer_open(w, path, &err) == 0);
    gguf_writer_free(w); /* abandoned: nothing at the destination, no temporary left */
    char *out;
    CHECK(test_runf(&out, "ls -A %s", test_tmpdir()) == 0);
    CHECK_STR_EQ(out, "");
    CHECK(gguf_writer_open(w = gguf_writer_new(0), "/nonexistent-dir/x.gguf", &err) != 0);
    CHECK_CONTAINS(err.msg, "/nonexistent-dir/x.gguf");
    gguf_writer_free(w);
}

TEST(mkmodel, tiny_binds_with_the_golden_layout)
{
    mk_spec s;
    mk_spec_tiny(&s);
    fixture x;
    make(&s, &x);
    CHECK(x.m != NULL);
    const ds4_hparams *hp = &x.m->hp;
    CHECK_EQ_INT(hp->n_layer, 6);
    CHECK_EQ_INT(hp->n_vocab, 311);
    CHECK_EQ_INT(hp->n_swa, 16);
    static const int ratios[6] = { 0, 0, 4, 128, 4, 128 };
    for (int l = 0; l < 6; l++) CHECK_EQ_INT(hp->compress_ratio[l], ratios[l]);
    CHECK_EQ_INT(gguf_n_tensors(x.f), 178);

    const char *golden = test_golden_path("A/model.gguf");
    if (golden) {
        ds4_error err = { { 0 } };
        gguf_file *g = gguf_open(golden, &err);
        CHECK(g != NULL);
        /* same keys with the same types, same tensors with the same types and shapes */
        CHECK_EQ_INT(gguf_n_kv(g), gguf_n_kv(x.f));
        for (size_t i = 0; i < gguf_n_kv(g); i++) {
            gguf_str k = gguf_kv_key(g, i);
            char key[128];
            snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
            int64_t j = gguf_find_key(x.f, key);
            CHECK_MSG(j >= 0, "key %s missing", key);
            CHECK_MSG(gguf_kv_type(x.f, (size_t)j) == gguf_kv_type(g, i), "key %s type", key);
        }
        for (size_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *a = gguf_tensor_at(g, i), *b = gguf_tensor_at(x.f, i);
            CHECK_STR_EQ(b->name, a->name); /* same order too */
            CHECK_MSG(a->type == b->type && a->n_dims == b->n_dims && !memcmp(a->ne, b->ne, sizeof a->ne), "%s",
                      a->name);
        }
        /* the tokenizer: identical byte tokens and specials */
        gguf_array ta, tb;
        CHECK(gguf_get_array(g, "tokenizer.ggml.tokens", &ta) && gguf_get_array(x.f, "tokenizer.ggml.tokens", &tb));
        for (uint64_t i = 0; i < 256; i++) {
            gguf_str sa = gguf_array_str(&ta, i), sb = gguf_array_str(&tb, i);
            CHECK(sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len));
        }
        for (uint64_t i = 304; i < 311; i++) {
            gguf_str sa = gguf_array_str(&ta, i), sb = gguf_array_str(&tb, i);
            CHECK(sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len));
        }
        CHECK(gguf_identity(g) != gguf_identity(x.f)); /* same shape, other weights */
        gguf_close(g);
    }
    fixture_free(&x);
}

TEST(mkmodel, tiny_vocabulary_merges_are_consistent)
{
    mk_vocab v;
    ds4_error err = { { 0 } };
    CHECK(mk_vocab_tiny(&v, &err) == 0);
    CHECK_EQ_INT(v.n, 311);
    CHECK_EQ_INT(v.n_merges, 48);
    for (size_t i = 0; i < v.n_merges; i++) {
        const char *m = v.merges[i], *sp = strchr(m, ' ');
        CHECK(sp && !strchr(sp + 1, ' '));
        char a[64], b[64], ab[128];
        snprintf(a, sizeof a, "%.*s", (int)(sp - m), m);
        snprintf(b, sizeof b, "%s", sp + 1);
        snprintf(ab, sizeof ab, "%s%s", a, b);
        bool fa = false, fb = false, fab = false;
        for (size_t t = 0; t < 256 + i; t++) {
            fa |= !strcmp(v.tokens[t], a);
            fb |= !strcmp(v.tokens[t], b);
        }
        fab = !strcmp(v.tokens[256 + i], ab);
        CHECK_MSG(fa && fb && fab, "merge %zu '%s'", i, m);
    }
    for (size_t i = 0; i < v.n; i++)
        for (size_t j = i + 1; j < v.n; j++) CHECK_MSG(strcmp(v.tokens[i], v.tokens[j]), "tokens %zu, %zu", i, j);
    mk_vocab_free(&v);
}

TEST(mkmodel, deterministic_per_seed)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 3;
    ds4_error err = { { 0 } };
    void *a, *b, *c;
    size_t la, lb, lc;
    CHECK(mk_write_memory(&s, &a, &la, &err) == 0);
    CHECK(mk_write_memory(&s, &b, &lb, &err) == 0);
    s.seed = 2;
    CHECK(mk_write_memory(&s, &c, &lc, &err) == 0);
    CHECK(la == lb && memcmp(a, b, la) == 0);
    CHECK(la == lc && memcmp(a, c, la) != 0);
    gguf_file *fa = gguf_open_memory(a, la, &err), *fc = gguf_open_memory(c, lc, &err);
    CHECK(fa && fc);
    CHECK(gguf_identity(fa) != gguf_identity(fc)); /* other weights, other identity */
    gguf_close(fa);
    gguf_close(fc);
    free(a);
    free(b);
    free(c);
}

static double rms_of(const gguf_tensor *t, uint64_t max_rows, float *maxabs)
{
    uint64_t rows = t->n_elements / t->ne[0];
    if (rows > max_rows) rows = max_rows;
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    double s = 0;
    *maxabs = 0;
    for (uint64_t r = 0; r < rows; r++) {
        quant_dequant_row(t->type, (const uint8_t *)t->data + r * t->row_bytes, row, (int64_t)t->ne[0]);
        for (uint64_t j = 0; j < t->ne[0]; j++) {
            CHECK_MSG(isfinite(row[j]), "%s: non-finite value", t->name);
            s += (double)row[j] * row[j];
            if (fabsf(row[j]) > *maxabs) *maxabs = fabsf(row[j]);
        }
    }
    free(row);
    return sqrt(s / (double)(rows * t->ne[0]));
}

TEST(mkmodel, weights_are_finite_and_scaled)
{
    mk_spec s;
    mk_spec_tiny(&s);
    fixture x;
    make(&s, &x);
    CHECK(x.m != NULL);
    for (size_t i = 0; i < gguf_n_tensors(x.f); i++) {
        const gguf_tensor *t = gguf_tensor_at(x.f, i);
        if (t->type == GGML_TYPE_I32) continue;
        float mx;
        double r = rms_of(t, 4096, &mx);
        CHECK_MSG(r > 0, "%s is all zeros", t->name);
    }
    float mx;
    const ds4_layer *L = &x.m->layers[3];
    /* dense projections: rms ≈ c/√in */
    const gguf_tensor *qb = gguf_get_tensor(x.f, L->attn_q_b.name);
    CHECK_NEAR(rms_of(qb, 1 << 20, &mx) * sqrt(256.0), 1.0, 0.05);
    CHECK_NEAR(rms_of(gguf_get_tensor(x.f, "output.weight"), 1 << 20, &mx) * sqrt(256.0), 2.5, 0.15);
    /* quant-block experts: rms near 1/√in, with hot rows well above it */
    double ge = rms_of(gguf_get_tensor(x.f, L->ffn_gate_exps.name), 1 << 20, &mx) * sqrt(256.0);
    CHECK_MSG(ge > 0.9 && ge < 1.4, "gate experts rms·√in = %g", ge);
    CHECK_MSG(mx > 8 * 0.0625f, "gate experts max %g: no hot rows", mx);
    double de = rms_of(gguf_get_tensor(x.f, L->ffn_down_exps.name), 1 << 20, &mx) * sqrt(256.0);
    CHECK_MSG(de > 0.85 && de < 1.25, "down experts rms·√in = %g", de);
    /* norm weights near 1, HC scales in (0.3, 0.8) */
    float nw[256];
    memcpy(nw, L->attn_norm.data, sizeof nw);
    for (int i = 0; i < 256; i++) CHECK(nw[i] >= 0.7f && nw[i] <= 1.3f);
    float sc[3];
    memcpy(sc, L->hc_attn_scale.data, sizeof sc);
    for (int i = 0; i < 3; i++) CHECK(sc[i] >= 0.3f && sc[i] <= 0.8f);
    /* hash routing: 6 distinct valid experts per token */
    const int32_t *tid = x.m->layers[0].tid2eid.data;
    for (int tok = 0; tok < 311; tok++)
        for (int a = 0; a < 6; a++) {
            CHECK(tid[6 * tok + a] >= 0 && tid[6 * tok + a] < 16);
            for (int b = a + 1; b < 6; b++) CHECK(tid[6 * tok + a] != tid[6 * tok + b]);
        }
    fixture_free(&x);
}

TEST(mkmodel, explicit_shape_binds)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 3;
    s.n_embd = 512;
    s.n_head = 4;
    s.head_dim = 128;
    s.n_rot = 32;
    s.q_lora = 64;
    s.o_lora = 64;
    s.n_out_group = 2;
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = 256;
    s.n_hash_layer = 1;
    s.n_swa = 8;
    s.n_indexer_head = 2;
    s.indexer_head_dim = 64;
    s.indexer_top_k = 4;
    s.n_hc = 2;
    s.hc_sinkhorn_iters = 5;
    s.ratios[0] = 0;
    s.ratios[1] = 4;
    s.ratios[2] = 16;
    CHECK(mk_set_quant(&s, "q4") == 0);
    CHECK(mk_set_quant(&s, "q3") != 0);
    fixture x;
    make(&s, &x);
    ds4_error err = { { 0 } };
    if (!x.m) {
        x.m = model_bind(x.f, &err);
        FAIL("bind: %s", err.msg);
    }
    const ds4_hparams *hp = &x.m->hp;
    CHECK_EQ_INT(hp->n_embd, 512);
    CHECK_EQ_INT(hp->n_hc, 2);
    CHECK_EQ_INT(hp->mix_hc, 8);
    CHECK_EQ_INT(hp->group_dim, 256);
    CHECK_EQ_INT(hp->compress_ratio[2], 16);
    CHECK_EQ_INT(x.m->layers[2].comp_ape.ne[1], 16);
    CHECK_EQ_INT(x.m->layers[2].comp_ape.ne[0], 128);
    CHECK(!ds4_tensor_present(&x.m->layers[2].idx_q_b));
    CHECK_EQ_INT(x.m->layers[1].idx_q_b.ne[1], 128);
    for (int l = 0; l < 3; l++) {
        CHECK_EQ_INT(x.m->layers[l].ffn_gate_exps.type, GGML_TYPE_Q4_K);
        CHECK_EQ_INT(x.m->layers[l].ffn_down_exps.type, GGML_TYPE_Q4_K);
    }
    fixture_free(&x);
}

TEST(mkmodel, rejects_unwritable_shapes)
{
    mk_spec s;
    ds4_error err = { { 0 } };
    mk_spec_tiny(&s);
    s.n_embd = 300;
    CHECK(mk_validate(&s, &err) != 0);
    CHECK_CONTAINS(err.msg, "--embd 300 must be a multiple of 256");
    mk_spec_tiny(&s);
    s.n_out_group = 3;
    CHECK(mk_validate(&s, &err) != 0);
    CHECK_CONTAINS(err.msg, "multiple of --out-groups");
    mk_spec_tiny(&s);
    s.n_expert_used = 17;
    CHECK(mk_validate(&s, &err) != 0);
    mk_spec_tiny(&s);
    s.n_layer = 0;
    CHECK(mk_validate(&s, &err) != 0);
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_JSON;
    CHECK(mk_validate(&s, &err) != 0);
    CHECK_CONTAINS(err.msg, "tokenizer.json");
}

TEST(mkmodel, binding_errors_name_the_tensor)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.omit_tensor = "blk.2.indexer_compressor_norm.weight";
    expect_bind_error(&s, "required tensor 'blk.2.indexer_compressor_norm.weight' is missing");
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.retype_tensor = "blk.1.ffn_down_exps.weight";
    s.retype_to = GGML_TYPE_F16;
    expect_bind_error(&s, "tensor 'blk.1.ffn_down_exps.weight' has type F16, expected IQ2_XXS, Q2_K or Q4_K");
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.retype_tensor = "blk.3.ffn_up_exps.weight";
    s.retype_to = GGML_TYPE_Q4_K;
    expect_bind_error(&s, "'blk.3.ffn_up_exps.weight' has type Q4_K but 'blk.3.ffn_gate_exps.weight' has IQ2_XXS");
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.retype_tensor = "output.weight";
    s.retype_to = GGML_TYPE_Q2_K;
    expect_bind_error(&s, "tensor 'output.weight' has type Q2_K, expected F32, F16, BF16 or Q8_0");
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.retype_tensor = "token_embd.weight";
    s.retype_to = GGML_TYPE_BF16; /* accepted: any dense type */
    fixture x;
    make(&s, &x);
    CHECK(x.m != NULL);
    fixture_free(&x);
}

/* A synthetic tokenizer.json with ids 0..127999, a few merges and V3-style
 * added tokens. */
static const char *write_tokenizer_json(void)
{
    const char *path = test_tmp_path("tokenizer.json");
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs("{\"model\":{\"type\":\"BPE\",\"vocab\":{", f);
    for (int i = 0; i < 128000; i++) fprintf(f, "%s\"w%d\":%d", i ? "," : "", i, i);
    fputs("},\"merges\":[\"w 1\",[\"w1\",\"2\"]]},\"added_tokens\":["
          "{\"id\":0,\"content\":\"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>\",\"special\":true},"
          "{\"id\":128000,\"content\":\"<extra0>\",\"special\":true},"
          "{\"id\":128805,\"content\":\"<|EOT|>\",\"special\":false},"
          "{\"id\":5,\"content\":\"<think>\",\"special\":true}]}",
          f);
    fclose(f);
    return path;
}

TEST(mkmodel, json_vocabulary_gets_the_v4_layout)
{
    const char *path = write_tokenizer_json();
    mk_vocab v;
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_vocab_from_json(&v, path, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(v.n, 129280);
    CHECK_STR_EQ(v.tokens[7], "w7");
    CHECK_STR_EQ(v.tokens[127999], "w127999");
    CHECK_STR_EQ(v.tokens[1], "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    CHECK_STR_EQ(v.tokens[128803], "<\xef\xbd\x9cUser\xef\xbd\x9c>");
    CHECK_STR_EQ(v.tokens[128804], "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>");
    CHECK_STR_EQ(v.tokens[128821], "<think>");
    CHECK_STR_EQ(v.tokens[128822], "</think>");
    CHECK_STR_EQ(v.tokens[128825], "\xef\xbd\x9c" "DSML\xef\xbd\x9c");
    CHECK_STR_EQ(v.tokens[128000], "<extra0>");
    CHECK_STR_EQ(v.tokens[128805], "<|EOT|>");
    CHECK_EQ_INT(v.types[128805], 4);
    CHECK_EQ_INT(v.types[128821], 3);
    CHECK_EQ_INT(v.types[100], 1);
    /* "<think>" also at a BPE id: that copy became a placeholder */
    CHECK_CONTAINS(v.tokens[5], "duplicate");
    CHECK_EQ_INT(v.n_merges, 2);
    CHECK_STR_EQ(v.merges[0], "w 1");
    CHECK_STR_EQ(v.merges[1], "w1 2");
    /* every token unique */
    size_t dup = 0;
    for (size_t i = 128000; i < v.n; i++)
        for (size_t j = i + 1; j < v.n; j++)
            if (v.lens[i] == v.lens[j] && !memcmp(v.tokens[i], v.tokens[j], v.lens[i])) dup++;
    CHECK_EQ_INT(dup, 0);
    mk_vocab_free(&v);
}

TEST(mkmodel, json_vocabulary_errors)
{
    mk_vocab v;
    ds4_error err = { { 0 } };
    const char *p = test_tmp_path("bad.json");
    const char *j1 = "{\"model\":{}}", *j2 = "{nope", *j3 = "{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}";
    test_write_file(p, j1, strlen(j1));
    CHECK(mk_vocab_from_json(&v, p, &err) != 0);
    CHECK_CONTAINS(err.msg, "not a BPE tokenizer.json");
    test_write_file(p, j2, strlen(j2));
    CHECK(mk_vocab_from_json(&v, p, &err) != 0);
    CHECK_CONTAINS(err.msg, p);
    test_write_file(p, j3, strlen(j3));
    CHECK(mk_vocab_from_json(&v, p, &err) != 0);
    CHECK_CONTAINS(err.msg, "no token with id 2"); /* 0 and 1 are the V4 BOS/EOS */
}

TEST(mkmodel, cli_writes_a_loadable_file)
{
    const char *out = test_tmp_path("cli.gguf");
    char *log;
    int rc = test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --layers 4 --seed 7 -o %s", test_bindir(), out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, log);
    CHECK_CONTAINS(log, "wrote");
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open(out, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    ds4_model *m = model_bind(f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK_EQ_INT(m->hp.n_layer, 4);
    CHECK_EQ_INT(m->hp.compress_ratio[3], 128);
    CHECK_EQ_INT(m->hp.n_hash_layer, 3);
    model_free(m);
    gguf_close(f);

    rc = test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --layers 2 -q -o %s", test_bindir(), out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, log);
    f = gguf_open(out, &err);
    CHECK(f != NULL);
    m = model_bind(f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK_EQ_INT(m->hp.n_hash_layer, 2);
    model_free(m);
    gguf_close(f);

    rc = test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --layers 3 --ratios 0,16,4 --quant q4 --experts 8 "
                         "--experts-used 2 --embd 512 -q -o %s", test_bindir(), out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, log);
    CHECK_STR_EQ(log, "");
    f = gguf_open(out, &err);
    CHECK(f != NULL);
    m = model_bind(f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK_EQ_INT(m->hp.compress_ratio[1], 16);
    CHECK_EQ_INT(m->hp.n_embd, 512);
    CHECK_EQ_INT(m->layers[0].ffn_up_exps.type, GGML_TYPE_Q4_K);
    model_free(m);
    gguf_close(f);
}

TEST(mkmodel, cli_usage_errors)
{
    char *log;
    const char *bin = test_bindir();
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --help", bin), 0);
    CHECK_CONTAINS(log, "--preset");
    CHECK_CONTAINS(log, "--ratios");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab", bin), 2);
    CHECK_CONTAINS(log, "no output file");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --preset huge -o x", bin), 2);
    CHECK_CONTAINS(log, "unknown preset 'huge'");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --quant q3 -o x", bin), 2);
    CHECK_CONTAINS(log, "--quant wants q2 or q4");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --ratios 0,4 -o x", bin), 2);
    CHECK_CONTAINS(log, "--ratios has 2 entries for 6 layers");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --embd 300 -o x", bin), 2);
    CHECK_CONTAINS(log, "--embd 300 must be a multiple of 256");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --layers abc -o x", bin), 2);
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --tiny-vocab --vocab v.json -o x", bin), 2);
    CHECK_CONTAINS(log, "exclude each other");
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --bogus", bin), 2);
    CHECK_EQ_INT(test_runf(&log, "%s/ds4cl-mkmodel --vocab /nonexistent.json -o %s", bin, test_tmp_path("x.gguf")), 1);
    CHECK_CONTAINS(log, "/nonexistent.json");
}

/* Flash widths at two layers (one ratio-4, one ratio-128) and a few experts:
 * the big shapes bind without the multi-GB expert tensors. */
TEST(mkmodel, flash_widths_bind)
{
    mk_spec s;
    mk_spec_flash_width(&s, 2);
    s.vocab = MK_VOCAB_TINY;
    s.n_expert = 8;
    s.ratios[0] = 4;
    s.ratios[1] = 128;
    const char *path = test_tmp_path("flashw.gguf");
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    gguf_file *f = gguf_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    ds4_model *m = model_bind(f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK_EQ_INT(m->hp.q_dim, 32768);
    CHECK_EQ_INT(m->hp.group_dim, 4096);
    CHECK_EQ_INT(m->layers[0].attn_output_a.ne[1], 8192);
    CHECK_EQ_INT(m->layers[0].comp_kv.ne[1], 1024);
    CHECK_EQ_INT(m->layers[0].idx_q_b.ne[1], 8192);
    CHECK_EQ_INT(m->layers[1].comp_ape.ne[1], 128);
    CHECK_EQ_INT(m->layers[0].ffn_gate_exps.row_bytes, 1056);
    CHECK_EQ_INT(m->layers[0].ffn_down_exps.row_bytes, 672);
    CHECK_EQ_INT(m->layers[0].attn_q_b.row_bytes, 1088);
    model_free(m);
    gguf_close(f);
}

/* No vocabulary flag: the npm DeepSeek V3 tokenizer in the V4 layout. */
TEST(mkmodel, default_vocabulary_is_the_npm_tokenizer)
{
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node/npm not installed");
    char json[4096];
    ds4_error err = { { 0 } };
    if (npm_tokenizer_json_path(json, sizeof json, &err) != 0) SKIP("npm tokenizer unavailable: %s", err.msg);
    const char *out = test_tmp_path("npm.gguf");
    char *log;
    int rc = test_runf(&log, "%s/ds4cl-mkmodel --layers 1 --ratios 0 --experts 2 --experts-used 1 -q -o %s",
                       test_bindir(), out);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, log);
    gguf_file *f = gguf_open(out, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    ds4_model *m = model_bind(f, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    CHECK_EQ_INT(m->hp.n_vocab, 129280);
    gguf_array a;
    CHECK(gguf_get_array(f, "tokenizer.ggml.merges", &a));
    CHECK_EQ_INT(a.n, 127741);
    CHECK(gguf_get_array(f, "tokenizer.ggml.tokens", &a));
    CHECK(gguf_str_eq(gguf_array_str(&a, 128803), "<\xef\xbd\x9cUser\xef\xbd\x9c>"));
    CHECK(gguf_str_eq(gguf_array_str(&a, 128821), "<think>"));
    CHECK(gguf_str_eq(gguf_array_str(&a, 223), "\xc4\xa0")); /* " " in byte-level form */
    model_free(m);
    gguf_close(f);
}

/* Runs the CPU engine over n tokens of a generated file: every logit is
 * finite, each position's logits spread out (not flat), and they change
 * from position to position. */
static void check_runs(const mk_spec *s, int n, const char *what)
{
    const char *path = test_tmp_path("run-%s.gguf", what);
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(s, path, NULL, NULL, &err) == 0, "%s: %s", what, err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2 };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s: %s", what, err.msg);
    ds4_session *ss = ds4_session_open(e, n + 8, &err);
    CHECK_MSG(ss != NULL, "%s: %s", what, err.msg);
    int V = ds4_vocab_size(ds4_engine_tokenizer(e));
    float *prev = test_alloc((size_t)V * 4);
    int changed = 0, argmaxes[2] = { -1, -1 }, distinct_argmax = 0;
    for (int p = 0; p < n; p++) {
        int32_t id = (int32_t)((p * 37 + 11) % (V < 256 ? V : 256));
        CHECK_MSG(ds4_session_eval(ss, id, NULL, &err) == DS4_OK, "%s: %s", what, err.msg);
        const float *lg = ds4_session_logits(ss);
        double mean = 0, sq = 0;
        int am = 0;
        for (int v = 0; v < V; v++) {
            CHECK_MSG(isfinite(lg[v]), "%s: logit %d at position %d is %g", what, v, p, lg[v]);
            mean += lg[v];
            if (lg[v] > lg[am]) am = v;
        }
        mean /= V;
        for (int v = 0; v < V; v++) sq += (lg[v] - mean) * (lg[v] - mean);
        double sd = sqrt(sq / V);
        CHECK_MSG(sd > 0.1 && sd < 1e3, "%s: logits at position %d have a spread of %g", what, p, sd);
        if (p > 0 && memcmp(prev, lg, (size_t)V * 4) != 0) changed++;
        memcpy(prev, lg, (size_t)V * 4);
        if (am != argmaxes[0] && am != argmaxes[1]) distinct_argmax++;
        argmaxes[p % 2] = am;
    }
    CHECK_EQ_INT(changed, n - 1);
    CHECK_MSG(distinct_argmax > 1, "%s: the greedy choice never changes", what);
    ds4_session_close(ss);
    ds4_engine_close(e);
}

TEST(mkmodel, generated_models_run_with_finite_varying_logits)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 7;
    check_runs(&s, 40, "tiny");
    /* another shape and the q4 experts, past the window and a ratio-16 row */
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.ratios[0] = 0;
    s.ratios[1] = 4;
    s.ratios[2] = 128;
    s.ratios[3] = 16;
    s.n_expert = 8;
    s.n_hash_layer = 1;
    CHECK(mk_set_quant(&s, "q4") == 0);
    check_runs(&s, 40, "q4");
}
