/* test_opencl_model.c — the OpenCL backend against the CPU backend on
 * generated models (ds4cl-mkmodel fixtures), both with the rounding
 * simulations off: the same tokens in prefill chunks and then decode
 * steps, long enough (≥ 300 tokens) that raw windows wrap, both compressor
 * kinds emit rows and the indexer ranks (top-k set below the number of
 * compressed rows). Compared at every position: the last layer's residual
 * streams (what the output head reads) and the logits wherever the
 * engine produces them, all within rel 1e-4 (the requirement: 1e-3); the expert sets and indexer
 * selections identical. Session snapshots resume on the other backend,
 * and the OpenCL session's device memory stays within the estimate. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "engine/mkmodel.h"
#include "opencl/cl_ops.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

#define REL_TOL 1e-4 /* the requirement is 1e-3; PoCL stays near 1e-5 */

/* What one traced run saw, per position (and layer). */
typedef struct {
    int n_pos, n_layer, k, top_k, hc_dim;
    float *hidden;    /* [n_pos][hc_dim]: out_hc of the last layer */
    bool *has_hidden;
    int32_t *experts; /* [n_pos][n_layer][k], as reported */
    bool *has_experts;
    int32_t *sel;     /* [n_pos][n_layer][top_k] */
    bool *has_sel;
    int *comp_rows;   /* [n_layer]: compressed rows emitted */
} record;

static void on_trace(void *ud, const char *name, int layer, int64_t pos, const void *data, size_t bytes)
{
    record *r = ud;
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

static void record_init(record *r, const ds4_engine *e, int n_pos)
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

/* The plan of one run: ids[0, prefill) in syncs of `chunk` tokens (one
 * evaluation chunk each), then one token at a time. */
typedef struct {
    const ds4_tokens *ids;
    int prefill, chunk;
} plan;

typedef struct {
    record rec;
    float *chunk_logits;  /* [n_chunks][V]: after each prefill chunk */
    float *step_logits;   /* [n - prefill][V]: after each decode step */
    void *snap;           /* the session after the prefill */
    size_t snap_len;
} outcome;

static int n_chunks(const plan *p) { return (p->prefill + p->chunk - 1) / p->chunk; }

static void run_plan(ds4_engine *e, const plan *p, outcome *out)
{
    int V = e->n_vocab, N = (int)p->ids->n;
    fwd_engine *f = fwd_of(e);
    CHECK(f != NULL);
    record_init(&out->rec, e, N);
    out->chunk_logits = test_alloc((size_t)n_chunks(p) * (size_t)V * 4);
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
    if (e->opt.backend == DS4_BACKEND_OPENCL) {
        /* the device memory it took stayed within what the planner is told */
        cl_ops_device_use u;
        cl_ops_device_usage(fwd_ops_ctx(f), &u);
        uint64_t estimate = ds4_session_bytes_estimate(e, N);
        CHECK_MSG(u.peak > 0 && u.peak <= estimate, "device memory peak %llu bytes, estimate %llu",
                  (unsigned long long)u.peak, (unsigned long long)estimate);
    }
}

/* Worst rel over rows of n floats; -1 when a row is missing on either side. */
static double worst_rel(const float *got, const float *ref, int rows, int n, int *worst_row)
{
    fwd_stats st;
    fwd_compare(got, ref, (size_t)rows, n, 0, &st);
    *worst_row = st.worst_pos;
    return st.max;
}

/* A snapshot taken on one backend resumes on the other: the next tokens'
 * logits agree with the run that never stopped. */
static void resume_on(ds4_engine *e, const plan *p, const outcome *from, const float *ref_steps, int steps,
                      const char *what)
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
        double rel = worst_rel(ds4_session_logits(s), ref_steps + (size_t)i * (size_t)V, 1, V, &row);
        CHECK_MSG(rel <= REL_TOL, "%s: rel %.3g at position %d", what, rel, p->prefill + i);
    }
    ds4_session_close(s);
}

typedef struct {
    int n_tokens, prefill, chunk;
    uint32_t ids_seed;
} run_shape;

