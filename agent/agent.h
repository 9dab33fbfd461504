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
 *
 * The transcript is the exact token sequence the model has seen: system
 * prompt (tool schemas, our instructions, AGENTS.md of the workspace, the
 * --system text), then the turns. Assistant turns are kept exactly as
 * sampled and closed with EOS, tool results are plain text, so every round
 * reuses the KV prefix and prefills only what is new. Only compaction,
 * /uncompact, /clear and a switch to or from Think Max rewrite it (see
 * AGENT_TURN_REBUILD).
 *
 * Events come in transcript order; consecutive THINKING / TEXT chunks (and
 * TOOL_PARAM / TOOL_PROGRESS chunks of the same call) are merged while they
 * wait in the queue. THINKING and TEXT chunks are valid UTF-8 and never
 * split a character the model wrote whole (bytes that are no character,
 * and one the reply left unfinished, are U+FFFD).
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
    /* additions */
    size_t prefilled_turn;            /* tokens prefilled during the current/last user turn */
    size_t generated_total;           /* tokens sampled since start */
    double prefill_ms, decode_ms;     /* time spent prefilling / decoding since start */
    int tool_rounds;                  /* tool rounds of the current/last user turn */
    int compactions;                  /* compactions since start */
    bool can_uncompact;               /* AGENT_REQ_UNCOMPACT would restore something */
    int confirm_left_ms;              /* while confirm_pending: time left before it counts as no (-1: no limit) */
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
    bool denied;      /* AGENT_EV_TOOL_RESULT: refused by the policy or the user */
} agent_event;

/* ---- persistence (implemented by the sessions module) ------------------------
 *
 * The worker reports every completed piece of the transcript in order, at
 * turn boundaries, from the worker thread:
 *   USER       text = what the user typed (a turn, or text given with
 *              agent_steer read after a tool round); tokens = <｜User｜> +
 *              text (+ the session-start note on the first turn)
 *   ASSISTANT  text = the reply bytes exactly as sampled (reasoning, text,
 *              DSML); tokens = assistant prefix + sampled tokens + EOS
 *   TOOL       text = the tool message the model sees; tokens = its tokens
 *   REBUILD    the transcript was replaced (compaction, /uncompact,
 *              /clear, a think-mode change): tokens = the WHOLE new
 *              transcript, text = the compaction summary or ""
 *   SYSTEM     the first record of a fresh session: tokens = the system
 *              prompt (starts over like REBUILD)
 * Appending each record's tokens to those of the previous records (and
 * starting over at a REBUILD) reproduces the transcript exactly, so a
 * journal of these records plus a KV snapshot of some prefix resumes a
 * session: restore the snapshot, pass the journal's tokens as
 * agent_resume.tokens, and only the tokens after the snapshot are
 * prefilled. on_turn returns nonzero with msg when the record could not
 * be kept (a full disk): the turn stops at its next safe point and ends
 * with AGENT_END_NOT_SAVED after an AGENT_EV_ERROR carrying msg; the
 * records stay in the transcript (a front end keeps them to write later).
 * on_idle is called whenever the worker is about to become
 * idle (state SAVING meanwhile), with the session in a stable state: it may
 * be snapshotted with ds4_session_save until the hook returns; a nonzero
 * return shows msg as a notice. on_save answers AGENT_REQ_SAVE (state
 * SAVING); a nonzero return is an error with msg. */
typedef enum {
    AGENT_TURN_USER = 0,
    AGENT_TURN_ASSISTANT,
    AGENT_TURN_TOOL,
    AGENT_TURN_REBUILD,
    AGENT_TURN_SYSTEM,
} agent_turn_kind;

typedef struct {
    const char *name;
    const char *args_json;
    const char *result;     /* the text the tool returned */
    bool is_error, denied;
} agent_tool_call;

typedef struct {
    agent_turn_kind kind;
    const char *text;
    size_t len;
    const int32_t *tokens;
    size_t n_tokens;
    size_t transcript_len;  /* transcript length after this record */
    const agent_tool_call *calls;  /* TOOL: the calls of the block and their results */
    size_t n_calls;
} agent_turn;

