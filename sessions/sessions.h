/* sessions.h — conversations that survive the process: autosave, resume
 * without reading the conversation again, list, switch, fork, delete.
 *
 * A session is a directory $XDG_DATA_HOME/ds4cl/sessions/ID/ holding
 *   meta.json   id, title, cwd, model, settings, times, token count
 *               (replaced atomically);
 *   journal     every transcript record the agent reports (agent_turn:
 *               user text, the reply as sampled, tool results, rebuilds,
 *               each with its exact tokens), appended and fsynced at every
 *               turn boundary, each record framed with its length and
 *               checksums so a torn tail or a damaged span is detected
 *               and skipped while everything intact is kept;
 *   state.kv    the KV state of a prefix of that transcript (the engine's
 *               snapshot: magic, version, model identity, shape, context
 *               size, checksum), written atomically when the worker goes
 *               idle after a turn, on /save, and so also on exit;
 *   lock        flock()ed by the one process that has the session open;
 *   run/        the tools' scratch while it is open (the browser's
 *               throwaway profile, logs of background commands), emptied
 *               at close, and after a crash by the next process that opens
 *               the session or enforces the budget, but for the newest
 *               job logs (64 MiB at most: the transcript points at them);
 *   journal.damaged-TIME  a damaged journal as it was found, kept beside
 *               the repaired one;
 *   meta.json.damaged-TIME  a meta.json that did not parse or held values
 *               of the wrong type or range, kept beside the one rebuilt
 *               from the journal.
 * Opening reports what a damaged journal lost from every witness: the
 * counts and size meta.json recorded, and the tokens state.kv holds
 * (written after the turns it covers, so it outlives a journal cut
 * short even when meta.json is damaged too).
 * Resuming restores state.kv and replays the journal: only the tokens
 * after the snapshot are read (agent_resume). A missing, damaged or
 * foreign snapshot costs a re-read of the transcript, never the
 * transcript. The rendered system prompt's KV state is cached by hash in
 * $XDG_CACHE_HOME/ds4cl/sysprompt/HASH.kv, so a new session starts
 * without reading it. Snapshots (both kinds) share a disk budget
 * (DS4CL_SESSION_BUDGET, default 20 GiB) and the least recently used
 * ones are deleted first; journals and metadata are always kept, and the
 * snapshot of a session open in some process is never deleted.
 *
 * Threads: the persistence hooks run on the agent's worker thread; the
 * other functions belong to the front end's thread. An open session may
 * be queried (session_get_info) at any time.
 */
#ifndef DS4CL_SESSIONS_H
#define DS4CL_SESSIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "engine/ds4.h"

#define SESSION_ID_MAX 65       /* 64 characters of [A-Za-z0-9._-] and NUL */
#define SESSION_TITLE_MAX 160
#define SESSION_DEFAULT_BUDGET (20ull << 30)

typedef struct {
    char id[SESSION_ID_MAX];
    char title[SESSION_TITLE_MAX];  /* the first user prompt, one line, clipped */
    char cwd[1024];
    char model_name[128];
    uint64_t model_identity;        /* ds4_model_info.identity; 0 = unknown */
    char backend[16];               /* "cpu", "opencl", "script" */
    int n_ctx;
    ds4_think think;
    ds4_sampling sampling;
    int64_t created, updated;       /* seconds since the epoch */
    size_t n_tokens;                /* transcript length at the last update */
    int user_turns;
    uint64_t snapshot_bytes;        /* size of state.kv; 0 = none */
    char forked_from[SESSION_ID_MAX];
    bool in_use;                    /* open in a process (this one included) */
    bool meta_missing;              /* meta.json absent or unreadable: info rebuilt from the journal */
} session_info;

/* ---- the store ------------------------------------------------------------- */

/* The sessions directory (created, mode 0700); NULL without a home. */
const char *sessions_dir(char *buf, size_t size);

/* Every session, most recently updated first (malloc'd array). Entries
 * whose metadata is unreadable are rebuilt from their journal and marked
 * meta_missing; directories that never got a user turn and are not open
 * are removed. Returns the count, or -1 with err. */
int sessions_list(session_info **out, ds4_error *err);

/* The list as text lines ("ID  age  tokens  title\n     cwd"), at most
 * max sessions (0 = all), the current one marked. Malloc'd. */
char *sessions_format_list(const session_info *v, size_t n, size_t max, const char *current_id);
/* The column heads of that list, two lines in the same columns ("ID  USED
 * TOKENS  TITLE\n  DIRECTORY"), for the same v, n and max. Malloc'd. */
char *sessions_format_header(const session_info *v, size_t n, size_t max);

/* An exact ID or an unambiguous prefix of one. 0 with the full ID in id,
 * or -1 with err (none, ambiguous: the candidates are named). */
int sessions_resolve(const char *id_or_prefix, char *id, size_t idsize, ds4_error *err);

/* Deletes a session (refused while it is open anywhere). */
int sessions_delete(const char *id, ds4_error *err);

/* Bytes all snapshots may take: DS4CL_SESSION_BUDGET ("20G", "512M",
 * "1000000", "0" = keep only those of open sessions) or the default. An
 * unreadable value falls back to the default (warn says so when non-NULL). */
uint64_t sessions_budget(char *warn, size_t warnlen);

/* Whether sessions read and write the cache of system prompt states
 * (on by default). Set before the first session is attached. */
void sessions_set_prompt_cache(bool on);

/* Deletes the least recently used snapshots until they fit the budget,
 * never those of sessions open anywhere. Returns the bytes freed. */
