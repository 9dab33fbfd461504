/* test_batch.c — one decode step of several sessions (ds4_sessions_eval):
 * each member's logits equal its own solo run at every position — on the
 * CPU to the bit, on OpenCL within the tight tier — with members at
 * different positions (raw windows wrapped, the indexer ranking, a
 * ratio-128 window closing), a member joining after a prefill between
 * steps and one leaving; a cancelled step leaves every member as it was;
 * a snapshot of a member restores into a fresh session that goes on
 * alone; the one-by-one fallback is all or nothing too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/testkit/mkmodel.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

#define N_CTX 256
#define MAX_MEMBERS 4

/* The golden tiny shape written to `file` (one file per engine: a file
 * an engine maps is never rewritten). */
static ds4_engine *open_tiny_placed(ds4_backend b, ds4_quant_sim qs, const char *file, int host_expert_layers,
                                    const char *device)
{
    fwd_require_backend(b);
    mk_spec s;
    mk_spec_tiny(&s);
    const char *path = test_tmp_path("%s", file);
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&s, path, NULL, NULL, &err) == 0, "%s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = b, .threads = 2, .quant_sim = qs,
                             .host_expert_layers = host_expert_layers, .device = device };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

static ds4_engine *open_tiny_at(ds4_backend b, ds4_quant_sim qs, const char *file)
{
    return open_tiny_placed(b, qs, file, 0, NULL);
}

static ds4_engine *open_tiny(ds4_backend b, ds4_quant_sim qs) { return open_tiny_at(b, qs, "tiny.gguf"); }

static ds4_session *open_session(ds4_engine *e)
{
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, N_CTX, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

/* Member m's token at position p: a fixed pseudo-random stream. */
static int32_t tok(int m, size_t p, int nv)
{
    uint32_t x = (uint32_t)(m + 1) * 2654435761u ^ (uint32_t)(p + 7) * 40503u;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (int32_t)(x % (uint32_t)nv);
}

/* A batched session and its twin stepped alone on the same engine. */
typedef struct {
    ds4_session *b, *solo;
} member;

static void prefill(ds4_engine *e, member *m, int idx, size_t n)
{
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    int32_t *ids = test_alloc((n ? n : 1) * sizeof *ids);
    for (size_t p = 0; p < n; p++) ids[p] = tok(idx, p, nv);
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_sync(m->b, ids, n, NULL, &err) == DS4_OK, "%s", err.msg);
    CHECK_MSG(ds4_session_sync(m->solo, ids, n, NULL, &err) == DS4_OK, "%s", err.msg);
}

/* rel = max|Δ|/max|solo|; 0 demands equal bits. */
static void same_logits(const float *batched, const float *solo, int nv, double rel, int m, size_t pos)
{
    CHECK_MSG(batched && solo, "member %d at %zu has no logits", m, pos);
    if (rel == 0) {
        if (memcmp(batched, solo, (size_t)nv * sizeof *solo) == 0) return;
        for (int i = 0; i < nv; i++)
            CHECK_MSG(batched[i] == solo[i], "member %d at position %zu: logit %d is %.9g batched, %.9g alone", m, pos,
                      i, batched[i], solo[i]);
    }
    double dmax = 0, ref = 0;
    for (int i = 0; i < nv; i++) {
        double d = fabs((double)batched[i] - solo[i]);
        if (d > dmax) dmax = d;
        if (fabs(solo[i]) > ref) ref = fabs(solo[i]);
    }
    CHECK_MSG(dmax <= rel * ref, "member %d at position %zu: rel %.3g (max |logit| %.3g)", m, pos, dmax / ref, ref);
}

/* One step of the members listed in on[0..k), batched, and of their
 * twins alone; their logits then agree. */
static void step(ds4_engine *e, member *ms, const int *on, int k, double rel)
{
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *bs[MAX_MEMBERS];
    int32_t ids[MAX_MEMBERS];
    ds4_error err = { "" };
    for (int i = 0; i < k; i++) {
        member *m = &ms[on[i]];
        bs[i] = m->b;
        ids[i] = tok(on[i], ds4_session_n_tokens(m->b), nv);
        CHECK_MSG(ds4_session_eval(m->solo, ids[i], NULL, &err) == DS4_OK, "%s", err.msg);
    }
    CHECK_MSG(ds4_sessions_eval(bs, ids, k, NULL, &err) == DS4_OK, "%s", err.msg);
    for (int i = 0; i < k; i++) {
        member *m = &ms[on[i]];
        CHECK_EQ_INT((long)ds4_session_n_tokens(m->b), (long)ds4_session_n_tokens(m->solo));
        same_logits(ds4_session_logits(m->b), ds4_session_logits(m->solo), nv, rel, on[i],
                    ds4_session_n_tokens(m->b) - 1);
    }
}

