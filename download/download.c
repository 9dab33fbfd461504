/* download.c — resumable, verified model downloads over libcurl. */
#include "download/download.h"

#include <ctype.h>
#include <stdarg.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "base/progress.h"

/* File names as published in the repository (ds4's download script uses
 * the same ones). The imatrix files are the preferred quantizations. */
const download_target download_targets[] = {
    { "q2", "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2.gguf",
      "2-bit routed experts, about 81 GB (for 96-128 GB machines)" },
    { "q4", "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2.gguf",
      "4-bit routed experts, about 153 GB (for 256 GB machines)" },
    { "q2-imatrix", "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix.gguf",
      "2-bit routed experts quantized with an importance matrix, about 81 GB" },
    { "q4-imatrix", "DeepSeek-V4-Flash-Q4KExperts-F16HC-F16Compressor-F16Indexer-Q8Attn-Q8Shared-Q8Out-chat-v2-imatrix.gguf",
      "4-bit routed experts quantized with an importance matrix, about 153 GB" },
    { NULL, NULL, NULL },
};

const download_target *download_target_find(const char *name)
{
    for (const download_target *t = download_targets; t->name; t++)
        if (!strcmp(t->name, name)) return t;
    return NULL;
}

static bool is_http_url(const char *s)
{
    return !strncasecmp(s, "http://", 7) || !strncasecmp(s, "https://", 8);
}

int download_resolve(const char *what, const char *base_url, char *url, size_t url_n,
                     char *file, size_t file_n, ds4_error *err)
{
    if (is_http_url(what)) {
        const char *path = strchr(strstr(what, "://") + 3, '/');
        size_t end = path ? strcspn(path, "?#") : 0;
        const char *seg = NULL;
        size_t seg_len = 0;
        if (path) {
            /* last non-empty segment before the query */
            size_t i = end;
            while (i > 0 && path[i - 1] == '/') i--;
            size_t j = i;
            while (j > 0 && path[j - 1] != '/') j--;
            seg = path + j;
            seg_len = i - j;
        }
        if (!seg || seg_len == 0 || (seg_len == 1 && seg[0] == '.') ||
            (seg_len == 2 && seg[0] == '.' && seg[1] == '.') || memchr(seg, '%', seg_len)) {
            ds4_error_set(err, "cannot tell a file name from the URL %s", what);
            return -1;
        }
        if (seg_len >= file_n || strlen(what) >= url_n) {
            ds4_error_set(err, "the URL is too long");
            return -1;
        }
        memcpy(file, seg, seg_len);
        file[seg_len] = 0;
        memcpy(url, what, strlen(what) + 1);
        return 0;
    }
    const download_target *t = download_target_find(what);
    if (!t) {
        strbuf b = { 0 };
        sb_printf(&b, "unknown model '%s': choose one of", what);
        for (const download_target *k = download_targets; k->name; k++)
            sb_printf(&b, " %s", k->name);
        sb_puts(&b, ", or give an http(s) URL");
        ds4_error_set(err, "%s", sb_str(&b));
        sb_free(&b);
        return -1;
    }
    if (!base_url) base_url = getenv("DS4CL_MODEL_BASE_URL");
    if (!base_url || !*base_url) base_url = DOWNLOAD_DEFAULT_BASE_URL;
    size_t bl = strlen(base_url);
    while (bl > 0 && base_url[bl - 1] == '/') bl--;
    int n = snprintf(url, url_n, "%.*s/%s", (int)bl, base_url, t->file);
    if (n < 0 || (size_t)n >= url_n || strlen(t->file) >= file_n) {
        ds4_error_set(err, "the URL is too long");
        return -1;
    }
    memcpy(file, t->file, strlen(t->file) + 1);
    return 0;
}

/* ---- one download ---------------------------------------------------- */

enum { FAIL_NONE = 0, FAIL_TRANSIENT, FAIL_PERMANENT, FAIL_CORRUPT };

