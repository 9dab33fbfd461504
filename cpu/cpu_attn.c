/* cpu_attn.c — the compressed-attention ops on the host: compressor
 * pooling with its frontier ring, the lightning indexer's scores and
 * top-k, and sink-aware attention over raw and compressed rows. */
#include "cpu/cpu_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"

static int span_ok(cpu_ctx *c, ds4_buf *b, size_t bytes, const char *what)
{
    if (!b || bytes > b->n) return cpu_fail(c, "%s: buffer of %zu bytes, need %zu", what, b ? b->n : 0, bytes);
    return 0;
}

static const float *F32(ds4_buf *b) { return (const float *)(const void *)b->p; }

/* ---- compressor ------------------------------------------------------------------- */

typedef struct {
    const float *a, *b; /* chunk values and scores (ape added) */
    const float *front; /* ring of front_rows slots of 2W */
    float *pooled;
    int64_t pos0, front_rows, w_first;
    int T, R, lanes, d, W;
    int64_t blocks; /* dim blocks per window */
} comp_job;

enum { COMP_BLOCK = 64 };

static void candidate(const comp_job *j, int64_t p, const float **a, const float **b)
{
    if (p >= j->pos0) {
        *a = j->a + (p - j->pos0) * j->W;
        *b = j->b + (p - j->pos0) * j->W;
    } else {
        const float *s = j->front + (p % j->front_rows) * 2 * j->W;
        *a = s;
        *b = s + j->W;
    }
}

static void comp_task(void *arg, int64_t task, int worker)
{
    (void)worker;
    const comp_job *j = arg;
    int64_t w = j->w_first + task / j->blocks;
    int i0 = (int)(task % j->blocks) * COMP_BLOCK;
    int n = j->d - i0 < COMP_BLOCK ? j->d - i0 : COMP_BLOCK;
    /* candidates: (token, lane offset); the previous window's lane A first */
    int64_t toks[2];
    int offs[2], nser = 0;
    if (j->lanes == 2) {
        if (w > 0) {
            toks[nser] = (w - 1) * j->R;
            offs[nser++] = 0;
        }
        toks[nser] = w * j->R;
        offs[nser++] = j->d;
    } else {
        toks[nser] = w * j->R;
        offs[nser++] = 0;
    }
    /* the reference's order: both series interleaved token by token */
    float mx[COMP_BLOCK], num[COMP_BLOCK], den[COMP_BLOCK];
    for (int i = 0; i < n; i++) {
        mx[i] = -INFINITY;
        num[i] = den[i] = 0.0f;
    }
    for (int64_t r = 0; r < j->R; r++)
        for (int s = 0; s < nser; s++) {
            const float *a, *b;
            candidate(j, toks[s] + r, &a, &b);
            for (int i = 0; i < n; i++) mx[i] = fmaxf(mx[i], b[offs[s] + i0 + i]);
        }
    for (int64_t r = 0; r < j->R; r++) {
        const float *a[2], *b[2];
        float e[2][COMP_BLOCK];
        for (int s = 0; s < nser; s++) {
            candidate(j, toks[s] + r, &a[s], &b[s]);
            for (int i = 0; i < n; i++) e[s][i] = expf(b[s][offs[s] + i0 + i] - mx[i]);
        }
        if (nser == 2) {
            for (int i = 0; i < n; i++) {
                den[i] += e[0][i] + e[1][i];
                num[i] += e[0][i] * a[0][offs[0] + i0 + i];
                num[i] += e[1][i] * a[1][offs[1] + i0 + i];
            }
        } else {
            for (int i = 0; i < n; i++) {
                den[i] += e[0][i];
                num[i] += e[0][i] * a[0][offs[0] + i0 + i];
            }
        }
    }
    float *o = j->pooled + (w - j->w_first) * j->d + i0;
    for (int i = 0; i < n; i++) o[i] = den[i] > 0 ? num[i] / den[i] : 0.0f;
}

