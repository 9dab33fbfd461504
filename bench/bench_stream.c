/* bench_stream.c — `ds4cl-bench --stream-bench`: decode with the routed
 * experts read from the file through an expert cache (engine/
 * expert_cache.h) at several budgets, against the plain mapping read cold
 * (what a page cache that cannot hold the file amounts to at first touch)
 * and the resident mapping, with the disk's own sequential read rate
 * measured in the same run.
 *
 * Each row prefills P tokens, decodes W (not measured: the cache then
 * holds what decoding uses) and measures G more.
 *
 * Before each row this file's pages are dropped from the page cache
 * (posix_fadvise DONTNEED: this file only, so other work on the machine
 * keeps its cache), so every row starts from disk. Bytes from disk come
 * from the process's own I/O accounting (/proc/self/io read_bytes), which
 * counts direct reads and page faults alike.
 *
 * CSV on stdout, one row per (model, row):
 *   model,row,budget_pct,cache_bytes,prefill_tps,decode_tps,hit_rate,
 *   disk_bytes_per_token,read_gbps_while_missing,disk_seq_gbps
 * hit_rate and read_gbps_while_missing are the cache's (empty for the
 * mapping rows); the latter is the bytes the cache read over the time its
 * reads were in flight. */
#include "bench/bench_stream.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/page_warm.h"
#include "engine/expert_cache.h"
#include "engine/gguf.h"
#include "engine/model.h"

#define MAX_MODELS 8

typedef struct {
    const char *models[MAX_MODELS];
    int n_models;
    int budgets[16], n_budgets;
    int prompt_tokens, warm_tokens, gen_tokens, threads;
} stream_opts;

static int usage(void)
{
    fputs("usage: ds4cl-bench --stream-bench -m MODEL [-m MODEL …] [--budgets 10,25,50,100]\n"
          "                   [--prompt-tokens P] [--warm-tokens W] [--gen-tokens G] [--threads T]\n",
          stderr);
    return 2;
}

static void drop_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

/* Bytes this process has caused to be read from storage. */
static uint64_t io_read_bytes(void)
{
    char *t = file_read_all("/proc/self/io", NULL);
    const char *p = t ? strstr(t, "read_bytes:") : NULL;
    uint64_t v = p ? strtoull(p + 11, NULL, 10) : 0;
    free(t);
    return v;
}

/* GB/s of one sequential pass over (up to 4 GiB of) the file, cold. */
static double disk_seq_gbps(const char *path)
{
    drop_file(path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    bool direct = fd >= 0;
    if (!direct) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t chunk = 8u << 20;
    void *buf = NULL;
    if (posix_memalign(&buf, 4096, chunk) != 0) {
        close(fd);
        return 0;
    }
    uint64_t total = 0, cap = 4ull << 30;
    double t0 = base_now_ms();
    for (;;) {
        ssize_t r = pread(fd, buf, chunk, (off_t)total);
        if (r <= 0) break;
        total += (uint64_t)r;
        if (total >= cap) break;
    }
    double ms = base_now_ms() - t0;
    free(buf);
    close(fd);
    if (!direct) drop_file(path);
    return ms > 0 ? (double)total / ms / 1e6 : 0;
}

static void random_ids(int32_t *ids, int n, int n_vocab, uint32_t seed)
{
    uint32_t x = seed;
    for (int i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        ids[i] = (int32_t)(x % (uint32_t)n_vocab);
    }
}

typedef struct {
    double prefill_tps, decode_tps, hit_rate, bytes_per_token, read_gbps;
    bool has_cache;
} row_result;

/* One row: open (with a cache of `budget` bytes, or none), prefill, then
 * decode gen_tokens one at a time. */
static int run_row(const stream_opts *o, const char *path, uint64_t budget, bool warm, row_result *out,
                   ds4_error *err)
{
    memset(out, 0, sizeof *out);
    drop_file(path);
    if (warm && page_warm(path, NULL, NULL, NULL, err) != 0) return -1;
    ds4_engine_options eo = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = o->threads,
                              .expert_cache = budget };
    ds4_engine *e = ds4_engine_open(&eo, err);
    if (!e) return -1;
    ds4_model_info info;
    ds4_engine_info(e, &info);
    int n = o->prompt_tokens + o->warm_tokens + o->gen_tokens;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    ds4_session *s = ids ? ds4_session_open(e, n + 8, err) : NULL;
    int rc = -1;
    if (!s) goto done;
    random_ids(ids, n, info.n_vocab, 12345);
    double t0 = base_now_ms();
    if (ds4_session_sync(s, ids, (size_t)o->prompt_tokens, NULL, err) != DS4_OK) goto done;
    double t1 = base_now_ms();
    /* decoded before measuring: the cache then holds what decoding uses
     * rather than what the prefill left */
    for (int i = o->prompt_tokens; i < o->prompt_tokens + o->warm_tokens; i++)
        if (ds4_session_eval(s, ids[i], NULL, err) != DS4_OK) goto done;
    double t1w = base_now_ms();
    const expert_cache *ec = expert_cache_of(e);
    expert_cache_info a = { 0 }, b = { 0 };
    if (ec) expert_cache_info_get(ec, &a);
    uint64_t io0 = io_read_bytes();
    for (int i = o->prompt_tokens + o->warm_tokens; i < n; i++)
        if (ds4_session_eval(s, ids[i], NULL, err) != DS4_OK) goto done;
    double t2 = base_now_ms();
    uint64_t io1 = io_read_bytes();
    out->prefill_tps = o->prompt_tokens / ((t1 - t0) / 1e3);
    out->decode_tps = o->gen_tokens / ((t2 - t1w) / 1e3);
    out->bytes_per_token = (double)(io1 - io0) / o->gen_tokens;
    if (ec) {
        expert_cache_info_get(ec, &b);
        uint64_t h = b.total.hits - a.total.hits, m = b.total.misses - a.total.misses;
        double ms = b.read_ms - a.read_ms;
        out->has_cache = true;
        out->hit_rate = h + m ? (double)h / (double)(h + m) : 1.0;
        out->read_gbps = ms > 0 ? (double)(b.total.bytes_read - a.total.bytes_read) / ms / 1e6 : 0;
    }
    rc = 0;
done:
    ds4_session_close(s);
    free(ids);
    ds4_engine_close(e);
    return rc;
}

