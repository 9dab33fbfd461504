/* http_door.c — the front door: accepting, the connection limit with 503
 * answers, the request head's deadline and framing check (see
 * http_door.h for why), and the API error bodies both ends send.
 *
 * Threads: one accepts and keeps the refused connections (non-blocking, a
 * second to name their path, two to read what they sent after the answer,
 * so that closing does not reset the answer away); each admitted
 * connection has its own thread until its head is whole, as libmicrohttpd
 * gives it one afterwards. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "serve/http_door.h"

#define HEAD_MAX (32 << 10)      /* request line and headers */
#define LINE_MAX_BYTES (8 << 10) /* the request line */
#define MAX_REFUSALS 64          /* refused connections kept to answer properly */
#define REFUSE_WAIT_MS 1000      /* for a refused connection's request line */
#define LINGER_MS 2000           /* reading what a client sent after its answer */
#define LINGER_BYTES (64u << 20)
#define RETRY_AFTER_S 2
#define EVICT_MS 2000            /* a head slower than this gives way at the limit */

typedef struct gate gate;

typedef struct {
    int fd;
    double until;
    bool answered;
    char line[256];
    size_t n;
    struct sockaddr_storage addr;
} refusal;

struct sv_door {
    int lfd, port;
    int wake[2];
    pthread_t th;
    bool started;
    struct MHD_Daemon *daemon;
    sv_door_limits lim;
    atomic_bool stopping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int gating;   /* heads being read */
    int evicted;  /* of them, told to give way (leaving) */
    int open;     /* the daemon's connections */
    gate *gates;  /* the heads being read, oldest last */
    refusal ref[MAX_REFUSALS];
    int n_ref;
};

/* ---- error bodies and the log --------------------------------------------------------- */

bool sv_path_is_anthropic(const char *path)
{
    return !strncmp(path, "/v1/messages", 12) || !strncmp(path, "/messages", 9);
}

char *sv_error_body(const char *path, unsigned status, const char *code, const char *msg)
{
    struct json_object *o = json_object_new_object(), *e = json_object_new_object();
    if (sv_path_is_anthropic(path)) {
        const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                         : status == 413 ? "request_too_large" : status == 503 ? "overloaded_error"
                         : status >= 500 ? "api_error" : "invalid_request_error";
        json_object_object_add(o, "type", json_object_new_string("error"));
        json_object_object_add(e, "type", json_object_new_string(type));
        json_object_object_add(e, "message", json_object_new_string(msg));
    } else {
        const char *type = status == 401 ? "authentication_error" : status >= 500 ? "server_error"
                                                                                 : "invalid_request_error";
        json_object_object_add(e, "message", json_object_new_string(msg));
        json_object_object_add(e, "type", json_object_new_string(type));
        json_object_object_add(e, "param", NULL);
        json_object_object_add(e, "code", code ? json_object_new_string(code) : NULL);
    }
    json_object_object_add(o, "error", e);
    char *s = sv_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

void sv_log_rejected(bool quiet, const char *what, unsigned status, const char *msg)
{
    if (!quiet) fprintf(stderr, "ds4cl serve: %s: %u %s\n", what, status, msg);
}

static const char *reason(unsigned status)
{
    switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 501: return "Not Implemented";
    default: return "Service Unavailable";
    }
}

/* A whole reply, closing the connection. */
static char *reply_bytes(const char *path, unsigned status, const char *msg, size_t *len)
{
    char *body = sv_error_body(path, status, NULL, msg);
    char retry[64] = "";
    if (status == 503) snprintf(retry, sizeof retry, "Retry-After: %d\r\n", RETRY_AFTER_S);
    size_t n = strlen(body) + 256;
    char *out = xmalloc(n);
    int k = snprintf(out, n,
                     "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n%s\r\n%s",
                     status, reason(status), strlen(body), retry, body);
    free(body);
    *len = (size_t)k;
    return out;
}

/* ---- the request head's check ----------------------------------------------------------- */

