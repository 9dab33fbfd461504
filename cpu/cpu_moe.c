/* cpu_moe.c — the routed experts (ds4_ops.moe) on the host, reading each
 * expert's rows from the model's mapping, or through an expert cache
 * (engine/expert_cache.h) when the context has one: the experts of a call
 * then go through the cache in groups of at most its slot count, and
 * within a group the resident experts' gate and up products run while the
 * missing ones are read. Each expert's arithmetic is the same either way,
 * so the bits do not depend on the cache. */
#include <string.h>

#include "cpu/cpu_impl.h"
#include "cpu/qk.h"
#include "engine/expert_cache.h"
#include "engine/numerics.h"
#include "engine/quant.h"

/* MoE: the (token, slot) pairs are grouped by expert so each expert's rows
 * are read once for all its tokens. Tasks are ordered slice-major
 * (task = slice·n_active + expert) so the static split gives every thread
 * a share of every expert. */
typedef struct {
    cpu_ctx *c;
    const ds4_tensor *gate, *up, *down;
    const expert_rows *rows; /* per active expert, through the cache; NULL: the mapping */
    const int32_t *run;      /* the active indices a parallel loop covers */
    int n_run, q0;           /* q0: first pair (in `order`) of a mid loop */
    int n_active, n_slices;
    const int32_t *active;  /* expert ids with tokens */
    const int32_t *offset;  /* first pair of active[i] in `order` */
    const int32_t *order;   /* pair ids (t·k + i) grouped by expert */
    const float *x, *w;
    float *g, *u, *mid, *ys, *y;
    const float **xp;
    float **yp;
    const block_q8_K **ap; /* per pair, in `order`: its Q8_K activations (integer products only) */
    block_q8_K *qa;        /* the quantized activations: per token (gate, up) or per pair (down) */
    bool q8k_gateup, q8k_down;
    int64_t D, F, block;
    int k;
    float clamp;
} moe_job;

/* Expert a's gate (0), up (1) or down (2) rows. */
static cpu_weight moe_weight(const moe_job *j, int a, int which)
{
    const ds4_tensor *t = which == 0 ? j->gate : which == 1 ? j->up : j->down;
    cpu_weight w = cpu_weight_of(t, j->active[a]);
    if (j->rows) w.data = (const uint8_t *)(which == 0 ? j->rows[a].gate : which == 1 ? j->rows[a].up : j->rows[a].down);
    return w;
}

static void moe_gateup_task(void *arg, int64_t task, int worker)
{
    moe_job *j = arg;
    int a = j->run[task % j->n_run];
    int64_t s = task / j->n_run;
    int n = j->offset[a + 1] - j->offset[a];
    int64_t r0 = s * j->block, r1 = r0 + j->block < j->F ? r0 + j->block : j->F;
    if (r0 >= r1) return;
    const float **xp = j->xp + j->offset[a];
    float **yp = j->yp + j->offset[a];
    cpu_weight wg = moe_weight(j, a, 0), wu = moe_weight(j, a, 1);
    /* yp holds g pointers in the first half of the pair array, u in the second */
    if (j->q8k_gateup) {
        const block_q8_K *const *ap = j->ap + j->offset[a];
        qk_rows(qk_level_active(), wg.type, wg.data, wg.row_bytes, wg.n, r0, r1, n, ap, yp);
        qk_rows(qk_level_active(), wu.type, wu.data, wu.row_bytes, wu.n, r0, r1, n, ap, yp + j->offset[j->n_active]);
        return;
    }
    cpu_mm_rows(&wg, r0, r1, n, xp, yp, j->c->tscr[worker]);
    cpu_mm_rows(&wu, r0, r1, n, xp, yp + j->offset[j->n_active], j->c->tscr[worker]);
}

static void moe_mid_task(void *arg, int64_t q, int worker)
{
    (void)worker;
    moe_job *j = arg;
    int64_t pair = j->order[j->q0 + q];
    const float *g = j->g + pair * j->F, *u = j->u + pair * j->F;
    float *m = j->mid + pair * j->F, w = j->w[pair], c = j->clamp;
    for (int64_t i = 0; i < j->F; i++) {
        float gv = g[i], uv = u[i];
        if (c > 1e-6f) {
            gv = gv > c ? c : gv;
            uv = uv > c ? c : uv < -c ? -c : uv;
        }
        m[i] = cpu_silu(gv) * uv * w;
    }
    if (j->q8k_down) quant_act_q8_K(m, j->F, j->qa + pair * (j->F / QK_K));
}

