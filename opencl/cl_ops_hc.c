/* cl_ops_hc.c — hyper-connections on OpenCL: hc_pre, hc_post, hc_head
 * (kernels: kernels/hc.cl). A site is four launches: the per-token RMS
 * scale, the mixer product, the coefficients (one work-item per token,
 * Sinkhorn in the CPU backend's order) and the collapse. */
#include "opencl/cl_ops_impl.h"

#include "engine/quant.h"

#define PROG "hc"
#define F4 sizeof(float)

static int hc_common(clo_ctx *c, const char *op, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post,
                     ds4_buf *comb)
{
    const ds4_hparams *hp = c->hp;
    const int nh = hp->n_hc, n = hp->hc_dim, D = hp->n_embd;
    const bool head = post == NULL;
    const int n_mix = (int)w->fn->ne[1];
    if (clo_range(c, op, S, 0, (size_t)T * (size_t)n * F4) || clo_range(c, op, x, 0, (size_t)T * (size_t)D * F4))
        return -1;
    if (!head && (clo_range(c, op, post, 0, (size_t)T * (size_t)nh * F4) ||
                  clo_range(c, op, comb, 0, (size_t)T * (size_t)nh * (size_t)nh * F4)))
        return -1;
    uint32_t ft = w->fn->type;
    if (ft != GGML_TYPE_F32 && ft != GGML_TYPE_F16 && ft != GGML_TYPE_BF16 && ft != GGML_TYPE_Q8_0)
        return clo_fail(c, "%s: mixer type %s", op, quant_type_name(ft));
    if (w->fn->ne[0] != n || n_mix < (head ? nh : hp->mix_hc))
        return clo_fail(c, "%s: mixer %s is [%lld, %d], wanted [%d, %d]", op, w->fn->name, (long long)w->fn->ne[0], n_mix, n,
                        head ? nh : hp->mix_hc);
    if (w->scale->type != GGML_TYPE_F32 || w->base->type != GGML_TYPE_F32)
        return clo_fail(c, "%s: scale and base must be F32", op);

    cl_mem r = clo_scratch(c, CLO_SCR_A, (size_t)T * F4);
    cl_mem mix = clo_scratch(c, CLO_SCR_B, (size_t)T * (size_t)n_mix * F4);
    cl_mem pre = clo_scratch(c, CLO_SCR_C, (size_t)T * (size_t)nh * F4);
    if (!r || !mix || !pre) return -1;
    const bool cpu = clo_is_cpu(c);
    size_t l;
    clrt_call k;
    if (cpu) {
        /* CPU devices: a work-item per token / per (row, 4 tokens), vector loops */
        k = clrt_begin(c->rt, clo_kernel(c, PROG, "hc_rms_rows"));
        clo_arg_buf(&k, S, F4);
        clrt_arg_int(&k, n);
        clrt_arg_float(&k, hp->rms_eps);
        clrt_arg_mem(&k, r);
        clrt_arg_int(&k, T);
        size_t g1 = (size_t)T, l1 = clo_group(c, k.k, 4);
        if (clrt_enqueue(&k, 1, &g1, &l1)) return -1;
    } else {
        k = clrt_begin(c->rt, clo_kernel(c, PROG, "hc_rms"));
        l = clo_group(c, k.k, 256);
        clo_arg_buf(&k, S, F4);
        clrt_arg_int(&k, n);
        clrt_arg_float(&k, hp->rms_eps);
        clrt_arg_mem(&k, r);
        clrt_arg_local(&k, l * F4);
        size_t g1 = (size_t)T * l;
        if (clrt_enqueue(&k, 1, &g1, &l)) return -1;
    }

    const char *mix_kernel = "hc_mix";
    if (cpu)
        mix_kernel = ft == GGML_TYPE_F32    ? "hc_mix_rows_f32"
                     : ft == GGML_TYPE_F16  ? "hc_mix_rows_f16"
                     : ft == GGML_TYPE_BF16 ? "hc_mix_rows_bf16"
                                            : "hc_mix_rows_q8_0";
    k = clrt_begin(c->rt, clo_kernel(c, PROG, mix_kernel));
    if (clo_arg_weight(c, &k, w->fn, 0, (size_t)w->fn->nbytes, 1)) return -1;
    clrt_arg_int(&k, (cl_int)ft);
    clrt_arg_ulong(&k, w->fn->row_bytes);
    clo_arg_buf(&k, S, F4);
    clrt_arg_int(&k, n);
    clrt_arg_mem(&k, r);
    clrt_arg_mem(&k, mix);
    clrt_arg_int(&k, n_mix);
    if (cpu) {
        clrt_arg_int(&k, T);
        size_t g2[2] = { (size_t)n_mix, (size_t)(T + 3) / 4 }, l2[2] = { 1, 1 };
        if (clrt_enqueue(&k, 2, g2, l2)) return -1;
    } else {
        l = clo_group(c, k.k, 256);
        clrt_arg_local(&k, l * F4);
        size_t g2[2] = { (size_t)n_mix * l, (size_t)T }, l2[2] = { l, 1 };
        if (clrt_enqueue(&k, 2, g2, l2)) return -1;
    }

    k = clrt_begin(c->rt, clo_kernel(c, PROG, "hc_coef"));
    clrt_arg_mem(&k, mix);
    clrt_arg_int(&k, n_mix);
    if (clo_arg_weight(c, &k, w->scale, 0, (size_t)w->scale->nbytes, F4) ||
        clo_arg_weight(c, &k, w->base, 0, (size_t)w->base->nbytes, F4))
        return -1;
    clrt_arg_int(&k, nh);
    clrt_arg_float(&k, hp->hc_eps);
    clrt_arg_int(&k, hp->hc_sinkhorn_iters);
    clrt_arg_int(&k, head);
    clrt_arg_mem(&k, pre);
    clo_arg_buf(&k, head ? S : post, F4); /* unused by the head */
    clo_arg_buf(&k, head ? S : comb, F4);
    clrt_arg_int(&k, T);
    size_t g3 = (size_t)T, l3 = clo_group(c, k.k, 16);
    if (clrt_enqueue(&k, 1, &g3, &l3)) return -1;

    k = clrt_begin(c->rt, clo_kernel(c, PROG, "hc_collapse"));
    clo_arg_buf(&k, S, F4);
    clrt_arg_mem(&k, pre);
    clo_arg_buf(&k, x, F4);
    clrt_arg_int(&k, nh);
    clrt_arg_int(&k, D);
    clrt_arg_int(&k, T);
    size_t g4[2] = { (size_t)D, (size_t)T }, l4[2] = { clo_group(c, k.k, 64), 1 };
    return clrt_enqueue(&k, 2, g4, l4);
}

