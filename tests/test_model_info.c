/* Tests of `ds4cl --model-info`: the figures it prints for the golden model
 * and for generated fixtures, and its errors. */
#include <stdlib.h>
#include <string.h>

#include "engine/testkit/mkmodel.h"
#include "tests/gguf_util.h"
#include "tests/test.h"

TEST(model_info, golden_model)
{
    const char *path = test_golden_path("A/model.gguf");
    if (!path) SKIP("golden data not present");
    char *out;
    int rc = test_runf(&out, "%s/ds4cl --model-info -m %s --ctx 1000", test_bindir(), path);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "GGUF v3, 178 tensors, 54 metadata keys, alignment 32");
    CHECK_CONTAINS(out, "name          ds4-tiny-A");
    CHECK_CONTAINS(out, "layers        6 (compress ratios 0,0,4,128,4,128; hash-routed layers: 3)");
    CHECK_CONTAINS(out, "embedding     256, vocabulary 311, trained context 1048576");
    CHECK_CONTAINS(out, "8 heads x 512 (RoPE on the last 64), q-lora 256, output 4 groups x 128, window 16");
    CHECK_CONTAINS(out, "indexer       4 heads x 128, top-k 8");
    CHECK_CONTAINS(out, "16 routed (6 per token) + 1 shared, width 256; gate/up IQ2_XXS, down Q2_K");
    CHECK_CONTAINS(out, "IQ2_XXS      12 tensors");
    CHECK_CONTAINS(out, "Q2_K          6 tensors");
    CHECK_CONTAINS(out, "total       178 tensors  23.00 MiB");
    CHECK_CONTAINS(out, "memory for 1000 tokens");
    /* doc/model.md §9 for 1000 tokens = 2,722,940 bytes (see model.binds_golden_model) */
    CHECK_CONTAINS(out, "session state     2.60 MiB");
    rc = test_runf(&out, "%s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "memory for 32768 tokens");
    /* the CPU backend's routed-expert arithmetic: 8-bit activations under
     * the release numerics unless DS4CL_EXPERTS=f32 asks for exact products */
    CHECK_CONTAINS(out, "cpu experts   IQ2_XXS and Q2_K rows by integer dots with 8-bit activations (Q8_K)");
    rc = test_runf(&out, "env DS4CL_EXPERTS=q8k %s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "cpu experts   IQ2_XXS and Q2_K rows by integer dots with 8-bit activations (Q8_K)");
    rc = test_runf(&out, "env DS4CL_EXPERTS=f32 %s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "cpu experts   exact f32 products");
    /* the diagnostic numerics are exact whatever is asked */
    rc = test_runf(&out, "%s/ds4cl --model-info -m %s --quant-sim none", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "cpu experts   exact f32 products");
    rc = test_runf(&out, "env DS4CL_EXPERTS=q8k %s/ds4cl --model-info -m %s --quant-sim f16kv", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "cpu experts   exact f32 products");
    /* a value that names no arithmetic is said, not silently taken */
    rc = test_runf(&out, "env DS4CL_EXPERTS=exact %s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "(Q8_K)");
    CHECK_CONTAINS(out, "DS4CL_EXPERTS=exact is not an arithmetic (q8k or f32): q8k is used");
    /* DS4CL_SIMD picks the kernels' level; one this CPU lacks, or no level, is refused */
    rc = test_runf(&out, "env DS4CL_SIMD=scalar %s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "(Q8_K), scalar kernels");
    rc = test_runf(&out, "env DS4CL_SIMD=avx1024 %s/ds4cl --model-info -m %s", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "DS4CL_SIMD=avx1024 is not a level");
}

TEST(model_info, generated_fixture)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 4;
    mk_set_quant(&s, "q4");
    s.name = "fixture-q4";
    const char *path = test_tmp_path("q4.gguf");
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    char *out;
    int rc = test_runf(&out, "%s/ds4cl --model-info -m %s --ctx 4096", test_bindir(), path);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "name          fixture-q4");
    CHECK_CONTAINS(out, "layers        4 (compress ratios 0,0,4,128; hash-routed layers: 3)");
    CHECK_CONTAINS(out, "gate/up Q4_K, down Q4_K");
    CHECK_CONTAINS(out, "Q4_K         12 tensors");
    CHECK_CONTAINS(out, "memory for 4096 tokens");
}

TEST(model_info, without_m_describes_the_default_model)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.name = "the-default";
    const char *path = test_tmp_path("model.gguf");
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    const char *data = test_tmp_path("data");
    char *out;
    CHECK_EQ_INT(test_runf(&out, "mkdir -p %s/ds4cl/models && ln -s %s %s/ds4cl/models/default", data, path, data), 0);
    int rc = test_runf(&out, "XDG_DATA_HOME=%s %s/ds4cl --model-info --ctx 1000", data, test_bindir());
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    CHECK_CONTAINS(out, "name          the-default");
    /* the real file is named, not the link */
    CHECK_CONTAINS(out, test_printf("file          %s", path));
}

TEST(model_info, ctx_auto_says_what_it_picked_and_why)
{
    mk_spec s;
    mk_spec_tiny(&s);
    const char *path = test_tmp_path("model.gguf");
    ds4_error err = { { 0 } };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    char *out;
    int rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=300M %s/ds4cl --model-info -m %s --ctx auto", test_bindir(), path);
    CHECK_MSG(rc == 0, "rc %d: %s", rc, out);
    const char *at = strstr(out, "--ctx auto: ");
    CHECK_MSG(at != NULL, "%s", out);
    int picked = atoi(at + 12);
    CHECK(picked > 4096 && picked < 1048576);
    CHECK_CONTAINS(out, test_printf("memory for %d tokens", picked));
    CHECK_CONTAINS(at, "usable memory");
    CHECK_CONTAINS(at, "the largest context, in steps of 1024, that keeps within 90% of it");
    /* less memory, a smaller pick */
    rc = test_runf(&out, "DS4CL_MEM_AVAILABLE=250M %s/ds4cl --model-info -m %s --ctx auto", test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    at = strstr(out, "--ctx auto: ");
    CHECK(at && atoi(at + 12) < picked);
}

TEST(model_info, errors)
{
    char *out;
    /* no -m and no default model: the download hint, not a usage error */
    CHECK_EQ_INT(test_runf(&out, "HOME=%s XDG_DATA_HOME= %s/ds4cl --model-info", test_tmpdir(), test_bindir()), 1);
    CHECK_CONTAINS(out, "no model yet");
    const char *missing = test_tmp_path("missing.gguf");
    CHECK_EQ_INT(test_runf(&out, "%s/ds4cl --model-info -m %s", test_bindir(), missing), 1);
    CHECK_CONTAINS(out, missing);
    gbuf b = { 0 };
    gb_minimal(&b);
    const char *other = test_tmp_path("other.gguf");
    test_write_file(other, b.p, b.n);
    CHECK_EQ_INT(test_runf(&out, "%s/ds4cl --model-info -m %s", test_bindir(), other), 1);
    CHECK_CONTAINS(out, "general.architecture is 'test', expected 'deepseek4'");
    test_write_file(other, b.p, 40);
    gb_free(&b);
    CHECK_EQ_INT(test_runf(&out, "%s/ds4cl --model-info -m %s", test_bindir(), other), 1);
    CHECK_CONTAINS(out, "metadata_kv_count 6 cannot fit");
}