static bool tchar(unsigned char c)
{
    return c > ' ' && c < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", c);
}

static sv_head_verdict bad(sv_head *hi, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static sv_head_verdict bad(sv_head *hi, unsigned status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(hi->why, sizeof hi->why, fmt, ap);
    va_end(ap);
    hi->status = status;
    return SV_HEAD_BAD;
}

/* The request line, whole (complete) or as far as it came. */
static sv_head_verdict request_line(const char *l, size_t n, bool complete, sv_head *hi)
{
    if (!complete && n && l[n - 1] == '\r') n--; /* its LF has not come yet */
    const char *sp1 = memchr(l, ' ', n);
    if (sp1) {
        const char *t = sp1 + 1, *sp2 = memchr(t, ' ', n - (size_t)(t - l));
        size_t tn = sp2 ? (size_t)(sp2 - t) : n - (size_t)(t - l);
        snprintf(hi->path, sizeof hi->path, "%.*s", (int)(tn < 255 ? tn : 255), t);
    }
    for (size_t i = 0; i < (sp1 ? (size_t)(sp1 - l) : n); i++)
        if (!tchar((unsigned char)l[i])) return bad(hi, 400, "malformed request line");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)l[i] < ' ' || (unsigned char)l[i] >= 0x7f) return bad(hi, 400, "malformed request line");
    if (n > LINE_MAX_BYTES) return bad(hi, 414, "the request line is longer than %d bytes", LINE_MAX_BYTES);
    if (!complete) return SV_HEAD_MORE;
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', n - (size_t)(sp1 + 1 - l)) : NULL;
    if (!sp1 || sp1 == l || sp1 - l > 32 || !sp2 || sp2 == sp1 + 1) return bad(hi, 400, "malformed request line");
    size_t vn = n - (size_t)(sp2 + 1 - l);
    if (!((vn == 8 && (!memcmp(sp2 + 1, "HTTP/1.1", 8) || !memcmp(sp2 + 1, "HTTP/1.0", 8)))))
        return bad(hi, 400, "malformed request line (HTTP/1.0 or HTTP/1.1 only)");
    snprintf(hi->what, sizeof hi->what, "%.*s %s", (int)(sp1 - l), l, hi->path);
    return SV_HEAD_OK;
}

static bool name_is(const char *l, size_t n, const char *name)
{
    return n == strlen(name) && !strncasecmp(l, name, n);
}

/* A chunk-size line: hex digits, then an extension or nothing (no blanks:
 * libmicrohttpd takes none). */
