/* fwd_util.c — golden sets and teacher-forced runs for the forward tests. */
#include "tests/fwd_util.h"

#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

static void ids_from(json_object *arr, ds4_tokens *out)
{
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        ds4_tokens_push(out, json_object_get_int(json_object_array_get_idx(arr, i)));
}

static json_object *field(json_object *o, const char *k)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, k, &v)) FAIL("golden JSON lacks '%s'", k);
    return v;
}

const char *golden_model(void)
{
    const char *p = test_golden_path("A/model.gguf");
    if (!p) SKIP("golden data absent (../shared/golden)");
    return p;
}

void golden_load(golden_set *g, const char *set, const char *rows, bool routing)
{
    memset(g, 0, sizeof *g);
    const char *c = test_golden_path(test_printf("%s/case.json", set));
    if (!c) SKIP("golden data absent (../shared/golden/%s)", set);
    json_object *cj = json_object_from_file(c);
    CHECK_MSG(cj != NULL, "cannot parse %s", c);
    json_object *shape = field(field(cj, "model"), "shape");
    g->n_vocab = json_object_get_int(field(shape, "n_vocab"));
    ids_from(field(field(cj, "prompt"), "token_ids"), &g->prompt);
    ids_from(field(field(cj, "decode"), "fed_tokens"), &g->fed);
    ids_from(field(field(cj, "decode"), "greedy_tokens"), &g->greedy);
    json_object_put(cj);
    ds4_tokens_append(&g->all, g->prompt.ids, g->prompt.n);
    ds4_tokens_append(&g->all, g->fed.ids, g->fed.n);

    const char *rp = test_golden_path(test_printf("%s/%s", set, rows));
    CHECK_MSG(rp != NULL, "golden file %s/%s missing", set, rows);
    size_t len;
    g->ref = (float *)(void *)test_read_file(rp, &len);
    CHECK(g->ref != NULL && len % ((size_t)g->n_vocab * 4) == 0);
    g->n_rows = len / ((size_t)g->n_vocab * 4);
    if (routing) {
        const char *r = test_golden_path(test_printf("%s/routing.json", set));
        CHECK(r != NULL);
        g->routing = json_object_from_file(r);
        CHECK_MSG(g->routing != NULL, "cannot parse %s", r);
    }
}

void golden_free(golden_set *g)
{
    ds4_tokens_free(&g->prompt);
    ds4_tokens_free(&g->fed);
    ds4_tokens_free(&g->greedy);
    ds4_tokens_free(&g->all);
    if (g->routing) json_object_put(g->routing);
    memset(g, 0, sizeof *g);
}

void fwd_require_backend(ds4_backend b)
{
    if (b != DS4_BACKEND_OPENCL) return;
    /* kernel programs from the tests' cache, not the user's */
    setenv("XDG_CACHE_HOME", oclt_cache_dir(), 1);
    oclt_require_device();
}

void fwd_require_two_opencl_devices(void)
{
    setenv("POCL_DEVICES", "pthread pthread", 0);
    fwd_require_backend(DS4_BACKEND_OPENCL);
    ds4_device *d;
    int n = 0, pick;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, NULL, &d, &n, &pick, &err) != 0) SKIP("no OpenCL devices: %s", err.msg);
    free(d);
    if (n < 2) SKIP("one OpenCL device only (PoCL gives two with POCL_DEVICES=\"pthread pthread\")");
}

ds4_engine *fwd_test_engine_on(ds4_backend b, ds4_quant_sim qs, int threads)
{
    if (b == DS4_BACKEND_CPU) return fwd_test_engine(qs, threads);
    return fwd_test_engine_placed(b, qs, threads, 0);
}

ds4_engine *fwd_test_engine_placed(ds4_backend b, ds4_quant_sim qs, int threads, int host_expert_layers)
{
    fwd_require_backend(b);
    ds4_engine_options o = { .model_path = golden_model(), .backend = b, .threads = threads, .quant_sim = qs,
                             .host_expert_layers = host_expert_layers };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    /* a device exists (checked above), so failing to open is a failure */
    CHECK_MSG(e != NULL, "engine on backend %d: %s", (int)b, err.msg);
    return e;
}

ds4_engine *fwd_test_engine(ds4_quant_sim qs, int threads)
{
    ds4_engine_options o = { .model_path = golden_model(), .backend = DS4_BACKEND_CPU, .threads = threads,
                             .quant_sim = qs };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "engine: %s", err.msg);
    return e;
}

