/* forward.c — the schedule: one chunk of T tokens through every layer as
 * a sequence of ds4_ops calls (doc/model.md §3–§8), each on the backend
 * the placement names for its part, and evaluation in chunks with
 * progress, cancellation and the final logits. */
#include "engine/forward_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"

/* ---- helpers ---------------------------------------------------------------- */

/* One sequence of a step: its state (rings, compressor frontiers, indexer
 * rows), the position of its first token, and its rows of the step's
 * activations. */
typedef struct {
    fwd_state *st;
    int64_t pos0;
    int row0, T;
} fwd_seq;

/* One evaluation: the state whose activations and placement the step
 * uses, the sequences it computes (a chunk of one sequence, or a decode
 * step of several, each one row), the backend the next ops run on (bk,
 * with its ops o and context c), the step's row count, and what went
 * wrong. */
typedef struct {
    fwd_state *st;
    const fwd_seq *seq;
    int n_seq;
    const ds4_hparams *hp;
    int bk;
    const ds4_ops *o;
    void *c;
    int T;          /* rows: the sum of the sequences' tokens */
    xbuf *wrote[8]; /* outputs of the op being called (see OUT) */
    int n_wrote;
    ds4_buf *views[8]; /* row views made for the op being called (see ROWS) */
    int n_views;
    bool fail;      /* a hand-over failed; err holds why */
    ds4_error err;
} run;

/* The ops that follow run on backend b. */
static void on(run *r, int b)
{
    xbuf_backend *be = &r->st->f->be.be[b];
    r->bk = b;
    r->o = be->ops;
    r->c = be->ctx;
}

/* An op's input: b's copy on the current backend, brought up to date
 * first. NULL for an absent optional buffer. */
static ds4_buf *in(run *r, xbuf *b)
{
    if (!xbuf_present(b)) return NULL;
    if (!r->fail && xbuf_handover(&r->st->f->be, b, r->bk, xbuf_span(b, r->T), &r->err)) r->fail = true;
    return b->on[r->bk];
}

/* An op's output: b's copy on the current backend, which becomes the only
 * current one once the op returns. Marked after the call, so that an
 * argument that is both read and written (IO) is handed over whatever
 * order the arguments are evaluated in. */
static ds4_buf *out(run *r, xbuf *b)
{
    if (!b->on[r->bk] && !r->fail) {
        ds4_error_set(&r->err, "internal: an output has no copy on backend %d", r->bk);
        r->fail = true;
    }
    if (r->n_wrote < (int)(sizeof r->wrote / sizeof r->wrote[0])) {
        r->wrote[r->n_wrote++] = b;
    } else if (!r->fail) {
        ds4_error_set(&r->err, "internal: an op with more outputs than the schedule tracks");
        r->fail = true;
    }
    return b->on[r->bk];
}

/* Rows [row0, row0 + n) of b (rows of `row` bytes; at least one): b
 * itself in a step of one sequence, whose rows are all of it from 0; else
 * a view, released once the op returns. When no view can be made the op
 * gets b and the step fails. */
static ds4_buf *rows_of(run *r, ds4_buf *b, size_t row, int row0, int64_t n)
{
    if (r->n_seq == 1 || !b || r->fail) return b;
    ds4_buf *v = r->n_views < (int)(sizeof r->views / sizeof r->views[0])
                     ? r->o->view(r->c, b, (size_t)row0 * row, (size_t)(n > 0 ? n : 1) * row)
                     : NULL;
    if (!v) {
        ds4_error_set(&r->err, "%s backend: cannot make a view of %lld rows", r->o->name, (long long)n);
        r->fail = true;
        return b;
    }
    r->views[r->n_views++] = v;
    return v;
}

#define ROWS(buf, row, s, n) rows_of(r, (buf), (row), (s)->row0, (n))

static int after_op(run *r, int rc)
{
    for (int i = 0; i < r->n_wrote; i++) xbuf_wrote(r->wrote[i], r->bk);
    r->n_wrote = 0;
    for (int i = 0; i < r->n_views; i++) r->o->release(r->c, r->views[i]);
    r->n_views = 0;
    if (rc && !r->fail) {
        const char *m = r->o->last_error ? r->o->last_error(r->c) : "";
        ds4_error_set(&r->err, "%s backend: %s", r->o->name, m && *m ? m : "evaluation failed");
        r->fail = true;
    }
    return r->fail ? -1 : 0;
}

