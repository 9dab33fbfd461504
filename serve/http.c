/* http.c — the daemon: libmicrohttpd with one thread per connection, so a
 * connection may block while its request waits for the worker or streams
 * its events. Connections come through the door (http_door.c: the
 * connection limit, the request head's deadline and framing); the idle and
 * upload time limits here keep slow or idle clients from holding the
 * server after that. Every reply closes its connection, so that each
 * request passes the door.
 *
 * A request's life: headers (the API key is checked before any body byte
 * is read; the door has checked the announced body size), the body
 * (capped), the route, parsing and rendering in this thread (the tokenizer
 * is shared read-only), then a job for the worker. A plain reply waits
 * for the job; a streamed one hands its events out as they come, with an
 * SSE comment after each quiet keepalive_s (a long prompt being read).
 * Either way a client that goes away cancels its job: the wait polls the
 * socket for a hang-up. */
#include <errno.h>
#include <json-c/json.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/http_door.h"
#include "serve/serve_impl.h"

#define DEFAULT_MAX_BODY (32u << 20)
#define DEFAULT_TIMEOUT_S 60
#define DEFAULT_CONNECTIONS 64
#define DEFAULT_KEEPALIVE_S 5.0
#define DEFAULT_CACHE_BYTES (16ull << 30)

struct serve {
    serve_config cfg;
    sv_door *door;
    struct MHD_Daemon *d;
    sv_worker *w;
    sv_memo *memo;
    const ds4_tokenizer *tok;
    int port;
    char model_id[160];
};

typedef struct {
    serve *s;
    strbuf body;
    bool too_big;
    double t0;
} conn_state;

typedef struct {
    sv_job *job;
    int fd;
    double keepalive_ms, last_ms;
} stream_state;

typedef struct json_object jo;

/* ---- replies ------------------------------------------------------------------------------- */

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "application/json");
    MHD_add_response_header(r, "Connection", "close");
    enum MHD_Result rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, jo *o)
{
    char *s = sv_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return send_body(c, status, s);
}

/* The API's error shape for url. A request turned away (method given)
 * gets a line in the request log; one the worker ran has its own. */
static enum MHD_Result send_error(serve *s, struct MHD_Connection *c, const char *method, const char *url,
                                  unsigned status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));
static enum MHD_Result send_error(serve *s, struct MHD_Connection *c, const char *method, const char *url,
                                  unsigned status, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (method) {
        char what[600];
        snprintf(what, sizeof what, "%s %.500s", method, url);
        sv_log_rejected(s->cfg.quiet, what, status, msg);
    }
    return send_body(c, status, sv_error_body(url, status, code, msg));
}

/* ---- the client going away ---------------------------------------------------------------- */

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static bool peer_gone(int fd)
{
    if (fd < 0) return false;
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) return true;
    char b;
    return (p.revents & POLLIN) && recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static void wait_tick(sv_job *j)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* ---- streaming ------------------------------------------------------------------------------ */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_state *st = cls;
    sv_job *j = st->job;
    ssize_t n = 0;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        if (j->out.len) {
            size_t k = j->out.len < max ? j->out.len : max;
            memcpy(buf, j->out.s, k);
            memmove(j->out.s, j->out.s + k, j->out.len - k);
            j->out.len -= k;
            j->out.s[j->out.len] = 0;
            n = (ssize_t)k;
            break;
        }
        if (j->done) {
            n = MHD_CONTENT_READER_END_OF_STREAM;
            break;
        }
        if (peer_gone(st->fd)) {
            atomic_store(&j->cancel, true);
            n = MHD_CONTENT_READER_END_WITH_ERROR;
            break;
        }
        if (base_now_ms() - st->last_ms >= st->keepalive_ms) {
            static const char ka[] = ": keep-alive\n\n";
            n = (ssize_t)(sizeof ka - 1 < max ? sizeof ka - 1 : max);
            memcpy(buf, ka, (size_t)n);
            break;
        }
        wait_tick(j);
    }
    pthread_mutex_unlock(&j->mu);
    if (n > 0) st->last_ms = base_now_ms();
    return n;
}

static void stream_free(void *cls)
{
    stream_state *st = cls;
    atomic_store(&st->job->cancel, true);
    sv_job_unref(st->job);
    free(st);
}

/* ---- the APIs ------------------------------------------------------------------------------- */

static enum MHD_Result models(serve *s, struct MHD_Connection *c)
{
    jo *o = json_object_new_object(), *data = json_object_new_array(), *m = json_object_new_object();
    json_object_object_add(m, "id", json_object_new_string(s->model_id));
    json_object_object_add(m, "object", json_object_new_string("model"));
    json_object_object_add(m, "type", json_object_new_string("model"));
    json_object_object_add(m, "display_name", json_object_new_string(s->model_id));
    json_object_object_add(m, "created", json_object_new_int64(0));
    json_object_object_add(m, "owned_by", json_object_new_string("ds4cl"));
    json_object_array_add(data, m);
    json_object_object_add(o, "object", json_object_new_string("list"));
    json_object_object_add(o, "data", data);
    json_object_object_add(o, "has_more", json_object_new_boolean(0));
    return send_json(c, 200, o);
}

