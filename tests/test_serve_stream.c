/* What `ds4cl serve` streams, in each of its three APIs: one delta per
 * token at most (as the model writes them, not a byte at a time), bodies
 * and events that are valid UTF-8 whatever bytes the model wrote (a
 * character cut by the token limit, a byte that is no character), a
 * stream the server stops mid-way ending with the API's error event, and
 * a responses stream announcing every item of its final output. The tiny
 * model's vocabulary is bytes with a few merges, so a script reply puts
 * any byte sequence in front of the server. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/serve_util.h"

#define FFFD "\xef\xbf\xbd"

static const char *const CHAT = "/v1/chat/completions", *const MSGS = "/v1/messages", *const RESP = "/v1/responses";

/* A request body for path: one user message, streamed or not, with a
 * token limit (0: none) and thinking on in every API. Each prompt is
 * longer than the one before, so that each takes the script's next reply
 * (the script engine replays a reply for a prompt of the same length). */
static const char *request(const char *path, bool stream, int max_tokens)
{
    static int seq;
    const char *limit = "";
    seq++;
    const char *ask = test_printf("go %.*s", seq, "99999999999999999999999999999999999999999999999999");
    if (path == MSGS) limit = test_printf("\"max_tokens\": %d, ", max_tokens ? max_tokens : 200);
    else if (max_tokens) limit = test_printf("\"%s\": %d, ", path == RESP ? "max_output_tokens" : "max_tokens", max_tokens);
    if (path == RESP)
        return test_printf("{%s\"stream\": %s, \"reasoning\": {\"effort\": \"high\"}, \"input\": \"%s\"}", limit,
                           stream ? "true" : "false", ask);
    return test_printf("{%s\"stream\": %s%s, \"messages\": [{\"role\": \"user\", \"content\": \"%s\"}]%s}", limit,
                       stream ? "true" : "false", path == CHAT && stream ? ", \"stream_options\": {\"include_usage\": true}" : "",
                       ask, path == MSGS ? ", \"thinking\": {\"type\": \"enabled\", \"budget_tokens\": 100}" : "");
}

/* What a stream said: its text and reasoning deltas (how many, and their
 * concatenations) and the output tokens its usage counts. */
typedef struct {
    int deltas;
    char *text, *think;
    long tokens;
    bool whole_chars;   /* no delta ended inside a character */
} streamed;

static void add_delta(streamed *st, bool think, const char *s)
{
    if (!s) return;
    st->deltas++;
    if (!srv_utf8_valid(s, strlen(s))) st->whole_chars = false;
    if (think) st->think = test_printf("%s%s", st->think, s);
    else st->text = test_printf("%s%s", st->text, s);
}

static streamed read_stream(const char *path, const char *body)
{
    const char *names[512];
    struct json_object *data[512];
    bool done;
    int n = srv_sse_events(body, names, data, 512, &done);
    streamed st = { 0, test_strdup(""), test_strdup(""), -1, true };
    for (int i = 0; i < n; i++) {
        struct json_object *d = data[i];
        const char *type = srv_str(d, "type");
        if (path == CHAT) {
            add_delta(&st, false, srv_str(d, "choices.0.delta.content"));
            add_delta(&st, true, srv_str(d, "choices.0.delta.reasoning_content"));
            if (srv_at(d, "usage")) st.tokens = srv_int(d, "usage.completion_tokens");
        } else if (path == MSGS) {
            if (!strcmp(type, "content_block_delta")) {
                add_delta(&st, false, srv_str(d, "delta.text"));
                add_delta(&st, true, srv_str(d, "delta.thinking"));
            }
            if (!strcmp(type, "message_delta")) st.tokens = srv_int(d, "usage.output_tokens");
        } else {
            if (!strcmp(type, "response.output_text.delta")) add_delta(&st, false, srv_str(d, "delta"));
            if (!strcmp(type, "response.reasoning_text.delta")) add_delta(&st, true, srv_str(d, "delta"));
            if (srv_at(d, "response.usage")) st.tokens = srv_int(d, "response.usage.output_tokens");
        }
        json_object_put(d);
    }
    if (path == CHAT) CHECK(done);
    return st;
}

