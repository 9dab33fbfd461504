/* test_opencl_rusticl.c — the OpenCL backend on a second implementation:
 * Mesa's rusticl on its llvmpipe device, selected per test through a
 * private OCL_ICD_VENDORS directory (tests/icd_util.h). Rusticl is stricter
 * than PoCL and compiles the kernels through another path (SPIR-V, NIR,
 * llvmpipe), so it catches kernels that only work by PoCL's leniency.
 * In every run: every kernel but the products (matmul.cl) compiled in both
 * shapes with no warning, the program cache across two runtimes, and a
 * prefill and a few decode steps of the golden model with the GPU-shaped
 * kernels and with the experts on the host, within the tight tier and
 * with nothing said by the compilers (under a minute each on two cores:
 * the engine builds only the parts of matmul.cl its weight types use);
 * the same with the CPU-shaped kernels. With DS4CL_TEST_SLOW_RUSTICL=1:
 * all of the products built at once (minutes).
 * Skips where rusticl is not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/forward.h"
#include "opencl/cl_runtime.h"
#include "tests/fwd_util.h"
#include "tests/icd_util.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

enum { PREFILL = 4, DECODE = 2 };

/* The golden model on rusticl: PREFILL tokens in chunks of `chunk`
 * (0: one chunk), then DECODE tokens one at a time, each position's logits
 * within the tight tier. */
static void golden_prefill_and_decode(const char *kernels, int host_expert_layers, int chunk)
{
    icd_use_rusticl();
    if (kernels) setenv("DS4CL_KERNELS", kernels, 1);
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", false);
    CHECK(g.all.n >= PREFILL + DECODE && g.n_rows >= PREFILL + DECODE);
    oclt_stderr cap = oclt_capture_stderr();
    ds4_engine *e = fwd_test_engine_placed(DS4_BACKEND_OPENCL, DS4_QSIM_NONE, 1, host_expert_layers);
    ds4_placement pl;
    CHECK_EQ_INT(ds4_engine_placement(e, &pl), 0);
    CHECK_EQ_INT(pl.host_expert_layers, host_expert_layers);
    if (chunk) fwd_set_chunk(fwd_of(e), chunk);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, 64, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    const int V = g.n_vocab, rows = 1 + DECODE;
    float *mine = test_alloc((size_t)rows * V * 4);
    CHECK_MSG(ds4_session_sync(s, g.all.ids, PREFILL, NULL, &err) == DS4_OK, "%s", err.msg);
    memcpy(mine, ds4_session_logits(s), (size_t)V * 4);
    for (int k = 0; k < DECODE; k++) {
        CHECK_MSG(ds4_session_eval(s, g.all.ids[PREFILL + k], NULL, &err) == DS4_OK, "%s", err.msg);
        memcpy(mine + (size_t)(k + 1) * V, ds4_session_logits(s), (size_t)V * 4);
    }
    ds4_session_close(s);
    ds4_engine_close(e);
    const char *said = oclt_captured(&cap);
    /* the numbers first: a failure then says whether they held */
    fwd_stats st;
    fwd_compare(mine, g.ref + (size_t)(PREFILL - 1) * V, rows, V, 1e-3, &st);
    CHECK_MSG(st.max <= 1e-3, "rel %.3g at position %d", st.max, PREFILL - 1 + st.worst_pos);
    CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    oclt_check_quiet(said);
    golden_free(&g);
}

/* The CPU-shaped prefill tiles stay out: rusticl 22.3 had not finished
 * compiling mm_tile_q8_0 in that shape after 20 minutes (its hand-unrolled
 * 6 × 6 accumulators across the lanes of llvmpipe's vectors), so the
 * prompt goes through the decode kernels, one token per chunk. */
TEST(rusticl, golden_prefill_and_decode_with_cpu_kernels) { golden_prefill_and_decode("cpu", 0, 1); }
TEST(rusticl, golden_prefill_and_decode_with_gpu_kernels) { golden_prefill_and_decode("gpu", 0, 0); }
/* every layer's routed experts in host memory, on the CPU */
TEST(rusticl, golden_prefill_and_decode_with_experts_on_the_host) { golden_prefill_and_decode("gpu", 6, 0); }

/* A program built by rusticl is stored, and a second runtime loads it
 * from the cache and runs it. */
TEST(rusticl, the_program_cache_round_trip)
{
    icd_use_rusticl();
    const char *root = test_tmpdir();
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = root };
    float out[64];
    for (int run = 0; run < 2; run++) {
        clrt *rt = clrt_open(&o, &err);
        CHECK_MSG(rt != NULL, "%s", err.msg);
        CHECK_CONTAINS(clrt_dev(rt)->platform_name, "rusticl");
        cl_kernel k = clrt_kernel(rt, "basic", "add_f32");
        CHECK_MSG(k != NULL, "%s", clrt_error(rt));
        clrt_stats st = clrt_get_stats(rt);
        CHECK_EQ_INT(st.builds, run == 0 ? 1 : 0);
        CHECK_EQ_INT(st.cache_hits, run == 0 ? 0 : 1);
        float a[64], b[64];
        for (int i = 0; i < 64; i++) a[i] = (float)i, b[i] = 0.5f * (float)i;
        cl_int rc;
        cl_context ctx = clrt_context(rt);
        cl_mem ma = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof a, a, &rc);
        cl_mem mb = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof b, b, &rc);
        cl_mem my = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, sizeof out, NULL, &rc);
        CHECK(ma && mb && my);
        clrt_call call = clrt_begin(rt, k);
        clrt_arg_mem(&call, ma);
        clrt_arg_ulong(&call, 0);
        clrt_arg_mem(&call, mb);
        clrt_arg_ulong(&call, 0);
        clrt_arg_mem(&call, my);
        clrt_arg_ulong(&call, 0);
        clrt_arg_ulong(&call, 64);
        size_t global = 64;
        CHECK_MSG(clrt_enqueue(&call, 1, &global, NULL) == 0, "%s", clrt_error(rt));
        CHECK(clEnqueueReadBuffer(clrt_queue(rt), my, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL) == CL_SUCCESS);
        for (int i = 0; i < 64; i++) CHECK(out[i] == 1.5f * (float)i);
        clReleaseMemObject(ma);
        clReleaseMemObject(mb);
        clReleaseMemObject(my);
        clrt_close(rt);
    }
}


/* Every kernel of the programs but the products (matmul.cl), in both
 * shapes, built and compiled by rusticl with nothing said. */
static const char *const light_programs[] = { "basic", "hc", "rope", "attn", "attn_comp", "attn_index", "router", NULL };

TEST(rusticl, every_kernel_but_the_products_compiles_without_a_warning)
{
    icd_use_rusticl();
    oclt_check_quiet(oclt_compile_all(light_programs, false));
    oclt_check_quiet(oclt_compile_all(light_programs, true));
}

/* All the products at once: rusticl spent 226-373 s building matmul.cl
 * whole here (its parts one by one take longer still: each compiles the
 * file's helpers again), so only on request; the golden runs above build
 * and launch the parts the golden model uses. */
TEST(rusticl, the_products_compile_without_a_warning)
{
    if (!getenv("DS4CL_TEST_SLOW_RUSTICL"))
        SKIP("rusticl builds matmul.cl for minutes: DS4CL_TEST_SLOW_RUSTICL=1 runs it");
    icd_use_rusticl();
    static const char *const products[] = { "matmul", NULL };
    oclt_check_quiet(oclt_compile_all(products, false));
}
