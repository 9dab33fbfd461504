/* cpu_ops.c — ds4_ops on the host: buffers, embedding, hyper-connections,
 * norms, products, RoPE, rounding simulations and the router. The
 * compressed attention ops (compressor, indexer, attention) are in
 * cpu_attn.c, the routed experts in cpu_moe.c.
 *
 * Every op is one or more parallel loops whose tasks each produce a
 * disjoint part of the output with a fixed arithmetic, so the bits do not
 * depend on the thread count or on how many tokens share a call.
 */
#include "cpu/cpu_ops.h"
#include "cpu/cpu_impl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numerics.h"
#include "cpu/qk.h"
#include "engine/quant.h"

/* ---- context ------------------------------------------------------------------ */

int cpu_fail(cpu_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return -1;
}

static void *xaligned(size_t bytes)
{
    size_t n = (bytes + 63) & ~(size_t)63;
    return aligned_alloc(64, n ? n : 64);
}

float *cpu_scratch(cpu_ctx *c, int slot, size_t floats)
{
    if (c->scr_n[slot] < floats) {
        free(c->scr[slot]);
        c->scr[slot] = xaligned(floats * sizeof(float));
        if (!c->scr[slot]) {
            c->scr_n[slot] = 0;
            return NULL;
        }
        c->scr_n[slot] = floats;
    }
    return c->scr[slot];
}

int cpu_thread_scratch(cpu_ctx *c, size_t floats)
{
    if (c->tscr_n >= floats) return 0;
    for (int i = 0; i < c->nt; i++) {
        free(c->tscr[i]);
        c->tscr[i] = xaligned(floats * sizeof(float));
        if (!c->tscr[i]) {
            c->tscr_n = 0;
            return cpu_fail(c, "out of memory (thread scratch of %zu floats)", floats);
        }
    }
    c->tscr_n = floats;
    return 0;
}

void *cpu_ops_new(const ds4_model *m, int threads, ds4_error *err)
{
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    c->m = m;
    c->hp = &m->hp;
    c->nt = threads > 0 ? threads : tp_cpu_count();
    if (c->nt > 256) c->nt = 256;
    c->tp = tp_new(c->nt);
    c->tscr = calloc((size_t)c->nt, sizeof *c->tscr);
    if (!c->tp || !c->tscr) {
        cpu_ops_free(c);
        ds4_error_set(err, "cannot start %d CPU threads", c->nt);
        return NULL;
    }
    return c;
}

cpu_expert_arith cpu_expert_arith_for(ds4_quant_sim qsim)
{
    /* The diagnostic numerics compare against f32 references to 1e-3 or
     * better, which 8-bit activations cannot meet. */
    if (qsim != DS4_QSIM_FULL) return CPU_EXPERTS_F32;
    const char *env = getenv("DS4CL_EXPERTS");
    return env && !strcmp(env, "f32") ? CPU_EXPERTS_F32 : CPU_EXPERTS_Q8K;
}

const char *cpu_expert_arith_error(void)
{
    const char *env = getenv("DS4CL_EXPERTS");
    static char msg[160];
    if (!env || !*env || !strcmp(env, "f32") || !strcmp(env, "q8k")) return "";
    snprintf(msg, sizeof msg, "DS4CL_EXPERTS=%.60s is not an arithmetic (q8k or f32): q8k is used", env);
    return msg;
}

void cpu_ops_set_expert_arith(void *ctx, cpu_expert_arith a)
{
    ((cpu_ctx *)ctx)->q8k_experts = a == CPU_EXPERTS_Q8K;
}

const char *cpu_expert_arith_name(cpu_expert_arith a)
{
    static char q8k[160];
    if (a == CPU_EXPERTS_F32) return "exact f32 products";
    snprintf(q8k, sizeof q8k, "IQ2_XXS and Q2_K rows by integer dots with 8-bit activations (Q8_K), %s kernels",
             qk_level_name(qk_level_active()));
    return q8k;
}

void cpu_ops_free(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c) return;
    if (c->tp) tp_free(c->tp);
    expert_cache_close(c->ec);
    free(c->ec_rows);
    free(c->ec_hit);
    for (int i = 0; c->tscr && i < c->nt; i++) free(c->tscr[i]);
    free(c->tscr);
    for (int i = 0; i < CPU_SCR_SLOTS; i++) free(c->scr[i]);
    free(c);
}

int cpu_ops_threads(void *ctx) { return ((cpu_ctx *)ctx)->nt; }