static void cpu_and_opencl_agree(const mk_spec *spec, const run_shape *rs)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *path = test_tmp_path("model.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(spec, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 2, .quant_sim = DS4_QSIM_NONE };
    ds4_engine *cpu = ds4_engine_open(&o, &err);
    CHECK_MSG(cpu != NULL, "CPU engine: %s", err.msg);
    o.backend = DS4_BACKEND_OPENCL;
    ds4_engine *ocl = ds4_engine_open(&o, &err);
    CHECK_MSG(ocl != NULL, "OpenCL engine: %s", err.msg);
    const ds4_hparams *hp = &cpu->model->hp;
    int V = cpu->n_vocab, N = rs->n_tokens;

    ds4_tokens ids = { 0 };
    fwd_random_ids(&ids, (size_t)N, V, rs->ids_seed);
    plan p = { &ids, rs->prefill, rs->chunk };
    outcome a, b;
    run_plan(cpu, &p, &a);
    run_plan(ocl, &p, &b);

    int row;
    double rel_chunk = worst_rel(b.chunk_logits, a.chunk_logits, n_chunks(&p), V, &row);
    CHECK_MSG(rel_chunk <= REL_TOL, "prefill logits: rel %.3g after chunk %d", rel_chunk, row);
    double rel_step = worst_rel(b.step_logits, a.step_logits, N - p.prefill, V, &row);
    CHECK_MSG(rel_step <= REL_TOL, "decode logits: rel %.3g at position %d", rel_step, p.prefill + row);
    for (int i = 0; i < N; i++) CHECK_MSG(a.rec.has_hidden[i] && b.rec.has_hidden[i], "no state at position %d", i);
    double rel_hidden = worst_rel(b.rec.hidden, a.rec.hidden, N, a.rec.hc_dim, &row);
    CHECK_MSG(rel_hidden <= REL_TOL, "last layer's streams: rel %.3g at position %d", rel_hidden, row);
    fprintf(stderr, "rel: prefill logits %.3g, decode logits %.3g, last layer's streams %.3g\n", rel_chunk, rel_step,
            rel_hidden);

    /* decisions: identical everywhere, and the indexer really ranked */
    int exp_diff = 0, sel_diff = 0, ranked = 0;
    size_t cells = (size_t)N * (size_t)hp->n_layer;
    for (size_t c = 0; c < cells; c++) {
        CHECK(a.rec.has_experts[c] && b.rec.has_experts[c]);
        if (memcmp(a.rec.experts + c * (size_t)a.rec.k, b.rec.experts + c * (size_t)a.rec.k, (size_t)a.rec.k * 4)) {
            if (exp_diff++ < 5)
                fprintf(stderr, "experts differ at position %zu layer %zu\n", c / (size_t)hp->n_layer,
                        c % (size_t)hp->n_layer);
        }
        CHECK_EQ_INT(a.rec.has_sel[c], b.rec.has_sel[c]);
        if (!a.rec.has_sel[c]) continue;
        ranked++;
        if (memcmp(a.rec.sel + c * (size_t)a.rec.top_k, b.rec.sel + c * (size_t)a.rec.top_k, (size_t)a.rec.top_k * 4)) {
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
    int want_comp_128 = 0, ratio4 = 0, ranked_decode = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        if (hp->compress_ratio[l] == 4) ratio4++;
        if (hp->compress_ratio[l] == 128) want_comp_128 += N / 128;
        CHECK_EQ_INT(a.rec.comp_rows[l], b.rec.comp_rows[l]);
        for (int i = p.prefill; i < N; i++)
            ranked_decode += hp->compress_ratio[l] == 4 && a.rec.has_sel[(size_t)i * (size_t)hp->n_layer + (size_t)l];
    }
    CHECK(ratio4 > 0 && 4 * (hp->indexer_top_k + 1) <= p.prefill);
    CHECK_MSG(ranked_decode == ratio4 * (N - p.prefill), "the indexer ranked at %d of %d decode cells", ranked_decode,
              ratio4 * (N - p.prefill));
    fprintf(stderr, "%d ranked selections compared\n", ranked);
    int comp_128 = 0;
    for (int l = 0; l < hp->n_layer; l++)
        if (hp->compress_ratio[l] == 128) comp_128 += a.rec.comp_rows[l];
    CHECK_MSG(want_comp_128 > 0 && comp_128 == want_comp_128, "ratio-128 rows %d, expected %d", comp_128, want_comp_128);

    /* snapshots: CPU → OpenCL and OpenCL → CPU, against the CPU's steps */
    int steps = N - p.prefill < 4 ? N - p.prefill : 4;
    resume_on(ocl, &p, &a, a.step_logits, steps, "CPU snapshot on OpenCL");
    resume_on(cpu, &p, &b, a.step_logits, steps, "OpenCL snapshot on the CPU");

    free(a.snap);
    free(b.snap);
    ds4_tokens_free(&ids);
    ds4_engine_close(ocl);
    ds4_engine_close(cpu);
}

/* $DS4CL_KERNELS picks the kernel shape on any device; anything but cpu
 * or gpu is refused by name. */
TEST(opencl_model, the_kernel_shape_can_be_chosen)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    mk_spec spec;
    mk_spec_tiny(&spec);
    const char *path = test_tmp_path("model.gguf");
    ds4_error err = { "" };
    CHECK_MSG(mk_write_file(&spec, path, NULL, NULL, &err) == 0, "fixture: %s", err.msg);
    ds4_engine_options o = { .model_path = path, .backend = DS4_BACKEND_OPENCL, .quant_sim = DS4_QSIM_NONE };
    const char *values[] = { "gpu", "cpu" };
    for (int i = 0; i < 2; i++) {
        setenv("DS4CL_KERNELS", values[i], 1);
        ds4_engine *e = ds4_engine_open(&o, &err);
        CHECK_MSG(e != NULL, "DS4CL_KERNELS=%s: %s", values[i], err.msg);
        CHECK_EQ_INT(cl_ops_cpu_shaped(fwd_ops_ctx(fwd_of(e))), i == 1);
        ds4_engine_close(e);
    }
    setenv("DS4CL_KERNELS", "fast", 1);
    CHECK(ds4_engine_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "DS4CL_KERNELS=fast: expected cpu or gpu");
}

