/* cl_ops_basic.c — embed, add, swiglu, rmsnorm, argmax on OpenCL
 * (kernels: kernels/basic.cl). */
#include "opencl/cl_ops_impl.h"

#include "engine/quant.h"

#define PROG "basic"
#define F4 sizeof(float)

static bool dense_type(uint32_t t)
{
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0;
}

int clo_embed(void *ctx, const ds4_tensor *table, ds4_buf *tokens, int T, ds4_buf *S)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int64_t D = table->ne[0], V = table->ne[1];
    if (clo_range(c, "embed", tokens, 0, (size_t)T * 4) ||
        clo_range(c, "embed", S, 0, (size_t)T * (size_t)hp->n_hc * (size_t)D * F4))
        return -1;
    if (!dense_type(table->type)) return clo_fail(c, "embed: table type %s", quant_type_name(table->type));
    cl_kernel k = clo_kernel(c, PROG, "embed_rows");
    if (!k) return -1;
    /* one launch per device piece of the table (one unless it was split) */
    size_t rb = (size_t)table->row_bytes;
    for (int64_t r0 = 0; r0 < V;) {
        const uint8_t *p = (const uint8_t *)table->data + (size_t)r0 * rb;
        const clo_piece *w = clo_weight(c, p, rb);
        if (!w) return clo_fail(c, "embed: row %lld of %s is not on the device", (long long)r0, table->name);
        int64_t r1 = r0 + (int64_t)((size_t)(w->data + w->bytes - p) / rb);
        if (r1 > V) r1 = V;
        clrt_call call = clrt_begin(c->rt, k);
        if (clo_arg_weight(c, &call, table, (size_t)r0 * rb, (size_t)(r1 - r0) * rb, 1)) return -1;
        clrt_arg_int(&call, (cl_int)table->type);
        clrt_arg_ulong(&call, rb);
        clrt_arg_int(&call, (cl_int)r0);
        clrt_arg_int(&call, (cl_int)r1);
        clrt_arg_int(&call, (cl_int)V);
        clo_arg_buf(&call, tokens, 4);
        clo_arg_buf(&call, S, F4);
        clrt_arg_int(&call, hp->n_hc);
        clrt_arg_int(&call, (cl_int)D);
        clrt_arg_int(&call, T);
        size_t g[2] = { (size_t)D, (size_t)T }, l[2] = { clo_group(c, call.k, 64), 1 };
        if (clrt_enqueue(&call, 2, g, l)) return -1;
        r0 = r1;
    }
    return 0;
}

/* Elementwise kernels over n floats. */
static size_t ew_group(clo_ctx *c, cl_kernel k) { return clo_group(c, k, 256); }

int clo_add(void *ctx, ds4_buf *a, ds4_buf *b, int64_t n, ds4_buf *y)
{
    clo_ctx *c = ctx;
    size_t bytes = (size_t)n * F4;
    if (clo_range(c, "add", a, 0, bytes) || clo_range(c, "add", b, 0, bytes) || clo_range(c, "add", y, 0, bytes))
        return -1;
    clrt_call call = clrt_begin(c->rt, clo_kernel(c, PROG, "add_f32"));
    clo_arg_buf(&call, a, F4);
    clo_arg_buf(&call, b, F4);
    clo_arg_buf(&call, y, F4);
    clrt_arg_ulong(&call, (cl_ulong)n);
    size_t g = (size_t)n, l = ew_group(c, call.k);
    return clrt_enqueue(&call, 1, &g, &l);
}

int clo_swiglu(void *ctx, ds4_buf *g, ds4_buf *u, int T, int n, float clamp, ds4_buf *mid)
{
    clo_ctx *c = ctx;
    size_t total = (size_t)T * (size_t)n;
    if (clo_range(c, "swiglu", g, 0, total * F4) || clo_range(c, "swiglu", u, 0, total * F4) ||
        clo_range(c, "swiglu", mid, 0, total * F4))
        return -1;
    clrt_call call = clrt_begin(c->rt, clo_kernel(c, PROG, "swiglu_f32"));
    clo_arg_buf(&call, g, F4);
    clo_arg_buf(&call, u, F4);
    clo_arg_buf(&call, mid, F4);
    clrt_arg_ulong(&call, total);
    clrt_arg_float(&call, clamp);
    size_t l = ew_group(c, call.k);
    return clrt_enqueue(&call, 1, &total, &l);
}

int clo_rmsnorm(void *ctx, ds4_buf *x, const ds4_tensor *w, int64_t n_rows, int n, ds4_buf *y)
{
    clo_ctx *c = ctx;
    size_t bytes = (size_t)n_rows * (size_t)n * F4;
    if (clo_range(c, "rmsnorm", x, 0, bytes) || clo_range(c, "rmsnorm", y, 0, bytes)) return -1;
    if (w && (w->type != GGML_TYPE_F32 || w->ne[0] != n)) return clo_fail(c, "rmsnorm: weight is not F32 [%d]", n);
    const bool cpu = clo_is_cpu(c);
    clrt_call call = clrt_begin(c->rt, clo_kernel(c, PROG, cpu ? "rmsnorm_rows" : "rmsnorm_f32"));
    clo_arg_buf(&call, x, F4);
    if (w) {
        if (clo_arg_weight(c, &call, w, 0, (size_t)n * F4, F4)) return -1;
    } else {
        /* any valid buffer: the kernel does not read it */
        clo_arg_buf(&call, x, F4);
    }
    clrt_arg_int(&call, w != NULL);
    clo_arg_buf(&call, y, F4);
    clrt_arg_int(&call, n);
    clrt_arg_float(&call, c->hp->rms_eps);
    if (cpu) {
        /* CPU devices: a work-item per row */
        clrt_arg_int(&call, (cl_int)n_rows);
        size_t g = (size_t)n_rows, l = clo_group(c, call.k, 8);
        return clrt_enqueue(&call, 1, &g, &l);
    }
    /* GPUs: a work-group per row */
    size_t l = clo_group(c, call.k, 256);
    clrt_arg_local(&call, l * F4);
    size_t g = (size_t)n_rows * l;
    return clrt_enqueue(&call, 1, &g, &l);
}

int clo_argmax(void *ctx, ds4_buf *x, int64_t n, ds4_buf *out)
{
    clo_ctx *c = ctx;
    if (n < 1) return clo_fail(c, "argmax over %lld values", (long long)n);
    if (clo_range(c, "argmax", x, 0, (size_t)n * F4) || clo_range(c, "argmax", out, 0, 4)) return -1;
    clrt_call call = clrt_begin(c->rt, clo_kernel(c, PROG, "argmax_f32"));
    clo_arg_buf(&call, x, F4);
    clrt_arg_ulong(&call, (cl_ulong)n);
    clo_arg_buf(&call, out, 4);
    size_t l = clo_group(c, call.k, 256);
    clrt_arg_local(&call, l * F4);
    clrt_arg_local(&call, l * 4);
    return clrt_enqueue(&call, 1, &l, &l);
}
