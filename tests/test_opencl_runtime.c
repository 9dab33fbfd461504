/* test_opencl_runtime.c — the OpenCL runtime and backend plumbing: device
 * listing and selection, the program binary cache (hit, corrupt entry),
 * build and lookup errors, weights (zero-copy, uploaded, split), and the
 * command line's device list. Skips where no OpenCL device exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/backend.h"
#include "engine/ds4.h"
#include "engine/forward.h"
#include "engine/testkit/mkmodel.h"
#include "engine/quant.h"
#include "opencl/cl_ops.h"
#include "opencl/cl_runtime.h"
#include "res/embedded.h"
#include "tests/fwd_util.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

static clrt_device *devices(int *n)
{
    oclt_require_device();
    clrt_device *d;
    ds4_error err = { "" };
    CHECK_MSG(clrt_devices(&d, n, &err) == 0, "%s", err.msg);
    return d;
}

TEST(opencl_runtime, devices_and_selection_rule)
{
    int n;
    clrt_device *d = devices(&n);
    CHECK(n >= 1);
    for (int i = 0; i < n; i++) {
        CHECK_EQ_INT(d[i].index, i);
        CHECK(d[i].name[0] && d[i].global_mem > 0 && d[i].max_alloc > 0 && d[i].base_align >= 4);
        CHECK_CONTAINS(d[i].c_version, "OpenCL C");
    }
    ds4_error err = { "" };
    unsetenv("DS4CL_DEVICE");
    int def = clrt_pick(d, n, NULL, &err);
    int first_gpu = -1;
    for (int i = n - 1; i >= 0; i--)
        if (d[i].type & CL_DEVICE_TYPE_GPU) first_gpu = i;
    CHECK_EQ_INT(def, first_gpu >= 0 ? first_gpu : 0);
    CHECK_EQ_INT(clrt_pick(d, n, "", &err), def);
    /* by index, and by a case-changed piece of the name */
    CHECK_EQ_INT(clrt_pick(d, n, test_printf("%d", n - 1), &err), n - 1);
    char *part = test_strdup(d[n - 1].name + (strlen(d[n - 1].name) > 4 ? 2 : 0));
    part[strlen(part) > 5 ? 5 : strlen(part)] = 0;
    for (char *p = part; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p >= 'A' && *p <= 'Z' ? *p + 32 : *p);
    int by_name = clrt_pick(d, n, part, &err);
    CHECK(by_name >= 0 && strcasestr(d[by_name].name, part));
    CHECK_EQ_INT(clrt_pick(d, n, "999", &err), -1);
    CHECK_CONTAINS(err.msg, "no OpenCL device has index 999");
    CHECK_EQ_INT(clrt_pick(d, n, "no-such-device-xyz", &err), -1);
    CHECK_CONTAINS(err.msg, "no-such-device-xyz");
    /* the environment applies only when nothing is given */
    setenv("DS4CL_DEVICE", "no-such-device-xyz", 1);
    CHECK_EQ_INT(clrt_pick(d, n, NULL, &err), -1);
    CHECK_CONTAINS(err.msg, "DS4CL_DEVICE");
    CHECK_EQ_INT(clrt_pick(d, n, "0", &err), 0);
    unsetenv("DS4CL_DEVICE");
    free(d);
}