int cpu_ops_set_expert_cache(void *ctx, expert_cache *ec, ds4_error *err)
{
    cpu_ctx *c = ctx;
    size_t E = (size_t)c->hp->n_expert;
    expert_rows *rows = calloc(E, sizeof *rows);
    bool *hit = calloc(E, sizeof *hit);
    if (!rows || !hit) {
        free(rows);
        free(hit);
        expert_cache_close(ec);
        return ds4_error_set(err, "out of memory");
    }
    expert_cache_close(c->ec);
    free(c->ec_rows);
    free(c->ec_hit);
    c->ec = ec;
    c->ec_rows = rows;
    c->ec_hit = hit;
    return 0;
}

expert_cache *cpu_ops_expert_cache(void *ctx) { return ((cpu_ctx *)ctx)->ec; }

uint64_t cpu_ops_scratch_bytes(void *ctx)
{
    cpu_ctx *c = ctx;
    uint64_t b = (uint64_t)c->tscr_n * 4 * (uint64_t)c->nt;
    for (int i = 0; i < CPU_SCR_SLOTS; i++) b += (uint64_t)c->scr_n[i] * 4;
    return b;
}

static const char *cpu_last_error(void *ctx) { return ((cpu_ctx *)ctx)->err; }

/* ---- buffers ------------------------------------------------------------------ */

static ds4_buf *cpu_alloc(void *ctx, size_t bytes)
{
    (void)ctx;
    ds4_buf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->p = xaligned(bytes);
    if (!b->p) {
        free(b);
        return NULL;
    }
    memset(b->p, 0, bytes);
    b->n = bytes;
    return b;
}

static ds4_buf *cpu_view(void *ctx, ds4_buf *base, size_t off, size_t bytes)
{
    cpu_ctx *c = ctx;
    if (off > base->n || bytes > base->n - off) {
        cpu_fail(c, "buffer view [%zu, +%zu) outside a buffer of %zu bytes", off, bytes, base->n);
        return NULL;
    }
    ds4_buf *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->p = base->p + off;
    b->n = bytes;
    b->is_view = true;
    return b;
}

static void cpu_release(void *ctx, ds4_buf *b)
{
    (void)ctx;
    if (!b) return;
    if (!b->is_view) free(b->p);
    free(b);
}

int cpu_range_ok(cpu_ctx *c, ds4_buf *b, size_t off, size_t n)
{
    if (!b || off > b->n || n > b->n - off)
        return cpu_fail(c, "buffer access [%zu, +%zu) outside a buffer of %zu bytes", off, n, b ? b->n : 0);
    return 0;
}

static int cpu_write(void *ctx, ds4_buf *dst, size_t off, const void *src, size_t n)
{
    if (cpu_range_ok(ctx, dst, off, n)) return -1;
    memcpy(dst->p + off, src, n);
    return 0;
}

static int cpu_read(void *ctx, ds4_buf *src, size_t off, void *dst, size_t n)
{
    if (cpu_range_ok(ctx, src, off, n)) return -1;
    memcpy(dst, src->p + off, n);
    return 0;
}

static void *cpu_host(void *ctx, ds4_buf *b)
{
    (void)ctx;
    return b->p;
}

static int cpu_copy(void *ctx, ds4_buf *dst, size_t doff, ds4_buf *src, size_t soff, size_t n)
{
    if (cpu_range_ok(ctx, dst, doff, n) || cpu_range_ok(ctx, src, soff, n)) return -1;
    memmove(dst->p + doff, src->p + soff, n);
    return 0;
}

/* ---- products ------------------------------------------------------------------ */

cpu_weight cpu_weight_of(const ds4_tensor *t, int64_t expert)
{
    cpu_weight w = { t->type, (const uint8_t *)t->data, (size_t)t->row_bytes, t->ne[0] };
    if (expert > 0) w.data += (size_t)expert * (size_t)t->ne[1] * (size_t)t->row_bytes;
    return w;
}

int64_t cpu_row_block(cpu_ctx *c, int64_t rows, int per_thread)
{
    /* per_thread tasks per thread, in multiples of the 4-row tile */
    int64_t want = (int64_t)c->nt * per_thread;
    int64_t per = (rows + want - 1) / want;
    if (per < 4) per = 4;
    return (per + 3) & ~(int64_t)3;
}

typedef struct {
    cpu_ctx *c;
    cpu_weight w;
    int T;
    int64_t rows_per_group, block, blocks_per_group;
    const float **x; /* [n_groups][T] */
    float **y;       /* [T] */
} mm_job;

