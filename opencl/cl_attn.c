/* cl_attn.c — compressed attention on OpenCL: compress, indexer, attention
 * (kernels: kernels/attn*.cl). */
#include "opencl/cl_ops_impl.h"

CL_OP_STUB(compress);
CL_OP_STUB(indexer);
CL_OP_STUB(attention);

int clo_compress(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front, int64_t front_rows, int R,
                 int lanes, int d, int64_t pos0, int T, ds4_buf *pooled)
{
    (void)a, (void)b, (void)ape, (void)front, (void)front_rows, (void)R, (void)lanes, (void)d, (void)pos0, (void)T,
        (void)pooled;
    return clo_fail(ctx, "opencl: compress not implemented");
}

int clo_indexer(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R, int64_t pos0, int T,
                ds4_buf *sel)
{
    (void)q, (void)weights, (void)rows, (void)ct, (void)R, (void)pos0, (void)T, (void)sel;
    return clo_fail(ctx, "opencl: indexer not implemented");
}

int clo_attention(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows, ds4_buf *comp, int R,
                  ds4_buf *sel, int sel_stride, const ds4_tensor *sinks, int64_t pos0, int T, ds4_buf *o)
{
    (void)q, (void)raw, (void)ct, (void)raw_rows, (void)comp, (void)R, (void)sel, (void)sel_stride, (void)sinks,
        (void)pos0, (void)T, (void)o;
    return clo_fail(ctx, "opencl: attention not implemented");
}
