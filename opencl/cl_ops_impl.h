/* cl_ops_impl.h — what the OpenCL op files share: the context, the buffer
 * record, weight lookup, scratch, argument helpers, and one function per
 * compute op of ds4_ops (engine/ops.h gives their exact semantics).
 *
 * Files: cl_ops.c (context, weights, memory ops, the table),
 * cl_ops_basic.c (embed, add, swiglu, rmsnorm, argmax), cl_ops_hc.c
 * (hc_pre, hc_post, hc_head), cl_ops_rope.c (rope, sim, store_rows),
 * cl_matmul.c (matmul, moe), cl_attn.c (compress, indexer, attention),
 * cl_router.c (router); kernels in opencl/kernels/<name>.cl, one program
 * per file (see cl_runtime.h).
 *
 * Buffer arguments: a ds4_buf is an OpenCL buffer plus a byte offset
 * (views share their base's cl_mem). Kernels therefore take every buffer
 * as two arguments, the pointer and its offset in elements of the
 * pointee type:
 *
 *     __kernel void add_f32(__global const float *a, ulong a_off, …)
 *     { a += a_off; … }
 *
 * and the host side passes them with clo_arg_buf(&call, buf, sizeof(float)).
 * Weights go the same way with clo_arg_weight (pointer + offset of the
 * requested range within its device buffer, in elements of `elem` bytes;
 * quantized weights use elem = 1, i.e. bytes).
 *
 * Ops only enqueue: no clFinish, no blocking transfers (ops.h design
 * rules).
 */
#ifndef DS4CL_CL_OPS_IMPL_H
#define DS4CL_CL_OPS_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "opencl/cl_ops.h"
#include "opencl/cl_runtime.h"

struct ds4_buf {
    cl_mem mem;   /* retained by every view */
    size_t off;   /* bytes from the start of mem */
    size_t n;     /* bytes */
    bool is_view;
};

/* One device buffer holding [data, data + bytes) of a host tensor; mem
 * starts `off` bytes before data (zero-copy alignment) or at it. */
typedef struct {
    const uint8_t *data;
    size_t bytes;
    cl_mem mem;
    size_t off;
} clo_piece;

/* Scratch slots: distinct areas an op may hold at the same time. */
enum { CLO_SCR_A, CLO_SCR_B, CLO_SCR_C, CLO_SCR_D, CLO_SCR_SLOTS };

/* Tensors one loan may hold (a layer's gate, up and down experts). */
enum { CLO_LEND_SLOTS = 3 };

typedef struct {
    const ds4_model *m;
    const ds4_hparams *hp;
    clrt *rt;
    clo_piece *w;       /* sorted by data */
    size_t n_w, cap_w;
    clo_weight_info winfo;
    bool zero_copy;
    bool cpu_shaped;    /* see clo_is_cpu */
    uint64_t max_alloc;
    uint64_t device_mem;
    cl_mem scr[CLO_SCR_SLOTS];
    size_t scr_n[CLO_SCR_SLOTS];
    clo_device_use use; /* see clo_device_usage */
    /* weights lent for the ops that follow (ds4_ops.lend): a buffer per
     * tensor, kept and grown across loans; their pieces are in w while lent */
    cl_mem lend_mem[CLO_LEND_SLOTS];
    size_t lend_cap[CLO_LEND_SLOTS];
    bool lent;
    /* the IQ2_XXS tables every product kernel takes (cl_matmul.c), made
     * at the first product */
    cl_mem iq2_grid, iq2_signs;
} clo_ctx;

