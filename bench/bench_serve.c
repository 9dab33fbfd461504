/* bench_serve.c — `ds4cl-bench --serve-bench`: time to first token and
 * decode tokens/s of one chat reply computed in this process, and of the
 * same reply asked of `ds4cl serve` (serve/serve.h, started here on the same
 * engine, over a loopback socket, streamed), in the same run.
 *
 * Both paths read the same prompt (a user turn of the prompt file's first
 * bytes, no tools, thinking off) into a fresh session and decode greedily
 * until G tokens or an end of turn, so they compute the same tokens. The
 * in-process path samples and evaluates as the server's worker does, less
 * the parser, the JSON and the socket: the ratio server / in-process is the
 * server's overhead. The runs alternate which path goes first, and the
 * best of each is kept. Beside the
 * wall-clock figures, the process CPU time of each: on a shared machine
 * the load stretches wall time, not the CPU time the work takes.
 *
 * With --parallel N: N such requests at once (their prompts begin
 * differently) against a server of N sessions, its decode steps shared
 * (serve/batch.c) or, alternating with it run by run, each session
 * stepping alone (no_batch); the best round of each is kept. */
#include "bench/bench_serve.h"

#include <arpa/inet.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "serve/serve.h"

typedef struct {
    double ttft_ms, decode_tps;
    double ttft_cpu_ms, decode_cpu_ms; /* process CPU time: to the first token, per decoded token */
    size_t prompt, gen;
} result;

/* CPU time of the whole process (every thread: the engine's pool, the
 * server's threads, this one): what the load of a shared machine distorts
 * least. */
static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int usage(void)
{
    fputs("usage: ds4cl-bench --serve-bench -m MODEL --prompt-file F [--prompt-bytes N] [--gen-tokens G]\n"
          "                   [--runs R] [--threads T] [--ctx N] [--parallel N]\n",
          stderr);
    return 2;
}

static bool never(void *ud)
{
    (void)ud;
    return false;
}

static int in_process(ds4_engine *e, int n_ctx, const char *text, int gen, result *r, ds4_error *err)
{
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, n_ctx, err);
    if (!s) return -1;
    double t0 = base_now_ms(), c0 = cpu_ms(), cfirst = 0;
    ds4_tokens p = { 0 };
    ds4_chat_begin(t, &p, DS4_THINK_NONE);
    ds4_chat_user(t, &p, text);
    ds4_chat_assistant_prefix(t, &p, DS4_THINK_NONE);
    /* cancellable, as the agent's and the server's reads are */
    ds4_callbacks cb = { .cancel = never, .ud = NULL };
    int rc = ds4_session_sync(s, p.ids, p.n, &cb, err) == DS4_OK ? 0 : -1;
    ds4_sampling sp = { .temperature = 0, .top_p = 1 };
    ds4_sampler *sm = ds4_sampler_new(&sp);
    int32_t stop[] = { ds4_token_special(t, DS4_TOK_EOS), ds4_token_special(t, DS4_TOK_BOS),
                       ds4_token_special(t, DS4_TOK_USER), ds4_token_special(t, DS4_TOK_ASSISTANT) };
    double first = 0;
    int n = 0;
    while (rc == 0 && n < gen) {
        int32_t id = ds4_sample(sm, ds4_session_logits(s), ds4_vocab_size(t), NULL, NULL);
        if (!n) {
            first = base_now_ms();
            cfirst = cpu_ms();
        }
        if (id == stop[0] || id == stop[1] || id == stop[2] || id == stop[3]) break;
        n++;
        if (ds4_session_eval(s, id, &cb, err) != DS4_OK) rc = -1;
    }
    double end = base_now_ms(), cend = cpu_ms();
    r->prompt = p.n;
    r->gen = (size_t)n;
    r->ttft_ms = first - t0;
    r->decode_tps = n > 1 ? (n - 1) / ((end - first) / 1000.0) : 0;
    r->ttft_cpu_ms = cfirst - c0;
    r->decode_cpu_ms = n > 1 ? (cend - cfirst) / (n - 1) : 0;
    ds4_sampler_free(sm);
    ds4_tokens_free(&p);
    ds4_session_close(s);
    return rc;
}

