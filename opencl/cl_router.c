/* cl_router.c — expert selection on OpenCL: router (kernels:
 * kernels/router.cl). One launch, one work-item per token; the selection
 * and weights stay on the device for the expert op. */
#include "opencl/cl_ops_impl.h"

#include "engine/quant.h"

#define F4 sizeof(float)

int clo_router(void *ctx, ds4_buf *logits, const ds4_tensor *bias, const ds4_tensor *tid2eid, ds4_buf *tokens, int T,
               ds4_buf *sel, ds4_buf *weights)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    const int E = hp->n_expert, k = hp->n_expert_used;
    if (T <= 0) return 0;
    if (clo_range(c, "router", logits, 0, (size_t)T * (size_t)E * F4) ||
        clo_range(c, "router", sel, 0, (size_t)T * (size_t)k * 4) ||
        clo_range(c, "router", weights, 0, (size_t)T * (size_t)k * F4) ||
        (tid2eid && clo_range(c, "router", tokens, 0, (size_t)T * 4)))
        return -1;
    if (bias && (bias->type != GGML_TYPE_F32 || bias->ne[0] != E))
        return clo_fail(c, "router: bias %s is not F32 [%d]", bias->name ? bias->name : "?", E);
    if (tid2eid && (tid2eid->type != GGML_TYPE_I32 || tid2eid->ne[0] != k))
        return clo_fail(c, "router: hash table %s is not I32 [%d, …]", tid2eid->name ? tid2eid->name : "?", k);
    clrt_call call = clrt_begin(c->rt, clo_kernel(c, "router", "router_topk"));
    clo_arg_buf(&call, logits, F4);
    if (bias) {
        if (clo_arg_weight(c, &call, bias, 0, (size_t)bias->nbytes, F4)) return -1;
    } else {
        clo_arg_buf(&call, logits, F4); /* unused */
    }
    clrt_arg_int(&call, bias != NULL);
    if (tid2eid) {
        if (clo_arg_weight(c, &call, tid2eid, 0, (size_t)tid2eid->nbytes, 4)) return -1;
    } else {
        clo_arg_buf(&call, sel, 4); /* unused */
    }
    clrt_arg_int(&call, tid2eid != NULL);
    clrt_arg_int(&call, tid2eid ? (cl_int)tid2eid->ne[1] : 0);
    clo_arg_buf(&call, tid2eid ? tokens : sel, 4);
    clo_arg_buf(&call, sel, 4);
    clo_arg_buf(&call, weights, F4);
    clrt_arg_int(&call, E);
    clrt_arg_int(&call, k);
    clrt_arg_int(&call, hp->expert_weights_norm);
    clrt_arg_float(&call, hp->expert_weights_scale);
    clrt_arg_int(&call, T);
    size_t g = (size_t)T, l = clo_group(c, call.k, 16);
    return clrt_enqueue(&call, 1, &g, &l);
}
