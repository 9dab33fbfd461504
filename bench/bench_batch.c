/* bench_batch.c — `ds4cl-bench --batch-bench -m MODEL`: B sessions, each
 * prefilled with its own --prompt-tokens random tokens, decode
 * --gen-tokens steps together (ds4_sessions_eval), for each B of
 * --batches (default 1,2,4,8). A step reads the dense weights once for
 * all B rows and each routed expert once for the rows that chose it, so
 * the aggregate rate (B·steps/s) grows with B while decode is bound by
 * reading weights. The rounds (--rounds) alternate the order of the B
 * values so that a load that comes and goes is shared out; the best of
 * each is kept. The CSV names the CPU and the load average before and
 * after the run, and the CPU time per token, which a load that shares
 * the cores distorts least. */
#include "bench/bench_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/base.h"
#include "engine/backend.h"
#include "engine/ds4.h"
#include "engine/forward.h"
#include "engine/gguf.h"

#define MAX_B 64

typedef struct {
    const char *model;
    const char *backend;
    long prompt, gen, rounds;
    int threads;
    int batches[16], n_batches;
} bb_opts;

typedef struct {
    double step_ms, agg_tps, cpu_ms; /* cpu_ms: CPU time per token (the load distorts it least) */
    bool ran, batched;
} bb_row;

static int usage(const char *what)
{
    fprintf(stderr, "ds4cl-bench --batch-bench: %s\n"
                    "usage: ds4cl-bench --batch-bench -m MODEL [--batches 1,2,4,8] [--prompt-tokens P]\n"
                    "                   [--gen-tokens G] [--rounds R] [--threads T] [--backend cpu|opencl]\n",
            what);
    return 2;
}

static int parse(int argc, char **argv, bb_opts *o)
{
    *o = (bb_opts){ .backend = "cpu", .prompt = 64, .gen = 16, .rounds = 2, .batches = { 1, 2, 4, 8 }, .n_batches = 4 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--batch-bench")) continue;
        if (!v) return usage("an option without its value");
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--backend")) o->backend = v;
        else if (!strcmp(a, "--prompt-tokens")) o->prompt = strtol(v, NULL, 10);
        else if (!strcmp(a, "--gen-tokens")) o->gen = strtol(v, NULL, 10);
        else if (!strcmp(a, "--rounds")) o->rounds = strtol(v, NULL, 10);
        else if (!strcmp(a, "--threads")) o->threads = (int)strtol(v, NULL, 10);
        else if (!strcmp(a, "--batches")) {
            o->n_batches = 0;
            for (char *p = (char *)v; *p && o->n_batches < 16;) {
                long b = strtol(p, &p, 10);
                if (b < 1 || b > MAX_B) return usage("--batches wants counts from 1 to 64");
                o->batches[o->n_batches++] = (int)b;
                if (*p == ',') p++;
                else if (*p) return usage("--batches wants a comma-separated list");
            }
        } else return usage(a);
    }
    if (!o->model) return usage("-m MODEL is required");
    if (o->prompt < 1 || o->gen < 1 || o->rounds < 1) return usage("counts must be positive");
    if (strcmp(o->backend, "cpu") && strcmp(o->backend, "opencl")) return usage("--backend is cpu or opencl");
    return 0;
}

static double cpu_now_ms(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

/* B sessions prefilled apart, then gen steps of all B together. */
static int run_one(ds4_engine *e, const bb_opts *o, int B, bb_row *r, ds4_error *err)
{
    int n_ctx = (int)(o->prompt + o->gen + 8), rc = -1;
    ds4_session *s[MAX_B] = { 0 };
    int32_t ids[MAX_B];
    int32_t *prompt = xcalloc((size_t)o->prompt, sizeof *prompt);
    uint32_t x = 12345;
    for (int i = 0; i < B; i++) {
        if (!(s[i] = ds4_session_open(e, n_ctx, err))) goto out;
        for (long t = 0; t < o->prompt; t++) {
            x = x * 1103515245u + 12345u;
            prompt[t] = (int32_t)((x >> 8) % (uint32_t)e->n_vocab);
        }
        if (ds4_session_sync(s[i], prompt, (size_t)o->prompt, NULL, err) != DS4_OK) goto out;
        ids[i] = prompt[0];
    }
    uint64_t b0 = fwd_of(e) ? fwd_batched_steps(fwd_of(e)) : 0;
    double t0 = base_now_ms(), c0 = cpu_now_ms();
    for (long t = 0; t < o->gen; t++) {
        if (ds4_sessions_eval(s, ids, B, NULL, err) != DS4_OK) goto out;
        for (int i = 0; i < B; i++) ids[i] = (ids[i] + 7 + i) % e->n_vocab;
    }
    double ms = base_now_ms() - t0, cpu = (cpu_now_ms() - c0) / ((double)B * (double)o->gen);
    r->batched = B > 1 && fwd_of(e) && fwd_batched_steps(fwd_of(e)) - b0 == (uint64_t)o->gen;
    double tps = (double)B * (double)o->gen / (ms / 1000.0);
    if (!r->ran || tps > r->agg_tps) {
        r->agg_tps = tps;
        r->step_ms = ms / (double)o->gen;
    }
    if (!r->ran || cpu < r->cpu_ms) r->cpu_ms = cpu;
    r->ran = true;
    rc = 0;
out:
    for (int i = 0; i < B; i++) ds4_session_close(s[i]);
    free(prompt);
    return rc;
}

static void cpu_name(char *out, size_t n)
{
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            snprintf(out, n, "%s", c + 2);
            out[strcspn(out, "\n")] = 0;
            for (char *p = out; *p; p++)
                if (*p == ',') *p = ' ';
            break;
        }
    }
    fclose(f);
}