static sv_head_verdict chunk_line(const char *l, size_t n, size_t max_body, sv_head *hi)
{
    size_t i = 0;
    uint64_t v = 0;
    while (i < n && strchr("0123456789abcdefABCDEF", l[i]) && l[i]) {
        if (i == 16) return bad(hi, 413, "the request body is larger than %zu bytes", max_body);
        char c = l[i++];
        v = v * 16 + (uint64_t)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    if (i == 0 || (i < n && l[i] != ';')) return bad(hi, 400, "malformed chunk size");
    if (v > max_body) return bad(hi, 413, "the request body is larger than %zu bytes", max_body);
    return SV_HEAD_OK;
}

/* Lines end in CR LF or a bare LF (which libmicrohttpd takes too). */
sv_head_verdict sv_head_check(const char *b, size_t n, size_t max_body, sv_head *hi)
{
    size_t pos = 0;
    while (pos + 1 < n && b[pos] == '\r' && b[pos + 1] == '\n') pos += 2; /* blank lines before it */
    bool chunked = false, have_len = false;
    uint64_t len = 0;
    for (int line = 0;; line++) {
        const char *l = b + pos, *nl = memchr(l, '\n', n - pos);
        size_t ln = nl ? (size_t)(nl - l) : n - pos;
        if (nl && ln && l[ln - 1] == '\r') ln--;
        if (line == 0) {
            sv_head_verdict v = request_line(l, ln, nl != NULL, hi);
            if (v == SV_HEAD_MORE && n >= HEAD_MAX)
                return bad(hi, 431, "the request head is larger than %d bytes", HEAD_MAX);
            if (v != SV_HEAD_OK) return v;
        } else if (!nl) {
            return n >= HEAD_MAX ? bad(hi, 431, "the request head is larger than %d bytes", HEAD_MAX) : SV_HEAD_MORE;
        } else if (ln == 0) {
            pos += (size_t)(nl - l) + 1;
            break;
        } else {
            if (l[0] == ' ' || l[0] == '\t') return bad(hi, 400, "folded header line");
            size_t k = 0;
            while (k < ln && tchar((unsigned char)l[k])) k++;
            if (k == 0 || k == ln || l[k] != ':') return bad(hi, 400, "malformed header line");
            const char *v = l + k + 1, *end = l + ln;
            for (const char *p = v; p < end; p++)
                if (((unsigned char)*p < ' ' && *p != '\t') || *p == 0x7f)
                    return bad(hi, 400, "a control character in a header line");
            while (v < end && (*v == ' ' || *v == '\t')) v++;
            size_t vn = (size_t)(end - v);
            /* libmicrohttpd keeps the blanks after a value, and then takes
             * neither a length nor "chunked" with them */
            bool blank_after = vn && (end[-1] == ' ' || end[-1] == '\t');
            if (name_is(l, k, "Content-Length")) {
                if (blank_after) return bad(hi, 400, "malformed Content-Length (blanks after the number)");
                uint64_t x = 0;
                for (size_t i = 0; i < vn; i++) {
                    if (v[i] < '0' || v[i] > '9') return bad(hi, 400, "malformed Content-Length");
                    if (i == 19) return bad(hi, 413, "the request body is larger than %zu bytes", max_body);
                    x = x * 10 + (uint64_t)(v[i] - '0');
                }
                if (vn == 0 || (have_len && x != len)) return bad(hi, 400, "malformed Content-Length");
                have_len = true;
                len = x;
            } else if (name_is(l, k, "Transfer-Encoding")) {
                if (blank_after) return bad(hi, 400, "malformed Transfer-Encoding (blanks after the coding)");
                if (chunked || vn != 7 || strncasecmp(v, "chunked", 7))
                    return bad(hi, 501, "transfer coding '%.*s' is not supported (chunked only)",
                               (int)(vn < 60 ? vn : 60), v);
                chunked = true;
            }
        }
        pos += (size_t)(nl - l) + 1;
        if (pos > HEAD_MAX) return bad(hi, 431, "the request head is larger than %d bytes", HEAD_MAX);
    }
    if (chunked && have_len) return bad(hi, 400, "both Content-Length and Transfer-Encoding");
    if (len > max_body) return bad(hi, 413, "the request body is larger than %zu bytes", max_body);
    const char *nl = chunked ? memchr(b + pos, '\n', n - pos) : NULL;
    if (nl) {
        size_t ln = (size_t)(nl - (b + pos));
        return chunk_line(b + pos, ln && nl[-1] == '\r' ? ln - 1 : ln, max_body, hi);
    }
    return SV_HEAD_OK;
}

/* ---- answering and closing ------------------------------------------------------------------ */

/* Sends the answer (blocking, at most LINGER_MS), then reads what the
 * client still sends until it closes or LINGER_MS pass, and closes. */
static void answer_and_close(int fd, const char *path, unsigned status, const char *msg)
{
    size_t n;
    char *out = reply_bytes(path, status, msg, &n);
    double t0 = base_now_ms();
    for (size_t sent = 0; sent < n;) {
        ssize_t k = send(fd, out + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) {
            sent += (size_t)k;
            continue;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
        struct pollfd p = { .fd = fd, .events = POLLOUT };
        if (base_now_ms() - t0 > LINGER_MS || poll(&p, 1, 100) < 0) break;
    }
    free(out);
    shutdown(fd, SHUT_WR);
    char sink[16384];
    size_t drained = 0;
    while (drained < LINGER_BYTES) {
        int left = LINGER_MS - (int)(base_now_ms() - t0);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (left <= 0 || poll(&p, 1, left) <= 0) break;
        ssize_t k = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) break;
        if (k > 0) drained += (size_t)k;
    }
    close(fd);
}

/* ---- a connection's head ------------------------------------------------------------------- */

struct gate {
    sv_door *d;
    int fd;
    struct sockaddr_storage addr;
    socklen_t alen;
    double t0;
    atomic_bool evict;  /* under the door's lock once set */
    gate *prev, *next;
};

static void peer_name(const struct sockaddr_storage *a, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const void *)a;
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        port = ntohs(v4->sin_port);
    } else if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const void *)a;
        inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
        port = ntohs(v6->sin6_port);
    }
    snprintf(out, n, "a connection from %s port %d", host, port);
}

