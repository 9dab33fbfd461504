/* load.c — reading a session's journal when it opens: what a crash left
 * (the start of one record) is cut off with a line; any other loss is
 * counted in user turns and bytes, the damaged file kept beside, the
 * journal rewritten from its intact records so that it adds up and does
 * not warn again, and a lost system prompt record put back. */
#include "sessions/session_impl.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keeps a damaged journal beside its place (journal.damaged-TIME): the
 * path of the copy in backup, or false with a session_note saying why not. */
static bool keep_damaged(session *s, const char *path, char *backup, size_t size)
{
    size_t len;
    char *raw = file_read_regular(path, &len);
    ds4_error err = { "" };
    /* never over an earlier copy (two repairs within a second) */
    long long now = (long long)base_wall_time_s();
    snprintf(backup, size, "%s.damaged-%lld", path, now);
    for (int k = 2; access(backup, F_OK) == 0 && k < 1000; k++) snprintf(backup, size, "%s.damaged-%lld-%d", path, now, k);
    if (!raw || file_write_atomic(backup, raw, len, 0600, false, &err) != 0) {
        session_note(s, "the damaged journal of session %s could not be kept beside (%s); it is left as it is",
             s->meta.info.id, raw ? err.msg : strerror(errno));
        free(raw);
        return false;
    }
    free(raw);
    return true;
}

/* Rewrites the journal from the records that checked out, each with the
 * transcript length it makes (so the result adds up and never warns
 * again). */
static bool rewrite_journal(session *s, const journal_rec *recs, size_t n, const char *path)
{
    strbuf b = { 0 };
    journal_encode_header(&b);
    journal_encode_all(&b, recs, n);
    ds4_error err = { "" };
    bool ok = file_write_atomic(path, b.s, b.len, 0600, false, &err) == 0;
    if (!ok) session_note(s, "the journal of session %s could not be rewritten: %s", s->meta.info.id, err.msg);
    sb_free(&b);
    return ok;
}

static const char *file_kind(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return S_ISLNK(m) ? "a symbolic link" : "not a regular file";
}

/* What a damaged journal cost, as one session_note: turns, records and bytes. */
static void note_loss(session *s, const journal_scan *j, int turns_lost, uint64_t bytes_lost, const char *what,
                      const char *kept, bool rewritten)
{
    strbuf b = { 0 };
    sb_printf(&b, "the journal of session %s %s: ", s->meta.info.id, what);
    if (turns_lost > 0) sb_printf(&b, "%d user turn%s and ", turns_lost, turns_lost == 1 ? "" : "s");
    else sb_puts(&b, "no whole user turn, but ");
    sb_printf(&b, "%" PRIu64 " bytes", bytes_lost);
    if (j->lost_records) sb_printf(&b, " (%zu record%s)", j->lost_records, j->lost_records == 1 ? "" : "s");
    sb_printf(&b, " were lost; %d user turn%s kept", s->meta.info.user_turns, s->meta.info.user_turns == 1 ? "" : "s");
    if (rewritten) sb_puts(&b, "; the journal was rewritten from its intact records");
    if (kept) sb_printf(&b, "; the damaged original is %s", kept);
    session_note(s, "%s", sb_str(&b));
    sb_free(&b);
}

/* Reads the journal into s, repairing what a crash or damage left:
 * -1 with err when it is there but cannot be read at all (a directory, a
 * FIFO: the session is refused rather than started over). */
