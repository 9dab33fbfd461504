/* dl_util.c — the download tests' HTTP server and helpers. */
#include "tests/dl_util.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/test.h"

unsigned char *dl_test_bytes(size_t n, uint32_t seed)
{
    unsigned char *b = test_alloc(n);
    uint32_t x = seed ? seed : 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b[i] = (unsigned char)(x >> 11);
    }
    return b;
}

void dl_sha256_hex(const void *data, size_t n, char out[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dn = 0;
    EVP_Digest(data, n, d, &dn, EVP_sha256(), NULL);
    for (unsigned int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    out[64] = 0;
}

long long dl_file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

const char *dlsrv_url(const dlsrv *s, const char *path)
{
    return test_printf("http://127.0.0.1:%d%s", s->port, path);
}

/* ---- the server (child process) ---------------------------------------- */

static bool send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Reads the request head; returns its length or -1. */
static int read_request(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = recv(fd, buf + n, cap - n - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        n += (size_t)r;
        buf[n] = 0;
        if (strstr(buf, "\r\n\r\n")) return (int)n;
    }
    return -1;
}

static const char *find_header(const char *req, const char *name, char *out, size_t n)
{
    size_t nl = strlen(name);
    for (const char *line = strstr(req, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (!strncasecmp(h, name, nl) && h[nl] == ':') {
            h += nl + 1;
            while (*h == ' ') h++;
            size_t len = strcspn(h, "\r\n");
            if (len >= n) len = n - 1;
            memcpy(out, h, len);
            out[len] = 0;
            return out;
        }
    }
    return NULL;
}

static void linked_headers(const dlsrv_config *c, char *h, size_t n)
{
    size_t k = 0;
    h[0] = 0;
    if (c->linked_size) k += (size_t)snprintf(h + k, n - k, "X-Linked-Size: %llu\r\n", (unsigned long long)c->linked_size);
    if (c->linked_etag) snprintf(h + k, n - k, "X-Linked-ETag: \"%s\"\r\n", c->linked_etag);
}

static void simple_status(int fd, int status, const char *extra)
{
    char h[512];
    int n = snprintf(h, sizeof h, "HTTP/1.1 %d Test\r\nContent-Length: 5\r\nConnection: close\r\n%s\r\nerror",
                     status, extra ? extra : "");
    send_all(fd, h, (size_t)n);
}

static void serve_one(int fd, const dlsrv_config *c, dlsrv_stats *st)
{
    char req[8192];
    if (read_request(fd, req, sizeof req) < 0) {
        /* Not a request (a port probe): not counted at all. */
        __atomic_sub_fetch(&st->n_done, 1, __ATOMIC_SEQ_CST);
        return;
    }
    char method[16] = "", path[1024] = "";
    if (sscanf(req, "%15s %1023s", method, path) != 2) return;
    int ri = __atomic_fetch_add(&st->n_requests, 1, __ATOMIC_SEQ_CST);
    char auth[128];
    if (ri < DLSRV_MAX_LOG && find_header(req, "Authorization", auth, sizeof auth))
        snprintf(st->auth[ri], sizeof st->auth[ri], "%s", auth);
    bool head = !strcmp(method, "HEAD");
    if (head) st->n_head++;

    char linked[256];
    linked_headers(c, linked, sizeof linked);
    const char *want = c->path ? c->path : path;
    char cdn[1100];
    snprintf(cdn, sizeof cdn, "/cdn%s", want);

    if (c->redirect && !strcmp(path, want)) {
        char h[2048];
        int n = snprintf(h, sizeof h, "HTTP/1.1 302 Found\r\nLocation: %s\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n",
                         cdn, linked);
        send_all(fd, h, (size_t)n);
        return;
    }
    bool is_file = c->redirect ? !strcmp(path, cdn) : !strcmp(path, want);
    if (!is_file) {
        simple_status(fd, 404, NULL);
        return;
    }
    const char *extra = c->redirect ? "" : linked;
    uint64_t claim = c->claim_len ? c->claim_len : c->len;
    if (head) {
        if (c->head_status) {
            simple_status(fd, c->head_status, NULL);
            return;
        }
        char h[1024];
        int n = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nAccept-Ranges: bytes\r\n%sConnection: close\r\n\r\n",
                         (unsigned long long)claim, extra);
        send_all(fd, h, (size_t)n);
        return;
    }

    int gi = st->n_get++;
    dlsrv_action act = gi < c->n_get ? c->get[gi] : (dlsrv_action){ DLSRV_SERVE, 0, 0 };
    if (gi < DLSRV_MAX_LOG) st->range_start[gi] = -1;
    if (act.kind == DLSRV_STATUS) {
        simple_status(fd, act.status, NULL);
        return;
    }
    uint64_t start = 0;
    bool ranged = false;
    char range[128];
    if (!c->no_range && find_header(req, "Range", range, sizeof range)) {
        unsigned long long s;
        if (sscanf(range, "bytes=%llu-", &s) == 1) {
            start = s;
            ranged = true;
            if (gi < DLSRV_MAX_LOG) st->range_start[gi] = (int64_t)s;
        }
    }
    char h[1024];
    int n;
    if (ranged && start >= claim) {
        n = snprintf(h, sizeof h, "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */%llu\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                     (unsigned long long)claim);
        send_all(fd, h, (size_t)n);
        return;
    }
    if (ranged) {
        n = snprintf(h, sizeof h,
                     "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %llu-%llu/%llu\r\nContent-Length: %llu\r\n%sConnection: close\r\n\r\n",
                     (unsigned long long)start, (unsigned long long)(claim - 1), (unsigned long long)claim,
                     (unsigned long long)(claim - start), extra);
    } else {
        n = snprintf(h, sizeof h, "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\nAccept-Ranges: bytes\r\n%sConnection: close\r\n\r\n",
                     (unsigned long long)claim, extra);
    }
    if (!send_all(fd, h, (size_t)n)) return;
    uint64_t end = c->len;
    if ((act.kind == DLSRV_DROP || act.kind == DLSRV_STALL) && act.at > start && act.at < end) end = act.at;
    const unsigned char *body = c->body;
    for (uint64_t off = start; off < end;) {
        size_t chunk = end - off < 4096 ? (size_t)(end - off) : 4096;
        if (!send_all(fd, body + off, chunk)) break;
        off += chunk;
        st->bytes_served += chunk;
        if (gi < DLSRV_MAX_LOG) st->get_bytes[gi] += chunk;
    }
    if (act.kind == DLSRV_STALL) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        poll(&p, 1, 30000);
    }
}

static _Noreturn void server_main(int lfd, const dlsrv_config *c, dlsrv_stats *st, pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR) continue;
            _exit(1);
        }
        struct timeval tv = { 5, 0 };
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        serve_one(fd, c, st);
        /* Let the client see everything sent before the close. */
        shutdown(fd, SHUT_WR);
        char sink[256];
        while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {}
        close(fd);
        __atomic_add_fetch(&st->n_done, 1, __ATOMIC_SEQ_CST);
    }
}