typedef struct {
    fwd_routing *r;
} trace_ctx;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void on_trace(void *ud, const char *name, int layer, int64_t pos, const void *data, size_t bytes)
{
    fwd_routing *r = ((trace_ctx *)ud)->r;
    if (pos < 0 || pos >= r->n_pos || layer < 0 || layer >= r->n_layer) return;
    size_t at = (size_t)pos * (size_t)r->n_layer + (size_t)layer;
    if (!strcmp(name, "experts") && bytes == (size_t)r->k * 4) {
        memcpy(r->experts + at * (size_t)r->k, data, bytes);
        qsort(r->experts + at * (size_t)r->k, (size_t)r->k, 4, cmp_i32);
    } else if (!strcmp(name, "indexer_selected") && bytes == (size_t)r->top_k * 4) {
        memcpy(r->sel + at * (size_t)r->top_k, data, bytes);
        r->has_sel[at] = true;
    }
}

void fwd_teacher_force(ds4_engine *e, const ds4_tokens *ids, float *out, fwd_routing *routing)
{
    ds4_model_info info;
    ds4_engine_info(e, &info);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, (int)ids->n, &err);
    CHECK_MSG(s != NULL, "session: %s", err.msg);
    trace_ctx tc = { routing };
    fwd_engine *f = fwd_of(e);
    if (routing) {
        CHECK(f != NULL);
        routing->n_pos = (int)ids->n;
        routing->n_layer = info.n_layer;
        routing->k = info.n_expert_used;
        routing->top_k = e->model->hp.indexer_top_k;
        size_t cells = ids->n * (size_t)info.n_layer;
        routing->experts = test_alloc(cells * (size_t)routing->k * 4);
        routing->sel = test_alloc(cells * (size_t)routing->top_k * 4);
        routing->has_sel = test_alloc(cells);
        memset(routing->has_sel, 0, cells);
        fwd_set_trace(f, on_trace, &tc);
    }
    for (size_t p = 0; p < ids->n; p++) {
        ds4_status st = p == 0 ? ds4_session_sync(s, ids->ids, 1, NULL, &err) : ds4_session_eval(s, ids->ids[p], NULL, &err);
        CHECK_MSG(st == DS4_OK, "position %zu: %s", p, err.msg);
        const float *lg = ds4_session_logits(s);
        CHECK(lg != NULL);
        memcpy(out + p * (size_t)info.n_vocab, lg, (size_t)info.n_vocab * 4);
    }
    if (routing) fwd_set_trace(f, NULL, NULL);
    ds4_session_close(s);
}

void fwd_check_routing(const golden_set *g, const fwd_routing *r)
{
    CHECK(g->routing != NULL);
    json_object *rt = g->routing;
    int checked_experts = 0, checked_sel = 0, exp_diff = 0, sel_diff = 0;
    for (size_t i = 0; i < json_object_array_length(rt); i++) {
        json_object *pe = json_object_array_get_idx(rt, i), *v, *layers;
        CHECK(json_object_object_get_ex(pe, "pos", &v));
        int pos = json_object_get_int(v);
        CHECK(pos >= 0 && pos < r->n_pos);
        CHECK(json_object_object_get_ex(pe, "layers", &layers));
        for (size_t k = 0; k < json_object_array_length(layers); k++) {
            json_object *le = json_object_array_get_idx(layers, k), *ex, *sel, *nc;
            CHECK(json_object_object_get_ex(le, "layer", &v));
            int l = json_object_get_int(v);
            size_t at = (size_t)pos * (size_t)r->n_layer + (size_t)l;
            CHECK(json_object_object_get_ex(le, "experts", &ex));
            int32_t want[64];
            int n = (int)json_object_array_length(ex);
            CHECK_EQ_INT(n, r->k);
            for (int j = 0; j < n; j++) want[j] = json_object_get_int(json_object_array_get_idx(ex, j));
            for (int a = 0; a < n; a++)
                for (int b = a + 1; b < n; b++)
                    if (want[b] < want[a]) {
                        int32_t t = want[a];
                        want[a] = want[b];
                        want[b] = t;
                    }
            if (memcmp(want, r->experts + at * (size_t)r->k, (size_t)n * 4) != 0) {
                if (exp_diff++ < 5) fprintf(stderr, "experts differ at position %d layer %d\n", pos, l);
            }
            checked_experts++;
            if (!json_object_object_get_ex(le, "indexer_selected", &sel)) continue;
            CHECK(json_object_object_get_ex(le, "n_comp", &nc));
            int n_comp = json_object_get_int(nc), ns = (int)json_object_array_length(sel);
            if (n_comp <= r->top_k) {
                /* everything visible is used; the engine does not rank */
                CHECK_EQ_INT(ns, n_comp);
                CHECK(!r->has_sel[at]);
                continue;
            }
            CHECK_MSG(r->has_sel[at], "indexer did not rank at position %d layer %d", pos, l);
            CHECK_EQ_INT(ns, r->top_k);
            const int32_t *mine = r->sel + at * (size_t)r->top_k;
            bool same = true;
            for (int j = 0; j < ns; j++) same &= mine[j] == json_object_get_int(json_object_array_get_idx(sel, j));
            if (!same && sel_diff++ < 5) fprintf(stderr, "indexer selection differs at position %d layer %d\n", pos, l);
            checked_sel++;
        }
    }
    fprintf(stderr, "compared %d expert sets, %d indexer selections\n", checked_experts, checked_sel);
    CHECK(checked_experts == (int)g->all.n * r->n_layer);
    CHECK(checked_sel > 100);
    CHECK_EQ_INT(exp_diff, 0);
    CHECK_EQ_INT(sel_diff, 0);
}

