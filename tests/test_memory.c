/* Memory planning: the arithmetic under fake limits, the per-context
 * state formula against hand counts of doc/model.md §9, memory
 * detection from fake /proc and cgroup trees, and the messages. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/model_open.h"
#include "engine/state_size.h"
#include "tests/test.h"
#include "engine/backend.h"

#define GiB (1ull << 30)

/* ---- planner over a linear cost ------------------------------------------ */

static ds4_memory_input linear_input(ds4_memory_linear *lin, uint64_t weights, uint64_t avail)
{
    return (ds4_memory_input){
        .weights_bytes = weights,
        .ctx_bytes = ds4_memory_linear_bytes,
        .ctx_ud = lin,
        .available_bytes = avail,
        .max_ctx = 1048576,
    };
}

/* The largest multiple of 1024 whose cost fits budget, counted by hand. */
static int expected_largest(uint64_t budget, uint64_t weights, const ds4_memory_linear *lin, int max_ctx)
{
    if (budget < weights + lin->fixed) return 0;
    uint64_t n = (budget - weights - lin->fixed) / lin->per_token;
    if (n >= (uint64_t)max_ctx) return max_ctx;
    return (int)(n / 1024 * 1024);
}

TEST(memory_plan, verdicts_follow_the_headroom_policy)
{
    ds4_memory_linear lin = { .fixed = 2 * GiB, .per_token = 14000 };
    ds4_memory_input in = linear_input(&lin, 84 * GiB, 100 * GiB);
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;

    ds4_memory_check(&in, &pol, 65536, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_FITS);
    CHECK_EQ_INT(r.reserve_bytes, 1 * GiB);       /* 1/16 would be more: the 1 GiB cap */
    CHECK_EQ_INT(r.reserve_bytes, ds4_memory_reserve(100 * GiB));
    CHECK_EQ_INT(r.usable_bytes, 99 * GiB);
    CHECK_EQ_INT(r.comfortable_bytes, (uint64_t)(99.0 * GiB * 0.9));
    CHECK_EQ_INT(r.ctx_bytes, 2 * GiB + 14000ull * 65536);
    CHECK_EQ_INT(r.need_bytes, 86 * GiB + 14000ull * 65536);

    /* 84 + 2 + 14000·n crosses 89.1 GiB (comfortable) near n = 238k and
     * 99 GiB (usable) near n = 997k */
    ds4_memory_check(&in, &pol, 524288, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TIGHT);
    ds4_memory_check(&in, &pol, 1048576, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TOO_BIG);

    CHECK_EQ_INT(r.largest_fit, expected_largest(99 * GiB, 84 * GiB, &lin, 1048576));
    CHECK_EQ_INT(r.largest_comfortable, expected_largest(r.comfortable_bytes, 84 * GiB, &lin, 1048576));
    CHECK(r.largest_fit > 900000 && r.largest_fit < 1048576);
    CHECK(r.largest_comfortable > 200000 && r.largest_comfortable < 250000);

    /* small memory: 1/16 of it is the reserve, as on a device */
    in.available_bytes = 10 * GiB;
    in.weights_bytes = 1 * GiB;
    ds4_memory_check(&in, &pol, 4096, &r);
    CHECK_EQ_INT(r.reserve_bytes, 10 * GiB / 16);
    CHECK_EQ_INT(r.usable_bytes, 10 * GiB - 10 * GiB / 16);
}

TEST(memory_plan, largest_context_is_exact_at_the_boundary)
{
    ds4_memory_linear lin = { .fixed = 123456789, .per_token = 7777 };
    ds4_memory_input in = linear_input(&lin, 3 * GiB, 0);
    for (uint64_t budget = 3 * GiB + 200000000; budget < 3 * GiB + 2000000000; budget += 97654321) {
        int n = ds4_memory_largest_ctx(&in, budget, 16, 1048576, 1);
        CHECK(n > 0);
        CHECK(ds4_memory_linear_bytes(&lin, n) + 3 * GiB <= budget);
        CHECK(ds4_memory_linear_bytes(&lin, n + 1) + 3 * GiB > budget);
        int stepped = ds4_memory_largest_ctx(&in, budget, 16, 1048576, 1024);
        CHECK_EQ_INT(stepped, n / 1024 * 1024);
    }
    /* nothing fits: 0; everything fits: the top */
    CHECK_EQ_INT(ds4_memory_largest_ctx(&in, 3 * GiB, 16, 1048576, 1024), 0);
    CHECK_EQ_INT(ds4_memory_largest_ctx(&in, 100 * GiB, 16, 65536, 1024), 65536);
}

