/* http_door.h — the server's front door (http_door.c) and what it shares
 * with the routes (http.c).
 *
 * The door owns the listening socket. Each connection it accepts is either
 * over --max-connections, and then answered 503 with Retry-After (in the
 * shape of the API its request line names, OpenAI's when none came within
 * a second) and closed, unless a head has been coming for over 2 s: that
 * one gives way (408) to the new connection; or given a thread that waits
 * for its request head, all of it, within --timeout however slowly it
 * trickles (else 408), and checks its framing: the request line, header
 * lines, Content-Length, Transfer-Encoding and, when already sent, the
 * first chunk size. A head that passes goes to libmicrohttpd untouched:
 * the check only peeks at the socket (MSG_PEEK), so the daemon reads every
 * byte itself. One that fails is answered with a JSON error at once. The check exists because
 * libmicrohttpd answers these cases with HTML, or not at all, and cannot be
 * told otherwise; it decides nothing about a valid request.
 *
 * Every reply says Connection: close, so each connection carries one
 * request and every request head passes the door. */
#ifndef DS4CL_SERVE_HTTP_DOOR_H
#define DS4CL_SERVE_HTTP_DOOR_H

#include <microhttpd.h>

#include "serve/serve_impl.h"

typedef struct sv_door sv_door;

typedef struct {
    int timeout_s;          /* the request head's deadline */
    int max_connections;    /* open at once, heads being read included */
    size_t max_body;        /* a larger Content-Length or first chunk gets 413 */
    bool quiet;             /* no log line for what is turned away */
} sv_door_limits;

/* Binds and listens; NULL with a message in err. */
sv_door *sv_door_open(const char *host, int port, ds4_error *err);
int sv_door_port(const sv_door *d);
/* For MHD_OPTION_NOTIFY_CONNECTION (cls: the door): counts the daemon's
 * connections against the limit. */
void sv_door_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                    enum MHD_ConnectionNotificationCode code);
/* Starts accepting, handing good heads to daemon (which must have been
 * started with MHD_USE_NO_LISTEN_SOCKET and MHD_USE_ITC). -1 with a
 * message when the thread cannot start. */
int sv_door_start(sv_door *d, struct MHD_Daemon *daemon, const sv_door_limits *lim, ds4_error *err);
/* Stops accepting, ends the heads being read and the refusals, closes the
 * socket: before stopping the daemon. */
void sv_door_stop(sv_door *d);
/* Frees the door (stopping it first if need be): after the daemon has
 * stopped, since its connections' ends are counted here. */
void sv_door_free(sv_door *d);

/* ---- the request head's check (exposed for the fuzz target) ----------------------- */

typedef enum { SV_HEAD_MORE = 0, SV_HEAD_OK, SV_HEAD_BAD } sv_head_verdict;

typedef struct {
    char what[300];      /* "METHOD PATH" once the request line is whole and sound */
    char path[256];      /* the target as far as it came ("" before): the error shape */
    unsigned status;     /* when bad: 400, 413, 414, 431 or 501 */
    char why[160];       /* when bad: the client-facing message */
} sv_head;

/* The request head at the start of b, of which n bytes have come: whole and
 * sound (SV_HEAD_OK), bad, or not all there yet. Checks the framing only:
 * the request line (token method, a target of visible ASCII, HTTP/1.0 or
 * 1.1), header lines (token name, colon, no control characters, no
 * folding), Content-Length (digits, consistent, at most max_body),
 * Transfer-Encoding (chunked only, not with Content-Length), the size of
 * the head (32 KiB) and, when it follows in b, the first chunk size (hex,
 * at most max_body). *h must start zeroed. */
sv_head_verdict sv_head_check(const char *b, size_t n, size_t max_body, sv_head *h);

/* ---- shared with http.c ---------------------------------------------------------- */

/* Whether path belongs to the Anthropic API (its error shape). */
bool sv_path_is_anthropic(const char *path);
/* The API's error body for path: {"error":{"message","type","param","code"}}
 * or {"type":"error","error":{"type","message"}}; malloc'd. */
char *sv_error_body(const char *path, unsigned status, const char *code, const char *msg);
/* The request log's line for a request turned away (unless quiet):
 * "ds4cl serve: WHAT: STATUS MESSAGE". */
void sv_log_rejected(bool quiet, const char *what, unsigned status, const char *msg);

#endif