TEST(opencl_runtime, program_cache_hit_and_corrupt_entry_rebuilt)
{
    oclt_require_device();
    const char *root = test_tmpdir();
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = root };
    clrt *rt = clrt_open(&o, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    char path[4096];
    clrt_cache_path(rt, "basic", path, sizeof path);
    CHECK_CONTAINS(path, test_printf("%s/ds4cl/cl/", root));
    CHECK(clrt_kernel(rt, "basic", "add_f32") != NULL);
    CHECK(clrt_kernel(rt, "basic", "argmax_f32") != NULL); /* the same program */
    clrt_stats st = clrt_get_stats(rt);
    CHECK_EQ_INT(st.builds, 1);
    CHECK_EQ_INT(st.cache_hits, 0);
    clrt_close(rt);
    struct stat sb;
    CHECK_MSG(stat(path, &sb) == 0 && sb.st_size > 72, "no cache entry %s", path);

    /* the second runtime loads the binary */
    rt = clrt_open(&o, &err);
    CHECK(rt && clrt_kernel(rt, "basic", "add_f32") != NULL);
    st = clrt_get_stats(rt);
    CHECK_EQ_INT(st.cache_hits, 1);
    CHECK_EQ_INT(st.builds, 0);
    clrt_close(rt);

    /* a damaged entry is ignored, rebuilt and replaced */
    size_t len;
    char *bytes = test_read_file(path, &len);
    CHECK(bytes && len > 100);
    bytes[len / 2] ^= 0x5a;
    test_write_file(path, bytes, len);
    rt = clrt_open(&o, &err);
    CHECK(rt && clrt_kernel(rt, "basic", "add_f32") != NULL);
    st = clrt_get_stats(rt);
    CHECK_EQ_INT(st.cache_rejects, 1);
    CHECK_EQ_INT(st.builds, 1);
    clrt_close(rt);
    test_write_file(path, "DS4", 3); /* truncated */
    rt = clrt_open(&o, &err);
    CHECK(rt && clrt_kernel(rt, "basic", "add_f32") != NULL);
    CHECK_EQ_INT(clrt_get_stats(rt).builds, 1);
    clrt_close(rt);
    rt = clrt_open(&o, &err);
    CHECK(rt && clrt_kernel(rt, "basic", "add_f32") != NULL);
    CHECK_EQ_INT(clrt_get_stats(rt).cache_hits, 1);
    clrt_close(rt);
}

/* CLRT_CPU follows the loop shape the host chose, so that the GPU-shaped
 * build runs on a CPU device too (the GPU-shape tests rely on it). */
