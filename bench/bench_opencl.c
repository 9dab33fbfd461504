/* bench_opencl.c — OpenCL kernel benchmark (`ds4cl-bench --cl-bench`).
 *
 * Every row runs the backend's own matmul or moe op (opencl/cl_matmul.c)
 * on random but valid weights of one DeepSeek V4 Flash shape, in a context
 * of its own (so its weights are freed before the next row). Decode rows
 * (T = 1) rotate over enough copies of the weights that every call reads
 * from memory, not from the caches, and report GB/s of weights; prefill
 * rows report GFLOP/s. The roofs come from the same process and device: a
 * streaming read (float16 loads over --roof-mb) and an f32 FMA loop over
 * every compute unit. Times are wall clock around a batch of enqueued calls
 * and one wait, median of --reps batches, after a warm-up that also makes
 * PoCL compile its work-group specialisations. Probe rows run a kernel of
 * kernels/bench.cl instead of an op: the exp_gate shape in ds4's integer
 * arithmetic, to show what that numerics would buy.
 */
#include "bench/bench_opencl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "bench/bench_quant.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "opencl/cl_ops.h"
#include "opencl/cl_runtime.h"

/* ROW_PROBE: not an op of the backend but a kernel of kernels/bench.cl
 * that shows what another arithmetic would buy (see run_iq2_probe) */
typedef enum { ROW_MATMUL, ROW_MOE, ROW_PROBE } row_kind;

typedef struct {
    const char *name;
    row_kind kind;
    uint32_t type, down_type; /* moe: gate/up type, down type */
    int in, out, groups;      /* moe: in = D, out = F */
    int prefill;              /* 0: T = 1; 1: T = --prefill-t */
} bench_row;

#define Q8 GGML_TYPE_Q8_0
#define F16 GGML_TYPE_F16
#define IQ2 GGML_TYPE_IQ2_XXS
#define Q2K GGML_TYPE_Q2_K

/* Flash shapes (doc/model.md §1). */
static const bench_row rows[] = {
    { "attn_q_a", ROW_MATMUL, Q8, 0, 4096, 1024, 1, 0 },
    { "attn_q_b", ROW_MATMUL, Q8, 0, 1024, 32768, 1, 0 },
    { "attn_kv", ROW_MATMUL, Q8, 0, 4096, 512, 1, 0 },
    { "attn_output_a", ROW_MATMUL, Q8, 0, 4096, 8192, 8, 0 },
    { "attn_output_b", ROW_MATMUL, Q8, 0, 8192, 4096, 1, 0 },
    { "shexp_gate", ROW_MATMUL, Q8, 0, 4096, 2048, 1, 0 },
    { "shexp_down", ROW_MATMUL, Q8, 0, 2048, 4096, 1, 0 },
    { "output", ROW_MATMUL, Q8, 0, 4096, 129280, 1, 0 },
    { "comp_kv_r4", ROW_MATMUL, F16, 0, 4096, 1024, 1, 0 },
    { "comp_kv_r128", ROW_MATMUL, F16, 0, 4096, 512, 1, 0 },
    { "router", ROW_MATMUL, F16, 0, 4096, 256, 1, 0 },
    { "exp_gate", ROW_MATMUL, IQ2, 0, 4096, 2048, 1, 0 },
    { "exp_down", ROW_MATMUL, Q2K, 0, 2048, 4096, 1, 0 },
    { "moe", ROW_MOE, IQ2, Q2K, 4096, 2048, 1, 0 },
    { "iq2_int8", ROW_PROBE, IQ2, 0, 4096, 2048, 1, 0 },
    { "iq2_lookups", ROW_PROBE, IQ2, 0, 4096, 2048, 1, 0 },
    { "shexp_gate", ROW_MATMUL, Q8, 0, 4096, 2048, 1, 1 },
    { "shexp_down", ROW_MATMUL, Q8, 0, 2048, 4096, 1, 1 },
    { "attn_q_b", ROW_MATMUL, Q8, 0, 1024, 32768, 1, 1 },
    { "attn_output_a", ROW_MATMUL, Q8, 0, 4096, 8192, 8, 1 },
    { "attn_output_b", ROW_MATMUL, Q8, 0, 8192, 4096, 1, 1 },
    { "comp_kv_r4", ROW_MATMUL, F16, 0, 4096, 1024, 1, 1 },
    { "exp_gate", ROW_MATMUL, IQ2, 0, 4096, 2048, 1, 1 },
    { "exp_down", ROW_MATMUL, Q2K, 0, 2048, 4096, 1, 1 },
    { "moe", ROW_MOE, IQ2, Q2K, 4096, 2048, 1, 1 },
};