static void mm_task(void *arg, int64_t task, int worker)
{
    mm_job *j = arg;
    int64_t g = task / j->blocks_per_group, b = task % j->blocks_per_group;
    int64_t r0 = g * j->rows_per_group + b * j->block;
    int64_t r1 = r0 + j->block;
    if (r1 > (g + 1) * j->rows_per_group) r1 = (g + 1) * j->rows_per_group;
    cpu_mm_rows(&j->w, r0, r1, j->T, j->x + g * j->T, j->y, j->c->tscr[worker]);
}

int cpu_matmul_ptrs(cpu_ctx *c, const ds4_tensor *W, int T, int n_groups, const float **x, float **y)
{
    mm_job j = { .c = c, .w = cpu_weight_of(W, 0), .T = T, .x = x, .y = y };
    int64_t out = W->ne[1];
    if (n_groups < 1 || out % n_groups) return cpu_fail(c, "matmul: %lld rows in %d groups", (long long)out, n_groups);
    j.rows_per_group = out / n_groups;
    j.block = cpu_row_block(c, out, 4);
    if (j.block > j.rows_per_group) j.block = (j.rows_per_group + 3) & ~(int64_t)3;
    j.blocks_per_group = (j.rows_per_group + j.block - 1) / j.block;
    if (cpu_thread_scratch(c, cpu_mm_scratch_floats(W->ne[0]))) return -1;
    tp_run(c->tp, j.blocks_per_group * n_groups, mm_task, &j);
    return 0;
}

static int cpu_matmul(void *ctx, const ds4_tensor *W, ds4_buf *xb, int T, int n_groups, ds4_buf *yb)
{
    cpu_ctx *c = ctx;
    int64_t in = W->ne[0], out = W->ne[1];
    if (cpu_range_ok(c, xb, 0, (size_t)T * (size_t)n_groups * (size_t)in * 4) ||
        cpu_range_ok(c, yb, 0, (size_t)T * (size_t)out * 4))
        return -1;
    const float **x = (const float **)(void *)cpu_scratch(c, CPU_SCR_PTRS, (size_t)(n_groups + 1) * (size_t)T * 2);
    if (!x) return cpu_fail(c, "out of memory");
    float **y = (float **)(x + (size_t)n_groups * (size_t)T);
    const float *xf = (const float *)(void *)xb->p;
    float *yf = (float *)(void *)yb->p;
    for (int g = 0; g < n_groups; g++)
        for (int t = 0; t < T; t++) x[(size_t)g * (size_t)T + (size_t)t] = xf + ((int64_t)t * n_groups + g) * in;
    for (int t = 0; t < T; t++) y[t] = yf + (int64_t)t * out;
    return cpu_matmul_ptrs(c, W, T, n_groups, x, y);
}

/* ---- embedding and hyper-connections ------------------------------------------------ */

static int cpu_embed(void *ctx, const ds4_tensor *table, ds4_buf *tokens, int T, ds4_buf *S)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int64_t D = table->ne[0], V = table->ne[1];
    if (cpu_range_ok(c, tokens, 0, (size_t)T * 4) || cpu_range_ok(c, S, 0, (size_t)T * (size_t)hp->n_hc * (size_t)D * 4))
        return -1;
    const int32_t *ids = (const int32_t *)(void *)tokens->p;
    float *s = (float *)(void *)S->p;
    for (int t = 0; t < T; t++) {
        if (ids[t] < 0 || ids[t] >= V) return cpu_fail(c, "token id %d outside the embedding (%lld rows)", ids[t], (long long)V);
        float *row = s + (int64_t)t * hp->n_hc * D;
        quant_dequant_row(table->type, (const uint8_t *)table->data + (size_t)ids[t] * table->row_bytes, row, D);
        for (int i = 1; i < hp->n_hc; i++) memcpy(row + i * D, row, (size_t)D * 4);
    }
    return 0;
}

static float sigmoidf(float z) { return 1.0f / (1.0f + expf(-z)); }


/* r = 1/sqrt(mean(x²) + eps) with Σx² in double. */
static float rms_scale(const float *x, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    return 1.0f / sqrtf((float)(ss / (double)n) + eps);
}

typedef struct {
    cpu_ctx *c;
    const ds4_hc_site *w;
    const float *S;
    float *xs, *mix, *x, *post, *comb;
    int mix_n;
} hc_job;