/* What a step reads: the dense weights (the embedding table not: a row
 * per token) and the routed experts; from the model file, read once. */
typedef struct {
    double dense, experts, n_expert, used;
} step_bytes;

static step_bytes step_bytes_of(const char *model, const ds4_model_info *info)
{
    step_bytes b = { 0 };
    ds4_error err = { "" };
    gguf_file *f = gguf_open(model, &err);
    if (!f || info->n_expert < 1 || info->n_expert_used < 1) {
        gguf_close(f);
        return b;
    }
    double embd = 0;
    for (size_t i = 0; i < gguf_n_tensors(f); i++)
        if (!strcmp(gguf_tensor_at(f, i)->name, "token_embd.weight")) embd = (double)gguf_tensor_at(f, i)->nbytes;
    gguf_close(f);
    b.experts = (double)info->expert_bytes;
    b.dense = (double)info->weights_bytes - b.experts - embd;
    b.n_expert = info->n_expert;
    b.used = info->n_expert_used;
    return b;
}

/* The aggregate rate a step of B tokens could reach over B = 1 if it
 * took time in proportion to the bytes it reads: the dense weights once,
 * and each routed expert once for the tokens that chose it, expected
 * under uniform routing (n_expert·(1 − (1 − k/n_expert)^B) distinct
 * experts a layer; skewed routing shares more). 0 when unknown. */
static double read_ceiling(const step_bytes *b, int B)
{
    if (b->n_expert < 1) return 0;
    const double E = b->n_expert, k = b->used, X = b->experts;
    const double distinct = E * (1.0 - pow(1.0 - k / E, B));
    return B * (b->dense + X * k / E) / (b->dense + X * distinct / E);
}

static double load_avg(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

int bench_batch_main(int argc, char **argv)
{
    bb_opts o;
    if (parse(argc, argv, &o)) return 2;
    ds4_error err = { "" };
    ds4_engine_options eo = { .model_path = o.model, .threads = o.threads, .quant_sim = DS4_QSIM_FULL,
                              .backend = strcmp(o.backend, "opencl") ? DS4_BACKEND_CPU : DS4_BACKEND_OPENCL };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        return 1;
    }
    ds4_model_info info;
    ds4_engine_info(e, &info);
    char cpu[256];
    cpu_name(cpu, sizeof cpu);
    double load0 = load_avg();
    fprintf(stderr, "ds4cl-bench: %s, %d layers, on %s (%s); %ld prompt + %ld decode tokens per session, %ld rounds\n",
            info.name, info.n_layer, o.backend, cpu, o.prompt, o.gen, o.rounds);
    bb_row rows[16] = { 0 };
    for (long round = 0; round < o.rounds; round++)
        for (int i = 0; i < o.n_batches; i++) {
            int k = round % 2 ? o.n_batches - 1 - i : i; /* alternate the order */
            if (run_one(e, &o, o.batches[k], &rows[k], &err)) {
                fprintf(stderr, "ds4cl-bench: batch %d: %s\n", o.batches[k], err.msg);
                ds4_engine_close(e);
                return 1;
            }
        }
    double load1 = load_avg();
    ds4_engine_close(e);
    printf("model,backend,cpu,threads,load_before,load_after,batch,batched,prompt,gen,step_ms,aggregate_tps,"
           "per_session_tps,vs_batch_1,cpu_ms_per_token,cpu_vs_batch_1,read_ceiling_vs_batch_1,pct_of_ceiling\n");
    double base = rows[0].agg_tps / o.batches[0];
    step_bytes sb = step_bytes_of(o.model, &info);
    for (int i = 0; i < o.n_batches; i++) {
        double ceiling = read_ceiling(&sb, o.batches[i]) / read_ceiling(&sb, o.batches[0]);
        printf("%s,%s,%s,%d,%.2f,%.2f,%d,%s,%ld,%ld,%.2f,%.3f,%.3f,%.2f,%.1f,%.2f,%.2f,%.0f\n", info.name, o.backend,
               cpu, o.threads, load0, load1, o.batches[i], rows[i].batched ? "yes" : "no", o.prompt, o.gen,
               rows[i].step_ms, rows[i].agg_tps, rows[i].agg_tps / o.batches[i], rows[i].agg_tps / base, rows[i].cpu_ms,
               rows[i].cpu_ms / rows[0].cpu_ms, ceiling, 100.0 * rows[i].agg_tps / base / ceiling);
    }
    return 0;
}
