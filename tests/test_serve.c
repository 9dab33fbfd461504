/* `ds4cl serve`: the real binary on the script engine and a generated tiny
 * model, driven by the official OpenAI and Anthropic client libraries
 * (tests/serve/clients.mjs, installed from the npm registry into
 * build/serve-clients) and by curl and raw sockets for the wire format:
 * SSE framing, keep-alives, error statuses and bodies, limits, the API key,
 * prefix reuse across requests and across a restart, disconnects and
 * SIGTERM. Every server listens on a free port picked at run time. */
#include <arpa/inet.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/test.h"

#define D "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

typedef struct {
    pid_t pid;
    int port;
    const char *out, *log;
} server;

static const char *tiny_model(void)
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
static const char *script(const char *const *lines)
{
    static int n;
    char *text = test_strdup("");
    for (size_t i = 0; lines[i]; i++) text = test_printf("%s%s\n", text, lines[i]);
    const char *path = test_tmp_path("script%d.jsonl", n++);
    test_write_file(path, text, strlen(text));
    return path;
}

static char *reply_line(const char *reply, const char *extra)
{
    struct json_object *s = json_object_new_string(reply);
    char *line = test_printf("{\"assistant\": %s%s%s}", json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN),
                             extra ? ", " : "", extra ? extra : "");
    json_object_put(s);
    return line;
}

static const char *weather_call(void)
{
    return "need a tool</think>Checking.\n\n<" D "tool_calls>\n<" D "invoke name=\"get_weather\">\n<" D
           "parameter name=\"city\" string=\"true\">Paris</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>";
}

