/* persist.c — the agent's persistence hooks of an open session, on the
 * worker's thread: journal records (appended and synced; kept in order
 * in memory while the disk refuses them), KV snapshots (only when the
 * disk has room beside the journal), the system prompt cache, metadata,
 * and what the idle moment tells the user about all of it. */
#include "sessions/session_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int session_write_meta_locked(session *s, ds4_error *err)
{
    s->meta.info.updated = base_wall_time_s();
    char path[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, path, sizeof path);
    s->meta.journal_bytes = session_file_bytes(path);
    if (session_meta_write(s->dir, &s->meta, err) != 0) return -1;
    s->meta_written = true;
    s->dirty = false;
    return 0;
}

static int ensure_journal(session *s, ds4_error *err)
{
    if (s->jfd >= 0) return 0;
    char path[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, path, sizeof path);
    /* O_NONBLOCK: a FIFO put in its place must not hang the agent */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW, 0600);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
        close(fd);
        fd = -1;
        errno = EINVAL;
    }
    if (fd < 0) {
        ds4_error_set(err, "cannot open the session journal %s: %s", path,
             errno == EINVAL || errno == EISDIR || errno == ENXIO ? "it is not a regular file" : strerror(errno));
        return -1;
    }
    if (st.st_size == 0) {
        strbuf h = { 0 };
        journal_encode_header(&h);
        int rc = journal_append(fd, path, h.s, h.len, err);
        sb_free(&h);
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        if (rc != 0) {
            close(fd);
            return -1;
        }
        st.st_size = JOURNAL_HEADER_LEN;
    }
    s->jfd = fd;
    if (s->durable_end < 0) s->durable_end = st.st_size;
    return 0;
}

/* Writes the records the journal does not hold yet (caller holds io). */
int session_flush_pending(session *s, ds4_error *err)
{
    if (!s->pending.len) return 0;
    if (ensure_journal(s, err) != 0) return -1;
    /* a failed append whose cut failed too left a torn record behind */
    struct stat st;
    if (fstat(s->jfd, &st) == 0 && st.st_size != s->durable_end && ftruncate(s->jfd, s->durable_end) != 0) {
        ds4_error_set(err, "cannot cut the session journal of %s back to its last record: %s", s->meta.info.id,
             strerror(errno));
        return -1;
    }
    char path[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, path, sizeof path);
    if (journal_append(s->jfd, path, s->pending.s, s->pending.len, err) != 0) return -1;
    s->durable_end += (off_t)s->pending.len;
    sb_clear(&s->pending);
    return 0;
}

int session_hook_turn(void *ud, const agent_turn *t, char *msg, size_t msglen)
{
    session *s = ud;
    pthread_mutex_lock(&s->io);
    bool behind = s->pending.len > 0;
    journal_encode(&s->pending, t);
    ds4_error err = { "" };
    int rc = session_flush_pending(s, &err);
    pthread_mutex_lock(&s->mu);
    session_apply_record(s, t);
    s->dirty = true;
    if (rc != 0)
        session_strf(msg, msglen, "session %s: %s is not saved: %s", s->meta.info.id,
             behind ? "the conversation since an earlier failure" : "this turn", err.msg);
    /* The first user turn makes the session worth listing. */
    ds4_error merr = { "" };
    if (rc == 0 && t->kind == AGENT_TURN_USER && !s->meta_written && session_write_meta_locked(s, &merr) != 0 &&
        !s->io_err[0])
        session_strf(s->io_err, sizeof s->io_err, "session %s: %s", s->meta.info.id, merr.msg);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->io);
    return rc;
}

static bool same_tokens(const int32_t *a, size_t na, const ds4_tokens *b)
{
    return na == b->n && (na == 0 || !memcmp(a, b->ids, na * sizeof *a));
}

/* Room left free beside a KV state: the journal and the metadata (small,
 * and what hold the conversation) go first; a state can be read again.
 * A small state (the script engine's) keeps less, so a small disk still
 * takes one. */
#define SPACE_KEPT (16ull << 20)
#define SPACE_KEPT_SMALL (1ull << 20)

/* Writes a KV state file once the disk has room for it and the room kept
 * beside: -1 with err when it has not (nothing written) or the write
 * fails. */
static int save_state(ds4_session *ks, const char *path, ds4_error *err)
{
    void *buf;
    size_t len;
    if (ds4_session_snapshot(ks, &buf, &len, err) != 0) return -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    uint64_t avail = fs_free_bytes(dir);
    int rc = 0;
    uint64_t kept = len < SPACE_KEPT ? SPACE_KEPT_SMALL : SPACE_KEPT;
    if (avail != UINT64_MAX && avail < len + kept) {
        rc = ds4_error_set(err, "skipped: it takes %.1f MiB and %s has %.1f MiB free, %llu MiB of which are kept "
                                "for the conversation", (double)len / (1 << 20), dir, (double)avail / (1 << 20),
                           (unsigned long long)(kept >> 20));
    } else {
        rc = file_write_atomic(path, buf, len, 0600, true, err);
    }
    free(buf);
    return rc;
}

/* Writes state.kv when the KV state holds something it does not. forced:
 * also when nothing changed (then only the message). */