typedef struct {
    const char *device, *only;
    int reps, prefill_t, experts, k;
    size_t rotate_bytes, roof_bytes;
} bench_opts;

typedef struct {
    ds4_model m;
    clo_options co;
    void *ctx;
    const ds4_ops *ops;
    uint8_t **blobs;
    size_t n_blobs;
} row_env;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* CPU time of the whole process (the OpenCL driver's worker threads
 * included, on a CPU device) in ms: on a loaded machine, bytes per
 * CPU-second vary far less than bytes per wall-clock second. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int env_open(row_env *e, const bench_opts *o)
{
    memset(e, 0, sizeof *e);
    e->m.hp.n_expert = o->experts;
    e->m.hp.n_expert_used = o->k;
    e->m.hp.n_embd = 4096;
    e->co.device = o->device;
    ds4_error err = { "" };
    e->ctx = clo_new(&e->m, &e->co, &err);
    if (!e->ctx) {
        fprintf(stderr, "ds4cl-bench: --cl-bench: %s\n", err.msg);
        return -1;
    }
    e->ops = &clo_ops;
    return 0;
}

static void env_close(row_env *e)
{
    if (e->ctx) clo_free(e->ctx);
    for (size_t i = 0; i < e->n_blobs; i++) free(e->blobs[i]);
    free(e->blobs);
    memset(e, 0, sizeof *e);
}

/* A random [ne0, ne1, ne2] tensor of type given device memory in e. */
static ds4_tensor *env_tensor(row_env *e, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2)
{
    ds4_tensor *t = calloc(1, sizeof *t);
    uint8_t **nb = realloc(e->blobs, (e->n_blobs + 2) * sizeof *nb);
    if (!t || !nb) {
        free(t);
        return NULL;
    }
    e->blobs = nb;
    t->name = "bench";
    t->type = type;
    t->n_dims = ne2 > 1 ? 3 : 2;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->row_bytes = quant_row_bytes(type, (uint64_t)ne0);
    t->nbytes = t->row_bytes * (uint64_t)ne1 * (uint64_t)ne2;
    size_t alloc = ((size_t)t->nbytes + 4095) & ~(size_t)4095;
    uint8_t *data = aligned_alloc(4096, alloc);
    e->blobs[e->n_blobs++] = (uint8_t *)t;
    if (!data) return NULL;
    e->blobs[e->n_blobs++] = data;
    bench_fill_weights(type, data, (size_t)t->nbytes);
    t->data = data;
    ds4_error err = { "" };
    if (clo_add_tensor(e->ctx, t, &err)) {
        fprintf(stderr, "ds4cl-bench: --cl-bench: %s\n", err.msg);
        return NULL;
    }
    return t;
}