TEST(memory_plan, auto_picks_the_largest_comfortable_context)
{
    ds4_memory_linear lin = { .fixed = 1 * GiB, .per_token = 50000 };
    ds4_memory_input in = linear_input(&lin, 20 * GiB, 32 * GiB);
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    ds4_memory_auto(&in, &pol, 0, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_FITS);
    CHECK_EQ_INT(r.n_ctx, expected_largest(r.comfortable_bytes, 20 * GiB, &lin, 1048576));
    CHECK_EQ_INT(r.n_ctx % 1024, 0);
    CHECK(r.need_bytes <= r.comfortable_bytes);
    CHECK(ds4_memory_linear_bytes(&lin, r.n_ctx + 1024) + 20 * GiB > r.comfortable_bytes);

    /* a cap (the default context) bounds it */
    ds4_memory_auto(&in, &pol, 32768, &r);
    CHECK_EQ_INT(r.n_ctx, 32768);

    /* the model's own limit bounds it too */
    in.available_bytes = 4096 * GiB;
    in.max_ctx = 163840;
    ds4_memory_auto(&in, &pol, 0, &r);
    CHECK_EQ_INT(r.n_ctx, 163840);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_FITS);
}

TEST(memory_plan, auto_falls_back_to_tight_then_refuses)
{
    ds4_memory_linear lin = { .fixed = 0, .per_token = 1 << 20 }; /* 1 MiB a token */
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    /* usable = 40 − 1 = 39 GiB, comfortable 35.1 GiB; weights 33 GiB leave
     * 2.1 GiB comfortable (below 4096 tokens = 4 GiB) but 6 GiB usable */
    ds4_memory_input in = linear_input(&lin, 33 * GiB, 40 * GiB);
    ds4_memory_auto(&in, &pol, 0, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TIGHT);
    CHECK_EQ_INT(r.n_ctx, 6144);
    CHECK_EQ_INT(r.largest_comfortable, 0);

    /* plenty fits but nothing is comfortable: a modest context, not all of it */
    ds4_memory_input big = linear_input(&lin, 356 * GiB, 400 * GiB);
    ds4_memory_auto(&big, &pol, 0, &r); /* comfortable 359.1 GiB − 356 < 4096 MiB; fits up to 43 GiB */
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TIGHT);
    CHECK_EQ_INT(r.largest_fit, 44032);
    CHECK_EQ_INT(r.n_ctx, pol.tight_ctx);

    in.weights_bytes = 39 * GiB;
    ds4_memory_auto(&in, &pol, 0, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TOO_BIG);
    CHECK_EQ_INT(r.n_ctx, 0);
    CHECK_EQ_INT(r.largest_fit, 0);
}

TEST(memory_plan, beyond_the_model_limit_is_refused)
{
    ds4_memory_linear lin = { .fixed = 0, .per_token = 1 };
    ds4_memory_input in = linear_input(&lin, 1 * GiB, 64 * GiB);
    in.max_ctx = 65536;
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    ds4_memory_check(&in, &pol, 131072, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TOO_BIG);
    char msg[1024];
    ds4_memory_explain(&r, &in, 131072, "memory", "MemAvailable", msg, sizeof msg);
    CHECK_CONTAINS(msg, "--ctx 131072 is beyond the model's limit of 65536 tokens");
}

