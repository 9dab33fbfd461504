/* cl_attn.c — compressed attention on OpenCL: compress, indexer, attention
 * (kernels: kernels/attn_comp.cl, attn_index.cl, attn.cl). Everything
 * stays on the device: the indexer's scores and its top-k selection, and
 * the attention's per-block partials, live in scratch buffers. */
#include "opencl/cl_ops_impl.h"

#include <math.h>

#include "engine/quant.h"

#define F4 sizeof(float)

/* Compressor ape rows are read element by element (dense_elem). */
static bool dense_type(uint32_t t)
{
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0;
}

/* ---- compress ------------------------------------------------------------------------------ */

/* comp_pool and comp_store open with the same arguments: the chunk's two
 * projections, the position embedding and the frontier ring. */
static int comp_common_args(clo_ctx *c, clrt_call *k, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front,
                            int64_t front_rows, int R)
{
    clo_arg_buf(k, a, F4);
    clo_arg_buf(k, b, F4);
    if (clo_arg_weight(c, k, ape, 0, (size_t)ape->nbytes, 1)) return -1;
    clrt_arg_int(k, (cl_int)ape->type);
    clrt_arg_ulong(k, ape->row_bytes);
    clo_arg_buf(k, front, F4);
    clrt_arg_long(k, front_rows);
    clrt_arg_int(k, R);
    return 0;
}

int clo_compress(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front, int64_t front_rows, int R,
                 int lanes, int d, int64_t pos0, int T, ds4_buf *pooled)
{
    clo_ctx *c = ctx;
    if (R < 1 || lanes < 1 || lanes > 2 || d < 1 || pos0 < 0 || T < 0)
        return clo_fail(c, "compress: ratio %d, %d lanes of %d dims at position %lld", R, lanes, d, (long long)pos0);
    if (T == 0) return 0;
    const int W = lanes * d;
    const int64_t w_first = pos0 / R, n_emit = (pos0 + T) / R - w_first;
    if (ape->ne[0] != W || ape->ne[1] != R)
        return clo_fail(c, "compress: ape [%lld, %lld] does not match ratio %d × width %d", (long long)ape->ne[0],
                        (long long)ape->ne[1], R, W);
    if (!dense_type(ape->type)) return clo_fail(c, "compress: ape of type %s", quant_type_name(ape->type));
    if (front_rows < (int64_t)lanes * R + T)
        return clo_fail(c, "compress: frontier of %lld rows is too small for ratio %d, %d lanes and %d tokens",
                        (long long)front_rows, R, lanes, T);
    size_t chunk = (size_t)T * (size_t)W * F4;
    if (clo_range(c, "compress", a, 0, chunk) || clo_range(c, "compress", b, 0, chunk) ||
        clo_range(c, "compress", front, 0, (size_t)front_rows * 2 * (size_t)W * F4) ||
        (n_emit > 0 && clo_range(c, "compress", pooled, 0, (size_t)n_emit * (size_t)d * F4)))
        return -1;
    if (n_emit > 0) {
        clrt_call k = clrt_begin(c->rt, clo_kernel(c, "attn_comp", "comp_pool"));
        if (comp_common_args(c, &k, a, b, ape, front, front_rows, R)) return -1;
        clrt_arg_int(&k, lanes);
        clrt_arg_int(&k, d);
        clrt_arg_long(&k, pos0);
        clrt_arg_long(&k, w_first);
        clrt_arg_int(&k, (cl_int)n_emit);
        clo_arg_buf(&k, pooled, F4);
        size_t g[2] = { (size_t)d, (size_t)n_emit }, l[2] = { clo_group(c, k.k, 64), 1 };
        if (clrt_enqueue(&k, 2, g, l)) return -1;
    }
    /* the chunk joins the ring only after the pooling (in-order queue) */
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, "attn_comp", "comp_store"));
    if (comp_common_args(c, &k, a, b, ape, front, front_rows, R)) return -1;
    clrt_arg_int(&k, W);
    clrt_arg_long(&k, pos0);
    clrt_arg_int(&k, T);
    size_t g[2] = { (size_t)W, (size_t)T }, l[2] = { clo_group(c, k.k, 64), 1 };
    return clrt_enqueue(&k, 2, g, l);
}

/* ---- indexer -------------------------------------------------------------------------------- */

enum { IDX_HEADS = 64, IDX_ROWS = 4 }; /* as in attn_index.cl */

