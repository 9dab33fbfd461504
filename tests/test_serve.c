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

#include "tests/serve_util.h"

#define D SRV_DSML

static const char *round_trip_script(bool with_plain)
{
    const char *lines[] = {
        srv_reply_line("let me think</think>Hello there, world.", NULL),
        with_plain ? srv_reply_line("Plain answer.", NULL) : srv_reply_line(srv_weather_call(), NULL),
        with_plain ? srv_reply_line(srv_weather_call(), NULL) : srv_reply_line("ok</think>It is sunny in Paris.", NULL),
        with_plain ? srv_reply_line("ok</think>It is sunny in Paris.", NULL) : NULL,
        NULL,
    };
    return srv_script(lines);
}

TEST(serve, openai_client_plain_streamed_and_tool_round_trip)
{
    srv_server s;
    srv_start(&s, round_trip_script(false), "--api-key sekrit");
    srv_run_clients(&s, "openai", "sekrit");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, anthropic_client_thinking_on_off_and_tool_round_trip)
{
    srv_server s;
    srv_start(&s, round_trip_script(true), "--api-key sekrit");
    srv_run_clients(&s, "anthropic", "sekrit");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, responses_client_streamed_tool_round_trip)
{
    srv_server s;
    srv_start(&s, round_trip_script(false), NULL);
    srv_run_clients(&s, "responses", "none");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, client_disconnect_cancels_the_generation)
{
    char *words = test_strdup("");
    for (int i = 0; i < 200; i++) words = test_printf("%sword ", words);
    const char *lines[] = { srv_reply_line(test_printf("x</think>%s", words), "\"delay_ms\": 20"),
                            srv_reply_line("x</think>Done.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    srv_run_clients(&s, "disconnect", "none");
    CHECK_EQ_INT(srv_stop(&s), 0);
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
    for (int i = 0; i < 6; i++) lines[i] = srv_reply_line(test_printf("Reply %d.", i + 1), "\"delay_ms\": 5");
    lines[6] = NULL;
    srv_server s;
    srv_start(&s, srv_script(lines), "--nothink");
    srv_run_clients(&s, "concurrent", "none");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, api_key_is_required_by_every_route)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--api-key sekrit");
    srv_run_clients(&s, "auth", "sekrit");
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, NULL, &body), 401);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "error.type"), "authentication_error");
    CHECK_STR_EQ(srv_str(o, "error.code"), "invalid_api_key");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages", "{}", NULL, &body), 401);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "type"), "error");
    CHECK_STR_EQ(srv_str(o, "error.type"), "authentication_error");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, "-H 'x-api-key: sekrit'", &body), 200);
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer sekri'", &body), 401);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* ---- the wire ------------------------------------------------------------------------------- */