TEST(memory_plan, messages_carry_the_numbers)
{
    ds4_memory_linear lin = { .fixed = 2 * GiB, .per_token = 14000 };
    ds4_memory_input in = linear_input(&lin, 84 * GiB, 64 * GiB);
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    char msg[1024];

    /* weights alone too big */
    ds4_memory_check(&in, &pol, 65536, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TOO_BIG);
    ds4_memory_explain(&r, &in, 65536, "memory", "MemAvailable", msg, sizeof msg);
    CHECK_CONTAINS(msg, "the weights alone need 84.0 GiB");
    CHECK_CONTAINS(msg, "usable 63.0 GiB: 64.0 GiB available (MemAvailable) minus 1.00 GiB kept free");

    /* context too big: the largest that fits is named */
    in.available_bytes = 100 * GiB;
    ds4_memory_check(&in, &pol, 1048576, &r);
    ds4_memory_explain(&r, &in, 1048576, "memory", "DS4CL_MEM_AVAILABLE", msg, sizeof msg);
    CHECK_CONTAINS(msg, "--ctx 1048576 does not fit in memory");
    CHECK_CONTAINS(msg, "weights 84.0 GiB + context");
    CHECK_CONTAINS(msg, test_printf("the largest context that fits is %d tokens", r.largest_fit));
    CHECK_CONTAINS(msg, test_printf("--ctx auto picks %d", r.largest_comfortable));

    /* tight: a warning that says what would be comfortable */
    ds4_memory_check(&in, &pol, 524288, &r);
    ds4_memory_explain(&r, &in, 524288, "memory", "MemAvailable", msg, sizeof msg);
    CHECK_CONTAINS(msg, "--ctx 524288 leaves little memory: it needs");
    CHECK_CONTAINS(msg, test_printf("--ctx %d would be comfortable", r.largest_comfortable));

    /* auto: what it picked */
    ds4_memory_auto(&in, &pol, 0, &r);
    ds4_memory_explain(&r, &in, -1, "memory", "MemAvailable", msg, sizeof msg);
    CHECK_CONTAINS(msg, test_printf("--ctx auto: %d tokens, needing", r.n_ctx));
}

/* ---- the per-context state formula ---------------------------------------- */

static int flash_ratios[43];

static state_shape flash_shape(void)
{
    /* DS4 Flash hyper-parameters (doc/model.md §1) as a caller would
     * read them from the GGUF */
    for (int l = 0; l < 43; l++) flash_ratios[l] = l < 2 ? 0 : l % 2 == 0 ? 4 : 128;
    return (state_shape){
        .n_layer = 43, .compress_ratio = flash_ratios, .head_dim = 512, .n_swa = 128,
        .indexer_dim = 128, .indexer_ratio = 4, .overlap_ratio = 4, .n_vocab = 129280,
        .cache_elem_bytes = 2, .state_elem_bytes = 4,
    };
}

TEST(memory_state, flash_counts_match_section_11_1)
{
    state_shape s = flash_shape();
    const uint64_t n = 100003;
    state_bytes b;
    state_size(&s, (int)n, &b);
    CHECK_EQ_INT(b.raw_window, 43ull * 128 * 512 * 2);
    CHECK_EQ_INT(b.compressed_rows, 21ull * (n / 4) * 512 * 2 + 20ull * (n / 128) * 512 * 2);
    CHECK_EQ_INT(b.indexer_rows, 21ull * (n / 4) * 128 * 2);
    /* R=4: kv+score 8 × 1024 each, indexer 8 × 256 each; R=128: 128 × 512 each */
    CHECK_EQ_INT(b.frontiers, 21ull * (2 * 8 * 1024 + 2 * 8 * 256) * 4 + 20ull * (2 * 128 * 512) * 4);
    CHECK_EQ_INT(b.logits_tokens, 129280ull * 4 + n * 4);
    CHECK_EQ_INT(b.state, b.raw_window + b.compressed_rows + b.indexer_rows + b.frontiers + b.logits_tokens);
    CHECK_EQ_INT(b.scratch, 0);
    CHECK_EQ_INT(b.total, b.state);
    /* about 6.9 KB a token at f16: a million tokens is a few GiB, not tens */
    state_size(&s, 1048576, &b);
    CHECK(b.state > 6 * GiB && b.state < 8 * GiB);
}

