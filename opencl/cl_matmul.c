/* cl_matmul.c — dense and expert products on OpenCL: matmul, moe
 * (kernels: kernels/matmul.cl, whose header explains the numerics and the
 * kernel shapes).
 *
 * matmul: one launch per device piece of the weight (one unless the tensor
 * was split). CPU devices: a work-item per four rows a quarter of the
 * matrix apart (decode, T < MM_TB, one token after another) or per row
 * block × token block (prefill tiles); GPUs: a work-group per row with a
 * local reduction for decode, the same tiles for prefill (correct, not
 * tuned: no GPU has run them yet).
 *
 * moe: up to MOE_FUSED_MAX_T tokens, two fused launches: gate+up+SwiGLU+weight for
 * every (token, slot) pair, then down + the slot-order sum per token. For
 * a chunk, the pairs are grouped by expert on the device (moe_sort), each
 * expert's pairs are cut into tiles that reuse every dequantized weight
 * chunk across the tile's tokens, the down products land per pair, and a
 * last kernel sums each token's slots in order, so nothing depends on the
 * order in which work-items run. Expert ids are not checked on the device:
 * an id outside [0, n_expert) contributes nothing.
 */
#include "opencl/cl_ops_impl.h"

#include <stdio.h>
#include <string.h>

#include "engine/quant.h"

#define PROG "matmul"
#define F4 sizeof(float)

/* Mirrors matmul.cl. */
enum { MM_RB = 4, MM_TB = 6, MOE_GU_RB = 2, MOE_DN_RB = 4, MOE_TB = 6 };

/* MoE chunks of up to this many tokens take the fused decode kernels. */
#define MOE_FUSED_MAX_T 4

static const char *type_sfx(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32: return "f32";
    case GGML_TYPE_F16: return "f16";
    case GGML_TYPE_BF16: return "bf16";
    case GGML_TYPE_Q8_0: return "q8_0";
    case GGML_TYPE_Q2_K: return "q2_k";
    case GGML_TYPE_Q4_K: return "q4_k";
    case GGML_TYPE_IQ2_XXS: return "iq2_xxs";
    }
    return NULL;
}

static bool expert_type(uint32_t t)
{
    return t == GGML_TYPE_IQ2_XXS || t == GGML_TYPE_Q2_K || t == GGML_TYPE_Q4_K;
}

/* The part of matmul.cl (cl_runtime.h) holding the kernels of `family`
 * ("mm_dec", "moe_gu_tile", …) for weight type `type`. */
static void part_for(char *buf, size_t n, const char *family, uint32_t type)
{
    const char *sfx = type_sfx(type);
    snprintf(buf, n, PROG ":%s_%s", strncmp(family, "moe_", 4) ? "mm" : "moe", sfx ? sfx : "none");
}

static cl_kernel kernel_for(clo_ctx *c, const char *family, uint32_t type)
{
    char name[64], part[64];
    const char *sfx = type_sfx(type);
    snprintf(name, sizeof name, "%s_%s", family, sfx ? sfx : "none");
    part_for(part, sizeof part, family, type);
    return clo_kernel(c, part, name);
}

int clo_build_products(clo_ctx *c, const gguf_file *f)
{
    /* bit (2·type + expert) of the parts already built */
    uint64_t done[2] = { 0 };
    if (clrt_build(c->rt, PROG ":aux")) return -1;
    for (size_t i = 0; f && i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        bool expert = t->n_dims >= 3 && t->ne[2] > 1;
        if (t->n_dims < 2 || t->ne[1] < 2 || !type_sfx(t->type) || (expert && !expert_type(t->type))) continue;
        unsigned bit = 2 * (t->type & 63) + expert;
        if (done[bit / 64] >> (bit % 64) & 1) continue;
        done[bit / 64] |= 1ull << (bit % 64);
        char part[64];
        part_for(part, sizeof part, expert ? "moe_" : "mm_", t->type);
        if (clrt_build(c->rt, part)) return -1;
    }
    return 0;
}

static size_t up_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* The engine's IQ2_XXS tables in the layout the kernels read
 * (matmul.cl, IQ2_TABS), on the device once. */