typedef struct {
    const download_request *rq;
    download_result *res;
    char part[PATH_MAX + 8];
    int fd;
    uint64_t offset;        /* bytes in .part */
    uint64_t total;         /* expected size; 0 = not known */
    char sha_expected[65];  /* lower-case hex, "" = none published */
    EVP_MD_CTX *md;
    bool md_valid;          /* md covers exactly [0, offset) */

    /* the response being received (reset at each status line) */
    long status;
    bool have_cl, have_cr;
    uint64_t cl, cr_start, cr_total;
    bool cr_total_known;
    /* from any response of the redirect chain */
    uint64_t linked_size;
    bool have_linked_size;

    bool head;              /* the HEAD phase: no body expected */
    bool body_to_file;      /* the final response's body goes to .part */
    uint64_t got;           /* bytes written by this attempt */
    double last_data_ms;    /* when this attempt last received anything */
    bool stalled;           /* aborted by the stall watchdog */
    int fail;               /* FAIL_* decided inside a callback */
    char fail_msg[512];

    progress prog;
    bool prog_on;
    double rate;            /* smoothed bytes/s */
    double rate_t_ms;
    uint64_t rate_bytes;
} xfer;

static void set_fail(xfer *x, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_fail(xfer *x, int kind, const char *fmt, ...)
{
    if (x->fail >= kind) return;
    x->fail = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->fail_msg, sizeof x->fail_msg, fmt, ap);
    va_end(ap);
}

static void res_error(download_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void res_error(download_result *res, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->error, sizeof res->error, fmt, ap);
    va_end(ap);
}