static void server_start(server *s, const char *script_path, const char *flags)
{
    static int n;
    const char *model = tiny_model();
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
static int server_stop(server *s)
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
static int http(const server *s, const char *method, const char *path, const char *json, const char *extra,
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

static struct json_object *parse(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    CHECK_MSG(o != NULL, "not JSON: %s", text);
    return o;
}

/* The value at a dotted path ("usage.prompt_tokens", "choices.0.message"). */
static struct json_object *at(struct json_object *o, const char *path)
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

static const char *str_at(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    return v ? json_object_get_string(v) : NULL;
}

static long int_at(struct json_object *o, const char *path)
{
    struct json_object *v = at(o, path);
    CHECK_MSG(v != NULL, "no %s in %s", path, json_object_to_json_string(o));
    return (long)json_object_get_int64(v);
}

/* ---- the client libraries ---------------------------------------------------------------- */

/* build/serve-clients with the locked versions installed (once; the lock
 * keeps parallel tests from installing at the same time). */
static const char *clients_dir(void)
{
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node and npm are not installed");
    const char *dir = test_printf("%s/build/serve-clients", test_root());
    const char *src = test_printf("%s/tests/serve", test_root());
    char *out;
    int rc = test_runf(&out,
                       "mkdir -p '%s' && cd '%s' && flock ../serve-clients.lock sh -c '"
                       "{ cmp -s package-lock.json \"%s/package-lock.json\" && [ -d node_modules/openai ] && "
                       "[ -d node_modules/@anthropic-ai/sdk ]; } || "
                       "{ cp \"%s/package.json\" \"%s/package-lock.json\" . && "
                       "npm ci --no-audit --no-fund --loglevel=error; } && cp \"%s/clients.mjs\" clients.mjs.tmp && "
                       "mv clients.mjs.tmp clients.mjs'",
                       dir, dir, src, src, src, src);
    if (rc != 0) SKIP("npm could not install the client libraries: %.300s", out);
    return dir;
}

static void run_clients(const server *s, const char *scenario, const char *key)
{
    const char *dir = clients_dir();
    char *out;
    int rc = test_runf(&out, "cd '%s' && timeout 120 node clients.mjs %s %d %s", dir, scenario, s->port, key);
    CHECK_MSG(rc == 0, "%s: %s\nserver log:\n%s", scenario, out, test_read_file(s->log, NULL));
    CHECK_CONTAINS(out, test_printf("ok %s", scenario));
}

static const char *round_trip_script(bool with_plain)
{
    const char *lines[] = {
        reply_line("let me think</think>Hello there, world.", NULL),
        with_plain ? reply_line("Plain answer.", NULL) : reply_line(weather_call(), NULL),
        with_plain ? reply_line(weather_call(), NULL) : reply_line("ok</think>It is sunny in Paris.", NULL),
        with_plain ? reply_line("ok</think>It is sunny in Paris.", NULL) : NULL,
        NULL,
    };
    return script(lines);
}

TEST(serve, openai_client_plain_streamed_and_tool_round_trip)
{
    server s;
    server_start(&s, round_trip_script(false), "--api-key sekrit");
    run_clients(&s, "openai", "sekrit");
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, anthropic_client_thinking_on_off_and_tool_round_trip)
{
    server s;
    server_start(&s, round_trip_script(true), "--api-key sekrit");
    run_clients(&s, "anthropic", "sekrit");
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, responses_client_streamed_tool_round_trip)
{
    server s;
    server_start(&s, round_trip_script(false), NULL);
    run_clients(&s, "responses", "none");
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, client_disconnect_cancels_the_generation)
{
    char *words = test_strdup("");
    for (int i = 0; i < 200; i++) words = test_printf("%sword ", words);
    const char *lines[] = { reply_line(test_printf("x</think>%s", words), "\"delay_ms\": 20"),
                            reply_line("x</think>Done.", NULL), NULL };
    server s;
    server_start(&s, script(lines), NULL);
    run_clients(&s, "disconnect", "none");
    CHECK_EQ_INT(server_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    const char *first = strstr(log, "request 1:");
    CHECK_MSG(first && strstr(first, "cancelled"), "the first request was not cancelled:\n%s", log);
    /* it stopped long before its 400-odd tokens */
    const char *gen = strstr(first, " ms, ");
    CHECK(gen);
    long generated = strtol(gen + 5, NULL, 10);
    CHECK_MSG(generated > 0 && generated < 150, "generated %ld tokens after the disconnect", generated);
}

TEST(serve, concurrent_clients_each_get_a_reply)
{
    const char *lines[7];
    for (int i = 0; i < 6; i++) lines[i] = reply_line(test_printf("Reply %d.", i + 1), "\"delay_ms\": 5");
    lines[6] = NULL;
    server s;
    server_start(&s, script(lines), "--nothink");
    run_clients(&s, "concurrent", "none");
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, api_key_is_required_by_every_route)
{
    const char *lines[] = { NULL };
    server s;
    server_start(&s, script(lines), "--api-key sekrit");
    run_clients(&s, "auth", "sekrit");
    char *body;
    CHECK_EQ_INT(http(&s, "GET", "/v1/models", NULL, NULL, &body), 401);
    struct json_object *o = parse(body);
    CHECK_STR_EQ(str_at(o, "error.type"), "authentication_error");
    CHECK_STR_EQ(str_at(o, "error.code"), "invalid_api_key");
    json_object_put(o);
    CHECK_EQ_INT(http(&s, "POST", "/v1/messages", "{}", NULL, &body), 401);
    o = parse(body);
    CHECK_STR_EQ(str_at(o, "type"), "error");
    CHECK_STR_EQ(str_at(o, "error.type"), "authentication_error");
    json_object_put(o);
    CHECK_EQ_INT(http(&s, "GET", "/v1/models", NULL, "-H 'x-api-key: sekrit'", &body), 200);
    CHECK_EQ_INT(http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sekri'", &body), 401);
    CHECK_EQ_INT(server_stop(&s), 0);
}

/* ---- the wire ------------------------------------------------------------------------------- */

static void check_error(const server *s, const char *path, const char *json, const char *extra, int status,
                        const char *says)
{
    char *body;
    int got = http(s, "POST", path, json, extra, &body);
    CHECK_MSG(got == status, "%s %s: status %d, not %d: %s", path, json ? json : "", got, status, body);
    struct json_object *o = parse(body);
    bool anthropic = strstr(path, "/messages") != NULL;
    if (anthropic) CHECK_STR_EQ(str_at(o, "type"), "error");
    const char *msg = str_at(o, "error.message");
    CHECK_MSG(msg && strstr(msg, says), "%s: the message '%s' does not say '%s'", path, msg ? msg : "(none)", says);
    CHECK(str_at(o, "error.type") != NULL);
    json_object_put(o);
}

TEST(serve, bad_requests_get_4xx_in_the_apis_shape)
{
    const char *lines[] = { NULL };
    server s;
    server_start(&s, script(lines), "--max-body 4096");
    const char *chat = "/v1/chat/completions", *msgs = "/v1/messages", *resp = "/v1/responses";
    check_error(&s, chat, "{\"messages\": [", NULL, 400, "not valid JSON");
    check_error(&s, msgs, "[1, 2]", NULL, 400, "one JSON object");
    check_error(&s, chat, "{\"messages\": \"hi\"}", NULL, 400, "'messages' must be an array");
    check_error(&s, chat, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", NULL, 400, "unknown role 'wizard'");
    check_error(&s, msgs, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", NULL, 400,
                "unknown role 'system'");
    check_error(&s, chat, "{\"temperature\": \"hot\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL,
                400, "'temperature' must be a number");
    check_error(&s, chat, "{\"max_tokens\": -3, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL, 400,
                "'max_tokens' must be between");
    check_error(&s, chat, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", NULL, 400,
                "must follow an assistant message");
    check_error(&s, msgs, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]}", NULL, 400,
                "'image' are not supported");
    check_error(&s, resp, "{\"input\": 5}", NULL, 400, "'input' must be");
    check_error(&s, chat, "{\"tool_choice\": \"required\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                NULL, 400, "none are given");
    /* a prompt longer than the context */
    char *big = test_strdup("");
    for (int i = 0; i < 300; i++) big = test_printf("%sabcdefghijklmnopqrstuvwxyz%d ", big, i);
    server s2;
    server_start(&s2, script(lines), "--ctx 256");
    check_error(&s2, chat, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big), NULL, 400,
                "context holds 256");
    CHECK_EQ_INT(server_stop(&s2), 0);
    /* bodies over the cap, announced or not */
    check_error(&s, chat, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big), NULL, 413,
                "larger than 4096 bytes");
    check_error(&s, msgs, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big),
                "-H 'Transfer-Encoding: chunked'", 413, "larger than 4096 bytes");
    char *body;
    CHECK_EQ_INT(http(&s, "GET", "/v1/nothing", NULL, NULL, &body), 404);
    CHECK_EQ_INT(http(&s, "GET", chat, NULL, NULL, &body), 405);
    /* still serving */
    CHECK_EQ_INT(http(&s, "GET", "/v1/models", NULL, NULL, &body), 200);
    struct json_object *o = parse(body);
    CHECK_STR_EQ(str_at(o, "data.0.id"), "tiny.gguf");
    json_object_put(o);
    CHECK_EQ_INT(server_stop(&s), 0);
}

/* The events of an SSE body: event names (or "-") and data lines, in order;
 * every event ends with a blank line. */
static int sse_events(const char *body, const char **names, struct json_object **data, int max, bool *done)
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
        data[n++] = parse(ev + 6);
    }
    return n;
}