int cpu_compress(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front, int64_t front_rows, int R,
                 int lanes, int d, int64_t pos0, int T, ds4_buf *pooled)
{
    cpu_ctx *c = ctx;
    int W = lanes * d;
    int64_t w_first = pos0 / R, n_emit = (pos0 + T) / R - w_first;
    if (R < 1 || lanes < 1 || lanes > 2 || ape->ne[0] != W || ape->ne[1] != R)
        return cpu_fail(c, "compress: ape [%lld, %lld] does not match ratio %d × width %d", (long long)ape->ne[0],
                        (long long)ape->ne[1], R, W);
    if (front_rows < (int64_t)lanes * R + T)
        return cpu_fail(c, "compress: frontier of %lld rows is too small for ratio %d, %d lanes and %d tokens",
                        (long long)front_rows, R, lanes, T);
    if (span_ok(c, a, (size_t)T * (size_t)W * 4, "compress") || span_ok(c, b, (size_t)T * (size_t)W * 4, "compress") ||
        span_ok(c, front, (size_t)front_rows * 2 * (size_t)W * 4, "compress") ||
        (n_emit > 0 && span_ok(c, pooled, (size_t)n_emit * (size_t)d * 4, "compress")))
        return -1;
    float *bp = cpu_scratch(c, CPU_SCR_C, (size_t)T * (size_t)W);
    float *ape_row = cpu_scratch(c, CPU_SCR_A, (size_t)W);
    if (!bp || !ape_row) return cpu_fail(c, "out of memory");
    for (int t = 0; t < T; t++) {
        int64_t s = (pos0 + t) % R;
        quant_dequant_row(ape->type, (const uint8_t *)ape->data + (size_t)s * ape->row_bytes, ape_row, W);
        const float *bt = F32(b) + (int64_t)t * W;
        for (int i = 0; i < W; i++) bp[(int64_t)t * W + i] = bt[i] + ape_row[i];
    }
    comp_job j = { F32(a), bp, F32(front), n_emit > 0 ? (float *)(void *)pooled->p : NULL, pos0, front_rows, w_first,
                   T, R, lanes, d, W, (d + COMP_BLOCK - 1) / COMP_BLOCK };
    if (n_emit > 0) tp_run(c->tp, n_emit * j.blocks, comp_task, &j);
    /* the chunk's tokens join the ring only now: the pooling above may read
     * the slots they replace */
    float *ring = (float *)(void *)front->p;
    for (int t = 0; t < T; t++) {
        float *s = ring + ((pos0 + t) % front_rows) * 2 * W;
        memcpy(s, F32(a) + (int64_t)t * W, (size_t)W * 4);
        memcpy(s + W, bp + (int64_t)t * W, (size_t)W * 4);
    }
    return 0;
}

/* ---- indexer ------------------------------------------------------------------------ */

typedef struct {
    cpu_ctx *c;
    const float *q, *w;
    const uint8_t *rows;
    ds4_cache_type ct;
    float *scores; /* [T][max_vis] */
    float *qT, *ws; /* per token: queries transposed [hd][nh], scaled head weights [nh] */
    bool fast;
    int32_t *sel;
    int64_t pos0, max_vis, blocks;
    int R, T, nh, hd, top_k;
    float scale;
} idx_job;

enum { IDX_BLOCK = 64 };

static int64_t visible(int64_t p, int R) { return (p + 1) / R; }

static void idx_score_task(void *arg, int64_t task, int worker)
{
    const idx_job *j = arg;
    int64_t t = task / j->blocks, c0 = task % j->blocks * IDX_BLOCK;
    int64_t nv = visible(j->pos0 + t, j->R), c1 = c0 + IDX_BLOCK < nv ? c0 + IDX_BLOCK : nv;
    float *krow = j->c->tscr[worker];
    const float *q = j->q + t * j->nh * j->hd, *w = j->w + t * j->nh;
    const float *qT = j->fast ? j->qT + t * j->nh * j->hd : NULL, *ws = j->fast ? j->ws + t * j->nh : NULL;
    for (int64_t c = c0; c < c1; c++) {
        const float *k;
        if (j->ct == DS4_CACHE_F16) {
            cpu_f16_to_f32(krow, (const uint16_t *)(const void *)(j->rows + (size_t)c * (size_t)j->hd * 2), j->hd);
            k = krow;
        } else {
            k = (const float *)(const void *)(j->rows + (size_t)c * (size_t)j->hd * 4);
        }
        float s = 0.0f;
        if (qT) {
            s = cpu_indexer_score(qT, ws, k, j->hd, j->nh);
        } else {
            for (int h = 0; h < j->nh; h++) {
                float dot = cpu_dot_f32(k, q + h * j->hd, j->hd);
                if (dot < 0.0f) dot = 0.0f;
                s += dot * (w[h] * j->scale);
            }
        }
        j->scores[t * j->max_vis + c] = s;
    }
}

/* a ranks before b: higher score, then lower row */
static int better(const float *s, int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); }

