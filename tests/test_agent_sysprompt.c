/* test_agent_sysprompt.c — a system prompt state handed to the agent (the
 * prompt cache's) spares reading the prompt again when a compaction
 * rebuilds the conversation: in a resumed session, whose own state goes
 * far beyond the prompt, and in a fresh one started from the cache. The
 * real CPU engine on the tiny model, whose rewind is as short as DS4's;
 * a saved session hands the cached prompt state over by itself. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/agent_util.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

typedef struct {
    ds4_tokens tx;
    void *snap;
    size_t snap_len;
} idle_rec;

static int keep_idle(void *ud, ds4_session *s, const int32_t *tokens, size_t n, char *msg, size_t msglen)
{
    (void)msg;
    (void)msglen;
    idle_rec *r = ud;
    keep_idle_state(s, tokens, n, &r->tx, &r->snap, &r->snap_len);
    return 0;
}

static agent_config tiny_config(ds4_engine *e)
{
    agent_config cfg = test_config(e, 16384);
    cfg.think = DS4_THINK_NONE;
    cfg.max_tokens = 8;
    return cfg;
}

/* The state after the system prompt alone, as the prompt cache holds it. */
static void *system_state(ds4_engine *e, const ds4_tokens *sys, size_t *len)
{
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(e, 16384, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    CHECK_MSG(ds4_session_sync(s, sys->ids, sys->n, NULL, &err) == DS4_OK, "%s", err.msg);
    void *buf = NULL;
    CHECK_MSG(ds4_session_snapshot(s, &buf, len, &err) == 0, "%s", err.msg);
    ds4_session_close(s);
    return buf;
}

/* A turn longer than the engine's cheap rewind. */
static void long_turn(agent *a, ev_log *log)
{
    strbuf big = { 0 };
    sb_puts(&big, "Remember these words:");
    for (int i = 0; i < 400; i++) sb_printf(&big, " w%d", i);
    log->ended = false;
    CHECK_EQ_INT(agent_submit(a, sb_str(&big)), 0);
    run_to_end(a, log, tiny_engine_ms(60000), NULL, NULL);
    sb_free(&big);
}

/* An agent started from rs, tracing what it reads to *trace_path, once
 * it is idle. */
static agent *start_resumed(agent_config *cfg, agent_resume *rs, const char **trace_path, ev_log *log)
{
    cfg->resume = rs;
    *trace_path = test_tmp_path("trace.txt");
    cfg->trace_path = *trace_path;
    agent *a = test_agent(cfg);
    wait_idle(a, log, tiny_engine_ms(120000));
    return a;
}

/* A short turn: a resumed conversation has something to compact once it
 * goes on. */
static void one_more_turn(agent *a, ev_log *log)
{
    log->ended = false;
    CHECK_EQ_INT(agent_submit(a, "And one more word: w400."), 0);
    run_to_end(a, log, tiny_engine_ms(60000), NULL, NULL);
}

TEST(agent_sysprompt, tiny_model_resumed_session_compacts_without_reading_the_system_prompt)
{
    ds4_engine *e = tiny_cpu_engine();
    idle_rec rec = { 0 };
    agent_persist_hooks hooks = { .on_idle = keep_idle, .ud = &rec };
    agent_config cfg = tiny_config(e);
    cfg.persist = &hooks;
    agent *a = test_agent(&cfg);
    ev_log log = { 0 };
    wait_idle(a, &log, tiny_engine_ms(120000));
    long_turn(a, &log);
    agent_stop(a);
    CHECK(rec.snap != NULL);

    ds4_tokens sys = { 0 };
    ds4_error err = { "" };
    CHECK_MSG(agent_system_prompt(&cfg, &sys, &err) == 0, "%s", err.msg);
    CHECK(rec.tx.n > sys.n + 400 && !memcmp(rec.tx.ids, sys.ids, sys.n * sizeof *sys.ids));
    size_t sys_len = 0;
    void *sys_state = system_state(e, &sys, &sys_len);

    /* a new process: its own state of the whole conversation, and the
     * cached state of its system prompt */
    agent_resume rs = { .tokens = rec.tx.ids, .n_tokens = rec.tx.n, .system_len = sys.n,
                        .snapshot = rec.snap, .snapshot_len = rec.snap_len,
                        .system_snapshot = sys_state, .system_snapshot_len = sys_len };
    agent_config cfg2 = tiny_config(e);
    const char *trace_path;
    ev_log log2 = { 0 };
    agent *b = start_resumed(&cfg2, &rs, &trace_path, &log2);
    one_more_turn(b, &log2);
    compact_reads_no_system_prompt(b, &log2, trace_path, sys.n);

    free(sys_state);
    free(rec.snap);
    ds4_tokens_free(&rec.tx);
    ds4_tokens_free(&sys);
    ev_log_free(&log);
    ev_log_free(&log2);
    ds4_engine_close(e);
}

TEST(agent_sysprompt, tiny_model_cached_start_compacts_without_reading_the_system_prompt)
{
    ds4_engine *e = tiny_cpu_engine();
    agent_config cfg = tiny_config(e);
    ds4_tokens sys = { 0 };
    ds4_error err = { "" };
    CHECK_MSG(agent_system_prompt(&cfg, &sys, &err) == 0, "%s", err.msg);
    size_t sys_len = 0;
    void *sys_state = system_state(e, &sys, &sys_len);
    agent_resume rs = { .tokens = sys.ids, .n_tokens = sys.n, .system_len = sys.n,
                        .snapshot = sys_state, .snapshot_len = sys_len,
                        .system_snapshot = sys_state, .system_snapshot_len = sys_len };
    const char *trace_path;
    ev_log log = { 0 };
    agent *a = start_resumed(&cfg, &rs, &trace_path, &log);
    agent_status st;
    agent_get_status(a, &st);
    CHECK_EQ_INT(st.prefilled_total, 0);
    long_turn(a, &log);
    compact_reads_no_system_prompt(a, &log, trace_path, sys.n);

    free(sys_state);
    ds4_tokens_free(&sys);
    ev_log_free(&log);
    ds4_engine_close(e);
}

static agent *attach(session *s, agent_config *cfg)
{
    ds4_error err = { "" };
    CHECK_MSG(session_attach(s, cfg->engine, cfg, &err) == 0, "attach: %s", err.msg);
    ds4_error derr = { "" };
    agent *a = agent_start(cfg, &derr);
    session_attach_done(s);
    CHECK_MSG(a != NULL, "agent_start: %s", derr.msg);
    return a;
}

TEST(agent_sysprompt, tiny_model_saved_session_resumes_with_the_cached_system_prompt)
{
    ds4_engine *e = tiny_cpu_engine();
    sessions_test_home();
    ds4_error err = { "" };
    session *s = session_create("c1", test_tmpdir(), &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    agent_config cfg = tiny_config(e);
    agent *a = attach(s, &cfg);
    ev_log log = { 0 };
    wait_idle(a, &log, tiny_engine_ms(120000));
    long_turn(a, &log);
    agent_stop(a);
    session_close(s);
    char cache[4096], *found;
    CHECK(session_sysprompt_cache_dir(cache, sizeof cache) != NULL);
    CHECK_EQ_INT(test_runf(&found, "ls '%s'/*.kv", cache), 0);
    CHECK(found[0] != 0);

    s = session_open("c1", &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    agent_config cfg2 = tiny_config(e);
    const char *trace_path = test_tmp_path("trace.txt");
    cfg2.trace_path = trace_path;
    agent *b = attach(s, &cfg2);
    ev_log log2 = { 0 };
    wait_idle(b, &log2, tiny_engine_ms(120000));
    one_more_turn(b, &log2);
    /* the cache holds the shared prefix: the rebuild reads the rest */
    ds4_tokens sys = { 0 };
    ds4_error derr = { "" };
    size_t shared = 0;
    CHECK_MSG(agent_system_prompt_parts(&cfg2, &sys, &shared, &derr) == 0, "%s", derr.msg);
    CHECK(shared > 0 && shared < sys.n);
    compact_reads_no_system_prompt(b, &log2, trace_path, shared);
    session_close(s);
    ds4_tokens_free(&sys);
    ev_log_free(&log);
    ev_log_free(&log2);
    ds4_engine_close(e);
}