TEST(serve, bad_requests_get_4xx_in_the_apis_shape)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--max-body 4096");
    const char *chat = "/v1/chat/completions", *msgs = "/v1/messages", *resp = "/v1/responses";
    srv_check_error(&s, chat, "{\"messages\": [", NULL, 400, "not valid JSON");
    srv_check_error(&s, msgs, "[1, 2]", NULL, 400, "one JSON object");
    srv_check_error(&s, chat, "{\"messages\": \"hi\"}", NULL, 400, "'messages' must be an array");
    srv_check_error(&s, chat, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", NULL, 400, "unknown role 'wizard'");
    srv_check_error(&s, msgs, "{\"max_tokens\": 5, \"messages\": [{\"role\": \"wizard\", \"content\": \"x\"}]}", NULL, 400,
                "unknown role 'wizard'");
    srv_check_error(&s, chat, "{\"temperature\": \"hot\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL,
                400, "'temperature' must be a number");
    srv_check_error(&s, chat, "{\"max_tokens\": -3, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL, 400,
                "'max_tokens' must be between");
    srv_check_error(&s, chat, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\"}]}", NULL, 400,
                "must follow an assistant message");
    srv_check_error(&s, msgs, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"hologram\"}]}]}", NULL, 400,
                "'hologram' are not supported");
    srv_check_error(&s, resp, "{\"input\": [{\"type\": \"hologram\"}]}", NULL, 400, "'hologram' are not supported");
    srv_check_error(&s, resp, "{\"input\": 5}", NULL, 400, "'input' must be");
    srv_check_error(&s, chat, "{\"tool_choice\": \"required\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                NULL, 400, "none are given");
    /* a prompt longer than the context */
    char *big = test_strdup("");
    for (int i = 0; i < 300; i++) big = test_printf("%sabcdefghijklmnopqrstuvwxyz%d ", big, i);
    srv_server s2;
    srv_start(&s2, srv_script(lines), "--ctx 256");
    srv_check_error(&s2, chat, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big), NULL, 400,
                "context holds 256");
    CHECK_EQ_INT(srv_stop(&s2), 0);
    /* bodies over the cap, announced or not */
    srv_check_error(&s, chat, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big), NULL, 413,
                "larger than 4096 bytes");
    srv_check_error(&s, msgs, test_printf("{\"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]}", big),
                "-H 'Transfer-Encoding: chunked'", 413, "larger than 4096 bytes");
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/nothing", NULL, NULL, &body), 404);
    CHECK_EQ_INT(srv_http(&s, "GET", chat, NULL, NULL, &body), 405);
    /* still serving */
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, NULL, &body), 200);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "data.0.id"), "tiny.gguf");
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
}


