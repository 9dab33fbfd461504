/* `ds4cl serve` at the HTTP level, against clients that misbehave: request
 * heads trickled in to hold connections, more connections than the limit,
 * bytes that are not HTTP, and the request log of what was turned away.
 * Raw sockets on loopback, a handful of connections, a few seconds each. */
#include <errno.h>
#include <json-c/json.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/serve_util.h"

#define N_TRICKLE 4

/* Four connections each send a header line every 400 ms, never idle for
 * long, never finishing their head: each is answered 408 and closed once
 * the head has taken --timeout (2 s), and then the server serves others. */
TEST(serve_http, a_trickled_request_head_is_cut_at_the_deadline)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--max-connections 4 --timeout 2");
    int fd[N_TRICKLE];
    char *got[N_TRICKLE];
    double closed_at[N_TRICKLE];
    for (int i = 0; i < N_TRICKLE; i++) {
        fd[i] = srv_connect(&s);
        const char *first = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n";
        CHECK(srv_send_all(fd[i], first, strlen(first)));
        got[i] = test_strdup("");
        closed_at[i] = -1;
    }
    double t0 = test_now_ms(), next = t0 + 400;
    int open = N_TRICKLE, line = 0;
    while (open && test_now_ms() - t0 < 8000) {
        if (test_now_ms() >= next) {
            char *h = test_printf("X-Slow-%d: y\r\n", line++);
            for (int i = 0; i < N_TRICKLE; i++)
                if (closed_at[i] < 0) send(fd[i], h, strlen(h), MSG_NOSIGNAL);
            next += 400;
        }
        struct pollfd p[N_TRICKLE];
        for (int i = 0; i < N_TRICKLE; i++)
            p[i] = (struct pollfd){ .fd = closed_at[i] < 0 ? fd[i] : -1, .events = POLLIN };
        poll(p, N_TRICKLE, 50);
        for (int i = 0; i < N_TRICKLE; i++) {
            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[2048];
            ssize_t k = recv(fd[i], buf, sizeof buf - 1, 0);
            if (k > 0) {
                buf[k] = 0;
                got[i] = test_printf("%s%s", got[i], buf);
                continue;
            }
            closed_at[i] = test_now_ms() - t0;
            open--;
        }
    }
    for (int i = 0; i < N_TRICKLE; i++) {
        close(fd[i]);
        CHECK_MSG(closed_at[i] >= 0, "connection %d was still open after %.0f ms of trickling", i,
                  test_now_ms() - t0);
        /* the deadline is --timeout after the connection, not after the last byte */
        CHECK_MSG(closed_at[i] < 4500, "connection %d was closed after %.0f ms", i, closed_at[i]);
        srv_check_raw_error(got[i], 408, false, NULL);
    }
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, "--max-time 5", &body), 200);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Over --max-connections, a connection is answered 503 with Retry-After
 * in the shape of the API its request line names, not reset. */
TEST(serve_http, connections_over_the_limit_get_503_with_retry_after)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--max-connections 2 --timeout 10");
    /* two requests whose bodies are still coming hold the slots */
    int hold[2];
    for (int i = 0; i < 2; i++) {
        hold[i] = srv_connect(&s);
        const char *part = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{";
        CHECK(srv_send_all(hold[i], part, strlen(part)));
    }
    usleep(200000);
    bool closed;
    const char *msg = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 2\r\n\r\n{}";
    char *reply = srv_raw(&s, msg, strlen(msg), 5000, &closed);
    CHECK_MSG(closed, "the refused connection was not closed");
    srv_check_raw_error(reply, 503, true, "Retry-After: ");
    const char *chat = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
    reply = srv_raw(&s, chat, strlen(chat), 5000, &closed);
    srv_check_raw_error(reply, 503, false, "Retry-After: ");
    /* a client that sends nothing is answered too, in the OpenAI shape */
    int quiet = srv_connect(&s);
    reply = srv_read_reply(quiet, 5000, &closed);
    close(quiet);
    srv_check_raw_error(reply, 503, false, "Retry-After: ");
    /* the slots come back when their connections go */
    for (int i = 0; i < 2; i++) close(hold[i]);
    char *body;
    int status = 0;
    for (double t0 = test_now_ms(); status != 200 && test_now_ms() - t0 < 5000; usleep(100000))
        status = srv_http(&s, "GET", "/v1/models", NULL, "--max-time 5", &body);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    CHECK_CONTAINS(log, "503");
}

/* At the limit, a head that has been trickling for a while gives way to a
 * new connection (408 to the trickler), so slow heads cannot keep out
 * clients that send theirs at once. */
TEST(serve_http, a_trickled_head_gives_way_at_the_limit)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--max-connections 2 --timeout 30");
    int slow[2];
    for (int i = 0; i < 2; i++) {
        slow[i] = srv_connect(&s);
        const char *part = "POST /v1/messages HTTP/1.1\r\nHost: x\r\n";
        CHECK(srv_send_all(slow[i], part, strlen(part)));
    }
    usleep(2500000);
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, "--max-time 5", &body), 200);
    int gave_way = 0;
    for (int i = 0; i < 2; i++) {
        bool closed;
        char *reply = srv_read_reply(slow[i], gave_way ? 300 : 3000, &closed);
        close(slow[i]);
        if (!closed) continue;
        srv_check_raw_error(reply, 408, true, NULL);
        gave_way++;
    }
    CHECK_EQ_INT(gave_way, 1);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Bytes that are not a valid request get one JSON error, at once (well
 * before --timeout), with one status line, and the connection closes. */