uint64_t sessions_enforce_budget(uint64_t budget);

/* True when name may be a session ID: 1-64 of [A-Za-z0-9._-], not
 * starting with '.'. */
bool session_id_valid(const char *name);

/* ---- one open session -------------------------------------------------------- */

typedef struct session session;

/* What the command line asked for (--resume [ID], --continue,
 * --session ID; none of them: a new session). */
typedef struct {
    bool resume;
    const char *resume_id;  /* NULL: the caller picks (interactive) or refuses (-p) */
    bool continue_last;     /* the latest session whose cwd is cwd; a new one when none */
    const char *session_id; /* open it, or create it under that name */
    const char *cwd;        /* absolute workspace path */
} session_request;

typedef enum {
    SESSION_OPEN_OK = 0,
    SESSION_OPEN_ERROR,     /* err says why (not found, in use, bad name, …) */
    SESSION_OPEN_PICK,      /* --resume without an ID: let the user pick from sessions_list */
} session_open_status;

session_open_status session_open_request(const session_request *rq, session **out, ds4_error *err);

/* Creates a new session (a generated ID, or id when non-NULL) for cwd. */
session *session_create(const char *id, const char *cwd, ds4_error *err);
/* Opens an existing session by exact ID, locking it; reads and checks
 * its journal (damage becomes notes, see session_notes). */
session *session_open(const char *id, ds4_error *err);

/* Binds the session to an engine and completes cfg for agent_start:
 * session_id, persist (the hooks), resume (the journal's transcript
 * and the newest usable snapshot, or the cached system prompt of a new
 * session) and tools.state_dir (the session's run/, valid until
 * session_close). Refused when the transcript cannot run on this engine (another
 * tokenizer, a context too small). cfg->n_ctx, think, sampling and the
 * prompt fields must be final. What it found (a torn journal tail, a
 * missing snapshot, another model) becomes notes. */
int session_attach(session *s, ds4_engine *e, agent_config *cfg, ds4_error *err);
/* Call once agent_start returned (either way): releases the mapped
 * snapshot that cfg->resume pointed to. */
void session_attach_done(session *s);

/* Warnings gathered by open and attach, one line each (owned by s). */
size_t session_notes(const session *s, const char *const **lines);

const char *session_id(const session *s);
void session_get_info(session *s, session_info *out);

/* The transcript's records so far (loaded, then those the agent
 * reported), oldest first, copied: free with session_turns_free. The
 * last max_user user turns and what followed them (0 = all). */
typedef struct {
    agent_turn_kind kind;
    char *text;
    size_t len;
    size_t n_tokens;
    agent_tool_call *calls;   /* TOOL: the calls and their results */
    size_t n_calls;
} session_turn;
size_t session_history(session *s, int max_user, session_turn **out);
void session_turns_free(session_turn *v, size_t n);

/* Copies this session (journal, snapshot, metadata) under a new ID and
 * returns the copy, open; s stays open and unchanged. Call while the
 * agent is idle so the snapshot is the current KV state. */
session *session_fork(session *s, ds4_error *err);

/* Writes the final metadata and unlocks. A session that never got a user
 * turn is removed. Call after agent_stop. NULL is a no-op. */
void session_close(session *s);

/* ---- front-end helpers: one agent over one engine ---------------------------- */

/* session_attach + agent_start + session_attach_done on a copy of base:
 * the agent of this session, or NULL with err. */
agent *session_start_agent(session *s, const agent_config *base, ds4_error *err);

/* The agent of *s restarted on another session, the engine kept open:
 * the current agent is stopped (its state saved by its last idle hook),
 * `next` is attached and started with base's settings; on failure the
 * previous session is started again and -1 returned with msg. On success
 * *s and *a are replaced and msg says what happened. base is the config
 * the front end started its agents with (persist/resume/session_id are
 * filled in here). */
int sessions_switch_to(session **s, agent **a, const agent_config *base, session *next, char *msg, size_t msglen);
/* /switch ID (prefix allowed), /new, /fork. */
int sessions_switch(session **s, agent **a, const agent_config *base, const char *id, char *msg, size_t msglen);
int sessions_new(session **s, agent **a, const agent_config *base, char *msg, size_t msglen);
int sessions_fork(session **s, agent **a, const agent_config *base, char *msg, size_t msglen);

/* ---- slash commands --------------------------------------------------------------
 *
 * For the front end's command table. Each handler takes the text after the
 * command name and returns the message to show (malloc'd markdown; "" for
 * none) and 0, or -1 when refused or failed (the message says why). After
 * /switch, /new and /fork *a is another agent (the front end must use it
 * from then on; on a failed restart it may be NULL, see
 * sessions_switch_to). Commands that stop the agent are refused while it
 * is busy: the front end checks that (busy_ok false). */
typedef struct {
    session **s;
    agent **a;
    const agent_config *base;
} sessions_ctx;

typedef struct {
    const char *name;   /* without the slash */
    const char *args;   /* synopsis for help */
    const char *help;   /* one line */
    bool busy_ok;       /* may run while the agent works */
    bool takes_id;      /* the argument is a session ID (complete with sessions_complete) */
    int (*run)(sessions_ctx *c, const char *args, char **out);
} sessions_command;

/* /sessions, /switch, /new, /fork, /delete. */
const sessions_command *sessions_commands(size_t *n);

/* IDs of saved sessions that start with prefix, most recent first. */
void sessions_complete(const char *prefix, void (*add)(void *ud, const char *id), void *ud);

#endif
