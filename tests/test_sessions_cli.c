/* Sessions through the real `ds4cl -p` binary over the script engine:
 * --session, --resume, --continue, the stream-json session_id, what a
 * resumed run reads, a session held by another process, and runs killed
 * with SIGKILL at random moments that must never lose a completed turn
 * nor leave a saved state that does not load. */
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

/* ds4cl -p in dir over script with flags; stderr dropped unless asked. */
static int run_in(char **out, const char *dir, const char *script, const char *flags)
{
    return test_runf(out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' %s", dir, test_bindir(), agent_test_model(),
                     script, flags);
}

/* Parsed results, released by results_free at the end of a test. */
static struct json_object *g_results[16];
static int g_n_results;

static void results_free(void)
{
    while (g_n_results > 0) json_object_put(g_results[--g_n_results]);
}

/* The "result" object of stream-json output. */
static struct json_object *result_of(const char *out)
{
    const char *p = strstr(out, "{\"type\":\"result\"");
    CHECK_MSG(p != NULL, "no result in:\n%s", out);
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char *line = test_alloc(len + 1);
    memcpy(line, p, len);
    struct json_object *o = json_tokener_parse(line);
    CHECK(o != NULL && g_n_results < 16);
    g_results[g_n_results++] = o;
    return o;
}

static const char *field(struct json_object *o, const char *k)
{
    struct json_object *v;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_string(v) : "";
}

static int64_t num(struct json_object *o, const char *k)
{
    struct json_object *v;
    return json_object_object_get_ex(o, k, &v) ? json_object_get_int64(v) : -1;
}

