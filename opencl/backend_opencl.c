/* backend_opencl.c — the OpenCL backend: the forward schedule over the
 * device ops of cl_ops.c. */
#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/plan.h"
#include "opencl/cl_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefill chunk. A chunk's routed experts are dequantized once for all
 * of its tokens (matmul.cl), a fixed cost per chunk and layer: with 256
 * experts and 6 per token, a 256-token chunk gives an expert 6 tokens on
 * average and its dequantization costs about as much as its products;
 * 1024 tokens give it 24 (bench/README.md). Activations and scratch grow
 * with the chunk: about 0.74 MiB a token at Flash widths, so a session
 * takes ~570 MiB more than at 256 (the memory planner counts them). */
#define OCL_PREFILL_CHUNK 1024

/* $DS4CL_KERNELS: "cpu" or "gpu" runs that kernel shape on any device
 * (unset or empty: by device type). */
static int kernel_shape(clo_kernel_shape *shape, ds4_error *err)
{
    const char *v = getenv("DS4CL_KERNELS");
    *shape = CLO_SHAPE_AUTO;
    if (!v || !*v) return 0;
    if (!strcmp(v, "cpu")) *shape = CLO_SHAPE_CPU;
    else if (!strcmp(v, "gpu")) *shape = CLO_SHAPE_GPU;
    else return ds4_error_set(err, "DS4CL_KERNELS=%s: expected cpu or gpu", v);
    return 0;
}

/* Device d's share of a session of n_ctx tokens: the schedule's buffers
 * on its backend (backend d: devices come first) and its scratch. */
static uint64_t device_session_bytes(void *ud, int d, int n_ctx, bool experts)
{
    const ds4_engine *e = ud;
    fwd_engine *f = e->impl;
    int T = fwd_chunk(f) < n_ctx ? fwd_chunk(f) : n_ctx;
    return fwd_session_buffers_bytes_on(f, n_ctx, d) + clo_scratch_estimate(fwd_backend_ctx(f, d), T, n_ctx, experts);
}

typedef struct {
    const ds4_tensor **t;
    size_t n, cap;
} tensor_list;

static void list_add(void *ud, const ds4_tensor *t)
{
    tensor_list *l = ud;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, l->cap * sizeof *l->t);
    }
    l->t[l->n++] = t;
}

/* Gives each device the weights of the parts the plan puts there. */
static int hold_weights(ds4_engine *e, const clo_options *o, ds4_error *err)
{
    const ds4_model *m = e->model;
    const ds4_placement *p = &e->place;
    for (int d = 0; d < p->n_devices; d++) {
        const ds4_placement_device *dv = &p->dev[d];
        tensor_list l = { 0 };
        if (d == 0 && dv->first_layer == 0 && !p->embed_on_host) plan_part_tensors(m, PLAN_EMBED, 0, list_add, &l);
        for (int i = dv->first_layer; i < dv->first_layer + dv->n_layers; i++) {
            plan_part_tensors(m, PLAN_ATTN, i, list_add, &l);
            plan_part_tensors(m, PLAN_FFN, i, list_add, &l);
            if (i - dv->first_layer >= dv->host_expert_layers) plan_part_tensors(m, PLAN_EXPERTS, i, list_add, &l);
        }
        if (dv->head) plan_part_tensors(m, PLAN_HEAD, 0, list_add, &l);
        int rc = clo_hold_tensors(fwd_backend_ctx(e->impl, d), l.t, l.n, o, err);
        free(l.t);
        if (rc) return -1;
    }
    return 0;
}

/* The forward placement of the plan in force: devices are backends
 * 0 … n−1, the host (when the plan uses it) backend n. */
static int apply_placement(ds4_engine *e, int host, ds4_error *err)
{
    const ds4_placement *p = &e->place;
    uint8_t dev[DS4_MAX_DEVICES];
    for (int d = 0; d < p->n_devices; d++) dev[d] = (uint8_t)d;
    fwd_layer_place *lp = xcalloc((size_t)p->n_layer, sizeof *lp);
    fwd_placement fp;
    plan_to_fwd(p, dev, (uint8_t)(host >= 0 ? host : 0), lp, &fp);
    int rc = fwd_set_placement(e->impl, &fp, err);
    free(lp);
    return rc;
}

/* Plans the placement (engine/plan.h) over the devices already opened as
 * backends 0 … n−1 and, when parts stay in host memory, adds the CPU
 * backend for them. A plan that does not fit fails the open, except when
 * only planning: then the caller reads the numbers from
 * ds4_engine_placement. */