static void heap_down(int32_t *h, int n, int i, const float *s)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        /* min-heap on rank: the root is the weakest kept row */
        if (l < n && better(s, h[m], h[l])) m = l;
        if (r < n && better(s, h[m], h[r])) m = r;
        if (m == i) return;
        int32_t x = h[i];
        h[i] = h[m];
        h[m] = x;
        i = m;
    }
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void idx_topk_task(void *arg, int64_t t, int worker)
{
    const idx_job *j = arg;
    int64_t nv = visible(j->pos0 + t, j->R);
    int32_t *out = j->sel + t * j->top_k;
    if (nv <= j->top_k) {
        for (int i = 0; i < j->top_k; i++) out[i] = i < nv ? i : -1;
        return;
    }
    const float *s = j->scores + t * j->max_vis;
    int32_t *h = (int32_t *)(void *)j->c->tscr[worker];
    int k = j->top_k;
    for (int i = 0; i < k; i++) h[i] = i;
    for (int i = k / 2 - 1; i >= 0; i--) heap_down(h, k, i, s);
    for (int32_t c = k; c < nv; c++)
        if (better(s, c, h[0])) {
            h[0] = c;
            heap_down(h, k, 0, s);
        }
    memcpy(out, h, (size_t)k * 4);
    qsort(out, (size_t)k, 4, cmp_i32);
}

int cpu_indexer(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R, int64_t pos0, int T,
                ds4_buf *sel)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int nh = hp->n_indexer_head, hd = hp->indexer_head_dim, k = hp->indexer_top_k;
    int64_t max_vis = visible(pos0 + T - 1, R);
    size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    if (span_ok(c, q, (size_t)T * (size_t)nh * (size_t)hd * 4, "indexer") ||
        span_ok(c, weights, (size_t)T * (size_t)nh * 4, "indexer") ||
        span_ok(c, rows, (size_t)max_vis * (size_t)hd * es, "indexer") ||
        span_ok(c, sel, (size_t)T * (size_t)k * 4, "indexer"))
        return -1;
    idx_job j = { .c = c, .q = F32(q), .w = F32(weights), .rows = rows->p, .ct = ct,
                  .sel = (int32_t *)(void *)sel->p, .pos0 = pos0, .max_vis = max_vis > 0 ? max_vis : 1,
                  .blocks = (max_vis + IDX_BLOCK - 1) / IDX_BLOCK, .R = R, .T = T, .nh = nh, .hd = hd, .top_k = k,
                  .scale = 1.0f / sqrtf((float)(hd * nh)) };
    if (max_vis > k) {
        j.scores = cpu_scratch(c, CPU_SCR_A, (size_t)T * (size_t)j.max_vis);
        if (!j.scores) return cpu_fail(c, "out of memory (indexer scores)");
        j.fast = cpu_indexer_fast(nh);
        if (j.fast) {
            j.qT = cpu_scratch(c, CPU_SCR_B, (size_t)T * (size_t)nh * ((size_t)hd + 1));
            if (!j.qT) return cpu_fail(c, "out of memory (indexer queries)");
            j.ws = j.qT + (size_t)T * (size_t)nh * (size_t)hd;
            for (int t = 0; t < T; t++)
                for (int h = 0; h < nh; h++) {
                    j.ws[t * nh + h] = j.w[t * nh + h] * j.scale;
                    for (int d = 0; d < hd; d++)
                        j.qT[((size_t)t * hd + d) * nh + h] = j.q[((size_t)t * nh + h) * hd + d];
                }
        }
        if (cpu_thread_scratch(c, (size_t)(hd > k ? hd : k))) return -1;
        tp_run(c->tp, (int64_t)T * j.blocks, idx_score_task, &j);
    }
    tp_run(c->tp, T, idx_topk_task, &j);
    return 0;
}

/* ---- attention ---------------------------------------------------------------------- */

typedef struct {
    const ds4_hparams *hp;
    float **tscr;
    const float *q, *sinks;
    float *o;
    const uint8_t *raw, *comp;
    const int32_t *sel;
    int sel_stride, R, H, hd;
    ds4_cache_type ct;
    int64_t raw_rows, pos0, max_rows;
    float scale;
} attn_job;

