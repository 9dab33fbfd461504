/* agent_impl.h — the agent's state shared by the files of agent/
 * (agent.c: API, thread, events; turn.c: the turn loop; compact.c:
 * compaction; prompt.c: the system prompt; trace.c: --trace). */
#ifndef DS4CL_AGENT_IMPL_H
#define DS4CL_AGENT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "agent/agent.h"
#include "dsml/dsml.h"
#include "base/base.h"

/* One piece of the transcript, for the turn log and compaction. */
typedef struct {
    agent_turn_kind kind;
    size_t start, end;   /* token range in the transcript */
    char *text;
} turn_rec;

/* What /uncompact restores. */
typedef struct {
    bool valid;
    ds4_tokens tx;
    size_t sys_len;
    turn_rec *turns;
    size_t n_turns;
    void *snap;          /* KV snapshot when affordable, else NULL (re-read) */
    size_t snap_len;
    size_t mark;         /* transcript length right after the compaction: what
                            follows it is kept by /uncompact */
} saved_state;

typedef struct trace trace;

/* A system prompt state kept beyond this size costs more memory than
 * re-reading the prompt saves. */
#define SYS_SNAPSHOT_MAX (512ull << 20)

struct agent {
    /* set at start, then read-only */
    agent_config cfg;
    char *workspace, *system_extra, *session_id;
    ds4_engine *engine;
    const ds4_tokenizer *tok;
    int n_vocab, n_ctx;
    int32_t t_bos, t_eos, t_user, t_assistant, t_think, t_think_end, t_dsml;
    size_t max_tool_rounds;
    size_t summary_budget;   /* longest compaction summary, tokens */
    size_t compact_reserve;  /* tokens always kept free so compaction can run */

    /* the worker's */
    ds4_session *sess;
    ds4_sampler *sampler;
    tool_env *env;
    bool sandboxed;                  /* set before the worker starts, then read-only */
    char sandbox_why[256];
    char **schemas;
    size_t n_schemas;
    dsml_schema *dschema;
    dsml_vocab *dvocab;
    dsml_masker *masker;
    int32_t refused_best;       /* the model's first choice the mask refused at this token, or -1 */
    dsml_parser *parser;
    ds4_tokens tx;        /* the transcript */
    size_t sys_len;       /* tokens of the system prompt */
    size_t sys_shared;    /* its first tokens, the same in every workspace (agent_render_system) */
    /* The session's state right after the system prompt it was taken on
     * (sys_snap_tx), so that a rebuilt transcript beginning with the same
     * prompt goes on from there (see agent_sync). */
    void *sys_snap;       /* at most SYS_SNAPSHOT_MAX bytes */
    size_t sys_snap_len;
    ds4_tokens sys_snap_tx;
    turn_rec *turns;
    size_t n_turns, cap_turns;
    saved_state saved;    /* before the last compaction */
    ds4_think think;      /* mode of the next rounds */
    bool started_note;    /* the session-start note was given */
    bool resumed;         /* started from agent_resume */
    bool in_turn;         /* agent_run_turn runs */
    bool persist_failed;  /* the persistence hook refused a record this turn */
    char *unanswered;     /* a resumed transcript's last reply, until its calls are answered */
    size_t unanswered_len;
    char *last_user;      /* the latest user request, verbatim */
    trace *tr;
    strbuf reply;         /* bytes of the reply being sampled */
    dsml_gather stream;   /* text or reasoning of the current token, not yet published */
    strbuf last_calls;    /* the previous round's calls, to notice loops */
    int call_index;       /* call being streamed (events) */
    char call_tool[128];
    double gen_t0;
    int gen_count;

    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    bool th_started;
    int wake_r, wake_w;
    bool wake_pending;
    bool stop;
    atomic_bool interrupt;
    char *mailbox;
    strbuf steer;         /* text to read after the next tool round */
    unsigned requests;    /* 1 << agent_request_kind */
    bool think_req_set;
    ds4_think think_req;
    bool trace_req_set;   /* trace_req replaces tr before the next turn */
    trace *trace_req;     /* NULL: stop tracing */
    agent_event *ev;
    size_t n_ev, cap_ev;
    agent_status st;
    bool confirm_waiting, confirm_answered;
    tool_confirm confirm_answer;
    double confirm_deadline;  /* base_now_ms() when the open question times out; 0 = never */
};

