/* cl_ops_rope.c — positions and rounding on OpenCL: rope, sim, store_rows
 * (kernels: kernels/rope.cl). */
#include "opencl/cl_ops_impl.h"

CL_OP_STUB(rope);
CL_OP_STUB(sim);
CL_OP_STUB(store_rows);

int clo_rope(void *ctx, ds4_buf *x, int64_t n_rows, int n_heads, int dim, const ds4_rope *rope, int64_t pos0,
             int pos_step, int inverse)
{
    (void)x, (void)n_rows, (void)n_heads, (void)dim, (void)rope, (void)pos0, (void)pos_step, (void)inverse;
    return clo_fail(ctx, "opencl: rope not implemented");
}

int clo_sim(void *ctx, ds4_buf *x, int64_t n_rows, int dim, ds4_sim kind)
{
    (void)x, (void)n_rows, (void)dim, (void)kind;
    return clo_fail(ctx, "opencl: sim not implemented");
}

int clo_store_rows(void *ctx, ds4_buf *src, int64_t n_rows, int dim, ds4_buf *dst, ds4_cache_type ct, int64_t row0,
                   int64_t ring_rows)
{
    (void)src, (void)n_rows, (void)dim, (void)dst, (void)ct, (void)row0, (void)ring_rows;
    return clo_fail(ctx, "opencl: store_rows not implemented");
}