TEST(memory_state, any_shape_from_its_hyper_parameters)
{
    int ratios[4] = { 0, 4, 16, 4 };
    state_shape s = {
        .n_layer = 4, .compress_ratio = ratios, .head_dim = 64, .n_swa = 8, .raw_ring_rows = 24,
        .indexer_dim = 32, .indexer_ratio = 4, .overlap_ratio = 4, .n_vocab = 1000,
        .cache_elem_bytes = 4, .state_elem_bytes = 4,
    };
    state_bytes b;
    state_size(&s, 1000, &b);
    CHECK_EQ_INT(b.raw_window, 4 * 24 * 64 * 4);
    CHECK_EQ_INT(b.compressed_rows, (250 + 62 + 250) * 64 * 4);
    CHECK_EQ_INT(b.indexer_rows, 2 * 250 * 32 * 4);
    CHECK_EQ_INT(b.frontiers, 2 * (2 * 8 * 128 + 2 * 8 * 64) * 4 + (2 * 16 * 64) * 4);
    CHECK_EQ_INT(b.logits_tokens, 1000 * 4 + 1000 * 4);
}

TEST(memory_state, scratch_counts_one_prefill_chunk)
{
    state_shape s = flash_shape();
    s.prefill_chunk = 2048;
    s.n_embd = 4096; s.n_hc = 4; s.n_head = 64; s.q_lora = 1024; s.n_out_group = 8; s.o_lora = 1024;
    s.n_expert_used = 6; s.n_ff = 2048; s.indexer_n_head = 64; s.indexer_top_k = 512;
    state_bytes b;
    const uint64_t n = 65536;
    state_size(&s, (int)n, &b);
    /* per token: HC 2·4·4096, x/xn 2·4096, q 1024 + 2·64·512 + kv 512,
     * grouped 8·1024, experts 3·6·2048, indexer q 64·128 + scores n/4;
     * scores: one head × (128 window + 2048 chunk + max(512 indexed, n/128)) */
    uint64_t per_token = 2 * 4 * 4096 + 2 * 4096 + 1024 + 2 * 64 * 512 + 512 + 8 * 1024 + 3 * 6 * 2048 +
                         64 * 128 + n / 4;
    uint64_t scores = 128 + 2048 + 512; /* one head */
    CHECK_EQ_INT(b.scratch, 2048ull * (per_token + scores) * 4);
    /* a short context computes fewer tokens at once */
    state_bytes small;
    state_size(&s, 100, &small);
    CHECK(small.scratch < b.scratch / 20);
    /* never decreasing: the planner's binary search relies on it */
    uint64_t prev = 0;
    for (int c = 1; c < 300000; c = c * 5 / 4 + 1) {
        uint64_t t = state_size_total(&s, c);
        CHECK_MSG(t >= prev, "total drops at %d", c);
        prev = t;
    }
}

static uint64_t shape_bytes(void *ud, int n_ctx)
{
    return state_size_total(ud, n_ctx);
}

TEST(memory_state, planner_over_the_formula)
{
    state_shape s = flash_shape();
    ds4_memory_input in = {
        .weights_bytes = 86586540032ull, /* the q2 file */
        .ctx_bytes = shape_bytes,
        .ctx_ud = &s,
        .available_bytes = 96 * GiB,
        .max_ctx = 1048576,
    };
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    ds4_memory_auto(&in, &pol, 0, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_FITS);
    CHECK(r.need_bytes <= r.comfortable_bytes);
    if (r.n_ctx < 1048576) CHECK(shape_bytes(&s, r.n_ctx + 1024) + in.weights_bytes > r.comfortable_bytes);
    in.available_bytes = 64 * GiB;
    ds4_memory_check(&in, &pol, 32768, &r);
    CHECK_EQ_INT(r.verdict, DS4_MEMORY_TOO_BIG);
    CHECK_EQ_INT(r.largest_fit, 0);
}

/* ---- detection -------------------------------------------------------------- */

