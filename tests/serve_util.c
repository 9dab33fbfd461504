/* serve_util.c — running `ds4cl serve` on the script engine in the tests:
 * a generated tiny model, scripts of replies, a server on a free port,
 * requests with curl, JSON and SSE bodies taken apart, and the official
 * client libraries installed from tests/serve's lock file, and raw sockets
 * with error replies checked for what curl will not send. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/serve_util.h"

const char *srv_tiny_model(void)
{
    const char *path = test_tmp_path("tiny.gguf");
    struct stat st;
    if (stat(path, &st) == 0) return path;
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-mkmodel' --tiny-vocab --layers 1 -o '%s'", test_bindir(), path);
    CHECK_MSG(rc == 0, "mkmodel: %s", out);
    return path;
}

/* A JSON Lines script of replies (each with its extra members or none). */
const char *srv_script(const char *const *lines)
{
    static int n;
    char *text = test_strdup("");
    for (size_t i = 0; lines[i]; i++) text = test_printf("%s%s\n", text, lines[i]);
    const char *path = test_tmp_path("script%d.jsonl", n++);
    test_write_file(path, text, strlen(text));
    return path;
}

char *srv_reply_line(const char *reply, const char *extra)
{
    struct json_object *s = json_object_new_string(reply);
    char *line = test_printf("{\"assistant\": %s%s%s}", json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN),
                             extra ? ", " : "", extra ? extra : "");
    json_object_put(s);
    return line;
}

const char *srv_weather_call(void)
{
    return "need a tool</think>Checking.\n\n<" SRV_DSML "tool_calls>\n<" SRV_DSML "invoke name=\"get_weather\">\n<" SRV_DSML
           "parameter name=\"city\" string=\"true\">Paris</" SRV_DSML "parameter>\n</" SRV_DSML "invoke>\n</" SRV_DSML "tool_calls>";
}

void srv_start(srv_server *s, const char *script_path, const char *flags)
{
    static int n;
    const char *model = srv_tiny_model();
    s->out = test_tmp_path("serve%d.out", n);
    s->log = test_tmp_path("serve%d.log", n++);
    char *cmd = test_printf("exec '%s/ds4cl' serve -m '%s' --engine 'script:%s' --ctx 16384 --port 0 "
                            "--cache-dir '%s' %s > '%s' 2> '%s'",
                            test_bindir(), model, script_path, test_tmp_path("cache"), flags ? flags : "", s->out,
                            s->log);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* the server goes with the test, however the test ends */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    double t0 = test_now_ms();
    for (;;) {
        char *out = test_read_file(s->out, NULL);
        const char *at = out ? strstr(out, "listening on http://127.0.0.1:") : NULL;
        if (at) {
            s->port = atoi(at + strlen("listening on http://127.0.0.1:"));
            return;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            s->pid = 0;
            FAIL("the server did not start: %s", test_read_file(s->log, NULL));
        }
        if (test_now_ms() - t0 > 60000) FAIL("the server did not start within 60 s");
        usleep(20000);
    }
}

/* SIGTERM, then the exit status (fails after 30 s). */
int srv_stop(srv_server *s)
{
    kill(s->pid, SIGTERM);
    double t0 = test_now_ms();
    for (;;) {
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        if (test_now_ms() - t0 > 30000) FAIL("the server did not stop within 30 s of SIGTERM");
        usleep(10000);
    }
}

/* One request with curl: the status; the body in *body. extra: more curl
 * arguments (headers). */
int srv_http(const srv_server *s, const char *method, const char *path, const char *json, const char *extra,
                char **body)
{
    const char *bfile = test_tmp_path("body%d.json", s->port), *rfile = test_tmp_path("resp%d.txt", s->port);
    if (json) test_write_file(bfile, json, strlen(json));
    char *out;
    int rc = test_runf(&out, "curl -s -N -X %s -o '%s' -w '%%{http_code}' %s %s%s%s 'http://127.0.0.1:%d%s'",
                       method, rfile, extra ? extra : "", json ? "-H 'Content-Type: application/json' --data-binary @'" : "",
                       json ? bfile : "", json ? "'" : "", s->port, path);
    CHECK_MSG(rc == 0, "curl failed (%d): %s", rc, out);
    *body = test_read_file(rfile, NULL);
    if (!*body) *body = test_strdup("");
    return atoi(out);
}

/* ---- raw sockets ------------------------------------------------------------------------ */

int srv_connect(const srv_server *s)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s->port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK_MSG(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    return fd;
}

bool srv_send_all(int fd, const char *bytes, size_t n)
{
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    while (n) {
        ssize_t k = send(fd, bytes, n, MSG_NOSIGNAL);
        if (k <= 0) return false;
        bytes += k;
        n -= (size_t)k;
    }
    return true;
}