TEST(serve, sse_framing_of_both_apis_and_keepalives_while_reading)
{
    const char *lines[] = { srv_reply_line("mull</think>Hi there.", "\"prefill_delay_ms\": 40"),
                            srv_reply_line("mull</think>Hi there.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--keepalive 0.05");
    char *body;
    const char *names[512];
    struct json_object *data[512];
    bool done;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions",
                      "{\"stream\": true, \"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}", NULL, &body),
                 200);
    /* the prompt took a while to read: comments kept the stream alive */
    CHECK_CONTAINS(body, "\n\n: keep-alive\n\n");
    int n = srv_sse_events(body, names, data, 512, &done);
    CHECK(done);
    CHECK(n >= 3);
    char *text = test_strdup(""), *thinking = test_strdup("");
    for (int i = 0; i < n; i++) {
        CHECK_STR_EQ(names[i], "-");
        CHECK_STR_EQ(srv_str(data[i], "object"), "chat.completion.chunk");
        const char *c = srv_str(data[i], "choices.0.delta.content"), *r = srv_str(data[i], "choices.0.delta.reasoning_content");
        if (c) text = test_printf("%s%s", text, c);
        if (r) thinking = test_printf("%s%s", thinking, r);
    }
    CHECK_STR_EQ(text, "Hi there.");
    CHECK_STR_EQ(thinking, "mull");
    CHECK_STR_EQ(srv_str(data[n - 1], "choices.0.finish_reason"), "stop");
    for (int i = 0; i < n; i++) json_object_put(data[i]);

    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages",
                      "{\"stream\": true, \"max_tokens\": 50, \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}, "
                      "\"messages\": [{\"role\": \"user\", \"content\": \"hello again\"}]}",
                      NULL, &body),
                 200);
    n = srv_sse_events(body, names, data, 512, &done);
    CHECK(!done);
    CHECK_STR_EQ(names[0], "message_start");
    CHECK_STR_EQ(names[n - 2], "message_delta");
    CHECK_STR_EQ(names[n - 1], "message_stop");
    CHECK_STR_EQ(srv_str(data[n - 2], "delta.stop_reason"), "end_turn");
    int starts = 0, stops = 0;
    for (int i = 0; i < n; i++) {
        CHECK_STR_EQ(names[i], srv_str(data[i], "type"));
        if (!strcmp(names[i], "content_block_start")) {
            CHECK_EQ_INT(srv_int(data[i], "index"), starts);
            starts++;
        }
        if (!strcmp(names[i], "content_block_stop")) stops++;
    }
    CHECK_EQ_INT(starts, 2);
    CHECK_EQ_INT(stops, 2);
    for (int i = 0; i < n; i++) json_object_put(data[i]);
    CHECK_EQ_INT(srv_stop(&s), 0);
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
    const char *lines[] = { srv_reply_line("one</think>First answer.", NULL), srv_reply_line("two</think>Second answer.", NULL),
                            srv_reply_line("three</think>Third answer.", NULL), NULL };
    const char *sc = srv_script(lines);
    srv_server s;
    srv_start(&s, sc, NULL);
    char *body;
    const char *t1[] = { "first question", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(t1), NULL, &body), 200);
    struct json_object *r1 = srv_parse(body);
    CHECK_STR_EQ(srv_str(r1, "choices.0.message.content"), "First answer.");
    long p1 = srv_int(r1, "usage.prompt_tokens"), c1 = srv_int(r1, "usage.completion_tokens");
    CHECK_EQ_INT(srv_int(r1, "usage.prefilled_tokens"), p1);

    const char *t2[] = { "first question", "First answer.", "second question", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(t2), NULL, &body), 200);
    struct json_object *r2 = srv_parse(body);
    CHECK_STR_EQ(srv_str(r2, "choices.0.message.content"), "Second answer.");
    long p2 = srv_int(r2, "usage.prompt_tokens"), c2 = srv_int(r2, "usage.completion_tokens");
    /* the session held the first prompt and its reply */
    CHECK_EQ_INT(srv_int(r2, "usage.prefilled_tokens"), p2 - p1 - c1);
    CHECK_EQ_INT(srv_int(r2, "usage.prompt_tokens_details.cached_tokens"), p1 + c1);
    CHECK_EQ_INT(srv_stop(&s), 0);
    CHECK_CONTAINS(test_read_file(s.log, NULL), "SIGTERM: stopping");

    /* a new srv_server on the same cache goes on from the saved state */
    srv_server s2;
    srv_start(&s2, sc, NULL);
    const char *t3[] = { "first question", "First answer.", "second question", "Second answer.", "third question", NULL };
    CHECK_EQ_INT(srv_http(&s2, "POST", "/v1/chat/completions", chat_body(t3), NULL, &body), 200);
    struct json_object *r3 = srv_parse(body);
    CHECK_STR_EQ(srv_str(r3, "choices.0.message.content"), "Third answer.");
    long p3 = srv_int(r3, "usage.prompt_tokens");
    CHECK_EQ_INT(srv_int(r3, "usage.prefilled_tokens"), p3 - p2 - c2);
    CHECK_EQ_INT(srv_stop(&s2), 0);
    json_object_put(r1);
    json_object_put(r2);
    json_object_put(r3);
}

