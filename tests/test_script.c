/* The scripted test engine: replies replayed token by token through the
 * sampler, one per generation call, trusted tokenization, expectations,
 * delays that a cancel cuts short, the cursor in snapshots, and clear
 * errors for bad scripts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/agent_util.h"
#include "tests/test.h"

/* Renders a one-turn prompt and samples the reply; returns its bytes
 * (runner-owned) and the sampled ids in *ids. */
static char *generate(ds4_session *s, const ds4_tokenizer *t, ds4_tokens *prompt, const char *user, ds4_tokens *ids)
{
    ds4_chat_user(t, prompt, user);
    ds4_chat_assistant_prefix(t, prompt, DS4_THINK_HIGH);
    ds4_error err = { "" };
    CHECK_MSG(ds4_session_sync(s, prompt->ids, prompt->n, NULL, &err) == DS4_OK, "sync: %s", err.msg);
    ds4_sampling sp = { .temperature = 1.5f, .top_p = 1.0f, .seed = 7 };
    ds4_sampler *smp = ds4_sampler_new(&sp);
    strbuf out = { 0 };
    int32_t eos = ds4_token_special(t, DS4_TOK_EOS);
    for (int i = 0; i < 10000; i++) {
        int32_t id = ds4_sample(smp, ds4_session_logits(s), ds4_vocab_size(t), NULL, NULL);
        if (id == eos) break;
        if (ids) ds4_tokens_push(ids, id);
        ds4_tokens_push(prompt, id);
        size_t len;
        const char *b = ds4_token_bytes(t, id, &len);
        sb_append(&out, b, len);
        CHECK(ds4_session_eval(s, id, NULL, &err) == DS4_OK);
    }
    ds4_tokens_push(prompt, eos);
    ds4_sampler_free(smp);
    char *r = test_strdup(sb_str(&out));
    sb_free(&out);
    return r;
}

TEST(script, replays_replies_through_the_sampler)
{
    const char *reply = "plan</think>Text with <" DM "tool_calls> markup and \xe4\xbd\xa0\xe5\xa5\xbd.";
    const char *lines[] = { script_line(reply, NULL), "", "# a comment", script_line("second</think>Two.", NULL), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, 4096, &err);
    CHECK(s != NULL);
    ds4_tokens prompt = { 0 }, ids = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    ds4_chat_system(t, &prompt, "system text", false);
    CHECK_STR_EQ(generate(s, t, &prompt, "first", &ids), reply);
    /* trusted tokenization: the markers are the model's special tokens */
    int32_t dsml = ds4_token_special(t, DS4_TOK_DSML), think_end = ds4_token_special(t, DS4_TOK_THINK_END);
    bool saw_dsml = false, saw_end = false;
    for (size_t i = 0; i < ids.n; i++) {
        saw_dsml |= ids.ids[i] == dsml;
        saw_end |= ids.ids[i] == think_end;
    }
    CHECK(saw_dsml && saw_end);
    /* the next generation call gets the next reply; then empty ones */
    CHECK_STR_EQ(generate(s, t, &prompt, "again", NULL), "second</think>Two.");
    CHECK_STR_EQ(generate(s, t, &prompt, "more", NULL), "");
    ds4_model_info info;
    ds4_engine_info(e, &info);
    CHECK_STR_EQ(info.backend_name, "script");
    CHECK_CONTAINS(info.device_name, "2 replies");
    ds4_tokens_free(&prompt);
    ds4_tokens_free(&ids);
    ds4_session_close(s);
}

TEST(script, expectation_failure_is_the_reply)
{
    const char *lines[] = { script_line("fine", "\"expect\": \"magic word\""), script_line("ok", "\"expect\": \"please\""), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, 4096, NULL);
    ds4_tokens prompt = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    CHECK_STR_EQ(generate(s, t, &prompt, "no such thing", NULL), "script: expected \"magic word\" in the prompt, not found");
    CHECK_STR_EQ(generate(s, t, &prompt, "say please", NULL), "ok");
    ds4_tokens_free(&prompt);
    ds4_session_close(s);
}