int clo_indexer(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R, int64_t pos0, int T,
                ds4_buf *sel)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    const int nh = hp->n_indexer_head, hd = hp->indexer_head_dim, k = hp->indexer_top_k;
    if (R < 1 || pos0 < 0 || T < 0) return clo_fail(c, "indexer: ratio %d at position %lld", R, (long long)pos0);
    if (T == 0) return 0;
    const int64_t max_vis = (pos0 + T) / R;
    const size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    if (clo_range(c, "indexer", q, 0, (size_t)T * (size_t)nh * (size_t)hd * F4) ||
        clo_range(c, "indexer", weights, 0, (size_t)T * (size_t)nh * F4) ||
        clo_range(c, "indexer", rows, 0, (size_t)max_vis * (size_t)hd * es) ||
        clo_range(c, "indexer", sel, 0, (size_t)T * (size_t)k * 4))
        return -1;
    const bool rank = max_vis > k;
    cl_mem keys = clo_scratch(c, CLO_SCR_A, rank ? (size_t)T * (size_t)max_vis * 4 : 4);
    if (!keys) return -1;
    if (rank) {
        /* heads padded to whole groups of IDX_HEADS lanes */
        const int nhp = (nh + IDX_HEADS - 1) / IDX_HEADS * IDX_HEADS;
        const size_t nq = (size_t)T * (size_t)hd * (size_t)nhp;
        cl_mem qT = clo_scratch(c, CLO_SCR_B, (nq + (size_t)T * (size_t)nhp) * F4);
        if (!qT) return -1;
        clrt_call s = clrt_begin(c->rt, clo_kernel(c, "attn_index", "idx_transpose"));
        clo_arg_buf(&s, q, F4);
        clo_arg_buf(&s, weights, F4);
        clrt_arg_int(&s, nh);
        clrt_arg_int(&s, hd);
        clrt_arg_int(&s, nhp);
        clrt_arg_float(&s, 1.0f / sqrtf((float)(hd * nh)));
        clrt_arg_int(&s, T);
        clrt_arg_mem(&s, qT);
        clrt_arg_mem(&s, qT);
        clrt_arg_ulong(&s, nq);
        size_t g0[3] = { (size_t)nhp, (size_t)hd, (size_t)T }, l0[3] = { clo_group(c, s.k, 64), 1, 1 };
        if (clrt_enqueue(&s, 3, g0, l0)) return -1;
        const bool cpu = clo_is_cpu(c);
        const char *kname = ct == DS4_CACHE_F16 ? (cpu ? "idx_scores_f16" : "idx_scores_wi_f16")
                                                : (cpu ? "idx_scores_f32" : "idx_scores_wi_f32");
        s = clrt_begin(c->rt, clo_kernel(c, "attn_index", kname));
        clrt_arg_mem(&s, qT);
        clrt_arg_mem(&s, qT);
        clrt_arg_ulong(&s, nq);
        clo_arg_buf(&s, rows, es);
        clrt_arg_int(&s, nhp);
        clrt_arg_int(&s, hd);
        clrt_arg_int(&s, R);
        clrt_arg_long(&s, pos0);
        clrt_arg_int(&s, T);
        clrt_arg_int(&s, k);
        clrt_arg_long(&s, max_vis);
        clrt_arg_mem(&s, keys);
        /* CPU shape: IDX_ROWS rows per work-item; GPU shape: one row */
        size_t g[2] = { cpu ? (size_t)(max_vis + IDX_ROWS - 1) / IDX_ROWS : (size_t)max_vis, (size_t)T };
        size_t l[2] = { clo_group(c, s.k, cpu ? 4 : 64), 1 };
        if (clrt_enqueue(&s, 2, g, l)) return -1;
    }
    /* CPU devices: one work-item per token, a sequential select */
    clrt_call s = clrt_begin(c->rt, clo_kernel(c, "attn_index", "idx_topk"));
    size_t L = clo_is_cpu(c) ? 1 : clo_group(c, s.k, 256);
    clrt_arg_mem(&s, keys);
    clrt_arg_long(&s, rank ? max_vis : 0);
    clrt_arg_int(&s, R);
    clrt_arg_long(&s, pos0);
    clrt_arg_int(&s, k);
    clo_arg_buf(&s, sel, 4);
    clrt_arg_local(&s, 256 * 4);
    clrt_arg_local(&s, 2 * L * 4);
    clrt_arg_local(&s, 2 * 4);
    size_t g = (size_t)T * L;
    return clrt_enqueue(&s, 1, &g, &L);
}

/* ---- attention ------------------------------------------------------------------------------ */

/* ATTN_HG and ATTN_SB as in attn.cl */
enum { ATTN_HG = 8, ATTN_SB = 32, ATTN_MIN_BLOCK = 64 };