TEST(serve, tool_choice_none_keeps_the_reply_text)
{
    const char *lines[] = { srv_reply_line(srv_weather_call(), NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    const char *req = "{\"tool_choice\": \"none\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": "
                      "\"get_weather\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
                      "\"string\"}}}}}], \"messages\": [{\"role\": \"user\", \"content\": \"weather?\"}]}";
    char *body;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", req, NULL, &body), 200);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "choices.0.finish_reason"), "stop");
    CHECK(srv_at(o, "choices.0.message.tool_calls") == NULL);
    CHECK_CONTAINS(srv_str(o, "choices.0.message.content"), "Checking.");
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, sigterm_cancels_the_request_in_progress_and_saves_the_cache)
{
    const char *lines[] = { srv_reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z", "\"delay_ms\": 200"),
                            NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
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
    CHECK_EQ_INT(srv_stop(&s), 0);
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
    srv_server s;
    srv_start(&s, srv_script(lines), "--timeout 1");
    const char *part = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
    bool closed;
    double t0 = test_now_ms();
    char *reply = srv_raw(&s, part, strlen(part), 10000, &closed);
    double waited = test_now_ms() - t0;
    CHECK_MSG(closed && waited < 9000, "the connection stayed open %.0f ms", waited);
    /* told why, not served: the request never got whole */
    srv_check_raw_error(reply, 408, false, NULL);
    /* others are still served */
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, NULL, &body), 200);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, bench_rows_compare_the_server_with_in_process)
{
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --serve-bench -m '%s' --prompt-file '%s/README.md' --prompt-bytes 300 "
                             "--gen-tokens 4 --runs 1 --threads 1 --ctx 1024",
                       test_bindir(), srv_tiny_model(), test_root());
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
    const char *lines[] = { srv_reply_line("hm</think>Hello there, world.", NULL), srv_reply_line("hm</think>Hello there, world.", NULL),
                            srv_reply_line("hm</think>Hello there, world.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions",
                      "{\"stop\": [\"zzz\", \"there\"], \"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}", NULL, &body),
                 200);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "choices.0.message.content"), "Hello ");
    CHECK_STR_EQ(srv_str(o, "choices.0.finish_reason"), "stop");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages",
                      "{\"max_tokens\": 100, \"stop_sequences\": [\"world\"], \"thinking\": {\"type\": \"enabled\", "
                      "\"budget_tokens\": 50}, \"messages\": [{\"role\": \"user\", \"content\": \"bb\"}]}",
                      NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "stop_reason"), "stop_sequence");
    CHECK_STR_EQ(srv_str(o, "stop_sequence"), "world");
    CHECK_STR_EQ(srv_str(o, "content.1.text"), "Hello there, ");
    json_object_put(o);
    /* five tokens end the reply long before its end */
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions",
                      "{\"max_tokens\": 5, \"messages\": [{\"role\": \"user\", \"content\": \"ccc\"}]}", NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "choices.0.finish_reason"), "length");
    CHECK_EQ_INT(srv_int(o, "usage.completion_tokens"), 5);
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages/count_tokens",
                      "{\"model\": \"x\", \"messages\": [{\"role\": \"user\", \"content\": \"ccc\"}]}", NULL, &body),
                 200);
    o = srv_parse(body);
    /* BOS, <｜User｜>, the text, <｜Assistant｜>, </think> */
    CHECK(srv_int(o, "input_tokens") >= 5);
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, a_switched_conversation_goes_on_from_the_cached_state)
{
    /* the same answer after different reasoning: each conversation keeps
     * its own */
    const char *lines[] = { srv_reply_line("first this</think>Same answer.", NULL),
                            srv_reply_line("then that</think>Same answer.", NULL), srv_reply_line("c</think>Answer C.", NULL),
                            NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    const char *a1[] = { "conversation A begins here", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(a1), NULL, &body), 200);
    struct json_object *r1 = srv_parse(body);
    long p1 = srv_int(r1, "usage.prompt_tokens"), c1 = srv_int(r1, "usage.completion_tokens");
    const char *b1[] = { "and B is another one", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(b1), NULL, &body), 200);
    struct json_object *r2 = srv_parse(body);
    /* B shares only BOS and the user marker with A: the rest is read */
    CHECK_EQ_INT(srv_int(r2, "usage.prefilled_tokens"), srv_int(r2, "usage.prompt_tokens") - 2);
    const char *a2[] = { "conversation A begins here", "Same answer.", "A goes on", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(a2), NULL, &body), 200);
    struct json_object *r3 = srv_parse(body);
    /* A's state came back from the cache: only its new turn is read */
    CHECK_EQ_INT(srv_int(r3, "usage.prefilled_tokens"), srv_int(r3, "usage.prompt_tokens") - p1 - c1);
    CHECK_EQ_INT(srv_stop(&s), 0);
    json_object_put(r1);
    json_object_put(r2);
    json_object_put(r3);
}

TEST(serve, a_plain_request_whose_client_leaves_is_cancelled)
{
    const char *lines[] = { srv_reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z", "\"delay_ms\": 100"),
                            srv_reply_line("x</think>Next.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *out;
    /* curl gives up after half a second, long before the 50-odd tokens */
    test_runf(&out, "curl -s --max-time 0.5 -d '{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}]}' "
                    "'http://127.0.0.1:%d/v1/chat/completions'",
              s.port);
    char *body;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"then\"}]}",
                      NULL, &body),
                 200);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    const char *first = strstr(log, "request 1:");
    CHECK_MSG(first && strstr(first, "cancelled") && strstr(first, "cancelled") < strstr(first, "request 2:"),
              "the first request was not cancelled:\n%s", log);
}