static void moe_quant_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    moe_job *j = arg;
    quant_act_q8_K(j->x + t * j->D, j->D, j->qa + t * (j->D / QK_K));
}

static void moe_down_task(void *arg, int64_t task, int worker)
{
    moe_job *j = arg;
    int a = j->run[task % j->n_run];
    int64_t s = task / j->n_run;
    int n = j->offset[a + 1] - j->offset[a];
    int64_t r0 = s * j->block, r1 = r0 + j->block < j->D ? r0 + j->block : j->D;
    if (r0 >= r1) return;
    cpu_weight wd = moe_weight(j, a, 2);
    if (j->q8k_down) {
        qk_rows(qk_level_active(), wd.type, wd.data, wd.row_bytes, wd.n, r0, r1, n, j->ap + j->offset[a],
                j->yp + j->offset[a]);
        return;
    }
    cpu_mm_rows(&wd, r0, r1, n, j->xp + j->offset[a], j->yp + j->offset[a], j->c->tscr[worker]);
}

static void moe_sum_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    moe_job *j = arg;
    /* tasks: token × column block */
    int64_t nb = (j->D + 255) / 256, t = task / nb, d0 = task % nb * 256, d1 = d0 + 256 < j->D ? d0 + 256 : j->D;
    float *y = j->y + t * j->D;
    for (int64_t d = d0; d < d1; d++) {
        float acc = j->ys[(t * j->k) * j->D + d];
        for (int i = 1; i < j->k; i++) acc += j->ys[(t * j->k + i) * j->D + d];
        y[d] = acc;
    }
}

/* Runs an expert's gate and up products for the experts listed in run. */
static void moe_gateup(moe_job *j, const int32_t *run, int n)
{
    if (!n) return;
    j->run = run;
    j->n_run = n;
    j->block = cpu_row_block(j->c, j->F, 2);
    j->n_slices = (int)((j->F + j->block - 1) / j->block);
    tp_run(j->c->tp, (int64_t)j->n_slices * n, moe_gateup_task, j);
}

/* Active experts [a0, a1): with the cache (layer ≥ 0), requested at once;
 * the resident ones' gate and up run while the others are read. Then the
 * mid rows and the down products of their pairs. */
static int moe_group(moe_job *j, int layer, int a0, int a1)
{
    cpu_ctx *c = j->c;
    int32_t *run = (int32_t *)j->run;
    int n = a1 - a0, n_hit = 0;
    if (layer >= 0) {
        ds4_error err = { "" };
        bool *hit = c->ec_hit;
        int misses = expert_cache_begin(c->ec, layer, j->active + a0, n, c->ec_rows + a0, hit, &err);
        if (misses < 0) return cpu_fail(c, "%s", err.msg);
        for (int i = 0; i < n; i++)
            if (hit[i]) run[n_hit++] = a0 + i;
        for (int i = 0, m = n_hit; i < n; i++)
            if (!hit[i]) run[m++] = a0 + i;
        moe_gateup(j, run, n_hit);
        if (expert_cache_wait(c->ec, &err)) return cpu_fail(c, "%s", err.msg);
        moe_gateup(j, run + n_hit, n - n_hit);
    } else {
        for (int i = 0; i < n; i++) run[i] = a0 + i;
        moe_gateup(j, run, n);
    }
    /* down: mid rows in, per-pair outputs out */
    int64_t q0 = j->offset[a0], q1 = j->offset[a1];
    j->q0 = (int)q0;
    tp_run(c->tp, q1 - q0, moe_mid_task, j);
    for (int64_t q = q0; q < q1; q++) {
        int32_t pid = j->order[q];
        j->xp[q] = j->mid + (int64_t)pid * j->F;
        j->yp[q] = j->ys + (int64_t)pid * j->D;
        j->ap[q] = j->qa ? j->qa + (int64_t)pid * (j->F / QK_K) : NULL;
    }
    j->run = run;
    j->n_run = n;
    j->block = cpu_row_block(c, j->D, 2);
    j->n_slices = (int)((j->D + j->block - 1) / j->block);
    tp_run(c->tp, (int64_t)j->n_slices * n, moe_down_task, j);
    return 0;
}

/* Floats of scratch for the quantized activations: T tokens of D inputs
 * (gate, up), then T·k pairs of F (down), one after the other. */
size_t cpu_moe_act_floats(int64_t T, int64_t k, int64_t D, int64_t F)
{
    int64_t blocks = T * (D / QK_K) > T * k * (F / QK_K) ? T * (D / QK_K) : T * k * (F / QK_K);
    return ((size_t)blocks * sizeof(block_q8_K) + 3) / 4;
}