static size_t user_turn_tokens(const char *text)
{
    ds4_error err;
    ds4_tokenizer *t = ds4_tokenizer_open(agent_test_model(), &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    ds4_tokens v = { 0 };
    ds4_chat_user(t, &v, text);
    size_t n = v.n;
    ds4_tokens_free(&v);
    ds4_tokenizer_free(t);
    return n;
}

/* How many system prompt states the cache holds. */
static int cached_prompts(void)
{
    char cache[4096];
    CHECK(session_sysprompt_cache_dir(cache, sizeof cache) != NULL);
    char *out;
    CHECK_EQ_INT(test_runf(&out, "ls -A '%s' | grep -c '[.]kv$' || true", cache), 0);
    return atoi(out);
}

TEST(sessions_cli, no_prompt_cache_reads_the_system_prompt_and_writes_nothing)
{
    const char *lines[] = { script_line("a</think>One.", NULL), script_line("b</think>Two.", NULL),
                            script_line("c</think>Three.", NULL), NULL };
    const char *script = write_script(lines);
    char *out;
    for (int i = 0; i < 2; i++) {
        int rc = run_in(&out, test_tmpdir(), script, "--no-prompt-cache -p 'hello' --output-format stream-json 2>&1");
        CHECK_MSG(rc == 0, "%s", out);
        CHECK(num(result_of(out), "prefilled_tokens") > 100);
        CHECK_EQ_INT(cached_prompts(), 0);
    }
    /* with the cache: written, and then not read while it is off */
    int rc = run_in(&out, test_tmpdir(), script, "-p 'hello' --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_EQ_INT(cached_prompts(), 1);
    rc = run_in(&out, test_tmpdir(), script, "--no-prompt-cache -p 'hello' --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    CHECK(num(result_of(out), "prefilled_tokens") > 100);
    results_free();
}

TEST(sessions_cli, resume_reads_only_the_new_turn)
{
    const char *lines[] = {
        script_line("a</think>Remembered: blue.", NULL),
        script_line("b</think>It was blue.", "\"expect\": \"what colour\""),
        NULL,
    };
    const char *script = write_script(lines);
    char *out;
    int rc = run_in(&out, test_tmpdir(), script, "--ctx 12288 -p 'remember blue' --session s1 --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    struct json_object *r = result_of(out);
    CHECK_STR_EQ(field(r, "session_id"), "s1");
    CHECK_CONTAINS(out, "{\"type\":\"init\",\"session_id\":\"s1\"");
    int64_t first = num(r, "prefilled_tokens");
    CHECK(first > 100);

    /* no --ctx: the session's own context size */
    rc = run_in(&out, test_tmpdir(), script, "-p 'what colour was it' --resume s1 --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    r = result_of(out);
    CHECK_STR_EQ(field(r, "text"), "It was blue.");
    CHECK_STR_EQ(field(r, "session_id"), "s1");
    CHECK_EQ_INT(num(r, "ctx_size"), 12288);
    /* the previous reply's EOS, the user turn, the assistant prefix */
    CHECK_EQ_INT(num(r, "prefilled_tokens"), 1 + user_turn_tokens("what colour was it") + 2);
    CHECK(strstr(out, "\"level\":\"warning\"") == NULL);
    CHECK_STR_EQ(journal_users("s1"), "remember blue|what colour was it");

    /* a new session reads only the workspace's part of the system prompt
     * (the rest is cached) */
    rc = run_in(&out, test_tmpdir(), script, "--ctx 12288 -p 'fresh start' --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    r = result_of(out);
    const char *id = field(r, "session_id");
    CHECK(session_id_valid(id) && strcmp(id, "s1"));
    CHECK_STR_EQ(journal_users(id), "fresh start");
    /* the user turn (with the session-start note of a fresh session) and
     * the assistant prefix */
    journal_scan j;
    read_journal(id, &j);
    CHECK(j.n >= 2 && j.recs[0].kind == AGENT_TURN_SYSTEM && j.recs[1].kind == AGENT_TURN_USER);
    CHECK(j.recs[1].n_tokens > user_turn_tokens("fresh start"));
    int64_t ws_part = num(r, "prefilled_tokens") - (int64_t)(j.recs[1].n_tokens + 2);
    CHECK_MSG(ws_part > 0 && ws_part < (int64_t)j.recs[0].n_tokens / 10, "%lld of a %zu-token system prompt read",
              (long long)ws_part, j.recs[0].n_tokens);
    size_t fresh_user = j.recs[1].n_tokens;
    journal_scan_free(&j);

    /* nor with another context size (--ctx auto moves with free memory) */
    rc = run_in(&out, test_tmpdir(), script, "--ctx 20480 -p 'fresh start' --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    r = result_of(out);
    CHECK_EQ_INT(num(r, "ctx_size"), 20480);
    CHECK_EQ_INT(num(r, "prefilled_tokens"), fresh_user + 2 + ws_part);

    /* text mode names the session on stderr */
    rc = run_in(&out, test_tmpdir(), script, "--ctx 12288 -p 'in text mode'");
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_CONTAINS(out, "continue it with --resume ");
    results_free();
}

/* The cached system prompt serves every project: a first run in another
 * workspace (with its own AGENTS.md) reads only that workspace's part of
 * the prompt, a small share of it. */
TEST(sessions_cli, a_new_workspace_starts_from_the_cached_system_prompt)
{
    const char *lines[] = { script_line("a</think>Fine.", NULL), NULL };
    const char *script = write_script(lines);
    const char *w1 = test_tmp_path("project-one"), *w2 = test_tmp_path("another/project");
    base_mkdir_p(w1, 0700);
    base_mkdir_p(w2, 0700);
    test_write_file(test_tmp_path("another/project/AGENTS.md"), "Use tabs.\n", 10);
    char *out;
    CHECK_EQ_INT(run_in(&out, w1, script, "--ctx 12288 -p 'hello' --output-format stream-json 2>&1"), 0);
    struct json_object *r = result_of(out);
    int64_t whole = num(r, "prefilled_tokens");
    CHECK(whole > 1000);
    CHECK_EQ_INT(run_in(&out, w2, script, "--ctx 12288 -p 'hello' --output-format stream-json 2>&1"), 0);
    r = result_of(out);
    CHECK_STR_EQ(field(r, "text"), "Fine.");
    int64_t second = num(r, "prefilled_tokens");
    CHECK_MSG(second > 0 && second < whole / 10, "the second workspace read %lld tokens, the first %lld",
              (long long)second, (long long)whole);
    results_free();
}

TEST(sessions_cli, resume_without_id_continue_and_errors)
{
    const char *lines[] = { script_line("a</think>Fine.", NULL), NULL };
    const char *script = write_script(lines);
    const char *w1 = test_tmp_path("w1"), *w2 = test_tmp_path("w2");
    base_mkdir_p(w1, 0700);
    base_mkdir_p(w2, 0700);
    char *out;
    CHECK_EQ_INT(run_in(&out, w1, script, "-p 'in w1' --session one 2>&1"), 0);
    CHECK_EQ_INT(run_in(&out, w2, script, "-p 'in w2' --session two 2>&1"), 0);

    /* -p --resume without an ID: refused with the list */
    int rc = run_in(&out, w1, script, "-p x --resume 2>&1");
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "--resume needs a session ID");
    CHECK_CONTAINS(out, "TOKENS  TITLE\n"); /* the heads of the columns */
    CHECK_CONTAINS(out, "DIRECTORY\n");
    CHECK_CONTAINS(out, "one");
    CHECK_CONTAINS(out, "in w2");

    /* --continue: the latest of this directory */
    rc = run_in(&out, w1, script, "-p 'again in w1' --continue --output-format stream-json 2>&1");
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_STR_EQ(field(result_of(out), "session_id"), "one");
    CHECK_STR_EQ(journal_users("one"), "in w1|again in w1");
    /* none here yet: a new one, said so */
    const char *w3 = test_tmp_path("w3");
    base_mkdir_p(w3, 0700);
    rc = run_in(&out, w3, script, "-p 'first in w3' --continue 2>&1");
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "no earlier session in this directory");

    rc = run_in(&out, w1, script, "-p x --resume nosuch 2>&1");
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no session \"nosuch\"");
    rc = run_in(&out, w1, script, "-p x --session 'bad/id' 2>&1");
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "not a session ID");
    rc = run_in(&out, w1, script, "-p x --session one --continue 2>&1");
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "exclude each other");

    /* nowhere to keep sessions (no home; a data directory that cannot
     * take one): refused with exit 5 before the model runs, as a full
     * disk ends a turn, and the stream still ends with a result */
    const char *unsaved[] = { "env -u XDG_DATA_HOME -u XDG_CACHE_HOME HOME=",
                              test_printf("XDG_DATA_HOME='%s/w1/file'", test_tmpdir()) };
    test_write_file(test_tmp_path("w1/file"), "x", 1);
    for (int k = 0; k < 2; k++) {
        rc = test_runf(&out, "cd '%s' && %s '%s/ds4cl' -m '%s' --engine 'script:%s' -p 'no home' 2>&1", w1, unsaved[k],
                       test_bindir(), agent_test_model(), script);
        CHECK_MSG(rc == 5, "exit %d: %s", rc, out);
        CHECK_CONTAINS(out, "cannot be saved");
        CHECK(strstr(out, "Fine.") == NULL);
        CHECK(strstr(out, "continue it with") == NULL);
        rc = test_runf(&out, "cd '%s' && %s '%s/ds4cl' -m '%s' --engine 'script:%s' -p 'no home' "
                             "--output-format stream-json 2>/dev/null",
                       w1, unsaved[k], test_bindir(), agent_test_model(), script);
        CHECK_MSG(rc == 5, "exit %d: %s", rc, out);
        CHECK_CONTAINS(out, "\"stop_reason\":\"not saved\"");
        CHECK_CONTAINS(out, "\"exit_code\":5");
    }

    /* a session open in another process */
    ds4_error err = { "" };
    session *held = session_open("two", &err);
    CHECK_MSG(held != NULL, "%s", err.msg);
    rc = run_in(&out, w2, script, "-p x --resume two 2>&1");
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "open in another ds4cl process");
    /* --continue then starts a new one instead */
    rc = run_in(&out, w2, script, "-p y --continue 2>&1");
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "open in another ds4cl process; this is a new session");
    session_close(held);
    CHECK_STR_EQ(journal_users("two"), "in w2");
    results_free();
}

