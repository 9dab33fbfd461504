/* cmd_serve.c — `ds4cl serve`: the engine behind the HTTP APIs of
 * serve/serve.h until SIGTERM or SIGINT.
 *
 * The flags of the server itself are taken out here; the rest (model,
 * backend, context, sampling defaults, thinking) go through the common
 * option parser, so they mean what they mean for the agent. Signals are
 * blocked in every thread and taken by sigwait() in this one: the stop
 * (cancel the request in progress, save the snapshot cache) runs in
 * ordinary code, not in a handler. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/commands.h"
#include "cli/model_open.h"
#include "cli/preflight.h"
#include "serve/serve.h"

#define DEFAULT_CTX 65536

static void serve_help(void)
{
    fputs("usage: ds4cl serve [server options] [model, engine and generation options of ds4cl]\n"
          "\n"
          "OpenAI- (/v1/chat/completions, /v1/responses) and Anthropic-compatible (/v1/messages)\n"
          "HTTP APIs on the local model, plus GET /v1/models.\n"
          "\n"
          "server options:\n"
          "      --host H            address to listen on (default 127.0.0.1)\n"
          "      --port N            port (default 8000; 0 = any free port)\n"
          "      --api-key K         require K (Authorization: Bearer K or x-api-key: K)\n"
          "                          (default: $DS4CL_API_KEY when set)\n"
          "      --model-id NAME     the model's name in the APIs (default: the file's name)\n"
          "      --max-body BYTES    largest request body (default 32 MiB)\n"
          "      --timeout S         time limit for a request head, an idle connection and\n"
          "                          an upload (default 60)\n"
          "      --max-connections N open connections at most, more get 503 (default 64)\n"
          "      --keepalive S       SSE comment after S quiet seconds (default 5)\n"
          "      --cache-dir D       snapshot cache (default: the user cache directory)\n"
          "      --cache-max MIB     size of the snapshot cache (default 16384)\n"
          "      --no-cache          keep no snapshots on disk\n"
          "      --parallel N        N sessions (1..16), each keeping its own conversation's\n"
          "                          prefix; their decode tokens go to the engine as one\n"
          "                          step, their prompts in pieces between those steps\n"
          "      --no-batch          each session steps on its own (for comparison)\n"
          "      --quiet             no request log on stderr\n"
          "\n"
          "Also: -m FILE, --ctx N|auto, --backend, --device, --threads, --engine, --temp, --top-p,\n"
          "--top-k, --min-p, --seed, -n (default reply limit), --think/--nothink (default for\n"
          "requests that do not say). See ds4cl --help.\n",
          stdout);
}

typedef struct {
    serve_config cfg;
    bool no_cache;
    const char *cache_dir;
} serve_flags;

/* Takes one server flag at argv[*i] (with its value); 1 when taken, 0 when
 * not a server flag, -1 on a usage error. */