TEST(script, match_picks_a_reply_by_the_prompt_out_of_order)
{
    const char *lines[] = { script_line("first", NULL), script_line("a title", "\"match\": \"make a title\""),
                            script_line("second", NULL), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, 4096, NULL);
    ds4_tokens prompt = { 0 }, side = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    CHECK_STR_EQ(generate(s, t, &prompt, "go on", NULL), "first");
    /* a side request, whose system text asks for a title: the matching
     * entry, as often as it comes, and the order does not move */
    for (int i = 0; i < 2; i++) {
        side.n = 0;
        ds4_chat_begin(t, &side, DS4_THINK_HIGH);
        ds4_chat_system(t, &side, "Please make a title.", false);
        CHECK_STR_EQ(generate(s, t, &side, "the conversation", NULL), "a title");
    }
    CHECK_STR_EQ(generate(s, t, &prompt, "and then", NULL), "second");
    CHECK_STR_EQ(generate(s, t, &prompt, "more", NULL), "");
    ds4_tokens_free(&prompt);
    ds4_tokens_free(&side);
    ds4_session_close(s);
}

/* The moment the cancel is raised; the engine sees it at its next poll. */
static double g_cancel_at;
static bool cancel_after(void *ud)
{
    (void)ud;
    return test_now_ms() >= g_cancel_at;
}

/* Raises the cancel 50 ms after the first token is read, i.e. in the
 * middle of the second token's delay. */
static void cancel_during_second_token(void *ud, int done, int total, double tps)
{
    (void)ud, (void)total, (void)tps;
    if (done == 1) g_cancel_at = test_now_ms() + 50;
}

/* Each token's delay is far longer than the reaction asserted, so a delay
 * that ran to its end instead of stopping at the cancel fails the bound
 * however loaded the machine is, and a prompt and a cancel that arrive
 * late only make the test take longer. */
enum { TOKEN_DELAY_MS = 400, REACTION_MS = TOKEN_DELAY_MS / 2 };

TEST(script, delays_stop_at_a_cancel)
{
    char extra[64];
    snprintf(extra, sizeof extra, "\"delay_ms\": 200, \"prefill_delay_ms\": %d", TOKEN_DELAY_MS);
    const char *lines[] = { script_line("slow reply with several tokens", extra), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, 4096, NULL);
    ds4_tokens prompt = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    ds4_chat_user(t, &prompt, "a prompt of some length to read slowly");
    ds4_chat_assistant_prefix(t, &prompt, DS4_THINK_HIGH);
    ds4_callbacks cb = { .progress = cancel_during_second_token, .cancel = cancel_after };
    g_cancel_at = 1e300;
    ds4_error err;
    CHECK_EQ_INT(ds4_session_sync(s, prompt.ids, prompt.n, &cb, &err), DS4_INTERRUPTED);
    double reaction = test_now_ms() - g_cancel_at;
    CHECK_MSG(reaction < REACTION_MS, "the cancel took %.0f ms to stop a %d ms token delay", reaction, TOKEN_DELAY_MS);
    /* what was read before the cancel is kept */
    size_t have = ds4_session_n_tokens(s);
    CHECK_MSG(have == 1, "%zu of %zu tokens read", have, prompt.n);
    /* reading the rest after a cancel skips the delay: with it, each of
     * the remaining tokens would take TOKEN_DELAY_MS */
    CHECK(prompt.n - have >= 2);
    double t0 = test_now_ms();
    CHECK_EQ_INT(ds4_session_sync(s, prompt.ids, prompt.n, NULL, &err), DS4_OK);
    double rest = test_now_ms() - t0;
    CHECK_MSG(rest < REACTION_MS, "reading %zu tokens took %.0f ms", prompt.n - have, rest);
    ds4_tokens_free(&prompt);
    ds4_session_close(s);
}

