/* bench_mpi.c — decode on rank 0 alone against the same model split over
 * the MPI job's ranks (bench_mpi.h). Both engines are open at once and the
 * runs alternate, so that load on the machine falls on both alike; the
 * best run of each counts. On one machine the ranks share the cores and
 * only one rank computes at a time, so the ratio is the split's own cost:
 * the hand-overs and the waits for messages. */
#include "bench/bench_mpi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/ds4.h"

#ifdef DS4CL_MPI
#include "mpi/dmpi.h"
#endif

typedef struct {
    const char *model;
    int threads, prompt, gen, reps;
    ds4_backend backend;
    ds4_quant_sim qsim;
} mb_opts;

static int usage(const char *what)
{
    fprintf(stderr, "ds4cl-bench: %s\n"
                    "usage: mpirun -np N ds4cl-bench --mpi-bench -m MODEL [--prompt-tokens P] [--gen-tokens G]\n"
                    "                   [--reps R] [--threads T] [--backend cpu|opencl] [--quant-sim full|f16kv|none]\n",
            what);
    return 2;
}

static int parse(int argc, char **argv, mb_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--mpi-bench")) continue;
        if (!v) return usage("an option needs a value");
        i++;
        int bad = 0;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--prompt-tokens")) bad = num_parse_int(v, 1, 1 << 20, &o->prompt, NULL);
        else if (!strcmp(a, "--gen-tokens")) bad = num_parse_int(v, 1, 1 << 20, &o->gen, NULL);
        else if (!strcmp(a, "--reps")) bad = num_parse_int(v, 1, 100, &o->reps, NULL);
        else if (!strcmp(a, "--threads")) bad = num_parse_int(v, 1, 1024, &o->threads, NULL);
        else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu")) o->backend = DS4_BACKEND_CPU;
            else if (!strcmp(v, "opencl")) o->backend = DS4_BACKEND_OPENCL;
            else bad = 1;
        } else if (!strcmp(a, "--quant-sim")) {
            if (!strcmp(v, "full")) o->qsim = DS4_QSIM_FULL;
            else if (!strcmp(v, "f16kv")) o->qsim = DS4_QSIM_F16KV;
            else if (!strcmp(v, "none")) o->qsim = DS4_QSIM_NONE;
            else bad = 1;
        } else {
            return usage("unknown option for --mpi-bench");
        }
        if (bad) return usage("a value out of range");
    }
    return o->model ? 0 : usage("--mpi-bench needs -m MODEL");
}

#ifdef DS4CL_MPI
static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

typedef struct {
    double tok_s;
    dmpi_stats moved; /* what the decode steps alone moved */
} mb_run;

/* A prefill of o->prompt tokens, then o->gen greedy decode steps, timed. */
static int decode_run(ds4_engine *e, const mb_opts *o, mb_run *out, ds4_error *err)
{
    int n_vocab = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *s = ds4_session_open(e, o->prompt + o->gen + 1, err);
    if (!s) return -1;
    ds4_tokens ids = { 0 };
    for (int i = 0; i < o->prompt; i++) ds4_tokens_push(&ids, (int32_t)((i * 7919 + 13) % n_vocab));
    int rc = ds4_session_sync(s, ids.ids, ids.n, NULL, err) == DS4_OK ? 0 : -1;
    dmpi_stats a, b;
    dmpi_get_stats(&a);
    double t0 = base_now_ms();
    for (int i = 0; i < o->gen && rc == 0; i++) {
        int32_t next = argmax(ds4_session_logits(s), n_vocab);
        if (ds4_session_eval(s, next, NULL, err) != DS4_OK) rc = -1;
    }
    double ms = base_now_ms() - t0;
    dmpi_get_stats(&b);
    out->tok_s = ms > 0 ? o->gen * 1000.0 / ms : 0;
    out->moved = (dmpi_stats){ .ranks = b.ranks, .chunks = b.chunks - a.chunks, .tokens = b.tokens - a.tokens,
                               .hops = b.hops - a.hops, .bytes = b.bytes - a.bytes, .ms = b.ms - a.ms };
    ds4_tokens_free(&ids);
    ds4_session_close(s);
    return rc;
}

static ds4_engine *open_engine(const mb_opts *o, ds4_error *err)
{
    ds4_engine_options eo = { .model_path = o->model, .backend = o->backend, .threads = o->threads, .quant_sim = o->qsim };
    return ds4_engine_open(&eo, err);
}

static int run(const mb_opts *o)
{
    ds4_error err = { "" };
    if (dmpi_ranks() < 2) return usage("--mpi-bench runs under mpirun -np N, N >= 2");
    ds4_engine *one = open_engine(o, &err), *split = one ? open_engine(o, &err) : NULL;
    int rc = one && split && dmpi_attach(split, &err) == 0 ? 0 : 1;
    mb_run best1 = { 0 }, bestn = { 0 };
    for (int r = 0; r < o->reps && rc == 0; r++) {
        mb_run a, b;
        if (decode_run(one, o, &a, &err) != 0 || decode_run(split, o, &b, &err) != 0) {
            rc = 1;
            break;
        }
        if (a.tok_s > best1.tok_s) best1 = a;
        if (b.tok_s > bestn.tok_s) bestn = b;
    }
    if (rc == 0) {
        int n = dmpi_ranks();
        double per_tok = bestn.moved.tokens ? (double)bestn.moved.bytes / (double)bestn.moved.tokens : 0;
        double hops = bestn.moved.tokens ? (double)bestn.moved.hops / (double)bestn.moved.tokens : 0;
        double over = best1.tok_s > 0 && bestn.tok_s > 0 ? 1000.0 / bestn.tok_s - 1000.0 / best1.tok_s : 0;
        printf("model,backend,threads,ranks,split,prompt,gen,decode_tok_s,ratio,bytes_per_token,hops_per_token,"
               "overhead_ms_per_token,ms_per_hop\n");
        printf("%s,%s,%d,1,-,%d,%d,%.2f,1.000,0,0,0,0\n", o->model, ds4_backend_name(o->backend), o->threads, o->prompt,
               o->gen, best1.tok_s);
        printf("%s,%s,%d,%d,\"%s\",%d,%d,%.2f,%.3f,%.0f,%.1f,%.3f,%.3f\n", o->model, ds4_backend_name(o->backend),
               o->threads, n, dmpi_split_text(), o->prompt, o->gen, bestn.tok_s,
               best1.tok_s > 0 ? bestn.tok_s / best1.tok_s : 0, per_tok, hops, over, hops > 0 ? over / hops : 0);
    } else {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
    }
    ds4_engine_close(split);
    ds4_engine_close(one);
    return rc;
}
#endif

int bench_mpi_main(int argc, char **argv)
{
    mb_opts o = { .threads = 1, .prompt = 64, .gen = 32, .reps = 3, .backend = DS4_BACKEND_CPU, .qsim = DS4_QSIM_FULL };
    int rc = parse(argc, argv, &o);
    if (rc) return rc;
#ifdef DS4CL_MPI
    return run(&o);
#else
    return usage("--mpi-bench needs a build with MPI (make MPI=1)");
#endif
}