static void hc_scale_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    hc_job *j = arg;
    int64_t n = j->c->hp->hc_dim;
    const float *s = j->S + t * n;
    float r = rms_scale(s, n, j->c->hp->rms_eps);
    float *o = j->xs + t * n;
    for (int64_t i = 0; i < n; i++) o[i] = s[i] * r;
}

/* The comb matrix: row softmax (+eps), then column/row normalisations. */
/* The comb matrix: row softmax (+eps), then alternating column and row
 * normalisations; divisions as multiplications by an f32 inverse, in the
 * reference's order. */
static void sinkhorn(float *M, int n, int iters, float eps)
{
    for (int j = 0; j < n; j++) {
        float *row = M + j * n, mx = row[0], sum = 0;
        for (int k = 1; k < n; k++) mx = fmaxf(mx, row[k]);
        for (int k = 0; k < n; k++) sum += row[k] = expf(row[k] - mx);
        float inv = 1.0f / sum;
        for (int k = 0; k < n; k++) row[k] = row[k] * inv + eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int j = 0; j < n; j++) {
                float sum = 0;
                for (int k = 0; k < n; k++) sum += M[j * n + k];
                float inv = 1.0f / (sum + eps);
                for (int k = 0; k < n; k++) M[j * n + k] *= inv;
            }
        for (int k = 0; k < n; k++) {
            float sum = 0;
            for (int j = 0; j < n; j++) sum += M[j * n + k];
            float inv = 1.0f / (sum + eps);
            for (int j = 0; j < n; j++) M[j * n + k] *= inv;
        }
    }
}

static void hc_mix_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    hc_job *j = arg;
    const ds4_hparams *hp = j->c->hp;
    int nh = hp->n_hc;
    int64_t D = hp->n_embd;
    const float *mix = j->mix + t * j->mix_n;
    const float *scale = j->w->scale->data, *base = j->w->base->data;
    const float *S = j->S + t * hp->hc_dim;
    float pre[64];
    /* the reference's output head uses the two-sided sigmoid, the HC sites the plain one */
    for (int i = 0; i < nh; i++)
        pre[i] = (j->post ? sigmoidf(mix[i] * scale[0] + base[i]) : cpu_sigmoid_stable(mix[i] * scale[0] + base[i])) +
                 hp->hc_eps;
    float *x = j->x + t * D;
    for (int64_t d = 0; d < D; d++) {
        float acc = 0;
        for (int i = 0; i < nh; i++) acc += pre[i] * S[i * D + d];
        x[d] = acc;
    }
    if (!j->post) return; /* output head: no post/comb */
    float *post = j->post + t * nh, *comb = j->comb + t * nh * nh;
    for (int i = 0; i < nh; i++) post[i] = 2.0f / (1.0f + expf(-(mix[nh + i] * scale[1] + base[nh + i])));
    for (int q = 0; q < nh * nh; q++) comb[q] = mix[2 * nh + q] * scale[2] + base[2 * nh + q];
    sinkhorn(comb, nh, hp->hc_sinkhorn_iters, hp->hc_eps);
}

static int hc_common(cpu_ctx *c, const ds4_hc_site *w, ds4_buf *Sb, int T, ds4_buf *xb, ds4_buf *postb,
                     ds4_buf *combb)
{
    const ds4_hparams *hp = c->hp;
    int nh = hp->n_hc;
    hc_job j = { .c = c, .w = w, .mix_n = (int)w->fn->ne[1] };
    if (cpu_range_ok(c, Sb, 0, (size_t)T * (size_t)hp->hc_dim * 4) || cpu_range_ok(c, xb, 0, (size_t)T * (size_t)hp->n_embd * 4) ||
        (postb && (cpu_range_ok(c, postb, 0, (size_t)T * (size_t)nh * 4) ||
                   cpu_range_ok(c, combb, 0, (size_t)T * (size_t)nh * (size_t)nh * 4))))
        return -1;
    if (nh > 64) return cpu_fail(c, "hyper-connection count %d is too large", nh);
    j.S = (const float *)(void *)Sb->p;
    j.x = (float *)(void *)xb->p;
    j.post = postb ? (float *)(void *)postb->p : NULL;
    j.comb = combb ? (float *)(void *)combb->p : NULL;
    j.xs = cpu_scratch(c, CPU_SCR_A, (size_t)T * (size_t)hp->hc_dim);
    j.mix = cpu_scratch(c, CPU_SCR_B, (size_t)T * (size_t)j.mix_n);
    const float **xp = (const float **)(void *)cpu_scratch(c, CPU_SCR_PTRS, (size_t)T * 4);
    if (!j.xs || !j.mix || !xp) return cpu_fail(c, "out of memory");
    float **yp = (float **)(xp + T);
    tp_run(c->tp, T, hc_scale_task, &j);
    for (int t = 0; t < T; t++) {
        xp[t] = j.xs + (int64_t)t * hp->hc_dim;
        yp[t] = j.mix + (int64_t)t * j.mix_n;
    }
    if (cpu_matmul_ptrs(c, w->fn, T, 1, xp, yp)) return -1;
    tp_run(c->tp, T, hc_mix_task, &j);
    return 0;
}

