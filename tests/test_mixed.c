/* test_mixed.c — one forward pass over two backends: the hand-over of a
 * buffer between the CPU backend and OpenCL devices, and whole forward
 * passes whose parts alternate between them (layers, the routed experts,
 * attention and FFN of each layer) on generated models with the rounding
 * simulations off. A mixed pass must give what one backend gives: the
 * logits and the last layer's streams within rel 1e-4 of the CPU-only
 * run at every position, the same experts and indexer selections, and
 * session snapshots that move between it and the CPU backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "cpu/cpu_ops.h"
#include "engine/forward.h"
#include "engine/testkit/mkmodel.h"
#include "engine/xbuf.h"
#include "opencl/cl_ops.h"
#include "tests/fwd_util.h"
#include "tests/model_cmp.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

#define REL_TOL 1e-4

/* ---- the hand-over ------------------------------------------------------------ */

static void read_copy(xbuf_set *s, xbuf *b, int i, void *dst)
{
    CHECK_EQ_INT(s->be[i].ops->read(s->be[i].ctx, b->on[i], 0, dst, b->bytes), 0);
}

/* Between the CPU (host memory) and OpenCL both ways, and between two
 * OpenCL contexts (through host staging): the current copy moves, only the
 * bytes named, only when the destination is stale. */
TEST(mixed_backends, handover_moves_the_named_bytes_to_a_stale_copy)
{
    oclt *f = oclt_open(NULL);
    ds4_error err = { "" };
    clo_options co = { .cache_dir = oclt_cache_dir() };
    void *cl2 = clo_new(f->m, &co, &err);
    CHECK_MSG(cl2 != NULL, "second OpenCL context: %s", err.msg);
    xbuf_set s = { .n = 3 };
    s.be[0] = (xbuf_backend){ &clo_ops, f->ctx[OCLT_CL] };
    s.be[1] = (xbuf_backend){ &cpu_ops, f->ctx[OCLT_CPU] };
    s.be[2] = (xbuf_backend){ &clo_ops, cl2 };
    enum { BYTES = 4096, ROW = 64 };
    xbuf b;
    CHECK_EQ_INT(xbuf_alloc(&s, &b, XBUF_ON(0) | XBUF_ON(1) | XBUF_ON(2), BYTES, ROW), 0);
    CHECK_EQ_INT(b.valid, 7); /* zero-filled everywhere */
    unsigned char p[BYTES], q[BYTES], got[BYTES], zero[BYTES] = { 0 };
    for (int i = 0; i < BYTES; i++) p[i] = (unsigned char)(i * 7 + 1), q[i] = (unsigned char)(i * 13 + 5);

    /* written on the CPU: three tokens' rows reach OpenCL, nothing else */
    CHECK_EQ_INT(cpu_ops.write(s.be[1].ctx, b.on[1], 0, p, BYTES), 0);
    xbuf_wrote(&b, 1);
    CHECK_EQ_INT(b.valid, XBUF_ON(1));
    CHECK_EQ_INT(xbuf_span(&b, 3), 3 * ROW);
    CHECK_EQ_INT(xbuf_handover(&s, &b, 0, xbuf_span(&b, 3), &err), 0);
    read_copy(&s, &b, 0, got);
    CHECK(memcmp(got, p, 3 * ROW) == 0);
    CHECK(memcmp(got + 3 * ROW, zero, BYTES - 3 * ROW) == 0);
    CHECK_EQ_INT(b.valid, XBUF_ON(0) | XBUF_ON(1));
    CHECK_EQ_INT(s.handovers, 1);
    CHECK_EQ_INT(s.bytes_moved, 3 * ROW);
    /* already current: nothing moves */
    CHECK_EQ_INT(xbuf_handover(&s, &b, 0, BYTES, &err), 0);
    CHECK_EQ_INT(s.handovers, 1);

    /* written on OpenCL: to the other OpenCL context (staged), then to
     * the CPU (read straight into its host memory) */
    CHECK_EQ_INT(clo_ops.write(s.be[0].ctx, b.on[0], 0, q, BYTES), 0);
    xbuf_wrote(&b, 0);
    CHECK_EQ_INT(xbuf_handover(&s, &b, 2, BYTES, &err), 0);
    read_copy(&s, &b, 2, got);
    CHECK(memcmp(got, q, BYTES) == 0);
    CHECK_EQ_INT(xbuf_handover(&s, &b, 1, BYTES, &err), 0);
    read_copy(&s, &b, 1, got);
    CHECK(memcmp(got, q, BYTES) == 0);
    CHECK_EQ_INT(b.valid, 7);
    CHECK_EQ_INT(s.handovers, 3);
    CHECK_EQ_INT(s.bytes_moved, 3 * ROW + 2 * BYTES);
    memset(got, 0, BYTES);
    CHECK_EQ_INT(xbuf_read(&s, &b, 0, got, BYTES, &err), 0);
    CHECK(memcmp(got, q, BYTES) == 0);

    /* a backend without a copy is an error, not a silent miss */
    xbuf only;
    CHECK_EQ_INT(xbuf_alloc(&s, &only, XBUF_ON(1), 64, 0), 0);
    CHECK_EQ_INT(xbuf_handover(&s, &only, 0, 64, &err), -1);
    CHECK_CONTAINS(err.msg, "no copy on backend 0");

    xbuf_release(&s, &only);
    xbuf_release(&s, &b);
    CHECK(b.on[0] == NULL && !xbuf_present(&b));
    xbuf_set_free(&s);
    clo_free(cl2);
    oclt_close(f);
}