static int iq2_tables(clo_ctx *c)
{
    if (c->iq2_grid && c->iq2_signs) return 0;
    float grid[256 * 8]; /* copied at the buffers' creation */
    uint32_t signs[128 * 8];
    for (int i = 0; i < 256 * 8; i++) grid[i] = (float)(uint8_t)(quant_iq2xxs_grid[i / 8] >> (8 * (i % 8)));
    for (int i = 0; i < 128 * 8; i++) signs[i] = (quant_ksigns_iq2xs[i / 8] >> (i % 8) & 1) ? 0x80000000u : 0u;
    cl_int rc = CL_SUCCESS;
    if (!c->iq2_grid)
        c->iq2_grid = clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof grid, grid, &rc);
    if (c->iq2_grid && !c->iq2_signs)
        c->iq2_signs =
            clCreateBuffer(clrt_context(c->rt), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof signs, signs, &rc);
    if (!c->iq2_grid || !c->iq2_signs) return clo_fail(c, "the IQ2_XXS tables on the device: %s", clrt_strerror(rc));
    return 0;
}

/* A launch of product kernel k, its first arguments (the tables) set. */
static int product_begin(clo_ctx *c, cl_kernel k, clrt_call *call)
{
    if (!k || iq2_tables(c)) return -1;
    *call = clrt_begin(c->rt, k);
    clrt_arg_mem(call, c->iq2_grid);
    clrt_arg_mem(call, c->iq2_signs);
    return 0;
}

/* ---- matmul ------------------------------------------------------------------------ */

/* Rows [r0, r1) of W, all in one device piece. */
static int matmul_piece(clo_ctx *c, const ds4_tensor *W, int64_t r0, int64_t r1, ds4_buf *x, int T, int n_groups,
                        ds4_buf *y)
{
    const int n = (int)W->ne[0], out = (int)W->ne[1], rpg = out / n_groups;
    const int g_lo = (int)(r0 / rpg), n_g = (int)((r1 - 1) / rpg) + 1 - g_lo;
    const size_t rb = (size_t)W->row_bytes;
    const bool cpu = clo_is_cpu(c), tiles = T >= MM_TB;
    const char *family = tiles ? "mm_tile" : cpu ? "mm_dec" : "mv_wg";
    clrt_call call;
    if (product_begin(c, kernel_for(c, family, W->type), &call)) return -1;
    if (clo_arg_weight(c, &call, W, (size_t)r0 * rb, (size_t)(r1 - r0) * rb, 1)) return -1;
    clrt_arg_ulong(&call, rb);
    clrt_arg_int(&call, n);
    clrt_arg_int(&call, (cl_int)r0);
    clrt_arg_int(&call, (cl_int)r1);
    clrt_arg_int(&call, rpg);
    if (tiles || cpu) {
        clrt_arg_int(&call, g_lo);
        clrt_arg_int(&call, n_g);
    }
    clo_arg_buf(&call, x, F4);
    clrt_arg_ulong(&call, (cl_ulong)n * (cl_ulong)n_groups);
    clo_arg_buf(&call, y, F4);
    clrt_arg_ulong(&call, (cl_ulong)out);
    clrt_arg_int(&call, T);
    if (!tiles && !cpu) {
        size_t l = clo_group(c, call.k, 64);
        clrt_arg_local(&call, l * F4);
        size_t g = (size_t)(r1 - r0) * l;
        return clrt_enqueue(&call, 1, &g, &l);
    }
    /* CPU devices: an expert-format tile takes every token block, so that
     * its rows are dequantized once (matmul.cl, deq_first) */
    size_t tb = !tiles || (cpu && expert_type(W->type)) ? 1 : up_div((size_t)T, MM_TB);
    size_t g[3] = { up_div((size_t)rpg, tiles ? MM_RB : 4), tb, (size_t)n_g };
    size_t l[3] = { clo_group(c, call.k, cpu ? (tiles ? 8 : 16) : 64), 1, 1 };
    if (l[0] > g[0]) l[0] = clo_group(c, call.k, g[0]);
    return clrt_enqueue(&call, 3, g, l);
}