int session_load_journal(session *s, ds4_error *err)
{
    char path[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, path, sizeof path);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        ds4_error_set(err, "the journal of session %s (%s) is %s; move it away to open the session", s->meta.info.id,
                 path, file_kind(st.st_mode));
        return -1;
    }
    journal_scan j;
    int turns_before = s->meta.info.user_turns;
    uint64_t bytes_before = s->meta.journal_bytes;
    if (journal_read(path, &j) != 0) {
        if (errno != ENOENT) {
            ds4_error_set(err, "the journal of session %s (%s) cannot be read: %s", s->meta.info.id, path,
                     strerror(errno));
            return -1;
        }
        if (turns_before > 0) {
            session_note(s, "the journal of session %s is missing: its %d user turns cannot be recovered", s->meta.info.id,
                 turns_before);
            s->meta.info.user_turns = 0;
            s->dirty = true;
        }
        return 0;
    }
    s->meta.info.user_turns = 0;
    bool inconsistent = false;
    for (size_t i = 0; i < j.n; i++) {
        agent_turn t = journal_rec_turn(&j.recs[i]);
        session_apply_record(s, &t);
        if (t.transcript_len != s->tx.n) inconsistent = true;
    }
    int meta_lost = turns_before - s->meta.info.user_turns;
    int turns_lost = (int)j.lost_user > meta_lost ? (int)j.lost_user : meta_lost;
    /* records cut off at a record boundary leave no trace but the size */
    uint64_t bytes_lost = j.skipped + j.torn + (bytes_before > j.file_size ? bytes_before - j.file_size : 0);
    bool shrunk = bytes_before > j.file_size;
    /* A crash while appending leaves the start of one record: the turn it
     * belonged to never completed. Anything else lost something. */
    bool crash_tail = j.torn && j.torn_partial && !j.bad_header && !j.damaged_spans && meta_lost <= 0 && !shrunk;
    bool fresh = j.n == 0 && j.file_size < JOURNAL_HEADER_LEN && turns_before == 0 && !shrunk;
    bool damaged = !fresh && !crash_tail && (j.bad_header || j.damaged_spans || j.torn || turns_lost > 0 || shrunk);
    /* without a SYSTEM or REBUILD record the transcript has no system
     * prompt: attaching puts one back */
    s->need_system = j.n > 0;
    for (size_t i = 0; i < j.n; i++)
        if (j.recs[i].kind == AGENT_TURN_SYSTEM || j.recs[i].kind == AGENT_TURN_REBUILD) s->need_system = false;
    if (fresh) {
        /* created, then stopped before (or while) its header was written:
         * it starts over with a header at the first record */
        if (j.file_size && truncate(path, 0) != 0)
            session_note(s, "the empty journal of session %s could not be reset: %s", s->meta.info.id, strerror(errno));
    } else if (crash_tail) {
        session_note(s, "the last record of session %s was incomplete (ds4cl stopped while writing it, %" PRIu64
                " bytes) and was dropped; no completed turn was lost", s->meta.info.id, j.torn);
        if (truncate(path, (off_t)j.valid_end) != 0)
            session_note(s, "the incomplete record could not be cut off: %s", strerror(errno));
    } else if (damaged || inconsistent) {
        char backup[PATH_MAX + 64];
        bool kept = keep_damaged(s, path, backup, sizeof backup);
        bool rewritten = kept && rewrite_journal(s, j.recs, j.n, path);
        if (damaged) {
            const char *what = j.file_size == 0                 ? "is empty"
                               : j.n == 0                        ? "holds no readable record"
                               : (j.torn || shrunk) && !j.damaged_spans ? "was cut short"
                                                                 : "is damaged";
            note_loss(s, &j, turns_lost, bytes_lost, what, kept ? backup : NULL, rewritten);
        } else {
            session_note(s, "the journal of session %s did not add up (records out of order); it was rewritten in order%s%s",
                 s->meta.info.id, kept ? ", the original is " : "", kept ? backup : "");
        }
        /* the metadata says what the journal holds now: no second warning */
        s->dirty = true;
    }
    journal_scan_free(&j);
    return 0;
}

/* The journal lost its system prompt record (damage at its start): the
 * conversation goes on after the prompt the agent renders now, and the
 * journal is rewritten to begin with it. Caller holds mu. */
void session_rebuild_system(session *s, const ds4_tokens *sys)
{
    journal_rec *recs = xcalloc(s->n_turns + 1, sizeof *recs);
    recs[0] = (journal_rec){ .kind = AGENT_TURN_SYSTEM, .text = "", .tokens = sys->ids, .n_tokens = sys->n };
    size_t off = 0;
    for (size_t i = 0; i < s->n_turns; i++) {
        const turn_rec *r = &s->turns[i];
        recs[i + 1] = (journal_rec){ .kind = r->kind, .text = r->text, .len = r->len, .tokens = s->tx.ids + off,
                                     .n_tokens = r->n_tokens, .calls = r->calls, .n_calls = r->n_calls };
        off += r->n_tokens;
    }
    char path[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, path, sizeof path);
    if (off == s->tx.n && rewrite_journal(s, recs, s->n_turns + 1, path)) {
        ds4_tokens tx = { 0 };
        ds4_tokens_append(&tx, sys->ids, sys->n);
        ds4_tokens_append(&tx, s->tx.ids, s->tx.n);
        ds4_tokens_free(&s->tx);
        s->tx = tx;
        s->sys_rec.n = 0;
        ds4_tokens_append(&s->sys_rec, sys->ids, sys->n);
        s->system_len = sys->n;
        if (s->n_turns == s->cap_turns) {
            s->cap_turns = s->cap_turns ? s->cap_turns * 2 : 32;
            s->turns = xrealloc(s->turns, s->cap_turns * sizeof *s->turns);
        }
        memmove(s->turns + 1, s->turns, s->n_turns * sizeof *s->turns);
        s->turns[0] = (turn_rec){ .kind = AGENT_TURN_SYSTEM, .text = xstrdup("") };
        s->n_turns++;
        s->meta.info.n_tokens = s->tx.n;
        s->meta.snap_tokens = 0;
        s->dirty = true;
        session_note(s, "the system prompt record of session %s was lost; the conversation goes on after the current "
                "system prompt", s->meta.info.id);
    }
    free(recs);
    s->need_system = false;
}
