/* cdp.c — the DevTools HTTP endpoints (libcurl) and the WebSocket session
 * (libwebsockets + json-c). The browser process lives in cdp_browser.c. */
#include "tools/cdp.h"

#include "base/base.h"

#include <ctype.h>
#include <curl/curl.h>
#include <json-c/json.h>
#include <libwebsockets.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest wait between two cancellation checks. */
#define CDP_POLL_MS 20
/* Largest HTTP endpoint reply we accept (a /json/list of many tabs). */
#define CDP_MAX_HTTP_BODY (8u << 20)

static pthread_once_t g_libs_once = PTHREAD_ONCE_INIT;

static void libs_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* libwebsockets logs to stderr by default, which would scribble over
     * the terminal UI; every failure we care about reaches a callback. */
    lws_set_log_level(0, NULL);
}

static bool is_cancelled(const cdp_cancel *cancel)
{
    return cancel && cancel->fn && cancel->fn(cancel->ud);
}

/* A short printable excerpt of untrusted bytes for error messages. */
static void excerpt(char *dst, size_t size, const char *src, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 4 < size; i++) {
        unsigned char ch = (unsigned char)src[i];
        dst[j++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (len > 0 && j + 4 >= size) {
        memcpy(dst + j, "...", 3);
        j += 3;
    }
    dst[j] = 0;
}

/* ---- HTTP endpoints -------------------------------------------------------- */

typedef struct {
    strbuf body;
    bool too_big;
} http_sink;

static size_t http_write(char *p, size_t size, size_t n, void *ud)
{
    http_sink *s = ud;
    size_t bytes = size * n;
    if (s->body.len + bytes > CDP_MAX_HTTP_BODY) {
        s->too_big = true;
        return 0;
    }
    sb_append(&s->body, p, bytes);
    return bytes;
}

int cdp_http(const char *base_url, const char *method, const char *path, int timeout_ms,
             const cdp_cancel *cancel, bool text_ok, json_object **out, char **text,
             ds4_error *err)
{
    pthread_once(&g_libs_once, libs_init);
    if (out) *out = NULL;
    if (text) *text = NULL;

    strbuf url = {0};
    sb_puts(&url, base_url);
    while (url.len && url.s[url.len - 1] == '/') url.s[--url.len] = 0;
    sb_puts(&url, path);

    CURL *h = curl_easy_init();
    CURLM *m = curl_multi_init();
    if (!h || !m) {
        if (h) curl_easy_cleanup(h);
        if (m) curl_multi_cleanup(m);
        sb_free(&url);
        ds4_error_set(err, "cannot initialise libcurl");
        return CDP_ERROR;
    }
    http_sink sink = {0};
    char curl_err[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, url.s);
    if (strcmp(method, "GET") != 0) curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    curl_multi_add_handle(m, h);

    /* The multi interface lets us look at the cancellation flag every
     * CDP_POLL_MS; the easy interface's progress callback can go quiet for
     * a second when no bytes move. */
    int rc = CDP_OK;
    CURLcode res = CURLE_OK;
    for (;;) {
        int running = 0;
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            res = CURLE_FAILED_INIT;
            break;
        }
        if (!running) {
            int left;
            CURLMsg *msg;
            while ((msg = curl_multi_info_read(m, &left)))
                if (msg->msg == CURLMSG_DONE) res = msg->data.result;
            break;
        }
        if (is_cancelled(cancel)) {
            rc = CDP_CANCELLED;
            ds4_error_set(err, "cancelled");
            break;
        }
        curl_multi_poll(m, NULL, 0, CDP_POLL_MS, NULL);
    }
    long status = 0;
    if (rc == CDP_OK) {
        if (res != CURLE_OK) {
            rc = res == CURLE_OPERATION_TIMEDOUT ? CDP_TIMEOUT : CDP_CLOSED;
            if (sink.too_big)
                ds4_error_set(err, "reply from %s exceeds %u bytes", url.s, CDP_MAX_HTTP_BODY);
            else
                ds4_error_set(err, "cannot reach the DevTools endpoint %s: %s", url.s,
                         curl_err[0] ? curl_err : curl_easy_strerror(res));
        } else {
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
            if (status != 200) {
                char ex[160];
                excerpt(ex, sizeof ex, sb_str(&sink.body), sink.body.len);
                ds4_error_set(err, "HTTP %ld from %s: %s", status, url.s, ex);
                rc = CDP_ERROR;
            }
        }
    }
    curl_multi_remove_handle(m, h);
    curl_easy_cleanup(h);
    curl_multi_cleanup(m);

    if (rc == CDP_OK) {
        enum json_tokener_error je = json_tokener_success;
        json_object *o = json_tokener_parse_verbose(sb_str(&sink.body), &je);
        if (o) {
            if (out) *out = o;
            else json_object_put(o);
        } else if (text_ok) {
            if (text) *text = sb_take(&sink.body);
        } else {
            char ex[160];
            excerpt(ex, sizeof ex, sb_str(&sink.body), sink.body.len);
            ds4_error_set(err, "malformed JSON from %s (%s): %s", url.s,
                     json_tokener_error_desc(je), ex);
            rc = CDP_ERROR;
        }
    }
    sb_free(&sink.body);
    sb_free(&url);
    return rc;
}

