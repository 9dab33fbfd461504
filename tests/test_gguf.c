/* Tests of the GGUF reader: a valid file read back field by field, every
 * malformed-input class of doc/model.md §12.1 rejected with a message naming
 * the problem, the golden model, and the identity hash. */
#include <stdio.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/gguf_util.h"
#include "tests/test.h"

/* Opens b's bytes and expects failure with a message containing `want`. */
static void expect_reject(gbuf *b, const char *want)
{
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open_memory(b->p, b->n, &err);
    if (f) {
        gguf_close(f);
        gb_free(b);
        FAIL("accepted a file that should fail with '%s'", want);
    }
    char msg[sizeof err.msg];
    memcpy(msg, err.msg, sizeof msg);
    gb_free(b);
    CHECK_CONTAINS(msg, want);
}

static gguf_file *open_ok(gbuf *b)
{
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open_memory(b->p, b->n, &err);
    CHECK_MSG(f != NULL, "open failed: %s", err.msg);
    return f;
}

TEST(gguf, reads_minimal_file)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    gguf_file *f = open_ok(&b);
    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK_EQ_INT(gguf_n_kv(f), 6);
    CHECK_EQ_INT(gguf_n_tensors(f), 2);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    CHECK_EQ_INT(gguf_data_offset(f) % 32, 0);
    CHECK_EQ_INT(gguf_size(f), b.n);

    gguf_str s;
    CHECK(gguf_get_str(f, "general.name", &s));
    CHECK(gguf_str_eq(s, "minimal"));
    uint32_t u;
    CHECK(gguf_get_u32(f, "test.count", &u));
    CHECK_EQ_INT(u, 42);
    int32_t i32;
    uint64_t u64;
    CHECK(!gguf_get_i32(f, "test.count", &i32)); /* exact type only */
    CHECK(!gguf_get_u64(f, "test.count", &u64));
    CHECK(!gguf_get_u32(f, "no.such.key", &u));
    CHECK_EQ_INT(gguf_find_key(f, "no.such.key"), -1);
    int64_t ki = gguf_find_key(f, "test.count");
    CHECK_EQ_INT(ki, 3);
    CHECK(gguf_kv_type(f, (size_t)ki) == GGUF_TYPE_UINT32);
    int64_t iv;
    double dv;
    CHECK(gguf_kv_as_int(f, (size_t)ki, &iv));
    CHECK_EQ_INT(iv, 42);
    CHECK(gguf_kv_as_float(f, (size_t)ki, &dv));
    CHECK_NEAR(dv, 42.0, 0);
    CHECK(gguf_str_eq(gguf_kv_key(f, (size_t)ki), "test.count"));

    gguf_array a;
    CHECK(gguf_get_array(f, "test.ints", &a));
    CHECK(a.elem_type == GGUF_TYPE_INT32);
    CHECK_EQ_INT(a.n, 3);
    CHECK(gguf_array_int(&a, 0, &iv) && iv == 3);
    CHECK(gguf_array_int(&a, 1, &iv) && iv == -1);
    CHECK(gguf_array_int(&a, 2, &iv) && iv == 7);
    CHECK(!gguf_array_int(&a, 3, &iv));
    CHECK(gguf_array_float(&a, 2, &dv) && dv == 7.0);
    CHECK(gguf_array_str(&a, 0).ptr == NULL);

    CHECK(gguf_get_array(f, "test.strings", &a));
    CHECK(a.elem_type == GGUF_TYPE_STRING);
    CHECK_EQ_INT(a.n, 3);
    CHECK(gguf_str_eq(gguf_array_str(&a, 0), "x"));
    CHECK(gguf_str_eq(gguf_array_str(&a, 1), ""));
    CHECK(gguf_str_eq(gguf_array_str(&a, 2), "hello"));
    CHECK(gguf_array_str(&a, 3).ptr == NULL);
    CHECK(!gguf_array_int(&a, 0, &iv));
    CHECK(!gguf_get_array(f, "test.count", &a));

    const gguf_tensor *t = gguf_get_tensor(f, "a");
    CHECK(t != NULL);
    CHECK_EQ_INT(gguf_find_tensor(f, "a"), 0);
    CHECK_STR_EQ(t->name, "a");
    CHECK_EQ_INT(t->n_dims, 2);
    CHECK_EQ_INT(t->ne[0], 8);
    CHECK_EQ_INT(t->ne[1], 2);
    CHECK_EQ_INT(t->ne[2], 1);
    CHECK_EQ_INT(t->type, GGML_TYPE_F32);
    CHECK_EQ_INT(t->nbytes, 64);
    CHECK_EQ_INT(t->row_bytes, 32);
    CHECK_EQ_INT(t->n_elements, 16);
    float v;
    memcpy(&v, (const char *)t->data + 4 * 13, 4);
    CHECK_NEAR(v, 13.0, 0);
    CHECK((const uint8_t *)t->data == (const uint8_t *)gguf_base(f) + gguf_data_offset(f));

    t = gguf_get_tensor(f, "b");
    CHECK(t != NULL);
    CHECK(t == gguf_tensor_at(f, 1));
    CHECK_EQ_INT(t->type, GGML_TYPE_Q8_0);
    CHECK_EQ_INT(t->row_bytes, 34);
    CHECK_EQ_INT(t->nbytes, 102);
    float row[32];
    quant_dequant_row(t->type, (const char *)t->data + 34, row, 32);
    CHECK_NEAR(row[0], -16.0, 0);
    CHECK_NEAR(row[31], 15.0, 0);
    CHECK(gguf_get_tensor(f, "c") == NULL);
    CHECK(gguf_tensor_at(f, 2) == NULL);
    gguf_close(f);
    gb_free(&b);
}

