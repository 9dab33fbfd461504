/* bench_logits.c — `ds4cl-bench --logits`: raw f32 logits rows in the
 * golden files' layout, for comparing backends and numerics against a
 * reference. Row 0 is after prefilling all --token-ids; each further row
 * follows one more token: the greedy choice (--decode N) or the next of
 * --feed. The argmax of every row goes to stdout as a JSON array.
 * --load-session restores a snapshot before the prefill (which then
 * computes only what the snapshot lacks); --save-session writes one after
 * the last row. Under mpirun (an MPI build) the model is split over the
 * job's ranks. */
#include "bench/bench_engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/forward.h"

#ifdef DS4CL_MPI
#include "mpi/dmpi.h"
#endif

typedef struct {
    const char *out, *model, *load, *save;
    ds4_tokens ids, feed;
    int decode, threads, chunk;
    bool have_decode, have_feed;
    ds4_backend backend;
    ds4_quant_sim qsim;
} logits_opts;

static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "ds4cl-bench: ");
    fprintf(stderr, fmt, arg);
    fputs("\nusage: ds4cl-bench --logits OUT.f32 -m MODEL --token-ids 1,2,3 (--decode N | --feed 7,8,9)\n"
          "                   [--backend cpu|opencl] [--threads T] [--quant-sim full|f16kv|none] [--chunk N]\n"
          "                   [--load-session F] [--save-session F]\n",
          stderr);
    return 2;
}

static int parse_ids(const char *s, ds4_tokens *out)
{
    size_t cap = strlen(s) / 2 + 1; /* an id and its comma take two bytes at least */
    long *v = xmalloc(cap * sizeof *v);
    int n = num_parse_list(s, 0, INT32_MAX, v, (int)(cap < INT32_MAX ? cap : INT32_MAX), NULL);
    for (int i = 0; i < n; i++) ds4_tokens_push(out, (int32_t)v[i]);
    free(v);
    return n > 0 ? 0 : -1;
}

static int parse(int argc, char **argv, logits_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage("option '%s' needs a value", a);
        i++;
        if (!strcmp(a, "--logits")) o->out = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--load-session")) o->load = v;
        else if (!strcmp(a, "--save-session")) o->save = v;
        else if (!strcmp(a, "--token-ids")) {
            if (parse_ids(v, &o->ids)) return usage("--token-ids wants comma-separated ids, not '%s'", v);
        } else if (!strcmp(a, "--feed")) {
            if (parse_ids(v, &o->feed)) return usage("--feed wants comma-separated ids, not '%s'", v);
            o->have_feed = true;
        } else if (!strcmp(a, "--decode")) {
            if (num_parse_int(v, 0, 1 << 24, &o->decode, NULL)) return usage("--decode wants a count, not '%s'", v);
            o->have_decode = true;
        } else if (!strcmp(a, "--threads")) {
            if (num_parse_int(v, 1, 1024, &o->threads, NULL)) return usage("--threads wants 1..1024, not '%s'", v);
        } else if (!strcmp(a, "--chunk")) {
            if (num_parse_int(v, 1, 1 << 20, &o->chunk, NULL)) return usage("--chunk wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--backend")) {
            if (!strcmp(v, "cpu")) o->backend = DS4_BACKEND_CPU;
            else if (!strcmp(v, "opencl")) o->backend = DS4_BACKEND_OPENCL;
            else return usage("--backend wants cpu or opencl, not '%s'", v);
        } else if (!strcmp(a, "--quant-sim")) {
            if (!strcmp(v, "full")) o->qsim = DS4_QSIM_FULL;
            else if (!strcmp(v, "f16kv")) o->qsim = DS4_QSIM_F16KV;
            else if (!strcmp(v, "none")) o->qsim = DS4_QSIM_NONE;
            else return usage("--quant-sim wants full, f16kv or none, not '%s'", v);
        } else {
            return usage("unexpected argument '%s' for --logits", a);
        }
    }
    if (!o->out || !o->model || !o->ids.n) return usage("%s", "--logits needs OUT, -m MODEL and --token-ids");
    if (o->have_decode == o->have_feed) return usage("%s", "give exactly one of --decode N and --feed IDS");
    return 0;
}

static int32_t argmax(const float *v, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

int bench_logits_main(int argc, char **argv)
{
    logits_opts o = { .backend = DS4_BACKEND_CPU, .qsim = DS4_QSIM_FULL };
    int rc = parse(argc, argv, &o);
    if (rc) goto out_opts;
    rc = 1;
    ds4_error err = { "" };
    ds4_engine_options eo = { .model_path = o.model, .backend = o.backend, .threads = o.threads, .quant_sim = o.qsim };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        goto out_opts;
    }
    if (o.chunk > 0) {
        fwd_engine *f = fwd_of(e);
        if (!f) {
            fprintf(stderr, "ds4cl-bench: --chunk needs a backend with the layered forward pass\n");
            goto out_engine;
        }
        fwd_set_chunk(f, o.chunk);
    }
#ifdef DS4CL_MPI
    if (dmpi_attach(e, &err) != 0) {
        fprintf(stderr, "ds4cl-bench: cannot split the model over the MPI ranks: %s\n", err.msg);
        goto out_engine;
    }
#endif
    int steps = o.have_feed ? (int)o.feed.n : o.decode;
    int n_vocab = ds4_vocab_size(ds4_engine_tokenizer(e));
    ds4_session *s = ds4_session_open(e, (int)o.ids.n + steps, &err);
    if (!s) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        goto out_engine;
    }
    FILE *f = fopen(o.out, "wb");
    if (!f) {
        fprintf(stderr, "ds4cl-bench: cannot write %s: %s\n", o.out, strerror(errno));
        goto out_session;
    }
    strbuf json = { 0 };
    sb_putc(&json, '[');
    if (o.load && ds4_session_load(s, o.load, &err) != 0) goto fail;
    if (ds4_session_sync(s, o.ids.ids, o.ids.n, NULL, &err) != DS4_OK) goto fail;
    for (int k = 0;; k++) {
        const float *lg = ds4_session_logits(s);
        if (!lg || fwrite(lg, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab) {
            if (lg) snprintf(err.msg, sizeof err.msg, "cannot write %s: %s", o.out, strerror(errno));
            else snprintf(err.msg, sizeof err.msg, "no logits after %d steps", k);
            goto fail;
        }
        int32_t best = argmax(lg, n_vocab);
        sb_printf(&json, "%s%d", k ? "," : "", best);
        if (k == steps) break;
        int32_t next = o.have_feed ? o.feed.ids[k] : best;
        if (ds4_session_eval(s, next, NULL, &err) != DS4_OK) goto fail;
    }
    if (fclose(f) != 0) {
        f = NULL;
        snprintf(err.msg, sizeof err.msg, "cannot write %s: %s", o.out, strerror(errno));
        goto fail;
    }
    f = NULL;
    if (o.save && ds4_session_save(s, o.save, &err) != 0) goto fail;
    sb_putc(&json, ']');
    puts(sb_str(&json));
    rc = 0;
fail:
    if (rc) fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
    if (f) fclose(f);
    sb_free(&json);
out_session:
    ds4_session_close(s);
out_engine:
    ds4_engine_close(e);
out_opts:
    ds4_tokens_free(&o.ids);
    ds4_tokens_free(&o.feed);
    return rc;
}