int clo_matmul(void *ctx, const ds4_tensor *W, ds4_buf *x, int T, int n_groups, ds4_buf *y)
{
    clo_ctx *c = ctx;
    if (!W || !W->data) return clo_fail(c, "matmul: missing weight");
    const int64_t n = W->ne[0], out = W->ne[1];
    if (!type_sfx(W->type)) return clo_fail(c, "matmul: %s has type %s", W->name, quant_type_name(W->type));
    if (n_groups < 1 || out % n_groups)
        return clo_fail(c, "matmul: %lld rows of %s in %d groups", (long long)out, W->name, n_groups);
    if (T < 0 || n > INT32_MAX || out > INT32_MAX) return clo_fail(c, "matmul: %s at T = %d", W->name, T);
    if (clo_range(c, "matmul", x, 0, (size_t)T * (size_t)n_groups * (size_t)n * F4) ||
        clo_range(c, "matmul", y, 0, (size_t)T * (size_t)out * F4))
        return -1;
    if (T == 0 || out == 0) return 0;
    const size_t rb = (size_t)W->row_bytes;
    for (int64_t r0 = 0; r0 < out;) {
        const uint8_t *p = (const uint8_t *)W->data + (size_t)r0 * rb;
        const clo_piece *w = clo_weight(c, p, rb);
        if (!w) return clo_fail(c, "matmul: row %lld of %s is not on the device", (long long)r0, W->name);
        int64_t r1 = r0 + (int64_t)((size_t)(w->data + w->bytes - p) / rb);
        if (r1 > out) r1 = out;
        if (matmul_piece(c, W, r0, r1, x, T, n_groups, y)) return -1;
        r0 = r1;
    }
    return 0;
}

/* ---- moe ------------------------------------------------------------------------------ */

typedef struct {
    const ds4_tensor *gate, *up, *down;
    ds4_buf *x, *sel, *wt, *y;
    int T, k, E, D, F, P;
    float clamp;
} moe_args;

/* The experts [e, *e_end) of t that lie in the device piece holding expert e. */
static int expert_run(clo_ctx *c, const ds4_tensor *t, int e, int E, int *e_end)
{
    size_t eb = (size_t)t->ne[1] * (size_t)t->row_bytes;
    const uint8_t *p = (const uint8_t *)t->data + (size_t)e * eb;
    const clo_piece *w = clo_weight(c, p, eb);
    if (!w) return clo_fail(c, "moe: expert %d of %s is not on the device", e, t->name);
    int64_t n = (int64_t)((size_t)(w->data + w->bytes - p) / eb);
    *e_end = n >= E - e ? E : e + (int)n;
    return 0;
}

static bool whole_on_device(clo_ctx *c, const ds4_tensor *t)
{
    return clo_weight(c, t->data, (size_t)t->nbytes) != NULL;
}

/* Gate/up arguments shared by every gate/up kernel, for experts [e0, e1). */
static int gu_args(clo_ctx *c, clrt_call *call, const moe_args *a, int e0, int e1, cl_mem mid)
{
    size_t eb = (size_t)a->F * (size_t)a->gate->row_bytes;
    if (clo_arg_weight(c, call, a->gate, (size_t)e0 * eb, (size_t)(e1 - e0) * eb, 1) ||
        clo_arg_weight(c, call, a->up, (size_t)e0 * eb, (size_t)(e1 - e0) * eb, 1))
        return -1;
    clrt_arg_ulong(call, a->gate->row_bytes);
    clrt_arg_int(call, a->D);
    clrt_arg_int(call, a->F);
    clrt_arg_int(call, e0);
    clrt_arg_int(call, e1);
    clo_arg_buf(call, a->x, F4);
    clo_arg_buf(call, a->sel, 4);
    clo_arg_buf(call, a->wt, F4);
    clrt_arg_int(call, a->k);
    clrt_arg_float(call, a->clamp);
    clrt_arg_mem(call, mid);
    return 0;
}

static int down_args(clo_ctx *c, clrt_call *call, const moe_args *a, int e0, int e1, cl_mem mid, cl_mem out,
                     ds4_buf *out_buf)
{
    size_t eb = (size_t)a->D * (size_t)a->down->row_bytes;
    if (clo_arg_weight(c, call, a->down, (size_t)e0 * eb, (size_t)(e1 - e0) * eb, 1)) return -1;
    clrt_arg_ulong(call, a->down->row_bytes);
    clrt_arg_int(call, a->F);
    clrt_arg_int(call, a->D);
    clrt_arg_int(call, e0);
    clrt_arg_int(call, e1);
    clrt_arg_mem(call, mid);
    clo_arg_buf(call, a->sel, 4);
    clrt_arg_int(call, a->k);
    if (out_buf) {
        clo_arg_buf(call, out_buf, F4);
    } else {
        clrt_arg_mem(call, out);
        clrt_arg_ulong(call, 0);
    }
    return 0;
}