TEST(gguf, opens_file_by_path_and_reports_missing_path)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    const char *path = test_tmp_path("m.gguf");
    test_write_file(path, b.p, b.n);
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    CHECK_EQ_INT(gguf_n_tensors(f), 2);
    gguf_close(f);

    const char *missing = test_tmp_path("missing.gguf");
    CHECK(gguf_open(missing, &err) == NULL);
    CHECK_CONTAINS(err.msg, missing);
    CHECK_CONTAINS(err.msg, "No such file");

    test_write_file(path, b.p, 10);
    CHECK(gguf_open(path, &err) == NULL);
    CHECK_CONTAINS(err.msg, path);
    CHECK_CONTAINS(err.msg, "truncated");
    CHECK(gguf_open(test_tmpdir(), &err) == NULL);
    CHECK_CONTAINS(err.msg, "not a regular file");
    gb_free(&b);
}

/* Every proper prefix of a valid file fails cleanly. */
TEST(gguf, rejects_every_truncation)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    for (size_t len = 0; len < b.n; len++) {
        ds4_error err = { { 0 } };
        gguf_file *f = gguf_open_memory(b.p, len, &err);
        if (f) {
            gguf_close(f);
            gb_free(&b);
            FAIL("prefix of %zu bytes accepted", len);
        }
        if (!err.msg[0]) {
            gb_free(&b);
            FAIL("prefix of %zu bytes: empty message", len);
        }
        if (len < 24 && !strstr(err.msg, "truncated")) {
            gb_free(&b);
            FAIL("prefix of %zu bytes: %s", len, err.msg);
        }
    }
    gb_free(&b);
    /* Cut inside the first KV's key while the counts still fit. */
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "a.rather.long.key.name");
    gb_u32(&b, GGUF_TYPE_UINT32);
    gb_u32(&b, 5);
    ds4_error err = { { 0 } };
    CHECK(gguf_open_memory(b.p, 40, &err) == NULL);
    CHECK_CONTAINS(err.msg, "metadata KV #0: key length 22 runs past the end of the file");
    CHECK_CONTAINS(err.msg, "at byte 24");
    gb_free(&b);
}

TEST(gguf, rejects_bad_magic)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    memcpy(b.p, "GGML", 4);
    expect_reject(&b, "magic");
}

TEST(gguf, rejects_other_versions)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    b.p[4] = 2;
    expect_reject(&b, "unsupported GGUF version 2");
}

TEST(gguf, rejects_big_endian)
{
    gbuf b = { 0 };
    gb_minimal(&b);
    const uint8_t be3[4] = { 0, 0, 0, 3 };
    memcpy(b.p + 4, be3, 4);
    expect_reject(&b, "big-endian");
}

TEST(gguf, rejects_kv_count_that_cannot_fit)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1000000000000ull);
    gb_zeros(&b, 64);
    expect_reject(&b, "metadata_kv_count 1000000000000 cannot fit");
}

TEST(gguf, rejects_tensor_count_that_cannot_fit)
{
    gbuf b = { 0 };
    gb_header(&b, 3, UINT64_MAX, 0);
    gb_zeros(&b, 64);
    expect_reject(&b, "tensor_count");
}

TEST(gguf, rejects_string_past_end)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_str(&b, "k");
    gb_u32(&b, GGUF_TYPE_STRING);
    gb_u64(&b, 100);
    gb_bytes(&b, "short", 5);
    expect_reject(&b, "string value length 100 runs past the end");
}