static void gate_done(sv_door *d, gate *g)
{
    pthread_mutex_lock(&d->mu);
    if (g->prev) g->prev->next = g->next;
    else d->gates = g->next;
    if (g->next) g->next->prev = g->prev;
    if (atomic_load(&g->evict)) d->evicted--;
    d->gating--;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* Waits for the head (peeking, so the daemon reads it all again), at most
 * timeout_s from the connection on; then hands the connection over or
 * answers it. */
static void *gate_main(void *arg)
{
    gate *g = arg;
    sv_door *d = g->d;
    char *buf = xmalloc(HEAD_MAX + 1);
    sv_head hi = { .path = "" };
    sv_head_verdict v = SV_HEAD_MORE;
    double deadline = g->t0 + d->lim.timeout_s * 1000.0;
    ssize_t have = 0;
    while (!atomic_load(&d->stopping)) {
        ssize_t k = recv(g->fd, buf, HEAD_MAX, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
        if (k > have) {
            have = k;
            v = sv_head_check(buf, (size_t)k, d->lim.max_body, &hi);
            if (v != SV_HEAD_MORE) break;
        } else if (k > 0) {
            usleep(20000); /* no news although readable: poll is not honouring the low mark */
        }
        int left = (int)(deadline - base_now_ms());
        if (left <= 0) {
            v = bad(&hi, 408, "the request head took longer than %d s", d->lim.timeout_s);
            break;
        }
        if (atomic_load(&g->evict)) {
            v = bad(&hi, 408, "the request head was not whole after %.0f s, and the server needed the connection",
                    (base_now_ms() - g->t0) / 1000.0);
            break;
        }
        /* wake when more than what is peeked has come, not for the same bytes */
        int low = have > 0 ? (int)have + 1 : 1;
        setsockopt(g->fd, SOL_SOCKET, SO_RCVLOWAT, &low, sizeof low);
        struct pollfd p = { .fd = g->fd, .events = POLLIN | POLLRDHUP };
        poll(&p, 1, left < 100 ? left : 100);
        /* a client that stopped sending before its head ended has gone */
        bool hup = p.revents & (POLLRDHUP | POLLHUP | POLLERR);
        if (hup && recv(g->fd, buf, HEAD_MAX, MSG_PEEK | MSG_DONTWAIT) == have) break;
    }
    free(buf);
    int one = 1;
    setsockopt(g->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    if (v == SV_HEAD_OK && !atomic_load(&d->stopping)) {
        /* MHD_add_connection closes the socket itself when it fails */
        MHD_add_connection(d->daemon, g->fd, (const struct sockaddr *)&g->addr, g->alen);
    } else if (v == SV_HEAD_BAD) {
        char what[300];
        if (hi.what[0]) snprintf(what, sizeof what, "%s", hi.what);
        else peer_name(&g->addr, what, sizeof what);
        sv_log_rejected(d->lim.quiet, what, hi.status, hi.why);
        /* the slot is free while the answer lingers (a bounded while, and
         * without the door, which may be gone by then) */
        int fd = g->fd;
        gate_done(d, g);
        free(g);
        answer_and_close(fd, hi.path, hi.status, hi.why);
        return NULL;
    } else {
        close(g->fd);
    }
    gate_done(d, g);
    free(g);
    return NULL;
}

/* With a slot taken for it. */
static void admit(sv_door *d, int fd, const struct sockaddr_storage *addr, socklen_t alen)
{
    gate *g = xcalloc(1, sizeof *g);
    g->d = d;
    g->fd = fd;
    g->addr = *addr;
    g->alen = alen;
    g->t0 = base_now_ms();
    pthread_mutex_lock(&d->mu);
    g->next = d->gates;
    if (d->gates) d->gates->prev = g;
    d->gates = g;
    pthread_mutex_unlock(&d->mu);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 << 10);
    pthread_t th;
    if (pthread_create(&th, &at, gate_main, g) != 0) {
        gate_done(d, g);
        free(g);
        answer_and_close(fd, "", 503, "the server cannot take more connections now");
    }
    pthread_attr_destroy(&at);
}

/* ---- refusals (the door's thread only) ----------------------------------------------------- */

static void refusal_answer(sv_door *d, refusal *r)
{
    r->line[r->n] = 0;
    sv_head hi = { .path = "" };
    char *nl = strpbrk(r->line, "\r\n");
    request_line(r->line, nl ? (size_t)(nl - r->line) : r->n, nl != NULL, &hi);
    char msg[160];
    snprintf(msg, sizeof msg, "the server has %d connections open, its limit (ds4cl serve --max-connections)",
             d->lim.max_connections);
    char what[300];
    if (hi.what[0]) snprintf(what, sizeof what, "%s", hi.what);
    else peer_name(&r->addr, what, sizeof what);
    sv_log_rejected(d->lim.quiet, what, 503, msg);
    size_t n;
    char *out = reply_bytes(hi.path, 503, msg, &n);
    /* a fresh socket's send buffer holds the small answer whole */
    send(r->fd, out, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    free(out);
    shutdown(r->fd, SHUT_WR);
    r->answered = true;
    r->until = base_now_ms() + LINGER_MS;
}

static void refuse(sv_door *d, int fd, const struct sockaddr_storage *addr)
{
    if (d->n_ref == MAX_REFUSALS) {
        /* too many to linger on: the answer goes out, but may be reset */
        refusal r = { .fd = fd, .addr = *addr };
        refusal_answer(d, &r);
        close(fd);
        return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    d->ref[d->n_ref++] = (refusal){ .fd = fd, .until = base_now_ms() + REFUSE_WAIT_MS, .addr = *addr };
}

/* Reads from a refused connection; false once it is finished with. */
static bool refusal_step(sv_door *d, refusal *r, bool readable)
{
    if (readable) {
        char buf[4096];
        ssize_t k = recv(r->fd, buf, sizeof buf, 0);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) return false;
        if (k > 0 && !r->answered) {
            size_t take = (size_t)k < sizeof r->line - 1 - r->n ? (size_t)k : sizeof r->line - 1 - r->n;
            memcpy(r->line + r->n, buf, take);
            r->n += take;
            if (memchr(r->line, '\n', r->n) || r->n == sizeof r->line - 1) refusal_answer(d, r);
        }
    }
    if (base_now_ms() >= r->until) {
        if (r->answered) return false;
        refusal_answer(d, r);
    }
    return true;
}

/* ---- the door's thread ---------------------------------------------------------------------- */

/* At the limit, the oldest head still coming after EVICT_MS (or the
 * deadline, when that is shorter) gives way to a new connection: one that
 * trickles its head must not keep out those that send theirs at once.
 * Under the door's lock; whether a slot was freed. */
static bool evict_slowest(sv_door *d)
{
    double now = base_now_ms(), after = d->lim.timeout_s * 1000.0 < EVICT_MS ? d->lim.timeout_s * 1000.0 : EVICT_MS;
    gate *oldest = NULL;
    for (gate *g = d->gates; g; g = g->next)
        if (!atomic_load(&g->evict) && now - g->t0 >= after) oldest = g;
    if (!oldest) return false;
    atomic_store(&oldest->evict, true);
    d->evicted++;
    return true;
}

static void take_connections(sv_door *d)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage a;
        socklen_t alen = sizeof a;
        int fd = accept(d->lfd, (struct sockaddr *)&a, &alen);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE) usleep(100000); /* out of descriptors: let some close */
            return;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        pthread_mutex_lock(&d->mu);
        bool room = d->gating - d->evicted + d->open < d->lim.max_connections;
        if (!room) room = evict_slowest(d);
        if (room) d->gating++;
        pthread_mutex_unlock(&d->mu);
        if (room) admit(d, fd, &a, alen);
        else refuse(d, fd, &a);
    }
}