TEST(serve, parallel_sessions_keep_each_conversation_to_its_own)
{
    /* the script's replies go in order per session */
    const char *lines[] = { srv_reply_line("r</think>First reply.", NULL), srv_reply_line("r</think>Second reply.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--parallel 2 --no-cache");
    char *body;
    const char *a1[] = { "conversation A", NULL }, *b1[] = { "and then conversation B", NULL };
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(a1), NULL, &body), 200);
    struct json_object *ra = srv_parse(body);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(b1), NULL, &body), 200);
    struct json_object *rb = srv_parse(body);
    /* each went to a session of its own: both got their session's first reply */
    CHECK_STR_EQ(srv_str(ra, "choices.0.message.content"), "First reply.");
    CHECK_STR_EQ(srv_str(rb, "choices.0.message.content"), "First reply.");
    const char *a2[] = { "conversation A", "First reply.", "A again", NULL };
    const char *b2[] = { "and then conversation B", "First reply.", "B again", NULL };
    for (int k = 0; k < 2; k++) {
        CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", chat_body(k ? b2 : a2), NULL, &body), 200);
        struct json_object *r2 = srv_parse(body), *r1 = k ? rb : ra;
        /* no cache on disk: the live session still held this conversation */
        CHECK_EQ_INT(srv_int(r2, "usage.prefilled_tokens"), srv_int(r2, "usage.prompt_tokens") -
                                                               srv_int(r1, "usage.prompt_tokens") -
                                                               srv_int(r1, "usage.completion_tokens"));
        CHECK_STR_EQ(srv_str(r2, "choices.0.message.content"), "Second reply.");
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
    CHECK_EQ_INT(srv_stop(&s), 0);
    CHECK_CONTAINS(test_read_file(s.log, NULL), "(slot 2)");
}

/* ---- what real clients send ------------------------------------------------------------- */

/* Claude Code's shape: the billing header block first in the system
 * prompt (its cch= changes with every request), cache_control on blocks,
 * and a system turn among the messages. */
static const char *claude_code_system =
    "You are a careful coding agent working in the user's repository. Read before you write, keep "
    "changes small, run the tests, and report what you did plainly. Never invent file contents.";

static char *claude_code_request(const char *cch)
{
    return test_printf(
        "{\"model\": \"ds4\", \"max_tokens\": 100, \"metadata\": {\"user_id\": \"u\"}, \"system\": ["
        "{\"type\": \"text\", \"text\": \"x-anthropic-billing-header: cc_version=2.1.332.3eb; cc_entrypoint=cli; cch=%s;\"},"
        "{\"type\": \"text\", \"text\": \"%s\", \"cache_control\": {\"type\": \"ephemeral\"}}],"
        "\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"<system-reminder>context</system-reminder>\\n\"},"
        "{\"type\": \"text\", \"text\": \"Say hi.\"}]},"
        "{\"role\": \"system\", \"content\": [{\"type\": \"text\", \"text\": \"# Environment\\nWorking directory: /w\", "
        "\"cache_control\": {\"type\": \"ephemeral\"}}]}]}",
        cch, claude_code_system);
}

