/* backend_opencl.c — the OpenCL backend: its devices (listed, opened,
 * described, given the weights the engine's placement puts on them; the
 * engine plans, engine/place.c) and the forward schedule over the device
 * ops of cl_ops.c. */
#include "engine/backend.h"
#include "engine/forward.h"
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

/* The context options under e's: the weights come after the plan, so
 * contexts open without them; a given device memory makes the budget
 * real (weights are copied even where the device could read them in
 * place). */
static clo_options options_of(const ds4_engine *e, clo_kernel_shape shape)
{
    return (clo_options){ .shape = shape,
                          .no_weights = true,
                          .copy_weights = e->opt.device_memory != 0,
                          .device_mem = e->opt.device_memory,
                          .build_all = !e->opt.plan_only,
                          .progress = e->opt.load_progress,
                          .progress_ud = e->opt.load_ud };
}

static int dev_open(ds4_engine *e, const char *piece, const ds4_ops **ops, void **ctx, ds4_error *err)
{
    clo_kernel_shape shape;
    if (kernel_shape(&shape, err)) return -1;
    clo_options o = options_of(e, shape);
    o.device = piece;
    *ctx = clo_new(e->model, &o, err);
    *ops = &clo_ops;
    return *ctx ? 0 : -1;
}

static ds4_device_kind kind_of(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU) return DS4_DEVICE_GPU;
    if (t & CL_DEVICE_TYPE_CPU) return DS4_DEVICE_CPU;
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return DS4_DEVICE_ACCELERATOR;
    return DS4_DEVICE_OTHER;
}

static void describe_device(const clrt_device *c, ds4_device *d)
{
    *d = (ds4_device){ .index = c->index, .kind = kind_of(c->type), .compute_units = c->compute_units,
                       .memory = c->global_mem, .max_alloc = c->max_alloc, .shares_host_memory = c->unified };
    snprintf(d->name, sizeof d->name, "%s", c->name);
    snprintf(d->platform, sizeof d->platform, "%s", c->platform_name);
    snprintf(d->platform_version, sizeof d->platform_version, "%s", c->platform_version);
    snprintf(d->vendor, sizeof d->vendor, "%s", c->vendor);
    snprintf(d->driver, sizeof d->driver, "%s", c->driver);
    snprintf(d->version, sizeof d->version, "%s", c->c_version);
    clrt_describe_limits(c, d->limits, sizeof d->limits);
}

/* An opened context: its device; shares_host_memory when its weights stay
 * in host memory (zero-copy in force, not only possible). */
static void dev_describe(void *ctx, ds4_device *out)
{
    describe_device(clrt_dev(clo_runtime(ctx)), out);
    out->shares_host_memory = clo_zero_copy(ctx);
}

static int dev_hold(const ds4_engine *e, void *ctx, const ds4_tensor *const *t, size_t n, ds4_error *err)
{
    clo_options o = options_of(e, CLO_SHAPE_AUTO);
    return clo_hold_tensors(ctx, t, n, &o, err);
}

static const ds4_device_ops ocl_device_ops = {
    .family = "OpenCL",
    .prefill_chunk = OCL_PREFILL_CHUNK,
    .open = dev_open,
    .free = clo_free,
    .describe = dev_describe,
    .scratch_bytes = clo_scratch_estimate,
    .hold = dev_hold,
};

/* One device's name (several: the engine names the split). */
static void ocl_describe(const ds4_engine *e, ds4_model_info *info)
{
    void *ctx = fwd_ops_ctx(e->impl);
    const clrt_device *d = clrt_dev(clo_runtime(ctx));
    snprintf(info->device_name, sizeof info->device_name, "%.60s (OpenCL %s, %.30s, %s kernels)", d->name,
             clrt_type_name(d->type), d->platform_name, clo_cpu_shaped(ctx) ? "CPU" : "GPU");
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
    for (int i = 0; i < *n; i++) describe_device(&devs[i], &d[i]);
    *selected = clrt_pick_piece(devs, *n, piece, src, err);
    free(devs);
    *out = d;
    return 0;
}

static const ds4_backend_ops opencl_backend = {
    .id = DS4_BACKEND_OPENCL,
    .name = "opencl",
    .needs_model = true,
    .device = &ocl_device_ops,
    .devices = ocl_devices,
    .describe = ocl_describe,
    FWD_BACKEND_SESSION_OPS,
};
DS4_BACKEND_REGISTER(opencl_backend)
