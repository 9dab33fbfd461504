/* cdp.h — a small Chrome DevTools Protocol client.
 *
 * Three layers, each usable alone:
 *
 *  - the browser process: find a Chromium/Chrome executable, start it
 *    headless with a throwaway profile and a random debugging port, and make
 *    sure it and every process it starts die with it. A watchdog process
 *    sits between us and the browser: it holds the read end of a pipe whose
 *    write end only this process has, so when this process ends for any
 *    reason (exit, crash, SIGKILL) the watchdog kills the browser's whole
 *    process group. cdp_browser_close() does the same at once and then
 *    sweeps any straggler that still names the profile directory.
 *
 *  - the HTTP endpoints (/json/version, /json/new, /json/close) over libcurl.
 *
 *  - one WebSocket session per target over libwebsockets, carrying json-c
 *    messages: a call sends {"id","method","params"} and waits for the reply
 *    with that id; replies to other ids (calls given up earlier) are
 *    counted and dropped; events go to a handler as they arrive.
 *
 * Every wait is bounded by a timeout and polls a cancellation callback at
 * least every 20 ms, so nothing here blocks its caller indefinitely. All
 * errors come back as a short readable sentence in err. None of these
 * objects may be shared between threads; different ones may be used from
 * different threads.
 */
#ifndef DS4CL_CDP_H
#define DS4CL_CDP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/base.h"

struct json_object;

/* Status codes of every waiting function. */
enum {
    CDP_OK = 0,
    CDP_ERROR = -1,     /* the browser answered with an error, or spoke nonsense */
    CDP_TIMEOUT = -2,
    CDP_CANCELLED = -3,
    CDP_CLOSED = -4,    /* the connection is gone (or never came up) */
};

/* Polled while waiting; true stops the wait with CDP_CANCELLED. */
typedef struct {
    bool (*fn)(void *ud);
    void *ud;
} cdp_cancel;

/* ---- browser process ------------------------------------------------------ */

typedef struct cdp_browser cdp_browser;

typedef struct {
    const char *executable; /* path or program name; NULL = search PATH */
    const char *base_dir;   /* the throwaway profile goes below it; NULL = $TMPDIR or /tmp */
    int start_timeout_ms;   /* until the DevTools endpoint answers; 0 = 20 s */
} cdp_launch_opts;

/* The executable to run: opts' explicit one (a name is looked up on PATH),
 * else the first of chromium, chromium-browser, google-chrome,
 * google-chrome-stable, chrome found on PATH. malloc'd; NULL with a message
 * naming what was tried when there is none. */
char *cdp_find_browser(const char *explicit_path, ds4_error *err);

/* Starts the browser and waits until its DevTools endpoint answers: NULL
 * with a message when it cannot, or when cancelled (the browser is then
 * closed first). */
cdp_browser *cdp_browser_launch(const cdp_launch_opts *opts, const cdp_cancel *cancel,
                                ds4_error *err);

/* The two halves of cdp_browser_launch, for a caller that must not wait
 * for a browser's teardown when a start is cancelled. cdp_browser_start
 * spawns the browser and returns at once (NULL with a message when it
 * cannot). cdp_browser_wait_ready waits, bounded by start_timeout_ms from
 * each call, until the endpoint answers; after CDP_CANCELLED the browser
 * goes on starting and may be waited for again, after another failure it
 * is only good for cdp_browser_close. */
cdp_browser *cdp_browser_start(const cdp_launch_opts *opts, ds4_error *err);
int cdp_browser_wait_ready(cdp_browser *b, const cdp_cancel *cancel, ds4_error *err);

/* "http://127.0.0.1:PORT" of the DevTools HTTP endpoint, once known. */
const char *cdp_browser_http_url(const cdp_browser *b);
/* The throwaway directory (profile, logs); removed by cdp_browser_close. */
const char *cdp_browser_dir(const cdp_browser *b);
/* Process group holding the browser and its helpers. */
pid_t cdp_browser_pgid(const cdp_browser *b);
/* False once the browser has exited. */
bool cdp_browser_alive(cdp_browser *b);

/* Kills the browser with its process group, waits for it, removes the
 * profile. NULL is fine. */
void cdp_browser_close(cdp_browser *b);

/* ---- HTTP endpoints -------------------------------------------------------- */

/* method is "GET" or "PUT"; path starts with '/'. On CDP_OK *out holds the
 * parsed JSON reply (json_object_put it), or NULL when the body is not
 * JSON and text_ok is true (then *text holds it, malloc'd, when text is
 * not NULL). */