static void attn_task(void *arg, int64_t task, int worker)
{
    const attn_job *j = arg;
    int64_t t = task / j->H, p = j->pos0 + t;
    int h = (int)(task % j->H), hd = j->hd;
    size_t es = j->ct == DS4_CACHE_F16 ? 2 : 4;
    const float *q = j->q + (t * j->H + h) * hd;
    float *o = j->o + (t * j->H + h) * hd;
    float *sc = j->tscr[worker];
    const uint8_t **rp = (const uint8_t **)(void *)(sc + ((j->max_rows + 15) & ~(int64_t)15));
    int64_t lo = p - j->hp->n_swa + 1 < 0 ? 0 : p - j->hp->n_swa + 1;
    int64_t n = 0;
    /* raw window rows, then compressed rows */
    for (int64_t kp = lo; kp <= p; kp++) rp[n++] = j->raw + (size_t)(kp % j->raw_rows) * (size_t)hd * es;
    if (j->R > 0) {
        if (j->sel) {
            const int32_t *s = j->sel + t * j->sel_stride;
            for (int i = 0; i < j->sel_stride; i++)
                if (s[i] >= 0) rp[n++] = j->comp + (size_t)s[i] * (size_t)hd * es;
        } else {
            int64_t nc = (p + 1) / j->R;
            for (int64_t c = 0; c < nc; c++) rp[n++] = j->comp + (size_t)c * (size_t)hd * es;
        }
    }
    float sink = j->sinks[h], m = sink;
    for (int64_t r = 0; r < n; r++) {
        float s = (j->ct == DS4_CACHE_F16 ? cpu_dot_f16((const uint16_t *)(const void *)rp[r], q, hd)
                                          : cpu_dot_f32((const float *)(const void *)rp[r], q, hd)) *
                  j->scale;
        sc[r] = s;
        m = fmaxf(m, s);
    }
    /* unnormalised weighted sum, then one scale by the inverse denominator */
    float z = expf(sink - m);
    memset(o, 0, (size_t)hd * 4);
    for (int64_t r = 0; r < n; r++) {
        float wgt = expf(sc[r] - m);
        z += wgt;
        if (j->ct == DS4_CACHE_F16)
            cpu_axpy_f16(o, wgt, (const uint16_t *)(const void *)rp[r], hd);
        else
            cpu_axpy_f32(o, wgt, (const float *)(const void *)rp[r], hd);
    }
    float inv = 1.0f / z;
    for (int i = 0; i < hd; i++) o[i] *= inv;
}

int cpu_attention(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows, ds4_buf *comp, int R,
                  ds4_buf *sel, int sel_stride, const ds4_tensor *sinks, int64_t pos0, int T, ds4_buf *o)
{
    cpu_ctx *c = ctx;
    const ds4_hparams *hp = c->hp;
    int H = hp->n_head, hd = hp->head_dim;
    size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
    int64_t max_comp = R > 0 ? (sel ? sel_stride : (pos0 + T) / R) : 0;
    /* the chunk's newest row must not have replaced a row its oldest query reads */
    int64_t oldest = pos0 - hp->n_swa + 1 < 0 ? 0 : pos0 - hp->n_swa + 1;
    if (pos0 + T - 1 - oldest >= raw_rows)
        return cpu_fail(c, "attention: raw ring of %lld rows for %d tokens", (long long)raw_rows, T);
    if (span_ok(c, q, (size_t)T * (size_t)H * (size_t)hd * 4, "attention") ||
        span_ok(c, o, (size_t)T * (size_t)H * (size_t)hd * 4, "attention") ||
        span_ok(c, raw, (size_t)raw_rows * (size_t)hd * es, "attention") ||
        (sel && span_ok(c, sel, (size_t)T * (size_t)sel_stride * 4, "attention")))
        return -1;
    if (R > 0 && !sel && max_comp > 0 && span_ok(c, comp, (size_t)max_comp * (size_t)hd * es, "attention")) return -1;
    if (sinks->type != GGML_TYPE_F32 || sinks->ne[0] != H) return cpu_fail(c, "attention: sinks are not F32 [%d]", H);
    /* per thread: scores, then the row pointers */
    size_t rows = (size_t)hp->n_swa + (size_t)max_comp;
    if (cpu_thread_scratch(c, ((rows + 15) & ~(size_t)15) + 2 * rows + 16)) return -1;
    attn_job j = { hp, c->tscr, F32(q), sinks->data, (float *)(void *)o->p, raw->p, comp ? comp->p : NULL,
                   sel ? (const int32_t *)(const void *)sel->p : NULL, sel_stride, R, H, hd, ct, raw_rows, pos0, (int64_t)rows,
                   1.0f / sqrtf((float)hd) };
    tp_run(c->tp, (int64_t)T * H, attn_task, &j);
    return 0;
}
