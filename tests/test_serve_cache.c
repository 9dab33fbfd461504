/* The snapshot cache of `ds4cl serve` under agent traffic: what a server
 * killed mid-save leaves in the cache directory, the same prompt sent again
 * after another conversation took the session (and after a restart), and
 * the replayed agent session of ds4cl-bench. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "tests/serve_util.h"
#include "tests/test.h"

static bool exists(const char *path) { return access(path, F_OK) == 0; }

TEST(serve_cache, leftover_temporary_files_of_a_killed_save_go_at_start)
{
    const char *dir = test_tmp_path("cache");
    CHECK_EQ_INT(base_mkdir_p(dir, 0700), 0);
    long dead = test_dead_pid();
    /* what file_write_atomic leaves when its process is killed mid-save */
    const char *tok = test_printf("%s/.00c0ffee00c0ffee.tok.tmp.%ld.AbC123", dir, dead);
    const char *snap = test_printf("%s/.00c0ffee00c0ffee.snap.tmp.%ld.zZ9yX8", dir, dead);
    /* a writer that still runs (this process) keeps its file */
    const char *live = test_printf("%s/.1111222233334444.snap.tmp.%ld.qwerty", dir, (long)getpid());
    test_write_file(tok, "partial", 7);
    test_write_file(snap, "partial", 7);
    test_write_file(live, "partial", 7);
    const char *lines[] = { srv_reply_line("a</think>Hi.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), NULL);
    CHECK_MSG(!exists(tok), "%s survived the start", tok);
    CHECK_MSG(!exists(snap), "%s survived the start", snap);
    CHECK(exists(live));
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* A chat request of one user turn, with a system prompt long enough that
 * losing it shows. */
static const char *one_turn(const char *user)
{
    return test_printf("{\"messages\": [{\"role\": \"system\", \"content\": \"You are a careful assistant. Answer "
                       "briefly, cite files by path, and never invent an API that the code does not have.\"}, "
                       "{\"role\": \"user\", \"content\": \"%s\"}]}",
                       user);
}

static void ask(const srv_server *s, const char *json, long *prompt, long *prefilled, long *cached, char **content)
{
    char *body;
    CHECK_EQ_INT(srv_http(s, "POST", "/v1/chat/completions", json, NULL, &body), 200);
    struct json_object *o = srv_parse(body);
    *prompt = srv_int(o, "usage.prompt_tokens");
    *prefilled = srv_int(o, "usage.prefilled_tokens");
    *cached = srv_int(o, "usage.prompt_tokens_details.cached_tokens");
    if (content) *content = test_strdup(srv_str(o, "choices.0.message.content"));
    json_object_put(o);
}

TEST(serve_cache, the_same_prompt_again_comes_from_the_cache_after_another_conversation_and_a_restart)
{
    const char *lines[] = { srv_reply_line("p</think>The answer to P, which runs on for a while.", NULL),
                            srv_reply_line("q</think>The answer to Q.", NULL),
                            srv_reply_line("r</think>Not this one.", NULL), NULL };
    const char *sc = srv_script(lines);
    srv_server s;
    srv_start(&s, sc, "--parallel 1");
    const char *P = one_turn("Where is the snapshot cache written, and when?");
    const char *Q = "{\"messages\": [{\"role\": \"user\", \"content\": \"Something else entirely.\"}]}";
    long p1, f1, c1, p2, f2, c2, p3, f3, c3;
    char *a1, *a3;
    ask(&s, P, &p1, &f1, &c1, &a1);
    CHECK_EQ_INT(f1, p1);
    ask(&s, Q, &p2, &f2, &c2, NULL);
    /* Q took the only session (it shares no more than BOS with P): P's
     * state is on disk now */
    CHECK(f2 >= p2 - 1);
    ask(&s, P, &p3, &f3, &c3, &a3);
    CHECK_EQ_INT(p3, p1);
    CHECK_MSG(c3 == p3 && f3 == 0, "P again: %ld of %ld tokens cached, %ld read", c3, p3, f3);
    /* the state at the end of P is the one its first reply came from */
    CHECK_STR_EQ(a3, a1);
    CHECK_EQ_INT(srv_stop(&s), 0);

    srv_server s2;
    srv_start(&s2, sc, "--parallel 1");
    long p4, f4, c4;
    ask(&s2, P, &p4, &f4, &c4, NULL);
    CHECK_MSG(c4 == p4 && f4 == 0, "P after a restart: %ld of %ld tokens cached, %ld read", c4, p4, f4);
    CHECK_EQ_INT(srv_stop(&s2), 0);
}

TEST(serve_cache, the_same_prompt_again_comes_from_the_cache_on_the_real_engine)
{
    /* the generated model's forward pass: the restored state must give
     * the very logits the prompt gave, so greedy decoding repeats itself */
    const char *lines[] = { NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--engine cpu --threads 1 --parallel 1 --temp 0");
    const char *P = "{\"max_tokens\": 8, \"messages\": [{\"role\": \"system\", \"content\": \"You are terse.\"}, "
                    "{\"role\": \"user\", \"content\": \"Name the file that holds the cache.\"}]}";
    const char *Q = "{\"max_tokens\": 8, \"messages\": [{\"role\": \"user\", \"content\": \"Other things.\"}]}";
    long p1, f1, c1, p2, f2, c2, p3, f3, c3;
    char *a1, *a3;
    ask(&s, P, &p1, &f1, &c1, &a1);
    ask(&s, Q, &p2, &f2, &c2, NULL);
    ask(&s, P, &p3, &f3, &c3, &a3);
    CHECK_MSG(c3 == p3 && f3 == 0, "P again: %ld of %ld tokens cached, %ld read", c3, p3, f3);
    CHECK_STR_EQ(a3, a1);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

TEST(serve_cache, a_new_conversation_with_a_known_system_prompt_starts_from_its_cached_state)
{
    const char *lines[] = { srv_reply_line("a</think>A.", NULL), srv_reply_line("q</think>Q.", NULL),
                            srv_reply_line("b</think>B.", NULL), NULL };
    srv_server s;
    srv_start(&s, srv_script(lines), "--parallel 1");
    /* a sub-agent's long instructions, then each one's own task */
    strbuf sys = { 0 };
    for (int i = 0; i < 40; i++) sb_printf(&sys, "Rule %d: read the file before changing it, and say which. ", i);
    const char *A = test_printf("{\"messages\": [{\"role\": \"system\", \"content\": \"%s\"}, {\"role\": \"user\", "
                                "\"content\": \"Find where the cache is written.\"}]}",
                                sys.s);
    const char *B = test_printf("{\"messages\": [{\"role\": \"system\", \"content\": \"%s\"}, {\"role\": \"user\", "
                                "\"content\": \"List the tests of the server.\"}]}",
                                sys.s);
    sb_free(&sys);
    const char *Q = "{\"messages\": [{\"role\": \"user\", \"content\": \"Something else.\"}]}";
    long pa, fa, ca, pq, fq, cq, pb, fb, cb;
    ask(&s, A, &pa, &fa, &ca, NULL);
    ask(&s, Q, &pq, &fq, &cq, NULL);
    ask(&s, B, &pb, &fb, &cb, NULL);
    /* B differs from A in its user turn only: a few dozen tokens read */
    CHECK_MSG(pb > 1000 && fb < 40 && cb + fb == pb, "B: %ld of %ld tokens cached, %ld read", cb, pb, fb);
    CHECK_EQ_INT(srv_stop(&s), 0);
}

/* Runs the replay bench with the given flags and checks its CSV: every
 * request row's prefilled and cached tokens add up to its prompt (counted
 * apart by count_tokens), the summary rows sum the request rows, and the
 * traffic has the conversations and turns it says. Returns how many runs
 * (--parallel × --header) it printed; *main_read gets the prompt tokens of
 * the main conversation's first request in the first run, *main_cached the
 * cached tokens of its second. */
static int check_replay(const char *flags, int turns, int agents, int sub_turns, long *main_read, long *main_cached)
{
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --replay-bench -m '%s' %s", test_bindir(), srv_tiny_model(), flags);
    CHECK_MSG(rc == 0, "%s", out);
    const char *head = "parallel,header,clients,batch,request,conversation,turn,prompt_tokens,prefilled_tokens,"
                       "cached_tokens,cached_pct,output_tokens,seconds\n";
    /* the bench's summary of each run goes to stderr, among the CSV's lines */
    while (!strncmp(out, "ds4cl-bench: ", 13) && strchr(out, '\n')) out = strchr(out, '\n') + 1;
    CHECK_MSG(!strncmp(out, head, strlen(head)), "%s", out);
    int runs = 0, rows = 0, main_turns = 0, agent_rows = 0, one_shots = 0;
    long sum[2][5] = { { 0 } };
    for (char *line = strtok(out + strlen(head), "\n"); line; line = strtok(NULL, "\n")) {
        if (!strncmp(line, "ds4cl-bench: ", 13)) continue;
        char header[16], clients[16], batch[16], request[16], conversation[40];
        long parallel, turn, prompt, prefilled, cached, output;
        double pct, seconds;
        CHECK_MSG(sscanf(line, "%ld,%15[^,],%15[^,],%15[^,],%15[^,],%39[^,],%ld,%ld,%ld,%ld,%lf,%ld,%lf", &parallel,
                         header, clients, batch, request, conversation, &turn, &prompt, &prefilled, &cached, &pct,
                         &output, &seconds) == 13,
                  "a bad row: %s", line);
        CHECK_MSG(output >= 0 && seconds >= 0, "a bad row: %s", line);
        if (!strcmp(request, "all") || !strcmp(request, "after_first")) {
            int k = !strcmp(request, "after_first");
            /* turn: how many requests the row sums */
            CHECK_MSG(turn == sum[k][0] && prompt == sum[k][1] && prefilled == sum[k][2] && cached == sum[k][3] &&
                          output == sum[k][4],
                      "%s does not sum the rows above it", line);
            CHECK_NEAR(pct, 100.0 * (double)cached / (double)prompt, 0.06);
            if (k) {
                CHECK_EQ_INT(rows, turns + agents * sub_turns + 1 + (turns + 3) / 6);
                CHECK_EQ_INT(main_turns, turns);
                CHECK_EQ_INT(agent_rows, agents * sub_turns);
                memset(sum, 0, sizeof sum);
                rows = main_turns = agent_rows = one_shots = 0;
                runs++;
            }
            continue;
        }
        CHECK_EQ_INT(atol(request), rows + 1);
        CHECK_MSG(prompt > 0 && prefilled >= 0 && cached >= 0 && prefilled + cached == prompt,
                  "prefilled + cached is not the prompt: %s", line);
        if (!strcmp(conversation, "main")) {
            CHECK_EQ_INT(turn, ++main_turns);
            if (!runs && turn == 1) *main_read = prompt;
            if (!runs && turn == 2) *main_cached = cached;
        }
        else if (!strncmp(conversation, "agent", 5)) agent_rows++;
        else CHECK_MSG(turn == 1 && ++one_shots, "a one-shot request of more than one turn: %s", line);
        rows++;
        for (int k = 0; k < 2; k++) {
            if (k && turn < 2) continue;
            sum[k][0]++;
            sum[k][1] += prompt;
            sum[k][2] += prefilled;
            sum[k][3] += cached;
            sum[k][4] += output;
        }
    }
    return runs;
}

TEST(serve_cache, replay_bench_rows_add_up_on_the_scripted_engine)
{
    long read, cached;
    CHECK_EQ_INT(check_replay("--turns 8 --subagents 3 --sub-turns 2 --system-bytes 3000 --result-bytes 400 "
                              "--parallel 1,3 --header changing,constant,none --ctx 32768",
                              8, 3, 2, &read, &cached),
                 6);
}

TEST(serve_cache, replay_bench_rows_add_up_on_the_real_engine)
{
    /* the counts of the real forward pass: short rewinds, snapshots that go
     * on from their end only */
    long read = 0, cached = 0;
    CHECK_EQ_INT(check_replay("--engine cpu --threads 1 --turns 2 --subagents 1 --sub-turns 2 --system-bytes 300 "
                              "--result-bytes 100 --max-tokens 16 --parallel 1 --header constant --ctx 8192",
                              2, 1, 2, &read, &cached),
                 1);
    /* the title request and the sub-agent took the only session between
     * the main conversation's first two requests: the second goes on from
     * the first one's saved state */
    CHECK_MSG(cached >= read, "main's second request: %ld cached, its first prompt was %ld", cached, read);
}

/* The client's conversations sent as an agent CLI sends them (sub-agents
 * side by side, one-shot requests beside the main conversation), to a
 * server whose sessions step together and to one whose sessions step
 * alone: every request answered and counted, whatever the order. */
TEST(serve_cache, replay_bench_clients_together_on_the_real_engine)
{
    long read = 0, cached = 0;
    CHECK_EQ_INT(check_replay("--engine cpu --threads 1 --turns 3 --subagents 3 --sub-turns 2 --system-bytes 300 "
                              "--result-bytes 100 --max-tokens 16 --parallel 3 --header constant --clients together "
                              "--batch on,off --ctx 8192",
                              3, 3, 2, &read, &cached),
                 2);
}

TEST(serve_cache, replay_bench_refuses_an_unknown_list_item)
{
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --replay-bench -m '%s' --clients serial,sideways", test_bindir(),
                       srv_tiny_model());
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "usage");
}
