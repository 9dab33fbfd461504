/* bench_speed.c — `ds4cl-bench -m MODEL --prompt-file F --ctx-start A
 * --ctx-max B --step S --gen-tokens G`: prefill and decode speed as the
 * context grows, one CSV row per frontier.
 *
 * At each frontier f = A, A+S, … ≤ B the session is extended to the first
 * f tokens of the prompt (the file's text tokenized, repeated as needed):
 * prefill_tps counts the tokens added since the previous frontier. Then G
 * greedy tokens are decoded (decode_tps) and dropped again (a cheap rewind).
 * weights_bytes_per_token is what one decode step must read: every weight
 * except the embedding table (one row) and the routed experts (only the
 * used ones of each layer); decode_gbps is that at decode_tps, next to
 * ceiling_gbps, a streaming read of memory (twice the bytes of a decode
 * step, 256 MiB to 1 GiB) measured in the same process right before and
 * right after the decode steps of that row, the higher reading.
 * kv_bytes is the session state at the frontier. The model file is read
 * into memory first, as ds4cl does before its first prompt (page_warm.h):
 * decode then reads weights from memory, not from disk (a decode step
 * otherwise faults in the embedding row of every token never seen).
 *
 * Prefill is compute bound: prefill_gflops counts the arithmetic of the
 * tokens added (2 per multiply-add: every matrix a token passes through,
 * the routed experts it uses, attention over the rows it sees, indexer
 * scores, and the output head once for the last token) per second, next to
 * peak_gflops, an f32 FMA probe on the same hardware in the same run
 * (host threads, or the OpenCL device). launches_per_token counts OpenCL
 * kernels enqueued per decode step (empty on the CPU).
 *
 * --chunk N prefills in chunks of N tokens instead of the backend's own.
 * --cl-profile (OpenCL) times every launch on the device and prints, on
 * stderr, the kernels of each frontier's prefill and of its decode steps
 * (per step) summed per kernel and global size, next to the wall time. */
#include "bench/bench_engine.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "bench/bench_peak.h"
#include "bench/bench_quant.h"
#include "cli/page_warm.h"
#include "engine/backend.h"
#include "engine/ds4.h"
#include "engine/forward.h"
#include "cpu/threadpool.h"
#include "opencl/cl_ops.h"

typedef struct {
    const char *model, *prompt_file;
    long ctx_start, ctx_max, step, gen, chunk;
    int threads;
    ds4_backend backend;
    ds4_quant_sim qsim;
    bool ocl_profile;
} speed_opts;

static int usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "ds4cl-bench: ");
    fprintf(stderr, fmt, arg);
    fputs("\nusage: ds4cl-bench -m MODEL --prompt-file F --ctx-start A --ctx-max B --step S --gen-tokens G\n"
          "                   [--backend cpu|opencl] [--threads T] [--quant-sim full|f16kv|none]\n"
          "                   [--chunk N] [--cl-profile]\n",
          stderr);
    return 2;
}

static int parse(int argc, char **argv, speed_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cl-profile")) {
            o->ocl_profile = true;
            continue;
        }
        if (!v) return usage("option '%s' needs a value", a);
        i++;
        long n;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--prompt-file")) o->prompt_file = v;
        else if (!strcmp(a, "--ctx-start")) {
            if (num_parse_long(v, 1, 1L << 24, &o->ctx_start, NULL)) return usage("--ctx-start wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--ctx-max")) {
            if (num_parse_long(v, 1, 1L << 24, &o->ctx_max, NULL)) return usage("--ctx-max wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--step")) {
            if (num_parse_long(v, 1, 1L << 24, &o->step, NULL)) return usage("--step wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--gen-tokens")) {
            if (num_parse_long(v, 0, 1L << 20, &o->gen, NULL)) return usage("--gen-tokens wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--chunk")) {
            if (num_parse_long(v, 1, 1L << 16, &o->chunk, NULL)) return usage("--chunk wants a token count, not '%s'", v);
        } else if (!strcmp(a, "--threads")) {
            if (num_parse_long(v, 1, 1024, &n, NULL)) return usage("--threads wants 1..1024, not '%s'", v);
            o->threads = (int)n;
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
            return usage("unexpected argument '%s'", a);
        }
    }
    if (!o->model || !o->prompt_file || !o->ctx_start || !o->ctx_max || !o->step)
        return usage("%s", "needs -m, --prompt-file, --ctx-start, --ctx-max, --step and --gen-tokens");
    if (o->ctx_start > o->ctx_max) return usage("%s", "--ctx-start is larger than --ctx-max");
    if (o->ocl_profile && o->backend != DS4_BACKEND_OPENCL) return usage("%s", "--cl-profile needs --backend opencl");
    return 0;
}

