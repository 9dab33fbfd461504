/* forward.c — the schedule: one chunk of T tokens through every layer as
 * a sequence of ds4_ops calls (ds4-forward §4–§9), and evaluation in
 * chunks with progress, cancellation and the final logits. */
#include "engine/forward_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"

/* ---- helpers ---------------------------------------------------------------- */

typedef struct {
    fwd_state *st;
    const ds4_ops *o;
    void *c;
    const ds4_hparams *hp;
} run;

/* Reads n rows and reports them; `cached` rows are shown as the cache holds
 * them (f16-rounded when the cache is f16). */
static void trace_rows_as(run *r, const char *name, int layer, ds4_buf *b, int64_t pos0, int64_t pos_step, int64_t n,
                          size_t row_bytes, bool cached)
{
    fwd_engine *f = r->st->f;
    if (!f->trace || n <= 0) return;
    unsigned char *tmp = malloc((size_t)n * row_bytes);
    if (!tmp) return;
    int rc = r->o->read(r->c, b, 0, tmp, (size_t)n * row_bytes);
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

static void trace_rows(run *r, const char *name, int layer, ds4_buf *b, int64_t pos0, int64_t pos_step, int64_t n,
                       size_t row_bytes)
{
    trace_rows_as(r, name, layer, b, pos0, pos_step, n, row_bytes, false);
}

#define TRACE(name, layer, buf, pos0, T, floats)                                                          \
    do {                                                                                                  \
        if (r->st->f->trace) trace_rows(r, name, layer, buf, pos0, 1, T, (size_t)(floats) * sizeof(float)); \
    } while (0)

/* Every op call site: bail out of the chunk on failure (the message stays
 * in the ops context). */
#define OP(call)                  \
    do {                          \
        if ((call) != 0) return -1; \
    } while (0)

/* ---- one layer ---------------------------------------------------------------- */

static int attention_block(run *r, int l, int64_t pos0, int T)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    fwd_layer *LS = &st->L[l];
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &st->f->m->layers[l];
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int R = L->ratio, D = hp->n_embd, hd = hp->head_dim, H = hp->n_head;
    const ds4_quant_sim qs = st->f->qsim;
    const ds4_rope *rope = R ? &st->f->rope_comp : &st->f->rope_plain;
    ds4_buf *S = a->S[st->s_cur], *S2 = a->S[st->s_cur ^ 1];

    ds4_hc_site site = { &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base };
    OP(o->hc_pre(c, &site, S, T, a->x, a->post, a->comb));
    TRACE("attn_cur", l, a->x, pos0, T, D);
    OP(o->rmsnorm(c, a->x, &L->attn_norm, T, D, a->xn));
    TRACE("attn_norm", l, a->xn, pos0, T, D);

    /* queries (§7.2) */
    OP(o->matmul(c, &L->attn_q_a, a->xn, T, 1, a->qa));
    OP(o->rmsnorm(c, a->qa, &L->attn_q_a_norm, T, hp->q_lora, a->qa));
    TRACE("qr_norm", l, a->qa, pos0, T, hp->q_lora);
    OP(o->matmul(c, &L->attn_q_b, a->qa, T, 1, a->q));
    OP(o->rmsnorm(c, a->q, NULL, (int64_t)T * H, hd, a->q));
    OP(o->rope(c, a->q, T, H, hd, rope, pos0, 1, 0));
    TRACE("q_roped", l, a->q, pos0, T, hp->q_dim);

    /* the shared K=V row (§7.3) */
    OP(o->matmul(c, &L->attn_kv, a->xn, T, 1, a->kv));
    OP(o->rmsnorm(c, a->kv, &L->attn_kv_a_norm, T, hd, a->kv));
    OP(o->rope(c, a->kv, T, 1, hd, rope, pos0, 1, 0));
    if (qs == DS4_QSIM_FULL) OP(o->sim(c, a->kv, T, hd, DS4_SIM_FP8_NOPE));
    OP(o->store_rows(c, a->kv, T, hd, LS->raw, st->ct, pos0, st->raw_rows));
    if (st->f->trace) trace_rows_as(r, "kv_cache_row", l, a->kv, pos0, 1, T, (size_t)hd * 4, true);

    ds4_buf *sel = NULL;
    if (R) {
        /* attention compressor (§7.6) */
        const int lanes = ds4_compress_lanes(R);
        const int64_t w0 = pos0 / R, n_emit = (pos0 + T) / R - w0;
        OP(o->matmul(c, &L->comp_kv, a->xn, T, 1, a->ca));
        OP(o->matmul(c, &L->comp_gate, a->xn, T, 1, a->cb));
        OP(o->compress(c, a->ca, a->cb, &L->comp_ape, LS->cfront, LS->cfront_rows, R, lanes, hd, pos0, T, a->pooled));
        if (n_emit > 0) {
            OP(o->rmsnorm(c, a->pooled, &L->comp_norm, n_emit, hd, a->pooled));
            OP(o->rope(c, a->pooled, n_emit, 1, hd, rope, w0 * R, R, 0));
            if (qs == DS4_QSIM_FULL) OP(o->sim(c, a->pooled, n_emit, hd, DS4_SIM_FP8_NOPE));
            OP(o->store_rows(c, a->pooled, n_emit, hd, LS->comp, st->ct, w0, 0));
            if (st->f->trace)
                trace_rows_as(r, "comp_kv_row", l, a->pooled, (w0 + 1) * R - 1, R, n_emit, (size_t)hd * 4, true);
        }
        if (R == 4) {
            /* indexer compressor and selection (§7.7) */
            const int id = hp->indexer_head_dim, nih = hp->n_indexer_head;
            const ds4_sim hs = qs == DS4_QSIM_FULL ? DS4_SIM_HADAMARD_FP4 : DS4_SIM_HADAMARD;
            OP(o->matmul(c, &L->idx_comp_kv, a->xn, T, 1, a->ia));
            OP(o->matmul(c, &L->idx_comp_gate, a->xn, T, 1, a->ib));
            OP(o->compress(c, a->ia, a->ib, &L->idx_comp_ape, LS->ifront, LS->ifront_rows, R, 2, id, pos0, T,
                           a->ipooled));
            if (n_emit > 0) {
                OP(o->rmsnorm(c, a->ipooled, &L->idx_comp_norm, n_emit, id, a->ipooled));
                OP(o->rope(c, a->ipooled, n_emit, 1, id, rope, w0 * R, R, 0));
                OP(o->sim(c, a->ipooled, n_emit, id, hs));
                OP(o->store_rows(c, a->ipooled, n_emit, id, LS->icomp, st->ct, w0, 0));
                if (st->f->trace)
                    trace_rows_as(r, "index_comp_row", l, a->ipooled, (w0 + 1) * R - 1, R, n_emit, (size_t)id * 4,
                                  true);
            }
            /* ranking only matters once some token of the chunk sees more
             * rows than it keeps; before that every visible row is used */
            if ((pos0 + T) / R > hp->indexer_top_k) {
                OP(o->matmul(c, &L->idx_q_b, a->qa, T, 1, a->qI));
                OP(o->rope(c, a->qI, T, nih, id, rope, pos0, 1, 0));
                OP(o->sim(c, a->qI, (int64_t)T * nih, id, hs));
                OP(o->matmul(c, &L->idx_proj, a->xn, T, 1, a->iw));
                OP(o->indexer(c, a->qI, a->iw, LS->icomp, st->ct, R, pos0, T, a->isel));
                sel = a->isel;
                if (st->f->trace)
                    trace_rows(r, "indexer_selected", l, a->isel, pos0, 1, T, (size_t)hp->indexer_top_k * 4);
            }
        }
    }

    /* attention, inverse RoPE, grouped output (§7.8–7.10) */
    OP(o->attention(c, a->q, LS->raw, st->ct, st->raw_rows, LS->comp, R, sel, hp->indexer_top_k, &L->attn_sinks, pos0,
                    T, a->o));
    OP(o->rope(c, a->o, T, H, hd, rope, pos0, 1, 1));
    TRACE("heads_unroped", l, a->o, pos0, T, hp->q_dim);
    OP(o->matmul(c, &L->attn_output_a, a->o, T, hp->n_out_group, a->low));
    OP(o->matmul(c, &L->attn_output_b, a->low, T, 1, a->F));
    TRACE("attn_out", l, a->F, pos0, T, D);
    OP(o->hc_post(c, S, a->F, a->post, a->comb, T, S2));
    st->s_cur ^= 1;
    TRACE("after_attn_hc", l, S2, pos0, T, hp->hc_dim);
    return 0;
}