static char *json_str_dup(json_object *o, const char *key)
{
    json_object *v;
    if (!o || !json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_string))
        return NULL;
    return strdup(json_object_get_string(v));
}

int cdp_version(const char *base_url, int timeout_ms, const cdp_cancel *cancel,
                char **product, char **ws_url, char **user_agent, ds4_error *err)
{
    if (product) *product = NULL;
    if (ws_url) *ws_url = NULL;
    if (user_agent) *user_agent = NULL;
    json_object *o = NULL;
    int rc = cdp_http(base_url, "GET", "/json/version", timeout_ms, cancel, false, &o, NULL, err);
    if (rc != CDP_OK) return rc;
    char *ws = json_str_dup(o, "webSocketDebuggerUrl");
    if (!ws || !json_object_is_type(o, json_type_object)) {
        free(ws);
        json_object_put(o);
        ds4_error_set(err, "%s/json/version has no webSocketDebuggerUrl: not a DevTools endpoint?",
                 base_url);
        return CDP_ERROR;
    }
    if (product) *product = json_str_dup(o, "Browser");
    if (user_agent) *user_agent = json_str_dup(o, "User-Agent");
    if (ws_url) *ws_url = ws;
    else free(ws);
    json_object_put(o);
    return CDP_OK;
}

int cdp_target_new(const char *base_url, int timeout_ms, const cdp_cancel *cancel,
                   char **target_id, char **ws_url, ds4_error *err)
{
    *target_id = NULL;
    *ws_url = NULL;
    json_object *o = NULL;
    ds4_error local = { "" };
    if (!err) err = &local; /* the answer decides the retry below */
    int rc = cdp_http(base_url, "PUT", "/json/new?about:blank", timeout_ms, cancel, false, &o,
                      NULL, err);
    if (rc == CDP_ERROR && strstr(err->msg, "HTTP 405"))
        /* Browsers older than 2023 take GET only. */
        rc = cdp_http(base_url, "GET", "/json/new?about:blank", timeout_ms, cancel, false, &o,
                      NULL, err);
    if (rc != CDP_OK) return rc;
    char *id = json_str_dup(o, "id");
    char *ws = json_str_dup(o, "webSocketDebuggerUrl");
    json_object_put(o);
    if (!id || !ws) {
        free(id);
        free(ws);
        ds4_error_set(err, "the browser created no usable page target (no id or WebSocket URL)");
        return CDP_ERROR;
    }
    *target_id = id;
    *ws_url = ws;
    return CDP_OK;
}

int cdp_target_close(const char *base_url, const char *target_id, int timeout_ms,
                     const cdp_cancel *cancel, ds4_error *err)
{
    /* Target ids are hex; anything else would bend the path. */
    for (const char *p = target_id; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '-') {
            ds4_error_set(err, "bad target id");
            return CDP_ERROR;
        }
    char path[256];
    snprintf(path, sizeof path, "/json/close/%s", target_id);
    return cdp_http(base_url, "GET", path, timeout_ms, cancel, true, NULL, NULL, err);
}

/* ---- WebSocket session ------------------------------------------------------ */

enum { CONN_CONNECTING, CONN_OPEN, CONN_CLOSED };

typedef struct out_msg {
    struct out_msg *next;
    size_t len;
    unsigned char data[]; /* LWS_PRE bytes of headroom, then the text */
} out_msg;

struct cdp_conn {
    struct lws_context *ctx;
    struct lws *wsi;
    lws_sorted_usec_list_t tick;
    int state;
    char why_closed[256];

    strbuf rx;
    bool rx_too_big;

    out_msg *out_head, *out_tail;
    int next_id;
    int awaited_id;
    json_object *reply; /* the whole reply message of awaited_id */

    bool bad_pending;   /* a message we could not understand arrived */
    char bad_msg[256];
    unsigned strays;

    cdp_event_fn on_event;
    void *event_ud;
    cdp_cancel cancel;
};

/* ---- messages ------------------------------------------------------------------- */