/* Bytes one decode step reads (see the file comment). */
static uint64_t decode_weight_bytes(const ds4_model *m)
{
    const ds4_hparams *hp = &m->hp;
    uint64_t b = 0;
    const gguf_file *f = m->file;
    for (size_t i = 0; i < gguf_n_tensors(f); i++) b += gguf_tensor_at(f, i)->nbytes;
    b -= m->token_embd.nbytes - m->token_embd.row_bytes;
    for (int l = 0; l < hp->n_layer; l++) {
        const ds4_layer *L = &m->layers[l];
        const ds4_tensor *ex[] = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
        for (int k = 0; k < 3; k++)
            b -= ex[k]->nbytes - ex[k]->nbytes / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
        if (ds4_tensor_present(&L->tid2eid)) b -= L->tid2eid.nbytes - L->tid2eid.row_bytes;
    }
    return b;
}

static double elems(const ds4_tensor *t)
{
    if (!ds4_tensor_present(t) || t->n_dims < 2) return 0;
    return (double)t->ne[0] * (double)t->ne[1] * (double)(t->n_dims > 2 ? t->ne[2] : 1);
}

/* Multiply-adds of the matrices one token passes through (output head
 * apart: it runs once per chunk). */
static double token_macs(const ds4_model *m)
{
    const ds4_hparams *hp = &m->hp;
    double n = elems(&m->output_hc_fn);
    for (int l = 0; l < hp->n_layer; l++) {
        const ds4_layer *L = &m->layers[l];
        const ds4_tensor *all[] = { &L->hc_attn_fn, &L->attn_q_a, &L->attn_q_b, &L->attn_kv, &L->attn_output_a,
                                    &L->attn_output_b, &L->comp_kv, &L->comp_gate, &L->idx_q_b, &L->idx_proj,
                                    &L->idx_comp_kv, &L->idx_comp_gate, &L->hc_ffn_fn, &L->ffn_gate_inp,
                                    &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_down_shexp };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) n += elems(all[i]);
        const ds4_tensor *ex[] = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
        for (int k = 0; k < 3; k++) n += elems(ex[k]) * hp->n_expert_used / hp->n_expert;
    }
    return n;
}

/* FLOP of prefilling positions [a, b) (see the file comment). */
static double prefill_flop(const ds4_model *m, long a, long b)
{
    const ds4_hparams *hp = &m->hp;
    double f = 2 * token_macs(m) * (double)(b - a);
    f += b > a ? 2 * elems(&m->output) : 0; /* the last token's logits */
    const double per_row = 4.0 * hp->n_head * hp->head_dim, per_score = 2.0 * hp->n_indexer_head * hp->indexer_head_dim;
    for (long p = a; p < b; p++)
        for (int l = 0; l < hp->n_layer; l++) {
            const int R = hp->compress_ratio[l];
            double rows = (double)(p + 1 < hp->n_swa ? p + 1 : hp->n_swa);
            if (R == 4) {
                rows += (double)(p / 4 < hp->indexer_top_k ? p / 4 : hp->indexer_top_k);
                f += per_score * (double)(p / 4);
            } else if (R > 0) {
                rows += (double)(p / R);
            }
            f += per_row * rows;
        }
    return f;
}

static uint64_t ocl_launches(const ds4_engine *e)
{
    if (e->opt.backend != DS4_BACKEND_OPENCL) return 0;
    return clrt_get_stats(clo_runtime(fwd_ops_ctx(fwd_of(e)))).launches;
}

/* --cl-profile: the device time of the launches since the last call, per
 * kernel and global size, on stderr (per call of `per`: a decode step). */