static int ffn_block(run *r, int l, int64_t pos0, int T)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    const ds4_hparams *hp = r->hp;
    const ds4_layer *L = &st->f->m->layers[l];
    const ds4_ops *o = r->o;
    void *c = r->c;
    const int D = hp->n_embd, k = hp->n_expert_used;
    const float clamp = hp->swiglu_clamp[l];
    ds4_buf *S = a->S[st->s_cur], *S2 = a->S[st->s_cur ^ 1];

    ds4_hc_site site = { &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base };
    OP(o->hc_pre(c, &site, S, T, a->x, a->post, a->comb));
    TRACE("ffn_cur", l, a->x, pos0, T, D);
    OP(o->rmsnorm(c, a->x, &L->ffn_norm, T, D, a->xn));
    TRACE("ffn_norm", l, a->xn, pos0, T, D);

    OP(o->matmul(c, &L->ffn_gate_inp, a->xn, T, 1, a->rlog));
    OP(o->router(c, a->rlog, L->hash ? NULL : &L->exp_probs_b, L->hash ? &L->tid2eid : NULL, a->tokens, T, a->rsel,
                 a->rw));
    if (st->f->trace) {
        trace_rows(r, "experts", l, a->rsel, pos0, 1, T, (size_t)k * 4);
        trace_rows(r, "expert_weights", l, a->rw, pos0, 1, T, (size_t)k * 4);
    }
    OP(o->moe(c, &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps, a->xn, a->rsel, a->rw, T, clamp, a->Fm));
    TRACE("ffn_moe", l, a->Fm, pos0, T, D);

    OP(o->matmul(c, &L->ffn_gate_shexp, a->xn, T, 1, a->g));
    OP(o->matmul(c, &L->ffn_up_shexp, a->xn, T, 1, a->u));
    OP(o->swiglu(c, a->g, a->u, T, hp->shared_ff, clamp, a->mid));
    OP(o->matmul(c, &L->ffn_down_shexp, a->mid, T, 1, a->Fs));
    TRACE("ffn_shared", l, a->Fs, pos0, T, D);

    OP(o->add(c, a->Fm, a->Fs, (int64_t)T * D, a->F));
    OP(o->hc_post(c, S, a->F, a->post, a->comb, T, S2));
    st->s_cur ^= 1;
    TRACE("out_hc", l, S2, pos0, T, hp->hc_dim);
    return 0;
}