int cpu_moe(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down, ds4_buf *xb,
                   ds4_buf *selb, ds4_buf *wb, int T, float clamp, ds4_buf *yb)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int k = hp->n_expert_used, E = hp->n_expert;
    int64_t D = gate->ne[0], F = gate->ne[1], P = (int64_t)T * k;
    if (cpu_range_ok(c, xb, 0, (size_t)T * (size_t)D * 4) || cpu_range_ok(c, yb, 0, (size_t)T * (size_t)D * 4) ||
        cpu_range_ok(c, selb, 0, (size_t)P * 4) || cpu_range_ok(c, wb, 0, (size_t)P * 4))
        return -1;
    const int32_t *sel = (const int32_t *)(void *)selb->p;
    for (int64_t i = 0; i < P; i++)
        if (sel[i] < 0 || sel[i] >= E) return cpu_fail(c, "moe: expert id %d outside 0..%d", sel[i], E - 1);

    int32_t *ints = (int32_t *)(void *)cpu_scratch(c, CPU_SCR_INTS, (size_t)(4 * E + 2 + P));
    float *g = cpu_scratch(c, CPU_SCR_A, (size_t)(3 * P * F));
    float *ys = cpu_scratch(c, CPU_SCR_B, (size_t)(P * D));
    const float **xp = (const float **)(void *)cpu_scratch(c, CPU_SCR_PTRS, (size_t)(4 * P) * 2);
    bool q8k_gateup = c->q8k_experts && qk_supports(gate->type, D) && qk_supports(up->type, D);
    bool q8k_down = c->q8k_experts && qk_supports(down->type, F);
    block_q8_K *qa = NULL;
    if (q8k_gateup || q8k_down) qa = (block_q8_K *)(void *)cpu_scratch(c, CPU_SCR_C, cpu_moe_act_floats(T, k, D, F));
    if (!ints || !g || !ys || !xp || ((q8k_gateup || q8k_down) && !qa))
        return cpu_fail(c, "out of memory (MoE scratch for %d tokens)", T);
    int32_t *count = ints, *active = ints + E, *offset = ints + 2 * E, *order = ints + 3 * E + 2;
    memset(count, 0, (size_t)E * 4);
    for (int64_t i = 0; i < P; i++) count[sel[i]]++;
    int na = 0;
    offset[0] = 0;
    for (int e = 0; e < E; e++)
        if (count[e]) {
            active[na] = e;
            offset[na + 1] = offset[na] + count[e];
            count[e] = offset[na]; /* fill cursor */
            na++;
        }
    for (int64_t i = 0; i < P; i++) order[count[sel[i]]++] = (int32_t)i;

    moe_job j = { .run = ints + 3 * E + 2 + P, .c = c, .gate = gate, .up = up, .down = down, .n_active = na, .active = active, .offset = offset,
                  .order = order, .x = (const float *)(void *)xb->p, .w = (const float *)(void *)wb->p, .g = g,
                  .u = g + P * F, .mid = g + 2 * P * F, .ys = ys, .y = (float *)(void *)yb->p, .D = D, .F = F,
                  .k = k, .clamp = clamp, .qa = qa, .q8k_gateup = q8k_gateup, .q8k_down = q8k_down };
    float **yp = (float **)(xp + P);
    j.xp = xp;
    j.yp = yp;
    j.ap = (const block_q8_K **)(void *)(yp + 2 * P);
    size_t tsz = cpu_mm_scratch_floats(D > F ? D : F);
    if (cpu_thread_scratch(c, tsz)) return -1;

    /* gate and up: x rows in, g and u rows out (yp[0..P) g, yp[P..2P) u) */
    for (int64_t q = 0; q < P; q++) {
        int32_t pid = order[q];
        xp[q] = j.x + (pid / k) * D;
        yp[q] = j.g + (int64_t)pid * F;
        yp[P + q] = j.u + (int64_t)pid * F;
        j.ap[q] = qa ? qa + (pid / k) * (D / QK_K) : NULL; /* activations quantized in Q8K mode only */
    }
    if (q8k_gateup) tp_run(c->tp, T, moe_quant_task, &j);
    int layer = c->ec ? expert_cache_layer_of(c->ec, gate) : -1;
    int group = layer >= 0 ? expert_cache_slots(c->ec) : na;
    j.rows = layer >= 0 ? c->ec_rows : NULL;
    for (int a0 = 0; a0 < na; a0 += group)
        if (moe_group(&j, layer, a0, a0 + group < na ? a0 + group : na)) return -1;
    tp_run(c->tp, (int64_t)T * ((D + 255) / 256), moe_sum_task, &j);
    return 0;
}