static int built_cpu_loops(int shape)
{
    static const char probe[] = "__kernel void k(__global int *x) { x[0] = CLRT_CPU; }\n";
    const struct embedded_file table[] = { { "probe", probe, sizeof probe - 1 }, { NULL, NULL, 0 } };
    ds4_error err = { "" };
    clrt *rt = clrt_open(&(clrt_options){ .cache_dir = "", .sources = table }, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    if (shape >= 0) CHECK(clrt_set_cpu_loops(rt, shape == 1) == 0);
    cl_int rc, v = -7;
    cl_mem m = clCreateBuffer(clrt_context(rt), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof v, &v, &rc);
    CHECK(rc == CL_SUCCESS);
    clrt_call call = clrt_begin(rt, clrt_kernel(rt, "probe", "k"));
    clrt_arg_mem(&call, m);
    size_t g = 1;
    CHECK(clrt_enqueue(&call, 1, &g, NULL) == 0);
    CHECK(clEnqueueReadBuffer(clrt_queue(rt), m, CL_TRUE, 0, sizeof v, &v, 0, NULL, NULL) == CL_SUCCESS);
    /* too late once a program is built */
    CHECK_EQ_INT(clrt_set_cpu_loops(rt, true), -1);
    CHECK_CONTAINS(clrt_error(rt), "before a program is built");
    clReleaseMemObject(m);
    const bool cpu_device = (clrt_dev(rt)->type & CL_DEVICE_TYPE_CPU) != 0;
    clrt_close(rt);
    if (shape < 0) CHECK_EQ_INT(v, cpu_device ? 1 : 0);
    return v;
}

TEST(opencl_runtime, the_kernels_see_the_loop_shape_the_host_chose)
{
    oclt_require_device();
    built_cpu_loops(-1); /* by device type */
    CHECK_EQ_INT(built_cpu_loops(0), 0);
    CHECK_EQ_INT(built_cpu_loops(1), 1);
}

TEST(opencl_runtime, build_and_lookup_errors_are_explained)
{
    oclt_require_device();
    static const char broken[] = "__kernel void k(__global float *x) { x[0] = undeclared_thing; }\n";
    static const char fine[] = "__kernel void k(__global float *x) { x[0] = 1.0f; }\n";
    const struct embedded_file table[] = {
        { "broken", broken, sizeof broken - 1 },
        { "fine", fine, sizeof fine - 1 },
        { NULL, NULL, 0 },
    };
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = "", .sources = table };
    clrt *rt = clrt_open(&o, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    CHECK(clrt_kernel(rt, "broken", "k") == NULL);
    CHECK_CONTAINS(clrt_error(rt), "building OpenCL program broken");
    CHECK_CONTAINS(clrt_error(rt), "undeclared_thing"); /* the build log */
    CHECK(clrt_kernel(rt, "nothing", "k") == NULL);
    CHECK_CONTAINS(clrt_error(rt), "no OpenCL program named nothing");
    CHECK(clrt_kernel(rt, "fine", "other") == NULL);
    CHECK_CONTAINS(clrt_error(rt), "CL_INVALID_KERNEL_NAME");
    CHECK(clrt_kernel(rt, "fine", "k") != NULL);
    /* a wrong argument is reported at launch with the kernel's name */
    clrt_call call = clrt_begin(rt, clrt_kernel(rt, "fine", "k"));
    clrt_arg_float(&call, 1.0f);
    size_t g = 1;
    CHECK_EQ_INT(clrt_enqueue(&call, 1, &g, NULL), -1);
    CHECK_CONTAINS(clrt_error(rt), "OpenCL kernel k, argument 0");
    clrt_close(rt);

    CHECK(clrt_open(&(clrt_options){ .device = "no-such-device-xyz" }, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no OpenCL device name contains");
}

/* "NAME:PART" builds NAME.cl with CLRT_PART_<PART> defined: a part is its
 * own program (its own kernels); a part name that is not an identifier is
 * refused. */
TEST(opencl_runtime, a_program_built_in_parts)
{
    oclt_require_device();
    static const char src[] = "#if !defined(CLRT_PART) || defined(CLRT_PART_one)\n"
                              "__kernel void one(__global float *x) { x[0] = 1.0f; }\n"
                              "#endif\n"
                              "#if !defined(CLRT_PART) || defined(CLRT_PART_two)\n"
                              "__kernel void two(__global float *x) { x[0] = 2.0f; }\n"
                              "#endif\n";
    const struct embedded_file table[] = { { "prog", src, sizeof src - 1 }, { NULL, NULL, 0 } };
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = "", .sources = table };
    clrt *rt = clrt_open(&o, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    char names[256];
    CHECK_MSG(clrt_kernel_names(rt, "prog", names, sizeof names) == 0, "%s", clrt_error(rt));
    CHECK(strstr(names, "one") && strstr(names, "two"));
    CHECK_MSG(clrt_kernel_names(rt, "prog:one", names, sizeof names) == 0, "%s", clrt_error(rt));
    CHECK_STR_EQ(names, "one");
    CHECK(clrt_kernel(rt, "prog:two", "two") != NULL);
    CHECK(clrt_kernel(rt, "prog:two", "one") == NULL);
    CHECK_CONTAINS(clrt_error(rt), "CL_INVALID_KERNEL_NAME");
    CHECK_EQ_INT(clrt_get_stats(rt).builds, 3);
    CHECK(clrt_kernel(rt, "prog:t wo", "two") == NULL);
    CHECK_CONTAINS(clrt_error(rt), "no OpenCL program named prog:t wo");
    CHECK(clrt_kernel(rt, "prog:", "two") == NULL);
    clrt_close(rt);
}

/* An engine builds the parts of matmul.cl that its model's weight types
 * use, and no other: the golden model holds F16 and Q8_0 matrices and
 * IQ2_XXS / Q2_K experts. */
TEST(opencl_runtime, an_engine_builds_the_products_of_its_weight_types_only)
{
    oclt_require_device();
    ds4_engine *e = fwd_test_engine_on(DS4_BACKEND_OPENCL, DS4_QSIM_NONE, 1);
    clrt *rt = clo_runtime(fwd_ops_ctx(fwd_of(e)));
    static const char *const built[] = { "matmul:mm_f16", "matmul:mm_q8_0", "matmul:moe_iq2_xxs", "matmul:moe_q2_k",
                                         "matmul:aux" };
    static const char *const not_built[] = { "matmul", "matmul:mm_q4_k", "matmul:mm_bf16", "matmul:moe_q4_k",
                                             "matmul:mm_iq2_xxs", "matmul:moe_iq2_xxs_x" };
    for (size_t i = 0; i < sizeof built / sizeof *built; i++)
        CHECK_MSG(clrt_build_log(rt, built[i]) != NULL, "%s was not built", built[i]);
    for (size_t i = 0; i < sizeof not_built / sizeof *not_built; i++)
        CHECK_MSG(clrt_build_log(rt, not_built[i]) == NULL, "%s was built", not_built[i]);
    ds4_engine_close(e);
}

typedef struct {
    int calls;
    double last;
    bool monotonic;
} progress_seen;

static void on_progress(void *ud, double fraction, const char *what)
{
    progress_seen *p = ud;
    if (fraction < p->last || !what || !*what) p->monotonic = false;
    p->last = fraction;
    p->calls++;
}

/* Weights: zero-copy where the device shares memory, uploaded on request,
 * split when the per-buffer limit is small; the embedding still reads the
 * right rows across the split. */
TEST(opencl_runtime, weights_zero_copy_upload_and_split)
{
    oclt *f = oclt_open(NULL);
    clo_weight_info wi;
    clo_weights(f->ctx[OCLT_CL], &wi);
    uint64_t total = 0;
    for (size_t i = 0; i < gguf_n_tensors(f->g); i++) total += gguf_tensor_at(f->g, i)->nbytes;
    CHECK_EQ_INT(wi.bytes, total);
    CHECK_EQ_INT(wi.split, 0);
    bool unified = clrt_dev(clo_runtime(f->ctx[OCLT_CL]))->unified;
    CHECK_EQ_INT(wi.uploaded, unified ? 0 : total);
    oclt_close(f);

    progress_seen seen = { 0, 0.0, true };
    clo_options up = { .copy_weights = true, .progress = on_progress, .progress_ud = &seen };
    f = oclt_open_with(NULL, &up);
    clo_weights(f->ctx[OCLT_CL], &wi);
    CHECK_EQ_INT(wi.uploaded, total);
    CHECK(seen.calls > 10 && seen.monotonic && seen.last == 1.0);
    {
        /* ops read the uploaded copies */
        int32_t ids[3] = { 5, 300, 42 };
        oclt_buf tok = oclt_ints(f, ids, 3), S = oclt_zeros(f, 3 * (size_t)f->hp->hc_dim * 4);
        OCLT_BOTH(f, OPS->embed(CTX, &f->m->token_embd, BUF(tok), 3, BUF(S)));
        OCLT_SAME(f, S, S.bytes);
        oclt_buf x = oclt_floats(f, 3 * (size_t)f->hp->n_embd, -1, 1);
        OCLT_BOTH(f, OPS->rmsnorm(CTX, BUF(x), &f->m->output_norm, 3, f->hp->n_embd, BUF(x)));
        OCLT_CLOSE(f, x, 3 * (size_t)f->hp->n_embd, (size_t)f->hp->n_embd, 2e-6);
    }
    oclt_close(f);

    /* 40 KiB buffers: the tiny embedding (311 rows of 512 B) takes several */
    clo_options small = { .max_alloc = 40 << 10 };
    f = oclt_open_with(NULL, &small);
    clo_weights(f->ctx[OCLT_CL], &wi);
    CHECK(wi.split > 0 && wi.buffers > (int)gguf_n_tensors(f->g));
    const ds4_tensor *tab = &f->m->token_embd;
    int T = 9;
    int32_t ids[9] = { 0, 310, 80, 79, 160, 1, 309, 240, 80 };
    oclt_buf tok = oclt_ints(f, ids, (size_t)T);
    oclt_buf S = oclt_zeros(f, (size_t)T * (size_t)f->hp->hc_dim * 4);
    OCLT_BOTH(f, OPS->embed(CTX, tab, BUF(tok), T, BUF(S)));
    OCLT_SAME(f, S, S.bytes);
    oclt_close(f);

    /* a limit below one row of the largest tensor is refused clearly */
    ds4_error err = { "" };
    mk_spec s;
    mk_spec_tiny(&s);
    void *file;
    size_t len;
    CHECK(mk_write_memory(&s, &file, &len, &err) == 0);
    gguf_file *g = gguf_open_memory(file, len, &err);
    ds4_model *m = g ? model_bind(g, &err) : NULL;
    CHECK(m != NULL);
    clo_options tiny = { .max_alloc = 256, .cache_dir = oclt_cache_dir() };
    void *ctx = clo_new(m, &tiny, &err);
    CHECK(ctx == NULL);
    CHECK_CONTAINS(err.msg, "is larger than the largest buffer");
    /* weights to upload that exceed the device's memory: refused with both sizes */
    clo_options short_mem = { .copy_weights = true, .device_mem = 8 << 20, .cache_dir = oclt_cache_dir() };
    CHECK(clo_new(m, &short_mem, &err) == NULL);
    char need[32];
    CHECK_CONTAINS(err.msg, test_printf("the model's weights need %s of device memory", format_bytes(need, sizeof need, total)));
    CHECK_CONTAINS(err.msg, "has 8.00 MiB");
    model_free(m);
    gguf_close(g);
    free(file);
}

TEST(opencl_runtime, list_devices_command)
{
    oclt_require_device();
    unsetenv("DS4CL_DEVICE");
    char *out;
    int rc = test_runf(&out, "%s/ds4cl --list-devices", test_bindir());
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "Platform: ");
    CHECK_CONTAINS(out, "[0]");
    CHECK_CONTAINS(out, "(default)");
    CHECK_CONTAINS(out, "max allocation");
    CHECK_CONTAINS(out, "OpenCL C");
    rc = test_runf(&out, "DS4CL_DEVICE=0 %s/ds4cl --list-devices", test_bindir());
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "[0] (selected)");
    rc = test_runf(&out, "%s/ds4cl --list-devices --device no-such-device-xyz", test_bindir());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no OpenCL device name contains \"no-such-device-xyz\"");
}

