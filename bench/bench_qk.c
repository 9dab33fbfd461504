/* bench_qk.c — the `--quant-bench` rows of the integer 2-bit kernels
 * (engine/qk.h) per SIMD level, at the routed experts' shapes and at the
 * shape ggml's test-backend-ops times, next to the same-run read ceiling
 * and, when given its path, ggml's own figures measured in the same run. */
#include "bench/bench_qk.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "bench/bench_quant.h"
#include "cpu/qk.h"
#include "engine/quant.h"

/* One measured product: `experts` matrices of rows × n, T tokens each;
 * decode rows rotate over a pool of matrices so each call reads from
 * memory, as a layer's experts do. */
typedef struct {
    const char *what; /* "decode" / "prefill" */
    uint32_t type;
    int64_t rows, n;
    int experts; /* matrices per call (6 = a token's routed experts) */
    int acts;    /* distinct activations per call (gate and up share a token's) */
    int T;       /* tokens per matrix */
    int pool;    /* matrices in the pool the calls rotate over (1: always the same) */
    const char *label;
} shape;

typedef struct {
    const shape *s;
    qk_level level;
    const uint8_t *w; /* pool of matrices */
    size_t mat_bytes;
    const float *x; /* T·n activations (f32) */
    int calls, thread, threads;
} worker;

/* One thread's share: rows [thread·rows/threads, …) of every matrix of
 * every call; it quantizes the activations it uses, as the engine does. */
static void *run_worker(void *arg)
{
    worker *k = arg;
    const shape *s = k->s;
    int64_t nb = s->n / QK_K, r0 = s->rows * k->thread / k->threads, r1 = s->rows * (k->thread + 1) / k->threads;
    r0 -= r0 % 4;
    if (k->thread == k->threads - 1) r1 = s->rows;
    else r1 -= r1 % 4;
    block_q8_K *act = malloc(sizeof(block_q8_K) * (size_t)(nb * s->T));
    const block_q8_K **ap = malloc(sizeof *ap * (size_t)s->T);
    float *y = malloc(sizeof(float) * (size_t)(s->rows * s->T));
    float **yp = malloc(sizeof *yp * (size_t)s->T);
    if (!act || !ap || !y || !yp) goto out;
    for (int t = 0; t < s->T; t++) {
        ap[t] = act + t * nb;
        yp[t] = y + t * s->rows;
    }
    size_t rb = (size_t)quant_row_bytes(s->type, (uint64_t)s->n);
    for (int c = 0, m = 0; c < k->calls; c++)
        for (int e = 0; e < s->experts; e++, m = (m + 1) % s->pool) {
            if (e % (s->experts / s->acts) == 0)
                for (int t = 0; t < s->T; t++) quant_act_q8_K(k->x + (size_t)t * (size_t)s->n, s->n, act + t * nb);
            qk_rows(k->level, s->type, k->w + (size_t)m * k->mat_bytes, rb, s->n, r0, r1, s->T, ap, yp);
        }
out:
    free(act);
    free(ap);
    free(y);
    free(yp);
    return NULL;
}

static double timed(const shape *s, qk_level level, const uint8_t *w, size_t mat_bytes, const float *x, int calls,
                    int threads)
{
    pthread_t tid[256];
    worker k[256];
    double t0 = base_now_ms();
    for (int t = 0; t < threads; t++) {
        k[t] = (worker){ s, level, w, mat_bytes, x, calls, t, threads };
        if (t) pthread_create(&tid[t], NULL, run_worker, &k[t]);
    }
    run_worker(&k[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    return (base_now_ms() - t0) / 1000.0;
}

/* ggml's figure for a format and token count: microseconds per run of
 * MUL_MAT m=4096, k=14336 (0 when not measured). */
typedef struct {
    double us[2][2]; /* [IQ2_XXS, Q2_K][n = 1, n = 512] */
} ggml_figures;

static int fmt_index(uint32_t type) { return type == GGML_TYPE_Q2_K; }

/* Runs ggml's test-backend-ops at the shape its perf mode has (m 4096,
 * k 14336) for both formats and n = 1, 512; its CPU backend uses every
 * core. Keeps, per figure, the shorter of g's time (0: none yet) and the
 * new one. Returns 0 when at least one figure was read. */
static int run_ggml(const char *tbo, ggml_figures *g)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "'%s' perf -o MUL_MAT -b CPU -p 'type_a=(iq2_xxs|q2_K),type_b=f32,m=4096,n=(1|512),k=14336,' 2>&1", tbo);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[1024];
    int got = 0;
    while (fgets(line, sizeof line, p)) {
        const char *m = strstr(line, "MUL_MAT(type_a=");
        const char *us = strstr(line, " us/run");
        if (!m || !us) continue;
        int fi = !strncmp(m + 15, "iq2_xxs,", 8) ? 0 : !strncmp(m + 15, "q2_K,", 5) ? 1 : -1;
        int ni = strstr(m, ",n=1,") ? 0 : strstr(m, ",n=512,") ? 1 : -1;
        const char *v = us;
        while (v > line && (v[-1] == '.' || (v[-1] >= '0' && v[-1] <= '9'))) v--;
        if (fi < 0 || ni < 0 || v == us) continue;
        double us_run = strtod(v, NULL);
        if (g->us[fi][ni] <= 0 || us_run < g->us[fi][ni]) g->us[fi][ni] = us_run;
        got++;
    }
    pclose(p);
    return got ? 0 : -1;
}