/* Blocks per token that would fill the device for T tokens; the rows
 * then set the block length, which can only lower the count. */
static int64_t attn_blocks_wanted(const clo_ctx *c, int T)
{
    const int H = c->hp->n_head;
    const bool cpu = clo_is_cpu(c);
    const int64_t groups = (int64_t)T * (cpu ? (H + ATTN_HG - 1) / ATTN_HG : H);
    const int64_t cu = clrt_dev(c->rt)->compute_units ? clrt_dev(c->rt)->compute_units : 1;
    const int64_t target = cpu ? 16 * cu : 8 * cu;
    return groups >= target ? 1 : (target + groups - 1) / groups;
}

int clo_attention(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows, ds4_buf *comp, int R,
                  ds4_buf *sel, int sel_stride, const ds4_tensor *sinks, int64_t pos0, int T, ds4_buf *o)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    const int H = hp->n_head, hd = hp->head_dim, n_swa = hp->n_swa;
    const size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    if (R < 0 || pos0 < 0 || T < 0 || raw_rows < 1 || (sel && sel_stride < 0))
        return clo_fail(c, "attention: ratio %d, %lld raw rows at position %lld", R, (long long)raw_rows,
                        (long long)pos0);
    if (T == 0) return 0;
    if (hd % 16) return clo_fail(c, "attention: rows of %d dims (a multiple of 16 is needed)", hd);
    const int64_t n_comp = R > 0 ? (sel ? sel_stride : (pos0 + T) / R) : 0;
    /* the chunk's newest row must not have replaced a row its oldest query reads */
    const int64_t oldest = pos0 - n_swa + 1 < 0 ? 0 : pos0 - n_swa + 1;
    if (pos0 + T - 1 - oldest >= raw_rows)
        return clo_fail(c, "attention: raw ring of %lld rows for %d tokens", (long long)raw_rows, T);
    const size_t qo = (size_t)T * (size_t)H * (size_t)hd * F4;
    if (clo_range(c, "attention", q, 0, qo) || clo_range(c, "attention", o, 0, qo) ||
        clo_range(c, "attention", raw, 0, (size_t)raw_rows * (size_t)hd * es) ||
        (sel && clo_range(c, "attention", sel, 0, (size_t)T * (size_t)sel_stride * 4)))
        return -1;
    /* rows the compressed buffer holds: all it has for a selection (rows
     * listed beyond them are skipped, never read), the visible ones else */
    int64_t comp_rows = 0;
    if (R > 0 && n_comp > 0) {
        if (!comp) return clo_fail(c, "attention: missing compressed rows");
        if (sel) comp_rows = (int64_t)(comp->n / ((size_t)hd * es));
        else if (clo_range(c, "attention", comp, 0, (size_t)n_comp * (size_t)hd * es)) return -1;
        else comp_rows = n_comp;
    }
    if (sinks->type != GGML_TYPE_F32 || sinks->ne[0] != H) return clo_fail(c, "attention: sinks are not F32 [%d]", H);

    /* Blocks of rows per token: enough work-items (CPU shape: one per
     * token × ATTN_HG heads × block) or work-groups (GPU shape: one per
     * token × head × block) to fill the device, no block shorter than
     * ATTN_MIN_BLOCK rows. */
    const bool cpu = clo_is_cpu(c);
    const char *kname = ct == DS4_CACHE_F16 ? (cpu ? "attn_part_f16" : "attn_wg_f16")
                                            : (cpu ? "attn_part_f32" : "attn_wg_f32");
    clrt_call k = clrt_begin(c->rt, clo_kernel(c, "attn", kname));
    /* GPU shape: L × L scores and L partial sums in local memory */
    size_t L = cpu ? 1 : clo_group(c, k.k, 64);
    while (L > 1 && (L * L + L) * F4 > clrt_dev(c->rt)->local_mem) L /= 2;
    const int64_t n_max = (pos0 + T < n_swa ? pos0 + T : n_swa) + n_comp;
    const int64_t sub = cpu ? ATTN_SB : (int64_t)L;
    int64_t nb = attn_blocks_wanted(c, T);
    int64_t rb = (n_max + nb - 1) / nb;
    rb = (rb + sub - 1) / sub * sub;
    if (rb < ATTN_MIN_BLOCK) rb = ATTN_MIN_BLOCK;
    nb = (n_max + rb - 1) / rb;
    if (nb < 1) nb = 1;
    cl_mem part = NULL, mz = NULL;
    if (nb > 1) {
        part = clo_scratch(c, CLO_SCR_A, (size_t)T * (size_t)H * (size_t)nb * (size_t)hd * F4);
        mz = clo_scratch(c, CLO_SCR_B, (size_t)T * (size_t)H * (size_t)nb * 2 * F4);
        if (!part || !mz) return -1;
    }

    clo_arg_buf(&k, q, F4);
    clo_arg_buf(&k, raw, es);
    clrt_arg_long(&k, raw_rows);
    clo_arg_buf(&k, comp_rows ? comp : raw, es);
    clrt_arg_long(&k, comp_rows);
    clrt_arg_int(&k, R);
    clo_arg_buf(&k, sel ? sel : q, 4);
    clrt_arg_int(&k, sel ? sel_stride : 0);
    clrt_arg_int(&k, sel != NULL);
    if (clo_arg_weight(c, &k, sinks, 0, (size_t)sinks->nbytes, F4)) return -1;
    clrt_arg_int(&k, H);
    clrt_arg_int(&k, hd);
    clrt_arg_int(&k, n_swa);
    clrt_arg_float(&k, 1.0f / sqrtf((float)hd));
    clrt_arg_long(&k, pos0);
    clrt_arg_int(&k, T);
    clrt_arg_long(&k, rb);
    clrt_arg_int(&k, (cl_int)nb);
    if (nb > 1) {
        clrt_arg_mem(&k, part);
        clrt_arg_ulong(&k, 0);
        clrt_arg_mem(&k, mz);
    } else {
        clo_arg_buf(&k, o, F4);
        clrt_arg_mem(&k, o->mem); /* no (max, sum) pairs with one block */
    }
    if (cpu) {
        size_t g[3] = { (size_t)nb, (size_t)((H + ATTN_HG - 1) / ATTN_HG), (size_t)T }, l[3] = { 1, 1, 1 };
        if (clrt_enqueue(&k, 3, g, l)) return -1;
    } else {
        clrt_arg_local(&k, L * L * F4);
        clrt_arg_local(&k, L * F4);
        size_t g[3] = { (size_t)nb * L, (size_t)H, (size_t)T }, l[3] = { L, 1, 1 };
        if (clrt_enqueue(&k, 3, g, l)) return -1;
    }
    if (nb == 1) return 0;

    k = clrt_begin(c->rt, clo_kernel(c, "attn", "attn_combine"));
    clrt_arg_mem(&k, part);
    clrt_arg_mem(&k, mz);
    clrt_arg_int(&k, H);
    clrt_arg_int(&k, hd);
    clrt_arg_int(&k, (cl_int)nb);
    clrt_arg_int(&k, T);
    clo_arg_buf(&k, o, F4);
    size_t g2[2] = { (size_t)H, (size_t)T }, l2[2] = { clo_group(c, k.k, 8), 1 };
    return clrt_enqueue(&k, 2, g2, l2);
}