static void note(const xfer *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(const xfer *x, const char *fmt, ...)
{
    if (x->rq->quiet) return;
    if (x->prog_on && x->prog.drawn) fputc('\n', stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
}

static bool interrupted(const xfer *x)
{
    return x->rq->interrupted && *x->rq->interrupted;
}

static void md_reset(xfer *x)
{
    EVP_DigestInit_ex(x->md, EVP_sha256(), NULL);
    x->md_valid = true;
}

/* Starts .part over from zero (server without Range, bad partial data). */
static int restart_part(xfer *x)
{
    if (ftruncate(x->fd, 0) != 0 || lseek(x->fd, 0, SEEK_SET) != 0) {
        set_fail(x, FAIL_PERMANENT, "cannot truncate %s: %s", x->part, strerror(errno));
        return -1;
    }
    x->offset = 0;
    md_reset(x);
    return 0;
}

static bool parse_u64(const char *s, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    if (p >= end || !isdigit((unsigned char)*p)) return false;
    for (; p < end && isdigit((unsigned char)*p); p++) {
        if (v > (UINT64_MAX - 9) / 10) return false;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *out = v;
    return p == end || !isdigit((unsigned char)*p);
}

/* Value of a header line "Name: value" when the name matches, trimmed. */
static bool header_value(const char *line, size_t len, const char *name, const char **v, const char **vend)
{
    size_t nl = strlen(name);
    if (len <= nl || strncasecmp(line, name, nl) != 0 || line[nl] != ':') return false;
    const char *p = line + nl + 1, *e = line + len;
    while (p < e && (*p == ' ' || *p == '\t')) p++;
    while (e > p && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' ' || e[-1] == '\t')) e--;
    *v = p;
    *vend = e;
    return true;
}

static void take_linked_etag(xfer *x, const char *v, const char *e)
{
    if (e - v >= 2 && v[0] == 'W' && v[1] == '/') v += 2;
    if (e > v && *v == '"') v++;
    if (e > v && e[-1] == '"') e--;
    if (e - v != 64) return;
    for (int i = 0; i < 64; i++) {
        if (!isxdigit((unsigned char)v[i])) return;
        x->sha_expected[i] = (char)tolower((unsigned char)v[i]);
    }
    x->sha_expected[64] = 0;
}

/* End of the final (non-redirect) response's headers: decide what its body
 * is and check its size claims against what we know. */
static void headers_complete(xfer *x)
{
    x->body_to_file = false;
    if (x->head || x->status < 200 || x->status >= 300) return;
    uint64_t total = 0;
    bool known = false;
    if (x->status == 206) {
        if (!x->have_cr) {
            set_fail(x, FAIL_PERMANENT, "the server answered 206 without a Content-Range");
            return;
        }
        if (x->cr_start != x->offset) {
            set_fail(x, FAIL_PERMANENT, "the server resumed at byte %" PRIu64 " instead of %" PRIu64,
                     x->cr_start, x->offset);
            return;
        }
        if (x->cr_total_known) { total = x->cr_total; known = true; }
    } else {
        if (x->offset > 0) {
            note(x, "the server does not resume downloads; starting over");
            if (restart_part(x) != 0) return;
        }
        if (x->have_cl) { total = x->cl; known = true; }
    }
    if (known) {
        if (x->total && total != x->total) {
            set_fail(x, FAIL_PERMANENT,
                     "size mismatch: the file is published as %" PRIu64 " bytes but the server sends %" PRIu64,
                     x->total, total);
            return;
        }
        x->total = total;
    }
    x->body_to_file = true;
}

static size_t on_header(char *buf, size_t size, size_t nitems, void *ud)
{
    xfer *x = ud;
    size_t len = size * nitems;
    const char *v, *e;
    if (len >= 5 && !strncmp(buf, "HTTP/", 5)) {
        const char *sp = memchr(buf, ' ', len);
        x->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        x->have_cl = x->have_cr = x->cr_total_known = false;
        x->res->http_status = x->status;
    } else if (len <= 2 && (buf[0] == '\r' || buf[0] == '\n')) {
        /* Redirects and interim responses are followed by another one. */
        if (x->status >= 200 && !(x->status >= 300 && x->status < 400)) headers_complete(x);
    } else if (header_value(buf, len, "content-length", &v, &e)) {
        x->have_cl = parse_u64(v, e, &x->cl);
    } else if (header_value(buf, len, "content-range", &v, &e)) {
        /* "bytes START-END/TOTAL"; an asterisk stands for an unknown TOTAL,
         * or for START-END in a 416 answer. */
        if (e - v > 6 && !strncasecmp(v, "bytes ", 6)) {
            const char *p = v + 6, *dash = memchr(p, '-', (size_t)(e - p)), *slash = memchr(p, '/', (size_t)(e - p));
            if (slash) {
                x->cr_total_known = parse_u64(slash + 1, e, &x->cr_total);
                if (dash && dash < slash) x->have_cr = parse_u64(p, dash, &x->cr_start);
            }
        }
    } else if (header_value(buf, len, "x-linked-size", &v, &e)) {
        x->have_linked_size = parse_u64(v, e, &x->linked_size);
    } else if (header_value(buf, len, "x-linked-etag", &v, &e)) {
        take_linked_etag(x, v, e);
    }
    return len;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *ud)
{
    xfer *x = ud;
    size_t len = size * nmemb;
    if (x->fail) return 0;
    if (!x->body_to_file) return len; /* error pages and the like */
    if (x->total && x->offset + len > x->total) {
        set_fail(x, FAIL_CORRUPT, "the server sent more than the %" PRIu64 " bytes it announced", x->total);
        return 0;
    }
    const char *p = buf;
    size_t left = len;
    while (left) {
        ssize_t w = write(x->fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            set_fail(x, FAIL_PERMANENT, "cannot write %s: %s", x->part, strerror(errno));
            return 0;
        }
        p += w;
        left -= (size_t)w;
    }
    if (x->md_valid) EVP_DigestUpdate(x->md, buf, len);
    x->offset += len;
    x->got += len;
    x->last_data_ms = base_now_ms();
    x->res->fetched += len;
    return len;
}

static void show_progress(xfer *x)
{
    if (!x->prog_on) return;
    double now = base_now_ms();
    uint64_t fetched = x->res->fetched;
    if (x->rate_t_ms == 0) {
        x->rate_t_ms = now;
        x->rate_bytes = fetched;
    } else if (now - x->rate_t_ms >= 1000.0) {
        double inst = (double)(fetched - x->rate_bytes) * 1000.0 / (now - x->rate_t_ms);
        x->rate = x->rate > 0 ? 0.7 * x->rate + 0.3 * inst : inst;
        x->rate_t_ms = now;
        x->rate_bytes = fetched;
    }
    char a[32], b[32], r[32], eta[32], detail[160];
    if (x->total) {
        int n = snprintf(detail, sizeof detail, "%s / %s", format_bytes(a, sizeof a, x->offset),
                         format_bytes(b, sizeof b, x->total));
        if (x->rate > 0)
            snprintf(detail + n, sizeof detail - (size_t)n, "  %s/s  ETA %s", format_bytes(r, sizeof r, (uint64_t)x->rate),
                     format_duration(eta, sizeof eta, (double)(x->total - x->offset) / x->rate));
        progress_update(&x->prog, (double)x->offset / (double)x->total, detail);
    } else {
        snprintf(detail, sizeof detail, "%s", format_bytes(a, sizeof a, x->offset));
        progress_update(&x->prog, -1, detail);
    }
}

static int on_xferinfo(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal; (void)dlnow; (void)ultotal; (void)ulnow;
    xfer *x = ud;
    if (interrupted(x)) return 1;
    /* libcurl calls this about once a second even when nothing arrives. */
    int stall_s = x->rq->stall_timeout_s > 0 ? x->rq->stall_timeout_s : 60;
    if (base_now_ms() - x->last_data_ms > stall_s * 1000.0) {
        x->stalled = true;
        return 1;
    }
    if (!x->head) show_progress(x);
    return 0;
}

static void init_curl_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static CURL *make_handle(xfer *x, struct curl_slist *hdrs, char *errbuf)
{
    CURL *h = curl_easy_init();
    if (!h) return NULL;
    curl_easy_setopt(h, CURLOPT_URL, x->rq->url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(h, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "ds4cl/" DS4CL_VERSION);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    return h;
}

static bool unreachable(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_COULDNT_RESOLVE_PROXY;
}

static bool transient_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return true;
    default:
        return false;
    }
}

/* Classifies a finished attempt whose curl code is OK by its HTTP status.
 * Returns FAIL_NONE when the status says the body was the file. */
static int classify_status(xfer *x)
{
    long s = x->status;
    if (s >= 200 && s < 300) return FAIL_NONE;
    if (s == 404 || s == 410) {
        set_fail(x, FAIL_PERMANENT, "not found (HTTP %ld): %s", s, x->rq->url);
    } else if (s == 401 || s == 403) {
        set_fail(x, FAIL_PERMANENT,
                 "access denied (HTTP %ld): %s\nIf the file needs a Hugging Face token, pass --token TOKEN or set HF_TOKEN.",
                 s, x->rq->url);
    } else if (s == 408 || s == 429 || s >= 500) {
        set_fail(x, FAIL_TRANSIENT, "the server answered HTTP %ld", s);
    } else if (s >= 300 && s < 400) {
        set_fail(x, FAIL_PERMANENT, "too many redirects (HTTP %ld)", s);
    } else {
        set_fail(x, FAIL_PERMANENT, "the server answered HTTP %ld for %s", s, x->rq->url);
    }
    return x->fail;
}

/* Interruptible sleep. */
static void nap(const xfer *x, int ms)
{
    while (ms > 0 && !interrupted(x)) {
        int step = ms < 50 ? ms : 50;
        struct timespec ts = { 0, (long)step * 1000000L };
        nanosleep(&ts, NULL);
        ms -= step;
    }
}

static int retry_delay_ms(const download_request *rq, int failures)
{
    long base = rq->backoff_ms > 0 ? rq->backoff_ms : 1000;
    long cap = rq->backoff_max_ms > 0 ? rq->backoff_max_ms : 30000;
    long d = base;
    for (int i = 1; i < failures && d < cap; i++) d *= 2;
    return (int)(d < cap ? d : cap);
}

static void describe_curl_error(xfer *x, CURLcode rc, const char *errbuf)
{
    const char *what = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    if (rc == CURLE_ABORTED_BY_CALLBACK && x->stalled)
        set_fail(x, FAIL_TRANSIENT, "the transfer stalled: nothing received for %d s",
                 x->rq->stall_timeout_s > 0 ? x->rq->stall_timeout_s : 60);
    else if (unreachable(rc))
        set_fail(x, FAIL_TRANSIENT, "cannot reach the server (offline?): %s", what);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        set_fail(x, FAIL_TRANSIENT, "the transfer stalled: %s", what);
    else if (rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_GOT_NOTHING)
        set_fail(x, FAIL_TRANSIENT, "the connection broke off: %s", what);
    else
        set_fail(x, transient_curl(rc) ? FAIL_TRANSIENT : FAIL_PERMANENT, "%s", what);
}

/* HEAD: learn size and hash before touching the disk. Returns FAIL_*. */
static int probe(xfer *x, struct curl_slist *hdrs)
{
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *h = make_handle(x, hdrs, errbuf);
    if (!h) {
        set_fail(x, FAIL_PERMANENT, "cannot initialise libcurl");
        return x->fail;
    }
    curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    x->head = true;
    x->status = 0;
    x->stalled = false;
    x->last_data_ms = base_now_ms();
    CURLcode rc = curl_easy_perform(h);
    x->head = false;
    curl_easy_cleanup(h);
    if (rc == CURLE_ABORTED_BY_CALLBACK && interrupted(x)) return FAIL_NONE;
    if (rc != CURLE_OK) {
        describe_curl_error(x, rc, errbuf);
        return x->fail;
    }
    long s = x->status;
    /* Only "try again" answers and a missing file count here. Anything
     * else (HEAD not allowed, a CDN whose signed URL covers GET only, an
     * auth wall) is left for the GET to report: the HEAD is only a probe. */
    if (s == 404 || s == 410 || s == 408 || s == 429 || s >= 500) {
        if (classify_status(x) != FAIL_NONE) return x->fail;
    }
    if (s < 200 || s >= 300) {
        if (x->have_linked_size) x->total = x->linked_size;
        return FAIL_NONE;
    }
    if (x->have_linked_size && x->have_cl && x->linked_size != x->cl) {
        set_fail(x, FAIL_PERMANENT,
                 "size mismatch: the file is published as %" PRIu64 " bytes but the server sends %" PRIu64,
                 x->linked_size, x->cl);
        return x->fail;
    }
    if (x->have_linked_size) x->total = x->linked_size;
    else if (x->have_cl) x->total = x->cl;
    return FAIL_NONE;
}

/* Hashes what .part already holds so the hash can continue with new bytes. */
static int hash_existing(xfer *x)
{
    md_reset(x);
    if (x->offset == 0) return 0;
    size_t cap = 4u << 20;
    unsigned char *buf = xmalloc(cap);
    progress p;
    bool show = x->rq->show_progress;
    if (show) progress_start(&p, "checking partial download", PROGRESS_LINES);
    uint64_t done = 0;
    while (done < x->offset) {
        if (interrupted(x)) {
            free(buf);
            x->md_valid = false;
            if (show) progress_finish(&p, NULL);
            return -1;
        }
        size_t want = x->offset - done < cap ? (size_t)(x->offset - done) : cap;
        ssize_t r = pread(x->fd, buf, want, (off_t)done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            set_fail(x, FAIL_PERMANENT, "cannot read %s: %s", x->part, r < 0 ? strerror(errno) : "short file");
            free(buf);
            x->md_valid = false;
            if (show) progress_finish(&p, NULL);
            return -1;
        }
        EVP_DigestUpdate(x->md, buf, (size_t)r);
        done += (uint64_t)r;
        if (show) progress_update(&p, (double)done / (double)x->offset, NULL);
    }
    free(buf);
    if (show) progress_finish(&p, NULL);
    return 0;
}

static void md_hex(xfer *x, char out[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    EVP_DigestFinal_ex(x->md, d, &n);
    for (unsigned int i = 0; i < n && i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    out[64] = 0;
    x->md_valid = false;
}

/* The directory part of path ("." when there is none). */
static void dir_of(const char *path, char *dir, size_t n)
{
    snprintf(dir, n, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, n, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
}

static int check_disk_space(xfer *x, const char *dest)
{
    if (!x->total || x->total <= x->offset) return 0;
    char dir[PATH_MAX];
    dir_of(dest, dir, sizeof dir);
    struct statvfs vfs;
    if (statvfs(dir, &vfs) != 0) return 0;
    uint64_t free_bytes = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    uint64_t need = x->total - x->offset;
    if (free_bytes < need) {
        char a[32], b[32];
        set_fail(x, FAIL_PERMANENT, "not enough disk space in %s: %s more needed, %s free", dir,
                 format_bytes(a, sizeof a, need), format_bytes(b, sizeof b, free_bytes));
        return -1;
    }
    return 0;
}

static void fsync_dir_of(const char *path)
{
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    fsync(fd);
    close(fd);
}

download_status download_file(const download_request *rq, download_result *res)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_curl_once);

    memset(res, 0, sizeof *res);
    xfer *x = xcalloc(1, sizeof *x);
    x->rq = rq;
    x->res = res;
    x->fd = -1;
    x->md = EVP_MD_CTX_new();
    if (!x->md) abort();
    download_status st = DOWNLOAD_FAILED;
    bool created_part = false, discard_part = false;

    struct curl_slist *hdrs = NULL;
    char auth[1024];
    if (rq->token && *rq->token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", rq->token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    /* Ranges are byte offsets into the file, never into a compressed form. */
    hdrs = curl_slist_append(hdrs, "Accept-Encoding: identity");

    int n = snprintf(x->part, sizeof x->part, "%s.part", rq->dest);
    if (n < 0 || (size_t)n >= sizeof x->part) {
        res_error(res, "the destination path is too long");
        goto out;
    }

    int max_retries = rq->max_retries >= 0 ? rq->max_retries : 8;
    int failures = 0;

    /* Phase 1: HEAD, retried like a transfer. */
    for (;;) {
        int f = probe(x, hdrs);
        if (interrupted(x)) { st = DOWNLOAD_INTERRUPTED; goto out; }
        if (f == FAIL_NONE) break;
        if (f != FAIL_TRANSIENT) {
            res_error(res, "%s", x->fail_msg);
            goto out;
        }
        failures++;
        int limit = max_retries;
        if (!res->http_status && limit > 3) limit = 3; /* never reached the server */
        if (failures > limit) {
            res_error(res, "%s (gave up after %d attempts)", x->fail_msg, failures);
            goto out;
        }
        int d = retry_delay_ms(rq, failures);
        note(x, "%s; retrying in %.1f s (%d of %d)", x->fail_msg, d / 1000.0, failures, limit);
        x->fail = FAIL_NONE;
        nap(x, d);
    }

    /* Phase 2: open (or create) .part, exclusively. */
    struct stat pst;
    created_part = stat(x->part, &pst) != 0;
    x->fd = open(x->part, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (x->fd < 0) {
        res_error(res, "cannot open %s: %s", x->part, strerror(errno));
        goto out;
    }
    if (flock(x->fd, LOCK_EX | LOCK_NB) != 0) {
        res_error(res, "another download is writing %s", x->part);
        created_part = false;
        goto out;
    }
    if (fstat(x->fd, &pst) != 0) {
        res_error(res, "cannot stat %s: %s", x->part, strerror(errno));
        goto out;
    }
    x->offset = (uint64_t)pst.st_size;
    if (x->total && x->offset > x->total) {
        note(x, "the partial file is larger than the published size; starting over");
        if (restart_part(x) != 0) { res_error(res, "%s", x->fail_msg); goto out; }
    }
    res->resumed_from = x->offset;
    if (check_disk_space(x, rq->dest) != 0) {
        res_error(res, "%s", x->fail_msg);
        goto out;
    }
    if (x->offset > 0) {
        char a[32], b[32];
        note(x, "resuming at %s of %s", format_bytes(a, sizeof a, x->offset),
             x->total ? format_bytes(b, sizeof b, x->total) : "an unknown size");
        if (x->sha_expected[0] && hash_existing(x) != 0) {
            if (interrupted(x)) st = DOWNLOAD_INTERRUPTED;
            else res_error(res, "%s", x->fail_msg);
            goto out;
        }
    } else {
        md_reset(x);
    }

    /* Phase 3: GET with Range until the file is complete. */
    if (rq->show_progress) {
        progress_start(&x->prog, "download", PROGRESS_LINES);
        x->prog_on = true;
    }
    failures = 0;
    bool reached = res->http_status != 0;
    for (;;) {
        if (interrupted(x)) { st = DOWNLOAD_INTERRUPTED; goto out; }
        if (x->total && x->offset == x->total) break;
        char errbuf[CURL_ERROR_SIZE] = "", range[32];
        CURL *h = make_handle(x, hdrs, errbuf);
        if (!h) { res_error(res, "cannot initialise libcurl"); goto out; }
        if (x->offset > 0) {
            snprintf(range, sizeof range, "%" PRIu64 "-", x->offset);
            curl_easy_setopt(h, CURLOPT_RANGE, range);
        }
        x->status = 0;
        x->got = 0;
        x->stalled = false;
        x->last_data_ms = base_now_ms();
        x->fail = FAIL_NONE;
        x->body_to_file = false;
        res->attempts++;
        CURLcode rc = curl_easy_perform(h);
        curl_easy_cleanup(h);
        show_progress(x);
        if (x->status) reached = true;

        if (rc == CURLE_ABORTED_BY_CALLBACK && interrupted(x)) { st = DOWNLOAD_INTERRUPTED; goto out; }
        if (!x->fail) {
            if (rc != CURLE_OK) {
                describe_curl_error(x, rc, errbuf);
            } else if (x->status == 416 && x->offset > 0) {
                if (x->cr_total_known && x->cr_total == x->offset && (!x->total || x->total == x->offset)) {
                    x->total = x->offset; /* .part already held everything */
                    break;
                }
                note(x, "the server cannot resume this partial file; starting over");
                if (restart_part(x) == 0) set_fail(x, FAIL_TRANSIENT, "the server refused the range (HTTP 416)");
            } else if (classify_status(x) == FAIL_NONE) {
                if (!x->total || x->offset == x->total) {
                    x->total = x->offset;
                    break;
                }
                set_fail(x, FAIL_TRANSIENT, "the connection ended early at %" PRIu64 " of %" PRIu64 " bytes",
                         x->offset, x->total);
            }
        }
        if (x->fail == FAIL_CORRUPT) {
            discard_part = true;
            res_error(res, "%s", x->fail_msg);
            goto out;
        }
        if (x->fail == FAIL_PERMANENT) {
            res_error(res, "%s", x->fail_msg);
            goto out;
        }
        if (x->got > 0) failures = 0;
        failures++;
        int limit = max_retries;
        if (!reached && limit > 3) limit = 3;
        if (failures > limit) {
            res_error(res, "%s (gave up after %d attempts)", x->fail_msg, failures);
            goto out;
        }
        int d = retry_delay_ms(rq, failures);
        note(x, "%s; retrying in %.1f s (%d of %d)", x->fail_msg, d / 1000.0, failures, limit);
        nap(x, d);
    }

    /* Phase 4: verify, then publish atomically. */
    if (x->prog_on) {
        show_progress(x);
        progress_finish(&x->prog, NULL);
        x->prog_on = false;
    }
    if (fsync(x->fd) != 0) {
        res_error(res, "cannot sync %s: %s", x->part, strerror(errno));
        goto out;
    }
    if (fstat(x->fd, &pst) != 0 || (uint64_t)pst.st_size != x->offset) {
        res_error(res, "%s changed size while downloading", x->part);
        goto out;
    }
    if (x->sha_expected[0]) {
        if (!x->md_valid && hash_existing(x) != 0) {
            if (interrupted(x)) st = DOWNLOAD_INTERRUPTED;
            else res_error(res, "%s", x->fail_msg);
            goto out;
        }
        md_hex(x, res->sha256);
        if (strcmp(res->sha256, x->sha_expected) != 0) {
            snprintf(res->error, sizeof res->error,
                     "SHA-256 mismatch: expected %s, got %s; the damaged download was deleted",
                     x->sha_expected, res->sha256);
            discard_part = true;
            goto out;
        }
        res->sha256_checked = true;
    }
    if (rename(x->part, rq->dest) != 0) {
        res_error(res, "cannot rename %s to %s: %s", x->part, rq->dest, strerror(errno));
        goto out;
    }
    fsync_dir_of(rq->dest);
    st = DOWNLOAD_OK;

out:
    if (x->prog_on) progress_finish(&x->prog, NULL);
    res->size = x->offset;
    if (st != DOWNLOAD_OK && x->fd >= 0) {
        if (discard_part || (created_part && x->offset == 0)) unlink(x->part);
        if (discard_part) res->size = 0;
    }
    if (st == DOWNLOAD_INTERRUPTED && !res->error[0])
        res_error(res, "interrupted");
    if (x->fd >= 0) close(x->fd);
    curl_slist_free_all(hdrs);
    EVP_MD_CTX_free(x->md);
    free(x);
    return st;
}
