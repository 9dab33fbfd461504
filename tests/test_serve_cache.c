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