TEST(script, decode_delay_stops_at_a_cancel)
{
    char extra[64];
    snprintf(extra, sizeof extra, "\"delay_ms\": %d", TOKEN_DELAY_MS);
    const char *lines[] = { script_line("slow reply", extra), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, 4096, NULL);
    ds4_tokens prompt = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    ds4_chat_user(t, &prompt, "go");
    ds4_chat_assistant_prefix(t, &prompt, DS4_THINK_HIGH);
    ds4_error err;
    CHECK_EQ_INT(ds4_session_sync(s, prompt.ids, prompt.n, NULL, &err), DS4_OK);
    const float *l = ds4_session_logits(s);
    int32_t best = 0;
    for (int i = 1; i < ds4_vocab_size(t); i++)
        if (l[i] > l[best]) best = i;
    ds4_callbacks cb = { .cancel = cancel_after };
    g_cancel_at = test_now_ms() + 30;
    CHECK_EQ_INT(ds4_session_eval(s, best, &cb, &err), DS4_INTERRUPTED);
    double reaction = test_now_ms() - g_cancel_at;
    CHECK_MSG(reaction < REACTION_MS, "the cancel took %.0f ms to stop a %d ms token delay", reaction, TOKEN_DELAY_MS);
    CHECK_EQ_INT(ds4_session_n_tokens(s), prompt.n);
    ds4_tokens_free(&prompt);
    ds4_session_close(s);
}

TEST(script, snapshot_carries_the_cursor)
{
    const char *lines[] = { script_line("one", NULL), script_line("two", NULL), script_line("three", NULL), NULL };
    ds4_engine *e = script_engine(write_script(lines));
    const ds4_tokenizer *t = ds4_engine_tokenizer(e);
    ds4_session *s = ds4_session_open(e, 4096, NULL);
    ds4_tokens prompt = { 0 };
    ds4_chat_begin(t, &prompt, DS4_THINK_HIGH);
    CHECK_STR_EQ(generate(s, t, &prompt, "a", NULL), "one");
    void *snap;
    size_t len;
    ds4_error err;
    CHECK(ds4_session_snapshot(s, &snap, &len, &err) == 0);
    CHECK_STR_EQ(generate(s, t, &prompt, "b", NULL), "two");
    ds4_session *r = ds4_session_open(e, 4096, NULL);
    CHECK_MSG(ds4_session_restore(r, snap, len, &err) == 0, "%s", err.msg);
    ds4_tokens p2 = { 0 };
    ds4_tokens_append(&p2, ds4_session_tokens(r), ds4_session_n_tokens(r));
    /* the restored session holds the prompt up to the first reply */
    CHECK_STR_EQ(generate(r, t, &p2, "b", NULL), "two");
    /* a payload that is not a cursor is refused and changes nothing */
    ((char *)snap)[len - 3] ^= 0x55;
    CHECK(ds4_session_restore(r, snap, len, &err) != 0);
    free(snap);
    ds4_tokens_free(&prompt);
    ds4_tokens_free(&p2);
    ds4_session_close(s);
    ds4_session_close(r);
}

TEST(script, bad_scripts_are_refused_with_the_line)
{
    const char *model = agent_test_model();
    static const struct { const char *text; const char *msg; } cases[] = {
        { "{\"assistant\": \"a\"}\n\n{oops\n", "script line 3 is not a JSON object" },
        { "{\"assistant\": \"a\", \"delay\": 3}\n", "script line 1: unknown key \"delay\"" },
        { "{\"reply\": \"a\"}\n", "script line 1 has no \"assistant\" text" },
        { "{\"assistant\": 5}\n", "script line 1 has no \"assistant\" text" },
        { "{\"assistant\": \"a\", \"delay_ms\": -4}\n", "\"delay_ms\" must be a number of milliseconds" },
        { "[1, 2]\n", "script line 1 is not a JSON object" },
        { "{\"assistant\": \"a\", \"match\": \"\"}\n", "script line 1: \"match\" must be text" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = test_tmp_path("bad%zu.jsonl", i);
        test_write_file(path, cases[i].text, strlen(cases[i].text));
        ds4_engine_options o = { .model_path = model, .backend = DS4_BACKEND_SCRIPT, .script_path = path };
        ds4_error err = { "" };
        ds4_engine *e = ds4_engine_open(&o, &err);
        CHECK_MSG(e == NULL, "case %zu accepted", i);
        CHECK_CONTAINS(err.msg, cases[i].msg);
    }
    ds4_engine_options o = { .model_path = model, .backend = DS4_BACKEND_SCRIPT, .script_path = test_tmp_path("none") };
    ds4_error err = { "" };
    CHECK(ds4_engine_open(&o, &err) == NULL);
    CHECK_CONTAINS(err.msg, "cannot read script");
}