/* One streamed chat completion over HTTP/1.0 (no chunked framing). */
static int over_http(int port, const char *text, int gen, result *r)
{
    struct json_object *req = json_object_new_object(), *msgs = json_object_new_array(), *m = json_object_new_object(),
                       *so = json_object_new_object(), *th = json_object_new_object();
    json_object_object_add(m, "role", json_object_new_string("user"));
    json_object_object_add(m, "content", json_object_new_string(text));
    json_object_array_add(msgs, m);
    json_object_object_add(req, "messages", msgs);
    json_object_object_add(req, "stream", json_object_new_boolean(1));
    json_object_object_add(so, "include_usage", json_object_new_boolean(1));
    json_object_object_add(req, "stream_options", so);
    json_object_object_add(th, "type", json_object_new_string("disabled"));
    json_object_object_add(req, "thinking", th);
    json_object_object_add(req, "temperature", json_object_new_double(0));
    json_object_object_add(req, "max_tokens", json_object_new_int(gen));
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    strbuf msg = { 0 };
    sb_printf(&msg, "POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
              strlen(body), body);
    json_object_put(req);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    double t0 = base_now_ms(), first = 0, end = 0, c0 = cpu_ms(), cfirst = 0, cend = 0;
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, msg.s, msg.len) != (ssize_t)msg.len) {
        if (fd >= 0) close(fd);
        sb_free(&msg);
        return -1;
    }
    sb_free(&msg);
    strbuf in = { 0 };
    size_t scanned = 0;
    char buf[65536];
    ssize_t k;
    long completion = -1, prompt = -1;
    while ((k = read(fd, buf, sizeof buf)) > 0) {
        double now = base_now_ms(), cnow = cpu_ms();
        sb_append(&in, buf, (size_t)k);
        /* the first event carrying a token marks the first token */
        for (char *ev; (ev = strstr(in.s + scanned, "data: ")) && strstr(ev, "\n\n");) {
            char *stop = strstr(ev, "\n\n");
            *stop = 0;
            struct json_object *o = json_tokener_parse(ev + 6), *v, *u;
            if (o && !first && strstr(ev, "\"content\":\"") && !strstr(ev, "\"role\"")) {
                first = now;
                cfirst = cnow;
            }
            if (o && json_object_object_get_ex(o, "usage", &u)) {
                if (json_object_object_get_ex(u, "completion_tokens", &v)) completion = json_object_get_int(v);
                if (json_object_object_get_ex(u, "prompt_tokens", &v)) prompt = json_object_get_int(v);
            }
            if (!strcmp(ev + 6, "[DONE]")) {
                end = now;
                cend = cnow;
            }
            json_object_put(o);
            scanned = (size_t)(stop + 2 - in.s);
        }
    }
    close(fd);
    sb_free(&in);
    if (completion < 0 || !end) return -1;
    r->prompt = (size_t)prompt;
    r->gen = (size_t)completion;
    r->ttft_ms = (first ? first : end) - t0;
    r->decode_tps = completion > 1 && first ? (completion - 1) / ((end - first) / 1000.0) : 0;
    r->ttft_cpu_ms = (first ? cfirst : cend) - c0;
    r->decode_cpu_ms = completion > 1 && first ? (cend - cfirst) / (completion - 1) : 0;
    return 0;
}

typedef struct {
    int port, gen, rc;
    const char *text;
    result r;
} client;

static void *client_main(void *p)
{
    client *c = p;
    c->rc = over_http(c->port, c->text, c->gen, &c->r);
    return NULL;
}