#define IN(b) in(r, &(b))
#define OUT(b) out(r, &(b))
#define IO(b) (out(r, &(b)), in(r, &(b)))

/* Every op call site: bail out of the chunk on failure (the message is in
 * r->err). */
#define OP(call)                               \
    do {                                       \
        if (after_op(r, (call)) != 0) return -1; \
    } while (0)

/* Reads n rows and reports them; `cached` rows are shown as the cache holds
 * them (f16-rounded when the cache is f16). */
static void trace_rows_as(run *r, const char *name, int layer, xbuf *b, int64_t pos0, int64_t pos_step, int64_t n,
                          size_t row_bytes, bool cached)
{
    fwd_engine *f = r->st->f;
    if (!f->trace || n <= 0) return;
    unsigned char *tmp = malloc((size_t)n * row_bytes);
    if (!tmp) return;
    ds4_error err;
    int rc = xbuf_read(&f->be, b, 0, tmp, (size_t)n * row_bytes, &err);
    if (rc == 0 && cached && r->st->ct == DS4_CACHE_F16)
        for (size_t i = 0; i < (size_t)n * row_bytes / 4; i++) {
            float v;
            memcpy(&v, tmp + 4 * i, 4);
            v = quant_f16_to_f32(quant_f32_to_f16(v));
            memcpy(tmp + 4 * i, &v, 4);
        }
    if (rc == 0)
        for (int64_t i = 0; i < n; i++) f->trace(f->trace_ud, name, layer, pos0 + i * pos_step, tmp + i * row_bytes, row_bytes);
    free(tmp);
}

static void trace_rows(run *r, const char *name, int layer, xbuf *b, int64_t pos0, int64_t pos_step, int64_t n,
                       size_t row_bytes)
{
    trace_rows_as(r, name, layer, b, pos0, pos_step, n, row_bytes, false);
}

#define TRACE(name, layer, buf, pos0, T, floats)                                                             \
    do {                                                                                                     \
        if (r->st->f->trace) trace_rows(r, name, layer, &(buf), pos0, 1, T, (size_t)(floats) * sizeof(float)); \
    } while (0)

/* ---- one layer ---------------------------------------------------------------- */

/* Layer l's attention compressor (idx false) or indexer compressor (idx
 * true) over sequence s's tokens: the windows they close are pooled into
 * s's rows of the pooled activation, then normed, rotated to their
 * window's position, rounded and stored as s's compressed rows (§6.4,
 * §6.5). */
static int compress_seq(run *r, const fwd_seq *s, int l, bool idx)
{
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &r->st->f->m->layers[l];
    fwd_acts *a = &r->st->a;
    fwd_layer *LS = &s->st->L[l];
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int R = L->ratio, lanes = idx ? 2 : ds4_compress_lanes(R), d = idx ? hp->indexer_head_dim : hp->head_dim;
    const ds4_quant_sim qs = r->st->f->qsim;
    const int64_t pos0 = s->pos0, w0 = pos0 / R, n_emit = (pos0 + s->T) / R - w0;
    const size_t in_row = (size_t)lanes * d * 4, out_row = (size_t)d * 4;
    xbuf *ca = idx ? &a->ia : &a->ca, *cb = idx ? &a->ib : &a->cb, *pooled = idx ? &a->ipooled : &a->pooled;
    xbuf *front = idx ? &LS->ifront : &LS->cfront, *dst = idx ? &LS->icomp : &LS->comp;
    const int64_t front_rows = idx ? LS->ifront_rows : LS->cfront_rows;

    const ds4_tensor *ape = idx ? &L->idx_comp_ape : &L->comp_ape;
    OP(o->compress(c, ROWS(IN(*ca), in_row, s, s->T), ROWS(IN(*cb), in_row, s, s->T), ape, IO(*front), front_rows, R,
                   lanes, d, pos0, s->T, ROWS(OUT(*pooled), out_row, s, n_emit)));
    if (n_emit == 0) return 0;
    OP(o->rmsnorm(c, ROWS(IO(*pooled), out_row, s, n_emit), idx ? &L->idx_comp_norm : &L->comp_norm, n_emit, d,
                  ROWS(IO(*pooled), out_row, s, n_emit)));
    OP(o->rope(c, ROWS(IO(*pooled), out_row, s, n_emit), n_emit, 1, d, &r->st->f->rope_comp, w0 * R, R, 0));
    if (idx)
        OP(o->sim(c, ROWS(IO(*pooled), out_row, s, n_emit), n_emit, d,
                  qs == DS4_QSIM_FULL ? DS4_SIM_HADAMARD_FP4 : DS4_SIM_HADAMARD));
    else if (qs == DS4_QSIM_FULL)
        OP(o->sim(c, ROWS(IO(*pooled), out_row, s, n_emit), n_emit, d, DS4_SIM_FP8_NOPE));
    OP(o->store_rows(c, ROWS(IN(*pooled), out_row, s, n_emit), n_emit, d, IO(*dst), r->st->ct, w0, 0));
    if (r->st->f->trace)
        trace_rows_as(r, idx ? "index_comp_row" : "comp_kv_row", l, pooled, (w0 + 1) * R - 1, R, n_emit, out_row, true);
    return 0;
}