static enum MHD_Result run(serve *s, struct MHD_Connection *c, const char *url, serve_api api, bool count_only,
                           const strbuf *body)
{
    ds4_error err = { "" };
    serve_request *r = serve_request_parse(api, body->s, body->len, &err);
    if (!r) return send_error(s, c, "POST", url, 400, NULL, "%s", err.msg);
    r->count_only = count_only;
    bool think = r->think >= 0 ? r->think : s->cfg.think != DS4_THINK_NONE;
    ds4_tokens prompt = { 0 };
    if (sv_render(s->tok, s->memo, r, think, &prompt, &err) != 0) {
        serve_request_free(r);
        ds4_tokens_free(&prompt);
        return send_error(s, c, "POST", url, 400, NULL, "%s", err.msg);
    }
    if (count_only) {
        jo *o = json_object_new_object();
        json_object_object_add(o, "input_tokens", json_object_new_int64((int64_t)prompt.n));
        serve_request_free(r);
        ds4_tokens_free(&prompt);
        return send_json(c, 200, o);
    }
    if (prompt.n + 1 >= (size_t)s->cfg.n_ctx) {
        size_t n = prompt.n;
        serve_request_free(r);
        ds4_tokens_free(&prompt);
        return send_error(s, c, "POST", url, 400, "context_length_exceeded",
                          "the prompt is %zu tokens; this server's context holds %d (ds4cl serve --ctx)", n,
                          s->cfg.n_ctx);
    }
    const sv_writer *w = api == SERVE_API_CHAT ? &sv_writer_chat
                         : api == SERVE_API_MESSAGES ? &sv_writer_messages
                                                     : &sv_writer_responses;
    sv_job *j = sv_job_new(r, w, s->model_id);
    j->prompt = prompt;
    j->think = think;
    bool stream = r->stream;
    sv_worker_submit(s->w, j);
    int fd = conn_fd(c);
    if (stream) {
        stream_state *st = xcalloc(1, sizeof *st);
        st->job = j;
        st->fd = fd;
        st->keepalive_ms = (s->cfg.keepalive_s > 0 ? s->cfg.keepalive_s : DEFAULT_KEEPALIVE_S) * 1000.0;
        st->last_ms = base_now_ms();
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, st,
                                                                      stream_free);
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "Connection", "close");
        enum MHD_Result rc = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done) {
        if (peer_gone(fd)) atomic_store(&j->cancel, true);
        wait_tick(j);
    }
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result rc;
    if (j->finish == SV_FINISH_ERROR)
        rc = send_error(s, c, NULL, url, strstr(j->error, "shutting down") ? 503 : 500, NULL, "%s", j->error);
    else if (j->finish == SV_FINISH_CANCEL) rc = send_error(s, c, NULL, url, 503, NULL, "the request was cancelled");
    else rc = send_body(c, 200, j->w->body(j));
    sv_job_unref(j);
    return rc;
}

static bool key_ok(const char *given, const char *key)
{
    if (!given) return false;
    size_t a = strlen(given), b = strlen(key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < b; i++) diff |= (unsigned char)(given[i < a ? i : 0] ^ key[i]);
    return !diff;
}

static bool authorized(serve *s, struct MHD_Connection *c)
{
    if (!s->cfg.api_key) return true;
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (auth && !strncasecmp(auth, "Bearer ", 7) && key_ok(auth + 7, s->cfg.api_key)) return true;
    return key_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key"), s->cfg.api_key);
}