/* One round: par requests at once on a server started for it. */
static int round_of(ds4_engine *e, int ctx, int par, bool no_batch, const char *text, long run, int gen,
                    double *wall, double *cpu, size_t *tokens)
{
    serve_config cfg = { .engine = e, .n_ctx = ctx, .quiet = true, .parallel = par, .no_batch = no_batch };
    ds4_error err = { "" };
    serve *s = serve_start(&cfg, &err);
    if (!s) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        return -1;
    }
    client c[16];
    pthread_t th[16];
    strbuf p[16] = { { 0 } };
    double t0 = base_now_ms(), c0 = cpu_ms();
    int rc = 0, started = 0;
    for (int k = 0; k < par; k++) {
        sb_printf(&p[k], "Run %ld, client %d. %s", run, k + 1, text);
        c[k] = (client){ .port = serve_port(s), .gen = gen, .text = p[k].s };
        if (pthread_create(&th[k], NULL, client_main, &c[k]) != 0) break;
        started++;
    }
    *tokens = 0;
    for (int k = 0; k < started; k++) {
        pthread_join(th[k], NULL);
        if (c[k].rc) rc = -1;
        *tokens += c[k].r.gen;
    }
    *wall = base_now_ms() - t0;
    *cpu = cpu_ms() - c0;
    if (started < par) rc = -1;
    for (int k = 0; k < par; k++) sb_free(&p[k]);
    serve_stop(s);
    return rc;
}

static int parallel_bench(ds4_engine *e, int ctx, int par, const char *text, long runs, int gen)
{
    /* best round of each mode: shared steps [0], each alone [1] */
    double wall[2] = { 1e30, 1e30 }, cpu[2] = { 1e30, 1e30 };
    size_t tokens[2] = { 0, 0 };
    for (long i = 0; i < runs; i++) {
        for (int o = 0; o < 2; o++) {
            int m = (int)((i + o) % 2);
            double w, c;
            size_t t;
            if (round_of(e, ctx, par, m == 1, text, i + 1, gen, &w, &c, &t) != 0) {
                fprintf(stderr, "ds4cl-bench: a round failed\n");
                return 1;
            }
            if (t && w / (double)t < (tokens[m] ? wall[m] / (double)tokens[m] : 1e30)) {
                wall[m] = w;
                cpu[m] = c;
                tokens[m] = t;
            }
        }
    }
    double load[3] = { 0, 0, 0 };
    getloadavg(load, 3);
    printf("mode,parallel,gen_tokens,wall_ms,tokens_per_s,cpu_ms_per_token,load1,tps_ratio\n");
    for (int m = 0; m < 2; m++) {
        double tps = tokens[m] ? (double)tokens[m] / (wall[m] / 1000.0) : 0;
        double tps0 = tokens[0] ? (double)tokens[0] / (wall[0] / 1000.0) : 0;
        printf("%s,%d,%zu,%.1f,%.2f,%.2f,%.2f,%.3f\n", m ? "no_batch" : "batched", par, tokens[m], wall[m], tps,
               tokens[m] ? cpu[m] / (double)tokens[m] : 0, load[0], tps0 > 0 ? tps / tps0 : 0);
    }
    return 0;
}