/* Whether sequence s's tokens rank the indexer rows of a layer of ratio
 * R: only once some token sees more rows than it keeps; before that every
 * visible row is used. */
static bool ranks(const run *r, const fwd_seq *s, int R)
{
    return (s->pos0 + s->T) / R > r->hp->indexer_top_k;
}

/* Layer l's queries, the shared K=V row and the compressors (§6.1–6.5):
 * the products over all rows of the step, rotations, stores and
 * compressors per sequence at its own positions. */
static int attention_inputs(run *r, int l, const ds4_rope *rope)
{
    fwd_acts *a = &r->st->a;
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &r->st->f->m->layers[l];
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int R = L->ratio, hd = hp->head_dim, H = hp->n_head, N = r->T;
    const int64_t pos0 = r->seq[0].pos0; /* traces: a step of one sequence */
    const size_t qrow = (size_t)hp->q_dim * 4, kvrow = (size_t)hd * 4;

    /* queries (doc/model.md §6.1) */
    OP(o->matmul(c, &L->attn_q_a, IN(a->xn), N, 1, OUT(a->qa)));
    OP(o->rmsnorm(c, IO(a->qa), &L->attn_q_a_norm, N, hp->q_lora, IO(a->qa)));
    TRACE("qr_norm", l, a->qa, pos0, N, hp->q_lora);
    OP(o->matmul(c, &L->attn_q_b, IN(a->qa), N, 1, OUT(a->q)));
    OP(o->rmsnorm(c, IO(a->q), NULL, (int64_t)N * H, hd, IO(a->q)));
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        OP(o->rope(c, ROWS(IO(a->q), qrow, s, s->T), s->T, H, hd, rope, s->pos0, 1, 0));
    TRACE("q_roped", l, a->q, pos0, N, hp->q_dim);

    /* the shared K=V row (§6.2) */
    OP(o->matmul(c, &L->attn_kv, IN(a->xn), N, 1, OUT(a->kv)));
    OP(o->rmsnorm(c, IO(a->kv), &L->attn_kv_a_norm, N, hd, IO(a->kv)));
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        OP(o->rope(c, ROWS(IO(a->kv), kvrow, s, s->T), s->T, 1, hd, rope, s->pos0, 1, 0));
    if (r->st->f->qsim == DS4_QSIM_FULL) OP(o->sim(c, IO(a->kv), N, hd, DS4_SIM_FP8_NOPE));
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        OP(o->store_rows(c, ROWS(IN(a->kv), kvrow, s, s->T), s->T, hd, IO(s->st->L[l].raw), r->st->ct, s->pos0,
                         s->st->raw_rows));
    if (r->st->f->trace) trace_rows_as(r, "kv_cache_row", l, &a->kv, pos0, 1, N, kvrow, true);
    if (!R) return 0;

    /* attention compressor (§6.4) */
    OP(o->matmul(c, &L->comp_kv, IN(a->xn), N, 1, OUT(a->ca)));
    OP(o->matmul(c, &L->comp_gate, IN(a->xn), N, 1, OUT(a->cb)));
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        if (compress_seq(r, s, l, false)) return -1;
    if (R != 4) return 0;

    /* indexer compressor and queries (§6.5) */
    const int id = hp->indexer_head_dim, nih = hp->n_indexer_head;
    OP(o->matmul(c, &L->idx_comp_kv, IN(a->xn), N, 1, OUT(a->ia)));
    OP(o->matmul(c, &L->idx_comp_gate, IN(a->xn), N, 1, OUT(a->ib)));
    bool any = false;
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++) {
        if (compress_seq(r, s, l, true)) return -1;
        any |= ranks(r, s, R);
    }
    if (!any) return 0;
    OP(o->matmul(c, &L->idx_q_b, IN(a->qa), N, 1, OUT(a->qI)));
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        OP(o->rope(c, ROWS(IO(a->qI), (size_t)nih * id * 4, s, s->T), s->T, nih, id, rope, s->pos0, 1, 0));
    OP(o->sim(c, IO(a->qI), (int64_t)N * nih, id,
              r->st->f->qsim == DS4_QSIM_FULL ? DS4_SIM_HADAMARD_FP4 : DS4_SIM_HADAMARD));
    OP(o->matmul(c, &L->idx_proj, IN(a->xn), N, 1, OUT(a->iw)));
    return 0;
}

