/* test_golden_opencl.c — the OpenCL backend against the same golden data
 * and the CPU backend: it runs the same schedule over its own ops, so the
 * logits, the decisions and the session state must agree. Skips where the
 * backend is not part of the build or has no device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "opencl/cl_ops.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

/* cl (optional): the device's statistics, read before the engine closes */
static void nosim_logits_checked(int host_expert_layers, clrt_stats *cl)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", true);
    ds4_engine *e = fwd_test_engine_placed(DS4_BACKEND_OPENCL, DS4_QSIM_NONE, 1, host_expert_layers);
    ds4_placement pl;
    CHECK_EQ_INT(ds4_engine_placement(e, &pl), 0);
    CHECK_EQ_INT(pl.host_expert_layers, host_expert_layers > 0 ? host_expert_layers : 0);
    float *mine = test_alloc(g.all.n * (size_t)g.n_vocab * 4);
    fwd_routing r = { 0 };
    fwd_teacher_force(e, &g.all, mine, &r);
    if (cl) *cl = clrt_get_stats(clo_runtime(fwd_ops_ctx(fwd_of(e))));
    ds4_engine_close(e);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    CHECK_MSG(st.max <= 1e-3, "rel %.3g at position %d", st.max, st.worst_pos);
    CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    fwd_check_routing(&g, &r);
    golden_free(&g);
}

static void nosim_logits_and_choices(int host_expert_layers) { nosim_logits_checked(host_expert_layers, NULL); }

TEST(golden_opencl, nosim_teacher_forced_logits) { nosim_logits_and_choices(0); }

/* Hybrid placements: every layer's routed experts, or the first two
 * layers', computed by the CPU from host memory and the rest on the
 * device. */
TEST(golden_opencl, nosim_logits_and_choices_with_experts_on_the_host) { nosim_logits_and_choices(6); }
TEST(golden_opencl, nosim_logits_and_choices_with_two_layers_experts_on_the_host) { nosim_logits_and_choices(2); }

/* The GPU-shaped kernels (work-group reductions, built without the CPU
 * loops) on whatever device there is: what a GPU runs, minus the GPU. */
TEST(golden_opencl, nosim_logits_and_choices_with_gpu_kernels)
{
    setenv("DS4CL_KERNELS", "gpu", 1);
    nosim_logits_and_choices(0);
}

/* A device far smaller than the one at hand: work-groups of at most 8
 * work-items (some GPUs allow register-heavy kernels no more than a few
 * dozen) and 2 KiB of local memory (attention then scores 8 × 8 rows at
 * a time): the GPU-shaped kernels fit themselves to the limits, and the
 * numbers stay within the tight tier. */
TEST(golden_opencl, nosim_logits_with_gpu_kernels_on_a_small_device)
{
    setenv("DS4CL_KERNELS", "gpu", 1);
    setenv("DS4CL_CL_MAX_WG", "8", 1);
    setenv("DS4CL_CL_LOCAL_MEM", "2048", 1);
    clrt_stats st;
    nosim_logits_checked(0, &st);
    CHECK_MSG(st.max_group > 1 && st.max_group <= 8, "largest work-group %zu", st.max_group);
    CHECK_MSG(st.max_local > 0 && st.max_local <= 2048, "most local memory %zu", st.max_local);
}

TEST(golden_opencl, f16kv_teacher_forced_logits)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    golden_set g;
    golden_load(&g, "A-f32-nosim", "variants/prefix_logits_f16kv.f32", false);
    ds4_engine *e = fwd_test_engine_on(DS4_BACKEND_OPENCL, DS4_QSIM_F16KV, 1);
    float *mine = test_alloc(g.all.n * (size_t)g.n_vocab * 4);
    fwd_teacher_force(e, &g.all, mine, NULL);
    ds4_engine_close(e);
    CHECK_EQ_INT(g.n_rows, g.all.n);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 1e-3, &st);
    CHECK_MSG(st.max <= 2e-3, "rel %.3g at position %d", st.max, st.worst_pos);
    CHECK_MSG(st.median <= 5e-4, "median rel %.3g", st.median);
    CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    golden_free(&g);
}

