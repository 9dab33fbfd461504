/* cl_matmul.c — dense and expert products on OpenCL: matmul, moe
 * (kernels: kernels/matmul*.cl). */
#include "opencl/cl_ops_impl.h"

CL_OP_STUB(matmul);
CL_OP_STUB(moe);

int clo_matmul(void *ctx, const ds4_tensor *W, ds4_buf *x, int T, int n_groups, ds4_buf *y)
{
    (void)W, (void)x, (void)T, (void)n_groups, (void)y;
    return clo_fail(ctx, "opencl: matmul not implemented");
}

int clo_moe(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down, ds4_buf *x, ds4_buf *sel,
            ds4_buf *weights, int T, float clamp, ds4_buf *y)
{
    (void)gate, (void)up, (void)down, (void)x, (void)sel, (void)weights, (void)T, (void)clamp, (void)y;
    return clo_fail(ctx, "opencl: moe not implemented");
}
