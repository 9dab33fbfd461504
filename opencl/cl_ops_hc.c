/* cl_ops_hc.c — hyper-connections on OpenCL: hc_pre, hc_post, hc_head
 * (kernels: kernels/hc.cl). */
#include "opencl/cl_ops_impl.h"

CL_OP_STUB(hc_pre);
CL_OP_STUB(hc_post);
CL_OP_STUB(hc_head);

int clo_hc_pre(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post, ds4_buf *comb)
{
    (void)w, (void)S, (void)T, (void)x, (void)post, (void)comb;
    return clo_fail(ctx, "opencl: hc_pre not implemented");
}

int clo_hc_post(void *ctx, ds4_buf *S_in, ds4_buf *F, ds4_buf *post, ds4_buf *comb, int T, ds4_buf *S_out)
{
    (void)S_in, (void)F, (void)post, (void)comb, (void)T, (void)S_out;
    return clo_fail(ctx, "opencl: hc_post not implemented");
}

int clo_hc_head(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *y)
{
    (void)w, (void)S, (void)T, (void)y;
    return clo_fail(ctx, "opencl: hc_head not implemented");
}
