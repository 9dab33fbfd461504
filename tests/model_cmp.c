/* model_cmp.c — whole-model runs of two engines compared (model_cmp.h). */
#include "tests/model_cmp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/forward.h"
#include "opencl/cl_ops.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

static void on_trace(void *ud, const char *name, int layer, int64_t pos, const void *data, size_t bytes)
{
    mc_record *r = ud;
    if (pos < 0 || pos >= r->n_pos) return;
    size_t at = (size_t)pos * (size_t)r->n_layer + (size_t)(layer < 0 ? 0 : layer);
    if (!strcmp(name, "out_hc") && layer == r->n_layer - 1 && bytes == (size_t)r->hc_dim * 4) {
        memcpy(r->hidden + (size_t)pos * (size_t)r->hc_dim, data, bytes);
        r->has_hidden[pos] = true;
    } else if (!strcmp(name, "experts") && bytes == (size_t)r->k * 4) {
        memcpy(r->experts + at * (size_t)r->k, data, bytes);
        r->has_experts[at] = true;
    } else if (!strcmp(name, "indexer_selected") && bytes == (size_t)r->top_k * 4) {
        memcpy(r->sel + at * (size_t)r->top_k, data, bytes);
        r->has_sel[at] = true;
    } else if (!strcmp(name, "comp_kv_row") && layer >= 0 && layer < r->n_layer) {
        r->comp_rows[layer]++;
    }
}

static void record_init(mc_record *r, const ds4_engine *e, int n_pos)
{
    const ds4_hparams *hp = &e->model->hp;
    memset(r, 0, sizeof *r);
    r->n_pos = n_pos;
    r->n_layer = hp->n_layer;
    r->k = hp->n_expert_used;
    r->top_k = hp->indexer_top_k;
    r->hc_dim = hp->hc_dim;
    size_t cells = (size_t)n_pos * (size_t)hp->n_layer;
    r->hidden = test_alloc((size_t)n_pos * (size_t)r->hc_dim * 4);
    r->has_hidden = test_alloc((size_t)n_pos);
    r->experts = test_alloc(cells * (size_t)r->k * 4);
    r->has_experts = test_alloc(cells);
    r->sel = test_alloc(cells * (size_t)r->top_k * 4);
    r->has_sel = test_alloc(cells);
    r->comp_rows = test_alloc((size_t)hp->n_layer * sizeof(int));
}

int mc_n_chunks(const mc_plan *p) { return (p->prefill + p->chunk - 1) / p->chunk; }

void mc_run(ds4_engine *e, const mc_plan *p, mc_outcome *out)
{
    int V = e->n_vocab, N = (int)p->ids->n;
    fwd_engine *f = fwd_of(e);
    CHECK(f != NULL);
    record_init(&out->rec, e, N);
    out->chunk_logits = test_alloc((size_t)mc_n_chunks(p) * (size_t)V * 4);
    out->step_logits = test_alloc((size_t)(N - p->prefill) * (size_t)V * 4);
    fwd_set_chunk(f, p->chunk);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, N, &err);
    CHECK_MSG(s != NULL, "session: %s", err.msg);
    fwd_set_trace(f, on_trace, &out->rec);
    for (int c = 0, at = 0; at < p->prefill; c++) {
        at = at + p->chunk < p->prefill ? at + p->chunk : p->prefill;
        CHECK_MSG(ds4_session_sync(s, p->ids->ids, (size_t)at, NULL, &err) == DS4_OK, "prefill to %d: %s", at, err.msg);
        memcpy(out->chunk_logits + (size_t)c * (size_t)V, ds4_session_logits(s), (size_t)V * 4);
    }
    CHECK(ds4_session_snapshot(s, &out->snap, &out->snap_len, &err) == 0);
    for (int i = p->prefill; i < N; i++) {
        CHECK_MSG(ds4_session_eval(s, p->ids->ids[i], NULL, &err) == DS4_OK, "decode at %d: %s", i, err.msg);
        memcpy(out->step_logits + (size_t)(i - p->prefill) * (size_t)V, ds4_session_logits(s), (size_t)V * 4);
    }
    fwd_set_trace(f, NULL, NULL);
    ds4_session_close(s);
    if (e->opt.backend == DS4_BACKEND_OPENCL && fwd_n_backends(f) == 1) {
        /* the device memory it took stayed within what the planner is told */
        clo_device_use u;
        clo_device_usage(fwd_ops_ctx(f), &u);
        uint64_t estimate = ds4_session_bytes_estimate(e, N);
        CHECK_MSG(u.peak > 0 && u.peak <= estimate, "device memory peak %llu bytes, estimate %llu",
                  (unsigned long long)u.peak, (unsigned long long)estimate);
    }
}

void mc_outcome_free(mc_outcome *o)
{
    free(o->snap);
    o->snap = NULL;
}

double mc_worst_rel(const float *got, const float *ref, int rows, int n, int *worst_row)
{
    fwd_stats st;
    fwd_compare(got, ref, (size_t)rows, n, 0, &st);
    *worst_row = st.worst_pos;
    return st.max;
}

double mc_max_abs(const float *got, const float *ref, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= m)) m = d; /* NaN wins */
    }
    return m;
}

void mc_resume_on(ds4_engine *e, const mc_plan *p, const mc_outcome *from, const float *ref_steps, int steps,
                  double tol, const char *what)
{
    int V = e->n_vocab;
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, (int)p->ids->n, &err);
    CHECK(s != NULL);
    CHECK_MSG(ds4_session_restore(s, from->snap, from->snap_len, &err) == 0, "%s: %s", what, err.msg);
    CHECK_EQ_INT(ds4_session_n_tokens(s), p->prefill);
    for (int i = 0; i < steps; i++) {
        CHECK_EQ_INT(ds4_session_eval(s, p->ids->ids[p->prefill + i], NULL, &err), DS4_OK);
        int row;
        double rel = mc_worst_rel(ds4_session_logits(s), ref_steps + (size_t)i * (size_t)V, 1, V, &row);
        CHECK_MSG(rel <= tol, "%s: rel %.3g at position %d", what, rel, p->prefill + i);
    }
    ds4_session_close(s);
}

