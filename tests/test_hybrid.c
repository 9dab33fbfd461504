/* test_hybrid.c — the placement plan and the hybrid forward pass: routed
 * experts in host memory computed by the CPU, everything else on an
 * OpenCL device (PoCL here). The plan must pick the fewest host layers
 * that fit a device budget, refuse with numbers what cannot fit, and the
 * device must then allocate within the budget and near the estimate. A
 * hybrid pass must give what the device alone and the CPU alone give: the
 * logits within rel 1e-3 at every position (the rounding simulations
 * off; the flash-width shape runs hybrid in tests/test_opencl_model.c),
 * the same experts and indexer selections, snapshots that move
 * between all three; and a device that fails mid-turn is an error that
 * leaves the saved session whole. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/plan.h"
#include "engine/testkit/mkmodel.h"
#include "opencl/cl_ops.h"
#include "tests/agent_util.h"
#include "tests/fwd_util.h"
#include "tests/model_cmp.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

#define REL_TOL 1e-3

static const char *fixture(const mk_spec *spec, const char *name)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *path = test_tmp_path(name);
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(spec, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    return path;
}

static ds4_engine *open_on(const char *path, ds4_backend b, int host_layers, uint64_t memory, int plan_ctx, bool plan_only,
                           ds4_error *err)
{
    ds4_engine_options o = { .model_path = path, .backend = b, .threads = 2, .quant_sim = DS4_QSIM_NONE,
                             .host_expert_layers = host_layers, .plan_ctx = plan_ctx, .device_memory = memory,
                             .plan_only = plan_only };
    return ds4_engine_open(&o, err);
}

static ds4_engine *must_open(const char *path, ds4_backend b, int host_layers, uint64_t memory, int plan_ctx)
{
    ds4_error err = { "" };
    ds4_engine *e = open_on(path, b, host_layers, memory, plan_ctx, false, &err);
    CHECK_MSG(e != NULL, "engine (host layers %d, memory %llu): %s", host_layers, (unsigned long long)memory, err.msg);
    return e;
}

static ds4_placement plan_of(const char *path, int host_layers, uint64_t memory, int plan_ctx)
{
    ds4_error err = { "" };
    ds4_engine *e = open_on(path, DS4_BACKEND_OPENCL, host_layers, memory, plan_ctx, true, &err);
    CHECK_MSG(e != NULL, "planning engine: %s", err.msg);
    ds4_placement p;
    CHECK_EQ_INT(ds4_engine_placement(e, &p), 0);
    ds4_engine_close(e);
    return p;
}

/* The device memory whose budget (memory less 1/16) is exactly `need`. */
static uint64_t memory_for(uint64_t need)
{
    uint64_t m = need + need / 15;
    while (m - ds4_memory_reserve(m) < need) m++;
    while (m > 0 && m - 1 - ds4_memory_reserve(m - 1) >= need) m--;
    return m;
}

/* A device budget that holds the model with the routed experts of its
 * first `host` layers in host memory, and not one layer's experts more. */
static uint64_t budget_for(const char *path, int host, int plan_ctx)
{
    ds4_placement p = plan_of(path, host, 1ull << 40, plan_ctx);
    CHECK_EQ_INT(p.host_expert_layers, host);
    return memory_for(p.device_weights + p.device_session);
}

/* ---- the plan ---------------------------------------------------------------- */