TEST(memory_detect, meminfo)
{
    const char *text = "MemTotal:       32768000 kB\nMemFree:         1000000 kB\n"
                       "MemAvailable:   24224892 kB\nBuffers:           12 kB\n";
    uint64_t v;
    CHECK_EQ_INT(ds4_memory_parse_meminfo(text, "MemAvailable", &v), 0);
    CHECK_EQ_INT(v, 24224892ull * 1024);
    CHECK_EQ_INT(ds4_memory_parse_meminfo(text, "MemTotal", &v), 0);
    CHECK_EQ_INT(v, 32768000ull * 1024);
    CHECK_EQ_INT(ds4_memory_parse_meminfo(text, "SwapFree", &v), -1);
    CHECK_EQ_INT(ds4_memory_parse_meminfo(text, "Mem", &v), -1);
}

static void put(const char *rel, const char *text)
{
    const char *p = test_tmp_path("%s", rel);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", p);
    *strrchr(dir, '/') = 0;
    CHECK_EQ_INT(base_mkdir_p(dir, 0755), 0);
    test_write_file(p, text, strlen(text));
}

TEST(memory_detect, cgroup_v2_takes_the_tightest_level)
{
    put("cg/a/b/memory.max", "8589934592\n");           /* 8 GiB */
    put("cg/a/b/memory.current", "3221225472\n");       /* 3 GiB */
    put("cg/a/b/memory.stat", "anon 1\ninactive_file 1073741824\nactive_file 5\n");
    put("cg/a/memory.max", "max\n");
    put("cg/a/memory.current", "9999999999\n");
    uint64_t v;
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), "0::/a/b\n", &v), 0);
    CHECK_EQ_INT(v, 6 * GiB); /* 8 − (3 − 1 reclaimable) */
    /* a tighter parent wins */
    put("cg/a/memory.max", "5368709120\n"); /* 5 GiB */
    put("cg/a/memory.current", "4294967296\n"); /* 4 GiB */
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), "0::/a/b\n", &v), 0);
    CHECK_EQ_INT(v, 1 * GiB);
    /* no limit anywhere */
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), "0::/elsewhere\n", &v), -1);
}

TEST(memory_detect, cgroup_v1_memory_controller)
{
    put("cg/memory/x/memory.limit_in_bytes", "4294967296\n");
    put("cg/memory/x/memory.usage_in_bytes", "1073741824\n");
    put("cg/memory/memory.limit_in_bytes", "9223372036854771712\n"); /* unlimited */
    put("cg/memory/memory.usage_in_bytes", "1\n");
    uint64_t v;
    const char *proc = "9:name=systemd:/\n4:memory:/x\n0::/\n";
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), proc, &v), 0);
    CHECK_EQ_INT(v, 3 * GiB);
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), "4:cpu,memory:/x\n", &v), 0);
    CHECK_EQ_INT(v, 3 * GiB);
    CHECK_EQ_INT(ds4_memory_cgroup_available(test_tmp_path("cg"), "4:memory:/\n", &v), -1);
}

TEST(memory_detect, overrides_from_the_environment)
{
    uint64_t v;
    char src[64];
    setenv("DS4CL_MEM_AVAILABLE", "48G", 1);
    CHECK_EQ_INT(ds4_memory_host_available(&v, src, sizeof src), 0);
    CHECK_EQ_INT(v, 48 * GiB);
    CHECK_STR_EQ(src, "DS4CL_MEM_AVAILABLE");
    unsetenv("DS4CL_MEM_AVAILABLE");
    CHECK_EQ_INT(ds4_memory_host_available(&v, src, sizeof src), 0);
    CHECK(v > 0);
    CHECK(!strcmp(src, "MemAvailable") || !strcmp(src, "cgroup memory limit"));
    setenv("DS4CL_DEVICE_MEM", "80000000000", 1);
    CHECK_EQ_INT(ds4_memory_device_override(), 80000000000ull);
    unsetenv("DS4CL_DEVICE_MEM");
    CHECK_EQ_INT(ds4_memory_device_override(), 0);
}

/* ---- before loading ------------------------------------------------------------ */

static ds4_error precheck_err;