static int attention_block(run *r, int l)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &st->f->m->layers[l];
    on(r, st->place[l].attn);
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int R = L->ratio, D = hp->n_embd, hd = hp->head_dim, H = hp->n_head, N = r->T, k = hp->indexer_top_k;
    const int64_t pos0 = r->seq[0].pos0; /* traces: a step of one sequence */
    const ds4_rope *rope = R ? &st->f->rope_comp : &st->f->rope_plain;
    const size_t qrow = (size_t)hp->q_dim * 4, selrow = (size_t)k * 4;
    xbuf *S = &a->S[st->s_cur], *S2 = &a->S[st->s_cur ^ 1];

    ds4_hc_site site = { &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base };
    OP(o->hc_pre(c, &site, IN(*S), N, OUT(a->x), OUT(a->post), OUT(a->comb)));
    TRACE("attn_cur", l, a->x, pos0, N, D);
    OP(o->rmsnorm(c, IN(a->x), &L->attn_norm, N, D, OUT(a->xn)));
    TRACE("attn_norm", l, a->xn, pos0, N, D);
    if (attention_inputs(r, l, rope)) return -1;

    /* per sequence: the indexer's choice, attention over its own rows and
     * inverse RoPE at its positions (§6.5–6.6) */
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++) {
        fwd_layer *LS = &s->st->L[l];
        bool ranked = R == 4 && ranks(r, s, R);
        if (ranked) {
            const size_t qIrow = (size_t)hp->n_indexer_head * hp->indexer_head_dim * 4;
            OP(o->indexer(c, ROWS(IN(a->qI), qIrow, s, s->T), ROWS(IN(a->iw), (size_t)hp->n_indexer_head * 4, s, s->T),
                          IN(LS->icomp), st->ct, R, s->pos0, s->T, ROWS(OUT(a->isel), selrow, s, s->T)));
            if (st->f->trace) trace_rows(r, "indexer_selected", l, &a->isel, pos0, 1, N, selrow);
        }
        OP(o->attention(c, ROWS(IN(a->q), qrow, s, s->T), IN(LS->raw), st->ct, s->st->raw_rows, IN(LS->comp), R,
                        ranked ? ROWS(IN(a->isel), selrow, s, s->T) : NULL, k, &L->attn_sinks, s->pos0, s->T,
                        ROWS(OUT(a->o), qrow, s, s->T)));
        OP(o->rope(c, ROWS(IO(a->o), qrow, s, s->T), s->T, H, hd, rope, s->pos0, 1, 1));
    }
    TRACE("heads_unroped", l, a->o, pos0, N, hp->q_dim);

    /* grouped output (§6.7) */
    OP(o->matmul(c, &L->attn_output_a, IN(a->o), N, hp->n_out_group, OUT(a->low)));
    OP(o->matmul(c, &L->attn_output_b, IN(a->low), N, 1, OUT(a->F)));
    TRACE("attn_out", l, a->F, pos0, N, D);
    OP(o->hc_post(c, IN(*S), IN(a->F), IN(a->post), IN(a->comb), N, OUT(*S2)));
    st->s_cur ^= 1;
    TRACE("after_attn_hc", l, *S2, pos0, N, hp->hc_dim);
    return 0;
}

/* The FFN of layer l: the dense part on the layer's ffn backend, the
 * routed experts on its experts backend (their inputs, the normed rows
 * and the router's choice, are handed over to it and their sum back). */