/* The backend opens through the engine, names its device and plans its
 * session memory; a device that does not exist is refused by name. */
TEST(opencl_runtime, engine_opens_on_the_backend)
{
    oclt_require_device();
    mk_spec s;
    mk_spec_tiny(&s);
    ds4_error err = { "" };
    const char *path = test_tmp_path("tiny.gguf");
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .device = "0" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    ds4_model_info info;
    ds4_engine_info(e, &info);
    CHECK_STR_EQ(info.backend_name, "opencl");
    int n;
    clrt_device *d = devices(&n);
    CHECK_CONTAINS(info.device_name, d[0].name);
    CHECK_CONTAINS(info.device_name, "OpenCL");
    free(d);
    uint64_t a = ds4_session_bytes_estimate(e, 256), b = ds4_session_bytes_estimate(e, 4096);
    CHECK(a > 0 && b > a);
    ds4_engine_close(e);
    o.device = "no-such-device-xyz";
    CHECK(ds4_engine_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no-such-device-xyz");
}

/* --model-info on the backend: the device the engine picks (by the same
 * rule as everywhere), the session's device bytes the engine estimates,
 * and no weights uploaded to say so. */
TEST(opencl_runtime, model_info_on_the_backend)
{
    oclt_require_device();
    unsetenv("DS4CL_DEVICE");
    mk_spec s;
    mk_spec_tiny(&s);
    ds4_error err = { "" };
    const char *path = test_tmp_path("tiny.gguf");
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .plan_only = true };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    double session = (double)ds4_session_bytes_estimate(e, 4096) / 1048576.0;
    CHECK(ds4_session_open(e, 64, &err) == NULL);
    CHECK_CONTAINS(err.msg, "plan memory only");
    ds4_engine_close(e);
    int n;
    clrt_device *d = devices(&n);
    char *out;
    int rc = test_runf(&out, "%s/ds4cl --model-info -m %s --backend opencl --ctx 4096 2>&1", test_bindir(), path);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "layers        6");
    CHECK_CONTAINS(out, test_printf("on OpenCL device [0] %s", d[0].name));
    CHECK_CONTAINS(out, d[0].unified ? "zero-copy over the mapped file" : "uploaded at load");
    CHECK_CONTAINS(out, test_printf("+ %.2f MiB for 4096 tokens", session));
    CHECK_CONTAINS(out, "placement         everything on the device");
    /* a device budget below the model: the plan keeps experts on the host */
    uint64_t mem = 0;
    {
        ds4_engine_options po = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .plan_only = true,
                                  .host_expert_layers = 4, .plan_ctx = 4096, .device_memory = 1ull << 40 };
        ds4_engine *pe = ds4_engine_open(&po, &err);
        CHECK(pe != NULL);
        ds4_placement pl;
        CHECK_EQ_INT(ds4_engine_placement(pe, &pl), 0);
        mem = (pl.device_weights + pl.device_session) * 16 / 15 + 4096;
        ds4_engine_close(pe);
    }
    rc = test_runf(&out, "DS4CL_DEVICE_MEM=%llu %s/ds4cl --model-info -m %s --backend opencl --ctx 4096 2>&1",
                   (unsigned long long)mem, test_bindir(), path);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "routed experts of layers 0-3 in host memory, on the CPU; layers 4-5 on the device");
    CHECK_CONTAINS(out, "uploaded at load");
    CHECK_CONTAINS(out, "largest context");
    /* the host's experts follow the CPU backend's arithmetic: 8-bit by default */
    CHECK_CONTAINS(out, "cpu experts       IQ2_XXS and Q2_K rows by integer dots with 8-bit activations (Q8_K)");
    rc = test_runf(&out, "DS4CL_EXPERTS=f32 DS4CL_DEVICE_MEM=%llu %s/ds4cl --model-info -m %s --backend opencl --ctx 4096 2>&1",
                   (unsigned long long)mem, test_bindir(), path);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "cpu experts       exact f32 products");
    rc = test_runf(&out, "DS4CL_DEVICE=%d %s/ds4cl --model-info -m %s --backend opencl 2>&1", n - 1, test_bindir(), path);
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, test_printf("on OpenCL device [%d] %s", n - 1, d[n - 1].name));
    char piece[8];
    snprintf(piece, sizeof piece, "%.7s", d[0].name);
    for (char *p = piece; *p; p++)
        if (*p == '\'' || *p == ' ') *p = 0;
    rc = test_runf(&out, "DS4CL_DEVICE=%d %s/ds4cl --model-info -m %s --backend opencl --device '%s' 2>&1", n, test_bindir(),
                   path, piece);
    CHECK_MSG(rc == 0, "--device %s (over a DS4CL_DEVICE that names no device): %s", piece, out);
    CHECK_CONTAINS(out, "on OpenCL device [");
    CHECK_CONTAINS(out, piece);
    rc = test_runf(&out, "%s/ds4cl --model-info -m %s --backend opencl --device %d 2>&1", test_bindir(), path, n);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, test_printf("no OpenCL device has index %d", n));
    CHECK(strstr(out, "layers") == NULL);
    free(d);
}