TEST(serve, sse_framing_of_both_apis_and_keepalives_while_reading)
{
    const char *lines[] = { reply_line("mull</think>Hi there.", "\"prefill_delay_ms\": 40"),
                            reply_line("mull</think>Hi there.", NULL), NULL };
    server s;
    server_start(&s, script(lines), "--keepalive 0.05");
    char *body;
    const char *names[512];
    struct json_object *data[512];
    bool done;
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions",
                      "{\"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}", NULL, &body),
                 200);
    /* the prompt took a while to read: comments kept the stream alive */
    CHECK_CONTAINS(body, "\n\n: keep-alive\n\n");
    int n = sse_events(body, names, data, 512, &done);
    CHECK(done);
    CHECK(n >= 3);
    char *text = test_strdup(""), *thinking = test_strdup("");
    for (int i = 0; i < n; i++) {
        CHECK_STR_EQ(names[i], "-");
        CHECK_STR_EQ(str_at(data[i], "object"), "chat.completion.chunk");
        const char *c = str_at(data[i], "choices.0.delta.content"), *r = str_at(data[i], "choices.0.delta.reasoning_content");
        if (c) text = test_printf("%s%s", text, c);
        if (r) thinking = test_printf("%s%s", thinking, r);
    }
    CHECK_STR_EQ(text, "Hi there.");
    CHECK_STR_EQ(thinking, "mull");
    CHECK_STR_EQ(str_at(data[n - 1], "choices.0.finish_reason"), "stop");
    for (int i = 0; i < n; i++) json_object_put(data[i]);

    CHECK_EQ_INT(http(&s, "POST", "/v1/messages",
                      "{\"stream\": true, \"max_tokens\": 50, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}, "
                      "\"messages\": [{\"role\": \"user\", \"content\": \"hello again\"}]}",
                      NULL, &body),
                 200);
    n = sse_events(body, names, data, 512, &done);
    CHECK(!done);
    CHECK_STR_EQ(names[0], "message_start");
    CHECK_STR_EQ(names[n - 2], "message_delta");
    CHECK_STR_EQ(names[n - 1], "message_stop");
    CHECK_STR_EQ(str_at(data[n - 2], "delta.stop_reason"), "end_turn");
    int starts = 0, stops = 0;
    for (int i = 0; i < n; i++) {
        CHECK_STR_EQ(names[i], str_at(data[i], "type"));
        if (!strcmp(names[i], "content_block_start")) {
            CHECK_EQ_INT(int_at(data[i], "index"), starts);
            starts++;
        }
        if (!strcmp(names[i], "content_block_stop")) stops++;
    }
    CHECK_EQ_INT(starts, 2);
    CHECK_EQ_INT(stops, 2);
    for (int i = 0; i < n; i++) json_object_put(data[i]);
    CHECK_EQ_INT(server_stop(&s), 0);
}