static ds4_buf *env_floats(row_env *e, size_t n, float lo, float hi)
{
    ds4_buf *b = e->ops->alloc(e->ctx, n * 4);
    float *v = malloc(n * 4);
    if (!b || !v) {
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * (float)(next() >> 40) * 0x1p-24f;
    int rc = e->ops->write(e->ctx, b, 0, v, n * 4);
    free(v);
    return rc ? NULL : b;
}

static int env_wait(row_env *e, ds4_buf *b)
{
    float sink;
    return e->ops->read(e->ctx, b, 0, &sink, sizeof sink);
}

/* ---- roofs ------------------------------------------------------------------------ */

/* A roof or a row: wall-clock and CPU milliseconds per unit of work. */
typedef struct {
    double ms, cpu_ms;
} timing;

static double roof_read_gbps(clrt *rt, const bench_opts *o, double *core_gbps)
{
    const clrt_device *d = clrt_dev(rt);
    const bool cpu = (d->type & CL_DEVICE_TYPE_CPU) != 0;
    size_t bytes = o->roof_bytes;
    if (bytes > d->max_alloc) bytes = (size_t)d->max_alloc / 64 * 64;
    cl_int rc;
    cl_mem buf = clCreateBuffer(clrt_context(rt), CL_MEM_READ_ONLY, bytes, NULL, &rc);
    size_t items = cpu ? (size_t)d->compute_units * 8 : (size_t)d->compute_units * 2048;
    cl_mem out = clCreateBuffer(clrt_context(rt), CL_MEM_WRITE_ONLY, items * 4, NULL, &rc);
    if (!buf || !out) return 0;
    const float one = 1.0f;
    clEnqueueFillBuffer(clrt_queue(rt), buf, &one, sizeof one, 0, bytes, 0, NULL, NULL);
    cl_kernel k = clrt_kernel(rt, "bench", cpu ? "read_slices" : "read_strided");
    double gbps = 0;
    if (k) {
        cl_ulong n16 = cpu ? bytes / 64 / items : bytes / 64;
        double t[64], u[64];
        int reps = o->reps + 1;
        for (int r = 0; r < reps; r++) {
            double t0 = base_now_ms(), c0 = cpu_ms();
            clrt_call call = clrt_begin(rt, k);
            clrt_arg_mem(&call, buf);
            clrt_arg_ulong(&call, n16);
            clrt_arg_mem(&call, out);
            size_t l = cpu ? 1 : 256;
            if (clrt_enqueue(&call, 1, &items, &l) || clrt_finish(rt)) break;
            t[r] = base_now_ms() - t0;
            u[r] = cpu_ms() - c0;
        }
        /* the first pass also faults the pages in */
        gbps = (double)bytes / (median(t + 1, reps - 1) * 1e-3) / 1e9;
        *core_gbps = (double)bytes / (median(u + 1, reps - 1) * 1e-3) / 1e9;
    }
    clReleaseMemObject(buf);
    clReleaseMemObject(out);
    return gbps;
}

static double roof_fma_gflops(clrt *rt, const bench_opts *o, double *core_gflops)
{
    const clrt_device *d = clrt_dev(rt);
    const bool cpu = (d->type & CL_DEVICE_TYPE_CPU) != 0;
    size_t items = cpu ? (size_t)d->compute_units * 4 : (size_t)d->compute_units * 4096, l = cpu ? 1 : 128;
    cl_int rc;
    cl_mem out = clCreateBuffer(clrt_context(rt), CL_MEM_WRITE_ONLY, items * 4, NULL, &rc);
    cl_kernel k = clrt_kernel(rt, "bench", "fma_peak");
    if (!out || !k) return 0;
    int iters = 1000;
    double gflops = 0, t[64], u[64];
    for (int r = -2; r < o->reps; r++) {
        double t0 = base_now_ms(), c0 = cpu_ms();
        clrt_call call = clrt_begin(rt, k);
        clrt_arg_mem(&call, out);
        clrt_arg_int(&call, iters);
        clrt_arg_float(&call, 0.9999999f);
        clrt_arg_float(&call, 1e-7f);
        if (clrt_enqueue(&call, 1, &items, &l) || clrt_finish(rt)) break;
        double ms = base_now_ms() - t0;
        if (r < 0) {
            /* calibrate to about 200 ms a run */
            double scale = 200.0 / (ms > 0.01 ? ms : 0.01);
            iters = (int)(iters * (scale > 1000 ? 1000 : scale));
            if (iters < 1) iters = 1;
            continue;
        }
        t[r] = ms;
        u[r] = cpu_ms() - c0;
    }
    gflops = (double)items * iters * 256.0 / (median(t, o->reps) * 1e-3) / 1e9;
    *core_gflops = (double)items * iters * 256.0 / (median(u, o->reps) * 1e-3) / 1e9;
    clReleaseMemObject(out);
    return gflops;
}

static double launch_us(clrt *rt)
{
    cl_int rc;
    cl_mem out = clCreateBuffer(clrt_context(rt), CL_MEM_WRITE_ONLY, 64, NULL, &rc);
    cl_kernel k = clrt_kernel(rt, "bench", "empty");
    if (!out || !k) return 0;
    const int n = 2000;
    double ms = 0;
    for (int r = 0; r < 2; r++) {
        double t0 = base_now_ms();
        for (int i = 0; i < n; i++) {
            clrt_call call = clrt_begin(rt, k);
            clrt_arg_mem(&call, out);
            size_t g = 1;
            if (clrt_enqueue(&call, 1, &g, &g)) break;
        }
        clrt_finish(rt);
        ms = base_now_ms() - t0;
    }
    clReleaseMemObject(out);
    return ms * 1e3 / n;
}

/* ---- rows -------------------------------------------------------------------------- */

typedef struct {
    double ms, cpu_ms, bytes, flops;
} row_result;

static int run_matmul(const bench_opts *o, const bench_row *r, row_result *res)
{
    row_env e;
    if (env_open(&e, o)) return -1;
    const int T = r->prefill ? o->prefill_t : 1;
    const int64_t in = r->in, out = r->out;
    uint64_t bytes = quant_row_bytes(r->type, (uint64_t)in) * (uint64_t)out;
    int copies = 1;
    if (!r->prefill) {
        copies = (int)((o->rotate_bytes + bytes - 1) / bytes);
        if (copies < 2) copies = 2;
    }
    ds4_tensor **w = calloc((size_t)copies, sizeof *w);
    ds4_buf *x = env_floats(&e, (size_t)T * (size_t)in * (size_t)r->groups, -1, 1);
    ds4_buf *y = e.ops->alloc(e.ctx, (size_t)T * (size_t)out * 4);
    int rc = w && x && y ? 0 : -1;
    for (int i = 0; !rc && i < copies; i++)
        if (!(w[i] = env_tensor(&e, r->type, in, out, 1))) rc = -1;
    const int calls = r->prefill ? 2 : copies < 8 ? 8 : copies;
    double t[64], u[64];
    for (int rep = -1; !rc && rep < o->reps; rep++) {
        double t0 = base_now_ms(), c0 = cpu_ms();
        for (int i = 0; !rc && i < calls; i++) rc = e.ops->matmul(e.ctx, w[i % copies], x, T, r->groups, y);
        if (!rc) rc = env_wait(&e, y);
        if (rep >= 0) {
            t[rep] = (base_now_ms() - t0) / calls;
            u[rep] = (cpu_ms() - c0) / calls;
        }
    }
    if (rc) fprintf(stderr, "ds4cl-bench: --cl-bench: %s: %s\n", r->name, e.ops->last_error(e.ctx));
    else {
        res->ms = median(t, o->reps);
        res->cpu_ms = median(u, o->reps);
        res->bytes = (double)bytes;
        res->flops = 2.0 * T * (double)in * (double)out;
    }
    if (x) e.ops->release(e.ctx, x);
    if (y) e.ops->release(e.ctx, y);
    free(w);
    env_close(&e);
    return rc;
}

static int run_moe(const bench_opts *o, const bench_row *r, row_result *res)
{
    row_env e;
    if (env_open(&e, o)) return -1;
    const int T = r->prefill ? o->prefill_t : 1, k = o->k, E = o->experts, D = r->in, F = r->out;
    enum { SETS = 16 };
    ds4_tensor *gate = env_tensor(&e, r->type, D, F, E), *up = env_tensor(&e, r->type, D, F, E);
    ds4_tensor *down = env_tensor(&e, r->down_type, F, D, E);
    ds4_buf *x = env_floats(&e, (size_t)T * (size_t)D, -1, 1), *y = e.ops->alloc(e.ctx, (size_t)T * (size_t)D * 4);
    ds4_buf *wt = env_floats(&e, (size_t)T * (size_t)k, 0.05f, 0.3f), *sel[SETS] = { 0 };
    int rc = gate && up && down && x && y && wt ? 0 : -1;
    int32_t *ids = malloc((size_t)T * (size_t)k * 4);
    for (int s = 0; !rc && s < SETS; s++) {
        /* k distinct experts per token */
        for (int t = 0; t < T; t++)
            for (int i = 0; i < k; i++) {
                int32_t v;
                bool dup;
                do {
                    v = (int32_t)(next() % (uint64_t)E);
                    dup = false;
                    for (int j = 0; j < i; j++) dup |= ids[t * k + j] == v;
                } while (dup);
                ids[t * k + i] = v;
            }
        sel[s] = e.ops->alloc(e.ctx, (size_t)T * (size_t)k * 4);
        if (!sel[s] || e.ops->write(e.ctx, sel[s], 0, ids, (size_t)T * (size_t)k * 4)) rc = -1;
    }
    free(ids);
    const int calls = r->prefill ? 2 : SETS;
    float clamp = 10.0f;
    double t[64], u[64];
    for (int rep = -1; !rc && rep < o->reps; rep++) {
        double t0 = base_now_ms(), c0 = cpu_ms();
        for (int i = 0; !rc && i < calls; i++) rc = e.ops->moe(e.ctx, gate, up, down, x, sel[i % SETS], wt, T, clamp, y);
        if (!rc) rc = env_wait(&e, y);
        if (rep >= 0) {
            t[rep] = (base_now_ms() - t0) / calls;
            u[rep] = (cpu_ms() - c0) / calls;
        }
    }
    if (rc) fprintf(stderr, "ds4cl-bench: --cl-bench: %s: %s\n", r->name, e.ops->last_error(e.ctx));
    else {
        res->ms = median(t, o->reps);
        res->cpu_ms = median(u, o->reps);
        /* decode reads k experts' three matrices (the ids are distinct) */
        res->bytes = (double)k * (double)(gate->nbytes + up->nbytes + down->nbytes) / E;
        res->flops = 2.0 * T * k * 3.0 * D * (double)F;
    }
    for (int s = 0; s < SETS; s++)
        if (sel[s]) e.ops->release(e.ctx, sel[s]);
    if (x) e.ops->release(e.ctx, x);
    if (y) e.ops->release(e.ctx, y);
    if (wt) e.ops->release(e.ctx, wt);
    env_close(&e);
    return rc;
}

/* The exp_gate decode row in ds4's integer arithmetic: x quantized to
 * Q8_K (quant_act), IQ2_XXS rows against it with integer sums, in the
 * kernel iq2_int8_rows of kernels/bench.cl. Its results are checked
 * against the engine's quant_dot_act before it is timed. "iq2_lookups"
 * runs the same kernel without signs and scales: only a bound. */
static int run_iq2_probe(const bench_opts *o, const bench_row *r, row_result *res)
{
    row_env e;
    if (env_open(&e, o)) return -1;
    clrt *rt = clo_runtime(e.ctx);
    const int n = r->in, rows = r->out, lookups_only = strstr(r->name, "lookups") != NULL;
    const size_t rb = quant_row_bytes(GGML_TYPE_IQ2_XXS, (uint64_t)n), bytes = rb * (size_t)rows;
    size_t copies = (o->rotate_bytes + bytes - 1) / bytes;
    if (copies < 2) copies = 2;
    uint8_t *w = malloc(bytes * copies);
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)rows * sizeof *y), *xd = malloc((size_t)n / 256 * 4);
    int16_t *xq = malloc((size_t)n * sizeof *xq);
    uint64_t *sgrid = malloc(32768 * sizeof *sgrid);
    block_q8_K *act = malloc(quant_act_bytes(GGML_TYPE_IQ2_XXS, n));
    cl_mem bw = NULL, bxq = NULL, bxd = NULL, bsg = NULL, by = NULL;
    cl_kernel k = clrt_kernel(rt, "bench", lookups_only ? "iq2_lookup_rows" : "iq2_int8_rows");
    int rc = w && x && y && xd && xq && sgrid && act && k ? 0 : -1;
    if (!rc) {
        for (size_t i = 0; i < bytes * copies; i++) w[i] = (uint8_t)next();
        for (size_t i = 0; i < bytes * copies; i += 66) { /* d: a small positive half */
            w[i] = (uint8_t)next();
            w[i + 1] = 0x20;
        }
        for (int i = 0; i < n; i++) x[i] = (float)(next() % 2001) / 1000.0f - 1.0f;
        quant_act(GGML_TYPE_IQ2_XXS, x, n, act);
        for (int b = 0; b < n / 256; b++) {
            xd[b] = act[b].d;
            for (int j = 0; j < 256; j++) xq[256 * b + j] = act[b].qs[j];
        }
        for (uint32_t sgn = 0; sgn < 128; sgn++)
            for (uint32_t g = 0; g < 256; g++) {
                uint64_t v = 0;
                for (int j = 0; j < 8; j++) {
                    int m = (int)(quant_iq2xxs_grid[g] >> (8 * j) & 0xff);
                    int8_t q = (int8_t)(quant_ksigns_iq2xs[sgn] >> j & 1 ? -m : m);
                    v |= (uint64_t)(uint8_t)q << (8 * j);
                }
                sgrid[sgn << 8 | g] = v;
            }
        cl_context cx = clrt_context(rt);
        cl_int e1, e2, e3, e4, e5;
        bw = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes * copies, w, &e1);
        bxq = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * 2, xq, &e2);
        bxd = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n / 256 * 4, xd, &e3);
        bsg = clCreateBuffer(cx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, 32768 * 8, sgrid, &e4);
        by = clCreateBuffer(cx, CL_MEM_WRITE_ONLY, (size_t)rows * 4, NULL, &e5);
        if (!bw || !bxq || !bxd || !bsg || !by) rc = -1;
    }
    const size_t g = (size_t)rows / 4, l = 16;
    const int calls = copies < 8 ? 8 : (int)copies;
    double t[64], u[64];
    for (int rep = -1; !rc && rep < o->reps; rep++) {
        double t0 = base_now_ms(), c0 = cpu_ms();
        for (int i = 0; !rc && i < calls; i++) {
            clrt_call call = clrt_begin(rt, k);
            clrt_arg_mem(&call, bw);
            clrt_arg_ulong(&call, (cl_ulong)((size_t)i % copies * bytes));
            clrt_arg_ulong(&call, rb);
            clrt_arg_int(&call, rows);
            clrt_arg_int(&call, n);
            clrt_arg_mem(&call, bxq);
            clrt_arg_mem(&call, bxd);
            clrt_arg_mem(&call, bsg);
            clrt_arg_mem(&call, by);
            rc = clrt_enqueue(&call, 1, &g, &l);
            if (!rc && rep < 0 && i == 0 && !lookups_only) {
                /* the first call, on the first copy: check every row */
                rc = clEnqueueReadBuffer(clrt_queue(rt), by, CL_TRUE, 0, (size_t)rows * 4, y, 0, NULL, NULL) ? -1 : 0;
                double worst = 0, top = 0;
                for (int row = 0; !rc && row < rows; row++) {
                    double ref = quant_dot_act(GGML_TYPE_IQ2_XXS, w + (size_t)row * rb, act, n);
                    if (fabs(ref - y[row]) > worst) worst = fabs(ref - y[row]);
                    if (fabs(ref) > top) top = fabs(ref);
                }
                if (!rc && !(worst <= 1e-5 * top)) {
                    fprintf(stderr, "ds4cl-bench: --cl-bench: %s: off by %g of %g from quant_dot_act\n", r->name,
                            worst, top);
                    rc = -1;
                }
            }
        }
        if (!rc) rc = clrt_finish(rt);
        if (rep >= 0) {
            t[rep] = (base_now_ms() - t0) / calls;
            u[rep] = (cpu_ms() - c0) / calls;
        }
    }
    if (rc) fprintf(stderr, "ds4cl-bench: --cl-bench: %s failed%s%s\n", r->name, k ? "" : ": ", k ? "" : clrt_error(rt));
    else {
        res->ms = median(t, o->reps);
        res->cpu_ms = median(u, o->reps);
        res->bytes = (double)bytes;
        res->flops = 2.0 * (double)n * (double)rows;
    }
    cl_mem bufs[] = { bw, bxq, bxd, bsg, by };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) clReleaseMemObject(bufs[i]);
    free(w);
    free(x);
    free(y);
    free(xd);
    free(xq);
    free(sgrid);
    free(act);
    env_close(&e);
    return rc;
}