TEST(serve_stream, deltas_are_whole_tokens_in_every_api)
{
    /* the merges make tokens of more than one byte: " the", "re", "or" */
    const char *reply = srv_reply_line("there or there</think>Hello there, the world or more.", NULL);
    const char *lines[] = { reply, reply, reply, NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    const char *paths[] = { CHAT, MSGS, RESP };
    for (int i = 0; i < 3; i++) {
        char *body;
        CHECK_EQ_INT(srv_http(&s, "POST", paths[i], request(paths[i], true, 0), NULL, &body), 200);
        streamed st = read_stream(paths[i], body);
        CHECK_STR_EQ(st.text, "Hello there, the world or more.");
        CHECK_STR_EQ(st.think, "there or there");
        /* the reply is fewer tokens than characters */
        CHECK(st.tokens > 0 && st.tokens < (long)(strlen(st.text) + strlen(st.think)));
        CHECK_MSG(st.deltas <= st.tokens, "%s: %d deltas for %ld tokens", paths[i], st.deltas, st.tokens);
    }
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* The text and reasoning of a plain body. */
static void read_plain(const char *path, const char *body, char **text, char **think)
{
    struct json_object *o = srv_parse(body);
    const char *t = NULL, *r = NULL;
    if (path == CHAT) {
        t = srv_str(o, "choices.0.message.content");
        r = srv_str(o, "choices.0.message.reasoning_content");
    } else {
        struct json_object *items = srv_at(o, path == MSGS ? "content" : "output");
        for (size_t i = 0; items && i < json_object_array_length(items); i++) {
            struct json_object *it = json_object_array_get_idx(items, i);
            const char *type = srv_str(it, "type");
            if (!strcmp(type, "text")) t = srv_str(it, "text");
            if (!strcmp(type, "thinking")) r = srv_str(it, "thinking");
            if (!strcmp(type, "message")) t = srv_str(it, "content.0.text");
            if (!strcmp(type, "reasoning")) r = srv_str(it, "content.0.text");
        }
    }
    *text = test_strdup(t ? t : "");
    *think = test_strdup(r ? r : "");
    json_object_put(o);
}

TEST(serve_stream, bodies_and_events_are_valid_utf8_whatever_the_model_wrote)
{
    /* bytes that are no characters (a stray lead, a lone continuation, a
     * surrogate's encoding) in the reasoning and the text; then a complete
     * reply whose last character the token limit cuts: "x", "</think>",
     * "A", then the first two of the four bytes of U+1F600 */
    const char *bad = srv_reply_line("th\xfdnk</think>bad \xfd byte \x80 and \xed\xa0\x80 caf\xc3\xa9.", NULL);
    const char *cut = srv_reply_line("x</think>A\xf0\x9f\x98\x80 more", NULL);
    const char *lines[13];
    for (int i = 0; i < 6; i++) lines[i] = bad;
    for (int i = 6; i < 12; i++) lines[i] = cut;
    lines[12] = NULL;
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    const char *paths[] = { CHAT, MSGS, RESP };
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < 6; i++) {
            const char *path = paths[i / 2];
            bool stream = i % 2;
            char *body;
            size_t len;
            CHECK_EQ_INT(srv_http(&s, "POST", path, request(path, stream, kind ? 5 : 0), NULL, &body), 200);
            len = strlen(body);
            CHECK_MSG(srv_utf8_valid(body, len), "%s%s: not UTF-8: %s", path, stream ? " (stream)" : "", body);
            char *text, *think;
            if (stream) {
                streamed st = read_stream(path, body);
                CHECK_MSG(st.whole_chars, "%s: a delta is not whole characters", path);
                text = st.text;
                think = st.think;
            } else {
                read_plain(path, body, &text, &think);
            }
            if (kind == 0) {
                CHECK_STR_EQ(think, "th" FFFD "nk");
                CHECK_STR_EQ(text, "bad " FFFD " byte " FFFD " and " FFFD FFFD FFFD " caf\xc3\xa9.");
            } else {
                CHECK_STR_EQ(think, "x");
                CHECK_STR_EQ(text, "A" FFFD FFFD);
            }
        }
    }
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Streams a slow reply from path, stops the server once text has come,
 * and returns the events the client got (their count in *n). */
static int stream_then_stop(const char *path, const char **names, struct json_object **data, bool *done)
{
    const char *lines[] = { srv_reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z",
                                           "\"delay_ms\": 100"),
                            NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    const char *out = srv_post_bg(&s, path, request(path, true, 0));
    CHECK_MSG(srv_wait_file(out, path == CHAT ? "\"content\":\"a" : path == MSGS ? "\"text\":\"a" : "\"delta\":\"a", 20000),
              "%s: no text came", path);
    CHECK_EQ_INT(srv_stop(&s), 0);
    const char *rc = test_printf("%s.rc", out);
    CHECK_MSG(srv_wait_file(rc, "\n", 20000), "%s: the stream did not end", path);
    /* curl read the whole response: its last chunk came before the close */
    CHECK_STR_EQ(test_read_file(rc, NULL), "0\n");
    char *body = test_read_file(out, NULL);
    int n = srv_sse_events(body, names, data, 512, done);
    CHECK_MSG(n > 0, "%s: no events", path);
    return n;
}

TEST(serve_stream, a_stream_the_server_stops_ends_with_the_apis_error)
{
    const char *names[512];
    struct json_object *data[512];
    bool done;
    /* chat: a chunk with an error object (the official clients raise
     * it), then [DONE] */
    int n = stream_then_stop(CHAT, names, data, &done);
    CHECK(done);
    CHECK_CONTAINS(srv_str(data[n - 1], "error.message"), "shutting down");
    CHECK_STR_EQ(srv_str(data[n - 1], "error.type"), "server_error");
    for (int i = 0; i < n; i++) json_object_put(data[i]);
    /* messages: the error event, overloaded_error as a 503 would say */
    n = stream_then_stop(MSGS, names, data, &done);
    CHECK_STR_EQ(names[n - 1], "error");
    CHECK_STR_EQ(srv_str(data[n - 1], "type"), "error");
    CHECK_STR_EQ(srv_str(data[n - 1], "error.type"), "overloaded_error");
    CHECK_CONTAINS(srv_str(data[n - 1], "error.message"), "shutting down");
    for (int i = 0; i < n; i++) json_object_put(data[i]);
    /* responses: response.failed, the error in the response */
    n = stream_then_stop(RESP, names, data, &done);
    CHECK_STR_EQ(names[n - 1], "response.failed");
    CHECK_STR_EQ(srv_str(data[n - 1], "response.status"), "failed");
    CHECK_STR_EQ(srv_str(data[n - 1], "response.error.code"), "server_error");
    CHECK_CONTAINS(srv_str(data[n - 1], "response.error.message"), "shutting down");
    for (int i = 0; i < n; i++) json_object_put(data[i]);
}

TEST(serve_stream, the_official_clients_see_a_stopped_stream_fail)
{
    const char *apis[] = { "chat", "messages", "responses" };
    for (int i = 0; i < 3; i++) {
        const char *lines[] = { srv_reply_line("x</think>a b c d e f g h i j k l m n o p q r s t u v w x y z",
                                               "\"delay_ms\": 100"),
                                NULL };
        srv_server s;
        srv_start(&s, srv_script(lines), NULL);
        srv_run_clients_with(&s, "stopped", "none", test_printf("%d %s", (int)s.pid, apis[i]));
        CHECK_EQ_INT(srv_stop(&s), 0);
    }
}

/* Every item of the responses stream's final output was announced with
 * output_item.added and closed with output_item.done, in that order, and
 * nothing else was announced. The final event's type. */
static const char *check_announced(const char *body)
{
    const char *names[512];
    struct json_object *data[512];
    bool done;
    int n = srv_sse_events(body, names, data, 512, &done);
    CHECK(n > 0);
    const char *added[64], *closed[64];
    int n_added = 0, n_closed = 0;
    for (int i = 0; i < n - 1; i++) {
        if (!strcmp(names[i], "response.output_item.added") && n_added < 64) {
            CHECK_EQ_INT(srv_int(data[i], "output_index"), n_added);
            added[n_added++] = srv_str(data[i], "item.id");
        }
        if (!strcmp(names[i], "response.output_item.done") && n_closed < 64) {
            CHECK_EQ_INT(srv_int(data[i], "output_index"), n_closed);
            closed[n_closed++] = srv_str(data[i], "item.id");
        }
    }
    struct json_object *output = srv_at(data[n - 1], "response.output");
    CHECK(output != NULL);
    int n_out = (int)json_object_array_length(output);
    CHECK_MSG(n_out == n_added, "%d items in the final output, %d announced: %s", n_out, n_added,
              json_object_to_json_string(output));
    CHECK_EQ_INT(n_closed, n_added);
    for (int k = 0; k < n_out; k++) {
        const char *id = srv_str(json_object_array_get_idx(output, (size_t)k), "id");
        CHECK_STR_EQ(id, added[k]);
        CHECK_STR_EQ(id, closed[k]);
    }
    const char *last = test_strdup(names[n - 1]);
    for (int i = 0; i < n; i++) json_object_put(data[i]);
    return last;
}

TEST(serve_stream, responses_streams_announce_every_item_of_the_final_output)
{
    const char *tools = "\"tools\": [{\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"type\": "
                        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}}}], ";
    const char *lines[] = { srv_reply_line("a long train of thought</think>Answer.", NULL),
                            srv_reply_line("brief</think>Answer.", NULL), srv_reply_line(srv_weather_call(), NULL),
                            srv_reply_line("", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    char *body;
    /* the limit ends it in the reasoning: the final output has the empty
     * message all the same */
    CHECK_EQ_INT(srv_http(&s, "POST", RESP, request(RESP, true, 4), NULL, &body), 200);
    CHECK_STR_EQ(check_announced(body), "response.incomplete");
    CHECK_EQ_INT(srv_http(&s, "POST", RESP, request(RESP, true, 0), NULL, &body), 200);
    CHECK_STR_EQ(check_announced(body), "response.completed");
    CHECK_EQ_INT(srv_http(&s, "POST", RESP,
                          test_printf("{%s\"stream\": true, \"input\": \"weather in Paris?\"}", tools), NULL, &body),
                 200);
    CHECK_STR_EQ(check_announced(body), "response.completed");
    CHECK_CONTAINS(body, "\"type\":\"function_call\"");
    /* nothing at all */
    CHECK_EQ_INT(srv_http(&s, "POST", RESP, request(RESP, true, 0), NULL, &body), 200);
    CHECK_STR_EQ(check_announced(body), "response.completed");
    CHECK_EQ_INT(srv_stop(&s), 0);
}