/* Records a message for last_error(); returns -1. */
int clo_fail(clo_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* -1 (recorded, naming op) unless [off, off+n) lies inside b. */
int clo_range(clo_ctx *c, const char *op, const ds4_buf *b, size_t off, size_t n);

/* The kernel, or NULL (recorded). */
static inline cl_kernel clo_kernel(clo_ctx *c, const char *program, const char *kernel)
{
    return clrt_kernel(c->rt, program, kernel);
}

/* A power-of-two work-group size for kernel k: `want`, or less where the
 * device or that kernel allows less (clrt_kernel_max_group; NULL k: the
 * device's limit). Every launch shaped by it fits the kernel's limit. */
size_t clo_group(const clo_ctx *c, cl_kernel k, size_t want);
/* True when ops should use CPU-shaped kernels: on CPU devices (PoCL),
 * where work-items that loop over vectors beat GPU-style lane striding,
 * unless clo_options.shape forces one shape (tests run both). */
bool clo_is_cpu(const clo_ctx *c);

/* Buffer argument pair: mem, ulong offset in elements of elem bytes. A NULL
 * buffer passes a NULL pointer and offset 0. */
void clo_arg_buf(clrt_call *call, const ds4_buf *b, size_t elem);

/* The piece holding [p, p + bytes), or NULL. */
const clo_piece *clo_weight(const clo_ctx *c, const void *p, size_t bytes);
/* Weight argument pair for [t->data + offset, + bytes): mem, ulong offset
 * in elements of elem bytes. -1 (recorded) when that range is not on the
 * device in one piece. */
int clo_arg_weight(clo_ctx *c, clrt_call *call, const ds4_tensor *t, size_t offset, size_t bytes, size_t elem);

/* A device buffer of at least `bytes` for a scratch slot (contents not
 * kept when it grows, by a quarter more than asked, CLO_SCRATCH_SLACK);
 * NULL (recorded) on failure. Growing releases the old buffer, which
 * OpenCL keeps alive for work already queued on it. Every op's use of a
 * slot must be counted in clo_scratch_estimate (cl_ops.c). */
#define CLO_SCRATCH_SLACK(bytes) ((bytes) + (bytes) / 4)
cl_mem clo_scratch(clo_ctx *c, int slot, size_t bytes);

/* ---- the compute ops (signatures of ds4_ops) ------------------------------ */

/* cl_ops_basic.c */
int clo_embed(void *ctx, const ds4_tensor *table, ds4_buf *tokens, int T, ds4_buf *S);
int clo_rmsnorm(void *ctx, ds4_buf *x, const ds4_tensor *w, int64_t n_rows, int n, ds4_buf *y);
int clo_swiglu(void *ctx, ds4_buf *g, ds4_buf *u, int T, int n, float clamp, ds4_buf *mid);
int clo_add(void *ctx, ds4_buf *a, ds4_buf *b, int64_t n, ds4_buf *y);
int clo_argmax(void *ctx, ds4_buf *x, int64_t n, ds4_buf *out);

/* cl_ops_hc.c */
int clo_hc_pre(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post, ds4_buf *comb);
int clo_hc_post(void *ctx, ds4_buf *S_in, ds4_buf *F, ds4_buf *post, ds4_buf *comb, int T, ds4_buf *S_out);
int clo_hc_head(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *y);
/* The same for the hyper-connection ops. */
void clo_hc_scratch_need(const clo_ctx *c, int T, uint64_t need[CLO_SCR_SLOTS]);

/* cl_ops_rope.c */
int clo_rope(void *ctx, ds4_buf *x, int64_t n_rows, int n_heads, int dim, const ds4_rope *rope, int64_t pos0,
             int pos_step, int inverse);
int clo_sim(void *ctx, ds4_buf *x, int64_t n_rows, int dim, ds4_sim kind);
int clo_store_rows(void *ctx, ds4_buf *src, int64_t n_rows, int dim, ds4_buf *dst, ds4_cache_type ct, int64_t row0,
                   int64_t ring_rows);

/* cl_matmul.c */
/* Builds the parts of matmul.cl (cl_runtime.h) that the weights of f
 * (NULL: none) use, and the auxiliary one. 0, or -1 (recorded). */
int clo_build_products(clo_ctx *c, const gguf_file *f);
int clo_matmul(void *ctx, const ds4_tensor *W, ds4_buf *x, int T, int n_groups, ds4_buf *y);
int clo_moe(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down, ds4_buf *x, ds4_buf *sel,
            ds4_buf *weights, int T, float clamp, ds4_buf *y);
/* Device bytes of the scratch clo_moe holds for chunks of T tokens. */
uint64_t clo_moe_scratch_bytes(const ds4_hparams *hp, int T);

/* cl_attn.c */
int clo_compress(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front, int64_t front_rows, int R,
                 int lanes, int d, int64_t pos0, int T, ds4_buf *pooled);
int clo_indexer(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R, int64_t pos0, int T,
                ds4_buf *sel);
int clo_attention(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows, ds4_buf *comp, int R,
                  ds4_buf *sel, int sel_stride, const ds4_tensor *sinks, int64_t pos0, int T, ds4_buf *o);
/* Raises need[slot] to the scratch bytes the attention family asks of
 * each slot for chunks of up to T tokens in a session of n_ctx. */
void clo_attn_scratch_need(const clo_ctx *c, int T, int n_ctx, uint64_t need[CLO_SCR_SLOTS]);

/* cl_router.c */
int clo_router(void *ctx, ds4_buf *logits, const ds4_tensor *bias, const ds4_tensor *tid2eid, ds4_buf *tokens, int T,
               ds4_buf *sel, ds4_buf *weights);

#endif