static const char *chat_body(const char *const *turns)
{
    char *msgs = test_strdup("");
    for (size_t i = 0; turns[i]; i++) {
        struct json_object *t = json_object_new_string(turns[i]);
        msgs = test_printf("%s%s{\"role\": \"%s\", \"content\": %s}", msgs, i ? ", " : "", i % 2 ? "assistant" : "user",
                           json_object_to_json_string(t));
        json_object_put(t);
    }
    return test_printf("{\"messages\": [%s]}", msgs);
}

TEST(serve, growing_conversation_prefills_only_new_tokens_also_after_a_restart)
{
    const char *lines[] = { reply_line("one</think>First answer.", NULL), reply_line("two</think>Second answer.", NULL),
                            reply_line("three</think>Third answer.", NULL), NULL };
    const char *sc = script(lines);
    server s;
    server_start(&s, sc, NULL);
    char *body;
    const char *t1[] = { "first question", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(t1), NULL, &body), 200);
    struct json_object *r1 = parse(body);
    CHECK_STR_EQ(str_at(r1, "choices.0.message.content"), "First answer.");
    long p1 = int_at(r1, "usage.prompt_tokens"), c1 = int_at(r1, "usage.completion_tokens");
    CHECK_EQ_INT(int_at(r1, "usage.prefilled_tokens"), p1);

    const char *t2[] = { "first question", "First answer.", "second question", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(t2), NULL, &body), 200);
    struct json_object *r2 = parse(body);
    CHECK_STR_EQ(str_at(r2, "choices.0.message.content"), "Second answer.");
    long p2 = int_at(r2, "usage.prompt_tokens"), c2 = int_at(r2, "usage.completion_tokens");
    /* the session held the first prompt and its reply */
    CHECK_EQ_INT(int_at(r2, "usage.prefilled_tokens"), p2 - p1 - c1);
    CHECK_EQ_INT(int_at(r2, "usage.prompt_tokens_details.cached_tokens"), p1 + c1);
    CHECK_EQ_INT(server_stop(&s), 0);
    CHECK_CONTAINS(test_read_file(s.log, NULL), "SIGTERM: stopping");

    /* a new server on the same cache goes on from the saved state */
    server s2;
    server_start(&s2, sc, NULL);
    const char *t3[] = { "first question", "First answer.", "second question", "Second answer.", "third question", NULL };
    CHECK_EQ_INT(http(&s2, "POST", "/v1/chat/completions", chat_body(t3), NULL, &body), 200);
    struct json_object *r3 = parse(body);
    CHECK_STR_EQ(str_at(r3, "choices.0.message.content"), "Third answer.");
    long p3 = int_at(r3, "usage.prompt_tokens");
    CHECK_EQ_INT(int_at(r3, "usage.prefilled_tokens"), p3 - p2 - c2);
    CHECK_EQ_INT(server_stop(&s2), 0);
    json_object_put(r1);
    json_object_put(r2);
    json_object_put(r3);
}