static const shape shapes[] = {
    { "decode", GGML_TYPE_IQ2_XXS, 2048, 4096, 12, 1, 1, 96, "6x(gate+up) 2048x4096" },
    { "decode", GGML_TYPE_Q2_K, 4096, 2048, 6, 6, 1, 48, "6x(down) 4096x2048" },
    { "decode", GGML_TYPE_IQ2_XXS, 4096, 14336, 1, 1, 1, 1, "4096x14336 (ggml's)" },
    { "decode", GGML_TYPE_Q2_K, 4096, 14336, 1, 1, 1, 1, "4096x14336 (ggml's)" },
    { "prefill", GGML_TYPE_IQ2_XXS, 2048, 4096, 1, 1, 512, 1, "gate 2048x4096 n=512" },
    { "prefill", GGML_TYPE_Q2_K, 4096, 2048, 1, 1, 512, 1, "down 4096x2048 n=512" },
    { "prefill", GGML_TYPE_IQ2_XXS, 4096, 14336, 1, 1, 512, 1, "4096x14336 n=512 (ggml's)" },
    { "prefill", GGML_TYPE_Q2_K, 4096, 14336, 1, 1, 512, 1, "4096x14336 n=512 (ggml's)" },
};

/* One measured row, printed once ggml has run before and after. */
typedef struct {
    const shape *s;
    qk_level level;
    bool missing; /* the CPU lacks the level */
    double gbps, ceil, gflops;
} row;

static void print_row(const row *r, const ggml_figures *gg, bool have_ggml)
{
    const shape *s = r->s;
    if (r->missing) {
        printf("%-11s %-8s %-7s %-26s (not on this CPU)\n", qk_level_name(r->level), quant_type(s->type)->name, s->what,
               s->label);
        return;
    }
    char gcol[32] = "-", rcol[32] = "-";
    double gus = have_ggml ? gg->us[fmt_index(s->type)][s->T > 1] : 0;
    if (gus > 0) {
        /* ggml's rate in this row's unit: GB/s for decode, GFLOP/s for prefill */
        double gbytes = (double)quant_row_bytes(s->type, 14336) * 4096;
        double gflop = 2.0 * 4096 * 14336 * (s->T > 1 ? 512 : 1);
        double grate = s->T > 1 ? gflop / gus / 1e3 : gbytes / gus / 1e3;
        snprintf(gcol, sizeof gcol, "%.2f", grate);
        snprintf(rcol, sizeof rcol, "%.2f", (s->T > 1 ? r->gflops : r->gbps) / grate);
    }
    printf("%-11s %-8s %-7s %-26s %9.2f %8.0f %9.2f %8s %8s\n", qk_level_name(r->level), quant_type(s->type)->name,
           s->what, s->label, r->gbps, 100 * r->gbps / r->ceil, r->gflops, gcol, rcol);
}