TEST(serve, claude_code_request_is_answered_and_its_billing_header_does_not_break_the_cache)
{
    const char *lines[] = { srv_reply_line("Hi.", "\"expect\": \"Say hi.\\n\\n# Environment\\nWorking directory: /w\""),
                            NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    /* the system prompt's tokens: what it adds to a one-message request */
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages/count_tokens",
                          "{\"model\": \"ds4\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", NULL, &body),
                 200);
    struct json_object *o = srv_parse(body);
    long bare = srv_int(o, "input_tokens");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages/count_tokens",
                          test_printf("{\"model\": \"ds4\", \"system\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
                                      claude_code_system),
                          NULL, &body),
                 200);
    o = srv_parse(body);
    long system_tokens = srv_int(o, "input_tokens") - bare;
    json_object_put(o);
    CHECK(system_tokens > 20);

    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages", claude_code_request("1f2e3"), NULL, &body), 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "content.0.text"), "Hi.");
    json_object_put(o);
    /* the next request differs only in the billing block: the very same
     * prompt (the script answers it with the same reply) */
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages", claude_code_request("9a8b7"), NULL, &body), 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "content.0.text"), "Hi.");
    long cached = srv_int(o, "usage.cache_read_input_tokens");
    CHECK_MSG(cached >= system_tokens, "%ld tokens read from the cache, the system prompt has %ld", cached, system_tokens);
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve, system_turns_among_the_messages_stay_where_they_stand_in_every_api)
{
    const char *lines[] = {
        srv_reply_line("ok</think>Two.", "\"expect\": \"one\\n\\nMind the tabs.\""),
        srv_reply_line("ok</think>Three.", "\"expect\": \"Use tabs.<\xef\xbd\x9cUser\xef\xbd\x9c>two\""),
        srv_reply_line("Four.", "\"expect\": \"[an image the model cannot see]\""),
        NULL,
    };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions",
                          "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"one\"},"
                          "{\"role\": \"developer\", \"content\": [{\"type\": \"text\", \"text\": \"Mind the tabs.\"}]}]}",
                          NULL, &body),
                 200);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "choices.0.message.content"), "Two.");
    json_object_put(o);
    /* a developer message after an assistant turn: plain text after its end */
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/responses",
                          "{\"instructions\": \"Be brief.\", \"input\": [{\"role\": \"user\", \"content\": \"one\"},"
                          "{\"type\": \"reasoning\", \"id\": \"rs_1\", \"summary\": [], \"encrypted_content\": \"opaque\"},"
                          "{\"role\": \"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"Two.\"}]},"
                          "{\"role\": \"developer\", \"content\": [{\"type\": \"input_text\", \"text\": \"Use tabs.\"}]},"
                          "{\"type\": \"item_reference\", \"id\": \"msg_1\"},"
                          "{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"two\"}]}]}",
                          NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "output.1.content.0.text"), "Three.");
    json_object_put(o);
    /* media the model cannot read: a placeholder, and the log says why */
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages",
                          "{\"max_tokens\": 50, \"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look: \"},"
                          "{\"type\": \"image\", \"source\": {\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"iVBO\"}}]}]}",
                          NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "content.0.text"), "Four.");
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    CHECK_CONTAINS(log, "left out: images (the model reads text only)");
    CHECK_CONTAINS(log, "encrypted reasoning");
    CHECK_CONTAINS(log, "item references");
}

/* Every content type the official APIs take is answered: text-bearing
 * parts are read (a text document, a search result, a tool search's
 * reference), the rest left out and noted in the request log. */