TEST(serve, tool_choice_none_keeps_the_reply_text)
{
    const char *lines[] = { reply_line(weather_call(), NULL), NULL };
    server s;
    server_start(&s, script(lines), NULL);
    const char *req = "{\"tool_choice\": \"none\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                      "\"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                      "\"string\"}}}}}], \"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}]}";
    char *body;
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", req, NULL, &body), 200);
    struct json_object *o = parse(body);
    CHECK_STR_EQ(str_at(o, "choices.0.finish_reason"), "stop");
    CHECK(at(o, "choices.0.message.tool_calls") == NULL);
    CHECK_CONTAINS(str_at(o, "choices.0.message.content"), "Checking.");
    json_object_put(o);
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, sigterm_cancels_the_request_in_progress_and_saves_the_cache)
{
    const char *lines[] = { reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z", "\"delay_ms\": 200"),
                            NULL };
    server s;
    server_start(&s, script(lines), NULL);
    const char *bfile = test_tmp_path("long.json"), *req = "{\"stream\": true, \"messages\": [{\"role\": \"user\", "
                                                           "\"content\": \"go\"}]}";
    test_write_file(bfile, req, strlen(req));
    const char *resp = test_tmp_path("long.txt");
    char *out;
    /* curl in the background; SIGTERM once the reply has begun */
    CHECK_EQ_INT(test_runf(&out, "(curl -s -N --data-binary @'%s' 'http://127.0.0.1:%d/v1/chat/completions' > '%s' 2>/dev/null </dev/null &) ; "
                                 "for i in $(seq 100); do grep -q '\"content\":\"a' '%s' && exit 0; sleep 0.05; done; exit 1",
                           bfile, s.port, resp, resp),
                 0);
    CHECK_EQ_INT(server_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    CHECK_CONTAINS(log, "cancelled");
    char *ls;
    test_runf(&ls, "ls '%s'", test_tmp_path("cache"));
    CHECK_CONTAINS(ls, ".snap");
    CHECK_CONTAINS(ls, ".tok");
    CHECK_CONTAINS(ls, "replies-");
}

TEST(serve, a_slow_client_is_dropped_after_the_timeout)
{
    const char *lines[] = { NULL };
    server s;
    server_start(&s, script(lines), "--timeout 1");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)s.port) };
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
    const char *part = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
    CHECK(write(fd, part, strlen(part)) == (ssize_t)strlen(part));
    struct timeval tv = { 10, 0 };
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    double t0 = test_now_ms();
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    double waited = test_now_ms() - t0;
    close(fd);
    CHECK_MSG(n <= 0, "the server answered a request it has not got whole: %.*s", (int)(n > 0 ? n : 0), buf);
    CHECK_MSG(waited < 9000, "the connection stayed open %.0f ms", waited);
    /* others are still served */
    char *body;
    CHECK_EQ_INT(http(&s, "GET", "/v1/models", NULL, NULL, &body), 200);
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, bench_rows_compare_the_server_with_in_process)
{
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --serve-bench -m '%s' --prompt-file '%s/README.md' --prompt-bytes 300 "
                             "--gen-tokens 4 --runs 1 --threads 1 --ctx 1024",
                       test_bindir(), tiny_model(), test_root());
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_CONTAINS(out, "path,prompt_tokens,gen_tokens,ttft_ms,decode_tps,ttft_cpu_ms,decode_cpu_ms_per_token,"
                        "ttft_ratio,decode_ratio,ttft_cpu_ratio,decode_cpu_ratio\n");
    const char *a = strstr(out, "\nin_process,"), *b = strstr(out, "\nserver,");
    CHECK(a && b);
    long pa = strtol(a + 12, NULL, 10), pb = strtol(b + 8, NULL, 10);
    /* the same prompt and, greedy on the same engine, the same reply length */
    CHECK(pa > 50);
    CHECK_EQ_INT(pa, pb);
    const char *ga = strchr(a + 12, ',') + 1, *gb = strchr(b + 8, ',') + 1;
    CHECK_EQ_INT(strtol(ga, NULL, 10), strtol(gb, NULL, 10));
    CHECK(strtod(strchr(gb, ',') + 1, NULL) > 0);
}