/* ---- crashes --------------------------------------------------------------------------- */

typedef struct {
    bool done;          /* the result object arrived: the turn completed */
    int tool_results;   /* tool results seen */
    bool started;       /* the init object arrived */
} run_seen;

static run_seen scan_output(const char *out)
{
    run_seen s = { 0 };
    s.started = strstr(out, "\"type\":\"init\"") != NULL;
    for (const char *p = out; (p = strstr(p, "\"type\":\"tool_result\"")); p++) s.tool_results++;
    const char *r = strstr(out, "\"type\":\"result\"");
    s.done = r && strstr(r, "\"stop_reason\":\"done\"") && strchr(r, '\n');
    return s;
}

TEST(sessions_crash, sigkill_at_random_moments_never_loses_a_completed_turn)
{
    /* Each run is one turn: a tool call (list: it only reads), then an
     * answer; tokens take a millisecond. */
    base_mkdir_p(test_tmp_path("ws"), 0700);
    test_write_file(test_tmp_path("ws/a.txt"), "a", 1);
    strbuf sc = { 0 };
    for (int i = 0; i < 200; i++) {
        sb_printf(&sc, "%s\n", script_line(test_printf("step %d</think>Calling.%s", i, dsml_block("list", "path", ".", NULL)),
                                           "\"delay_ms\": 1"));
        sb_printf(&sc, "%s\n", script_line(test_printf("done %d</think>Turn finished.", i), "\"delay_ms\": 1"));
    }
    const char *script = test_tmp_path("crash.jsonl");
    test_write_file(script, sc.s, sc.len);
    sb_free(&sc);
    const char *cmd_fmt = "cd '%s' && exec '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 65536 --seed 1 -p 'turn %d' "
                          "--session crash --output-format stream-json";
    const char *ws = test_tmp_path("ws");

    /* how long an undisturbed run takes */
    child_proc c;
    double t0 = test_now_ms();
    child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, 0));
    int rc = child_finish(&c, 0);
    double span = test_now_ms() - t0;
    CHECK_MSG(rc == 0, "exit %d: %s", rc, sb_str(&c.text));
    CHECK(scan_output(sb_str(&c.text)).done);
    sb_free(&c.text);

    int runs = 120, runs_done = 0, completed = 1, killed = 0, snapshots_checked = 0;
    ds4_engine *se = script_engine(script);
    strbuf expect = { 0 }; /* the completed turns, in order */
    sb_puts(&expect, "turn 0");
    unsigned seed = 12345;
    double budget_start = test_now_ms();
    for (int i = 1; i <= runs; i++) {
        seed = seed * 1103515245u + 12345u;
        /* Kill moments spread over a run's span, re-measured by every
         * tenth run, which is left alone: the load of the machine may
         * change in the meantime, and a span measured while it was quiet
         * would leave no run completing, one measured while it was busy
         * none killed. */
        bool undisturbed = i % 10 == 0;
        int delay = (int)((seed >> 8) % (unsigned)(span * 1.3 + 1));
        double started = test_now_ms();
        child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, i));
        if (!undisturbed) child_pump(&c, delay);
        rc = child_finish(&c, undisturbed || c.eof ? 0 : SIGKILL);
        if (undisturbed) span = test_now_ms() - started;
        run_seen seen = scan_output(sb_str(&c.text));
        if (rc == 128 + SIGKILL) killed++;
        else CHECK_MSG(rc == 0, "run %d exit %d: %s", i, rc, sb_str(&c.text));
        if (seen.done) {
            completed++;
            sb_printf(&expect, "|turn %d", i);
        }

        /* the session opens, its journal checks out, and every turn that
         * completed is in it, in order, with its reply */
        ds4_error err = { "" };
        session *s = session_open("crash", &err);
        CHECK_MSG(s != NULL, "run %d: %s", i, err.msg);
        const char *notes = notes_of(s);
        CHECK_MSG(strstr(notes, "damaged") == NULL && strstr(notes, "does not add up") == NULL, "run %d: %s", i, notes);
        session_close(s);
        journal_scan j;
        read_journal("crash", &j);
        CHECK_EQ_INT(j.damaged_spans, 0);
        size_t k = 0;
        const char *want = sb_str(&expect);
        for (const char *p = want; *p;) {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);
            while (k < j.n && !(j.recs[k].kind == AGENT_TURN_USER && j.recs[k].len == len && !memcmp(j.recs[k].text, p, len)))
                k++;
            CHECK_MSG(k < j.n, "run %d: the completed \"%.*s\" is not in the journal", i, (int)len, p);
            /* its records: the call, the tool result, the answer */
            int assistants = 0, tools = 0;
            for (size_t m = k + 1; m < j.n && j.recs[m].kind != AGENT_TURN_USER; m++) {
                assistants += j.recs[m].kind == AGENT_TURN_ASSISTANT;
                if (j.recs[m].kind != AGENT_TURN_TOOL) continue;
                tools++;
                CHECK_MSG(j.recs[m].n_calls == 1 && !strcmp(j.recs[m].calls[0].name, "list") &&
                              strstr(j.recs[m].calls[0].result, "a.txt"),
                          "run %d: the tool record lacks its call", i);
            }
            CHECK_MSG(assistants >= 2 && tools >= 1, "run %d: \"%.*s\" has %d replies and %d tool results", i, (int)len,
                      p, assistants, tools);
            k++;
            p = bar ? bar + 1 : p + len;
        }
        /* the saved KV state, when there is one, loads and holds a
         * prefix of the journal's transcript: what resuming starts from */
        const char *kv = sess_path("crash", "state.kv");
        if (access(kv, F_OK) == 0) {
            ds4_error derr = { "" };
            ds4_session *ks = ds4_session_open(se, 65536, &derr);
            CHECK_MSG(ks != NULL, "%s", derr.msg);
            CHECK_MSG(ds4_session_load(ks, kv, &derr) == 0, "run %d: the saved state does not load: %s", i, derr.msg);
            ds4_tokens tx = { 0 };
            for (size_t m = 0; m < j.n; m++) {
                if (j.recs[m].kind == AGENT_TURN_SYSTEM || j.recs[m].kind == AGENT_TURN_REBUILD) tx.n = 0;
                ds4_tokens_append(&tx, j.recs[m].tokens, j.recs[m].n_tokens);
            }
            size_t n = ds4_session_n_tokens(ks);
            CHECK_MSG(n > 0 && n <= tx.n && !memcmp(ds4_session_tokens(ks), tx.ids, n * sizeof *tx.ids),
                      "run %d: the saved state (%zu tokens) is not a prefix of the transcript (%zu)", i, n, tx.n);
            snapshots_checked++;
            ds4_tokens_free(&tx);
            ds4_session_close(ks);
        }
        /* a tool result seen means its call was recorded */
        if (seen.tool_results && !seen.done) {
            const char *mine = test_printf("turn %d", i);
            size_t m = 0;
            while (m < j.n && !(j.recs[m].kind == AGENT_TURN_USER && !strcmp(j.recs[m].text, mine))) m++;
            CHECK_MSG(m < j.n, "run %d: a tool result was shown but the turn is not in the journal", i);
            CHECK_MSG(m + 1 < j.n && j.recs[m + 1].kind == AGENT_TURN_ASSISTANT, "run %d: the call is not recorded", i);
        }
        journal_scan_free(&j);
        sb_free(&c.text);
        runs_done = i;
        if (test_now_ms() - budget_start > 50000 && i >= 100) break;
    }
    printf("%d runs after the first: %d killed, %d turns completed, %d saved states loaded\n", runs_done, killed,
           completed, snapshots_checked);
    CHECK_MSG(runs_done >= 100, "only %d runs", runs_done);
    CHECK_MSG(killed >= 30, "only %d of the runs were killed", killed);
    CHECK_MSG(completed >= 10, "only %d runs completed", completed);
    CHECK_MSG(snapshots_checked >= 100, "a saved state was there after only %d runs", snapshots_checked);

    /* and it still resumes and runs */
    child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, 999));
    rc = child_finish(&c, 0);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, sb_str(&c.text));
    CHECK(scan_output(sb_str(&c.text)).done);
    sb_free(&c.text);
    sb_free(&expect);
    session_info *v;
    ds4_error err = { "" };
    CHECK_EQ_INT(sessions_list(&v, &err), 1);
    CHECK_STR_EQ(v[0].id, "crash");
    CHECK(v[0].user_turns >= completed + 1);
    free(v);
}