static int print_profile(const ds4_engine *e, const char *what, long frontier, double wall_ms, long per)
{
    clrt *rt = clo_runtime(fwd_ops_ctx(fwd_of(e)));
    clrt_prof_row *rows;
    int n;
    if (clrt_profile_take(rt, &rows, &n) != 0) {
        fprintf(stderr, "ds4cl-bench: %s\n", clrt_error(rt));
        return -1;
    }
    double total = 0;
    uint64_t launches = 0;
    for (int i = 0; i < n; i++) {
        total += rows[i].ms;
        launches += rows[i].count;
    }
    fprintf(stderr,
            "# profile %s, frontier %ld: %llu launches, %.1f ms of kernels in %.1f ms wall (%.1f %%)%s\n"
            "kernel,count,ms,pct\n",
            what, frontier, (unsigned long long)launches, total / (double)per, wall_ms / (double)per,
            wall_ms > 0 ? 100 * total / wall_ms : 0, per > 1 ? ", per step" : "");
    for (int i = 0; i < n; i++)
        fprintf(stderr, "\"%s\",%.2f,%.3f,%.1f\n", rows[i].key, (double)rows[i].count / (double)per,
                rows[i].ms / (double)per, total > 0 ? 100 * rows[i].ms / total : 0);
    free(rows);
    return 0;
}