static int cpu_hc_pre(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post, ds4_buf *comb)
{
    if (!post || !comb) return cpu_fail(ctx, "hc_pre needs post and comb buffers");
    return hc_common(ctx, w, S, T, x, post, comb);
}

static int cpu_hc_head(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *y)
{
    return hc_common(ctx, w, S, T, y, NULL, NULL);
}

typedef struct {
    const ds4_hparams *hp;
    const float *S, *F, *post, *comb;
    float *out;
} hcpost_job;

static void hc_post_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    hcpost_job *j = arg;
    int nh = j->hp->n_hc;
    int64_t D = j->hp->n_embd, t = task / nh;
    int k = (int)(task % nh);
    const float *S = j->S + t * nh * D, *F = j->F + t * D;
    const float *comb = j->comb + t * nh * nh;
    float p = j->post[t * nh + k];
    float *o = j->out + t * nh * D + k * D;
    for (int64_t d = 0; d < D; d++) {
        float acc = p * F[d];
        for (int s = 0; s < nh; s++) acc += comb[s * nh + k] * S[s * D + d];
        o[d] = acc;
    }
}

static int cpu_hc_post(void *ctx, ds4_buf *S_in, ds4_buf *F, ds4_buf *post, ds4_buf *comb, int T, ds4_buf *S_out)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    size_t hs = (size_t)T * (size_t)hp->hc_dim * 4;
    if (cpu_range_ok(c, S_in, 0, hs) || cpu_range_ok(c, S_out, 0, hs) || cpu_range_ok(c, F, 0, (size_t)T * (size_t)hp->n_embd * 4) ||
        cpu_range_ok(c, post, 0, (size_t)T * (size_t)hp->n_hc * 4) ||
        cpu_range_ok(c, comb, 0, (size_t)T * (size_t)hp->n_hc * (size_t)hp->n_hc * 4))
        return -1;
    if (S_in->p == S_out->p) return cpu_fail(c, "hc_post: output aliases input");
    hcpost_job j = { hp, (const float *)(void *)S_in->p, (const float *)(void *)F->p, (const float *)(void *)post->p,
                     (const float *)(void *)comb->p, (float *)(void *)S_out->p };
    tp_run(c->tp, (int64_t)T * hp->n_hc, hc_post_task, &j);
    return 0;
}

/* ---- elementwise ------------------------------------------------------------------ */

typedef struct {
    const float *x, *w;
    float *y;
    int n;
    float eps;
} norm_job;

static void norm_task(void *arg, int64_t r, int worker)
{
    (void)worker;
    norm_job *j = arg;
    const float *x = j->x + r * j->n;
    float *y = j->y + r * j->n;
    float s = rms_scale(x, j->n, j->eps);
    if (j->w)
        for (int i = 0; i < j->n; i++) y[i] = x[i] * s * j->w[i];
    else
        for (int i = 0; i < j->n; i++) y[i] = x[i] * s;
}

static int cpu_rmsnorm(void *ctx, ds4_buf *x, const ds4_tensor *w, int64_t n_rows, int n, ds4_buf *y)
{
    cpu_ctx *c = ctx;
    size_t bytes = (size_t)n_rows * (size_t)n * 4;
    if (cpu_range_ok(c, x, 0, bytes) || cpu_range_ok(c, y, 0, bytes)) return -1;
    if (w && (w->type != GGML_TYPE_F32 || w->ne[0] != n)) return cpu_fail(c, "rmsnorm: weight is not F32 [%d]", n);
    norm_job j = { (const float *)(void *)x->p, w ? (const float *)w->data : NULL, (float *)(void *)y->p, n,
                   c->hp->rms_eps };
    tp_run(c->tp, n_rows, norm_task, &j);
    return 0;
}

typedef struct {
    const float *a, *b;
    float *y;
    int64_t n, block;
    float clamp;
} ew_job;

