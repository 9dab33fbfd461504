/* session_impl.h — the state of one open session, shared by the files
 * that make it (internal to sessions/): session.c opens, attaches,
 * answers queries, forks and closes; load.c reads and repairs the
 * journal; persist.c holds the agent's persistence hooks (journal
 * records, snapshots, metadata). */
#ifndef DS4CL_SESSIONS_SESSION_IMPL_H
#define DS4CL_SESSIONS_SESSION_IMPL_H

#include <pthread.h>

#include "sessions/store_impl.h"

typedef struct {
    agent_turn_kind kind;
    char *text;
    size_t len;
    size_t n_tokens;
    agent_tool_call *calls;
    size_t n_calls;
} turn_rec;

struct session {
    char dir[PATH_MAX];
    int lock_fd;
    int jfd;                  /* journal opened for appending; -1 until needed */
    bool created_here;        /* removed on close when it never got a user turn */
    bool need_system;         /* the journal lost its first (system prompt) record */

    /* Guards everything below that the worker's hooks change and the
     * front end reads (meta, transcript, records). */
    pthread_mutex_t mu;
    session_meta meta;
    bool meta_written;        /* meta.json describes this session */
    bool dirty;               /* meta changed since it was written */
    ds4_tokens tx;            /* the transcript so far */
    size_t system_len;
    ds4_tokens sys_rec;       /* tokens of the last SYSTEM record */
    turn_rec *turns;
    size_t n_turns, cap_turns;
    char **notes;
    size_t n_notes;
    char io_err[320];         /* a metadata failure to report at the next idle */
    /* Records the journal does not hold yet (a write failed: the disk was
     * full, say), encoded, oldest first: written before the next record,
     * so the journal always holds a prefix of the conversation in order.
     * Under io. */
    strbuf pending;
    off_t durable_end;        /* where the journal ends after its last good append; -1 = not open yet */

    /* Serialises the hooks' file writes with session_fork. */
    pthread_mutex_t io;

    /* set by session_attach */
    agent_persist_hooks hooks;
    agent_resume resume;
    ds4_tokens resume_tokens;
    void *map;
    size_t map_len;
    void *sys_map;             /* the cached system prompt beside a saved state */
    size_t sys_map_len;
    char cache_path[PATH_MAX]; /* system prompt cache to check at the first idle; "" = none */
    char run_dir[PATH_MAX];    /* the tools' state directory when it is ours; "" = none */
    ds4_tokens cache_tokens;
    bool cache_hit;
    uint64_t budget;
};

/* ---- session.c ---- */
void session_note(session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dir/name of the session into buf */
void session_path_in(const session *s, const char *name, char *buf, size_t size);
/* One record added to the transcript (caller holds mu or owns s alone). */
void session_apply_record(session *s, const agent_turn *t);

/* ---- load.c ---- */
/* Reads the journal into s, repairing what a crash or damage left; -1
 * with err when it is there but cannot be read at all (not a regular
 * file). */
int session_load_journal(session *s, ds4_error *err);
/* Puts a system prompt record back at the start (need_system); caller
 * holds mu. */
void session_rebuild_system(session *s, const ds4_tokens *sys);

/* ---- persist.c (the worker's thread, and close) ---- */
/* meta.json from s->meta (caller holds mu). */
int session_write_meta_locked(session *s, ds4_error *err);
/* Writes the records the journal does not hold yet (caller holds io). */
int session_flush_pending(session *s, ds4_error *err);
int session_hook_turn(void *ud, const agent_turn *t, char *msg, size_t msglen);
int session_hook_idle(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen);
void session_hook_shared_prefix(void *ud, ds4_session *ks, const int32_t *tokens, size_t n);
int session_hook_save(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen);

#endif