typedef struct {
    int (*on_turn)(void *ud, const agent_turn *t, char *msg, size_t msglen);
    int (*on_idle)(void *ud, ds4_session *s, const int32_t *tokens, size_t n, char *msg, size_t msglen);
    int (*on_save)(void *ud, ds4_session *s, const int32_t *tokens, size_t n, char *msg, size_t msglen);
    /* When set, the first reading of the system prompt stops after its
     * workspace-independent prefix (agent_system_prompt_parts) and hands the
     * session holding exactly those n tokens here, e.g. to cache its state
     * for every workspace; then the rest is read. */
    void (*on_shared_prefix)(void *ud, ds4_session *s, const int32_t *tokens, size_t n);
    void *ud;
} agent_persist_hooks;

/* Start from a restored session instead of a fresh system prompt. A
 * snapshot that does not load (damaged, another model) is reported as a
 * notice and the transcript is read again. Tokens that are only the
 * system prompt (system_len == n_tokens: a cached system prompt) start a
 * fresh session: SYSTEM is reported and the first turn gets the
 * session-start note. */
typedef struct {
    const int32_t *tokens;  /* the whole transcript (journal replayed) */
    size_t n_tokens;
    size_t system_len;      /* how many of them are the system prompt (0 = unknown) */
    const void *snapshot;   /* ds4_session_snapshot() bytes of a prefix, or NULL */
    size_t snapshot_len;
    /* The state right after the system prompt (e.g. a cached one), or NULL:
     * kept (copied) so that a rebuilt conversation (compaction) goes on
     * from there instead of reading the prompt again. The engine checks it
     * when it is used; one that does not load is ignored. */
    const void *system_snapshot;
    size_t system_snapshot_len;
    size_t system_snapshot_tokens; /* the tokens it holds when fewer than system_len (a
                                      cached shared prefix); 0 = system_len */
    /* The transcript ends with this assistant reply (its text as sampled),
     * or NULL. When it made tool calls, their results never reached the
     * saved transcript (the process stopped while they ran): the agent
     * answers each with an error saying it may or may not have taken
     * effect (and, for write and edit, what the file holds now), reported
     * as a TOOL record before anything else. */
    const char *last_reply;
    size_t last_reply_len;
} agent_resume;

/* Tools for the model other than the registry (tests, embedding). */
typedef struct {
    size_t n;
    const char *const *schemas_json;  /* {"name","description","parameters"} each */
    void (*run)(void *ud, const char *name, const char *args_json, const tool_call_ctx *ctx, tool_result *out);
    void *ud;
} agent_tools;

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
    /* additions (all optional) */
    const char *session_id;             /* shown in status; NULL = generated */
    const agent_tools *custom_tools;    /* NULL = the tool registry */
    const agent_persist_hooks *persist;
    const agent_resume *resume;
    bool no_agents_md;                  /* do not read AGENTS.md */
    bool no_dsml_mask;                  /* parse calls without constraining tokens */
    bool no_date;                       /* no session-start note (reproducible transcripts) */
    int confirm_timeout_ms;             /* an unanswered permission question is answered no
                                           after this long; 0 = AGENT_CONFIRM_TIMEOUT_MS,
                                           negative = wait for an answer */
} agent_config;

/* Defaults applied when agent_config leaves them 0. */
#define AGENT_DEFAULT_MAX_TOOL_ROUNDS 64
#define AGENT_MAX_MALFORMED_IN_A_ROW 3
#define AGENT_CONFIRM_TIMEOUT_MS 30000

/* The wait cfg gives a permission question, in ms (-1: no limit): the one
 * number both the agent's refusal and a front end's countdown use. */
int agent_confirm_timeout_ms(const agent_config *cfg);

/* No context below this is worth starting with, whatever the prompt. */
#define AGENT_MIN_CTX 256

agent *agent_start(const agent_config *cfg, ds4_error *err);
/* The smallest cfg->n_ctx agent_start(cfg) accepts for a new conversation:
 * the system prompt, room for a short first turn and for compaction to run
 * (never below AGENT_MIN_CTX); -1 with err on failure. */