TEST(gguf, rejects_string_over_1gib)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_u64(&b, (1ull << 30) + 1);
    gb_zeros(&b, 32);
    expect_reject(&b, "exceeds the 1 GiB limit");
}

TEST(gguf, rejects_empty_key)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "", GGUF_TYPE_UINT32);
    gb_u32(&b, 1);
    expect_reject(&b, "empty key");
}

TEST(gguf, rejects_unknown_value_type)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", 13);
    gb_u32(&b, 1);
    gb_zeros(&b, 8);
    expect_reject(&b, "unknown value type 13");
}

TEST(gguf, rejects_unknown_array_element_type)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_TYPE_ARRAY);
    gb_u32(&b, 77);
    gb_u64(&b, 1);
    gb_zeros(&b, 8);
    expect_reject(&b, "unknown array element type 77");
}

TEST(gguf, rejects_nested_array)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_ARRAY);
    gb_u64(&b, 1);
    gb_u32(&b, GGUF_TYPE_UINT8);
    gb_u64(&b, 1);
    gb_u8(&b, 0);
    expect_reject(&b, "nested arrays");
}

TEST(gguf, rejects_array_count_overflow)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_UINT64);
    gb_u64(&b, (UINT64_MAX / 8) + 2); /* count·8 wraps around */
    gb_zeros(&b, 16);
    expect_reject(&b, "runs past the end of the file");
}

TEST(gguf, rejects_string_array_count_past_end)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "k", GGUF_TYPE_ARRAY);
    gb_u32(&b, GGUF_TYPE_STRING);
    gb_u64(&b, 1000000);
    gb_zeros(&b, 64);
    expect_reject(&b, "array of 1000000 strings");
}

TEST(gguf, rejects_duplicate_key)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "dup.key", 1);
    gb_kv_u32(&b, "dup.key", 2);
    expect_reject(&b, "duplicate metadata key");
}

TEST(gguf, rejects_bool_not_0_or_1)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "flag", GGUF_TYPE_BOOL);
    gb_u8(&b, 2);
    expect_reject(&b, "BOOL value byte is 2");

    gbuf c = { 0 };
    gb_header(&c, 3, 0, 1);
    gb_key(&c, "flags", GGUF_TYPE_ARRAY);
    gb_u32(&c, GGUF_TYPE_BOOL);
    gb_u64(&c, 3);
    gb_u8(&c, 1);
    gb_u8(&c, 0);
    gb_u8(&c, 9);
    expect_reject(&c, "BOOL array element 2 is 9");
}

TEST(gguf, rejects_alignment_of_wrong_type)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "general.alignment", GGUF_TYPE_UINT64);
    gb_u64(&b, 32);
    expect_reject(&b, "general.alignment must be UINT32, not UINT64");
}

TEST(gguf, rejects_alignment_zero_or_not_power_of_two)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 0);
    expect_reject(&b, "not a power of two");
    gbuf c = { 0 };
    gb_header(&c, 3, 0, 1);
    gb_kv_u32(&c, "general.alignment", 48);
    expect_reject(&c, "general.alignment 48 is not a power of two");
}

/* One tensor record with the given fields, data of `data_bytes` zero bytes. */
static void one_tensor(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data_bytes)
{
    gb_header(b, 3, 1, 0);
    gb_tinfo(b, name, n_dims, ne, type, offset);
    gb_align(b, 32);
    gb_zeros(b, data_bytes);
}

TEST(gguf, accepts_one_tensor_baseline)
{
    /* The helper's valid form, so the rejections below differ in one field. */
    gbuf b = { 0 };
    one_tensor(&b, "t", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 0, 16);
    gguf_file *f = open_ok(&b);
    CHECK_EQ_INT(gguf_get_tensor(f, "t")->nbytes, 16);
    gguf_close(f);
    gb_free(&b);
}

TEST(gguf, rejects_empty_tensor_name)
{
    gbuf b = { 0 };
    one_tensor(&b, "", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "empty tensor name");
}

TEST(gguf, rejects_long_tensor_name)
{
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    gbuf b = { 0 };
    one_tensor(&b, name, 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "tensor name is 64 bytes (limit 63)");
}

TEST(gguf, rejects_duplicate_tensor_name)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 2, 0);
    gb_tinfo(&b, "t", 1, (const uint64_t[]){ 8 }, GGML_TYPE_F32, 0);
    gb_tinfo(&b, "t", 1, (const uint64_t[]){ 8 }, GGML_TYPE_F32, 32);
    gb_align(&b, 32);
    gb_zeros(&b, 64);
    expect_reject(&b, "duplicate tensor name");
}