char *srv_read_reply(int fd, int wait_ms, bool *closed)
{
    char *text = test_strdup("");
    size_t len = 0;
    double t0 = test_now_ms();
    *closed = false;
    for (;;) {
        int left = wait_ms - (int)(test_now_ms() - t0);
        if (left <= 0) break;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, left) <= 0) continue;
        char buf[4096];
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k <= 0) {
            *closed = true;
            break;
        }
        char *more = test_printf("%.*s%.*s", (int)len, text, (int)k, buf);
        text = more;
        len += (size_t)k;
    }
    return text;
}

char *srv_raw(const srv_server *s, const char *bytes, size_t n, int wait_ms, bool *closed)
{
    int fd = srv_connect(s);
    srv_send_all(fd, bytes, n);
    char *reply = srv_read_reply(fd, wait_ms, closed);
    close(fd);
    return reply;
}

void srv_check_raw_error(const char *reply, int status, bool anthropic, const char *header)
{
    char *want = test_printf("HTTP/1.1 %d ", status);
    CHECK_MSG(!strncmp(reply, want, strlen(want)), "not a %d reply: '%.300s'", status, reply);
    CHECK_MSG(!strstr(reply + 1, "HTTP/1."), "more than one status line: '%.600s'", reply);
    const char *end = strstr(reply, "\r\n\r\n");
    CHECK_MSG(end != NULL, "no end of the head: '%.300s'", reply);
    char *head = test_printf("%.*s", (int)(end - reply), reply);
    for (char *p = head; *p; p++) *p = (char)tolower((unsigned char)*p);
    CHECK_MSG(strstr(head, "\r\ncontent-type: application/json"), "not JSON: '%s'", head);
    if (header) {
        char *h = test_printf("\r\n%s", header);
        for (char *p = h; *p; p++) *p = (char)tolower((unsigned char)*p);
        CHECK_MSG(strstr(head, h), "no '%s' in '%s'", header, head);
    }
    struct json_object *o = srv_parse(end + 4);
    if (anthropic) CHECK_STR_EQ(srv_str(o, "type"), "error");
    else CHECK_MSG(srv_at(o, "type") == NULL, "not the OpenAI shape: %s", end + 4);
    CHECK(srv_str(o, "error.type") != NULL);
    CHECK(srv_str(o, "error.message") != NULL);
    json_object_put(o);
}

struct json_object *srv_parse(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    CHECK_MSG(o != NULL, "not JSON: %s", text);
    return o;
}