TEST(serve, every_content_type_of_the_three_apis_is_answered)
{
    const char *lines[] = {
        srv_reply_line("ok</think>One.", "\"expect\": \"[an image the model cannot see][audio the model cannot hear][a file the model cannot read]\""),
        srv_reply_line("Two.", "\"expect\": \"read[an image the model cannot see]Tool Read is available.\\n\\n</tool_result>"
                                   "<\xef\xbd\x9cUser\xef\xbd\x9c>Guide\\n\\nUse tabs.Result\\n\\nAll good.[a document the model cannot read]\""),
        srv_reply_line("ok</think>Three.", "\"expect\": \"Tool result 1 (local_shell):\\na.txt\""),
        NULL,
    };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions",
                          "{\"tools\": [{\"type\": \"custom\", \"custom\": {\"name\": \"grammar\"}}], \"messages\": [{\"role\": \"user\", \"content\": ["
                          "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:image/png;base64,iVBO\"}},"
                          "{\"type\": \"input_audio\", \"input_audio\": {\"data\": \"UklG\", \"format\": \"wav\"}},"
                          "{\"type\": \"file\", \"file\": {\"file_data\": \"JVBE\", \"filename\": \"a.pdf\"}}]}]}",
                          NULL, &body),
                 200);
    struct json_object *o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "choices.0.message.content"), "One.");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages",
                          "{\"max_tokens\": 50, \"tools\": [{\"type\": \"web_search_20250305\", \"name\": \"web_search\"},"
                          "{\"name\": \"Read\", \"input_schema\": {\"type\": \"object\"}}], \"messages\": ["
                          "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"look\", \"cache_control\": {\"type\": \"ephemeral\"}}]},"
                          "{\"role\": \"assistant\", \"content\": [{\"type\": \"redacted_thinking\", \"data\": \"xx\"},"
                          "{\"type\": \"server_tool_use\", \"id\": \"srvtoolu_1\", \"name\": \"web_search\", \"input\": {\"query\": \"q\"}},"
                          "{\"type\": \"web_search_tool_result\", \"tool_use_id\": \"srvtoolu_1\", \"content\": []},"
                          "{\"type\": \"text\", \"text\": \"Found.\", \"citations\": []},"
                          "{\"type\": \"tool_use\", \"id\": \"t1\", \"name\": \"Read\", \"input\": {}}]},"
                          "{\"role\": \"user\", \"content\": [{\"type\": \"tool_result\", \"tool_use_id\": \"t1\", \"content\": ["
                          "{\"type\": \"text\", \"text\": \"read\"}, {\"type\": \"image\", \"source\": {\"type\": \"url\", \"url\": \"http://x\"}},"
                          "{\"type\": \"tool_reference\", \"tool_name\": \"Read\"}]},"
                          "{\"type\": \"document\", \"title\": \"Guide\", \"source\": {\"type\": \"text\", \"media_type\": \"text/plain\", \"data\": \"Use tabs.\"}},"
                          "{\"type\": \"search_result\", \"title\": \"Result\", \"source\": \"s\", \"content\": [{\"type\": \"text\", \"text\": \"All good.\"}]},"
                          "{\"type\": \"document\", \"source\": {\"type\": \"base64\", \"media_type\": \"application/pdf\", \"data\": \"JVBE\"}}]}]}",
                          NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_STR_EQ(srv_str(o, "content.0.text"), "Two.");
    json_object_put(o);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/responses",
                          "{\"tools\": [{\"type\": \"web_search\"}, {\"type\": \"custom\", \"name\": \"apply_patch\"}], \"input\": ["
                          "{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"go\"}, {\"type\": \"input_file\", \"file_id\": \"f\"}]},"
                          "{\"type\": \"web_search_call\", \"id\": \"ws_1\", \"status\": \"completed\", \"action\": {\"type\": \"search\"}},"
                          "{\"type\": \"custom_tool_call\", \"call_id\": \"c1\", \"name\": \"apply_patch\", \"input\": \"*** Begin Patch\"},"
                          "{\"type\": \"custom_tool_call_output\", \"call_id\": \"c1\", \"output\": \"patched\"},"
                          "{\"type\": \"local_shell_call\", \"call_id\": \"c2\", \"action\": {\"type\": \"exec\", \"command\": [\"ls\"]}},"
                          "{\"type\": \"local_shell_call_output\", \"call_id\": \"c2\", \"output\": [{\"type\": \"input_text\", \"text\": \"a.txt\"}]}]}",
                          NULL, &body),
                 200);
    o = srv_parse(body);
    CHECK_MSG(srv_str(o, "output.1.content.0.text") && !strcmp(srv_str(o, "output.1.content.0.text"), "Three."), "%s", body);
    json_object_put(o);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    static const char *const notes[] = { "images", "audio", "attached files", "tools other than functions",
                                         "redacted thinking", "server tool calls", "non-text documents", "hosted tool calls" };
    for (size_t i = 0; i < sizeof notes / sizeof *notes; i++) CHECK_CONTAINS(log, notes[i]);
}