static int ffn_block(run *r, int l)
{
    fwd_state *st = r->st;
    const int T = r->T;
    const int64_t pos0 = r->seq[0].pos0; /* traces: a step of one sequence */
    fwd_acts *a = &st->a;
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &st->f->m->layers[l];
    on(r, st->place[l].ffn);
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int D = hp->n_embd, k = hp->n_expert_used;
    const float clamp = hp->swiglu_clamp[l];
    xbuf *S = &a->S[st->s_cur], *S2 = &a->S[st->s_cur ^ 1];

    ds4_hc_site site = { &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base };
    OP(o->hc_pre(c, &site, IN(*S), T, OUT(a->x), OUT(a->post), OUT(a->comb)));
    TRACE("ffn_cur", l, a->x, pos0, T, D);
    OP(o->rmsnorm(c, IN(a->x), &L->ffn_norm, T, D, OUT(a->xn)));
    TRACE("ffn_norm", l, a->xn, pos0, T, D);

    OP(o->matmul(c, &L->ffn_gate_inp, IN(a->xn), T, 1, OUT(a->rlog)));
    OP(o->router(c, IN(a->rlog), L->hash ? NULL : &L->exp_probs_b, L->hash ? &L->tid2eid : NULL, IN(a->tokens), T,
                 OUT(a->rsel), OUT(a->rw)));
    if (st->f->trace) {
        trace_rows(r, "experts", l, &a->rsel, pos0, 1, T, (size_t)k * 4);
        trace_rows(r, "expert_weights", l, &a->rw, pos0, 1, T, (size_t)k * 4);
    }
    /* Routed experts on another backend get their inputs first; the
     * shared expert is then queued here and runs while that backend
     * computes the routed ones (a device's queue does not wait for the
     * host). The sum does not depend on the order. */
    const int fb = st->place[l].ffn;
    /* A chunk of at least stream_min tokens computes routed experts kept
     * elsewhere here, with their weights lent to this backend for the
     * layer (streamed through a device, which then reads them from its
     * own memory at its own speed). */
    const xbuf_backend *fbe = &st->f->be.be[fb];
    const bool stream = st->place[l].experts != fb && st->f->stream_min > 0 && T >= st->f->stream_min && fbe->ops->lend;
    const int eb = stream ? fb : st->place[l].experts;
    if (eb != fb) {
        on(r, eb);
        (void)IN(a->xn);
        (void)IN(a->rsel);
        (void)IN(a->rw);
        if (r->fail) return -1;
        on(r, fb);
    }
    OP(o->matmul(c, &L->ffn_gate_shexp, IN(a->xn), T, 1, OUT(a->g)));
    OP(o->matmul(c, &L->ffn_up_shexp, IN(a->xn), T, 1, OUT(a->u)));
    OP(o->swiglu(c, IN(a->g), IN(a->u), T, hp->shared_ff, clamp, OUT(a->mid)));
    OP(o->matmul(c, &L->ffn_down_shexp, IN(a->mid), T, 1, OUT(a->Fs)));
    TRACE("ffn_shared", l, a->Fs, pos0, T, D);

    /* A device that computes on the host's own cores would only contend
     * with the routed experts for them: it finishes the shared expert
     * first (measured on PoCL: the experts' time drops by a fifth). */
    if (eb != fb && st->f->on_host_cores[fb] && o->finish && after_op(r, o->finish(c))) return -1;
    on(r, eb);
    double t0 = eb != fb || stream ? base_now_ms() : 0;
    if (stream) {
        const ds4_tensor *lent[] = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
        OP(o->lend(c, lent, 3));
    }
    OP(r->o->moe(r->c, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, IN(a->xn), IN(a->rsel), IN(a->rw), T,
                 clamp, OUT(a->Fm)));
    if (eb != fb || stream) st->f->experts_ms += base_now_ms() - t0;
    if (stream) st->f->streamed++;
    TRACE("ffn_moe", l, a->Fm, pos0, T, D);
    on(r, fb);

    OP(o->add(c, IN(a->Fm), IN(a->Fs), (int64_t)T * D, OUT(a->F)));
    OP(o->hc_post(c, IN(*S), IN(a->F), IN(a->post), IN(a->comb), T, OUT(*S2)));
    st->s_cur ^= 1;
    TRACE("out_hc", l, *S2, pos0, T, hp->hc_dim);
    return 0;
}

static bool cancelled(const ds4_callbacks *cb) { return cb && cb->cancel && cb->cancel(cb->ud); }