static void usage(void)
{
    fputs("usage: ds4cl-bench --cl-bench [--device D] [--reps R] [--prefill-t T] [--experts E]\n"
          "                   [--rotate-mb M] [--roof-mb M] [--only NAME]\n"
          "  --device D     OpenCL device (index or name part; default as ds4cl)\n"
          "  --reps R       timed batches per row, the median is reported (default 5)\n"
          "  --prefill-t T  tokens of the prefill rows (default 256)\n"
          "  --experts E    routed experts held per tensor in the moe rows (default 64)\n"
          "  --rotate-mb M  decode rows rotate over at least M MiB of weight copies (default 256)\n"
          "  --roof-mb M    size of the streaming-read probe (default 512)\n"
          "  --only NAME    only rows whose name contains NAME\n",
          stderr);
}

static bool has_ext(clrt *rt, const char *ext)
{
    char buf[8192] = "";
    clGetDeviceInfo(clrt_dev(rt)->id, CL_DEVICE_EXTENSIONS, sizeof buf - 1, buf, NULL);
    return strstr(buf, ext) != NULL;
}

int bench_opencl(int argc, char **argv)
{
    bench_opts o = { .reps = 5, .prefill_t = 256, .experts = 64, .k = 6, .rotate_bytes = 256u << 20,
                     .roof_bytes = 512u << 20 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "ds4cl-bench: --cl-bench: unknown or incomplete option '%s'\n", a);
            usage();
            return 2;
        }
        i++;
        ds4_error err = { "" };
        uint64_t mb = 0;
        int bad = 0;
        if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--only")) o.only = v;
        else if (!strcmp(a, "--reps")) bad = num_parse_int(v, 1, 63, &o.reps, &err);
        else if (!strcmp(a, "--prefill-t")) bad = num_parse_int(v, 2, 1 << 20, &o.prefill_t, &err);
        else if (!strcmp(a, "--experts")) bad = num_parse_int(v, 1, 4096, &o.experts, &err);
        else if (!strcmp(a, "--rotate-mb") && !(bad = num_parse_u64(v, 1, 1 << 20, &mb, &err)))
            o.rotate_bytes = (size_t)mb << 20;
        else if (!strcmp(a, "--roof-mb") && !(bad = num_parse_u64(v, 64, 1 << 20, &mb, &err)))
            o.roof_bytes = (size_t)mb << 20;
        else if (!bad) {
            fprintf(stderr, "ds4cl-bench: --cl-bench: unknown option '%s'\n", a);
            usage();
            return 2;
        }
        if (bad) {
            fprintf(stderr, "ds4cl-bench: --cl-bench: %s: %s\n", a, err.msg);
            usage();
            return 2;
        }
    }
    if (o.reps < 1 || o.reps > 63 || o.prefill_t < 2 || o.experts < o.k || o.rotate_bytes == 0 ||
        o.roof_bytes < (64u << 20)) {
        usage();
        return 2;
    }

    row_env probe;
    if (env_open(&probe, &o)) return 1;
    clrt *rt = clo_runtime(probe.ctx);
    const clrt_device *d = clrt_dev(rt);
    printf("# device: %s (%s), %s, driver %s, %u compute units\n", d->name, clrt_type_name(d->type), d->c_version,
           d->driver, d->compute_units);
    printf("# cl_khr_fp16 %s, cl_khr_subgroups %s, cl_khr_integer_dot_product %s, max alloc %.2f GiB, global %.2f GiB\n",
           has_ext(rt, "cl_khr_fp16") ? "yes" : "no", has_ext(rt, "cl_khr_subgroups") ? "yes" : "no",
           has_ext(rt, "cl_khr_integer_dot_product") ? "yes" : "no", (double)d->max_alloc / (1u << 30),
           (double)d->global_mem / (1u << 30));
    double core_read = 0, core_peak = 0;
    double read_gbps = roof_read_gbps(rt, &o, &core_read), peak = roof_fma_gflops(rt, &o, &core_peak);
    double lus = launch_us(rt);
    printf("# launch: %.2f us per empty kernel, enqueued back to back\n", lus);
    printf("kind,name,type,in,out,groups,T,weight_bytes,ms,gbps,pct_read_roof,gflops,pct_fma_peak,"
           "cpu_ms,cpu_pct_read_roof,cpu_pct_fma_peak\n");
    printf("roof,stream_read,f32,,,,,%zu,%.3f,%.2f,100,,,%.3f,100,\n", o.roof_bytes,
           (double)o.roof_bytes / read_gbps / 1e6, read_gbps, (double)o.roof_bytes / core_read / 1e6);
    printf("roof,fma_peak,f32,,,,,,,,,%.1f,100,,,100\n", peak);
    fflush(stdout);
    env_close(&probe);

    int status = 0;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const bench_row *r = &rows[i];
        if (o.only && !strstr(r->name, o.only)) continue;
        row_result res = { 0 };
        int rc = r->kind == ROW_MOE     ? run_moe(&o, r, &res)
                 : r->kind == ROW_PROBE ? run_iq2_probe(&o, r, &res)
                                        : run_matmul(&o, r, &res);
        if (rc) {
            status = 1;
            continue;
        }
        const int T = r->prefill ? o.prefill_t : 1;
        double gbps = res.bytes / (res.ms * 1e-3) / 1e9, gflops = res.flops / (res.ms * 1e-3) / 1e9;
        double cpu_gbps = res.bytes / (res.cpu_ms * 1e-3) / 1e9, cpu_gflops = res.flops / (res.cpu_ms * 1e-3) / 1e9;
        char type[32];
        if (r->kind == ROW_MOE)
            snprintf(type, sizeof type, "%s+%s", quant_type(r->type)->name, quant_type(r->down_type)->name);
        else
            snprintf(type, sizeof type, "%s", quant_type(r->type)->name);
        if (r->prefill)
            printf("prefill,%s,%s,%d,%d,%d,%d,%.0f,%.3f,,,%.1f,%.1f,%.3f,,%.1f\n", r->name, type, r->in, r->out,
                   r->groups, T, res.bytes, res.ms, gflops, 100 * gflops / peak, res.cpu_ms, 100 * cpu_gflops / core_peak);
        else
            printf("%s,%s,%s,%d,%d,%d,%d,%.0f,%.3f,%.2f,%.1f,%.1f,%.1f,%.3f,%.1f,%.1f\n",
                   r->kind == ROW_PROBE ? "probe" : "decode", r->name, type, r->in,
                   r->out, r->groups, T, res.bytes, res.ms, gbps, 100 * gbps / read_gbps, gflops, 100 * gflops / peak,
                   res.cpu_ms, 100 * cpu_gbps / core_read, 100 * cpu_gflops / core_peak);
        fflush(stdout);
    }
    return status;
}