TEST(hybrid, the_plan_takes_the_fewest_host_layers_that_fit)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 3;
    const char *path = fixture(&s, "plan.gguf");
    enum { CTX = 512 };

    /* plenty of memory: everything on the device, weights copied there */
    ds4_placement all = plan_of(path, 0, 1ull << 40, CTX);
    CHECK_EQ_INT(all.host_expert_layers, 0);
    CHECK(!all.embed_on_host && all.fits && !all.shares_host_memory);
    CHECK_EQ_INT(all.host_weights, 0);
    CHECK_EQ_INT(all.token_host_bytes, 0);

    /* a budget for three host layers gets exactly three */
    uint64_t mem = budget_for(path, 3, CTX);
    ds4_placement p = plan_of(path, 0, mem, CTX);
    CHECK_EQ_INT(p.host_expert_layers, 3);
    CHECK(p.fits && p.embed_on_host);
    CHECK(p.device_weights + p.device_session <= p.device_budget);
    CHECK_EQ_INT(p.device_budget, mem - ds4_memory_reserve(mem));
    /* what left the device is what the host holds, and per token the
     * host serves 6 of 16 experts of three layers plus an embedding row */
    ds4_error err = { "" };
    ds4_engine *cpu = open_on(path, DS4_BACKEND_CPU, 0, 0, 0, false, &err);
    CHECK(cpu != NULL);
    const ds4_model *m = cpu->model;
    uint64_t exp3 = 0;
    for (int l = 0; l < 3; l++) exp3 += plan_part_bytes(m, PLAN_EXPERTS, l);
    uint64_t embed = plan_part_bytes(m, PLAN_EMBED, 0);
    CHECK_EQ_INT(p.host_weights, exp3 + embed);
    CHECK_EQ_INT(p.device_weights + p.host_weights, all.device_weights);
    uint64_t host_token = (uint64_t)((double)exp3 * m->hp.n_expert_used / m->hp.n_expert) + embed / (uint64_t)m->hp.n_vocab;
    CHECK_EQ_INT(p.token_host_bytes, host_token);
    CHECK(p.largest_ctx >= CTX && p.largest_ctx_all_host >= p.largest_ctx);
    ds4_engine_close(cpu);

    /* overrides: a number the budget cannot take is refused, naming one
     * that fits; every layer's is honoured; all on the device refused */
    ds4_placement two = plan_of(path, 2, mem, CTX);
    CHECK(!two.fits);
    CHECK_CONTAINS(two.refusal, "--n-cpu-moe 3");
    CHECK(open_on(path, DS4_BACKEND_OPENCL, 2, mem, CTX, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, "first 2 layers");
    ds4_placement every = plan_of(path, INT_MAX, mem, CTX);
    CHECK(every.fits);
    CHECK_EQ_INT(every.host_expert_layers, s.n_layer);
    ds4_placement none = plan_of(path, DS4_EXPERTS_ON_DEVICE, mem, CTX);
    CHECK(!none.fits);
    CHECK_CONTAINS(none.refusal, "automatic");

    /* a device too small for the dense part at this context: the numbers
     * and the largest context that does fit; and one too small for any */
    ds4_placement at64 = plan_of(path, INT_MAX, 1ull << 40, 64);
    uint64_t tight = memory_for(at64.device_weights + at64.device_session);
    ds4_placement big = plan_of(path, 0, tight, 100000);
    CHECK(!big.fits);
    CHECK(big.largest_ctx_all_host >= 64 && big.largest_ctx_all_host < 100000);
    char want[64];
    snprintf(want, sizeof want, "--ctx %d", big.largest_ctx_all_host);
    CHECK_CONTAINS(big.refusal, want);
    CHECK_CONTAINS(big.refusal, "usable");
    CHECK(open_on(path, DS4_BACKEND_OPENCL, 0, tight, 100000, false, &err) == NULL);
    CHECK_CONTAINS(err.msg, want);
    ds4_placement tiny = plan_of(path, 0, 64 << 10, 64);
    CHECK(!tiny.fits);
    CHECK_CONTAINS(tiny.refusal, "no context fits");
}

/* The device holds what the plan said, within the budget: weights, the
 * session's buffers and the scratch of a full prefill chunk and decode. */
