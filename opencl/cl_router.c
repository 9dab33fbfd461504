/* cl_router.c — expert selection on OpenCL: router (kernels:
 * kernels/router.cl). */
#include "opencl/cl_ops_impl.h"

CL_OP_STUB(router);

int clo_router(void *ctx, ds4_buf *logits, const ds4_tensor *bias, const ds4_tensor *tid2eid, ds4_buf *tokens, int T,
               ds4_buf *sel, ds4_buf *weights)
{
    (void)logits, (void)bias, (void)tid2eid, (void)tokens, (void)T, (void)sel, (void)weights;
    return clo_fail(ctx, "opencl: router not implemented");
}