/* Two launches for all pairs: every tensor is one device piece. */
static int moe_fused(clo_ctx *c, const moe_args *a)
{
    cl_mem mid = clo_scratch(c, CLO_SCR_A, (size_t)a->P * (size_t)a->F * F4);
    if (!mid) return -1;
    const bool cpu = clo_is_cpu(c);
    clrt_call call;
    if (product_begin(c, kernel_for(c, cpu ? "moe_gu_dec" : "moe_gu_wg", a->gate->type), &call)) return -1;
    if (gu_args(c, &call, a, 0, a->E, mid)) return -1;
    size_t lw = clo_group(c, call.k, 64);
    if (cpu) {
        clrt_arg_int(&call, a->P);
        size_t g[2] = { up_div((size_t)a->F, 2), (size_t)a->P }, l[2] = { clo_group(c, call.k, 16), 1 };
        if (clrt_enqueue(&call, 2, g, l)) return -1;
    } else {
        clrt_arg_local(&call, lw * F4);
        size_t g[2] = { (size_t)a->F * lw, (size_t)a->P }, l[2] = { lw, 1 };
        if (clrt_enqueue(&call, 2, g, l)) return -1;
    }
    if (product_begin(c, kernel_for(c, cpu ? "moe_down_dec" : "moe_down_wg", a->down->type), &call)) return -1;
    if (down_args(c, &call, a, 0, a->E, mid, NULL, a->y)) return -1;
    if (cpu) {
        clrt_arg_int(&call, a->T);
        size_t g[2] = { up_div((size_t)a->D, 4), (size_t)a->T }, l[2] = { clo_group(c, call.k, 16), 1 };
        return clrt_enqueue(&call, 2, g, l);
    }
    lw = clo_group(c, call.k, 64);
    clrt_arg_local(&call, lw * F4);
    size_t g[2] = { (size_t)a->D * lw, (size_t)a->T }, l[2] = { lw, 1 };
    return clrt_enqueue(&call, 2, g, l);
}

static size_t moe_max_tiles(int P, int E) { return up_div((size_t)P, MOE_TB) + (size_t)(E < P ? E : P); }

uint64_t clo_moe_scratch_bytes(const ds4_hparams *hp, int T)
{
    const uint64_t P = (uint64_t)(T > 0 ? T : 1) * (uint64_t)hp->n_expert_used;
    const uint64_t mid = P * (uint64_t)hp->n_ff_exp * F4, ys = P * (uint64_t)hp->n_embd * F4;
    const uint64_t ws = (1 + (uint64_t)hp->n_expert + P + 3 * moe_max_tiles((int)P, hp->n_expert)) * 4;
    return mid + ys + ws;
}