TEST(serve, stop_sequences_max_tokens_and_token_counts)
{
    const char *lines[] = { reply_line("hm</think>Hello there, world.", NULL), reply_line("hm</think>Hello there, world.", NULL),
                            reply_line("hm</think>Hello there, world.", NULL), NULL };
    server s;
    server_start(&s, script(lines), NULL);
    char *body;
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions",
                      "{\"stop\": [\"zzz\", \"there\"], \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", NULL, &body),
                 200);
    struct json_object *o = parse(body);
    CHECK_STR_EQ(str_at(o, "choices.0.message.content"), "Hello ");
    CHECK_STR_EQ(str_at(o, "choices.0.finish_reason"), "stop");
    json_object_put(o);
    CHECK_EQ_INT(http(&s, "POST", "/v1/messages",
                      "{\"max_tokens\": 100, \"stop_sequences\": [\"world\"], \"thinking\": {\"type\": \"enabled\", "
                      "\"budget_tokens\": 50}, \"messages\": [{\"role\": \"user\", \"content\": \"bb\"}]}",
                      NULL, &body),
                 200);
    o = parse(body);
    CHECK_STR_EQ(str_at(o, "stop_reason"), "stop_sequence");
    CHECK_STR_EQ(str_at(o, "stop_sequence"), "world");
    CHECK_STR_EQ(str_at(o, "content.1.text"), "Hello there, ");
    json_object_put(o);
    /* five tokens end the reply long before its end */
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions",
                      "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"ccc\"}]}", NULL, &body),
                 200);
    o = parse(body);
    CHECK_STR_EQ(str_at(o, "choices.0.finish_reason"), "length");
    CHECK_EQ_INT(int_at(o, "usage.completion_tokens"), 5);
    json_object_put(o);
    CHECK_EQ_INT(http(&s, "POST", "/v1/messages/count_tokens",
                      "{\"model\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"ccc\"}]}", NULL, &body),
                 200);
    o = parse(body);
    /* BOS, <｜User｜>, the text, <｜Assistant｜>, </think> */
    CHECK(int_at(o, "input_tokens") >= 5);
    json_object_put(o);
    CHECK_EQ_INT(server_stop(&s), 0);
}

TEST(serve, a_switched_conversation_goes_on_from_the_cached_state)
{
    /* the same answer after different reasoning: each conversation keeps
     * its own */
    const char *lines[] = { reply_line("first this</think>Same answer.", NULL),
                            reply_line("then that</think>Same answer.", NULL), reply_line("c</think>Answer C.", NULL),
                            NULL };
    server s;
    server_start(&s, script(lines), NULL);
    char *body;
    const char *a1[] = { "conversation A begins here", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(a1), NULL, &body), 200);
    struct json_object *r1 = parse(body);
    long p1 = int_at(r1, "usage.prompt_tokens"), c1 = int_at(r1, "usage.completion_tokens");
    const char *b1[] = { "and B is another one", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(b1), NULL, &body), 200);
    struct json_object *r2 = parse(body);
    /* B shares only BOS and the user marker with A: the rest is read */
    CHECK_EQ_INT(int_at(r2, "usage.prefilled_tokens"), int_at(r2, "usage.prompt_tokens") - 2);
    const char *a2[] = { "conversation A begins here", "Same answer.", "A goes on", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(a2), NULL, &body), 200);
    struct json_object *r3 = parse(body);
    /* A's state came back from the cache: only its new turn is read */
    CHECK_EQ_INT(int_at(r3, "usage.prefilled_tokens"), int_at(r3, "usage.prompt_tokens") - p1 - c1);
    CHECK_EQ_INT(server_stop(&s), 0);
    json_object_put(r1);
    json_object_put(r2);
    json_object_put(r3);
}