/* A generated tiny model (seed) on the OpenCL device, exact numerics. */
static ds4_engine *tiny_opencl_engine(uint64_t seed, int *n_layer)
{
    oclt_require_device();
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = seed;
    ds4_error err = { "" };
    const char *path = test_tmp_path(test_printf("tiny-%llu.gguf", (unsigned long long)seed));
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .quant_sim = DS4_QSIM_NONE };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (n_layer) *n_layer = s.n_layer;
    return e;
}

/* The memory planner sizes a session by ds4_session_bytes_estimate: the
 * device memory a session really takes (its buffers and the context's
 * scratch, at their peak) must stay within it, with the indexer ranking
 * over a full context (its keys grow with it), prefill chunks of several
 * lengths and decode steps (the most attention blocks per token). And the
 * estimate must not be loose either: within twice the peak. On the way:
 * a decode step only queues work, and waits once, to read its logits;
 * the programs were all built when the engine opened. */
TEST(opencl_runtime, session_device_memory_stays_within_the_estimate)
{
    ds4_engine *e = tiny_opencl_engine(4, NULL);
    ds4_error err = { "" };
    void *ctx = fwd_ops_ctx(fwd_of(e));
    clrt *rt = clo_runtime(ctx);
    /* every program is ready once the engine is open: none is built later */
    clrt_stats at_open = clrt_get_stats(rt);
    CHECK(at_open.builds + at_open.cache_hits >= 8);
    const int n_ctx = 1200, decode = 6;
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)n_ctx, e->n_vocab, 21);
    uint64_t estimate = ds4_session_bytes_estimate(e, n_ctx);
    ds4_session *ss = ds4_session_open(e, n_ctx, &err);
    CHECK_MSG(ss != NULL, "%s", err.msg);
    /* a short first sync, then whole chunks to the end, then decode */
    CHECK_EQ_INT(ds4_session_sync(ss, ids.ids, 37, NULL, &err), DS4_OK);
    CHECK_MSG(ds4_session_sync(ss, ids.ids, ids.n - decode, NULL, &err) == DS4_OK, "%s", err.msg);
    /* inside a decode step the host waits once: for the logits */
    for (size_t i = ids.n - decode; i < ids.n; i++) {
        clrt_stats before = clrt_get_stats(rt);
        CHECK_EQ_INT(ds4_session_eval(ss, ids.ids[i], NULL, &err), DS4_OK);
        clrt_stats after = clrt_get_stats(rt);
        CHECK_EQ_INT(after.waits - before.waits, 1);
        CHECK(after.launches - before.launches > 50);
        CHECK_EQ_INT(after.builds, before.builds);
    }
    clrt_stats at_end = clrt_get_stats(rt);
    CHECK_EQ_INT(at_end.builds + at_end.cache_hits, at_open.builds + at_open.cache_hits);
    clo_device_use u;
    clo_device_usage(ctx, &u);
    fprintf(stderr, "session of %d tokens: peak %.1f KiB (buffers %.1f, scratch %.1f), estimate %.1f KiB\n", n_ctx,
            (double)u.peak / 1024, (double)u.buffers / 1024, (double)u.scratch / 1024, (double)estimate / 1024);
    CHECK(u.buffers > 0 && u.scratch > 0);
    CHECK_MSG(u.peak <= estimate, "peak %llu bytes above the estimate %llu", (unsigned long long)u.peak,
              (unsigned long long)estimate);
    CHECK_MSG(estimate <= 2 * u.peak, "estimate %llu bytes for a peak of %llu", (unsigned long long)estimate,
              (unsigned long long)u.peak);
    ds4_session_close(ss);
    clo_device_usage(ctx, &u);
    CHECK_EQ_INT(u.buffers, 0);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