int32_t fwd_argmax(const float *v, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void fwd_compare(const float *mine, const float *ref, size_t rows, int V, double near_tie, fwd_stats *st)
{
    memset(st, 0, sizeof *st);
    double *rel = test_alloc(rows * sizeof *rel);
    st->n = (int)rows;
    for (size_t p = 0; p < rows; p++) {
        const float *a = mine + p * (size_t)V, *b = ref + p * (size_t)V;
        double md = 0, mx = 0;
        for (int v = 0; v < V; v++) {
            double d = fabs((double)a[v] - b[v]);
            if (d > md) md = d;
            if (fabs(b[v]) > mx) mx = fabs(b[v]);
        }
        rel[p] = md / (mx > 0 ? mx : 1);
        if (rel[p] > st->max) {
            st->max = rel[p];
            st->worst_pos = (int)p;
        }
        int32_t ra = fwd_argmax(b, V), ma = fwd_argmax(a, V);
        if (ra == ma) {
            st->argmax_equal++;
        } else {
            /* exempt near-ties: the reference's own top two within near_tie·max|ref| */
            float second = -INFINITY;
            for (int v = 0; v < V; v++)
                if (v != ra && b[v] > second) second = b[v];
            if ((b[ra] - second) >= near_tie * mx) st->argmax_exempt_misses++;
        }
    }
    qsort(rel, rows, sizeof *rel, cmp_d);
    st->median = rel[rows / 2];
    st->p90 = rel[(size_t)(0.9 * (double)rows)];
}

void fwd_check_release_tier(const fwd_stats *st, const char *what)
{
    CHECK_MSG(st->median <= 5e-2, "%s: median rel %.3g (release tier: <= 0.05)", what, st->median);
    CHECK_MSG(st->p90 <= 0.15, "%s: 90th percentile rel %.3g (release tier: <= 0.15)", what, st->p90);
    CHECK_MSG(st->argmax_equal * 10 >= st->n * 9, "%s: argmax agreement %d/%d (release tier: >= 90 %%)", what,
              st->argmax_equal, st->n);
}

void fwd_check_8bit_tier(const fwd_stats *st, const char *what)
{
    CHECK_MSG(st->median <= 0.11, "%s: median rel %.3g (8-bit tier: <= 0.11)", what, st->median);
    CHECK_MSG(st->p90 <= 0.22, "%s: 90th percentile rel %.3g (8-bit tier: <= 0.22)", what, st->p90);
    CHECK_MSG(st->argmax_equal * 100 >= st->n * 78, "%s: argmax agreement %d/%d (8-bit tier: >= 78 %%)", what,
              st->argmax_equal, st->n);
}

void fwd_random_ids(ds4_tokens *out, size_t n, int n_vocab, uint32_t seed)
{
    uint32_t x = seed ? seed : 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ds4_tokens_push(out, (int32_t)(x % (uint32_t)n_vocab));
    }
}

void fwd_logits_after(ds4_engine *e, int n_ctx, int chunk, const int32_t *ids, size_t n, float *out)
{
    fwd_engine *f = fwd_of(e);
    CHECK(f != NULL);
    int saved = fwd_chunk(f);
    if (chunk > 0) fwd_set_chunk(f, chunk);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, n_ctx, &err);
    CHECK_MSG(s != NULL, "session: %s", err.msg);
    CHECK_MSG(ds4_session_sync(s, ids, n, NULL, &err) == DS4_OK, "sync: %s", err.msg);
    const float *lg = ds4_session_logits(s);
    CHECK(lg != NULL);
    memcpy(out, lg, (size_t)ds4_vocab_size(ds4_engine_tokenizer(e)) * 4);
    ds4_session_close(s);
    fwd_set_chunk(f, saved);
}