static int32_t argmax(const float *v, int n)
{
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The FMA peak of the hardware the backend computes on. */
static double fma_peak_gflops(ds4_backend backend, int threads)
{
    return backend == DS4_BACKEND_OPENCL ? bench_cl_fma_gflops(NULL) : bench_host_fma_gflops(threads);
}

int bench_speed_main(int argc, char **argv)
{
    speed_opts o = { .backend = DS4_BACKEND_CPU, .qsim = DS4_QSIM_FULL };
    if (parse(argc, argv, &o)) return 2;
    size_t text_len;
    char *text = file_read_all(o.prompt_file, &text_len);
    if (!text) {
        fprintf(stderr, "ds4cl-bench: cannot read %s: %s\n", o.prompt_file, strerror(errno));
        return 1;
    }
    ds4_error err = { "" };
    ds4_engine_options eo = { .model_path = o.model, .backend = o.backend, .threads = o.threads, .quant_sim = o.qsim };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        free(text);
        return 1;
    }
    int rc = 1;
    ds4_tokens base = { 0 }, ids = { 0 };
    ds4_session *s = NULL;
    bench_read_probe *probe = NULL;
    page_warm_stats ws;
    ds4_error werr = { "" };
    if (page_warm(o.model, NULL, NULL, &ws, &werr) != 0)
        fprintf(stderr, "ds4cl-bench: %s (the weights are read on first use instead)\n", werr.msg);
    else
        fprintf(stderr, "ds4cl-bench: model file in memory (%.2f of %.2f GB already were; %.0f ms)\n",
                (double)ws.resident_before / 1e9, (double)ws.bytes / 1e9, ws.ms);
    const ds4_tokenizer *tok = ds4_engine_tokenizer(e);
    ds4_tokenize(tok, text, text_len, &base);
    if (!base.n) {
        fprintf(stderr, "ds4cl-bench: %s holds no text\n", o.prompt_file);
        goto out;
    }
    ds4_tokens_push(&ids, ds4_token_special(tok, DS4_TOK_BOS));
    while (ids.n < (size_t)o.ctx_max) ds4_tokens_append(&ids, base.ids, base.n);
    ds4_tokens_truncate(&ids, (size_t)o.ctx_max);
    if (o.chunk > 0 && fwd_of(e)) fwd_set_chunk(fwd_of(e), (int)o.chunk);
    s = ds4_session_open(e, (int)(o.ctx_max + o.gen), &err);
    if (!s) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        goto out;
    }
    ds4_model_info info;
    ds4_engine_info(e, &info);
    int threads = o.threads > 0 ? o.threads : tp_cpu_count();
    uint64_t wbytes = e->model ? decode_weight_bytes(e->model) : info.weights_bytes;
    /* well past the caches, up to 1 GiB */
    uint64_t probe_bytes = 2 * wbytes < (256u << 20) ? (256u << 20) : 2 * wbytes > (1u << 30) ? (1u << 30) : 2 * wbytes;
    probe = bench_read_probe_open((size_t)probe_bytes);
    if (!probe) {
        fprintf(stderr, "ds4cl-bench: no memory for the %llu-byte read probe\n", (unsigned long long)probe_bytes);
        goto out;
    }
    fprintf(stderr, "ds4cl-bench: %s on %s, %.2f GB read per decode token, %.2f GFLOP per prefill token\n",
            info.name, info.device_name, (double)wbytes / 1e9, e->model ? 2 * token_macs(e->model) / 1e9 : 0.0);
    puts("backend,frontier,prefill_tps,decode_tps,weights_bytes_per_token,decode_gbps,ceiling_gbps,kv_bytes,"
         "decode_pct_ceiling,prefill_gflops,peak_gflops,prefill_pct_peak,launches_per_token");
    fflush(stdout);
    if (o.ocl_profile && clrt_profile(clo_runtime(fwd_ops_ctx(fwd_of(e))), true) != 0) {
        fprintf(stderr, "ds4cl-bench: %s\n", clrt_error(clo_runtime(fwd_ops_ctx(fwd_of(e)))));
        goto out;
    }
    long prev = 0;
    for (long f = o.ctx_start; f <= o.ctx_max; f += o.step) {
        /* the compute peak, like the read ceiling below, is read just
         * before and just after the prefill it is set against, the higher
         * reading kept: a probe that met a busy moment reads low, and the
         * prefill beside it would look closer to the peak than it is */
        double peak = fma_peak_gflops(o.backend, threads);
        double t0 = base_now_ms();
        if (ds4_session_sync(s, ids.ids, (size_t)f, NULL, &err) != DS4_OK) goto fail;
        double prefill_s = (base_now_ms() - t0) / 1000.0;
        double peak_after = fma_peak_gflops(o.backend, threads);
        if (peak_after > peak) peak = peak_after;
        if (o.ocl_profile && print_profile(e, "prefill", f, prefill_s * 1000.0, 1) != 0) goto out;
        uint64_t kv = ds4_session_kv_bytes(s);
        uint64_t launches0 = ocl_launches(e);
        /* the ceiling is read just before and just after the decode steps,
         * and the higher reading kept: a roof, measured at the same moment */
        double ceiling = bench_read_probe_gbps(probe, threads, 3);
        double t1 = base_now_ms();
        for (long g = 0; g < o.gen; g++) {
            int32_t next = argmax(ds4_session_logits(s), info.n_vocab);
            if (ds4_session_eval(s, next, NULL, &err) != DS4_OK) goto fail;
        }
        double decode_s = (base_now_ms() - t1) / 1000.0;
        double after = bench_read_probe_gbps(probe, threads, 3);
        if (after > ceiling) ceiling = after;
        if (o.ocl_profile && o.gen > 0 && print_profile(e, "decode", f, decode_s * 1000.0, o.gen) != 0) goto out;
        uint64_t launches = ocl_launches(e) - launches0;
        double ptps = prefill_s > 0 ? (double)(f - prev) / prefill_s : 0;
        double dtps = decode_s > 0 ? (double)o.gen / decode_s : 0;
        double gbps = (double)wbytes * dtps / 1e9;
        double gflops = e->model && prefill_s > 0 ? prefill_flop(e->model, prev, f) / prefill_s / 1e9 : 0;
        char per_token[32] = "";
        if (o.backend == DS4_BACKEND_OPENCL && o.gen > 0)
            snprintf(per_token, sizeof per_token, "%.0f", (double)launches / (double)o.gen);
        printf("%s,%ld,%.2f,%.3f,%llu,%.2f,%.2f,%llu,%.1f,%.2f,%.2f,%.1f,%s\n", info.backend_name, f, ptps, dtps,
               (unsigned long long)wbytes, gbps, ceiling, (unsigned long long)kv, ceiling > 0 ? 100 * gbps / ceiling : 0,
               gflops, peak, peak > 0 ? 100 * gflops / peak : 0, per_token);
        fflush(stdout);
        prev = f;
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
out:
    bench_read_probe_close(probe);
    ds4_session_close(s);
    ds4_tokens_free(&base);
    ds4_tokens_free(&ids);
    ds4_engine_close(e);
    free(text);
    return rc;
}