TEST(hybrid, the_device_allocates_within_the_budget_and_the_estimate)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 4;
    const char *path = fixture(&s, "budget.gguf");
    enum { CTX = 1100 };
    uint64_t mem = budget_for(path, 2, CTX);
    ds4_engine *e = must_open(path, DS4_BACKEND_OPENCL, 0, mem, CTX);
    ds4_placement p;
    CHECK_EQ_INT(ds4_engine_placement(e, &p), 0);
    CHECK_EQ_INT(p.host_expert_layers, 2);
    ds4_error err = { "" };
    ds4_session *ses = ds4_session_open(e, CTX, &err);
    CHECK_MSG(ses != NULL, "%s", err.msg);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, CTX - 8, e->n_vocab, 5);
    CHECK_EQ_INT(ds4_session_sync(ses, ids.ids, ids.n, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_eval(ses, 7, NULL, &err), DS4_OK);
    void *cl = fwd_ops_ctx(fwd_of(e));
    clo_weight_info w;
    clo_device_use u;
    clo_weights(cl, &w);
    clo_device_usage(cl, &u);
    uint64_t used = w.uploaded + u.peak, planned = p.device_weights + p.device_session;
    fprintf(stderr, "device: %llu weights + %llu peak = %llu of a %llu budget; planned %llu\n",
            (unsigned long long)w.uploaded, (unsigned long long)u.peak, (unsigned long long)used,
            (unsigned long long)p.device_budget, (unsigned long long)planned);
    CHECK_EQ_INT(w.uploaded, p.device_weights);
    CHECK(used <= p.device_budget);
    CHECK_MSG(used * 100 >= planned * 95 && used <= planned, "used %llu, planned %llu", (unsigned long long)used,
              (unsigned long long)planned);
    ds4_session_close(ses);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
}

/* ---- the hybrid pass ----------------------------------------------------------- */

static void same_choices(const fwd_routing *a, const fwd_routing *b, int n)
{
    size_t cells = (size_t)n * (size_t)a->n_layer;
    CHECK(memcmp(a->experts, b->experts, cells * (size_t)a->k * 4) == 0);
    CHECK(memcmp(a->has_sel, b->has_sel, cells) == 0);
    for (size_t c = 0; c < cells; c++)
        if (a->has_sel[c])
            CHECK_MSG(memcmp(a->sel + c * (size_t)a->top_k, b->sel + c * (size_t)a->top_k, (size_t)a->top_k * 4) == 0,
                      "indexer selections differ at position %zu layer %zu", c / (size_t)a->n_layer,
                      c % (size_t)a->n_layer);
}

/* Teacher-forced logits at every position of n tokens on the CPU, on the
 * device alone, and on hybrid placements (host layer counts, 0 = the plan
 * for a budget that takes `auto_host` layers). */
static void placements_agree(const mk_spec *spec, int n, const int *hosts, int n_hosts, int auto_host)
{
    const char *path = fixture(spec, "agree.gguf");
    ds4_engine *cpu = must_open(path, DS4_BACKEND_CPU, 0, 0, 0);
    const int V = cpu->n_vocab;
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)n, V, (uint32_t)spec->seed + 1);
    float *ref = test_alloc((size_t)n * (size_t)V * 4), *got = test_alloc((size_t)n * (size_t)V * 4);
    fwd_routing rr, rg;
    fwd_teacher_force(cpu, &ids, ref, &rr);
    ds4_engine_close(cpu);
    for (int i = 0; i <= n_hosts; i++) {
        int host = i < n_hosts ? hosts[i] : 0;
        uint64_t mem = i < n_hosts ? 0 : budget_for(path, auto_host, n + 8);
        ds4_engine *e = must_open(path, DS4_BACKEND_OPENCL, host, mem, n + 8);
        ds4_placement p;
        CHECK_EQ_INT(ds4_engine_placement(e, &p), 0);
        int want = i < n_hosts ? (host == DS4_EXPERTS_ON_DEVICE ? 0 : host < spec->n_layer ? host : spec->n_layer)
                               : auto_host;
        CHECK_EQ_INT(p.host_expert_layers, want);
        fwd_teacher_force(e, &ids, got, &rg);
        int row;
        double rel = mc_worst_rel(got, ref, n, V, &row);
        fprintf(stderr, "%d host layers: rel %.3g (position %d)\n", want, rel, row);
        CHECK_MSG(rel <= REL_TOL, "%d host layers: rel %.3g at position %d", want, rel, row);
        same_choices(&rr, &rg, n);
        ds4_engine_close(e);
    }
    ds4_tokens_free(&ids);
}

TEST(hybrid, placements_agree_with_the_device_and_the_cpu_at_every_position)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 11;
    const int hosts[] = { DS4_EXPERTS_ON_DEVICE, INT_MAX, 2 };
    placements_agree(&s, 320, hosts, 3, 4);
}