int bench_serve_main(int argc, char **argv)
{
    const char *model = NULL, *prompt_file = NULL;
    long bytes = 2000, gen = 32, runs = 3, threads = 0, ctx = 8192, par = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--serve-bench")) continue;
        if (!v) return usage();
        if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--prompt-file")) prompt_file = v;
        else {
            long *num = !strcmp(a, "--prompt-bytes") ? &bytes
                        : !strcmp(a, "--gen-tokens") ? &gen
                        : !strcmp(a, "--runs")       ? &runs
                        : !strcmp(a, "--threads")    ? &threads
                        : !strcmp(a, "--ctx")        ? &ctx
                        : !strcmp(a, "--parallel")   ? &par
                                                     : NULL;
            if (!num || num_parse_long(v, 0, 1L << 30, num, NULL)) return usage();
        }
        i++;
    }
    if (!model || !prompt_file || bytes < 1 || gen < 2 || runs < 1 || ctx < 64 || par > 16) return usage();
    size_t len = 0;
    char *text = file_read_all(prompt_file, &len);
    if (!text) {
        fprintf(stderr, "ds4cl-bench: cannot read %s\n", prompt_file);
        return 1;
    }
    if (len > (size_t)bytes) {
        size_t n = (size_t)bytes;
        while (n > 0 && ((unsigned char)text[n] & 0xc0) == 0x80) n--;
        text[n] = 0;
    }
    ds4_engine_options eo = { .model_path = model, .backend = DS4_BACKEND_CPU, .threads = (int)threads };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        free(text);
        return 1;
    }
    if (par > 0) {
        int prc = parallel_bench(e, (int)ctx, (int)par, text, runs, (int)gen);
        ds4_engine_close(e);
        free(text);
        return prc;
    }
    serve_config cfg = { .engine = e, .n_ctx = (int)ctx, .quiet = true };
    ds4_error serr = { "" };
    serve *s = serve_start(&cfg, &serr);
    if (!s) {
        fprintf(stderr, "ds4cl-bench: %s\n", serr.msg);
        ds4_engine_close(e);
        free(text);
        return 1;
    }
    result best[2] = { { 1e30, 0, 1e30, 1e30, 0, 0 }, { 1e30, 0, 1e30, 1e30, 0, 0 } };
    int rc = 0;
    for (long i = 0; i < runs && !rc; i++) {
        result r[2];
        /* each run's prompt begins differently, so that the server's
         * session reads all of it again, as a fresh one does */
        strbuf p = { 0 };
        sb_printf(&p, "Run %ld. %s", i + 1, text);
        /* the order alternates: the second of a pair runs on caches and a
         * page cache the first has just stirred */
        int bad = i % 2 ? over_http(serve_port(s), p.s, (int)gen, &r[1]) != 0 ||
                              in_process(e, (int)ctx, p.s, (int)gen, &r[0], &err) != 0
                        : in_process(e, (int)ctx, p.s, (int)gen, &r[0], &err) != 0 ||
                              over_http(serve_port(s), p.s, (int)gen, &r[1]) != 0;
        sb_free(&p);
        if (bad) {
            fprintf(stderr, "ds4cl-bench: a run failed: %s\n", err.msg);
            rc = 1;
            break;
        }
        for (int k = 0; k < 2; k++) {
            if (r[k].ttft_ms < best[k].ttft_ms) best[k].ttft_ms = r[k].ttft_ms;
            if (r[k].decode_tps > best[k].decode_tps) best[k].decode_tps = r[k].decode_tps;
            if (r[k].ttft_cpu_ms < best[k].ttft_cpu_ms) best[k].ttft_cpu_ms = r[k].ttft_cpu_ms;
            if (r[k].decode_cpu_ms < best[k].decode_cpu_ms) best[k].decode_cpu_ms = r[k].decode_cpu_ms;
            best[k].prompt = r[k].prompt;
            best[k].gen = r[k].gen;
        }
    }
    if (!rc) {
        printf("path,prompt_tokens,gen_tokens,ttft_ms,decode_tps,ttft_cpu_ms,decode_cpu_ms_per_token,"
               "ttft_ratio,decode_ratio,ttft_cpu_ratio,decode_cpu_ratio\n");
        for (int k = 0; k < 2; k++) {
            const result *b = &best[k], *a = &best[0];
            printf("%s,%zu,%zu,%.1f,%.2f,%.1f,%.2f,%.3f,%.3f,%.3f,%.3f\n", k ? "server" : "in_process", b->prompt, b->gen,
                   b->ttft_ms, b->decode_tps, b->ttft_cpu_ms, b->decode_cpu_ms, b->ttft_ms / a->ttft_ms,
                   a->decode_tps > 0 ? b->decode_tps / a->decode_tps : 0, b->ttft_cpu_ms / a->ttft_cpu_ms,
                   a->decode_cpu_ms > 0 ? b->decode_cpu_ms / a->decode_cpu_ms : 0);
        }
    }
    serve_stop(s);
    ds4_engine_close(e);
    free(text);
    return rc;
}