/* ---- whole forward passes ------------------------------------------------------ */

enum { CL = 0, CPU = 1 }; /* backend indexes of the mixed engine */

typedef enum {
    ALTERNATE_LAYERS, /* layer l wholly on CPU when l is odd; embedding on the CPU, head on OpenCL */
    EXPERTS_ON_CPU,   /* the routed experts of every layer on the CPU, the rest on OpenCL */
    EVERY_PART,       /* attention, FFN and experts of each layer alternate */
} layout;

/* An OpenCL engine with the CPU backend added, placed by `how`. */
static ds4_engine *mixed_engine(const char *path, layout how)
{
    ds4_error err = { "" };
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .threads = 2,
                             .quant_sim = DS4_QSIM_NONE };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "OpenCL engine: %s", err.msg);
    fwd_engine *f = fwd_of(e);
    void *cpu = cpu_ops_new(e->model, 2, &err);
    CHECK_MSG(cpu != NULL, "CPU ops: %s", err.msg);
    CHECK_EQ_INT(fwd_add_backend(f, &cpu_ops, cpu, cpu_ops_free, &err), CPU);
    const int nl = e->model->hp.n_layer;
    fwd_layer_place *lp = test_alloc((size_t)nl * sizeof *lp);
    fwd_placement p = { .embed = CL, .head = CL, .layer = lp };
    for (int l = 0; l < nl; l++) {
        uint8_t odd = (uint8_t)(l % 2), even = (uint8_t)(1 - l % 2);
        if (how == ALTERNATE_LAYERS) lp[l] = (fwd_layer_place){ odd, odd, odd };
        else if (how == EXPERTS_ON_CPU) lp[l] = (fwd_layer_place){ CL, CL, CPU };
        else lp[l] = (fwd_layer_place){ odd, even, odd };
    }
    if (how != EXPERTS_ON_CPU) p.embed = CPU;
    CHECK_EQ_INT(fwd_set_placement(f, &p, &err), 0);
    /* a placement naming a backend that is not there is refused */
    lp[0].experts = 2;
    CHECK_EQ_INT(fwd_set_placement(f, &p, &err), -1);
    CHECK_CONTAINS(err.msg, "layer 0");
    return e;
}

static ds4_engine *cpu_engine(const char *path)
{
    ds4_error err = { "" };
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2, .quant_sim = DS4_QSIM_NONE };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "CPU engine: %s", err.msg);
    return e;
}

static const char *write_fixture(const mk_spec *spec)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *path = test_tmp_path("model.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(spec, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    return path;
}

/* Prefill chunks and decode steps on the mixed engine against the CPU
 * alone; snapshots move both ways. */
static void mixed_agrees(const mk_spec *spec, layout how, int n_tokens, int prefill, int chunk, uint32_t ids_seed)
{
    const char *path = write_fixture(spec);
    ds4_engine *cpu = cpu_engine(path), *mix = mixed_engine(path, how);
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)n_tokens, cpu->n_vocab, ids_seed);
    mc_plan p = { &ids, prefill, chunk };
    mc_outcome a, b;
    mc_run(cpu, &p, &a);
    mc_run(mix, &p, &b);
    mc_diff d;
    mc_check_agree(&cpu->model->hp, &p, &a, &b, REL_TOL, &d);
    fwd_handover_stats hs;
    fwd_get_handover_stats(fwd_of(mix), &hs);
    CHECK(hs.count > 0);
    fprintf(stderr, "%llu hand-overs, %llu bytes, %.1f ms\n", (unsigned long long)hs.count,
            (unsigned long long)hs.bytes, hs.ms);

    int steps = n_tokens - prefill < 4 ? n_tokens - prefill : 4;
    mc_resume_on(mix, &p, &a, a.step_logits, steps, REL_TOL, "CPU snapshot on the mixed pass");
    mc_resume_on(cpu, &p, &b, a.step_logits, steps, REL_TOL, "mixed snapshot on the CPU");
    mc_outcome_free(&a);
    mc_outcome_free(&b);
    ds4_tokens_free(&ids);
    ds4_engine_close(mix);
    ds4_engine_close(cpu);
}

