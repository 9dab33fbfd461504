/* bench_attn.c — attention and indexer cost at long context.
 *
 * The ops run on a small generated model whose attention has Flash's
 * widths (64 heads × 512, a 128-row window, indexer 64 heads × 128, top
 * 512); only the hyper-parameters matter to these ops, the other widths
 * are kept small so the model is built in memory in a moment. Cases:
 *
 *   attention rows=N   one decode step over the window and N compressed
 *                      rows, no selection (what a ratio-4 layer would
 *                      cost without the indexer; the stress case)
 *   attention ctx=C    a decode step as the schedule runs it at context
 *                      C: ratio 4 with the indexer's 512 rows, ratio 128
 *                      with C/128 rows
 *   indexer ctx=C      scores of the C/4 indexer rows and the top 512
 *
 * Each case is queued `reps` times back to back and timed to the end of
 * the last one (the ops never wait), the best of three rounds reported.
 * CSV columns: case, backend, cache, rows, ms per call (wall clock), cpu_ms
 * per call (CPU time of all the process's threads, steadier on a shared
 * machine), GB/s of cache rows read and GFLOP/s by the wall clock
 * (attention: 4·heads·dim per row; indexer: 2·heads·dim). */
#include "bench/bench_attn.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/base.h"
#include "cpu/cpu_ops.h"
#include "engine/gguf.h"
#include "engine/testkit/mkmodel.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "opencl/cl_ops.h"

typedef struct {
    const ds4_ops *ops;
    void *ctx;
    const char *name;
} side;

/* CPU time of the whole process (every thread, the OpenCL runtime's too)
 * in ms: on a shared machine it tracks the work done better than the
 * wall clock does. */
static double cpu_ms(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float randf(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)(int64_t)(rng % 2001 - 1000) / 1000.0f;
}

/* A buffer of n random values (f32, or f16 cache elements). */
static ds4_buf *random_buf(const side *s, size_t n, bool f16)
{
    size_t bytes = n * (f16 ? 2 : 4);
    ds4_buf *b = s->ops->alloc(s->ctx, bytes);
    void *h = malloc(bytes ? bytes : 1);
    if (!b || !h) {
        free(h);
        return b;
    }
    for (size_t i = 0; i < n; i++) {
        float v = randf();
        if (f16) ((uint16_t *)h)[i] = quant_f32_to_f16(v);
        else ((float *)h)[i] = v;
    }
    if (s->ops->write(s->ctx, b, 0, h, bytes)) {
        s->ops->release(s->ctx, b);
        b = NULL;
    }
    free(h);
    return b;
}

typedef enum { CASE_ATTN, CASE_INDEXER } case_kind;

typedef struct {
    case_kind kind;
    const char *label;
    int64_t ctx;  /* position of the decoded token + 1 */
    int R;
    bool sel;     /* attention through the indexer's selection */
} bench_case;

/* Runs one case on one side; prints a CSV row. Returns 0, or -1 with a
 * message printed. */