/* ---- scratch ------------------------------------------------------------------------------- */

static void at_least(uint64_t *slot, uint64_t bytes)
{
    if (*slot < bytes) *slot = bytes;
}

void clo_attn_scratch_need(const clo_ctx *c, int T, int n_ctx, uint64_t need[CLO_SCR_SLOTS])
{
    const ds4_hparams *hp = c->hp;
    const uint64_t H = (uint64_t)hp->n_head, hd = (uint64_t)hp->head_dim;
    /* attention block partials and their (max, sum) pairs: the most over
     * every chunk length up to T (fewer tokens, more blocks each) */
    for (int t = 1; t <= T; t++) {
        const uint64_t nb = (uint64_t)attn_blocks_wanted(c, t);
        if (nb < 2) continue;
        at_least(&need[CLO_SCR_A], (uint64_t)t * H * nb * hd * F4);
        at_least(&need[CLO_SCR_B], (uint64_t)t * H * nb * 2 * F4);
    }
    /* indexer: keys of every visible compressed row per token, and the
     * padded transposed queries, on the ratio-4 layers once they rank */
    bool indexed = false;
    for (int l = 0; l < hp->n_layer; l++) indexed |= hp->compress_ratio[l] == 4;
    const uint64_t max_vis = (uint64_t)(n_ctx > 0 ? n_ctx : 1) / 4;
    if (!indexed || max_vis <= (uint64_t)hp->indexer_top_k || T < 1) return;
    const uint64_t nhp = ((uint64_t)hp->n_indexer_head + IDX_HEADS - 1) / IDX_HEADS * IDX_HEADS;
    at_least(&need[CLO_SCR_A], (uint64_t)T * max_vis * 4);
    at_least(&need[CLO_SCR_B], ((uint64_t)T * (uint64_t)hp->indexer_head_dim * nhp + (uint64_t)T * nhp) * F4);
}
