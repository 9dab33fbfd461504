/* `ds4cl serve --parallel N`: the sessions' decode tokens go to the engine
 * as shared steps (serve/batch.c). Replies served side by side must be the
 * very replies served one at a time, the steps must really be shared (the
 * /health counts and the request log say), and a client that leaves in the
 * middle of its reply must not change another's. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/serve_util.h"

#define CHAT "/v1/chat/completions"

/* A greedy request without reasoning whose prompt (some 1000 tokens) differs from the
 * others' from its start: reading it takes a few prefill pieces. */
static const char *request(int k, int max_tokens)
{
    static const char *const words[] = { "alpha", "cache", "prefill", "decode", "token", "slot", "engine", "reply" };
    char *u = test_printf("Request %d:", k);
    for (int i = 0; i < 20; i++)
        u = test_printf("%s The cache holds snapshots of the session state keyed by their token prefix.", u);
    for (int i = 0; i < 2 + k % 5; i++) u = test_printf("%s %s", u, words[(k * 5 + i) % 8]);
    return test_printf("{\"max_tokens\": %d, \"temperature\": 0, \"thinking\": {\"type\": \"disabled\"}, "
                       "\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}",
                       max_tokens, u);
}

/* The reply's message (content and reasoning) and its token count. */
static const char *message_of(const char *body, long *completion)
{
    struct json_object *o = srv_parse(body);
    const char *m = test_strdup(json_object_to_json_string(srv_at(o, "choices.0.message")));
    *completion = srv_int(o, "usage.completion_tokens");
    json_object_put(o);
    return m;
}

static long health(const srv_server *s, const char *what)
{
    char *body;
    CHECK_EQ_INT(srv_http(s, "GET", "/health", NULL, NULL, &body), 200);
    struct json_object *o = srv_parse(body);
    long v = srv_int(o, what);
    json_object_put(o);
    return v;
}

/* Posts every request at once and waits for every reply. */
static void post_all(const srv_server *s, const char *const *json, int n, const char **bodies)
{
    const char *out[8];
    for (int k = 0; k < n; k++) out[k] = srv_post_bg(s, CHAT, json[k]);
    for (int k = 0; k < n; k++) {
        const char *rc = test_printf("%s.rc", out[k]);
        CHECK_MSG(srv_wait_file(rc, "\n", 60000), "request %d did not end", k);
        CHECK_STR_EQ(test_read_file(rc, NULL), "0\n");
        bodies[k] = test_read_file(out[k], NULL);
    }
}

/* The sum of the request log's "(N in shared steps)". */
static long shared_in_log(const char *log)
{
    long sum = 0;
    for (const char *p = log; (p = strstr(p, " in shared steps)")); p++) {
        const char *q = p;
        while (q > log && q[-1] >= '0' && q[-1] <= '9') q--;
        sum += strtol(q, NULL, 10);
    }
    return sum;
}

/* Serves candidate requests one at a time until n of them give replies of
 * at least min tokens (the random model often ends at once): their bodies
 * in json, their messages in alone. */
static void pick_requests(const srv_server *s, int n, int max_tokens, long min, const char **json, const char **alone)
{
    int got = 0;
    for (int k = 0; k < 60 && got < n; k++) {
        char *body;
        const char *j = request(k, max_tokens);
        long tokens;
        CHECK_EQ_INT(srv_http(s, "POST", CHAT, j, NULL, &body), 200);
        const char *m = message_of(body, &tokens);
        if (tokens < min) continue;
        json[got] = j;
        alone[got++] = m;
    }
    CHECK_MSG(got == n, "only %d of 60 prompts got replies of %ld tokens", got, min);
}

TEST(serve_batch, concurrent_greedy_replies_equal_the_replies_served_one_at_a_time)
{
    const char *lines[] = { NULL };
    enum { N = 4 };
    const char *json[N], *alone[N], *bodies[N];
    srv_server s;
    srv_start(&s, srv_script(lines), "--engine cpu --threads 1 --parallel 4 --no-cache");
    pick_requests(&s, N, 48, 8, json, alone);
    /* one at a time: every step had one session */
    CHECK_EQ_INT(health(&s, "shared_steps"), 0);
    long steps = health(&s, "decode_steps");
    CHECK_MSG(steps > 0, "no decode steps were counted");
    /* side by side: while some read their prompts, the others' tokens
     * step between the pieces, and join in one step as they are ready */
    post_all(&s, json, N, bodies);
    for (int k = 0; k < N; k++) {
        long n;
        CHECK_STR_EQ(message_of(bodies[k], &n), alone[k]);
    }
    long shared = health(&s, "shared_steps");
    CHECK_MSG(shared > 0, "no step was shared by several sessions (%ld steps)", health(&s, "decode_steps") - steps);
    CHECK_EQ_INT(srv_stop(&s), 0);
    CHECK_MSG(shared_in_log(test_read_file(s.log, NULL)) > 0, "the request log counts no shared steps");
}

