/* cl_ops.h — the OpenCL implementation of ds4_ops (engine/ops.h) for one
 * bound model: buffers are OpenCL buffers on one device, every operation
 * is enqueued on one in-order queue, and only read() waits.
 *
 * Weights: every tensor of the model file gets device memory once, at
 * creation. On a device that shares host memory (CL_DEVICE_HOST_UNIFIED_
 * MEMORY, or a CPU device such as PoCL) that is a zero-copy buffer over the
 * mapped file (CL_MEM_USE_HOST_PTR, from the tensor start rounded down to
 * CL_DEVICE_MEM_BASE_ADDR_ALIGN; kernels receive the byte offset);
 * otherwise the bytes are uploaded, with progress, after checking that
 * they fit the device's memory. A tensor larger than the device's largest
 * allocation is split into several buffers at expert boundaries (3-D
 * tensors) or row boundaries; an op finds the piece holding the range it
 * reads.
 *
 * Ops that cannot validate data that lives on the device (token ids, expert
 * ids) do not fail on bad values: an embedding row outside the table is
 * written as zeros. The schedule only passes valid ids.
 */
#ifndef DS4CL_CL_OPS_H
#define DS4CL_CL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ops.h"
#include "opencl/cl_runtime.h"

extern const ds4_ops clo_ops;

/* Kernel shapes: CPU-shaped (a few work-items, each looping over vectors)
 * or GPU-shaped (work-groups with lane-strided loads and local
 * reductions). AUTO picks by device type; tests force each on any device. */
typedef enum { CLO_SHAPE_AUTO = 0, CLO_SHAPE_CPU, CLO_SHAPE_GPU } clo_kernel_shape;

typedef struct {
    const char *device;     /* selection, as clrt_pick */
    clo_kernel_shape shape;
    const char *cache_dir;  /* program cache root, as clrt_options */
    bool copy_weights;      /* upload even where zero-copy is possible */
    uint64_t max_alloc;     /* per-buffer limit below the device's; 0 = the device's */
    uint64_t device_mem;    /* device memory below the device's; 0 = the device's */
    bool no_weights;        /* give the model file's weights no device memory
                               (planning only: ops that read weights fail) */
    bool build_all;         /* build every program the ops use now (a model
                               load), not each at its first use */
    /* Progress of a weight upload (fraction 0..1, short label); may be NULL. */
    void (*progress)(void *ud, double fraction, const char *what);
    void *progress_ud;
} clo_options;

/* A context for m on the selected device (o may be NULL); NULL with err on
 * failure (no OpenCL, no matching device, weights do not fit). */
void *clo_new(const ds4_model *m, const clo_options *o, ds4_error *err);
void clo_free(void *ctx);
clrt *clo_runtime(void *ctx);
/* The kernel shape the context runs (AUTO resolved): true for CPU-shaped. */
bool clo_cpu_shaped(void *ctx);

/* Gives a tensor that is not part of the model file device memory too
 * (tests build odd shapes this way); its data must outlive the context. */
int clo_add_tensor(void *ctx, const ds4_tensor *t, ds4_error *err);

/* Gives the tensors ts[0 … n) device memory (those that have none yet),
 * reporting progress through o (may be NULL): a placement's share of the
 * model on a context opened with no_weights. */
int clo_hold_tensors(void *ctx, const ds4_tensor *const *ts, size_t n, const clo_options *o, ds4_error *err);
/* Whether weights stay in host memory that the device reads in place. */
bool clo_zero_copy(void *ctx);

typedef struct {
    uint64_t bytes;    /* tensor bytes given device memory */
    uint64_t uploaded; /* of which copied to the device (0 when zero-copy) */
    int buffers;       /* OpenCL buffers made for them */
    int split;         /* tensors split over several buffers */
} clo_weight_info;
void clo_weights(void *ctx, clo_weight_info *out);

/* Device bytes the context's own scratch reaches for chunks of up to T
 * tokens in a session of n_ctx: every op's scratch (hyper-connections,
 * the indexer's keys and transposed queries, attention block partials,
 * the MoE's when experts says routed experts run here), with the slack
 * clo_scratch grows by. An upper bound: the
 * memory planner adds it to the session's buffers. */
uint64_t clo_scratch_estimate(void *ctx, int T, int n_ctx, bool experts);

/* Device memory the context holds besides the weights: session buffers
 * (ds4_ops alloc) and scratch, now and at most so far. */
typedef struct {
    uint64_t buffers, scratch; /* now */
    uint64_t peak;             /* largest buffers + scratch held at once */
} clo_device_use;
void clo_device_usage(void *ctx, clo_device_use *out);

#endif