/* The tiny shape with the GPU-shaped kernels, built as for a GPU. */
TEST(opencl_model, tiny_shape_with_gpu_kernels_agrees_with_the_cpu)
{
    setenv("DS4CL_KERNELS", "gpu", 1);
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 5;
    run_shape rs = { .n_tokens = 310, .prefill = 240, .chunk = 64, .ids_seed = 4 };
    cpu_and_opencl_agree(&s, &rs);
}

/* The golden tiny shape (6 layers: ratios 0, 0, 4, 128, 4, 128; window
 * 16; indexer top-8). */
TEST(opencl_model, tiny_shape_agrees_with_the_cpu)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.seed = 11;
    run_shape rs = { .n_tokens = 320, .prefill = 250, .chunk = 50, .ids_seed = 3 };
    cpu_and_opencl_agree(&s, &rs);
}

/* Another shape and seed: wider embedding, fewer and narrower heads, two
 * output groups, two streams, Q4_K experts, one hash-routed layer, odd
 * chunk boundaries. */
TEST(opencl_model, other_shape_q4_experts_agrees_with_the_cpu)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 4;
    s.n_embd = 512;
    s.n_head = 4;
    s.head_dim = 256;
    s.q_lora = 128;
    s.o_lora = 64;
    s.n_out_group = 2;
    s.n_expert = 8;
    s.n_expert_used = 3;
    s.n_hash_layer = 1;
    s.n_swa = 32;
    s.n_indexer_head = 2;
    s.indexer_head_dim = 64;
    s.indexer_top_k = 5;
    s.n_hc = 2;
    int ratios[] = { 4, 128, 0, 4 };
    memcpy(s.ratios, ratios, sizeof ratios);
    mk_set_quant(&s, "q4");
    s.seed = 5;
    run_shape rs = { .n_tokens = 330, .prefill = 290, .chunk = 37, .ids_seed = 9 };
    cpu_and_opencl_agree(&s, &rs);
}

/* Flash's real widths (4096 embedding, 64 heads x 512 with RoPE on 64,
 * q-lora 1024, output 8 groups x 1024, window 128, expert width 2048,
 * indexer 64 heads x 128, four streams, IQ2_XXS/Q2_K experts) on three
 * layers with ratios 0, 4 and 128. Not real: 16 routed experts instead of
 * 256, one hash-routed layer, indexer top-16 instead of 512 (so that it
 * ranks within 320 tokens), and the tiny vocabulary; ~780 MB. */
TEST(opencl_model, flash_width_agrees_with_the_cpu)
{
    mk_spec s;
    mk_spec_flash_width(&s, 3);
    int ratios[] = { 0, 4, 128 };
    memcpy(s.ratios, ratios, sizeof ratios);
    s.n_expert = 16;
    s.n_hash_layer = 1;
    s.indexer_top_k = 16;
    s.vocab = MK_VOCAB_TINY;
    s.seed = 2;
    run_shape rs = { .n_tokens = 320, .prefill = 256, .chunk = 100, .ids_seed = 7 };
    cpu_and_opencl_agree(&s, &rs);
}