int agent_min_ctx(const agent_config *cfg, ds4_error *err);
/* The system prompt agent_start(cfg) would begin with, rendered without
 * starting anything (for a front end that keeps its KV state on disk:
 * agent_resume with these tokens, system_len = their count). Replaces out. */
int agent_system_prompt(const agent_config *cfg, ds4_tokens *out, ds4_error *err);
/* The same, with the length of its shared prefix: the tokens that are the
 * same whatever the workspace, AGENTS.md and --system (tools and
 * instructions), which a cache can keep once for every project. */
int agent_system_prompt_parts(const agent_config *cfg, ds4_tokens *out, size_t *shared, ds4_error *err);
/* Interrupts whatever runs, stops background work and joins the worker. */
void agent_stop(agent *a);

/* Queues a user turn; returns -1 when the worker is busy (the front end
 * keeps its own queue) or not ready yet (the system prompt is still being
 * read: status state PREFILL). On success the status is PREFILL at once. */
int agent_submit(agent *a, const char *text);
/* Text typed while a turn runs: the model reads it as a user message right
 * after the current round's tool results (so it can change course without
 * stopping), or, when the turn ends first, it becomes the next turn. Texts
 * given before they are read are joined. Returns -1 when no turn runs
 * (submit it instead). */
int agent_steer(agent *a, const char *text);
/* Takes back the text given with agent_steer that the model has not read
 * yet (malloc'd; NULL when there is none): a front end that interrupts
 * and lets the user edit that text instead of sending it. Call it before
 * agent_interrupt, since an interrupted turn turns the text into the next
 * turn as soon as it ends. */
char *agent_unsteer(agent *a);
/* Cooperative interrupt: the worker stops at the next safe point (a
 * prefill chunk, a token, a tool's poll); the turn ends with TURN_END
 * "interrupted" and the transcript stays consistent. Not for signal
 * handlers (it takes the lock): forward signals through the event loop. */
void agent_interrupt(agent *a);
/* Answers the open permission question (AGENT_EV_CONFIRM). One left
 * unanswered for confirm_timeout_ms is answered TOOL_CONFIRM_TIMEOUT by
 * the worker itself (a notice says so); an interrupt answers no. */
void agent_confirm(agent *a, tool_confirm answer);

typedef enum {
    AGENT_REQ_COMPACT = 0,
    AGENT_REQ_UNCOMPACT,
    AGENT_REQ_SAVE,
    AGENT_REQ_CLEAR,
} agent_request_kind;
/* Compaction, /uncompact, save and clear run when the worker is idle, or
 * right after the running turn. */
void agent_request(agent *a, agent_request_kind kind);
/* Applies from the next user turn; THINK_MAX only when the context allows
 * it (ds4_think_for_context), and switching to or from it re-reads the
 * transcript (its prefix sits right after BOS). Returns the mode that
 * applies. */
ds4_think agent_set_think(agent *a, ds4_think mode);
/* Starts appending the trace (see --trace) to path, or stops it (NULL).
 * The file is opened here, so a bad path is an error at once (-1 with
 * err); the worker switches to it before its next turn or request. */
int agent_set_trace(agent *a, const char *path, ds4_error *err);

/* Readable when events or a new status are available; the front end
 * polls it and then calls agent_drain. */
int agent_wake_fd(agent *a);
/* Takes the published events (ownership moves to the caller). */
size_t agent_drain(agent *a, agent_event **events);
void agent_events_free(agent_event *events, size_t n);
void agent_get_status(agent *a, agent_status *out);
/* How bash commands are confined, as decided at start: true when they run
 * in the sandbox; *why (when not NULL) gets the line that says so or why
 * not ("" without the tool registry). Fixed for the agent's life. */
bool agent_sandbox(agent *a, const char **why);

/* TURN_END reasons. */
#define AGENT_END_DONE "done"
#define AGENT_END_INTERRUPTED "interrupted"
#define AGENT_END_ERROR "error"
#define AGENT_END_CONTEXT_FULL "context full"
#define AGENT_END_MAX_TOOL_ROUNDS "max tool rounds"
#define AGENT_END_MAX_TOKENS "max tokens"
#define AGENT_END_MALFORMED "malformed tool calls"
#define AGENT_END_NOT_SAVED "not saved"

#endif