/* Q4_K experts, a hash-routed layer, two streams. */
TEST(hybrid, another_shape_agrees_at_every_position)
{
    mk_spec s;
    mc_spec_other_shape(&s);
    s.seed = 21;
    const int hosts[] = { 1 };
    placements_agree(&s, 310, hosts, 1, 2);
}

/* Prefill chunks and decode on a hybrid engine; snapshots move between
 * it, the device alone and the CPU. */
TEST(hybrid, snapshots_move_between_hybrid_device_and_cpu)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 8;
    const char *path = fixture(&s, "snap.gguf");
    ds4_engine *cpu = must_open(path, DS4_BACKEND_CPU, 0, 0, 0);
    ds4_engine *hy = must_open(path, DS4_BACKEND_OPENCL, 3, 0, 0);
    ds4_engine *dev = must_open(path, DS4_BACKEND_OPENCL, DS4_EXPERTS_ON_DEVICE, 0, 0);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 330, cpu->n_vocab, 17);
    mc_plan p = { &ids, 290, 64 };
    mc_outcome a, b;
    mc_run(cpu, &p, &a);
    mc_run(hy, &p, &b);
    mc_diff d;
    mc_check_agree(&cpu->model->hp, &p, &a, &b, REL_TOL, &d);
    mc_resume_on(hy, &p, &a, a.step_logits, 4, REL_TOL, "CPU snapshot on the hybrid pass");
    mc_resume_on(cpu, &p, &b, a.step_logits, 4, REL_TOL, "hybrid snapshot on the CPU");
    mc_resume_on(dev, &p, &b, a.step_logits, 4, REL_TOL, "hybrid snapshot on the device alone");
    fwd_handover_stats hs;
    fwd_get_handover_stats(fwd_of(hy), &hs);
    CHECK(hs.count > 0 && hs.experts_ms > 0);
    mc_outcome_free(&a);
    mc_outcome_free(&b);
    ds4_tokens_free(&ids);
    ds4_engine_close(dev);
    ds4_engine_close(hy);
    ds4_engine_close(cpu);
}

/* Prefill chunks of at least stream_experts tokens compute the host's
 * experts on the device, each layer's weights copied there for it: the
 * same numbers as the CPU (chunks streamed, decode steps on the host), and
 * the plan keeps room for one layer's experts, within the budget. */
TEST(hybrid, streamed_experts_agree_and_fit_the_budget)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 12;
    const char *path = fixture(&s, "stream.gguf");
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .threads = 2, .quant_sim = DS4_QSIM_NONE,
                             .host_expert_layers = INT_MAX, .stream_experts = 64, .device_memory = 1ull << 40,
                             .plan_ctx = 400 };
    ds4_error err = { "" };
    ds4_engine *hy = ds4_engine_open(&o, &err);
    CHECK_MSG(hy != NULL, "%s", err.msg);
    ds4_placement p;
    CHECK_EQ_INT(ds4_engine_placement(hy, &p), 0);
    uint64_t most = 0;
    for (int l = 0; l < s.n_layer; l++) {
        uint64_t b = plan_part_bytes(hy->model, PLAN_EXPERTS, l);
        if (b > most) most = b;
    }
    CHECK_EQ_INT(p.stream_bytes, most);
    CHECK_EQ_INT(p.stream_experts, 64);

    ds4_engine *cpu = must_open(path, DS4_BACKEND_CPU, 0, 0, 0);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 320, cpu->n_vocab, 23);
    mc_plan mp = { &ids, 300, 100 };
    mc_outcome a, b;
    mc_run(cpu, &mp, &a);
    mc_run(hy, &mp, &b);
    mc_diff d;
    mc_check_agree(&cpu->model->hp, &mp, &a, &b, REL_TOL, &d);
    fwd_handover_stats hs;
    fwd_get_handover_stats(fwd_of(hy), &hs);
    CHECK_MSG(hs.streamed > 0, "no layer was streamed");
    /* what the device holds stays within what the plan said */
    clo_weight_info w;
    clo_device_use u;
    clo_weights(fwd_ops_ctx(fwd_of(hy)), &w);
    clo_device_usage(fwd_ops_ctx(fwd_of(hy)), &u);
    CHECK(w.uploaded + u.peak <= p.device_weights + p.device_session + p.stream_bytes);
    mc_outcome_free(&a);
    mc_outcome_free(&b);
    ds4_tokens_free(&ids);
    ds4_engine_close(cpu);
    ds4_engine_close(hy);

    /* a budget that holds everything but the room for streaming: one
     * more layer's experts go to the host to make that room */
    ds4_placement plain = plan_of(path, 0, budget_for(path, 2, 400), 400);
    CHECK_EQ_INT(plain.host_expert_layers, 2);
    o.host_expert_layers = 0;
    o.plan_only = true;
    o.device_memory = budget_for(path, 2, 400);
    ds4_engine *pe = ds4_engine_open(&o, &err);
    CHECK(pe != NULL);
    ds4_placement sp;
    CHECK_EQ_INT(ds4_engine_placement(pe, &sp), 0);
    CHECK(sp.fits && sp.host_expert_layers > 2 && sp.stream_bytes > 0);
    CHECK(sp.device_weights + sp.device_session + sp.stream_bytes <= sp.device_budget);
    ds4_engine_close(pe);
}