static int snapshot_locked(session *s, ds4_session *ks, bool forced, char *msg, size_t msglen)
{
    size_t have = ds4_session_n_tokens(ks);
    const int32_t *ids = ds4_session_tokens(ks);
    if (have == 0) return 0;
    uint64_t h = session_tokens_hash(ids, have);
    pthread_mutex_lock(&s->mu);
    size_t snap_n = s->meta.snap_tokens;
    uint64_t snap_h = s->meta.snap_hash;
    pthread_mutex_unlock(&s->mu);
    /* Everything was read from scratch: whatever state.kv holds did not
     * load (damaged, or never written), whatever the metadata says. */
    bool full_read = have > 1 && ds4_session_last_prefilled(ks) == have;
    bool unchanged = have == snap_n && h == snap_h && !full_read;
    /* Only the EOS closing the last reply is new (the state restored at
     * resume, plus what every next turn reads first anyway): rewriting a
     * large state for one token would delay the next turn. */
    bool eos_only = snap_n && have == snap_n + 1 && ds4_session_last_prefilled(ks) <= 1 &&
                    session_tokens_hash(ids, snap_n) == snap_h;
    char path[PATH_MAX];
    session_path_in(s, STATE_FILE, path, sizeof path);
    if (!unchanged && (forced || !eos_only)) {
        ds4_error err = { "" };
        /* A state ahead of the journal would describe a conversation
         * that is not on disk: the journal first. */
        if (s->pending.len) {
            snprintf(msg, msglen, "session %s: the KV state was not saved either (the conversation could not be "
                                  "written first)", s->meta.info.id);
            return -1;
        }
        if (save_state(ks, path, &err) != 0) {
            /* msg is a short line for the user: the start of the
             * engine's error says what failed */
            snprintf(msg, msglen, "session %s: the KV state was not saved (%.300s); the conversation is saved and "
                                  "resuming reads it again", s->meta.info.id, err.msg);
            return -1;
        }
        pthread_mutex_lock(&s->mu);
        s->meta.snap_tokens = have;
        s->meta.snap_hash = h;
        s->meta.snap_file_bytes = session_file_bytes(path);
        s->dirty = true;
        pthread_mutex_unlock(&s->mu);
        sessions_enforce_budget(s->budget);
    }
    if (forced)
        snprintf(msg, msglen, "saved session %s (%zu tokens, %.1f MiB)", s->meta.info.id, have,
                 (double)session_file_bytes(path) / (1 << 20));
    return 0;
}

/* Adds a line to what the idle hook reports. */
static void report(strbuf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void report(strbuf *out, const char *fmt, ...)
{
    if (out->len) sb_puts(out, "; ");
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(out, fmt, ap);
    va_end(ap);
}

/* rc: 0, 1 (something to tell: msg), -1 (a forced save failed). Every
 * failure is told, the journal's first: it holds the conversation. */
static int idle_or_save(session *s, ds4_session *ks, const int32_t *tokens, size_t n, bool forced, char *msg,
                        size_t msglen)
{
    pthread_mutex_lock(&s->io);
    int rc = 0;
    strbuf out = { 0 };
    ds4_error err = { "" };
    /* space may have come back since a record could not be written */
    if (s->pending.len) {
        if (session_flush_pending(s, &err) != 0) {
            report(&out, "session %s is still not saved: %s", s->meta.info.id, err.msg);
            rc = 1;
        } else {
            report(&out, "session %s: the turns that could not be written before are saved now", s->meta.info.id);
            rc = 1;
        }
    }
    pthread_mutex_lock(&s->mu);
    if (s->io_err[0]) {
        report(&out, "%s", s->io_err);
        s->io_err[0] = 0;
        rc = 1;
    }
    int user_turns = s->meta.info.user_turns;
    pthread_mutex_unlock(&s->mu);

    /* The system prompt's state, once: when it was not cached, or the
     * cached one could not be used (the prompt was read after all). */
    if (s->cache_path[0]) {
        if (same_tokens(tokens, n, &s->cache_tokens) && same_tokens(ds4_session_tokens(ks), ds4_session_n_tokens(ks), &s->cache_tokens) &&
            ds4_session_logits(ks) && (!s->cache_hit || ds4_session_last_prefilled(ks) > 0)) {
            ds4_error derr = { "" };
            if (save_state(ks, s->cache_path, &derr) == 0) sessions_enforce_budget(s->budget);
        }
        s->cache_path[0] = 0;
    }

    if (user_turns == 0) {
        if (forced) report(&out, "nothing to save yet");
    } else {
        char smsg[512] = "";
        if (snapshot_locked(s, ks, forced, smsg, sizeof smsg) != 0) {
            report(&out, "%s", smsg);
            rc = forced ? -1 : 1;
        } else if (forced && smsg[0]) {
            report(&out, "%s", smsg);
        }
        pthread_mutex_lock(&s->mu);
        /* the metadata counts what the journal holds: not while it is behind */
        if (s->dirty && !s->pending.len && session_write_meta_locked(s, &err) != 0) {
            report(&out, "session %s: %s", s->meta.info.id, err.msg);
            if (rc == 0) rc = 1;
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&s->io);
    snprintf(msg, msglen, "%s", sb_str(&out));
    sb_free(&out);
    return rc;
}

/* The worker read the system prompt's shared prefix: its state is cached
 * for every workspace (when it was not, or could not be used). */
void session_hook_shared_prefix(void *ud, ds4_session *ks, const int32_t *tokens, size_t n)
{
    session *s = ud;
    pthread_mutex_lock(&s->io);
    if (s->cache_path[0] && same_tokens(tokens, n, &s->cache_tokens) &&
        same_tokens(ds4_session_tokens(ks), ds4_session_n_tokens(ks), &s->cache_tokens) && ds4_session_logits(ks)) {
        ds4_error derr = { "" };
        if (save_state(ks, s->cache_path, &derr) == 0) sessions_enforce_budget(s->budget);
        s->cache_path[0] = 0;
    }
    pthread_mutex_unlock(&s->io);
}

int session_hook_idle(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen)
{
    return idle_or_save(ud, ks, tokens, n, false, msg, msglen);
}

int session_hook_save(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen)
{
    return idle_or_save(ud, ks, tokens, n, true, msg, msglen) < 0 ? -1 : 0;
}