static void msg_bad(cdp_msg *m, const char *fmt, const char *detail, const char *msg, size_t len)
{
    char ex[96];
    excerpt(ex, sizeof ex, msg, len);
    snprintf(m->why, sizeof m->why, fmt, detail, ex);
    m->kind = CDP_MSG_BAD;
    if (m->obj) json_object_put(m->obj);
    m->obj = NULL;
    m->params = NULL;
    m->method = NULL;
}

void cdp_msg_parse(const char *msg, size_t len, cdp_msg *m)
{
    memset(m, 0, sizeof *m);
    if (len > CDP_MAX_MESSAGE) {
        snprintf(m->why, sizeof m->why, "a message from the browser exceeds %u MiB", CDP_MAX_MESSAGE >> 20);
        return;
    }
    json_tokener *tok = json_tokener_new_ex(128);
    if (!tok) abort();
    json_object *o = json_tokener_parse_ex(tok, msg, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    if (o && je == json_tokener_success) {
        while (end < len && isspace((unsigned char)msg[end])) end++;
        if (end < len) je = json_tokener_error_parse_unexpected;
    }
    m->obj = o;
    if (!o || je != json_tokener_success) {
        msg_bad(m, "malformed JSON message from the browser (%s): %s",
                je == json_tokener_continue ? "truncated" : json_tokener_error_desc(je), msg, len);
        return;
    }
    if (!json_object_is_type(o, json_type_object)) {
        msg_bad(m, "unexpected message from the browser (%s): %s", "not a JSON object", msg, len);
        return;
    }
    json_object *id, *method;
    if (json_object_object_get_ex(o, "id", &id)) {
        if (!json_object_is_type(id, json_type_int)) {
            msg_bad(m, "unexpected message from the browser (%s): %s", "non-integer id", msg, len);
            return;
        }
        m->kind = CDP_MSG_REPLY;
        m->id = json_object_get_int(id);
        return;
    }
    if (json_object_object_get_ex(o, "method", &method) && json_object_is_type(method, json_type_string)) {
        m->kind = CDP_MSG_EVENT;
        m->method = json_object_get_string(method);
        json_object_object_get_ex(o, "params", &m->params);
        return;
    }
    msg_bad(m, "unexpected message from the browser (%s): %s", "neither id nor method", msg, len);
}

void cdp_msg_free(cdp_msg *m)
{
    if (m->obj) json_object_put(m->obj);
    memset(m, 0, sizeof *m);
}

int cdp_reply_result(json_object *reply, const char *method, json_object **result, ds4_error *err)
{
    if (result) *result = NULL;
    json_object *e, *res;
    if (json_object_object_get_ex(reply, "error", &e)) {
        json_object *msg = NULL, *data = NULL;
        json_object_object_get_ex(e, "message", &msg);
        json_object_object_get_ex(e, "data", &data);
        const char *ms = msg ? json_object_get_string(msg) : "unknown error";
        const char *ds = data ? json_object_get_string(data) : NULL;
        char ex[200], dx[200];
        excerpt(ex, sizeof ex, ms, strlen(ms));
        if (ds) excerpt(dx, sizeof dx, ds, strlen(ds));
        ds4_error_set(err, "%s failed: %s%s%s%s", method, ex, ds ? " (" : "", ds ? dx : "",
                 ds ? ")" : "");
        return CDP_ERROR;
    }
    if (result) {
        if (json_object_object_get_ex(reply, "result", &res) &&
            json_object_is_type(res, json_type_object))
            *result = json_object_get(res);
        else
            *result = json_object_new_object();
    }
    return CDP_OK;
}

static void conn_dispatch(cdp_conn *c, const char *msg, size_t len)
{
    cdp_msg m;
    cdp_msg_parse(msg, len, &m);
    switch (m.kind) {
    case CDP_MSG_BAD:
        snprintf(c->bad_msg, sizeof c->bad_msg, "%s", m.why);
        c->bad_pending = true;
        break;
    case CDP_MSG_REPLY:
        if (c->awaited_id && m.id == c->awaited_id && !c->reply) {
            c->reply = m.obj;
            m.obj = NULL;
        } else {
            c->strays++;
        }
        break;
    case CDP_MSG_EVENT:
        if (c->on_event) c->on_event(c, m.method, m.params, c->event_ud);
        break;
    }
    cdp_msg_free(&m);
}

static void conn_mark_closed(cdp_conn *c, const char *why)
{
    if (c->state != CONN_CLOSED) {
        c->state = CONN_CLOSED;
        snprintf(c->why_closed, sizeof c->why_closed, "%s", why);
    }
}

static int conn_lws_cb(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    (void)user;
    struct lws_context *ctx = lws_get_context(wsi);
    cdp_conn *c = ctx ? lws_context_user(ctx) : NULL;
    if (!c) return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char why[200];
        snprintf(why, sizeof why, "cannot open the DevTools WebSocket: %s",
                 in ? (const char *)in : "connection failed");
        conn_mark_closed(c, why);
        c->wsi = NULL;
        break;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        c->state = CONN_OPEN;
        if (c->out_head) lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (!c->rx_too_big) {
            if (c->rx.len + len > CDP_MAX_MESSAGE) {
                c->rx_too_big = true;
                sb_free(&c->rx);
            } else {
                sb_append(&c->rx, in, len);
            }
        }
        if (lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0) {
            if (c->rx_too_big) {
                snprintf(c->bad_msg, sizeof c->bad_msg,
                         "a message from the browser exceeds %u MiB", CDP_MAX_MESSAGE >> 20);
                c->bad_pending = true;
            } else {
                conn_dispatch(c, sb_str(&c->rx), c->rx.len);
            }
            sb_clear(&c->rx);
            c->rx_too_big = false;
        }
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE: {
        out_msg *m = c->out_head;
        if (!m) break;
        c->out_head = m->next;
        if (!c->out_head) c->out_tail = NULL;
        int n = lws_write(wsi, m->data + LWS_PRE, m->len, LWS_WRITE_TEXT);
        free(m);
        if (n < 0) {
            conn_mark_closed(c, "writing to the DevTools WebSocket failed");
            return -1;
        }
        if (c->out_head) lws_callback_on_writable(wsi);
        break;
    }
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        conn_mark_closed(c, "the browser closed the DevTools connection");
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
        conn_mark_closed(c, "the DevTools connection was closed");
        c->wsi = NULL;
        break;
    case LWS_CALLBACK_WSI_DESTROY:
        if (c->wsi == wsi) {
            c->wsi = NULL;
            conn_mark_closed(c, "the DevTools connection was closed");
        }
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols g_protocols[] = {
    { "ds4cl-cdp", conn_lws_cb, 0, 65536, 0, NULL, 0 },
    { NULL, NULL, 0, 0, 0, NULL, 0 },
};

static void tick_cb(lws_sorted_usec_list_t *sul) { (void)sul; }

static int conn_pump(cdp_conn *c, int timeout_ms, bool (*done)(void *), void *ud,
                     const char *what, ds4_error *err)
{
    double deadline = base_now_ms() + timeout_ms;
    /* what went wrong belongs to the wait it happened in */
    c->bad_pending = false;
    for (;;) {
        if (done && done(ud)) return CDP_OK;
        if (c->bad_pending) {
            c->bad_pending = false;
            ds4_error_set(err, "%s", c->bad_msg);
            return CDP_ERROR;
        }
        if (c->state == CONN_CLOSED) {
            ds4_error_set(err, "%s", c->why_closed);
            return CDP_CLOSED;
        }
        if (is_cancelled(&c->cancel)) {
            ds4_error_set(err, "cancelled");
            return CDP_CANCELLED;
        }
        double left = deadline - base_now_ms();
        if (left <= 0) {
            ds4_error_set(err, "timed out after %.1f s waiting for %s", timeout_ms / 1e3, what);
            return CDP_TIMEOUT;
        }
        /* lws sleeps until its next timer; this one bounds the sleep so the
         * cancellation flag and the deadline are looked at in time. */
        double slice = left < CDP_POLL_MS ? left : CDP_POLL_MS;
        lws_usec_t us = (lws_usec_t)(slice * 1000.0);
        if (us < 1000) us = 1000;
        lws_sul_schedule(c->ctx, 0, &c->tick, tick_cb, us);
        lws_service(c->ctx, 0);
    }
}

static bool conn_open_done(void *ud) { return ((cdp_conn *)ud)->state == CONN_OPEN; }

cdp_conn *cdp_connect(const char *ws_url, int timeout_ms, const cdp_cancel *cancel, ds4_error *err)
{
    pthread_once(&g_libs_once, libs_init);
    if (strncmp(ws_url, "ws://", 5) != 0) {
        ds4_error_set(err, "unsupported DevTools WebSocket URL (only ws:// works): %.200s",
                 ws_url);
        return NULL;
    }
    char *copy = xstrdup(ws_url);
    const char *proto = NULL, *host = NULL, *path = NULL;
    int port = 80;
    if (lws_parse_uri(copy, &proto, &host, &port, &path) || !host || !*host) {
        free(copy);
        ds4_error_set(err, "malformed DevTools WebSocket URL: %.200s", ws_url);
        return NULL;
    }
    char full_path[1024];
    snprintf(full_path, sizeof full_path, "/%s", path ? path : "");

    cdp_conn *c = xcalloc(1, sizeof *c);
    c->next_id = 1;
    if (cancel) c->cancel = *cancel;

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = g_protocols;
    info.gid = (gid_t)-1;
    info.uid = (uid_t)-1;
    info.user = c;
    /* lws sizes its fd table from the fd limit, which can be a million in
     * containers; one connection needs a handful. */
    info.fd_limit_per_thread = 16;
    c->ctx = lws_create_context(&info);
    if (!c->ctx) {
        free(copy);
        free(c);
        ds4_error_set(err, "cannot create a libwebsockets context");
        return NULL;
    }

    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = c->ctx;
    ci.address = host;
    ci.port = port;
    ci.path = full_path;
    ci.host = host;
    /* No Origin header: Chrome refuses WebSocket clients that send one it
     * was not told to allow. */
    ci.origin = NULL;
    ci.protocol = NULL;
    ci.local_protocol_name = g_protocols[0].name;
    ci.pwsi = &c->wsi;
    if (!lws_client_connect_via_info(&ci) && c->state != CONN_CLOSED)
        conn_mark_closed(c, "cannot open the DevTools WebSocket");
    free(copy);

    int rc = conn_pump(c, timeout_ms, conn_open_done, c, "the DevTools WebSocket to open", err);
    if (rc != CDP_OK) {
        cdp_conn_free(c);
        return NULL;
    }
    return c;
}

void cdp_conn_free(cdp_conn *c)
{
    if (!c) return;
    lws_sul_cancel(&c->tick);
    if (c->ctx) lws_context_destroy(c->ctx);
    while (c->out_head) {
        out_msg *n = c->out_head->next;
        free(c->out_head);
        c->out_head = n;
    }
    if (c->reply) json_object_put(c->reply);
    sb_free(&c->rx);
    free(c);
}

void cdp_set_cancel(cdp_conn *c, const cdp_cancel *cancel)
{
    if (cancel) c->cancel = *cancel;
    else memset(&c->cancel, 0, sizeof c->cancel);
}

void cdp_set_event_handler(cdp_conn *c, cdp_event_fn fn, void *ud)
{
    c->on_event = fn;
    c->event_ud = ud;
}

unsigned cdp_stray_replies(const cdp_conn *c) { return c->strays; }

int cdp_send(cdp_conn *c, const char *method, json_object *params)
{
    if (c->state == CONN_CLOSED || !c->wsi) {
        if (params) json_object_put(params);
        return CDP_CLOSED;
    }
    int id = c->next_id++;
    if (c->next_id > 1000000000) c->next_id = 1;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "id", json_object_new_int(id));
    json_object_object_add(o, "method", json_object_new_string(method));
    if (params) json_object_object_add(o, "params", params);
    size_t len = 0;
    const char *s = json_object_to_json_string_length(
        o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    out_msg *m = xmalloc(sizeof *m + LWS_PRE + len + 1);
    m->next = NULL;
    m->len = len;
    memcpy(m->data + LWS_PRE, s, len + 1);
    json_object_put(o);
    if (c->out_tail) c->out_tail->next = m;
    else c->out_head = m;
    c->out_tail = m;
    if (c->state == CONN_OPEN) lws_callback_on_writable(c->wsi);
    return id;
}

static bool reply_done(void *ud) { return ((cdp_conn *)ud)->reply != NULL; }

int cdp_call(cdp_conn *c, const char *method, json_object *params, int timeout_ms,
             json_object **result, ds4_error *err)
{
    if (result) *result = NULL;
    int id = cdp_send(c, method, params);
    if (id < 0) {
        ds4_error_set(err, "%s", c->why_closed[0] ? c->why_closed : "not connected");
        return CDP_CLOSED;
    }
    c->awaited_id = id;
    char what[160];
    snprintf(what, sizeof what, "the reply to %s", method);
    int rc = conn_pump(c, timeout_ms, reply_done, c, what, err);
    c->awaited_id = 0;
    json_object *reply = c->reply;
    c->reply = NULL;
    if (rc != CDP_OK) {
        if (reply) json_object_put(reply);
        return rc;
    }
    rc = cdp_reply_result(reply, method, result, err);
    json_object_put(reply);
    return rc;
}

int cdp_wait(cdp_conn *c, bool (*done)(void *ud), void *ud, int timeout_ms, const char *what,
             ds4_error *err)
{
    return conn_pump(c, timeout_ms, done, ud, what, err);
}
