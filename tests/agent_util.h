/* agent_util.h — helpers for the agent, script-engine and --prompt tests:
 * scripts, an engine over them, fake tools, and a front end that drives an
 * agent and records what it publishes. */
#ifndef DS4CL_AGENT_UTIL_H
#define DS4CL_AGENT_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/agent.h"
#include "base/base.h"
#include "tests/test.h"

#define DM "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

/* The golden tiny model (its tokenizer drives the script engine); skips
 * the test when the golden data is absent. */
const char *agent_test_model(void);

/* A script line {"assistant": text, ...extra} where extra is JSON members
 * without braces (e.g. "\"delay_ms\": 5") or NULL. Runner-owned. */
char *script_line(const char *reply, const char *extra);
/* Writes lines (NULL-terminated) to a file in the temp dir; its path. */
const char *write_script(const char *const *lines);
/* A DSML block calling one tool; params as name, value, name, value, …,
 * NULL; values starting with '=' are JSON (string="false"). Runner-owned. */
char *dsml_block(const char *tool, ...);

/* The script engine on the golden model (closed when the test ends). */
ds4_engine *script_engine(const char *script_path);

/* Fake tools: echo(text), sleep(ms), ask(what), big(bytes), inject(). */
extern const agent_tools fake_tools;
int fake_sleep_cancelled(void); /* sleeps that ended by cancellation */

/* The CPU engine on the golden tiny model (skips when it is not built). */
ds4_engine *tiny_cpu_engine(void);
/* A wait on the real engine: sanitizer builds run it many times slower. */
int tiny_engine_ms(int ms);
/* From an agent trace: the last sync labelled label, its transcript length
 * and the tokens it prefilled. */
bool traced_prefill(const char *trace, const char *label, size_t *transcript, size_t *prefilled);

/* A config over engine with the fake tools, no date note, thinking on. */
agent_config test_config(ds4_engine *e, int n_ctx);
agent *test_agent(const agent_config *cfg); /* fails the test on error */

typedef struct {
    strbuf seq;      /* one word per event: USER TEXT TOOL_CALL(name) … */
    strbuf text, thinking, results, notices, errors;
    strbuf calls;    /* "name args;" */
    char end[64];
    bool ended;
    int confirms;
    char confirm_tool[64];
    double end_ms;   /* test_now_ms() when TURN_END arrived */
    /* When set, TURN_END also stores the reaction since this mark (see
     * test_reaction_ms) and the CPU wait taken off it. */
    const test_mark *mark;
    double reaction_ms, waited_ms;
} ev_log;

void ev_log_free(ev_log *l);

/* Called for every event (may be NULL): e.g. to answer confirmations. */
typedef void (*ev_hook)(agent *a, const agent_event *e, void *ud);

/* Drains events into log until TURN_END, then until the status is idle
 * (or error). Fails the test after timeout_ms. */
void run_to_end(agent *a, ev_log *log, int timeout_ms, ev_hook hook, void *ud);
/* Waits for IDLE/ERROR (draining events into log, which may be NULL). */
void wait_idle(agent *a, ev_log *log, int timeout_ms);
/* Occurrences of text in the log's notices and event words. */
int log_count(const ev_log *log, const char *text);
/* Drains events until text occurs in the log once more than at the call,
 * then waits for idle: after agent_request() the state stays idle until the
 * agent's thread takes the request up, so waiting for idle alone can
 * return before it is handled. */
void wait_log(agent *a, ev_log *log, const char *text, int timeout_ms);
/* The same until text occurs count times in all. */
void wait_log_count(agent *a, ev_log *log, const char *text, int count, int timeout_ms);
/* Polls the status until the state is want; fails the test after timeout_ms. */
void wait_state(agent *a, agent_state want, int timeout_ms);
/* Submits (waiting for idle first) and runs to the end. */
void run_turn(agent *a, const char *text, ev_log *log);

/* Compacts, stops the agent and checks that the rebuild read everything
 * but the first sys_n tokens of the system prompt (all of it, or the
 * shared prefix a cache holds). */
void compact_reads_no_system_prompt(agent *a, ev_log *log, const char *trace_path, size_t sys_n);

/* For an on_idle callback: keeps the session's tokens in *tx and a fresh
 * snapshot of it in *snap (the previous one freed); fails the test when the
 * snapshot cannot be taken. */
void keep_idle_state(ds4_session *s, const int32_t *tokens, size_t n, ds4_tokens *tx, void **snap, size_t *snap_len);

#endif