/* Without any OpenCL driver (an empty ICD vendor directory) the failure
 * says what is missing; runs without a device too. */
TEST(opencl_runtime, no_platform_is_a_clear_error)
{
    const char *empty = test_tmp_path("icd");
    CHECK(mkdir(empty, 0700) == 0);
    char *out;
    int rc = test_runf(&out, "OCL_ICD_VENDORS=%s %s/ds4cl --list-devices", empty, test_bindir());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no OpenCL platform found");
    CHECK_CONTAINS(out, "--backend cpu");
}

/* The device queues a prefill chunk's work faster than it does it. A
 * prefill that can be cancelled waits for each layer before it asks, so
 * that the cancel stops the device within a layer, and progress counts
 * work done: at every poll after the first, and at every progress report,
 * the host has waited since. A decode step keeps its single wait. */
typedef struct {
    clrt *rt;
    int calls, stop_at, unsettled, reports;
    uint64_t last_waits;
} settle_probe;

static void probe_seen(settle_probe *p)
{
    clrt_stats s = clrt_get_stats(p->rt);
    if (p->calls + p->reports > 0 && s.waits == p->last_waits) p->unsettled++;
    p->last_waits = s.waits;
}

static bool probe_cancel(void *ud)
{
    settle_probe *p = ud;
    probe_seen(p);
    return ++p->calls == p->stop_at;
}