static void swiglu_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    ew_job *j = arg;
    int64_t i0 = task * j->block, i1 = i0 + j->block < j->n ? i0 + j->block : j->n;
    float c = j->clamp;
    for (int64_t i = i0; i < i1; i++) {
        float g = j->a[i], u = j->b[i];
        if (c > 1e-6f) {
            g = g > c ? c : g;
            u = u > c ? c : u < -c ? -c : u;
        }
        j->y[i] = cpu_silu(g) * u;
    }
}

static void add_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    ew_job *j = arg;
    int64_t i0 = task * j->block, i1 = i0 + j->block < j->n ? i0 + j->block : j->n;
    for (int64_t i = i0; i < i1; i++) j->y[i] = j->a[i] + j->b[i];
}

static int64_t ew_block(int64_t n) { return n < 4096 ? (n > 0 ? n : 1) : 4096; }

static int cpu_swiglu(void *ctx, ds4_buf *g, ds4_buf *u, int T, int n, float clamp, ds4_buf *mid)
{
    cpu_ctx *c = ctx;
    int64_t total = (int64_t)T * n;
    if (cpu_range_ok(c, g, 0, (size_t)total * 4) || cpu_range_ok(c, u, 0, (size_t)total * 4) || cpu_range_ok(c, mid, 0, (size_t)total * 4))
        return -1;
    ew_job j = { (const float *)(void *)g->p, (const float *)(void *)u->p, (float *)(void *)mid->p, total,
                 ew_block(total), clamp };
    tp_run(c->tp, (total + j.block - 1) / j.block, swiglu_task, &j);
    return 0;
}

static int cpu_add(void *ctx, ds4_buf *a, ds4_buf *b, int64_t n, ds4_buf *y)
{
    cpu_ctx *c = ctx;
    if (cpu_range_ok(c, a, 0, (size_t)n * 4) || cpu_range_ok(c, b, 0, (size_t)n * 4) || cpu_range_ok(c, y, 0, (size_t)n * 4)) return -1;
    ew_job j = { (const float *)(void *)a->p, (const float *)(void *)b->p, (float *)(void *)y->p, n, ew_block(n), 0 };
    tp_run(c->tp, (n + j.block - 1) / j.block, add_task, &j);
    return 0;
}

/* ---- RoPE, rounding, storing ------------------------------------------------------------ */

typedef struct {
    float *x;
    int n_heads, dim, pos_step, inverse;
    const ds4_rope *rope;
    int64_t pos0;
} rope_job;

static void rope_task(void *arg, int64_t r, int worker)
{
    (void)worker;
    rope_job *j = arg;
    float cs[512], sn[512];
    int n_rot = j->rope->n_rot, half = n_rot / 2;
    rope_cos_sin(j->rope, j->pos0 + r * j->pos_step, j->inverse, cs, sn);
    for (int h = 0; h < j->n_heads; h++) {
        float *t = j->x + (r * j->n_heads + h) * j->dim + (j->dim - n_rot);
        for (int k = 0; k < half; k++) {
            float a = t[2 * k], b = t[2 * k + 1];
            t[2 * k] = a * cs[k] - b * sn[k];
            t[2 * k + 1] = a * sn[k] + b * cs[k];
        }
    }
}

static int cpu_rope(void *ctx, ds4_buf *x, int64_t n_rows, int n_heads, int dim, const ds4_rope *rope, int64_t pos0,
                    int pos_step, int inverse)
{
    cpu_ctx *c = ctx;
    if (cpu_range_ok(c, x, 0, (size_t)n_rows * (size_t)n_heads * (size_t)dim * 4)) return -1;
    if (rope->n_rot > dim || rope->n_rot > 1024 || rope->n_rot % 2)
        return cpu_fail(c, "rope: %d rotated dims of %d", rope->n_rot, dim);
    rope_job j = { (float *)(void *)x->p, n_heads, dim, pos_step, inverse, rope, pos0 };
    tp_run(c->tp, n_rows, rope_task, &j);
    return 0;
}

typedef struct {
    float *x;
    int dim, n_nope;
    ds4_sim kind;
} sim_job;

static void sim_task(void *arg, int64_t r, int worker)
{
    (void)worker;
    sim_job *j = arg;
    float *row = j->x + r * j->dim;
    switch (j->kind) {
    case DS4_SIM_FP8_NOPE: sim_fp8_blocks(row, j->n_nope); break;
    case DS4_SIM_HADAMARD: sim_hadamard(row, j->dim); break;
    case DS4_SIM_HADAMARD_FP4:
        sim_hadamard(row, j->dim);
        sim_fp4_blocks(row, j->dim);
        break;
    }
}