/* The golden tiny shape (6 layers: ratios 0, 0, 4, 128, 4, 128), layers
 * alternating between OpenCL and the CPU. */
TEST(mixed_backends, alternating_layers_agree_with_the_cpu)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 11;
    mixed_agrees(&s, ALTERNATE_LAYERS, 320, 250, 50, 3);
}

/* Routed experts on the CPU, everything else on OpenCL, on a shape with
 * Q4_K experts, a hash-routed layer and two streams; a decode step hands
 * over exactly each layer's normed row and routing to the CPU and the
 * experts' sum back. */
TEST(mixed_backends, routed_experts_on_the_cpu_agree_with_the_cpu)
{
    mk_spec s;
    mc_spec_other_shape(&s);
    mixed_agrees(&s, EXPERTS_ON_CPU, 330, 290, 37, 9);

    const char *path = test_tmp_path("model.gguf");
    ds4_engine *mix = mixed_engine(path, EXPERTS_ON_CPU);
    ds4_error err = { "" };
    ds4_session *ses = ds4_session_open(mix, 64, &err);
    CHECK(ses != NULL);
    int32_t ids[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    CHECK_EQ_INT(ds4_session_sync(ses, ids, 7, NULL, &err), DS4_OK);
    fwd_handover_stats before, after;
    fwd_get_handover_stats(fwd_of(mix), &before);
    CHECK_EQ_INT(ds4_session_eval(ses, ids[7], NULL, &err), DS4_OK);
    fwd_get_handover_stats(fwd_of(mix), &after);
    const ds4_hparams *hp = &mix->model->hp;
    uint64_t per_layer = 2 * (uint64_t)hp->n_embd * 4 + 2 * (uint64_t)hp->n_expert_used * 4;
    CHECK_EQ_INT(after.count - before.count, 4 * hp->n_layer);
    CHECK_EQ_INT(after.bytes - before.bytes, per_layer * (uint64_t)hp->n_layer);
    ds4_session_close(ses);
    ds4_engine_close(mix);
}

/* Every part of every layer changes backend (attention, FFN, experts),
 * token by token: the logits at every position against the CPU alone. */
TEST(mixed_backends, every_part_alternating_agrees_at_every_position)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 5;
    const char *path = write_fixture(&s);
    ds4_engine *cpu = cpu_engine(path), *mix = mixed_engine(path, EVERY_PART);
    const int N = 200, V = cpu->n_vocab;
    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)N, V, 4);
    float *ref = test_alloc((size_t)N * (size_t)V * 4), *got = test_alloc((size_t)N * (size_t)V * 4);
    fwd_routing ra, rb;
    fwd_teacher_force(cpu, &ids, ref, &ra);
    fwd_teacher_force(mix, &ids, got, &rb);
    int row;
    double rel = mc_worst_rel(got, ref, N, V, &row);
    double abs = mc_max_abs(got, ref, (size_t)N * (size_t)V);
    fprintf(stderr, "every position: rel %.3g (position %d), max |dlogit| %.3g\n", rel, row, abs);
    CHECK_MSG(rel <= REL_TOL, "logits: rel %.3g at position %d", rel, row);
    size_t cells = (size_t)N * (size_t)ra.n_layer;
    CHECK(memcmp(ra.experts, rb.experts, cells * (size_t)ra.k * 4) == 0);
    CHECK(memcmp(ra.has_sel, rb.has_sel, cells) == 0);
    int ranked = 0;
    for (size_t c = 0; c < cells; c++) {
        if (!ra.has_sel[c]) continue;
        ranked++;
        CHECK_MSG(memcmp(ra.sel + c * (size_t)ra.top_k, rb.sel + c * (size_t)ra.top_k, (size_t)ra.top_k * 4) == 0,
                  "indexer selections differ at position %zu layer %zu", c / (size_t)ra.n_layer,
                  c % (size_t)ra.n_layer);
    }
    CHECK(ranked > 0);
    ds4_tokens_free(&ids);
    ds4_engine_close(mix);
    ds4_engine_close(cpu);
}