int clo_hc_pre(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post, ds4_buf *comb)
{
    if (!post || !comb) return clo_fail(ctx, "hc_pre needs post and comb buffers");
    return hc_common(ctx, "hc_pre", w, S, T, x, post, comb);
}

int clo_hc_head(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *y)
{
    return hc_common(ctx, "hc_head", w, S, T, y, NULL, NULL);
}

int clo_hc_post(void *ctx, ds4_buf *S_in, ds4_buf *F, ds4_buf *post, ds4_buf *comb, int T, ds4_buf *S_out)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    const int nh = hp->n_hc, D = hp->n_embd;
    size_t hs = (size_t)T * (size_t)hp->hc_dim * F4;
    if (clo_range(c, "hc_post", S_in, 0, hs) || clo_range(c, "hc_post", S_out, 0, hs) ||
        clo_range(c, "hc_post", F, 0, (size_t)T * (size_t)D * F4) ||
        clo_range(c, "hc_post", post, 0, (size_t)T * (size_t)nh * F4) ||
        clo_range(c, "hc_post", comb, 0, (size_t)T * (size_t)nh * (size_t)nh * F4))
        return -1;
    if (S_in->mem == S_out->mem && S_in->off < S_out->off + hs && S_out->off < S_in->off + hs)
        return clo_fail(c, "hc_post: output aliases input");
    /* CPU devices: eight dims per work-item when D allows */
    const bool by8 = clo_is_cpu(c) && D % 8 == 0;
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, PROG, by8 ? "hc_expand8" : "hc_expand"));
    clo_arg_buf(&k, S_in, F4);
    clo_arg_buf(&k, F, F4);
    clo_arg_buf(&k, post, F4);
    clo_arg_buf(&k, comb, F4);
    clo_arg_buf(&k, S_out, F4);
    clrt_arg_int(&k, nh);
    clrt_arg_int(&k, D);
    clrt_arg_int(&k, T);
    size_t g[3] = { (size_t)(by8 ? D / 8 : D), (size_t)nh, (size_t)T }, l[3] = { clo_group(c, k.k, by8 ? 8 : 64), 1, 1 };
    return clrt_enqueue(&k, 3, g, l);
}

void clo_hc_scratch_need(const clo_ctx *c, int T, uint64_t need[CLO_SCR_SLOTS])
{
    const ds4_hparams *hp = c->hp;
    const uint64_t t = (uint64_t)(T > 0 ? T : 1);
    const uint64_t n_mix = (uint64_t)(hp->mix_hc > hp->n_hc ? hp->mix_hc : hp->n_hc);
    const uint64_t want[CLO_SCR_SLOTS] = { [CLO_SCR_A] = t * F4, [CLO_SCR_B] = t * n_mix * F4,
                                           [CLO_SCR_C] = t * (uint64_t)hp->n_hc * F4 };
    for (int s = 0; s < CLO_SCR_SLOTS; s++)
        if (need[s] < want[s]) need[s] = want[s];
}