static int take_flag(int argc, char **argv, int *i, serve_flags *f)
{
    const char *a = argv[*i];
    static const char *const with_value[] = { "--host", "--port", "--api-key", "--model-id", "--max-body",
                                              "--timeout", "--max-connections", "--keepalive", "--cache-dir",
                                              "--cache-max", "--parallel", NULL };
    if (!strcmp(a, "--no-cache")) return f->no_cache = true, 1;
    if (!strcmp(a, "--quiet")) return f->cfg.quiet = true, 1;
    if (!strcmp(a, "--no-batch")) return f->cfg.no_batch = true, 1;
    const char *name = NULL, *val = NULL;
    for (size_t k = 0; with_value[k] && !name; k++) {
        size_t n = strlen(with_value[k]);
        if (!strncmp(a, with_value[k], n) && (a[n] == 0 || a[n] == '=')) {
            name = with_value[k];
            val = a[n] == '=' ? a + n + 1 : NULL;
        }
    }
    if (!name) return 0;
    if (!val) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "ds4cl serve: %s needs a value\n", name);
            return -1;
        }
        val = argv[++*i];
    }
    double v;
    serve_config *c = &f->cfg;
    if (!strcmp(name, "--host")) c->host = val;
    else if (!strcmp(name, "--api-key")) c->api_key = val;
    else if (!strcmp(name, "--model-id")) c->model_id = val;
    else if (!strcmp(name, "--cache-dir")) f->cache_dir = val;
    else if (!strcmp(name, "--port") && !num_parse_double(val, 0, 65535, &v, NULL)) c->port = (int)v;
    else if (!strcmp(name, "--max-body") && !num_parse_double(val, 1024, 1e12, &v, NULL)) c->max_body = (size_t)v;
    else if (!strcmp(name, "--timeout") && !num_parse_double(val, 1, 86400, &v, NULL)) c->timeout_s = (int)v;
    else if (!strcmp(name, "--max-connections") && !num_parse_double(val, 1, 100000, &v, NULL)) c->max_connections = (int)v;
    else if (!strcmp(name, "--keepalive") && !num_parse_double(val, 0.01, 3600, &v, NULL)) c->keepalive_s = v;
    else if (!strcmp(name, "--cache-max") && !num_parse_double(val, 1, 1e9, &v, NULL)) c->cache_max_bytes = (uint64_t)(v * 1048576.0);
    else if (!strcmp(name, "--parallel") && !num_parse_double(val, 1, 16, &v, NULL) && v == (int)v) c->parallel = (int)v;
    else {
        fprintf(stderr, "ds4cl serve: %s: '%s' is not a valid value\n", name, val);
        return -1;
    }
    return 1;
}

int cmd_serve(int argc, char **argv)
{
    serve_flags f = { 0 };
    f.cfg.port = 8000;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    int n = 0;
    rest[n++] = "ds4cl";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            serve_help();
            free(rest);
            return EXIT_DONE;
        }
        int t = take_flag(argc, argv, &i, &f);
        if (t < 0) {
            free(rest);
            return EXIT_USAGE;
        }
        if (!t) rest[n++] = argv[i];
    }
    ds4cl_options o;
    int rc = options_parse(n, rest, &o);
    free(rest);
    if (rc == 1) return EXIT_DONE;
    if (rc != 0) return EXIT_USAGE;
    if (o.mode != MODE_INTERACTIVE) {
        fputs("ds4cl serve: -p, --model-info, --dump-tokens, --list-devices and download are other modes\n", stderr);
        return EXIT_USAGE;
    }
    if (!f.cfg.api_key) {
        const char *k = getenv("DS4CL_API_KEY");
        if (k && *k) f.cfg.api_key = k;
    }
    char cache[4096];
    if (!f.no_cache) f.cfg.cache_dir = f.cache_dir;
    if (!f.no_cache && !f.cache_dir && xdg_dir(XDG_CACHE, cache, sizeof cache - 8)) {
        strcat(cache, "/serve");
        f.cfg.cache_dir = cache;
    }

    /* every thread started from here on inherits the blocked signals */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    int code = preflight_check_engine(&o, NULL);
    if (code != EXIT_DONE) return code;
    code = EXIT_ERROR;
    ds4_engine *e = model_open(&o, DEFAULT_CTX, &f.cfg.n_ctx, &code, NULL, NULL);
    if (!e) return code;
    f.cfg.engine = e;
    f.cfg.sampling = o.sampling;
    f.cfg.seed_given = o.seed_given;
    f.cfg.max_tokens = o.max_tokens;
    f.cfg.think = o.think;
    ds4_error err = { "" };
    serve *s = serve_start(&f.cfg, &err);
    if (!s) {
        fprintf(stderr, "ds4cl serve: %s\n", err.msg);
        ds4_engine_close(e);
        return EXIT_ERROR;
    }
    const char *host = f.cfg.host ? f.cfg.host : "127.0.0.1";
    bool v6 = strchr(host, ':') != NULL;
    printf("ds4cl serve: listening on http://%s%s%s:%d (context %d tokens%s)\n", v6 ? "[" : "", host, v6 ? "]" : "",
           serve_port(s), f.cfg.n_ctx, f.cfg.api_key ? ", API key required" : "");
    fflush(stdout);
    int sig = 0;
    while (sigwait(&sigs, &sig) != 0) {
    }
    fprintf(stderr, "ds4cl serve: %s: stopping\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    serve_stop(s);
    ds4_engine_close(e);
    return EXIT_DONE;
}