TEST(gguf, rejects_n_dims_out_of_range)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 0, NULL, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "n_dims 0 is outside 1..4");
    gbuf c = { 0 };
    one_tensor(&c, "t", 5, (const uint64_t[]){ 1, 1, 1, 1, 1 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&c, "n_dims 5 is outside 1..4");
}

TEST(gguf, rejects_zero_dimension)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 2, (const uint64_t[]){ 4, 0 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "dimension 1 is zero");
}

TEST(gguf, rejects_element_count_overflow)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 3, (const uint64_t[]){ 1ull << 32, 1ull << 32, 4 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "element count overflows");
}

TEST(gguf, rejects_byte_size_overflow)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 2, (const uint64_t[]){ 1ull << 31, 1ull << 31 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "byte size overflows");
}

TEST(gguf, rejects_unsupported_and_unknown_tensor_types)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 1, (const uint64_t[]){ 256 }, 14, 0, 210);
    expect_reject(&b, "unsupported tensor type 14 (Q6_K)");
    gbuf c = { 0 };
    one_tensor(&c, "t", 1, (const uint64_t[]){ 4 }, 99, 0, 16);
    expect_reject(&c, "unsupported tensor type 99");
    gbuf d = { 0 };
    one_tensor(&d, "t", 1, (const uint64_t[]){ 256 }, GGML_TYPE_Q8_K, 0, 292);
    expect_reject(&d, "unsupported tensor type 15 (Q8_K)");
}

TEST(gguf, rejects_partial_block_rows)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 2, (const uint64_t[]){ 48, 2 }, GGML_TYPE_Q8_0, 0, 136);
    expect_reject(&b, "row length 48 is not a multiple of the Q8_0 block size 32");
}

TEST(gguf, rejects_misaligned_offset)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 16, 64);
    expect_reject(&b, "data offset 16 is not a multiple of the alignment 32");
}

TEST(gguf, rejects_data_misaligned_for_its_type)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 1);
    gb_tinfo(&b, "t", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 1);
    gb_align(&b, 8);
    gb_zeros(&b, 24);
    expect_reject(&b, "misaligned for F32");
}

TEST(gguf, rejects_data_past_end_of_file)
{
    gbuf b = { 0 };
    one_tensor(&b, "t", 1, (const uint64_t[]){ 8 }, GGML_TYPE_F32, 0, 16);
    expect_reject(&b, "runs past the end of the file");
    gbuf c = { 0 };
    one_tensor(&c, "t", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, UINT64_MAX - 31, 16);
    expect_reject(&c, "runs past the end of the file");
}

TEST(gguf, rejects_overlapping_tensors)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 2, 0);
    gb_tinfo(&b, "t0", 1, (const uint64_t[]){ 16 }, GGML_TYPE_F32, 0);
    gb_tinfo(&b, "t1", 1, (const uint64_t[]){ 8 }, GGML_TYPE_F32, 32);
    gb_align(&b, 32);
    gb_zeros(&b, 96);
    expect_reject(&b, "overlap");
}

TEST(gguf, rejects_tensor_info_past_end)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 2, 0);
    gb_tinfo(&b, "t0.with.a.name.long.enough.for.the.counts", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 0);
    gb_str(&b, "t1");
    gb_u32(&b, 2);
    gb_u64(&b, 4);
    expect_reject(&b, "truncated GGUF: tensor info #1 ('t1') field 'ne'");
}

TEST(gguf, rejects_data_section_past_end)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 1, 0);
    gb_tinfo(&b, "t", 1, (const uint64_t[]){ 4 }, GGML_TYPE_F32, 0);
    /* the directory ends unaligned and nothing follows it */
    CHECK(b.n % 32 != 0);
    expect_reject(&b, "tensor data section starts at byte");
}

TEST(gguf, error_names_field_and_offset)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "ok.key", 1);
    size_t at = b.n;
    gb_key(&b, "bad.key", 42);
    char want[128];
    snprintf(want, sizeof want, "metadata KV #1 ('bad.key'): unknown value type 42 (at byte %zu)", at + 8 + 7);
    gb_zeros(&b, 8);
    expect_reject(&b, want);
}

TEST(gguf, empty_file_without_tensors_is_valid)
{
    gbuf b = { 0 };
    gb_header(&b, 3, 0, 0);
    gguf_file *f = open_ok(&b);
    CHECK_EQ_INT(gguf_n_tensors(f), 0);
    CHECK_EQ_INT(gguf_n_kv(f), 0);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    gguf_close(f);
    gb_free(&b);
}

