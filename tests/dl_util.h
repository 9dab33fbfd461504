/* dl_util.h — a small HTTP/1.1 file server for download tests.
 *
 * dlsrv_start() binds 127.0.0.1 on an ephemeral port in the test process,
 * then forks a child that serves one file (with Range support) and can be
 * told to misbehave per GET request: drop the connection at a byte offset,
 * answer an error status, lie about the size or hash, ignore Range, answer
 * through a Hugging Face-like redirect. Every connection is closed after
 * one response. The child dies with the test process (PR_SET_PDEATHSIG)
 * and counts what it did in memory shared with the test.
 */
#ifndef DS4CL_TESTS_DL_UTIL_H
#define DS4CL_TESTS_DL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef enum {
    DLSRV_SERVE = 0, /* serve the request normally */
    DLSRV_DROP,      /* announce the full length, close at file offset `at` */
    DLSRV_STATUS,    /* answer `status` with a short error body */
    DLSRV_STALL,     /* announce the full length, send up to `at`, then wait
                        (up to 30 s) for the client to hang up */
} dlsrv_action_kind;

typedef struct {
    dlsrv_action_kind kind;
    uint64_t at;
    int status;
} dlsrv_action;

#define DLSRV_MAX_ACTIONS 8
#define DLSRV_MAX_LOG 32

typedef struct {
    const void *body;
    size_t len;
    const char *path;            /* the file's path, e.g. "/m/x.gguf"; others get 404 */
    dlsrv_action get[DLSRV_MAX_ACTIONS]; /* what the i-th GET gets; later ones: SERVE */
    int n_get;
    int head_status;             /* non-zero: HEAD answers this status */
    bool no_range;               /* ignore Range headers (always 200) */
    const char *linked_etag;     /* X-Linked-ETag value (e.g. the body's sha256) */
    uint64_t linked_size;        /* X-Linked-Size, 0 = not sent */
    uint64_t claim_len;          /* size announced in Content-Length/-Range; 0 = len */
    bool redirect;               /* PATH answers 302 to /cdn PATH, linked headers on the 302 */
} dlsrv_config;

typedef struct {
    int n_requests, n_head, n_get;
    int n_done;                         /* requests answered and closed */
    uint64_t bytes_served;              /* body bytes written, all GETs */
    int64_t range_start[DLSRV_MAX_LOG]; /* per GET: Range start, -1 = none */
    uint64_t get_bytes[DLSRV_MAX_LOG];  /* per GET: body bytes written */
    char auth[DLSRV_MAX_LOG][128];      /* per request: Authorization value */
} dlsrv_stats;

typedef struct {
    pid_t pid;
    int port;
    dlsrv_stats *stats; /* shared with the server */
} dlsrv;

/* Starts the server (fails the test on error); c is copied by the fork. */
void dlsrv_start(dlsrv *s, const dlsrv_config *c);
void dlsrv_stop(dlsrv *s);

/* Waits (up to 10 s) until every request received has been answered and
 * closed, so the counters are final. */
void dlsrv_settle(dlsrv *s);

/* "http://127.0.0.1:PORT" + path, runner-owned. */
const char *dlsrv_url(const dlsrv *s, const char *path);

/* Deterministic pseudo-random test bytes (runner-owned). */
unsigned char *dl_test_bytes(size_t n, uint32_t seed);

/* Lower-case hex SHA-256 of data into out[65]. */
void dl_sha256_hex(const void *data, size_t n, char out[65]);

/* Size of a file, or -1 when it does not exist. */
long long dl_file_size(const char *path);

/* Frees a port: returns one nothing listens on (bound then closed). */
int dl_unused_port(void);

#endif