static bool cancelled(const ds4_callbacks *cb) { return cb && cb->cancel && cb->cancel(cb->ud); }

/* A backend that queues its work returns from a chunk's ops long before
 * the device has done them. A prefill that can be cancelled or reports
 * progress therefore waits for each layer: a cancel then stops the device
 * within a layer instead of after every queued chunk, and the progress
 * shown is work done. One wait per layer of a prefill chunk is noise next
 * to the layer; decode steps (T = 1) keep their single wait, for the
 * logits. */
static int settle(run *r, int T, const ds4_callbacks *cb)
{
    if (T < 2 || !cb || !(cb->cancel || cb->progress) || !r->o->finish) return 0;
    return r->o->finish(r->c);
}

/* 0 done, 1 cancelled part-way (state unchanged), -1 error. */
static int run_chunk(run *r, const int32_t *tok, int64_t pos0, int T, const ds4_callbacks *cb)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    const ds4_hparams *hp = r->hp;
    /* from here on the rings hold this chunk's rows too */
    if (pos0 + T > st->hi) st->hi = pos0 + T;
    OP(r->o->write(r->c, a->tokens, 0, tok, (size_t)T * 4));
    OP(r->o->embed(r->c, &st->f->m->token_embd, a->tokens, T, a->S[st->s_cur]));
    TRACE("embd", -1, a->S[st->s_cur], pos0, T, hp->n_embd * hp->n_hc);
    for (int l = 0; l < hp->n_layer; l++) {
        if (l > 0) {
            OP(settle(r, T, cb));
            if (cancelled(cb)) return 1;
        }
        if (attention_block(r, l, pos0, T) || ffn_block(r, l, pos0, T)) return -1;
    }
    OP(settle(r, T, cb));
    size_t hc = (size_t)hp->hc_dim * 4;
    OP(r->o->copy(r->c, a->s_last, 0, a->S[st->s_cur], (size_t)(T - 1) * hc, hc));
    st->has_last = true;
    return 0;
}

static int run_head(run *r, float *logits)
{
    fwd_state *st = r->st;
    fwd_acts *a = &st->a;
    const ds4_model *m = st->f->m;
    const ds4_hparams *hp = r->hp;
    int64_t pos = st->n - 1;
    ds4_hc_site site = { &m->output_hc_fn, &m->output_hc_scale, &m->output_hc_base };
    OP(r->o->hc_head(r->c, &site, a->s_last, 1, a->y));
    TRACE("output_embd", -1, a->y, pos, 1, hp->n_embd);
    OP(r->o->rmsnorm(r->c, a->y, &m->output_norm, 1, hp->n_embd, a->y));
    TRACE("output_norm", -1, a->y, pos, 1, hp->n_embd);
    OP(r->o->matmul(r->c, &m->output, a->y, 1, 1, a->logits));
    OP(r->o->read(r->c, a->logits, 0, logits, (size_t)hp->n_vocab * 4));
    if (st->f->trace) st->f->trace(st->f->trace_ud, "logits", -1, pos, logits, (size_t)hp->n_vocab * 4);
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
    run r = { st, f->ops, f->ctx, f->hp };
    size_t done = 0;
    double t0 = now_ms();
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    while (done < n) {
        if (cancelled(cb)) break;
        int T = n - done < (size_t)st->T_max ? (int)(n - done) : st->T_max;
        rc = run_chunk(&r, tokens + pos + done, (int64_t)(pos + done), T, cb);
        if (rc != 0) break;
        st->n += T;
        done += (size_t)T;
        if (cb && cb->progress) {
            double s = (now_ms() - t0) / 1000.0;
            cb->progress(cb->ud, (int)done, (int)n, s > 0 ? (double)done / s : 0.0);
        }
    }
    if (rc >= 0 && done > 0 && st->has_last && run_head(&r, logits) != 0) rc = -1;
    pthread_mutex_unlock(&f->mu);
    if (rc < 0) {
        const char *m = f->ops->last_error ? f->ops->last_error(f->ctx) : "";
        ds4_error_set(err, "%s backend: %s", f->ops->name, m && *m ? m : "evaluation failed");
        return -1;
    }
    return (long)done;
}
