/* test_stage.c — layer ranges of the forward pass (engine/forward.h,
 * stages), chained in one process: a first stage whose next hook runs a
 * second engine's range computes the full pass's logits, and the two
 * stages' snapshot blocks make the full pass's payload and restore from
 * it. This is what mpi/ builds on, without MPI. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/plan.h"
#include "engine/testkit/mkmodel.h"
#include "opencl/cl_ops.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

typedef struct {
    void *second; /* the second stage's state */
    int calls;
} chain;

static int to_second(void *ud, void *st, const int32_t *tok, const float *S, int64_t pos0, int T, float *last,
                     ds4_error *err)
{
    (void)st;
    chain *c = ud;
    c->calls++;
    return fwd_stage_eval(c->second, tok, S, pos0, T, last, true, NULL, err) == T ? 0 : -1;
}

static ds4_engine *open_tiny(const char *path)
{
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 1, .quant_sim = DS4_QSIM_NONE };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    fwd_set_chunk(fwd_of(e), 4);
    return e;
}

static void *state(ds4_engine *e, int n_ctx)
{
    ds4_error err = { "" };
    void *st = fwd_backend_state_new(e, n_ctx, &err);
    CHECK_MSG(st != NULL, "%s", err.msg);
    return st;
}

static void eval(void *st, const int32_t *ids, size_t pos, size_t n, float *logits)
{
    ds4_error err = { "" };
    CHECK_MSG(fwd_backend_eval(st, ids, pos, n, logits, NULL, &err) == (long)n, "%s", err.msg);
}

static void same(const float *a, const float *b, int n, const char *what)
{
    for (int i = 0; i < n; i++) CHECK_MSG(fabsf(a[i] - b[i]) <= 1e-5f, "%s: logit %d is %g, full %g", what, i, b[i], a[i]);
}

TEST(stage, two_ranges_chained_compute_save_and_restore_the_full_pass)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_TINY;
    const char *path = test_tmp_path("tiny.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine *full = open_tiny(path), *e1 = open_tiny(path), *e2 = open_tiny(path);
    const int n_layer = s.n_layer, cut = 2, n_ctx = 64, nv = ds4_vocab_size(ds4_engine_tokenizer(full));
    CHECK(fwd_set_layers(fwd_of(e1), 0, cut, &err) == 0);
    CHECK(fwd_set_layers(fwd_of(e2), cut, n_layer, &err) == 0);
    CHECK(fwd_set_layers(fwd_of(e2), cut, n_layer + 1, &err) != 0);
    CHECK_CONTAINS(err.msg, "outside the model's");
    /* a range holds state for its own layers only */
    CHECK(fwd_session_buffers_bytes(fwd_of(e1), n_ctx) < fwd_session_buffers_bytes(fwd_of(full), n_ctx));

    void *sf = state(full, n_ctx), *s1 = state(e1, n_ctx), *s2 = state(e2, n_ctx);
    chain c = { s2, 0 };
    fwd_set_next(fwd_of(e1), to_second, &c);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = (i * 37 + 11) % 250 + 1;
    float *lf = test_alloc((size_t)nv * 4), *l1 = test_alloc((size_t)nv * 4);
    /* a prefill of 10 in chunks of 4, then decode steps */
    eval(sf, ids, 0, 10, lf);
    eval(s1, ids, 0, 10, l1);
    same(lf, l1, nv, "prefill");
    CHECK_EQ_INT(c.calls, 3);
    for (int p = 10; p < 16; p++) {
        eval(sf, ids, (size_t)p, 1, lf);
        eval(s1, ids, (size_t)p, 1, l1);
        same(lf, l1, nv, test_printf("decode at %d", p));
    }

    /* the first stage's header and blocks, then the second's blocks: the
     * full payload, byte for byte */
    strbuf pf = { 0 }, p12 = { 0 };
    CHECK(fwd_backend_save(sf, &pf, &err) == 0);
    CHECK(fwd_backend_save(s1, &p12, &err) == 0);
    uint64_t at = fwd_payload_offset(fwd_of(full), false, 16, cut);
    CHECK_EQ_INT(p12.len, at);
    CHECK(fwd_stage_save(s2, &p12, &err) == 0);
    CHECK_EQ_INT(p12.len, pf.len);
    CHECK_EQ_INT(fwd_payload_offset(fwd_of(full), false, 16, n_layer), pf.len);
    CHECK(memcmp(pf.s, p12.s, pf.len) == 0);

    /* restored into fresh stages from the full payload, both go on as the
     * full pass does; a slice of the wrong length is refused */
    void *r1 = state(e1, n_ctx), *r2 = state(e2, n_ctx);
    CHECK(fwd_stage_load(r2, pf.s + at, pf.len - at - 1, 16, false, &err) != 0);
    CHECK_CONTAINS(err.msg, "expected");
    CHECK(fwd_backend_load(r1, pf.s, pf.len, 16, &err) == 0);
    CHECK(fwd_stage_load(r2, pf.s + at, pf.len - at, 16, false, &err) == 0);
    c.second = r2;
    for (int p = 16; p < 24; p++) {
        eval(sf, ids, (size_t)p, 1, lf);
        eval(r1, ids, (size_t)p, 1, l1);
        same(lf, l1, nv, test_printf("restored, at %d", p));
    }
    /* a short rewind on both stages, then the same tokens again */
    CHECK(fwd_backend_rewind(sf, 20) == 0 && fwd_backend_rewind(r1, 20) == 0 && fwd_backend_rewind(r2, 20) == 0);
    eval(sf, ids, 20, 4, lf);
    eval(r1, ids, 20, 4, l1);
    same(lf, l1, nv, "after a rewind");

    sb_free(&pf);
    sb_free(&p12);
    fwd_set_next(fwd_of(e1), NULL, NULL);
    fwd_backend_state_free(r1);
    fwd_backend_state_free(r2);
    fwd_backend_state_free(sf);
    fwd_backend_state_free(s1);
    fwd_backend_state_free(s2);
    ds4_engine_close(e2);
    ds4_engine_close(e1);
    ds4_engine_close(full);
}

