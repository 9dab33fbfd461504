/* cl_ops_rope.c — positions and rounding on OpenCL: rope, sim, store_rows
 * (kernels: kernels/rope.cl). */
#include "opencl/cl_ops_impl.h"

#include <math.h>

#define PROG "rope"
#define F4 sizeof(float)

int clo_rope(void *ctx, ds4_buf *x, int64_t n_rows, int n_heads, int dim, const ds4_rope *rope, int64_t pos0,
             int pos_step, int inverse)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "rope", x, 0, (size_t)n_rows * (size_t)n_heads * (size_t)dim * F4)) return -1;
    if (rope->n_rot > dim || rope->n_rot % 2 || rope->n_rot < 0)
        return clo_fail(c, "rope: %d rotated dims of %d", rope->n_rot, dim);
    /* the YaRN magnitude term exactly as the host reference computes it */
    float ext_mscale = rope->ext_factor != 0.0f ? 1.0f + 0.1f * logf(1.0f / rope->freq_scale) : 1.0f;
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, PROG, "rope_f32"));
    clo_arg_buf(&k, x, F4);
    clrt_arg_int(&k, n_heads);
    clrt_arg_int(&k, dim);
    clrt_arg_int(&k, rope->n_rot);
    clrt_arg_long(&k, pos0);
    clrt_arg_int(&k, pos_step);
    clrt_arg_int(&k, (cl_int)n_rows);
    clrt_arg_float(&k, rope->theta_scale);
    clrt_arg_float(&k, rope->freq_scale);
    clrt_arg_float(&k, rope->ext_factor);
    clrt_arg_float(&k, rope->attn_factor);
    clrt_arg_float(&k, rope->corr_lo);
    clrt_arg_float(&k, rope->corr_hi);
    clrt_arg_float(&k, ext_mscale);
    clrt_arg_int(&k, inverse != 0);
    size_t half = (size_t)(rope->n_rot / 2);
    size_t g[2] = { half, (size_t)n_rows }, l[2] = { clo_group(c, k.k, half ? half : 1), 1 };
    return clrt_enqueue(&k, 2, g, l);
}

int clo_sim(void *ctx, ds4_buf *x, int64_t n_rows, int dim, ds4_sim kind)
{
    clo_ctx *c = ctx;
    if (clo_range(c, "sim", x, 0, (size_t)n_rows * (size_t)dim * F4)) return -1;
    if (kind == DS4_SIM_FP8_NOPE) {
        int n = c->hp->n_nope;
        if (n > dim) return clo_fail(c, "fp8 simulation of %d dims in rows of %d", n, dim);
        clrt_call k = clrt_begin(c->rt, clo_kernel(c, PROG, "sim_fp8"));
        clo_arg_buf(&k, x, F4);
        clrt_arg_int(&k, dim);
        clrt_arg_int(&k, n);
        clrt_arg_int(&k, (cl_int)n_rows);
        size_t g[2] = { (size_t)(n + 63) / 64, (size_t)n_rows }, l[2] = { 1, clo_group(c, k.k, 16) };
        return clrt_enqueue(&k, 2, g, l);
    }
    if (kind != DS4_SIM_HADAMARD && kind != DS4_SIM_HADAMARD_FP4) return clo_fail(c, "sim: unknown kind %d", (int)kind);
    if (dim < 1 || (dim & (dim - 1))) return clo_fail(c, "Hadamard rotation of %d dims (not a power of two)", dim);
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, PROG, "sim_hadamard"));
    clo_arg_buf(&k, x, F4);
    clrt_arg_int(&k, dim);
    clrt_arg_float(&k, (float)(1.0 / sqrt((double)dim)));
    clrt_arg_int(&k, (cl_int)n_rows);
    size_t g = (size_t)n_rows, l = clo_group(c, k.k, 16);
    if (clrt_enqueue(&k, 1, &g, &l)) return -1;
    if (kind != DS4_SIM_HADAMARD_FP4) return 0;
    /* then the e2m1 round trip, a work-item per block of 32 (rope.cl) */
    k = clrt_begin(c->rt, clo_kernel(c, PROG, "sim_fp4"));
    clo_arg_buf(&k, x, F4);
    clrt_arg_int(&k, dim);
    clrt_arg_int(&k, (cl_int)n_rows);
    size_t g2[2] = { (size_t)(dim + 31) / 32, (size_t)n_rows }, l2[2] = { 1, clo_group(c, k.k, 16) };
    return clrt_enqueue(&k, 2, g2, l2);
}

int clo_store_rows(void *ctx, ds4_buf *src, int64_t n_rows, int dim, ds4_buf *dst, ds4_cache_type ct, int64_t row0,
                   int64_t ring_rows)
{
    clo_ctx *c = ctx;
    size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    if (clo_range(c, "store_rows", src, 0, (size_t)n_rows * (size_t)dim * F4)) return -1;
    if (n_rows <= 0) return 0;
    if (row0 < 0) return clo_fail(c, "store_rows: row %lld", (long long)row0);
    /* the highest slot written: the rows are consecutive modulo the ring */
    int64_t top;
    if (ring_rows > 0) {
        int64_t first = row0 % ring_rows;
        top = first + n_rows > ring_rows ? ring_rows - 1 : first + n_rows - 1;
    } else {
        top = row0 + n_rows - 1;
    }
    if (clo_range(c, "store_rows", dst, 0, (size_t)(top + 1) * (size_t)dim * es)) return -1;
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, PROG, "store_rows"));
    clo_arg_buf(&k, src, F4);
    clrt_arg_int(&k, dim);
    clrt_arg_int(&k, (cl_int)n_rows);
    clo_arg_buf(&k, dst, 1);
    clrt_arg_int(&k, ct == DS4_CACHE_F16);
    clrt_arg_long(&k, row0);
    clrt_arg_long(&k, ring_rows);
    size_t g[2] = { (size_t)dim, (size_t)n_rows }, l[2] = { clo_group(c, k.k, 64), 1 };
    return clrt_enqueue(&k, 2, g, l);
}