TEST(serve_batch, no_batch_steps_each_session_alone_with_the_same_replies)
{
    const char *lines[] = { NULL };
    enum { N = 3 };
    const char *json[N], *bodies[N], *alone[N];
    long n;
    srv_server s;
    srv_start(&s, srv_script(lines), "--engine cpu --threads 1 --parallel 3 --no-cache --no-batch");
    pick_requests(&s, N, 32, 4, json, alone);
    post_all(&s, json, N, bodies);
    for (int k = 0; k < N; k++) CHECK_STR_EQ(message_of(bodies[k], &n), alone[k]);
    CHECK_EQ_INT(health(&s, "shared_steps"), 0);
    CHECK_MSG(health(&s, "decode_steps") > 0, "no decode steps were counted");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve_batch, a_client_that_leaves_mid_reply_leaves_the_other_reply_unchanged)
{
    /* two slow replies picked by their prompts: A's client gives up while
     * both are decoding in shared steps; B's reply must come whole */
    const char *b_reply = "b</think>one two three four five six seven eight nine ten eleven twelve";
    const char *lines[] = {
        srv_reply_line("a</think>a b c d e f g h i j k l m n o p q r s t u v w x y z a b c d e f g h i j k l m n o p",
                       "\"delay_ms\": 40, \"match\": \"slow one\""),
        srv_reply_line(b_reply, "\"delay_ms\": 40, \"match\": \"steady one\""),
        NULL,
    };
    srv_server s;
    srv_start(&s, srv_script(lines), "--parallel 2 --no-cache");
    const char *a = "{\"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"the slow one\"}]}";
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"the steady one\"}]}";
    const char *b_out = srv_post_bg(&s, CHAT, b);
    /* B decodes (its prompt is read at once) ... */
    for (int i = 0; i < 500 && health(&s, "decode_steps") < 2; i++) usleep(20000);
    CHECK_MSG(health(&s, "decode_steps") >= 2, "B did not begin");
    /* ... when A comes, and A's client leaves after a few letters, long
     * before the last, in the middle of B's reply */
    char *out;
    test_runf(&out, "curl -sN -d '%s' 'http://127.0.0.1:%d%s' | grep -m1 -q '\"content\":\" e'", a, s.port, CHAT);
    const char *rc = test_printf("%s.rc", b_out);
    CHECK_MSG(srv_wait_file(rc, "\n", 30000), "B did not end");
    CHECK_STR_EQ(test_read_file(rc, NULL), "0\n");
    struct json_object *o = srv_parse(test_read_file(b_out, NULL));
    CHECK_STR_EQ(srv_str(o, "choices.0.message.content"), strstr(b_reply, "</think>") + 8);
    CHECK_STR_EQ(srv_str(o, "choices.0.finish_reason"), "stop");
    json_object_put(o);
    CHECK_MSG(health(&s, "shared_steps") > 0, "A and B never shared a step");
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    CHECK_MSG(strstr(log, "cancelled"), "A was not cancelled:\n%s", log);
}

TEST(serve_batch, bench_rows_compare_shared_steps_with_each_session_alone)
{
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --serve-bench -m '%s' --prompt-file '%s/README.md' --prompt-bytes 120 "
                             "--gen-tokens 16 --runs 1 --threads 1 --ctx 1024 --parallel 3",
                       test_bindir(), srv_tiny_model(), test_root());
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_CONTAINS(out, "mode,parallel,gen_tokens,wall_ms,tokens_per_s,cpu_ms_per_token,load1,tps_ratio\n");
    const char *a = strstr(out, "\nbatched,3,"), *b = strstr(out, "\nno_batch,3,");
    CHECK_MSG(a && b, "%s", out);
    /* greedy on the same engine: the same replies either way */
    long ga = strtol(a + 11, NULL, 10), gb = strtol(b + 12, NULL, 10);
    CHECK_EQ_INT(ga, gb);
    const char *tps = strchr(strchr(a + 11, ',') + 1, ',') + 1;
    CHECK_MSG(ga > 0 && strtod(tps, NULL) > 0, "%s", out);
}