static int run_case(const side *s, const ds4_model *m, const bench_case *bc, bool f16, int reps)
{
    const ds4_hparams *hp = &m->hp;
    const int H = hp->n_head, hd = hp->head_dim, k = hp->indexer_top_k;
    const int nih = hp->n_indexer_head, ihd = hp->indexer_head_dim;
    const int64_t pos0 = bc->ctx - 1;
    const ds4_cache_type ct = f16 ? DS4_CACHE_F16 : DS4_CACHE_F32;
    ds4_buf *bufs[8] = { 0 };
    int nb = 0, rc = -1;
    double flop = 0, row_bytes = 0;
    int64_t rows = 0;
    if (bc->kind == CASE_ATTN) {
        int64_t n_comp = bc->sel ? k : bc->ctx / bc->R;
        rows = (hp->n_swa < bc->ctx ? hp->n_swa : bc->ctx) + n_comp;
        ds4_buf *q = bufs[nb++] = random_buf(s, (size_t)H * hd, false);
        ds4_buf *o = bufs[nb++] = random_buf(s, (size_t)H * hd, false);
        ds4_buf *raw = bufs[nb++] = random_buf(s, (size_t)hp->n_swa * hd, f16);
        ds4_buf *comp = bufs[nb++] = random_buf(s, (size_t)(bc->ctx / bc->R) * hd, f16);
        ds4_buf *sel = NULL;
        if (bc->sel) {
            int32_t *ids = malloc((size_t)k * 4);
            if (!ids) goto done;
            /* an even spread over the visible rows, increasing */
            for (int i = 0; i < k; i++) ids[i] = (int32_t)((int64_t)i * (bc->ctx / bc->R) / k);
            sel = bufs[nb++] = s->ops->alloc(s->ctx, (size_t)k * 4);
            if (sel && s->ops->write(s->ctx, sel, 0, ids, (size_t)k * 4)) sel = NULL;
            free(ids);
            if (!sel) goto fail;
        }
        if (!q || !o || !raw || !comp) goto fail;
        const ds4_tensor *sinks = &m->layers[2].attn_sinks;
        double best = 1e30, best_cpu = 1e30;
        for (int round = -1; round < 3; round++) {
            double t0 = base_now_ms(), c0 = cpu_ms();
            for (int r = 0; r < (round < 0 ? 1 : reps); r++)
                if (s->ops->attention(s->ctx, q, raw, ct, hp->n_swa, comp, bc->R, sel, k, sinks, pos0, 1, o)) goto fail;
            float probe;
            if (s->ops->read(s->ctx, o, 0, &probe, sizeof probe)) goto fail;
            if (round >= 0 && (base_now_ms() - t0) / reps < best) best = (base_now_ms() - t0) / reps;
            if (round >= 0 && (cpu_ms() - c0) / reps < best_cpu) best_cpu = (cpu_ms() - c0) / reps;
        }
        flop = 4.0 * H * hd * (double)rows;
        row_bytes = (double)rows * hd * (f16 ? 2 : 4);
        printf("attention %s,%s,%s,%lld,%.3f,%.3f,%.2f,%.2f\n", bc->label, s->name, f16 ? "f16" : "f32",
               (long long)rows, best, best_cpu, row_bytes / best / 1e6, flop / best / 1e6);
    } else {
        rows = bc->ctx / 4;
        ds4_buf *q = bufs[nb++] = random_buf(s, (size_t)nih * ihd, false);
        ds4_buf *w = bufs[nb++] = random_buf(s, (size_t)nih, false);
        ds4_buf *krows = bufs[nb++] = random_buf(s, (size_t)rows * ihd, f16);
        ds4_buf *sel = bufs[nb++] = s->ops->alloc(s->ctx, (size_t)k * 4);
        if (!q || !w || !krows || !sel) goto fail;
        double best = 1e30, best_cpu = 1e30;
        for (int round = -1; round < 3; round++) {
            double t0 = base_now_ms(), c0 = cpu_ms();
            for (int r = 0; r < (round < 0 ? 1 : reps); r++)
                if (s->ops->indexer(s->ctx, q, w, krows, ct, 4, pos0, 1, sel)) goto fail;
            int32_t probe;
            if (s->ops->read(s->ctx, sel, 0, &probe, sizeof probe)) goto fail;
            if (round >= 0 && (base_now_ms() - t0) / reps < best) best = (base_now_ms() - t0) / reps;
            if (round >= 0 && (cpu_ms() - c0) / reps < best_cpu) best_cpu = (cpu_ms() - c0) / reps;
        }
        flop = 2.0 * nih * ihd * (double)rows;
        row_bytes = (double)rows * ihd * (f16 ? 2 : 4);
        printf("indexer %s,%s,%s,%lld,%.3f,%.3f,%.2f,%.2f\n", bc->label, s->name, f16 ? "f16" : "f32",
               (long long)rows, best, best_cpu, row_bytes / best / 1e6, flop / best / 1e6);
    }
    fflush(stdout);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "ds4cl-bench: %s: %s\n", s->name, s->ops->last_error(s->ctx));
done:
    for (int i = 0; i < nb; i++)
        if (bufs[i]) s->ops->release(s->ctx, bufs[i]);
    return rc;
}

static void usage(void)
{
    fputs("usage: ds4cl-bench --attn-bench [--backend cpu|opencl|both] [--threads T] [--reps R] [--f32]\n"
          "                   [--rows LIST] [--ctx LIST]\n"
          "  --rows LIST  compressed rows of the no-selection decode steps (default 4096,16384,65536)\n"
          "  --ctx LIST   contexts of the schedule-shaped cases (default 16384,65536)\n"
          "  --reps R     calls per timed round (default 5)\n"
          "  --f32        f32 cache rows instead of f16\n",
          stderr);
}