/* The precheck's verdict, and its refusal's text ("" when none). */
static int precheck_text(const char *path, ds4_backend b, char **err_text)
{
    precheck_err.msg[0] = 0;
    int rc = ds4_memory_precheck_file(path, b, &precheck_err);
    *err_text = precheck_err.msg;
    return rc;
}

TEST(memory_plan, weights_that_cannot_fit_are_refused_before_loading)
{
    /* a sparse 20 GiB "model" */
    const char *model = test_tmp_path("big.gguf");
    int fd = open(model, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ_INT(ftruncate(fd, (off_t)(20 * GiB)), 0);
    close(fd);
    char *msg;
    setenv("DS4CL_MEM_AVAILABLE", "16G", 1);
    CHECK_EQ_INT(precheck_text(model, DS4_BACKEND_CPU, &msg), -1);
    CHECK_CONTAINS(msg, "its weights need 20.0 GiB, 15.0 GiB is usable");
    CHECK_CONTAINS(msg, "DS4CL_MEM_AVAILABLE");
    setenv("DS4CL_MEM_AVAILABLE", "64G", 1);
    CHECK_EQ_INT(precheck_text(model, DS4_BACKEND_CPU, &msg), 0);
    CHECK_STR_EQ(msg, "");
    /* OpenCL maps the weights into host memory too: the device's size does
     * not matter here */
    setenv("DS4CL_DEVICE_MEM", "8G", 1);
    CHECK_EQ_INT(precheck_text(model, DS4_BACKEND_OPENCL, &msg), 0);
    setenv("DS4CL_MEM_AVAILABLE", "16G", 1);
    CHECK_EQ_INT(precheck_text(model, DS4_BACKEND_OPENCL, &msg), -1);
    CHECK_CONTAINS(msg, "does not fit in memory");
}

/* ---- a real engine, when this build has one ------------------------------------ */

TEST(memory_plan, session_context_on_a_real_engine)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("golden model absent");
    ds4_engine_options eo = { .model_path = model, .backend = DS4_BACKEND_CPU, .threads = 1 };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    ds4_model_info info;
    ds4_engine_info(e, &info);
    uint64_t s1 = ds4_session_bytes_estimate(e, 256), s2 = ds4_session_bytes_estimate(e, 4096);
    CHECK(s2 >= s1);
    int n = 0;
    setenv("DS4CL_MEM_AVAILABLE", "1T", 1);
    CHECK_EQ_INT(ds4_memory_session_ctx(e, DS4_BACKEND_CPU, NULL, 256, 0, 0, &n, NULL, 0, &err), 0);
    CHECK_EQ_INT(n, 256);
    CHECK_EQ_INT(ds4_memory_session_ctx(e, DS4_BACKEND_CPU, NULL, -1, 0, 0, &n, NULL, 0, &err), 0);
    CHECK(n >= 256);
    if (info.n_ctx_train > 0) CHECK(n <= info.n_ctx_train);
    /* no memory at all: refused */
    setenv("DS4CL_MEM_AVAILABLE", "1", 1);
    CHECK_EQ_INT(ds4_memory_session_ctx(e, DS4_BACKEND_CPU, NULL, 256, 0, 0, &n, NULL, 0, &err), -1);
    unsetenv("DS4CL_MEM_AVAILABLE");
    /* device memory that holds the session but not the weights beside it is
     * refused: the OpenCL backend copies every tensor to a discrete device */
    CHECK(info.weights_bytes > 0);
    char mem[64];
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)(s1 + info.weights_bytes / 2));
    setenv("DS4CL_DEVICE_MEM", mem, 1);
    CHECK_EQ_INT(ds4_memory_session_ctx(e, DS4_BACKEND_OPENCL, NULL, 256, 0, 0, &n, NULL, 0, &err), -1);
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)(4 * (info.weights_bytes + s2) + (1ull << 30)));
    setenv("DS4CL_DEVICE_MEM", mem, 1);
    CHECK_EQ_INT(ds4_memory_session_ctx(e, DS4_BACKEND_OPENCL, NULL, 256, 0, 0, &n, NULL, 0, &err), 0);
    unsetenv("DS4CL_DEVICE_MEM");
    ds4_engine_close(e);
}