/* The value at a dotted path ("usage.prompt_tokens", "choices.0.message"). */
struct json_object *srv_at(struct json_object *o, const char *path)
{
    char key[128];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        snprintf(key, sizeof key, "%.*s", (int)n, path);
        if (json_object_is_type(o, json_type_array)) o = json_object_array_get_idx(o, (size_t)atoi(key));
        else if (!json_object_object_get_ex(o, key, &o)) o = NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

const char *srv_str(struct json_object *o, const char *path)
{
    struct json_object *v = srv_at(o, path);
    return v ? json_object_get_string(v) : NULL;
}

long srv_int(struct json_object *o, const char *path)
{
    struct json_object *v = srv_at(o, path);
    CHECK_MSG(v != NULL, "no %s in %s", path, json_object_to_json_string(o));
    return (long)json_object_get_int64(v);
}

/* ---- the client libraries ---------------------------------------------------------------- */

/* build/NAME with tests/SRC's locked packages installed by install (once;
 * the lock keeps parallel tests from installing at the same time); probe:
 * a path there that shows the install is complete. */
static const char *npm_dir(const char *name, const char *src_dir, const char *install, const char *probe,
                           const char *what)
{
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node and npm are not installed");
    const char *dir = test_printf("%s/build/%s", test_root(), name);
    const char *src = test_printf("%s/tests/%s", test_root(), src_dir);
    char *out;
    int rc = test_runf(&out,
                       "mkdir -p '%s' && cd '%s' && flock ../%s.lock sh -c '"
                       "{ cmp -s package-lock.json \"%s/package-lock.json\" && [ -e %s ]; } || "
                       "{ cp \"%s/package.json\" \"%s/package-lock.json\" . && "
                       "npm %s --no-audit --no-fund --loglevel=error; }'",
                       dir, dir, name, src, probe, src, src, install);
    if (rc != 0) SKIP("npm could not install %s: %.300s", what, out);
    return dir;
}

const char *srv_clients_dir(void)
{
    const char *dir = npm_dir("serve-clients", "serve", "ci", "node_modules/@anthropic-ai/sdk", "the client libraries");
    char *out;
    /* a temporary name of this shell's own: tests running side by side
     * each put the same file in place */
    int rc = test_runf(&out,
                       "cd '%s' && cp '%s/tests/serve/clients.mjs' clients.mjs.tmp.$$ && mv clients.mjs.tmp.$$ clients.mjs",
                       dir, test_root());
    CHECK_MSG(rc == 0, "%s", out);
    return dir;
}

const char *srv_agents_dir(void)
{
    /* npm ci refuses this lock: opencode-ai names platform packages that
     * npm leaves out of it; install keeps to the locked versions all the
     * same */
    return npm_dir("serve-agents", "agents", "install", "node_modules/.bin/opencode", "the coding agents");
}

void srv_run_clients(const srv_server *s, const char *scenario, const char *key)
{
    srv_run_clients_with(s, scenario, key, NULL);
}

void srv_run_clients_with(const srv_server *s, const char *scenario, const char *key, const char *more)
{
    const char *dir = srv_clients_dir();
    char *out;
    int rc = test_runf(&out, "cd '%s' && timeout 120 node clients.mjs %s %d %s %s", dir, scenario, s->port, key,
                       more ? more : "");
    CHECK_MSG(rc == 0, "%s: %s\nserver log:\n%s", scenario, out, test_read_file(s->log, NULL));
    CHECK_CONTAINS(out, test_printf("ok %s", scenario));
}


void srv_check_error(const srv_server *s, const char *path, const char *json, const char *extra, int status,
                        const char *says)
{
    char *body;
    int got = srv_http(s, "POST", path, json, extra, &body);
    CHECK_MSG(got == status, "%s %s: status %d, not %d: %s", path, json ? json : "", got, status, body);
    struct json_object *o = srv_parse(body);
    bool anthropic = strstr(path, "/messages") != NULL;
    if (anthropic) CHECK_STR_EQ(srv_str(o, "type"), "error");
    const char *msg = srv_str(o, "error.message");
    CHECK_MSG(msg && strstr(msg, says), "%s: the message '%s' does not say '%s'", path, msg ? msg : "(none)", says);
    CHECK(srv_str(o, "error.type") != NULL);
    json_object_put(o);
}

/* The events of an SSE body: event names (or "-") and data lines, in order;
 * every event ends with a blank line. */
int srv_sse_events(const char *body, const char **names, struct json_object **data, int max, bool *done)
{
    int n = 0;
    *done = false;
    for (const char *p = body; *p && n < max;) {
        const char *end = strstr(p, "\n\n");
        CHECK_MSG(end != NULL, "an event does not end with a blank line: %s", p);
        char *ev = test_printf("%.*s", (int)(end - p), p);
        p = end + 2;
        if (ev[0] == ':') continue;
        const char *name = "-";
        if (!strncmp(ev, "event: ", 7)) {
            char *nl = strchr(ev, '\n');
            CHECK(nl);
            *nl = 0;
            name = ev + 7;
            ev = nl + 1;
        }
        CHECK_MSG(!strncmp(ev, "data: ", 6), "an event without data: %s", ev);
        CHECK_MSG(!strchr(ev + 6, '\n'), "an event with more than one data line: %s", ev);
        if (!strcmp(ev + 6, "[DONE]")) {
            *done = true;
            CHECK_MSG(!*p, "events after [DONE]: %s", p);
            break;
        }
        names[n] = name;
        data[n++] = srv_parse(ev + 6);
    }
    return n;
}

bool srv_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char c = p[i];
        size_t k = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if ((p[i + j] & 0xc0) != 0x80) return false;
        /* the second byte's narrower ranges: overlong, surrogate, too large */
        unsigned char d = k > 1 ? p[i + 1] : 0;
        if ((c == 0xe0 && d < 0xa0) || (c == 0xed && d > 0x9f) || (c == 0xf0 && d < 0x90) || (c == 0xf4 && d > 0x8f))
            return false;
        i += k;
    }
    return true;
}

const char *srv_post_bg(const srv_server *s, const char *path, const char *json)
{
    static int n;
    const char *bfile = test_tmp_path("bgbody%d.json", n), *out = test_tmp_path("bgresp%d.txt", n);
    n++;
    test_write_file(bfile, json, strlen(json));
    char *o;
    int rc = test_runf(&o, "(curl -s -N -H 'Content-Type: application/json' --data-binary @'%s' "
                           "'http://127.0.0.1:%d%s' > '%s' 2>/dev/null </dev/null; echo $? > '%s.rc') >/dev/null 2>&1 &",
                       bfile, s->port, path, out, out);
    CHECK_MSG(rc == 0, "cannot start curl: %s", o);
    return out;
}

bool srv_wait_file(const char *path, const char *needle, int timeout_ms)
{
    double t0 = test_now_ms();
    for (;;) {
        char *text = test_read_file(path, NULL);
        if (text && (!needle || strstr(text, needle))) return true;
        if (test_now_ms() - t0 > timeout_ms) return false;
        usleep(20000);
    }
}