/* A stage refuses a chunk that does not continue its state. */
TEST(stage, a_stage_refuses_a_chunk_out_of_order)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_TINY;
    const char *path = test_tmp_path("tiny.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine *e = open_tiny(path);
    CHECK(fwd_set_layers(fwd_of(e), 3, s.n_layer, &err) == 0);
    void *st = state(e, 16);
    size_t hc = (size_t)e->model->hp.hc_dim;
    float *S = test_alloc(4 * hc * 4), *out = test_alloc(4 * hc * 4);
    int32_t tok[4] = { 1, 2, 3, 4 };
    CHECK(fwd_stage_eval(st, tok, S, 1, 2, out, false, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "holding 0 tokens");
    CHECK(fwd_stage_eval(st, tok, S, 0, 5, out, false, NULL, &err) == -1);
    CHECK_EQ_INT(fwd_stage_eval(st, tok, S, 0, 4, out, false, NULL, &err), 4);
    for (size_t i = 0; i < 4 * hc; i++) CHECK(isfinite(out[i]));
    fwd_backend_state_free(st);
    ds4_engine_close(e);
}

/* Stages opened with their layer range on an OpenCL device that copies
 * its weights (a budget given): each device receives its own layers'
 * weights only (the first stage also the embedding and the head), and the
 * chained stages still compute the full pass. */
TEST(stage, opencl_stages_hold_only_their_layers)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 6;
    const char *path = test_tmp_path("tiny.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    const int cut = 4, n_ctx = 64;
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .threads = 1,
                             .quant_sim = DS4_QSIM_NONE, .device_memory = 1ull << 40, .plan_ctx = n_ctx };
    ds4_engine *full = ds4_engine_open(&o, &err);
    CHECK_MSG(full != NULL, "%s", err.msg);
    o.layer_first = 0;
    o.layer_end = cut;
    ds4_engine *e1 = ds4_engine_open(&o, &err);
    CHECK_MSG(e1 != NULL, "%s", err.msg);
    o.layer_first = cut;
    o.layer_end = s.n_layer;
    ds4_engine *e2 = ds4_engine_open(&o, &err);
    CHECK_MSG(e2 != NULL, "%s", err.msg);
    const ds4_model *m = full->model;
    uint64_t want1 = plan_part_bytes(m, PLAN_EMBED, 0) + plan_part_bytes(m, PLAN_HEAD, 0), want2 = 0;
    for (int l = 0; l < s.n_layer; l++) {
        uint64_t b = plan_part_bytes(m, PLAN_ATTN, l) + plan_part_bytes(m, PLAN_FFN, l) + plan_part_bytes(m, PLAN_EXPERTS, l);
        if (l < cut) want1 += b;
        else want2 += b;
    }
    clo_weight_info w1, w2, wf;
    clo_weights(fwd_ops_ctx(fwd_of(e1)), &w1);
    clo_weights(fwd_ops_ctx(fwd_of(e2)), &w2);
    clo_weights(fwd_ops_ctx(fwd_of(full)), &wf);
    CHECK_EQ_INT(w1.uploaded, want1);
    CHECK_EQ_INT(w2.uploaded, want2);
    CHECK_EQ_INT(wf.uploaded, want1 + want2);
    ds4_placement p2;
    CHECK_EQ_INT(ds4_engine_placement(e2, &p2), 0);
    CHECK_EQ_INT(p2.device_weights, want2);
    CHECK(!p2.dev[0].head);

    const int nv = ds4_vocab_size(ds4_engine_tokenizer(full));
    void *sf = state(full, n_ctx), *s1 = state(e1, n_ctx), *s2 = state(e2, n_ctx);
    chain c = { s2, 0 };
    fwd_set_next(fwd_of(e1), to_second, &c);
    int32_t ids[24];
    for (int i = 0; i < 24; i++) ids[i] = (i * 53 + 7) % 250 + 1;
    float *lf = test_alloc((size_t)nv * 4), *l1 = test_alloc((size_t)nv * 4);
    eval(sf, ids, 0, 20, lf);
    eval(s1, ids, 0, 20, l1);
    same(lf, l1, nv, "prefill");
    for (int p = 20; p < 24; p++) {
        eval(sf, ids, (size_t)p, 1, lf);
        eval(s1, ids, (size_t)p, 1, l1);
        same(lf, l1, nv, test_printf("decode at %d", p));
    }
    fwd_set_next(fwd_of(e1), NULL, NULL);
    fwd_backend_state_free(sf);
    fwd_backend_state_free(s1);
    fwd_backend_state_free(s2);
    ds4_engine_close(e2);
    ds4_engine_close(e1);
    ds4_engine_close(full);
}