/* Members at 0, 37 (the indexer already ranks: top-8 of ratio-4 rows),
 * 121 (a ratio-128 window closes during the run) and, from step 6, one
 * prefilled between steps; member 1 leaves after step 13. */
static void members_agree_with_solo_runs(ds4_backend b, ds4_quant_sim qs, double rel, int host_expert_layers,
                                         const char *device)
{
    ds4_engine *e = open_tiny_placed(b, qs, "tiny.gguf", host_expert_layers, device);
    ds4_placement pl;
    if (host_expert_layers > 0 || device) CHECK(ds4_engine_placement(e, &pl) == 0);
    if (host_expert_layers > 0) CHECK_EQ_INT(pl.host_expert_layers, host_expert_layers);
    if (device) CHECK_EQ_INT(pl.n_devices, 2);
    member ms[MAX_MEMBERS];
    for (int i = 0; i < MAX_MEMBERS; i++) ms[i] = (member){ open_session(e), open_session(e) };
    prefill(e, &ms[1], 1, 37);
    prefill(e, &ms[2], 2, 121);
    uint64_t batched0 = fwd_batched_steps(fwd_of(e));
    int steps = 0;
    for (int t = 0; t < 20; t++) {
        if (t == 6) prefill(e, &ms[3], 3, 20);
        int on[MAX_MEMBERS], k = 0;
        on[k++] = 0;
        if (t < 14) on[k++] = 1;
        on[k++] = 2;
        if (t >= 6) on[k++] = 3;
        step(e, ms, on, k, rel);
        steps++;
    }
    /* the steps went through the layers together, not one by one */
    CHECK_EQ_INT((long)(fwd_batched_steps(fwd_of(e)) - batched0), (long)steps);
    CHECK_EQ_INT((long)ds4_session_n_tokens(ms[2].b), 141);
    for (int i = 0; i < MAX_MEMBERS; i++) {
        ds4_session_close(ms[i].b);
        ds4_session_close(ms[i].solo);
    }
    ds4_engine_close(e);
}

TEST(batch, members_equal_their_solo_runs_bit_for_bit_release_numerics)
{
    members_agree_with_solo_runs(DS4_BACKEND_CPU, DS4_QSIM_FULL, 0, 0, NULL);
}

TEST(batch, members_equal_their_solo_runs_bit_for_bit_without_simulations)
{
    members_agree_with_solo_runs(DS4_BACKEND_CPU, DS4_QSIM_NONE, 0, 0, NULL);
}

TEST(batch, members_agree_with_their_solo_runs_on_opencl)
{
    members_agree_with_solo_runs(DS4_BACKEND_OPENCL, DS4_QSIM_FULL, 2e-3, DS4_EXPERTS_ON_DEVICE, NULL);
}

/* The routed experts of the first layers in host memory: each layer's
 * rows are handed to the CPU and back within the one step. */
TEST(batch, members_agree_with_their_solo_runs_on_opencl_with_experts_on_the_host)
{
    members_agree_with_solo_runs(DS4_BACKEND_OPENCL, DS4_QSIM_FULL, 2e-3, 3, NULL);
}

/* The layers split over two devices (PoCL gives two with POCL_DEVICES):
 * the step's rows go from one device's layers to the next's. */
TEST(batch, members_agree_with_their_solo_runs_with_the_layers_over_two_devices)
{
    fwd_require_two_opencl_devices();
    members_agree_with_solo_runs(DS4_BACKEND_OPENCL, DS4_QSIM_FULL, 2e-3, DS4_EXPERTS_ON_DEVICE, "0,1");
}

/* Says stop at its `at`-th poll. */
typedef struct {
    int calls, at;
} canceller;

static bool cancel_at(void *ud)
{
    canceller *c = ud;
    return ++c->calls == c->at;
}

/* A step cancelled at poll `at` leaves every member with the tokens and
 * logits it had; the members then go on as if it never ran. */