static void probe_progress(void *ud, int done, int total, double tps)
{
    (void)done, (void)total, (void)tps;
    settle_probe *p = ud;
    probe_seen(p);
    p->reports++;
}

TEST(opencl_runtime, a_cancelled_prefill_stops_the_device_within_a_layer)
{
    int n_layer = 0;
    ds4_engine *e = tiny_opencl_engine(6, &n_layer);
    ds4_error err = { "" };
    clrt *rt = clo_runtime(fwd_ops_ctx(fwd_of(e)));
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 400, e->n_vocab, 33);
    ds4_session *a = ds4_session_open(e, 512, &err), *b = ds4_session_open(e, 512, &err);
    CHECK_MSG(a && b, "%s", err.msg);

    settle_probe p = { .rt = rt };
    ds4_callbacks cb = { probe_progress, probe_cancel, &p };
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, 37, &cb, &err), DS4_OK);
    CHECK(p.calls >= n_layer);
    CHECK(p.reports >= 1);
    CHECK_EQ_INT(p.unsettled, 0);
    /* stopped at the second layer of the next chunk: the chunk is dropped */
    p = (settle_probe){ .rt = rt, .stop_at = 3 };
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, ids.n, &cb, &err), DS4_INTERRUPTED);
    CHECK_EQ_INT(p.calls, 3);
    CHECK_EQ_INT(p.unsettled, 0);
    CHECK_EQ_INT((int)ds4_session_n_tokens(a), 37);
    /* and goes on from there to the same logits as a session never stopped */
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, ids.n, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_sync(b, ids.ids, 37, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_sync(b, ids.ids, ids.n, NULL, &err), DS4_OK);
    CHECK(memcmp(ds4_session_logits(a), ds4_session_logits(b), (size_t)e->n_vocab * sizeof(float)) == 0);
    /* a decode step with callbacks still waits once */
    clrt_stats before = clrt_get_stats(rt);
    p = (settle_probe){ .rt = rt };
    CHECK_EQ_INT(ds4_session_eval(a, ids.ids[0], &cb, &err), DS4_OK);
    CHECK_EQ_INT(clrt_get_stats(rt).waits - before.waits, 1);
    ds4_tokens_free(&ids);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_engine_close(e);
}