static int place_model(ds4_engine *e, int n_dev, ds4_error *err)
{
    fwd_engine *f = e->impl;
    plan_input in = {
        .n_devices = n_dev,
        .n_ctx = e->opt.plan_ctx > 0 ? e->opt.plan_ctx : DS4_DEFAULT_PLAN_CTX,
        .max_ctx = (int)(e->model->hp.n_ctx_train > 0 && e->model->hp.n_ctx_train < (1 << 30) ? e->model->hp.n_ctx_train : 0),
        .host_expert_layers = e->opt.host_expert_layers,
        .layer_first = e->opt.layer_first,
        .layer_end = e->opt.layer_end,
        .stream_experts = e->opt.stream_experts,
        .session_bytes = device_session_bytes,
        .ud = e,
    };
    ds4_placement *p = &e->place;
    memset(p, 0, sizeof *p);
    for (int d = 0; d < n_dev; d++) {
        void *ctx = fwd_backend_ctx(f, d);
        const clrt_device *cd = clrt_dev(clo_runtime(ctx));
        in.memory[d] = e->opt.device_memory ? e->opt.device_memory : cd->global_mem;
        in.shares_host_memory[d] = clo_zero_copy(ctx);
        snprintf(p->dev[d].name, sizeof p->dev[d].name, "%s", cd->name);
    }
    if (n_dev > 1)
        snprintf(p->device_name, sizeof p->device_name, "%d OpenCL devices: %.40s, %.40s%s", n_dev, p->dev[0].name,
                 p->dev[1].name, n_dev > 2 ? ", …" : "");
    if (e->opt.split && *e->opt.split) {
        char what[160];
        snprintf(what, sizeof what, "--split %s", e->opt.split);
        if (ds4_parse_shares(e->opt.split, n_dev, in.split, what, "device", err)) return -1;
    }
    if (plan_split(e->model, &in, p, err)) return -1;
    e->placed = true;
    /* each range's state on its device before sizing the sessions */
    if (n_dev > 1 && apply_placement(e, -1, err)) return -1;
    if (plan_make(e->model, &in, p, err) && !e->opt.plan_only) return -1;
    if (p->host_expert_layers > 0 || p->embed_on_host) {
        const ds4_ops *ops;
        void *cpu;
        void (*free_cpu)(void *);
        if (ds4_backend_cpu.ops_new(e, &ops, &cpu, &free_cpu, err)) return -1;
        int host = fwd_add_backend(f, ops, cpu, free_cpu, err);
        if (host < 0 || apply_placement(e, host, err)) return -1;
        /* the sessions' device shares under the placement in force */
        p->device_session = 0;
        for (int d = 0; d < n_dev; d++) {
            ds4_placement_device *dv = &p->dev[d];
            dv->session = device_session_bytes(e, d, p->n_ctx, dv->host_expert_layers < dv->n_layers || dv->stream_bytes);
            p->device_session += dv->session;
        }
        if (p->stream_bytes) fwd_set_stream(f, p->stream_experts);
    }
    return 0;
}

/* The devices of opt.device ("0,1": several; NULL or one piece: one),
 * each opened as a context without weights, the first as the engine's
 * own backend. Returns how many, or -1. */
static int open_devices(ds4_engine *e, clo_options *o, ds4_error *err)
{
    char pieces[DS4_MAX_DEVICES][DS4_DEVICE_PIECE_MAX];
    const char *src;
    int n = engine_device_pieces(e->opt.device, pieces, &src, err);
    if (n < 0) return -1;
    int count = n ? n : 1;
    int index[DS4_MAX_DEVICES];
    for (int d = 0; d < count; d++) {
        /* the piece resolved: $DS4CL_DEVICE is read once, above */
        o->device = n ? pieces[d] : NULL;
        void *ctx = clo_new(e->model, o, err);
        if (!ctx) return -1;
        index[d] = clrt_dev(clo_runtime(ctx))->index;
        for (int k = 0; k < d; k++)
            if (index[k] == index[d]) {
                clo_free(ctx);
                return ds4_error_set(err, "%s %s: device %d is named twice", src,
                                     src[0] == '-' ? e->opt.device : getenv("DS4CL_DEVICE"), index[d]);
            }
        bool host_cores = (clrt_dev(clo_runtime(ctx))->type & CL_DEVICE_TYPE_CPU) != 0;
        int rc = d == 0 ? fwd_backend_open(e, &clo_ops, ctx, clo_free, err)
                        : fwd_add_backend(e->impl, &clo_ops, ctx, clo_free, err) < 0 ? -1 : 0;
        if (rc) return -1;
        fwd_set_on_host_cores(e->impl, d, host_cores);
    }
    o->device = NULL;
    return count;
}