int bench_qk(const char *levels_arg, const char *ggml_path, int threads, int reps)
{
    bool want[QK_N_LEVELS] = { false };
    char list[128];
    snprintf(list, sizeof list, "%s", levels_arg ? levels_arg : "avx512vbmi,avx512,avx2vnni,avx2");
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int l = qk_level_parse(tok);
        if (l < 0) {
            fprintf(stderr, "ds4cl-bench: --quant-bench: unknown SIMD level '%s'\n", tok);
            return 2;
        }
        want[l] = true;
    }
    ggml_figures gg = { { { 0 } } };
    bool have_ggml = false;
    if (ggml_path) {
        double t0 = base_now_ms();
        have_ggml = run_ggml(ggml_path, &gg) == 0;
        printf("ggml before: %s (%.0f s): IQ2_XXS %.0f / %.0f us, Q2_K %.0f / %.0f us per run at n = 1 / 512\n",
               have_ggml ? "test-backend-ops perf, MUL_MAT m=4096 k=14336, all cores" : "no figures read from",
               (base_now_ms() - t0) / 1000.0, gg.us[0][0], gg.us[0][1], gg.us[1][0], gg.us[1][1]);
    }
    row rows[sizeof shapes / sizeof shapes[0] * QK_N_LEVELS];
    int nrows = 0;
    bench_read_probe *probe = bench_read_probe_open((size_t)512 << 20);
    float *x = malloc(sizeof(float) * 512 * 14336);
    if (!x || !probe) {
        fprintf(stderr, "ds4cl-bench: out of memory\n");
        bench_read_probe_close(probe);
        free(x);
        return 1;
    }
    for (size_t i = 0; i < (size_t)512 * 14336; i++) x[i] = (float)((int)(i * 2654435761u % 2001) - 1000) / 1000.0f;
    int status = 0;
    for (int si = 0; si < (int)(sizeof shapes / sizeof shapes[0]) && !status; si++) {
        const shape *s = &shapes[si];
        size_t mat = (size_t)quant_row_bytes(s->type, (uint64_t)s->n) * (size_t)s->rows;
        bool any = false;
        for (int l = 0; l < QK_N_LEVELS; l++) any |= want[l] && qk_level_supported((qk_level)l);
        uint8_t *w = any ? malloc(mat * (size_t)s->pool) : NULL;
        if (any && !w) {
            status = 1;
            break;
        }
        if (w) bench_fill_weights(s->type, w, mat * (size_t)s->pool);
        for (int l = QK_N_LEVELS - 1; l >= 0; l--) {
            if (!want[l]) continue;
            if (!qk_level_supported((qk_level)l)) {
                rows[nrows++] = (row){ s, (qk_level)l, true, 0, 0, 0 };
                continue;
            }
            /* decode: enough calls to pass over the pool twice; prefill: one */
            int calls = s->T > 1 ? 1 : s->pool > 1 ? 2 * s->pool / s->experts : 8;
            double ceil = bench_read_probe_gbps(probe, threads, 2), best = 1e30;
            timed(s, (qk_level)l, w, mat, x, 1, threads); /* warm-up */
            for (int r = 0; r < reps; r++) {
                double sec = timed(s, (qk_level)l, w, mat, x, calls, threads);
                if (sec < best) best = sec;
            }
            double c2 = bench_read_probe_gbps(probe, threads, 2);
            if (c2 > ceil) ceil = c2;
            double per_call = best / calls;
            double bytes = (double)mat * s->experts, flop = 2.0 * (double)s->rows * (double)s->n * s->T * s->experts;
            rows[nrows++] = (row){ s, (qk_level)l, false, bytes / per_call / 1e9, ceil, flop / per_call / 1e9 };
            fprintf(stderr, "qk: %s %s %s %s done\n", qk_level_name((qk_level)l), quant_type(s->type)->name, s->what,
                    s->label);
        }
        free(w);
    }
    bench_read_probe_close(probe);
    free(x);
    if (have_ggml && !status) {
        /* again after the rows: on a shared machine the load moves, and the
         * faster of ggml's two runs is the column's figure */
        ggml_figures after = gg;
        run_ggml(ggml_path, &after);
        printf("ggml best of before and after: IQ2_XXS %.0f / %.0f us, Q2_K %.0f / %.0f us per run at n = 1 / 512\n",
               after.us[0][0], after.us[0][1], after.us[1][0], after.us[1][1]);
        gg = after;
    }
    printf("\nqk: integer 2-bit kernels, Q8_K activations, %d thread(s); best of %d%s\n", threads, reps,
           have_ggml ? "; ggml: the faster of its runs before and after these rows" : "");
    printf("%-11s %-8s %-7s %-26s %9s %8s %9s %8s %8s\n", "level", "type", "kind", "shape", "GB/s", "%ceil",
           "GFLOP/s", "ggml", "x ggml");
    for (int i = 0; i < nrows; i++) print_row(&rows[i], &gg, have_ggml);
    return status;
}