TEST(serve_http, protocol_errors_get_one_json_error_promptly)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--timeout 10 --max-body 4096");
    char *big = malloc((2u << 20) + 1);
    CHECK(big != NULL);
    memset(big, 'a', 2u << 20);
    big[2u << 20] = 0;
    const struct {
        const char *what, *bytes;
        int status;
        bool anthropic;
    } cases[] = {
        { "a garbage request line", "GARBAGE\r\n\r\n", 400, false },
        { "binary bytes", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, false },
        { "a request line without a version", "GET /v1/models\r\n\r\n", 400, false },
        { "a negative Content-Length",
          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400, false },
        { "a Content-Length past 2^64",
          "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413, true },
        { "blanks after a Content-Length",
          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2 \r\n\r\n{}", 400, false },
        { "a chunk size with a blank",
          "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\n{}\r\n0\r\n\r\n", 400,
          true },
        { "a header line without a colon", "GET /v1/models HTTP/1.1\r\nHost: x\r\nbogus\r\n\r\n", 400, false },
        { "a bad chunk size",
          "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", 400,
          true },
        { "a chunk size of 2^64-1",
          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
          "ffffffffffffffff\r\nabc",
          413, false },
        { "an unknown transfer coding",
          "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501, false },
        { "a 2 MiB header",
          test_printf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", big), 431, true },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bool closed;
        double t0 = test_now_ms();
        char *reply = srv_raw(&s, cases[i].bytes, strlen(cases[i].bytes), 8000, &closed);
        double took = test_now_ms() - t0;
        CHECK_MSG(closed && took < 5000, "%s: the connection was %s after %.0f ms: '%.300s'", cases[i].what,
                  closed ? "closed" : "still open", took, reply);
        CHECK_MSG(!strncmp(reply, test_printf("HTTP/1.1 %d ", cases[i].status), 13), "%s: not %d: '%.300s'",
                  cases[i].what, cases[i].status, reply);
        srv_check_raw_error(reply, cases[i].status, cases[i].anthropic, "Connection: close");
    }
    free(big);
    /* valid requests still pass, a chunked one included */
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, NULL, &body), 200);
    const char *count = "POST /v1/messages/count_tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                        "Content-Type: application/json\r\n\r\n"
                        "c\r\n{\"model\":\"m\"\r\n"
                        "2d\r\n,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\r\n0\r\n\r\n";
    bool closed;
    char *reply = srv_raw(&s, count, strlen(count), 5000, &closed);
    CHECK_MSG(!strncmp(reply, "HTTP/1.1 200 ", 13), "a chunked request was not served: '%.300s'", reply);
    CHECK_CONTAINS(reply, "\"input_tokens\"");
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Every request turned away leaves a line in the request log, with its
 * status and why. */
TEST(serve_http, rejected_requests_are_in_the_request_log)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--api-key k --max-body 1024");
    const char *key = "-H 'Authorization: Bearer k'";
    char *body;
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/models", NULL, NULL, &body), 401);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/chat/completions", "{bad", key, &body), 400);
    char *huge = test_printf("{\"x\":\"%01500d\"}", 0);
    CHECK_EQ_INT(srv_http(&s, "POST", "/v1/messages", huge, key, &body), 413);
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/nowhere", NULL, key, &body), 404);
    CHECK_EQ_INT(srv_http(&s, "GET", "/v1/chat/completions", NULL, key, &body), 405);
    bool closed;
    srv_raw(&s, "GARBAGE\r\n\r\n", 11, 5000, &closed);
    CHECK_EQ_INT(srv_stop(&s), 0);
    char *log = test_read_file(s.log, NULL);
    const char *want[] = { "GET /v1/models: 401 ",   "POST /v1/chat/completions: 400 ", "POST /v1/messages: 413 ",
                           "GET /v1/nowhere: 404 ", "GET /v1/chat/completions: 405 ", ": 400 malformed request line" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) CHECK_CONTAINS(log, want[i]);
    CHECK_CONTAINS(log, "wrong API key");
    CHECK_CONTAINS(log, "larger than 1024 bytes");
}

/* A sound head in pieces, cut after each CR (its LF still to come), is
 * served like one sent whole. */
TEST(serve_http, a_head_in_pieces_is_served)
{
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--timeout 10");
    const char *req = "POST /v1/messages/count_tokens HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      "Content-Length: 57\r\n\r\n"
                      "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    int fd = srv_connect(&s);
    for (const char *p = req; *p;) {
        const char *cr = strchr(p, '\r');
        size_t n = cr ? (size_t)(cr - p) + 1 : strlen(p);
        CHECK(srv_send_all(fd, p, n));
        p += n;
        usleep(100000);
    }
    bool closed;
    char *reply = srv_read_reply(fd, 5000, &closed);
    close(fd);
    CHECK_MSG(!strncmp(reply, "HTTP/1.1 200 ", 13), "not served: '%.300s'", reply);
    CHECK_CONTAINS(reply, "\"input_tokens\"");
    CHECK_EQ_INT(srv_stop(&s), 0);
}