static void print_row(const char *model, const char *row, int pct, uint64_t cache, const row_result *r, double seq)
{
    printf("%s,%s,", model, row);
    if (pct >= 0) printf("%d,%llu,", pct, (unsigned long long)cache);
    else printf(",,");
    printf("%.2f,%.3f,", r->prefill_tps, r->decode_tps);
    if (r->has_cache) printf("%.3f,", r->hit_rate);
    else printf(",");
    printf("%.0f,", r->bytes_per_token);
    if (r->has_cache) printf("%.2f,", r->read_gbps);
    else printf(",");
    printf("%.2f\n", seq);
    fflush(stdout);
}

static int bench_model(const stream_opts *o, const char *path)
{
    ds4_error err = { "" };
    gguf_file *f = gguf_open(path, &err);
    ds4_model *m = f ? model_bind(f, &err) : NULL;
    if (!m) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        gguf_close(f);
        return 1;
    }
    uint64_t slot = expert_cache_slot_bytes(m), n_exp = (uint64_t)m->hp.n_layer * (uint64_t)m->hp.n_expert;
    model_free(m);
    gguf_close(f);
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    double seq = disk_seq_gbps(path);
    row_result r;
    if (run_row(o, path, 0, false, &r, &err) != 0) goto fail;
    print_row(name, "mapped-cold", -1, 0, &r, seq);
    if (run_row(o, path, 0, true, &r, &err) != 0) goto fail;
    print_row(name, "resident", -1, 0, &r, seq);
    for (int i = 0; i < o->n_budgets; i++) {
        uint64_t slots = n_exp * (uint64_t)o->budgets[i] / 100;
        char row[32];
        snprintf(row, sizeof row, "cache-%d%%", o->budgets[i]);
        if (run_row(o, path, slots * slot, false, &r, &err) != 0) goto fail;
        print_row(name, row, o->budgets[i], slots * slot, &r, seq);
    }
    return 0;
fail:
    fprintf(stderr, "ds4cl-bench: %s: %s\n", name, err.msg);
    return 1;
}

static bool parse_budgets(const char *s, stream_opts *o)
{
    o->n_budgets = 0;
    while (*s && o->n_budgets < 16) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 100) return false;
        o->budgets[o->n_budgets++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return false;
    }
    return o->n_budgets > 0;
}

int bench_stream_main(int argc, char **argv)
{
    stream_opts o = { .budgets = { 10, 25, 50, 100 }, .n_budgets = 4, .prompt_tokens = 16, .gen_tokens = 16 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--stream-bench")) continue;
        if (!v) return usage();
        if (!strcmp(a, "-m") && o.n_models < MAX_MODELS) o.models[o.n_models++] = v;
        else if (!strcmp(a, "--budgets")) {
            if (!parse_budgets(v, &o)) return usage();
        } else if (!strcmp(a, "--prompt-tokens")) o.prompt_tokens = atoi(v);
        else if (!strcmp(a, "--gen-tokens")) o.gen_tokens = atoi(v);
        else if (!strcmp(a, "--warm-tokens")) o.warm_tokens = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else return usage();
        i++;
    }
    if (!o.n_models || o.prompt_tokens < 1 || o.gen_tokens < 1 || o.warm_tokens < 0) return usage();
    printf("model,row,budget_pct,cache_bytes,prefill_tps,decode_tps,hit_rate,disk_bytes_per_token,"
           "read_gbps_while_missing,disk_seq_gbps\n");
    int rc = 0;
    for (int i = 0; i < o.n_models; i++) rc |= bench_model(&o, o.models[i]);
    return rc;
}
