/* store_impl.h — shared by the files of sessions/ (store.c: the
 * directory of sessions, metadata, locks, the budget; session.c: one open
 * session and its hooks; switch.c: restarting the agent on another). */
#ifndef DS4CL_SESSIONS_STORE_IMPL_H
#define DS4CL_SESSIONS_STORE_IMPL_H

#include <limits.h>

#include "base/base.h"
#include "sessions/journal.h"
#include "sessions/sessions.h"

#define META_FILE "meta.json"
#define JOURNAL_FILE "journal"
#define STATE_FILE "state.kv"
#define LOCK_FILE "lock"
/* Scratch of the tools while the session is open (the browser's throwaway
 * profile, logs of background commands); emptied when it closes but for
 * the newest job logs (the transcript points at them), up to
 * JOB_LOGS_KEPT bytes. */
#define RUN_DIR "run"
#define JOB_LOGS_KEPT (64ull << 20)

/* What meta.json holds beyond session_info. */
typedef struct {
    session_info info;
    uint64_t tokenizer;       /* fingerprint of the vocabulary; 0 = unknown */
    size_t snap_tokens;       /* tokens of state.kv when it was written */
    uint64_t snap_hash;       /* session_tokens_hash of them */
    uint64_t snap_file_bytes; /* its size then (to notice a replaced file) */
    /* The journal's size when this was written: it only grows (a repair
     * writes both), so a smaller journal lost records. 0 = unknown. */
    uint64_t journal_bytes;
} session_meta;

/* $XDG_DATA_HOME/ds4cl/sessions/ID into buf; NULL when there is no home. */
const char *session_dir_of(const char *id, char *buf, size_t size);
/* The system prompt cache directory (created). */
const char *session_sysprompt_cache_dir(char *buf, size_t size);

/* Takes the session lock without waiting: the fd, or -1 (errno
 * EWOULDBLOCK when another open file holds it). */
int session_lock(const char *dir);
/* True when some process holds the lock of dir. */
bool session_locked(const char *dir);
/* Removes what a process killed while it had the session open left
 * behind: half-written temporary files and the run directory (its job
 * logs kept, see RUN_DIR). Only with the lock held. */
void session_remove_leftovers(const char *dir);
/* Empties a run directory but for its newest job logs (JOB_LOGS_KEPT);
 * removes it when nothing is kept. */
void session_trim_run(const char *run_dir);

int session_meta_read(const char *dir, session_meta *out);   /* -1 when absent or unreadable */
/* The same from the text of a meta.json held in memory. */
int session_meta_parse(const char *text, size_t len, session_meta *out);
int session_meta_write(const char *dir, const session_meta *m, ds4_error *err);
/* Title, user turns and tokens from a journal's records. */
void session_meta_from_journal(const journal_scan *j, session_info *info);
/* One line of at most SESSION_TITLE_MAX-1 bytes from a prompt. */
void session_title_from_text(char *out, size_t size, const char *text, size_t len);

/* dir/name into buf; false when it does not fit. */
bool session_path_join(char *buf, size_t size, const char *dir, const char *name);
/* Bounded formatting whose truncation is acceptable (messages, IDs). */
void session_strf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

uint64_t session_tokens_hash(const int32_t *ids, size_t n);
uint64_t session_file_bytes(const char *path);
/* Copies a damaged file beside itself as PATH.damaged-TIME (never over
 * an earlier copy): 0 with the copy's path in backup, or -1 with err. */
int session_keep_damaged(const char *path, char *backup, size_t size, ds4_error *err);
void session_random_id(char *out, size_t size);

#endif