static void cancelled_step_changes_nothing(int chunk, int at, bool batched)
{
    ds4_engine *e = open_tiny(DS4_BACKEND_CPU, DS4_QSIM_FULL);
    fwd_set_chunk(fwd_of(e), chunk);
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    member ms[3];
    for (int i = 0; i < 3; i++) {
        ms[i] = (member){ open_session(e), open_session(e) };
        prefill(e, &ms[i], i, (size_t)(5 + 17 * i));
    }
    int on[] = { 0, 1, 2 };
    step(e, ms, on, 3, 0);
    float *before = test_alloc(3 * (size_t)nv * sizeof *before);
    ds4_session *bs[3];
    int32_t ids[3];
    for (int i = 0; i < 3; i++) {
        memcpy(before + (size_t)i * nv, ds4_session_logits(ms[i].b), (size_t)nv * sizeof *before);
        bs[i] = ms[i].b;
        ids[i] = tok(i, ds4_session_n_tokens(ms[i].b), nv);
    }
    size_t n0[3];
    for (int i = 0; i < 3; i++) n0[i] = ds4_session_n_tokens(ms[i].b);
    uint64_t batched0 = fwd_batched_steps(fwd_of(e));
    canceller c = { 0, at };
    ds4_callbacks cb = { .cancel = cancel_at, .ud = &c };
    ds4_error err = { "" };
    CHECK_EQ_INT(ds4_sessions_eval(bs, ids, 3, &cb, &err), DS4_INTERRUPTED);
    CHECK_EQ_INT(c.calls, at);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT((long)ds4_session_n_tokens(ms[i].b), (long)n0[i]);
        same_logits(ds4_session_logits(ms[i].b), before + (size_t)i * nv, nv, 0, i, n0[i]);
    }
    for (int t = 0; t < 6; t++) step(e, ms, on, 3, 0);
    CHECK_EQ_INT((long)(fwd_batched_steps(fwd_of(e)) - batched0), batched ? 6 : 0);
    for (int i = 0; i < 3; i++) {
        ds4_session_close(ms[i].b);
        ds4_session_close(ms[i].solo);
    }
    ds4_engine_close(e);
}

/* Polled before the step, then between its layers. */
TEST(batch, step_cancelled_before_it_starts_changes_nothing) { cancelled_step_changes_nothing(256, 1, true); }
TEST(batch, step_cancelled_between_layers_changes_nothing) { cancelled_step_changes_nothing(256, 4, true); }

/* Chunks of 2 rows cannot hold 3 members: they are stepped one by one,
 * and a cancel while the second is computed takes the first one back. */
TEST(batch, one_by_one_fallback_cancelled_on_the_second_member_changes_nothing)
{
    /* member 0's evaluation polls before its chunk and between its 6
     * layers: poll 8 falls inside member 1's */
    cancelled_step_changes_nothing(2, 8, false);
}

/* A batched member's snapshot, restored into a fresh session, goes on
 * alone exactly as the member's solo twin. */
TEST(batch, snapshot_of_a_member_resumes_alone)
{
    ds4_engine *e = open_tiny(DS4_BACKEND_CPU, DS4_QSIM_FULL);
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    member ms[2] = { { open_session(e), open_session(e) }, { open_session(e), open_session(e) } };
    prefill(e, &ms[0], 0, 30);
    prefill(e, &ms[1], 1, 3);
    int on[] = { 0, 1 };
    for (int t = 0; t < 9; t++) step(e, ms, on, 2, 0);
    void *snap = NULL;
    size_t len = 0;
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_snapshot(ms[0].b, &snap, &len, &err) == 0, "%s", err.msg);
    ds4_session *fresh = open_session(e);
    CHECK_MSG(ds4_session_restore(fresh, snap, len, &err) == 0, "%s", err.msg);
    free(snap);
    CHECK_EQ_INT((long)ds4_session_n_tokens(fresh), 39);
    same_logits(ds4_session_logits(fresh), ds4_session_logits(ms[0].solo), nv, 0, 0, 38);
    for (int t = 0; t < 12; t++) {
        int32_t id = tok(0, ds4_session_n_tokens(fresh), nv);
        CHECK_MSG(ds4_session_eval(fresh, id, NULL, &err) == DS4_OK, "%s", err.msg);
        CHECK_MSG(ds4_session_eval(ms[0].solo, id, NULL, &err) == DS4_OK, "%s", err.msg);
        same_logits(ds4_session_logits(fresh), ds4_session_logits(ms[0].solo), nv, 0, 0,
                    ds4_session_n_tokens(fresh) - 1);
    }
    ds4_session_close(fresh);
    for (int i = 0; i < 2; i++) {
        ds4_session_close(ms[i].b);
        ds4_session_close(ms[i].solo);
    }
    ds4_engine_close(e);
}