/* ---- the whole first minute: resolve, check, load, plan ---------------------- */

static ds4_engine *open_capturing(const ds4cl_options *o, int *n_ctx, char **err_text)
{
    int saved = test_stderr_begin();
    ds4_engine *e = model_open(o, 4096, n_ctx, NULL, NULL, NULL);
    *err_text = test_stderr_end(saved);
    return e;
}

TEST(memory_open, no_model_explains_how_to_get_one)
{
    setenv("XDG_DATA_HOME", test_tmp_path("xdg"), 1);
    ds4cl_options o;
    memset(&o, 0, sizeof o);
    int n = 0;
    char *msg;
    CHECK(open_capturing(&o, &n, &msg) == NULL);
    CHECK_CONTAINS(msg, "ds4cl download q2-imatrix");
}

TEST(memory_open, weights_too_big_are_refused_before_loading)
{
    const char *model = test_tmp_path("big.gguf");
    int fd = open(model, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ_INT(ftruncate(fd, (off_t)(20 * GiB)), 0);
    close(fd);
    setenv("DS4CL_MEM_AVAILABLE", "8G", 1);
    ds4cl_options o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    int n = 0;
    char *msg;
    CHECK(open_capturing(&o, &n, &msg) == NULL);
    CHECK_CONTAINS(msg, "does not fit in memory");
    CHECK(strstr(msg, "loaded") == NULL);
}

TEST(memory_open, golden_model_loads_with_an_auto_context)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("golden model absent");
    setenv("DS4CL_MEM_AVAILABLE", "1T", 1);
    ds4cl_options o;
    memset(&o, 0, sizeof o);
    o.model_path = model;
    o.ctx = -1;
    o.threads = 1;
    int n = 0;
    char *msg;
    ds4_engine *e = open_capturing(&o, &n, &msg);
    CHECK_MSG(e != NULL, "%s", msg);
    CHECK_CONTAINS(msg, "loaded ");
    CHECK_CONTAINS(msg, "--ctx auto: ");
    /* planned, then read */
    CHECK(strstr(msg, "--ctx auto: ") < strstr(msg, "loaded "));
    ds4_model_info info;
    ds4_engine_info(e, &info);
    CHECK(n > 0);
    if (info.n_ctx_train > 0) CHECK(n <= info.n_ctx_train);
    ds4_engine_close(e);

    /* a context that cannot fit is refused before the weights are read */
    setenv("DS4CL_MEM_AVAILABLE", "300M", 1);
    o.ctx = 1000000;
    CHECK(open_capturing(&o, &n, &msg) == NULL);
    CHECK_CONTAINS(msg, "does not fit in memory");
    CHECK(strstr(msg, "loaded") == NULL);
}

TEST(memory_detect, opencl_device_selection)
{
    unsetenv("DS4CL_DEVICE");
    ds4_memory_device d, again;
    if (ds4_memory_opencl_device(NULL, &d) != 0) SKIP("no OpenCL device");
    CHECK(d.name[0] != 0);
    CHECK(d.global_mem > 0);
    /* the same device by index (the default is a GPU or device 0) and by name */
    char part[8];
    snprintf(part, sizeof part, "%.5s", d.name);
    CHECK_EQ_INT(ds4_memory_opencl_device(part, &again), 0);
    CHECK(strncasecmp(again.name, part, strlen(part)) == 0 || strcasestr(again.name, part) != NULL);
    CHECK_EQ_INT(ds4_memory_opencl_device("no-such-device-xyz", &again), -1);
    CHECK_EQ_INT(ds4_memory_opencl_device("999", &again), -1);
    setenv("DS4CL_DEVICE", "no-such-device-xyz", 1);
    CHECK_EQ_INT(ds4_memory_opencl_device(NULL, &again), -1);
    unsetenv("DS4CL_DEVICE");
    CHECK_EQ_INT(ds4_memory_opencl_device("0", &again), 0);
    CHECK(again.global_mem > 0);
}