/* ---- a device that fails mid-turn ---------------------------------------------- */

/* In the engine: the evaluation ends with the device's error, and once
 * the device works again the session continues with the right logits. */
TEST(hybrid, a_device_failure_is_an_error_and_the_session_recovers)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 9;
    const char *path = fixture(&s, "fault.gguf");
    ds4_engine *hy = must_open(path, DS4_BACKEND_OPENCL, 3, 0, 0);
    ds4_engine *cpu = must_open(path, DS4_BACKEND_CPU, 0, 0, 0);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, 120, cpu->n_vocab, 3);
    ds4_error err = { "" };
    ds4_session *a = ds4_session_open(cpu, 256, &err), *b = ds4_session_open(hy, 256, &err);
    CHECK(a && b);
    CHECK_EQ_INT(ds4_session_sync(b, ids.ids, 100, NULL, &err), DS4_OK);
    clrt *rt = clo_runtime(fwd_ops_ctx(fwd_of(hy)));
    clrt_fault_from(rt, (int64_t)clrt_get_stats(rt).launches + 5);
    CHECK(ds4_session_sync(b, ids.ids, 120, NULL, &err) != DS4_OK);
    CHECK_CONTAINS(err.msg, "CL_OUT_OF_RESOURCES");
    clrt_fault_from(rt, -1);
    CHECK_EQ_INT(ds4_session_sync(b, ids.ids, 120, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_sync(a, ids.ids, 120, NULL, &err), DS4_OK);
    int row;
    double rel = mc_worst_rel(ds4_session_logits(b), ds4_session_logits(a), 1, cpu->n_vocab, &row);
    CHECK_MSG(rel <= REL_TOL, "after recovery: rel %.3g", rel);
    ds4_session_close(a);
    ds4_session_close(b);
    ds4_tokens_free(&ids);
    ds4_engine_close(cpu);
    ds4_engine_close(hy);
}

/* In the agent: `-p` on a hybrid placement whose device fails ends the
 * turn with the device's error and a failing exit status; the session
 * saved before still holds its turn and resumes. */
TEST(hybrid, a_device_failure_mid_turn_ends_it_and_keeps_the_saved_session)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *model = agent_test_model();
    sessions_test_home();
    char *out;
    const char *common = "--backend opencl --n-cpu-moe 3 --ctx 16384 -n 3 --nothink --session hy";
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' %s -p one 2>&1", test_tmpdir(), test_bindir(), model, common);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    rc = test_runf(&out, "cd '%s' && DS4CL_FAULT_CL_LAUNCH=0 '%s/ds4cl' -m '%s' %s -p two 2>&1", test_tmpdir(),
                   test_bindir(), model, common);
    CHECK_MSG(rc != 0, "a failing device still exited 0: %s", out);
    CHECK_CONTAINS(out, "CL_OUT_OF_RESOURCES");
    check_journal_adds_up("hy");
    const char *users = journal_users("hy");
    CHECK_MSG(!strncmp(users, "one", 3), "journal users: %s", users);
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' %s -p three 2>&1", test_tmpdir(), test_bindir(), model, common);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    check_journal_adds_up("hy");
}