TEST(serve, a_plain_request_whose_client_leaves_is_cancelled)
{
    const char *lines[] = { reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z", "\"delay_ms\": 100"),
                            reply_line("x</think>Next.", NULL), NULL };
    server s;
    server_start(&s, script(lines), NULL);
    char *out;
    /* curl gives up after half a second, long before the 50-odd tokens */
    test_runf(&out, "curl -s --max-time 0.5 -d '{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}]}' "
                    "'http://127.0.0.1:%d/v1/chat/completions'",
              s.port);
    char *body;
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"then\"}]}",
                      NULL, &body),
                 200);
    CHECK_EQ_INT(server_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    const char *first = strstr(log, "request 1:");
    CHECK_MSG(first && strstr(first, "cancelled") && strstr(first, "cancelled") < strstr(first, "request 2:"),
              "the first request was not cancelled:\n%s", log);
}

TEST(serve, parallel_sessions_keep_each_conversation_to_its_own)
{
    /* the script's replies go in order per session */
    const char *lines[] = { reply_line("r</think>First reply.", NULL), reply_line("r</think>Second reply.", NULL), NULL };
    server s;
    server_start(&s, script(lines), "--parallel 2 --no-cache");
    char *body;
    const char *a1[] = { "conversation A", NULL }, *b1[] = { "and then conversation B", NULL };
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(a1), NULL, &body), 200);
    struct json_object *ra = parse(body);
    CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(b1), NULL, &body), 200);
    struct json_object *rb = parse(body);
    /* each went to a session of its own: both got their session's first reply */
    CHECK_STR_EQ(str_at(ra, "choices.0.message.content"), "First reply.");
    CHECK_STR_EQ(str_at(rb, "choices.0.message.content"), "First reply.");
    const char *a2[] = { "conversation A", "First reply.", "A again", NULL };
    const char *b2[] = { "and then conversation B", "First reply.", "B again", NULL };
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(http(&s, "POST", "/v1/chat/completions", chat_body(k ? b2 : a2), NULL, &body), 200);
        struct json_object *r2 = parse(body), *r1 = k ? rb : ra;
        /* no cache on disk: the live session still held this conversation */
        CHECK_EQ_INT(int_at(r2, "usage.prefilled_tokens"), int_at(r2, "usage.prompt_tokens") -
                                                               int_at(r1, "usage.prompt_tokens") -
                                                               int_at(r1, "usage.completion_tokens"));
        CHECK_STR_EQ(str_at(r2, "choices.0.message.content"), "Second reply.");
        json_object_put(r2);
    }
    json_object_put(ra);
    json_object_put(rb);
    /* two at once: both sessions run on the engine side by side */
    char *out;
    CHECK_EQ_INT(test_runf(&out,
                           "for c in one two; do curl -s -d \"{\\\"messages\\\": [{\\\"role\\\": \\\"user\\\", "
                           "\\\"content\\\": \\\"$c\\\"}]}\" 'http://127.0.0.1:%d/v1/chat/completions' & done; wait",
                           s.port),
                 0);
    CHECK_CONTAINS(out, "\"object\":\"chat.completion\"");
    CHECK_CONTAINS(strstr(out, "\"object\":\"chat.completion\"") + 1, "\"object\":\"chat.completion\"");
    CHECK_EQ_INT(server_stop(&s), 0);
    CHECK_CONTAINS(test_read_file(s.log, NULL), "(slot 2)");
}