TEST(gguf, reads_golden_model)
{
    const char *path = test_golden_path("A/model.gguf");
    if (!path) SKIP("golden data not present");
    ds4_error err = { { 0 } };
    gguf_file *f = gguf_open(path, &err);
    CHECK_MSG(f != NULL, "%s", err.msg);
    CHECK_EQ_INT(gguf_n_tensors(f), 178);
    CHECK_EQ_INT(gguf_n_kv(f), 54);
    CHECK_EQ_INT(gguf_size(f), 24134144);
    uint32_t u;
    CHECK(gguf_get_u32(f, "deepseek4.block_count", &u) && u == 6);
    CHECK(gguf_get_u32(f, "deepseek4.vocab_size", &u) && u == 311);
    float fv;
    CHECK(gguf_get_f32(f, "deepseek4.expert_weights_scale", &fv) && fv == 1.5f);
    bool bv;
    CHECK(gguf_get_bool(f, "deepseek4.expert_weights_norm", &bv) && bv);
    gguf_array a;
    CHECK(gguf_get_array(f, "tokenizer.ggml.tokens", &a));
    CHECK_EQ_INT(a.n, 311);
    CHECK(gguf_str_eq(gguf_array_str(&a, 304), "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"));
    CHECK(gguf_str_eq(gguf_array_str(&a, 310), "\xef\xbd\x9c" "DSML\xef\xbd\x9c"));
    CHECK(gguf_get_array(f, "deepseek4.attention.compress_ratios", &a));
    CHECK_EQ_INT(a.n, 7);
    int64_t r;
    CHECK(gguf_array_int(&a, 3, &r) && r == 128);
    const gguf_tensor *t = gguf_get_tensor(f, "blk.0.ffn_gate_exps.weight");
    CHECK(t != NULL);
    CHECK_EQ_INT(t->type, GGML_TYPE_IQ2_XXS);
    CHECK_EQ_INT(t->n_dims, 3);
    CHECK_EQ_INT(t->ne[2], 16);
    CHECK_EQ_INT(t->row_bytes, 66);
    CHECK_EQ_INT(t->nbytes, 66ull * 256 * 16);
    t = gguf_get_tensor(f, "output.weight");
    CHECK(t != NULL);
    /* the last tensor, followed only by padding to the alignment */
    size_t end = (size_t)((const uint8_t *)t->data + t->nbytes - (const uint8_t *)gguf_base(f));
    CHECK(end <= gguf_size(f) && gguf_size(f) - end < 32);
    gguf_close(f);
}

/* Builds a file with one hyper-parameter key, one tokenizer-like array and
 * one tensor of the given width. */
static void identity_file(gbuf *b, uint32_t layers, const char *token, uint64_t width)
{
    gb_header(b, 3, 1, 3);
    gb_kv_str(b, "general.architecture", "deepseek4");
    gb_kv_u32(b, "deepseek4.block_count", layers);
    gb_key(b, "tokenizer.ggml.tokens", GGUF_TYPE_ARRAY);
    gb_u32(b, GGUF_TYPE_STRING);
    gb_u64(b, 1);
    gb_str(b, token);
    gb_tinfo(b, "w", 1, (const uint64_t[]){ width }, GGML_TYPE_F32, 0);
    gb_align(b, 32);
    gb_zeros(b, 4 * width);
}

static uint64_t identity_of(uint32_t layers, const char *token, uint64_t width)
{
    gbuf b = { 0 };
    identity_file(&b, layers, token, width);
    gguf_file *f = open_ok(&b);
    uint64_t id = gguf_identity(f);
    gguf_close(f);
    gb_free(&b);
    return id;
}

TEST(gguf, identity_covers_shape_and_hparams_not_tokenizer)
{
    uint64_t base = identity_of(6, "a", 8);
    CHECK(base != 0);
    CHECK(identity_of(6, "a", 8) == base);
    CHECK(identity_of(6, "something else", 8) == base);
    CHECK(identity_of(7, "a", 8) != base);
    CHECK(identity_of(6, "a", 16) != base);
}

TEST(gguf, identity_covers_sampled_weights)
{
    gbuf a = { 0 }, b = { 0 };
    identity_file(&a, 6, "a", 64);
    identity_file(&b, 6, "a", 64);
    /* the last weight byte of the only tensor differs */
    b.p[b.n - 1] ^= 0x40;
    gguf_file *fa = open_ok(&a), *fb = open_ok(&b);
    CHECK(gguf_identity(fa) != gguf_identity(fb));
    gguf_close(fa);
    gguf_close(fb);
    gb_free(&a);
    gb_free(&b);
}
