/* serve.h — the engine behind OpenAI- and Anthropic-compatible HTTP APIs
 * (`ds4cl serve`).
 *
 * serve_start() opens one engine session and starts an HTTP daemon
 * (libmicrohttpd, one thread per connection) plus the engine worker
 * threads (one per session, --parallel). Connection threads parse and render requests; the worker takes
 * them from a queue one at a time, brings the session to the rendered
 * prompt (keeping the longest common prefix with the live state, or going
 * on from a cached snapshot of a longer one), samples the reply with the
 * agent's DSML parser and structural mask, and hands events back to the
 * connection, which writes them in the API's shape (one JSON body, or
 * server-sent events).
 *
 * Endpoints: GET /health (with the count of decode steps, and of those
 * shared by several sessions); GET /v1/models; POST /v1/chat/completions (OpenAI chat),
 * /v1/responses (OpenAI responses), /v1/messages and
 * /v1/messages/count_tokens (Anthropic). Errors carry the caller's API
 * shape: {"error":{"message","type",…}} or {"type":"error","error":{…}}.
 *
 * The snapshot cache (cache_dir): when the live session is about to be
 * replaced by another conversation, and when the server stops, its state is
 * saved there (the engine's snapshot format, with the token prefix beside
 * it), and so are the states at the end of every prompt read (before its
 * reply) and at the end of its system part (the tools and the system text,
 * when that is long); a later request whose prompt begins with a cached
 * prefix, or is one, goes on from it. The oldest files go once the directory exceeds
 * cache_max_bytes.
 * The assistant replies the server produced are remembered (and kept in the
 * cache directory) by the tokens before them and their visible content, so a
 * client that sends one back in its history gets the very tokens the model
 * wrote: the prefix stays reusable whatever the client kept of the
 * reasoning.
 */
#ifndef DS4CL_SERVE_H
#define DS4CL_SERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

typedef struct {
    ds4_engine *engine;
    int n_ctx;
    const char *host;          /* NULL = 127.0.0.1 */
    int port;                  /* 0 = any free port */
    const char *api_key;       /* NULL = no authentication */
    const char *model_id;      /* what /v1/models lists; NULL = the model's name */
    size_t max_body;           /* request body cap in bytes; 0 = default */
    int timeout_s;             /* idle connection limit; 0 = default */
    int max_connections;       /* 0 = default */
    double keepalive_s;        /* SSE comment after this much silence; 0 = default */
    ds4_sampling sampling;     /* defaults a request may override */
    bool seed_given;
    int max_tokens;            /* default reply limit; 0 = room left */
    ds4_think think;           /* default for requests that do not say */
    const char *cache_dir;     /* snapshot cache; NULL = none */
    uint64_t cache_max_bytes;  /* 0 = default */
    bool quiet;                /* no request log on stderr */
    int parallel;              /* sessions, each with its own prefix (1..16); 0 = 1 */
    bool no_batch;             /* each session steps on its own (serve/batch.c) */
} serve_config;

typedef struct serve serve;

/* NULL with a message in err when the session cannot be opened or the
 * address cannot be bound. */
serve *serve_start(const serve_config *cfg, ds4_error *err);
/* The bound port (useful with port 0). */
int serve_port(const serve *s);
/* Stops accepting, cancels the request in progress at its next safe point,
 * fails the queued ones, saves the snapshot cache, and frees everything. */
void serve_stop(serve *s);

/* ---- request parsing (exposed for the fuzz target and tests) ------------- */

typedef enum { SERVE_API_CHAT = 0, SERVE_API_MESSAGES, SERVE_API_RESPONSES } serve_api;

typedef struct serve_request serve_request;

/* Parses a request body of the given API into the server's normalized
 * conversation. NULL with a client-facing message in err for malformed
 * JSON, wrong types, unknown roles or unsupported content. */
serve_request *serve_request_parse(serve_api api, const char *body, size_t len, ds4_error *err);
void serve_request_free(serve_request *r);

#endif