/* ---- agent.c ---------------------------------------------------------------- */

/* Publishes an event (copies the strings); adjacent text chunks of the same
 * kind merge. */
void agent_publish(agent *a, agent_event_type type, const char *text, size_t len, const char *tool,
                   const char *name, const char *args_json, bool is_error, int call_index);
void agent_publish_result(agent *a, const char *tool, const char *text, bool is_error, bool denied, int call_index);
void agent_notice(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void agent_set_state(agent *a, agent_state s);
void agent_set_error(agent *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Updates status fields under the lock and wakes the front end. */
void agent_status_update(agent *a, void (*fn)(agent_status *st, void *ud), void *ud);
bool agent_cancelled(agent *a);
void agent_update_ctx(agent *a);

/* ---- resume.c --------------------------------------------------------------------- */

/* Answers the tool calls of a resumed conversation's last reply that got
 * no result (see agent_resume.last_reply); nothing when it made none. */
void agent_answer_unanswered(agent *a, const char *reply, size_t len);

/* ---- turn log ------------------------------------------------------------------ */

/* Records tx[start..] as a turn and calls the persistence hook. */
void turn_log_add(agent *a, agent_turn_kind kind, size_t start, const char *text, size_t len);
void turn_log_add_tool(agent *a, size_t start, const char *text, size_t len, const agent_tool_call *calls, size_t n);
/* Takes the steering text (NULL when none). */
char *agent_take_steer(agent *a);
/* The whole transcript was replaced. */
void turn_log_rebuild(agent *a, const char *text, size_t len);
void turn_log_clear(turn_rec *turns, size_t *n);

/* ---- turn.c ----------------------------------------------------------------------- */

typedef enum { SYNC_OK = 0, SYNC_INTERRUPTED, SYNC_ERROR } sync_result;

/* Makes the session equal tokens[0..n), with PREFILL status and counters. */
sync_result agent_sync(agent *a, const int32_t *tokens, size_t n, const char *label);
/* Runs one user turn to its end; returns the TURN_END reason. */
const char *agent_run_turn(agent *a, const char *text);
/* The parser's events, published as agent events (parser callback). */
void agent_dsml_event(void *ud, const dsml_event *ev);
/* Publishes the text or reasoning gathered since the last flush as one
 * event (dsml_gather_take), holding back an incomplete character at its
 * end; all: the reply or its region ended, and such a character is
 * U+FFFD. */
void agent_stream_flush(agent *a, bool all);
/* Appends a tool message with its calls and results (journaled as a TOOL
 * record); false when not even a short error fits the context. */
bool agent_add_tool_results(agent *a, const char *text, agent_tool_call *calls, size_t n);
/* Tokens a compaction needs to be able to run at all. */
size_t agent_compact_reserve(const agent *a);

/* ---- compact.c -------------------------------------------------------------------- */

typedef enum { COMPACT_OK = 0, COMPACT_NOTHING, COMPACT_INTERRUPTED, COMPACT_FAILED } compact_result;

bool agent_should_compact(const agent *a, size_t used);
compact_result agent_compact(agent *a, const char *reason);
/* Restores the transcript from before the last compaction. */
int agent_uncompact(agent *a);
void saved_state_free(saved_state *s);

/* ---- prompt.c --------------------------------------------------------------------- */

/* Renders BOS, [Think Max prefix], tool block, instructions, AGENTS.md and
 * the --system text into out (cleared first). */
void agent_render_system(agent *a, ds4_tokens *out);
/* The compaction request text for the given reason (malloc'd). */
char *agent_compact_request(const char *reason);

/* ---- trace.c ---------------------------------------------------------------------- */

trace *trace_open(const char *path, ds4_error *err);
void trace_close(trace *t);
void trace_line(trace *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends `key="escaped"`-style text; helper for trace lines. */
void trace_escape(strbuf *b, const char *s, size_t n);
void trace_token(trace *t, const char *label, size_t index, int32_t id, const char *bytes, size_t len);

#endif