static enum MHD_Result route(serve *s, struct MHD_Connection *c, const char *url, const char *method,
                             const strbuf *body)
{
    const char *p = !strncmp(url, "/v1/", 4) ? url + 3 : url;
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    static const struct {
        const char *path;
        serve_api api;
        bool count;
    } posts[] = {
        { "/chat/completions", SERVE_API_CHAT, false },
        { "/messages", SERVE_API_MESSAGES, false },
        { "/messages/count_tokens", SERVE_API_MESSAGES, true },
        { "/responses", SERVE_API_RESPONSES, false },
    };
    if (!strcmp(p, "/models") || !strncmp(p, "/models/", 8))
        return get ? models(s, c) : send_error(s, c, method, url, 405, NULL, "%s %s is not supported", method, url);
    if (!strcmp(p, "/health")) {
        jo *o = json_object_new_object();
        json_object_object_add(o, "status", json_object_new_string("ok"));
        uint64_t steps, shared;
        sv_worker_counts(s->w, &steps, &shared);
        json_object_object_add(o, "decode_steps", json_object_new_int64((int64_t)steps));
        json_object_object_add(o, "shared_steps", json_object_new_int64((int64_t)shared));
        return send_json(c, 200, o);
    }
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++) {
        if (strcmp(p, posts[i].path)) continue;
        if (!post) return send_error(s, c, method, url, 405, NULL, "%s wants POST", url);
        return run(s, c, url, posts[i].api, posts[i].count, body);
    }
    return send_error(s, c, method, url, 404, NULL, "no such endpoint: %s %s", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    serve *s = cls;
    conn_state *cs = *con_cls;
    size_t cap = s->cfg.max_body ? s->cfg.max_body : DEFAULT_MAX_BODY;
    if (!cs) {
        cs = xcalloc(1, sizeof *cs);
        cs->s = s;
        cs->t0 = base_now_ms();
        *con_cls = cs;
        /* the door has turned away a Content-Length over the cap */
        if (!authorized(s, c)) return send_error(s, c, method, url, 401, "invalid_api_key", "missing or wrong API key");
        return MHD_YES;
    }
    int limit = s->cfg.timeout_s > 0 ? s->cfg.timeout_s : DEFAULT_TIMEOUT_S;
    if (*upload_size) {
        /* A body past the cap is read and dropped (a reply queued in the
         * middle of a chunked upload would never reach the client); the
         * upload time limit ends one that never stops. */
        if (cs->body.len + *upload_size > cap) {
            cs->too_big = true;
            sb_free(&cs->body);
        }
        if (!cs->too_big) sb_append(&cs->body, upload, *upload_size);
        *upload_size = 0;
        if (base_now_ms() - cs->t0 > limit * 1000.0)
            return send_error(s, c, method, url, 408, NULL, "the request body took longer than %d s", limit);
        return MHD_YES;
    }
    if (cs->too_big) return send_error(s, c, method, url, 413, NULL, "the request body is larger than %zu bytes", cap);
    return route(s, c, url, method, &cs->body);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    conn_state *cs = *con_cls;
    if (!cs) return;
    sb_free(&cs->body);
    free(cs);
    *con_cls = NULL;
}

/* ---- start and stop -------------------------------------------------------------------------- */

serve *serve_start(const serve_config *cfg, ds4_error *err)
{
    serve *s = xcalloc(1, sizeof *s);
    s->cfg = *cfg;
    if (!s->cfg.host) s->cfg.host = "127.0.0.1";
    if (!s->cfg.cache_max_bytes) s->cfg.cache_max_bytes = DEFAULT_CACHE_BYTES;
    s->tok = ds4_engine_tokenizer(cfg->engine);
    ds4_model_info info;
    ds4_engine_info(cfg->engine, &info);
    snprintf(s->model_id, sizeof s->model_id, "%s", cfg->model_id ? cfg->model_id : info.name);
    s->door = sv_door_open(s->cfg.host, cfg->port, err);
    if (!s->door) {
        free(s);
        return NULL;
    }
    s->memo = sv_memo_new();
    s->w = sv_worker_start(&s->cfg, s->memo, err);
    if (!s->w) {
        sv_door_free(s->door);
        sv_memo_free(s->memo);
        free(s);
        return NULL;
    }
    /* Connections come from the door; the daemon's own limit is a backstop
     * that the door's count keeps it from reaching. A connection's memory
     * holds the largest head the door lets through (32 KiB) with room to
     * spare for reading the body. */
    int max_conn = cfg->max_connections > 0 ? cfg->max_connections : DEFAULT_CONNECTIONS;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_NO_LISTEN_SOCKET;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(cfg->timeout_s > 0 ? cfg->timeout_s : DEFAULT_TIMEOUT_S),
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * max_conn + 16),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(128 << 10), MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, sv_door_notify, s->door, MHD_OPTION_END);
    sv_door_limits lim = {
        .timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : DEFAULT_TIMEOUT_S,
        .max_connections = max_conn,
        .max_body = cfg->max_body ? cfg->max_body : DEFAULT_MAX_BODY,
        .quiet = cfg->quiet,
    };
    if (!s->d || sv_door_start(s->door, s->d, &lim, err) != 0) {
        if (!s->d) ds4_error_set(err, "cannot start the HTTP daemon: %s", errno ? strerror(errno) : "unknown error");
        sv_door_stop(s->door);
        if (s->d) MHD_stop_daemon(s->d);
        sv_door_free(s->door);
        sv_worker_stop(s->w);
        sv_worker_free(s->w);
        sv_memo_free(s->memo);
        free(s);
        return NULL;
    }
    s->port = sv_door_port(s->door);
    return s;
}

int serve_port(const serve *s)
{
    return s->port;
}

void serve_stop(serve *s)
{
    if (!s) return;
    sv_door_stop(s->door);
    sv_worker_stop(s->w);
    MHD_stop_daemon(s->d);
    sv_door_free(s->door);
    sv_worker_free(s->w);
    sv_memo_free(s->memo);
    free(s);
}