static int cpu_sim(void *ctx, ds4_buf *x, int64_t n_rows, int dim, ds4_sim kind)
{
    cpu_ctx *c = ctx;
    if (cpu_range_ok(c, x, 0, (size_t)n_rows * (size_t)dim * 4)) return -1;
    if (kind != DS4_SIM_FP8_NOPE && (dim & (dim - 1))) return cpu_fail(c, "Hadamard rotation of %d dims (not a power of two)", dim);
    if (kind == DS4_SIM_FP8_NOPE && c->hp->n_nope > dim) return cpu_fail(c, "fp8 simulation of %d dims in rows of %d", c->hp->n_nope, dim);
    sim_job j = { (float *)(void *)x->p, dim, c->hp->n_nope, kind };
    tp_run(c->tp, n_rows, sim_task, &j);
    return 0;
}

static int cpu_store_rows(void *ctx, ds4_buf *src, int64_t n_rows, int dim, ds4_buf *dst, ds4_cache_type ct,
                          int64_t row0, int64_t ring_rows)
{
    cpu_ctx *c = ctx;
    size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    if (cpu_range_ok(c, src, 0, (size_t)n_rows * (size_t)dim * 4)) return -1;
    const float *s = (const float *)(void *)src->p;
    for (int64_t i = 0; i < n_rows; i++) {
        int64_t slot = ring_rows > 0 ? (row0 + i) % ring_rows : row0 + i;
        size_t off = (size_t)slot * (size_t)dim * es;
        if (cpu_range_ok(c, dst, off, (size_t)dim * es)) return -1;
        if (ct == DS4_CACHE_F16)
            cpu_f32_to_f16((uint16_t *)(void *)(dst->p + off), s + i * dim, dim);
        else
            memcpy(dst->p + off, s + i * dim, (size_t)dim * 4);
    }
    return 0;
}

/* ---- router and experts -------------------------------------------------------------- */

typedef struct {
    cpu_ctx *c;
    const float *logits, *bias;
    const int32_t *tid2eid, *tokens;
    int32_t *sel;
    float *w;
    int bad;
} router_job;

static float softplusf(float z)
{
    if (z > 20.0f) return z;
    if (z < -20.0f) return expf(z);
    return log1pf(expf(z));
}

static void router_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    router_job *j = arg;
    const ds4_hparams *hp = j->c->hp;
    int E = hp->n_expert, k = hp->n_expert_used;
    const float *lg = j->logits + t * E;
    float prob[4096], sc[4096];
    for (int e = 0; e < E; e++) prob[e] = sqrtf(softplusf(lg[e]));
    int32_t *sel = j->sel + t * k;
    if (j->tid2eid) {
        memcpy(sel, j->tid2eid + (int64_t)j->tokens[t] * k, (size_t)k * 4);
    } else {
        for (int e = 0; e < E; e++) sc[e] = prob[e] + (j->bias ? j->bias[e] : 0.0f);
        /* insertion top-k in decreasing score; an equal score keeps the lower id first */
        int n = 0;
        for (int e = 0; e < E; e++) {
            if (n == k && !(sc[e] > sc[sel[k - 1]])) continue;
            int p = n < k ? n++ : k - 1;
            while (p > 0 && sc[e] > sc[sel[p - 1]]) {
                sel[p] = sel[p - 1];
                p--;
            }
            sel[p] = e;
        }
    }
    float sum = 0;
    for (int i = 0; i < k; i++) sum += prob[sel[i]];
    float den = hp->expert_weights_norm ? fmaxf(sum, 6.103515625e-5f) : 1.0f;
    for (int i = 0; i < k; i++) j->w[t * k + i] = prob[sel[i]] / den * hp->expert_weights_scale;
}

static int cpu_router(void *ctx, ds4_buf *logits, const ds4_tensor *bias, const ds4_tensor *tid2eid, ds4_buf *tokens,
                      int T, ds4_buf *sel, ds4_buf *weights)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int E = hp->n_expert, k = hp->n_expert_used;
    if (E > 4096) return cpu_fail(c, "router: %d experts is more than this backend handles", E);
    if (cpu_range_ok(c, logits, 0, (size_t)T * (size_t)E * 4) || cpu_range_ok(c, sel, 0, (size_t)T * (size_t)k * 4) ||
        cpu_range_ok(c, weights, 0, (size_t)T * (size_t)k * 4) || (tid2eid && cpu_range_ok(c, tokens, 0, (size_t)T * 4)))
        return -1;
    router_job j = { c, (const float *)(void *)logits->p, bias ? (const float *)bias->data : NULL,
                     tid2eid ? (const int32_t *)tid2eid->data : NULL, tokens ? (const int32_t *)(void *)tokens->p : NULL,
                     (int32_t *)(void *)sel->p, (float *)(void *)weights->p, 0 };
    if (tid2eid)
        for (int t = 0; t < T; t++)
            if (j.tokens[t] < 0 || j.tokens[t] >= tid2eid->ne[1]) return cpu_fail(c, "router: token id %d outside tid2eid", j.tokens[t]);
    tp_run(c->tp, T, router_task, &j);
    return 0;
}