int bench_attn(int argc, char **argv)
{
    const char *backend = "both";
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 5;
    bool f16 = true;
    long rows[16] = { 4096, 16384, 65536 }, ctxs[16] = { 16384, 65536 };
    int n_rows = 3, n_ctx = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) backend = argv[++i];
        else if (!strcmp(a, "--threads") && v) {
            if (num_parse_int(argv[++i], 1, 1024, &threads, NULL)) threads = 0; /* refused below */
        } else if (!strcmp(a, "--reps") && v) {
            if (num_parse_int(argv[++i], 1, 100000, &reps, NULL)) reps = 0; /* refused below */
        } else if (!strcmp(a, "--f32")) f16 = false;
        else if (!strcmp(a, "--rows") && v) n_rows = num_parse_list(argv[++i], 4, LONG_MAX, rows, 16, NULL);
        else if (!strcmp(a, "--ctx") && v) n_ctx = num_parse_list(argv[++i], 4, LONG_MAX, ctxs, 16, NULL);
        else {
            fprintf(stderr, "ds4cl-bench: --attn-bench: unknown or incomplete option '%s'\n", a);
            usage();
            return 2;
        }
    }
    bool want_cpu = !strcmp(backend, "cpu") || !strcmp(backend, "both");
    bool want_cl = !strcmp(backend, "opencl") || !strcmp(backend, "both");
    if ((!want_cpu && !want_cl) || threads < 1 || reps < 1 || n_rows < 0 || n_ctx < 0) {
        usage();
        return 2;
    }

    mk_spec spec;
    mk_spec_tiny(&spec);
    spec.n_layer = 3; /* ratios 0, 0, 4 */
    spec.n_head = 64;
    spec.n_swa = 128;
    spec.n_indexer_head = 64;
    spec.indexer_top_k = 512;
    spec.name = "ds4cl-attn-bench";
    ds4_error err = { "" };
    void *file = NULL;
    size_t len = 0;
    gguf_file *g = NULL;
    ds4_model *m = NULL;
    side sides[2];
    int n_sides = 0, rc = 1;
    if (mk_write_memory(&spec, &file, &len, &err) || !(g = gguf_open_memory(file, len, &err)) ||
        !(m = model_bind(g, &err))) {
        fprintf(stderr, "ds4cl-bench: model: %s\n", err.msg);
        goto out;
    }
    if (want_cpu) {
        void *c = cpu_ops_new(m, threads, &err);
        if (!c) {
            fprintf(stderr, "ds4cl-bench: cpu: %s\n", err.msg);
            goto out;
        }
        sides[n_sides++] = (side){ &cpu_ops, c, "cpu" };
    }
    if (want_cl) {
        void *c = clo_new(m, NULL, &err);
        if (!c) {
            fprintf(stderr, "ds4cl-bench: opencl: %s\n", err.msg);
            goto out;
        }
        sides[n_sides++] = (side){ &clo_ops, c, "opencl" };
    }
    printf("case,backend,cache,rows,ms,cpu_ms,rows_gbps,gflops\n");
    rc = 0;
    for (int si = 0; si < n_sides && !rc; si++) {
        char label[64];
        for (int i = 0; i < n_rows && !rc; i++) {
            snprintf(label, sizeof label, "rows=%lld", (long long)rows[i]);
            bench_case bc = { CASE_ATTN, label, rows[i] * 4, 4, false };
            rc = run_case(&sides[si], m, &bc, f16, reps);
        }
        for (int i = 0; i < n_ctx && !rc; i++) {
            snprintf(label, sizeof label, "ctx=%lld ratio 4", (long long)ctxs[i]);
            bench_case a4 = { CASE_ATTN, label, ctxs[i], 4, ctxs[i] / 4 > spec.indexer_top_k };
            rc = run_case(&sides[si], m, &a4, f16, reps);
            snprintf(label, sizeof label, "ctx=%lld ratio 128", (long long)ctxs[i]);
            bench_case a128 = { CASE_ATTN, label, ctxs[i], 128, false };
            if (!rc) rc = run_case(&sides[si], m, &a128, f16, reps);
            snprintf(label, sizeof label, "ctx=%lld", (long long)ctxs[i]);
            bench_case ix = { CASE_INDEXER, label, ctxs[i], 4, false };
            if (!rc) rc = run_case(&sides[si], m, &ix, f16, reps);
        }
    }
    rc = rc ? 1 : 0;
out:
    for (int i = 0; i < n_sides; i++) {
        if (sides[i].ops == &cpu_ops) cpu_ops_free(sides[i].ctx);
        else clo_free(sides[i].ctx);
    }
    model_free(m);
    gguf_close(g);
    free(file);
    return rc;
}
