/* serve_util.h — helpers for the tests of `ds4cl serve`: the real binary on
 * the script engine and a generated tiny model, on a free port, stopped with
 * the test however it ends. Strings returned are runner-owned. */
#ifndef DS4CL_SERVE_UTIL_H
#define DS4CL_SERVE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "tests/test.h"

struct json_object;

/* DSML's marker, as the model writes it in a reply. */
#define SRV_DSML "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

typedef struct {
    pid_t pid;
    int port;
    const char *out, *log;   /* the server's stdout and stderr (request log) */
} srv_server;

/* A one-layer model with the tiny byte vocabulary (made once per run). */
const char *srv_tiny_model(void);
/* Writes a JSON Lines script of the given lines (NULL-terminated); its path. */
const char *srv_script(const char *const *lines);
/* {"assistant": reply, extra} where extra is JSON members or NULL. */
char *srv_reply_line(const char *reply, const char *extra);
/* A reply that thinks, says "Checking." and calls get_weather(city=Paris). */
const char *srv_weather_call(void);

/* Starts `ds4cl serve` on the script with more flags (NULL = none) and
 * waits until it listens; fails the test when it does not start. */
void srv_start(srv_server *s, const char *script_path, const char *flags);
/* SIGTERM, then the exit status (fails after 30 s). */
int srv_stop(srv_server *s);

/* One request with curl: the HTTP status; the body in *body. extra: more
 * curl arguments (headers), or NULL. */
int srv_http(const srv_server *s, const char *method, const char *path, const char *json, const char *extra,
             char **body);
/* Posts json to path and checks the status and that the error body has the
 * API's shape and a message containing says. */
void srv_check_error(const srv_server *s, const char *path, const char *json, const char *extra, int status,
                     const char *says);

/* Raw sockets, for what curl will not send: a connection to the server
 * (fails the test when it cannot connect); bytes sent whole (false when the
 * server stopped reading first); what comes back until the server closes or
 * wait_ms passes (*closed says which). */
int srv_connect(const srv_server *s);
bool srv_send_all(int fd, const char *bytes, size_t n);
char *srv_read_reply(int fd, int wait_ms, bool *closed);
/* Sends bytes on a new connection and returns the reply (read as above). */
char *srv_raw(const srv_server *s, const char *bytes, size_t n, int wait_ms, bool *closed);
/* Checks a raw HTTP reply: one status line with this status, a JSON body
 * of the API's error shape (Anthropic's when anthropic) and, when given,
 * the header line "Name: value" (matched case-insensitively). */
void srv_check_raw_error(const char *reply, int status, bool anthropic, const char *header);

/* JSON: parsed (fails on bad JSON); the value at a dotted path
 * ("usage.prompt_tokens", "choices.0.message") or NULL; its string; its
 * integer (fails when absent). */
struct json_object *srv_parse(const char *text);
struct json_object *srv_at(struct json_object *o, const char *path);
const char *srv_str(struct json_object *o, const char *path);
long srv_int(struct json_object *o, const char *path);

/* The events of an SSE body: names (or "-") and parsed data, in order, at
 * most max; *done when it ended with [DONE]. Fails on bad framing. */
int srv_sse_events(const char *body, const char **names, struct json_object **data, int max, bool *done);

/* Whether s[0..n) is valid UTF-8 (RFC 3629: no overlong forms, surrogates
 * or values above U+10FFFF), as a strict JSON reader wants it. */
bool srv_utf8_valid(const char *s, size_t n);

/* Posts json to path with curl in the background (a stream, say); what it
 * receives goes to the returned file, and "FILE.rc" gets curl's exit status
 * once it is done. */
const char *srv_post_bg(const srv_server *s, const char *path, const char *json);
/* Waits until the file exists and contains needle (NULL: just exists);
 * false after timeout_ms. */
bool srv_wait_file(const char *path, const char *needle, int timeout_ms);

/* build/serve-clients with tests/serve's locked packages installed (skips
 * the test when npm cannot install them). */
const char *srv_clients_dir(void);
/* build/serve-agents with tests/agents' locked coding agents (Claude
 * Code, Codex CLI, opencode) installed, their programs in
 * node_modules/.bin (skips the test when npm cannot install them). */
const char *srv_agents_dir(void);
/* Runs `node clients.mjs SCENARIO PORT KEY` there; fails unless it prints
 * "ok SCENARIO". */
void srv_run_clients(const srv_server *s, const char *scenario, const char *key);
/* The same with more arguments after KEY (NULL: none). */
void srv_run_clients_with(const srv_server *s, const char *scenario, const char *key, const char *more);

#endif
