/* agent.h — the agent core as seen by a front end (the ncurses UI or the
 * non-interactive runner).
 *
 * agent_start() launches the inference worker thread, which owns the engine
 * session, the token transcript, tool execution and compaction. A front end
 * talks to it only through the functions below: it submits user turns and
 * requests, and drains published events plus a status snapshot. The worker
 * never touches the terminal. A mutex guards the shared state, a condition
 * variable wakes the worker, and a pipe (agent_wake_fd) wakes the front end
 * whenever new events or status are available.
 */
#ifndef DS4CL_AGENT_H
#define DS4CL_AGENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "tools/tools.h"

typedef struct agent agent;

typedef enum {
    AGENT_IDLE = 0,
    AGENT_PREFILL,
    AGENT_GENERATING,
    AGENT_TOOL,
    AGENT_COMPACTING,
    AGENT_SAVING,
    AGENT_ERROR,
} agent_state;

const char *agent_state_name(agent_state s);

typedef struct {
    agent_state state;
    int prefill_done, prefill_total;  /* tokens of the suffix being prefilled */
    double prefill_tps;
    int generated;                    /* tokens in the current reply */
    double gen_tps;
    int ctx_used, ctx_size;
    bool greedy;                      /* structural (greedy) sampling active */
    bool confirm_pending;             /* a permission question awaits an answer */
    size_t prefilled_total;           /* tokens prefilled since start (not reused) */
    char error[256];                  /* last error, "" when none */
    char session_id[64];
} agent_status;

typedef enum {
    AGENT_EV_USER = 0,     /* a user turn entered the transcript: text */
    AGENT_EV_THINKING,     /* thinking text chunk */
    AGENT_EV_TEXT,         /* visible answer text chunk */
    AGENT_EV_TOOL_START,   /* a call began streaming: tool */
    AGENT_EV_TOOL_PARAM,   /* a parameter value chunk: tool, name, text (streaming) */
    AGENT_EV_TOOL_CALL,    /* the call parsed completely: tool, args_json */
    AGENT_EV_TOOL_PROGRESS,/* live output of the running tool: tool, text */
    AGENT_EV_TOOL_RESULT,  /* tool, text, is_error */
    AGENT_EV_CONFIRM,      /* permission question: tool, text = summary; answer with agent_confirm */
    AGENT_EV_NOTICE,       /* informational line (compaction, reminders, …) */
    AGENT_EV_COMPACTION,   /* the context was compacted: text = summary */
    AGENT_EV_ERROR,        /* text = message */
    AGENT_EV_TURN_END,     /* the user turn finished: text = reason ("done", "interrupted", …) */
} agent_event_type;

typedef struct {
    agent_event_type type;
    char *text;       /* UTF-8, may be NULL */
    size_t len;
    char *tool;       /* tool name for tool events */
    char *name;       /* parameter name for AGENT_EV_TOOL_PARAM */
    char *args_json;  /* AGENT_EV_TOOL_CALL */
    bool is_error;
    int call_index;   /* index of the call within its block */
} agent_event;

typedef struct {
    ds4_engine *engine;
    int n_ctx;
    ds4_sampling sampling;
    int max_tokens;         /* per assistant reply; 0 = room left */
    ds4_think think;
    int max_tool_rounds;    /* per user turn; 0 = default */
    const char *workspace;  /* absolute path */
    const char *system_extra;
    const char *trace_path;
    tool_env_config tools;  /* workspace/policy for the tool registry */
} agent_config;

agent *agent_start(const agent_config *cfg, ds4_error *err);
/* Interrupts whatever runs, stops background work and joins the worker. */
void agent_stop(agent *a);

/* Queues a user turn; returns -1 when the worker is busy (the front end
 * keeps its own queue) or not ready yet. */
int agent_submit(agent *a, const char *text);
/* Cooperative interrupt: the worker stops at the next safe point. */
void agent_interrupt(agent *a);
void agent_confirm(agent *a, tool_confirm answer);

typedef enum {
    AGENT_REQ_COMPACT = 0,
    AGENT_REQ_UNCOMPACT,
    AGENT_REQ_SAVE,
    AGENT_REQ_CLEAR,
} agent_request_kind;
void agent_request(agent *a, agent_request_kind kind);
void agent_set_think(agent *a, ds4_think mode);

/* Readable when events or a new status are available; the front end
 * polls it and then calls agent_drain. */
int agent_wake_fd(agent *a);
/* Takes the published events (ownership moves to the caller). */
size_t agent_drain(agent *a, agent_event **events);
void agent_events_free(agent_event *events, size_t n);
void agent_get_status(agent *a, agent_status *out);

#endif