static int listen_local(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 16) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

void dlsrv_start(dlsrv *s, const dlsrv_config *c)
{
    memset(s, 0, sizeof *s);
    s->stats = mmap(NULL, sizeof *s->stats, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (s->stats == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
    memset(s->stats, 0, sizeof *s->stats);
    int lfd = listen_local(&s->port);
    if (lfd < 0) FAIL("cannot listen on 127.0.0.1: %s", strerror(errno));
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) FAIL("fork: %s", strerror(errno));
    if (pid == 0) server_main(lfd, c, s->stats, parent);
    close(lfd);
    s->pid = pid;
}

void dlsrv_settle(dlsrv *s)
{
    for (int i = 0; i < 1000; i++) {
        if (__atomic_load_n(&s->stats->n_done, __ATOMIC_SEQ_CST) >=
            __atomic_load_n(&s->stats->n_requests, __ATOMIC_SEQ_CST))
            return;
        sleep_ms(10);
    }
    FAIL("the test server did not finish its requests");
}

void dlsrv_stop(dlsrv *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
    if (s->stats && s->stats != MAP_FAILED) munmap(s->stats, sizeof *s->stats);
    s->stats = NULL;
}

int dl_unused_port(void)
{
    int port = 0;
    int fd = listen_local(&port);
    if (fd < 0) FAIL("cannot bind 127.0.0.1: %s", strerror(errno));
    close(fd);
    return port;
}