/* A backend that queues its work returns from a chunk's ops long before
 * the device has done them. A prefill that can be cancelled or reports
 * progress therefore waits for each layer: a cancel then stops the device
 * within a layer instead of after every queued chunk, and the progress
 * shown is work done. One wait per layer of a prefill chunk is noise next
 * to the layer; decode steps (one token per sequence) keep their single
 * wait, for the logits. */
static int settle(run *r, const ds4_callbacks *cb)
{
    if (r->n_seq > 1 || r->T < 2 || !cb || !(cb->cancel || cb->progress)) return 0;
    const xbuf_set *s = &r->st->f->be;
    for (int b = 0; b < s->n; b++)
        if ((r->st->used & XBUF_ON(b)) && s->be[b].ops->finish) {
            on(r, b);
            if (r->o->finish(r->c)) return -1;
        }
    return 0;
}

/* Layers [l0, l1) of a chunk whose streams are in a.S[s_cur]: 0 done, 1
 * cancelled part-way, -1 error. */
static int run_layers(run *r, const ds4_callbacks *cb)
{
    fwd_state *st = r->st;
    for (int l = st->l0; l < st->l1; l++) {
        if (l > st->l0) {
            OP(settle(r, cb));
            if (cancelled(cb)) return 1;
        }
        if (attention_block(r, l) || ffn_block(r, l)) return -1;
    }
    OP(settle(r, cb));
    return 0;
}

/* The streams of a chunk's tokens after this engine's last layer go to
 * the next stage, and the last token's after the model's last layer come
 * back into a.s_last (forward.h, fwd_set_next). */
static int run_next(run *r, const int32_t *tok, int64_t pos0, int T)
{
    fwd_state *st = r->st;
    fwd_engine *f = st->f;
    size_t hc = (size_t)r->hp->hc_dim * 4;
    float *S = malloc((size_t)T * hc), *last = malloc(hc);
    int rc = !S || !last ? ds4_error_set(&r->err, "out of memory for %d tokens' streams", T)
                         : xbuf_read(&f->be, &st->a.S[st->s_cur], 0, S, (size_t)T * hc, &r->err);
    if (rc == 0) rc = f->next(f->next_ud, st, tok, S, pos0, T, last, &r->err);
    if (rc == 0) {
        on(r, st->head);
        rc = after_op(r, r->o->write(r->c, out(r, &st->a.s_last), 0, last, hc));
    }
    if (rc) r->fail = true;
    free(S);
    free(last);
    return rc ? -1 : 0;
}

/* The step r was set up for: tok holds its r->T token ids, row by row.
 * 0 done, 1 cancelled part-way (every state unchanged), -1 error. */
static int run_chunk(run *r, const int32_t *tok, const ds4_callbacks *cb)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    const ds4_hparams *hp = r->hp;
    const int T = r->T;
    /* from here on the rings hold this step's rows too */
    for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++)
        if (s->pos0 + s->T > s->st->hi) s->st->hi = s->pos0 + s->T;
    on(r, st->embed);
    OP(r->o->write(r->c, OUT(a->tokens), 0, tok, (size_t)T * 4));
    OP(r->o->embed(r->c, &st->f->m->token_embd, IN(a->tokens), T, OUT(a->S[st->s_cur])));
    TRACE("embd", -1, a->S[st->s_cur], r->seq[0].pos0, T, hp->n_embd * hp->n_hc);
    int rc = run_layers(r, cb);
    if (rc) return rc;
    if (st->f->next) {
        if (run_next(r, tok, r->seq[0].pos0, T)) return -1;
    } else {
        /* on the backend that holds the last layer's result: the head's
         * hand-over is then one token's streams per sequence */
        on(r, st->place[hp->n_layer - 1].ffn);
        size_t hc = (size_t)hp->hc_dim * 4;
        for (const fwd_seq *s = r->seq; s < r->seq + r->n_seq; s++) {
            OP(r->o->copy(r->c, OUT(s->st->a.s_last), 0, IN(a->S[st->s_cur]), (size_t)(s->row0 + s->T - 1) * hc, hc));
            s->st->has_last = true;
        }
    }
    st->has_last = true;
    return 0;
}

/* The output head (§8) over n rows of final streams src (one per
 * sequence), through the rows of y and lg; row i's logits are read into
 * dst[i]. pos: the first row's position (traces). */