int cdp_http(const char *base_url, const char *method, const char *path, int timeout_ms,
             const cdp_cancel *cancel, bool text_ok, struct json_object **out, char **text,
             ds4_error *err);

/* GET /json/version: the browser's product string, its browser-level
 * WebSocket URL and its User-Agent (any out pointer may be NULL; strings
 * malloc'd). */
int cdp_version(const char *base_url, int timeout_ms, const cdp_cancel *cancel,
                char **product, char **ws_url, char **user_agent, ds4_error *err);

/* PUT /json/new?about:blank: a new page target; its id and WebSocket URL. */
int cdp_target_new(const char *base_url, int timeout_ms, const cdp_cancel *cancel,
                   char **target_id, char **ws_url, ds4_error *err);

/* GET /json/close/ID. */
int cdp_target_close(const char *base_url, const char *target_id, int timeout_ms,
                     const cdp_cancel *cancel, ds4_error *err);

/* ---- WebSocket session ------------------------------------------------------ */

typedef struct cdp_conn cdp_conn;

/* Called for every event (a message with "method" and no "id") while any
 * wait of the connection runs. The handler may queue messages with
 * cdp_send but must not wait (no cdp_call/cdp_wait inside). params is
 * borrowed. */
typedef void (*cdp_event_fn)(cdp_conn *c, const char *method, struct json_object *params,
                             void *ud);

/* Connects to a ws:// URL (wss is not supported). */
cdp_conn *cdp_connect(const char *ws_url, int timeout_ms, const cdp_cancel *cancel,
                      ds4_error *err);
void cdp_conn_free(cdp_conn *c);

void cdp_set_cancel(cdp_conn *c, const cdp_cancel *cancel);
void cdp_set_event_handler(cdp_conn *c, cdp_event_fn fn, void *ud);

/* Queues a command without waiting for its reply (which is dropped when
 * it comes). Takes ownership of params (may be NULL). Returns the id, or
 * CDP_CLOSED. */
int cdp_send(cdp_conn *c, const char *method, struct json_object *params);

/* Sends a command and waits for its reply. Takes ownership of params (may
 * be NULL). On CDP_OK *result (when result is not NULL) holds the reply's
 * "result" object, a reference the caller puts. A reply carrying "error"
 * gives CDP_ERROR with the browser's message. */
int cdp_call(cdp_conn *c, const char *method, struct json_object *params, int timeout_ms,
             struct json_object **result, ds4_error *err);

/* Services the connection (events reach the handler) until done(ud) is
 * true, the timeout passes, or the wait is cancelled. what names the wait
 * in a timeout message. */
int cdp_wait(cdp_conn *c, bool (*done)(void *ud), void *ud, int timeout_ms, const char *what,
             ds4_error *err);

/* Replies whose id matched no waiting call, since the connection opened. */
unsigned cdp_stray_replies(const cdp_conn *c);

/* Longest message accepted from the browser; a longer one is an error. */
#define CDP_MAX_MESSAGE (64u << 20)

/* ---- messages ------------------------------------------------------------------
 *
 * How the session reads what the browser sends, without a connection. */

typedef enum {
    CDP_MSG_BAD = 0, /* not JSON, not an object, a non-integer id, or neither id nor method */
    CDP_MSG_REPLY,   /* has an integer "id" */
    CDP_MSG_EVENT,   /* has a string "method" and no "id" */
} cdp_msg_kind;

typedef struct {
    cdp_msg_kind kind;
    struct json_object *obj;    /* the whole message; NULL when BAD */
    int id;                     /* REPLY */
    const char *method;         /* EVENT: inside obj */
    struct json_object *params; /* EVENT: inside obj; NULL when absent */
    char why[256];              /* BAD: what was wrong, with a printable excerpt */
} cdp_msg;

/* Decodes one WebSocket message (len bytes, no terminator needed);
 * release with cdp_msg_free. */
void cdp_msg_parse(const char *msg, size_t len, cdp_msg *out);
void cdp_msg_free(cdp_msg *m);

/* What cdp_call makes of the reply to method: CDP_OK with the reply's
 * "result" object (an empty one when it has none) in *result when result
 * is not NULL, or CDP_ERROR with the browser's message in err. reply stays
 * the caller's. */
int cdp_reply_result(struct json_object *reply, const char *method, struct json_object **result, ds4_error *err);

#endif