static void check_decisions(const ds4_hparams *hp, const mc_plan *p, const mc_record *a, const mc_record *b,
                            mc_diff *d)
{
    const int N = (int)p->ids->n;
    int exp_diff = 0, sel_diff = 0, ranked = 0;
    size_t cells = (size_t)N * (size_t)hp->n_layer;
    for (size_t c = 0; c < cells; c++) {
        CHECK(a->has_experts[c] && b->has_experts[c]);
        if (memcmp(a->experts + c * (size_t)a->k, b->experts + c * (size_t)a->k, (size_t)a->k * 4)) {
            if (exp_diff++ < 5)
                fprintf(stderr, "experts differ at position %zu layer %zu\n", c / (size_t)hp->n_layer,
                        c % (size_t)hp->n_layer);
        }
        CHECK_EQ_INT(a->has_sel[c], b->has_sel[c]);
        if (!a->has_sel[c]) continue;
        ranked++;
        if (memcmp(a->sel + c * (size_t)a->top_k, b->sel + c * (size_t)a->top_k, (size_t)a->top_k * 4)) {
            if (sel_diff++ < 5)
                fprintf(stderr, "indexer selections differ at position %zu layer %zu\n", c / (size_t)hp->n_layer,
                        c % (size_t)hp->n_layer);
        }
    }
    CHECK_EQ_INT(exp_diff, 0);
    CHECK_EQ_INT(sel_diff, 0);
    /* the fixture keeps more compressed rows than top-k: by the decode
     * steps every ratio-4 layer ranks (in a prefill chunk the rows before
     * the first ranking position are reported too, −1 padded) */
    int want_comp_128 = 0, ratio4 = 0, ranked_decode = 0, comp_128 = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        if (hp->compress_ratio[l] == 4) ratio4++;
        if (hp->compress_ratio[l] == 128) want_comp_128 += N / 128, comp_128 += a->comp_rows[l];
        CHECK_EQ_INT(a->comp_rows[l], b->comp_rows[l]);
        for (int i = p->prefill; i < N; i++)
            ranked_decode += hp->compress_ratio[l] == 4 && a->has_sel[(size_t)i * (size_t)hp->n_layer + (size_t)l];
    }
    CHECK(ratio4 > 0 && 4 * (hp->indexer_top_k + 1) <= p->prefill);
    CHECK_MSG(ranked_decode == ratio4 * (N - p->prefill), "the indexer ranked at %d of %d decode cells", ranked_decode,
              ratio4 * (N - p->prefill));
    CHECK_MSG(want_comp_128 > 0 && comp_128 == want_comp_128, "ratio-128 rows %d, expected %d", comp_128, want_comp_128);
    d->ranked = ranked;
}

void mc_check_agree(const ds4_hparams *hp, const mc_plan *p, const mc_outcome *ref, const mc_outcome *got, double tol,
                    mc_diff *d)
{
    const int N = (int)p->ids->n, V = hp->n_vocab, nc = mc_n_chunks(p);
    int row;
    d->rel_chunk = mc_worst_rel(got->chunk_logits, ref->chunk_logits, nc, V, &row);
    CHECK_MSG(d->rel_chunk <= tol, "prefill logits: rel %.3g after chunk %d", d->rel_chunk, row);
    d->rel_step = mc_worst_rel(got->step_logits, ref->step_logits, N - p->prefill, V, &row);
    CHECK_MSG(d->rel_step <= tol, "decode logits: rel %.3g at position %d", d->rel_step, p->prefill + row);
    for (int i = 0; i < N; i++)
        CHECK_MSG(ref->rec.has_hidden[i] && got->rec.has_hidden[i], "no state at position %d", i);
    d->rel_hidden = mc_worst_rel(got->rec.hidden, ref->rec.hidden, N, ref->rec.hc_dim, &row);
    CHECK_MSG(d->rel_hidden <= tol, "last layer's streams: rel %.3g at position %d", d->rel_hidden, row);
    double ac = mc_max_abs(got->chunk_logits, ref->chunk_logits, (size_t)nc * (size_t)V);
    double as = mc_max_abs(got->step_logits, ref->step_logits, (size_t)(N - p->prefill) * (size_t)V);
    d->abs_logits = ac > as ? ac : as;
    check_decisions(hp, p, &ref->rec, &got->rec, d);
    fprintf(stderr, "rel: prefill logits %.3g, decode logits %.3g, last layer's streams %.3g; max |dlogit| %.3g; "
                    "%d ranked selections compared\n",
            d->rel_chunk, d->rel_step, d->rel_hidden, d->abs_logits, d->ranked);
}

void mc_spec_other_shape(mk_spec *s)
{
    mk_spec_tiny(s);
    s->n_layer = 4;
    s->n_embd = 512;
    s->n_head = 4;
    s->head_dim = 256;
    s->q_lora = 128;
    s->o_lora = 64;
    s->n_out_group = 2;
    s->n_expert = 8;
    s->n_expert_used = 3;
    s->n_hash_layer = 1;
    s->n_swa = 32;
    s->n_indexer_head = 2;
    s->indexer_head_dim = 64;
    s->indexer_top_k = 5;
    s->n_hc = 2;
    int ratios[] = { 4, 128, 0, 4 };
    memcpy(s->ratios, ratios, sizeof ratios);
    mk_set_quant(s, "q4");
    s->seed = 5;
}
