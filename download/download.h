/* download.h — fetching model files over HTTP(S) with libcurl.
 *
 * One file, one call: download_file() writes DEST.part, resuming it with an
 * HTTP Range request when it already holds bytes, retries transient failures
 * (connection errors, stalls, broken transfers, HTTP 408/429/5xx) with
 * exponential backoff, shows progress on stderr, checks the size and — when
 * the server publishes it — the SHA-256, and only then renames DEST.part to
 * DEST. Whatever goes wrong, DEST is never a partial file; DEST.part is kept
 * for the next attempt unless its bytes are known to be bad.
 *
 * What is checked against what:
 *   - Before the transfer a HEAD request learns the size: X-Linked-Size (the
 *     Hugging Face LFS size, sent on the redirect of a /resolve/ URL), else
 *     Content-Length. Both present and different: refused. A HEAD answered
 *     404/410 ends the download; one refused otherwise (405, 403 from a
 *     CDN URL signed for GET) is ignored and the GET decides.
 *   - Every response's own total (Content-Range "…/TOTAL", or Content-Length
 *     of a 200) must equal that size, and a 206 must start where .part ends.
 *   - The SHA-256 comes from X-Linked-ETag (Hugging Face sends the LFS
 *     object's sha256 there, quoted; any response of the redirect chain may
 *     carry it). Anything that is not 64 hex digits is ignored, so servers
 *     without it just skip the hash check. The hash is computed while the
 *     bytes arrive; a resumed download first hashes what .part holds.
 *   - A hash mismatch, or a server sending more than the size, deletes .part.
 *
 * A resumed transfer whose server ignores Range (answers 200) starts over.
 * Two processes never write the same .part (an exclusive flock). HEAD and
 * GET failures that never reached the server (refused, unresolvable) are
 * retried at most 3 times so that being offline is reported quickly.
 */
#ifndef DS4CL_DOWNLOAD_H
#define DS4CL_DOWNLOAD_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* The Hugging Face repository of the DS4 GGUF files; a target's URL is
 * BASE "/" FILE. $DS4CL_MODEL_BASE_URL replaces it. */
#define DOWNLOAD_DEFAULT_BASE_URL "https://huggingface.co/antirez/deepseek-v4-gguf/resolve/main"

typedef struct {
    const char *name;  /* q2, q4, q2-imatrix, q4-imatrix */
    const char *file;  /* file name in the repository */
    const char *about; /* one line for listings */
} download_target;

/* The known targets, ending with a zeroed entry. */
extern const download_target download_targets[];

/* The target called name, or NULL. */
const download_target *download_target_find(const char *name);

/* Turns `what` — a target name or an http(s) URL — into the URL to fetch
 * and the file name to save it as (a URL's last path segment, without its
 * query). base_url NULL means $DS4CL_MODEL_BASE_URL or the default. Returns
 * 0, or -1 with a message in err. */
int download_resolve(const char *what, const char *base_url, char *url, size_t url_n,
                     char *file, size_t file_n, ds4_error *err);

typedef enum {
    DOWNLOAD_OK = 0,
    DOWNLOAD_FAILED,
    DOWNLOAD_INTERRUPTED, /* *interrupted became non-zero; .part kept */
} download_status;

typedef struct {
    const char *url;
    const char *dest;          /* final path; the partial file is DEST.part */
    const char *token;         /* sent as "Authorization: Bearer TOKEN"; NULL = none */
    int max_retries;           /* failed attempts in a row before giving up; <0 = 8 */
    int backoff_ms;            /* first retry delay, doubled each time; 0 = 1000 */
    int backoff_max_ms;        /* 0 = 30000 */
    int stall_timeout_s;       /* an attempt receiving nothing this long fails; 0 = 60 */
    bool show_progress;        /* progress line on stderr */
    bool quiet;                /* no retry/resume notes on stderr */
    volatile sig_atomic_t *interrupted; /* polled; non-zero stops the download */
} download_request;

typedef struct {
    uint64_t size;          /* bytes of the finished file (or of .part when failed) */
    uint64_t resumed_from;  /* bytes .part held when the download started */
    uint64_t fetched;       /* body bytes received by this call, all attempts */
    int attempts;           /* GET requests made */
    bool sha256_checked;    /* the published SHA-256 matched */
    char sha256[65];        /* hex SHA-256 of the file when it was computed */
    long http_status;       /* last HTTP status seen (0 = none) */
    char error[768];        /* why, when not DOWNLOAD_OK */
} download_result;

download_status download_file(const download_request *rq, download_result *res);

#endif