static void *door_main(void *arg)
{
    sv_door *d = arg;
    struct pollfd p[2 + MAX_REFUSALS];
    while (!atomic_load(&d->stopping)) {
        p[0] = (struct pollfd){ .fd = d->wake[0], .events = POLLIN };
        p[1] = (struct pollfd){ .fd = d->n_ref < MAX_REFUSALS ? d->lfd : -1, .events = POLLIN };
        for (int i = 0; i < d->n_ref; i++) p[2 + i] = (struct pollfd){ .fd = d->ref[i].fd, .events = POLLIN };
        int n_ref = d->n_ref;
        poll(p, (nfds_t)(2 + n_ref), 100);
        for (int i = n_ref - 1; i >= 0; i--) {
            if (refusal_step(d, &d->ref[i], p[2 + i].revents != 0)) continue;
            close(d->ref[i].fd);
            d->ref[i] = d->ref[--d->n_ref];
        }
        if (p[1].revents & POLLIN) take_connections(d);
    }
    for (int i = 0; i < d->n_ref; i++) close(d->ref[i].fd);
    d->n_ref = 0;
    return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------ */

sv_door *sv_door_open(const char *host, int port, ds4_error *err)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *res;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        ds4_error_set(err, "cannot resolve --host %s: %s", host, gai_strerror(rc));
        return NULL;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        ds4_error_set(err, "cannot listen on %s port %d: %s", host, port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(res);
        return NULL;
    }
    freeaddrinfo(res);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    sv_door *d = xcalloc(1, sizeof *d);
    d->lfd = fd;
    d->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                             : ((struct sockaddr_in *)&ss)->sin_port);
    if (pipe(d->wake) != 0) {
        ds4_error_set(err, "cannot make a pipe: %s", strerror(errno));
        close(fd);
        free(d);
        return NULL;
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    return d;
}

int sv_door_port(const sv_door *d)
{
    return d->port;
}

void sv_door_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                    enum MHD_ConnectionNotificationCode code)
{
    (void)c;
    sv_door *d = cls;
    pthread_mutex_lock(&d->mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        *socket_context = d;
        d->open++;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        *socket_context = NULL;
        d->open--;
    }
    pthread_mutex_unlock(&d->mu);
}

int sv_door_start(sv_door *d, struct MHD_Daemon *daemon, const sv_door_limits *lim, ds4_error *err)
{
    d->daemon = daemon;
    d->lim = *lim;
    if (pthread_create(&d->th, NULL, door_main, d) != 0) return ds4_error_set(err, "cannot start a thread");
    d->started = true;
    return 0;
}

void sv_door_stop(sv_door *d)
{
    if (!d || atomic_exchange(&d->stopping, true)) return;
    if (d->started) {
        ssize_t w = write(d->wake[1], "x", 1);
        (void)w;
        pthread_join(d->th, NULL);
    }
    close(d->lfd);
    pthread_mutex_lock(&d->mu);
    while (d->gating > 0) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void sv_door_free(sv_door *d)
{
    if (!d) return;
    sv_door_stop(d);
    close(d->wake[0]);
    close(d->wake[1]);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
}