/* The decisions the device makes (router top-k, indexer top-k) are the
 * reference's at every position and layer. */
TEST(golden_opencl, routing_and_indexer_choices_match)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", true);
    ds4_engine *e = fwd_test_engine_on(DS4_BACKEND_OPENCL, DS4_QSIM_NONE, 1);
    float *mine = test_alloc(g.all.n * (size_t)g.n_vocab * 4);
    fwd_routing r = { 0 };
    fwd_teacher_force(e, &g.all, mine, &r);
    ds4_engine_close(e);
    fwd_check_routing(&g, &r);
    golden_free(&g);
}

/* Experts kept on the host run the CPU's arithmetic: 8-bit activations by
 * default (the 8-bit tier), exact f32 with DS4CL_EXPERTS=f32 (the release
 * tier, as the device alone). */
static void full_numerics_statistics(int host_expert_layers, bool exact)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    golden_set g;
    golden_load(&g, "A-f32", "prefix_logits.f32", false);
    if (exact) setenv("DS4CL_EXPERTS", "f32", 1);
    else unsetenv("DS4CL_EXPERTS");
    ds4_engine *e = fwd_test_engine_placed(DS4_BACKEND_OPENCL, DS4_QSIM_FULL, 1, host_expert_layers);
    float *mine = test_alloc(g.all.n * (size_t)g.n_vocab * 4);
    fwd_teacher_force(e, &g.all, mine, NULL);
    ds4_engine_close(e);
    fwd_stats st;
    fwd_compare(mine, g.ref, g.n_rows, g.n_vocab, 0, &st);
    fprintf(stderr, "A-f32 full, %d host expert layers%s: median %.3g p90 %.3g argmax %d/%d\n", host_expert_layers,
            exact ? " (exact)" : "", st.median, st.p90, st.argmax_equal, st.n);
    if (exact || host_expert_layers == 0) fwd_check_release_tier(&st, "device");
    else fwd_check_8bit_tier(&st, "host experts in 8-bit arithmetic");
    golden_free(&g);
}

TEST(golden_opencl, full_numerics_statistics) { full_numerics_statistics(0, false); }
TEST(golden_opencl, full_numerics_statistics_with_experts_on_the_host) { full_numerics_statistics(3, false); }
TEST(golden_opencl, full_numerics_statistics_with_exact_experts_on_the_host) { full_numerics_statistics(3, true); }

/* A snapshot written by the CPU backend resumes on OpenCL (one canonical
 * layout), and a prefill chunk agrees with token-by-token decode. */
TEST(golden_opencl, cpu_snapshot_resumes_and_chunks_agree)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    ds4_engine *gpu = fwd_test_engine_on(DS4_BACKEND_OPENCL, DS4_QSIM_NONE, 1);
    ds4_engine *cpu = fwd_test_engine(DS4_QSIM_NONE, 1);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 150, 311, 13);
    ds4_error err = { "" };
    ds4_session *a = ds4_session_open(cpu, 200, &err), *b = ds4_session_open(gpu, 200, &err);
    CHECK(a && b);
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, 140, NULL, &err), DS4_OK);
    void *buf;
    size_t len;
    CHECK(ds4_session_snapshot(a, &buf, &len, &err) == 0);
    CHECK_MSG(ds4_session_restore(b, buf, len, &err) == 0, "%s", err.msg);
    free(buf);
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, 150, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_sync(b, ids.ids, 150, NULL, &err), DS4_OK);
    fwd_stats st;
    fwd_compare(ds4_session_logits(b), ds4_session_logits(a), 1, 311, 0, &st);
    CHECK_MSG(st.max <= 1e-3, "resumed on OpenCL: rel %.3g against the CPU", st.max);
    /* the same 150 tokens in one prefill on OpenCL */
    float *one = test_alloc(311 * 4);
    fwd_logits_after(gpu, 200, 0, ids.ids, ids.n, one);
    fwd_compare(one, ds4_session_logits(a), 1, 311, 0, &st);
    CHECK_MSG(st.max <= 1e-3, "OpenCL prefill: rel %.3g against the CPU", st.max);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_tokens_free(&ids);
    ds4_engine_close(cpu);
    ds4_engine_close(gpu);
}
