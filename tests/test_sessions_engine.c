/* Sessions with the real CPU engine: a state saved through the session
 * hooks and restored through session_attach gives the very same logits,
 * bit for bit, and so does the token after it, also in a session of
 * another context size. */
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

TEST(sessions_engine, cpu_logits_after_resume_are_bit_identical)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("the golden tiny model is not available");
    sessions_test_home();
    ds4_engine_options o = { .model_path = model, .backend = DS4_BACKEND_CPU, .threads = 2 };
    ds4_error err = { "" };
    ds4_engine *e = ds4_engine_open(&o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    const ds4_tokenizer *tok = ds4_engine_tokenizer(e);
    int n_vocab = ds4_vocab_size(tok);

    /* a short transcript: system, user turn, assistant prefix */
    ds4_tokens sys = { 0 }, all = { 0 };
    ds4_chat_begin(tok, &sys, DS4_THINK_HIGH);
    ds4_chat_system(tok, &sys, "You are terse.", false);
    ds4_tokens_append(&all, sys.ids, sys.n);
    ds4_chat_user(tok, &all, "Name three prime numbers and one even number, please.");
    ds4_chat_assistant_prefix(tok, &all, DS4_THINK_HIGH);

    ds4_session *ks = ds4_session_open(e, 512, &err);
    CHECK_MSG(ks != NULL, "%s", err.msg);
    CHECK_EQ_INT(ds4_session_sync(ks, all.ids, all.n, NULL, &err), DS4_OK);
    float *before = malloc((size_t)n_vocab * sizeof *before);
    memcpy(before, ds4_session_logits(ks), (size_t)n_vocab * sizeof *before);

    /* what the agent would report, then its idle hook */
    ds4_error serr = { "" };
    session *s = session_create("cpu", test_tmpdir(), &serr);
    CHECK_MSG(s != NULL, "%s", serr.msg);
    agent_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.engine = e;
    cfg.n_ctx = 512;
    cfg.think = DS4_THINK_HIGH;
    cfg.workspace = test_tmpdir();
    CHECK_MSG(session_attach(s, e, &cfg, &serr) == 0, "%s", serr.msg);
    session_attach_done(s);
    const agent_persist_hooks *h = cfg.persist;
    agent_turn t1 = { .kind = AGENT_TURN_SYSTEM, .text = "", .tokens = sys.ids, .n_tokens = sys.n, .transcript_len = sys.n };
    agent_turn t2 = { .kind = AGENT_TURN_USER, .text = "primes", .len = 6, .tokens = all.ids + sys.n,
                      .n_tokens = all.n - sys.n, .transcript_len = all.n };
    char msg[256];
    CHECK(h->on_turn(h->ud, &t1, msg, sizeof msg) == 0);
    CHECK(h->on_turn(h->ud, &t2, msg, sizeof msg) == 0);
    CHECK_MSG(h->on_idle(h->ud, ks, all.ids, all.n, msg, sizeof msg) == 0, "%s", msg);
    session_close(s);

    /* another session of the engine, restored from what was written */
    s = session_open("cpu", &serr);
    CHECK_MSG(s != NULL, "%s", serr.msg);
    memset(&cfg, 0, sizeof cfg);
    cfg.engine = e;
    cfg.n_ctx = 512;
    cfg.workspace = test_tmpdir();
    CHECK_MSG(session_attach(s, e, &cfg, &serr) == 0, "%s", serr.msg);
    CHECK(cfg.resume && cfg.resume->snapshot);
    CHECK_EQ_INT(cfg.resume->n_tokens, all.n);
    CHECK(!memcmp(cfg.resume->tokens, all.ids, all.n * sizeof *all.ids));
    ds4_session *ks2 = ds4_session_open(e, 512, &err);
    CHECK_MSG(ks2 != NULL, "%s", err.msg);
    CHECK_MSG(ds4_session_restore(ks2, cfg.resume->snapshot, cfg.resume->snapshot_len, &err) == 0, "%s", err.msg);
    session_attach_done(s);
    session_close(s);
    CHECK_EQ_INT(ds4_session_sync(ks2, all.ids, all.n, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(ks2), 0);
    const float *after = ds4_session_logits(ks2);
    CHECK(after != NULL);
    CHECK_MSG(!memcmp(before, after, (size_t)n_vocab * sizeof *before), "logits differ after resume");

    /* the next token evaluates the same on both */
    int32_t next = 0;
    for (int i = 1; i < n_vocab; i++)
        if (before[i] > before[next]) next = i;
    CHECK_EQ_INT(ds4_session_eval(ks, next, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_eval(ks2, next, NULL, &err), DS4_OK);
    CHECK_MSG(!memcmp(ds4_session_logits(ks), ds4_session_logits(ks2), (size_t)n_vocab * sizeof(float)),
              "logits of the next token differ after resume");

    /* restored into a session of another context size: the same again */
    ds4_session *ks3 = ds4_session_open(e, 2048, &err);
    CHECK_MSG(ks3 != NULL, "%s", err.msg);
    s = session_open("cpu", &serr);
    CHECK_MSG(s != NULL, "%s", serr.msg);
    memset(&cfg, 0, sizeof cfg);
    cfg.engine = e;
    cfg.n_ctx = 2048;
    cfg.workspace = test_tmpdir();
    CHECK_MSG(session_attach(s, e, &cfg, &serr) == 0, "%s", serr.msg);
    CHECK(cfg.resume && cfg.resume->snapshot);
    CHECK_MSG(ds4_session_restore(ks3, cfg.resume->snapshot, cfg.resume->snapshot_len, &err) == 0, "%s", err.msg);
    session_attach_done(s);
    session_close(s);
    CHECK_EQ_INT(ds4_session_sync(ks3, all.ids, all.n, NULL, &err), DS4_OK);
    CHECK_EQ_INT(ds4_session_last_prefilled(ks3), 0);
    CHECK_MSG(!memcmp(before, ds4_session_logits(ks3), (size_t)n_vocab * sizeof *before),
              "logits differ after a resume into a context of 2048");
    CHECK_EQ_INT(ds4_session_eval(ks3, next, NULL, &err), DS4_OK);
    CHECK_MSG(!memcmp(ds4_session_logits(ks), ds4_session_logits(ks3), (size_t)n_vocab * sizeof(float)),
              "logits of the next token differ after a resume into a context of 2048");
    ds4_session_close(ks3);

    free(before);
    ds4_session_close(ks);
    ds4_session_close(ks2);
    ds4_tokens_free(&sys);
    ds4_tokens_free(&all);
    ds4_engine_close(e);
}