/* Sort by expert, tiles per piece of the expert tensors, then the sum. */
static int moe_sorted(clo_ctx *c, const moe_args *a)
{
    const int P = a->P, E = a->E;
    const size_t max_tiles = moe_max_tiles(P, E);
    cl_mem mid = clo_scratch(c, CLO_SCR_A, (size_t)P * (size_t)a->F * F4);
    cl_mem ys = clo_scratch(c, CLO_SCR_B, (size_t)P * (size_t)a->D * F4);
    cl_mem ws = clo_scratch(c, CLO_SCR_C, (1 + (size_t)E + (size_t)P + 3 * max_tiles) * 4);
    if (!mid || !ys || !ws) return -1;
    const bool cpu = clo_is_cpu(c);
    const size_t l1 = cpu ? 8 : 64;
    /* CPU devices: one tile per expert, so that a work-item dequantizes its
     * rows once for all of the expert's pairs (matmul.cl, deq_first) */
    const int tb = cpu ? P : MOE_TB;
    const size_t n_tiles = cpu ? (size_t)(E < P ? E : P) : max_tiles;

    clrt_call call = clrt_begin(c->rt, clo_kernel(c, PROG ":aux", "moe_sort"));
    clo_arg_buf(&call, a->sel, 4);
    clrt_arg_int(&call, P);
    clrt_arg_int(&call, E);
    clrt_arg_int(&call, tb);
    clrt_arg_mem(&call, ws);
    size_t one = 1;
    if (clrt_enqueue(&call, 1, &one, &one)) return -1;

    for (int e0 = 0, e1; e0 < E; e0 = e1) {
        int eu;
        if (expert_run(c, a->gate, e0, E, &e1) || expert_run(c, a->up, e0, E, &eu)) return -1;
        if (eu < e1) e1 = eu;
        if (product_begin(c, kernel_for(c, "moe_gu_tile", a->gate->type), &call)) return -1;
        if (gu_args(c, &call, a, e0, e1, mid)) return -1;
        clrt_arg_mem(&call, ws);
        clrt_arg_int(&call, P);
        clrt_arg_int(&call, E);
        size_t g[2] = { up_div((size_t)a->F, MOE_GU_RB), n_tiles }, l[2] = { clo_group(c, call.k, l1), 1 };
        if (l[0] > g[0]) l[0] = clo_group(c, call.k, g[0]);
        if (clrt_enqueue(&call, 2, g, l)) return -1;
    }
    for (int e0 = 0, e1; e0 < E; e0 = e1) {
        if (expert_run(c, a->down, e0, E, &e1)) return -1;
        if (product_begin(c, kernel_for(c, "moe_down_tile", a->down->type), &call)) return -1;
        if (down_args(c, &call, a, e0, e1, mid, ys, NULL)) return -1;
        clrt_arg_mem(&call, ws);
        clrt_arg_int(&call, P);
        clrt_arg_int(&call, E);
        size_t g[2] = { up_div((size_t)a->D, MOE_DN_RB), n_tiles }, l[2] = { clo_group(c, call.k, l1), 1 };
        if (l[0] > g[0]) l[0] = clo_group(c, call.k, g[0]);
        if (clrt_enqueue(&call, 2, g, l)) return -1;
    }

    call = clrt_begin(c->rt, clo_kernel(c, PROG ":aux", "moe_sum"));
    clrt_arg_mem(&call, ys);
    clo_arg_buf(&call, a->sel, 4);
    clrt_arg_int(&call, a->k);
    clrt_arg_int(&call, E);
    clrt_arg_int(&call, a->D);
    clrt_arg_int(&call, a->T);
    clo_arg_buf(&call, a->y, F4);
    size_t g[2] = { (size_t)a->D, (size_t)a->T }, l[2] = { clo_group(c, call.k, 256), 1 };
    if (l[0] > g[0]) l[0] = clo_group(c, call.k, g[0]);
    return clrt_enqueue(&call, 2, g, l);
}

int clo_moe(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down, ds4_buf *x, ds4_buf *sel,
            ds4_buf *weights, int T, float clamp, ds4_buf *y)
{
    clo_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    if (!gate || !up || !down || !gate->data || !up->data || !down->data) return clo_fail(c, "moe: missing expert tensor");
    moe_args a = { gate, up, down, x, sel, weights, y, T, hp->n_expert_used, hp->n_expert, (int)gate->ne[0],
                   (int)gate->ne[1], T * hp->n_expert_used, clamp };
    if (!expert_type(gate->type) || up->type != gate->type || !expert_type(down->type))
        return clo_fail(c, "moe: expert types %s/%s/%s (wanted IQ2_XXS, Q2_K or Q4_K, gate and up alike)",
                        quant_type_name(gate->type), quant_type_name(up->type), quant_type_name(down->type));
    if (up->ne[0] != a.D || up->ne[1] != a.F || down->ne[0] != a.F || down->ne[1] != a.D || gate->ne[2] < a.E ||
        up->ne[2] < a.E || down->ne[2] < a.E)
        return clo_fail(c, "moe: expert shapes %s [%lld, %lld, %lld], %s [%lld, %lld, %lld] do not fit %d experts",
                        gate->name, (long long)gate->ne[0], (long long)gate->ne[1], (long long)gate->ne[2], down->name,
                        (long long)down->ne[0], (long long)down->ne[1], (long long)down->ne[2], a.E);
    if (T < 0 || a.k < 1) return clo_fail(c, "moe: T = %d with %d experts per token", T, a.k);
    if (clo_range(c, "moe", x, 0, (size_t)T * (size_t)a.D * F4) || clo_range(c, "moe", y, 0, (size_t)T * (size_t)a.D * F4) ||
        clo_range(c, "moe", sel, 0, (size_t)a.P * 4) || clo_range(c, "moe", weights, 0, (size_t)a.P * F4))
        return -1;
    if (T == 0) return 0;
    if (T <= MOE_FUSED_MAX_T && whole_on_device(c, gate) && whole_on_device(c, up) && whole_on_device(c, down))
        return moe_fused(c, &a);
    return moe_sorted(c, &a);
}