static int run_head(run *r, xbuf *src, int n, xbuf *y, xbuf *lg, float *const *dst, int64_t pos)
{
    fwd_state *st = r->st;
    const ds4_model *m = st->f->m;
    const ds4_hparams *hp = r->hp;
    const size_t vb = (size_t)hp->n_vocab * 4;
    r->T = n;
    on(r, st->head);
    ds4_hc_site site = { &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base };
    OP(r->o->hc_head(r->c, &site, IN(*src), n, OUT(*y)));
    TRACE("output_embd", -1, *y, pos, n, hp->n_embd);
    OP(r->o->rmsnorm(r->c, IO(*y), &m->output_norm, n, hp->n_embd, IO(*y)));
    TRACE("output_norm", -1, *y, pos, n, hp->n_embd);
    OP(r->o->matmul(r->c, &m->output, IN(*y), n, 1, OUT(*lg)));
    for (int i = 0; i < n; i++) OP(r->o->read(r->c, IN(*lg), (size_t)i * vb, dst[i], vb));
    if (st->f->trace) st->f->trace(st->f->trace_ud, "logits", -1, pos, dst[0], vb);
    return 0;
}

long fwd_backend_eval(void *p, const int32_t *tokens, size_t pos, size_t n, float *logits, const ds4_callbacks *cb,
                      ds4_error *err)
{
    fwd_state *st = p;
    fwd_engine *f = st->f;
    if ((int64_t)pos != st->n) {
        ds4_error_set(err, "internal: state holds %lld tokens, asked to continue at %zu", (long long)st->n, pos);
        return -1;
    }
    if (pos + n > (size_t)st->n_ctx) {
        ds4_error_set(err, "%zu tokens do not fit the context of %d", pos + n, st->n_ctx);
        return -1;
    }
    fwd_seq seq = { st, 0, 0, 0 };
    run r = { .st = st, .seq = &seq, .n_seq = 1, .hp = f->hp };
    on(&r, st->embed);
    size_t done = 0;
    double t0 = base_now_ms();
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    while (done < n) {
        if (cancelled(cb)) break;
        int T = n - done < (size_t)st->T_max ? (int)(n - done) : st->T_max;
        seq = (fwd_seq){ st, (int64_t)(pos + done), 0, T };
        r.T = T;
        rc = run_chunk(&r, tokens + pos + done, cb);
        if (rc != 0) break;
        st->n += T;
        done += (size_t)T;
        if (cb && cb->progress) {
            double s = (base_now_ms() - t0) / 1000.0;
            cb->progress(cb->ud, (int)done, (int)n, s > 0 ? (double)done / s : 0.0);
        }
    }
    if (rc >= 0 && done > 0 && st->has_last &&
        run_head(&r, &st->a.s_last, 1, &st->a.y, &st->a.logits, &logits, st->n - 1) != 0)
        rc = -1;
    pthread_mutex_unlock(&f->mu);
    if (rc < 0) {
        ds4_error_set(err, "%s", r.fail ? r.err.msg : "evaluation failed");
        return -1;
    }
    return (long)done;
}

/* Whether the n states can be stepped together: one engine without a
 * trace hook or a next stage, the same placement and layers, every state
 * distinct and at the position asked, and room for the rows in the first
 * state's activations. */
static bool batchable(fwd_state *const *sts, const size_t *pos, int n)
{
    const fwd_state *a = sts[0];
    const fwd_engine *f = a->f;
    if (f->trace || f->next || n > a->T_max) return false;
    for (int i = 0; i < n; i++) {
        const fwd_state *b = sts[i];
        if (b->f != f || (int64_t)pos[i] != b->n || b->n + 1 > b->n_ctx || b->embed != a->embed ||
            b->head != a->head || b->l0 != a->l0 || b->l1 != a->l1 || b->ct != a->ct ||
            memcmp(b->place, a->place, (size_t)f->hp->n_layer * sizeof *a->place) != 0)
            return false;
        for (int j = 0; j < i; j++)
            if (sts[j] == b) return false;
    }
    return true;
}