/* The engine hook mpi/ joins the engine through: sessions go through the
 * hook, which calls on to the backend's own members; it comes before the
 * first session and only once. */
static const ds4_session_ops *hooked_base;
static int hooked_evals;

static long hooked_eval(void *st, const int32_t *tokens, size_t pos, size_t n, float *logits, const ds4_callbacks *cb,
                        ds4_error *err)
{
    hooked_evals++;
    return hooked_base->eval(st, tokens, pos, n, logits, cb, err);
}

TEST(stage, an_engine_hook_wraps_the_sessions_before_the_first)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_TINY;
    const char *path = test_tmp_path("tiny.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine *plain = open_tiny(path), *e = open_tiny(path);
    /* a session open: too late for a hook */
    ds4_session *early = ds4_session_open(plain, 32, &err);
    CHECK_MSG(early != NULL, "%s", err.msg);
    ds4_session_ops hook = plain->backend->session;
    hook.eval = hooked_eval;
    const ds4_session_ops *base = NULL;
    CHECK(engine_hook_sessions(plain, &hook, &base, &err) != 0);
    CHECK_CONTAINS(err.msg, "before the first session");
    ds4_session_close(early);

    CHECK_MSG(engine_hook_sessions(e, &hook, &hooked_base, &err) == 0, "%s", err.msg);
    CHECK(hooked_base == &e->backend->session);
    CHECK(engine_hook_sessions(e, &hook, &base, &err) != 0);
    CHECK_CONTAINS(err.msg, "a hook already");
    /* the hooked engine computes what the plain one does, through the hook */
    const int32_t ids[] = { 1, 5, 9, 3, 7 };
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *a = ds4_session_open(plain, 32, &err), *b = ds4_session_open(e, 32, &err);
    CHECK_MSG(a && b, "%s", err.msg);
    CHECK(ds4_session_sync(a, ids, 5, NULL, &err) == DS4_OK);
    CHECK(ds4_session_sync(b, ids, 5, NULL, &err) == DS4_OK);
    CHECK(hooked_evals > 0);
    same(ds4_session_logits(a), ds4_session_logits(b), nv, "hooked");
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_engine_close(plain);
    ds4_engine_close(e);
}

/* The one plan-only entry point: an engine opened to plan opens again to
 * run without reading its file again (here the file is gone by then), and
 * computes what an engine opened to run at once does. */
TEST(stage, a_plan_only_engine_opens_to_run_without_the_file)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.vocab = MK_VOCAB_TINY;
    const char *path = test_tmp_path("tiny.gguf"), *gone = test_tmp_path("gone.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    CHECK_MSG(mk_write_file(&s, gone, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = gone, .backend = DS4_BACKEND_CPU, .threads = 1, .quant_sim = DS4_QSIM_NONE,
                             .plan_only = true };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    CHECK(ds4_session_open(e, 32, &err) == NULL);
    CHECK_CONTAINS(err.msg, "plan memory only");
    CHECK(remove(gone) == 0);
    o.plan_only = false;
    CHECK_MSG(ds4_engine_reopen(e, &o, &err) == 0, "%s", err.msg);
    ds4_engine *ref = open_tiny(path);
    fwd_set_chunk(fwd_of(e), 4);
    const int32_t ids[] = { 2, 4, 6, 8, 10, 12 };
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *a = ds4_session_open(ref, 32, &err), *b = ds4_session_open(e, 32, &err);
    CHECK_MSG(a && b, "%s", err.msg);
    CHECK(ds4_session_sync(a, ids, 6, NULL, &err) == DS4_OK);
    CHECK(ds4_session_sync(b, ids, 6, NULL, &err) == DS4_OK);
    same(ds4_session_logits(a), ds4_session_logits(b), nv, "reopened");
    /* not under an open session */
    CHECK(ds4_engine_reopen(e, &o, &err) != 0);
    CHECK_CONTAINS(err.msg, "open sessions");
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_engine_close(ref);
    ds4_engine_close(e);
}