static int ocl_open(ds4_engine *e, ds4_error *err)
{
    clo_kernel_shape shape;
    if (kernel_shape(&shape, err)) return -1;
    /* The weights come after the plan: contexts without them first. A
     * given device memory makes the budget real: weights are copied even
     * where the device could read them in place. */
    clo_options o = { .shape = shape,
                      .no_weights = true,
                      .copy_weights = e->opt.device_memory != 0,
                      .device_mem = e->opt.device_memory,
                      .build_all = !e->opt.plan_only,
                      .progress = e->opt.load_progress,
                      .progress_ud = e->opt.load_ud };
    int n_dev = open_devices(e, &o, err);
    if (n_dev < 0) {
        if (e->impl) fwd_backend_close(e, clo_free);
        return -1;
    }
    fwd_set_chunk(e->impl, OCL_PREFILL_CHUNK);
    if (place_model(e, n_dev, err) || (!e->opt.plan_only && hold_weights(e, &o, err))) {
        fwd_backend_close(e, clo_free);
        return -1;
    }
    return 0;
}

static void ocl_close(ds4_engine *e)
{
    fwd_backend_close(e, clo_free);
}

static void ocl_describe(const ds4_engine *e, ds4_model_info *info)
{
    void *ctx = fwd_ops_ctx(e->impl);
    const clrt_device *d = clrt_dev(clo_runtime(ctx));
    if (e->place.n_devices > 1) {
        snprintf(info->device_name, sizeof info->device_name, "%.100s (layers split)", e->place.device_name);
        return;
    }
    snprintf(info->device_name, sizeof info->device_name, "%.60s (OpenCL %s, %.30s, %s kernels)", d->name,
             clrt_type_name(d->type), d->platform_name, clo_cpu_shaped(ctx) ? "CPU" : "GPU");
}

/* What a session takes on the devices: the memory planner's question. */
static uint64_t ocl_session_bytes(const ds4_engine *e, int n_ctx)
{
    uint64_t n = 0;
    for (int d = 0; d < e->place.n_devices; d++) {
        const ds4_placement_device *dv = &e->place.dev[d];
        n += device_session_bytes((void *)e, d, n_ctx, dv->host_expert_layers < dv->n_layers || dv->stream_bytes) +
             dv->stream_bytes;
    }
    return n;
}

static ds4_device_kind kind_of(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU) return DS4_DEVICE_GPU;
    if (t & CL_DEVICE_TYPE_CPU) return DS4_DEVICE_CPU;
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return DS4_DEVICE_ACCELERATOR;
    return DS4_DEVICE_OTHER;
}

static int ocl_devices(const char *piece, const char *src, ds4_device **out, int *n, int *selected, ds4_error *err)
{
    clrt_device *devs;
    if (clrt_devices(&devs, n, err) != 0) return -1;
    ds4_device *d = calloc((size_t)*n, sizeof *d);
    if (!d) {
        free(devs);
        return ds4_error_set(err, "out of memory");
    }
    for (int i = 0; i < *n; i++) {
        const clrt_device *c = &devs[i];
        d[i] = (ds4_device){ .index = c->index, .kind = kind_of(c->type), .compute_units = c->compute_units,
                             .memory = c->global_mem, .max_alloc = c->max_alloc, .shares_host_memory = c->unified };
        snprintf(d[i].name, sizeof d[i].name, "%s", c->name);
        snprintf(d[i].platform, sizeof d[i].platform, "%s", c->platform_name);
        snprintf(d[i].platform_version, sizeof d[i].platform_version, "%s", c->platform_version);
        snprintf(d[i].vendor, sizeof d[i].vendor, "%s", c->vendor);
        snprintf(d[i].driver, sizeof d[i].driver, "%s", c->driver);
        snprintf(d[i].version, sizeof d[i].version, "%s", c->c_version);
    }
    *selected = clrt_pick_piece(devs, *n, piece, src, err);
    free(devs);
    *out = d;
    return 0;
}

const ds4_backend_ops ds4_backend_opencl = {
    .name = "opencl",
    .needs_model = true,
    .open = ocl_open,
    .close = ocl_close,
    .devices = ocl_devices,
    .describe = ocl_describe,
    .session_bytes = ocl_session_bytes,
    FWD_BACKEND_SESSION_OPS,
};