static int cpu_argmax(void *ctx, ds4_buf *x, int64_t n, ds4_buf *out)
{
    cpu_ctx *c = ctx;
    if (n < 1 || cpu_range_ok(c, x, 0, (size_t)n * 4) || cpu_range_ok(c, out, 0, 4)) return -1;
    const float *v = (const float *)(void *)x->p;
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = (int32_t)i;
    memcpy(out->p, &best, 4);
    return 0;
}

const ds4_ops cpu_ops = {
    .name = "cpu",
    .last_error = cpu_last_error,
    .alloc = cpu_alloc,
    .view = cpu_view,
    .release = cpu_release,
    .write = cpu_write,
    .read = cpu_read,
    .copy = cpu_copy,
    .host = cpu_host,
    .embed = cpu_embed,
    .hc_pre = cpu_hc_pre,
    .hc_post = cpu_hc_post,
    .hc_head = cpu_hc_head,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .rope = cpu_rope,
    .sim = cpu_sim,
    .store_rows = cpu_store_rows,
    .compress = cpu_compress,
    .indexer = cpu_indexer,
    .attention = cpu_attention,
    .router = cpu_router,
    .moe = cpu_moe,
    .argmax = cpu_argmax,
};

/* The scratch the ops above grow to for chunks of T tokens in a context of
 * n_ctx (the largest of each slot's uses). */
uint64_t cpu_ops_scratch_estimate(const ds4_model *m, int T, int n_ctx, int threads)
{
    const ds4_hparams *hp = &m->hp;
    uint64_t t = (uint64_t)(T > 0 ? T : 1), P = t * (uint64_t)hp->n_expert_used;
    uint64_t D = (uint64_t)hp->n_embd, F = (uint64_t)hp->n_ff_exp, hd = (uint64_t)hp->head_dim;
    uint64_t max_vis = 0, max_rows = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        int R = hp->compress_ratio[l];
        if (!R) continue;
        uint64_t nv = (uint64_t)n_ctx / (uint64_t)R, rows = nv;
        if (R == 4) {
            if (nv > max_vis) max_vis = nv;
            if (rows > (uint64_t)hp->indexer_top_k) rows = (uint64_t)hp->indexer_top_k;
        }
        if (rows > max_rows) max_rows = rows;
    }
    uint64_t a = t * (uint64_t)hp->hc_dim;
    if (3 * P * F > a) a = 3 * P * F;
    if (t * max_vis > a) a = t * max_vis;
    uint64_t b = t * (uint64_t)hp->mix_hc > P * D ? t * (uint64_t)hp->mix_hc : P * D;
    uint64_t c = t * 2 * hd;
    uint64_t qa = cpu_moe_act_floats((int64_t)t, hp->n_expert_used, (int64_t)D, (int64_t)F);
    if (qa > c) c = qa;
    uint64_t ptrs = 8 * P > (uint64_t)(hp->n_out_group + 1) * t * 2 ? 8 * P : (uint64_t)(hp->n_out_group + 1) * t * 2;
    uint64_t ints = 4 * (uint64_t)hp->n_expert + 2 + P;
    uint64_t n_in = (uint64_t)hp->hc_dim;
    uint64_t widths[] = { D, (uint64_t)hp->q_lora, (uint64_t)hp->group_dim, (uint64_t)hp->n_out_group * hp->o_lora,
                          F, (uint64_t)hp->shared_ff };
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] > n_in) n_in = widths[i];
    uint64_t per_thread = cpu_mm_scratch_floats((int64_t)n_in);
    uint64_t attn_rows = (uint64_t)hp->n_swa + max_rows;
    if (3 * attn_rows + 32 > per_thread) per_thread = 3 * attn_rows + 32;
    return 4 * (a + b + c + ptrs + ints + per_thread * (uint64_t)(threads > 0 ? threads : 1));
}