/* The engine's rows for a step's logits: at least n, on the head's backend. */
static int batch_logits(fwd_engine *f, uint8_t head, int n, ds4_error *err)
{
    if (f->blogits_rows >= n && f->blogits_head == head) return 0;
    xbuf_release(&f->be, &f->blogits);
    f->blogits_rows = 0;
    size_t row = (size_t)f->hp->n_vocab * 4;
    if (xbuf_alloc(&f->be, &f->blogits, XBUF_ON(head), (size_t)n * row, row))
        return ds4_error_set(err, "out of memory for the logits of %d sequences", n);
    f->blogits_rows = n;
    f->blogits_head = head;
    return 0;
}

int fwd_backend_eval_batch(void *const *p, const int32_t *const *tokens, const size_t *pos, int n, float *const *logits,
                           const ds4_callbacks *cb, ds4_error *err)
{
    fwd_state *const *sts = (fwd_state *const *)p;
    if (n == 1) {
        long done = fwd_backend_eval(sts[0], tokens[0], pos[0], 1, logits[0], cb, err);
        return done < 0 ? -1 : (int)done;
    }
    if (n < 1 || !batchable(sts, pos, n)) return -2;
    fwd_state *st = sts[0];
    fwd_engine *f = st->f;
    fwd_seq *seq = malloc((size_t)n * sizeof *seq);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    if (!seq || !tok) {
        free(seq);
        free(tok);
        return ds4_error_set(err, "out of memory for a step of %d sequences", n);
    }
    for (int i = 0; i < n; i++) {
        seq[i] = (fwd_seq){ sts[i], sts[i]->n, i, 1 };
        tok[i] = tokens[i][pos[i]];
    }
    run r = { .st = st, .seq = seq, .n_seq = n, .hp = f->hp, .T = n };
    pthread_mutex_lock(&f->mu);
    int rc = cancelled(cb) ? 1 : batch_logits(f, st->head, n, &r.err) ? (r.fail = true, -1) : 0;
    if (rc == 0) rc = run_chunk(&r, tok, cb);
    if (rc == 0 && run_head(&r, &st->a.S[st->s_cur], n, &st->a.x, &f->blogits, logits, seq[0].pos0) != 0) rc = -1;
    if (rc == 0) {
        for (int i = 0; i < n; i++) sts[i]->n++;
        f->batched++;
    }
    pthread_mutex_unlock(&f->mu);
    free(seq);
    free(tok);
    if (rc < 0) return ds4_error_set(err, "%s", r.fail ? r.err.msg : "evaluation failed");
    return rc == 1 ? 0 : n;
}

uint64_t fwd_batched_steps(const fwd_engine *f) { return f->batched; }

long fwd_stage_eval(void *p, const int32_t *tok, const float *S, int64_t pos0, int T, float *dst, bool last_only,
                    const ds4_callbacks *cb, ds4_error *err)
{
    fwd_state *st = p;
    fwd_engine *f = st->f;
    if (pos0 != st->n || T < 1 || T > st->T_max || pos0 + T > st->n_ctx) {
        ds4_error_set(err, "internal: a stage holding %lld tokens (chunks of %d, context %d) asked for %d at %lld",
                      (long long)st->n, st->T_max, st->n_ctx, T, (long long)pos0);
        return -1;
    }
    const size_t hc = (size_t)f->hp->hc_dim * 4;
    const fwd_seq seq = { st, pos0, 0, T };
    run r = { .st = st, .seq = &seq, .n_seq = 1, .hp = f->hp, .T = T };
    pthread_mutex_lock(&f->mu);
    if (pos0 + T > st->hi) st->hi = pos0 + T;
    st->has_last = false;
    on(&r, st->embed);
    int rc = after_op(&r, r.o->write(r.c, out(&r, &st->a.tokens), 0, tok, (size_t)T * 4));
    on(&r, st->place[st->l0].attn);
    if (rc == 0) rc = after_op(&r, r.o->write(r.c, out(&r, &st->a.S[st->s_cur]), 0, S, (size_t)T * hc));
    if (rc == 0) rc = run_layers(&r, cb);
    if (rc == 0) {
        size_t off = last_only ? (size_t)(T - 1) * hc : 0;
        rc = xbuf_read(&f->be, &st->a.S[st->s_cur], off, dst, last_only ? hc : (size_t)T * hc, &r.err);
    }
    if (rc == 0) st->n += T;
    pthread_mutex_unlock(&f->mu);
    if (rc < 0) {
        ds4_error_set(err, "%s", r.fail || r.err.msg[0] ? r.err.msg : "evaluation failed");
        return -1;
    }
    return rc == 1 ? 0 : T;
}