/* A device smaller than the one at hand ($DS4CL_CL_MAX_WG,
 * $DS4CL_CL_LOCAL_MEM): the limits are what the runtime reports, and a
 * launch above them is refused before the driver, naming the kernel and
 * both numbers. */
TEST(opencl_runtime, launches_above_the_device_limits_are_refused_with_the_numbers)
{
    oclt_require_device();
    setenv("DS4CL_CL_MAX_WG", "16", 1);
    setenv("DS4CL_CL_LOCAL_MEM", "256", 1);
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = "" };
    clrt *rt = clrt_open(&o, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    CHECK(clrt_dev(rt)->max_wg == 16 && clrt_dev(rt)->local_mem == 256);
    cl_kernel k = clrt_kernel(rt, "basic", "rmsnorm_f32");
    CHECK(k != NULL);
    CHECK(clrt_kernel_max_group(rt, k) <= 16);
    cl_int rc;
    cl_mem m = clCreateBuffer(clrt_context(rt), CL_MEM_READ_WRITE, 4096, NULL, &rc);
    CHECK(m != NULL);
    const size_t sizes[][2] = { { 32, 32 }, { 16, 128 }, { 16, 16 } }; /* work-items, local floats */
    for (int i = 0; i < 3; i++) {
        clrt_call call = clrt_begin(rt, k);
        clrt_arg_mem(&call, m); /* x */
        clrt_arg_ulong(&call, 0);
        clrt_arg_mem(&call, m); /* w, unused */
        clrt_arg_ulong(&call, 0);
        clrt_arg_int(&call, 0);
        clrt_arg_mem(&call, m); /* y = x, one row in place */
        clrt_arg_ulong(&call, 0);
        clrt_arg_int(&call, 64);
        clrt_arg_float(&call, 1e-6f);
        clrt_arg_local(&call, sizes[i][1] * sizeof(float));
        size_t g = sizes[i][0], l = sizes[i][0];
        int r = clrt_enqueue(&call, 1, &g, &l);
        if (i == 0) {
            CHECK_EQ_INT(r, -1);
            CHECK_CONTAINS(clrt_error(rt), "rmsnorm_f32: a work-group of 32 work-items, above the 16");
        } else if (i == 1) {
            CHECK_EQ_INT(r, -1);
            CHECK_CONTAINS(clrt_error(rt), "rmsnorm_f32: 512 bytes of local memory, above the 256");
        } else {
            CHECK_MSG(r == 0, "%s", clrt_error(rt));
        }
    }
    CHECK_EQ_INT(clrt_finish(rt), 0);
    clrt_stats st = clrt_get_stats(rt);
    CHECK(st.max_group == 16 && st.max_local == 64);
    clReleaseMemObject(m);
    clrt_close(rt);
}

/* Every kernel of every program, in both shapes, built by the driver at
 * hand with nothing said: no compiler warning in its build logs, nothing
 * on stderr. */
TEST(opencl_runtime, every_kernel_compiles_without_a_warning)
{
    oclt_check_quiet(oclt_compile_all(NULL, false));
    oclt_check_quiet(oclt_compile_all(NULL, true));
}