/* A step that cannot be taken is refused before anything changes. */
TEST(batch, refused_steps_change_nothing)
{
    ds4_engine *e = open_tiny(DS4_BACKEND_CPU, DS4_QSIM_NONE);
    ds4_engine *other = open_tiny_at(DS4_BACKEND_CPU, DS4_QSIM_NONE, "other.gguf");
    const int nv = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *a = open_session(e), *b = open_session(e), *c = open_session(other);
    ds4_error err = { "" };
    int32_t ids[] = { 5, 6 };
    ds4_session *twice[] = { a, a }, *mixed[] = { a, c }, *ok[] = { a, b };
    CHECK_EQ_INT(ds4_sessions_eval(twice, ids, 2, NULL, &err), DS4_ERROR);
    CHECK_CONTAINS(err.msg, "twice");
    CHECK_EQ_INT(ds4_sessions_eval(mixed, ids, 2, NULL, &err), DS4_ERROR);
    CHECK_CONTAINS(err.msg, "another engine");
    int32_t bad[] = { 5, nv };
    CHECK_EQ_INT(ds4_sessions_eval(ok, bad, 2, NULL, &err), DS4_ERROR);
    CHECK_CONTAINS(err.msg, "outside the vocabulary");
    CHECK_EQ_INT(ds4_sessions_eval(ok, ids, 0, NULL, &err), DS4_ERROR);
    CHECK_EQ_INT((long)ds4_session_n_tokens(a), 0);
    CHECK_EQ_INT((long)ds4_session_n_tokens(b), 0);
    CHECK_MSG(ds4_sessions_eval(ok, ids, 2, NULL, &err) == DS4_OK, "%s", err.msg);
    CHECK_EQ_INT((long)ds4_session_n_tokens(a), 1);
    CHECK_EQ_INT((long)ds4_session_n_tokens(b), 1);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_session_close(c);
    ds4_engine_close(other);
    ds4_engine_close(e);
}

/* Golden A (rounding simulations off) teacher-forced through batched
 * steps: one member from the first token, another prefilled with the
 * first tokens and then stepped beside it at its own positions; both
 * stay at the tight level against the independent reference. */
TEST(batch, golden_a_teacher_forced_through_batched_steps_is_tight)
{
    golden_set g;
    golden_load(&g, "A-f32-nosim", "prefix_logits.f32", false);
    CHECK_EQ_INT(g.n_rows, g.all.n);
    ds4_engine *e = fwd_test_engine(DS4_QSIM_NONE, 2);
    const size_t n = g.all.n, nv = (size_t)g.n_vocab, lag = n / 3;
    float *rows[2] = { test_alloc(n * nv * 4), test_alloc(n * nv * 4) };
    ds4_error err = { "" };
    ds4_session *s[2] = { ds4_session_open(e, (int)n, &err), ds4_session_open(e, (int)n, &err) };
    CHECK(s[0] && s[1]);
    CHECK_EQ_INT(ds4_session_sync(s[1], g.all.ids, lag, NULL, &err), DS4_OK);
    memcpy(rows[1] + (lag - 1) * nv, ds4_session_logits(s[1]), nv * 4);
    uint64_t batched0 = fwd_batched_steps(fwd_of(e));
    for (size_t t = 0; t < n; t++) {
        ds4_session *on[2];
        int32_t ids[2];
        int who[2], k = 0;
        for (int m = 0; m < 2; m++) {
            size_t p = ds4_session_n_tokens(s[m]);
            if (p >= n) continue; /* done: it leaves the batch */
            on[k] = s[m];
            ids[k] = g.all.ids[p];
            who[k++] = m;
        }
        CHECK_MSG(ds4_sessions_eval(on, ids, k, NULL, &err) == DS4_OK, "%s", err.msg);
        for (int i = 0; i < k; i++)
            memcpy(rows[who[i]] + (ds4_session_n_tokens(on[i]) - 1) * nv, ds4_session_logits(on[i]), nv * 4);
    }
    CHECK_EQ_INT((long)(fwd_batched_steps(fwd_of(e)) - batched0), (long)(n - lag));
    for (int m = 0; m < 2; m++) {
        size_t first = m ? lag - 1 : 0;
        fwd_stats st;
        fwd_compare(rows[m] + first * nv, g.ref + first * nv, n - first, g.n_vocab, 1e-3, &st);
        CHECK_MSG(st.max <= 1e-4, "member %d: rel %.3g at row %d", m, st.max, st.worst_pos + (int)first);
        CHECK_EQ_INT(st.argmax_exempt_misses, 0);
    }
    ds4_session_close(s[0]);
    ds4_session_close(s[1]);
    ds4_engine_close(e);
    golden_free(&g);
}
