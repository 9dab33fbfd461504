/* load.c — reading a session's journal when it opens: what a crash left
 * (the start of one record) is cut off with a line; any other loss is
 * counted in user turns and bytes, the damaged file kept beside, the
 * journal rewritten from its intact records so that it adds up and does
 * not warn again, and a lost system prompt record put back. */
#include "sessions/session_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Keeps a damaged journal beside its place (journal.damaged-TIME): the
 * path of the copy in backup, or false with a session_note saying why not. */
static bool keep_damaged(session *s, const char *path, char *backup, size_t size)
{
    ds4_error err = { "" };
    if (session_keep_damaged(path, backup, size, &err) == 0) return true;
    session_note(s, "the damaged journal of session %s could not be kept beside (%s); it is left as it is",
                 s->meta.info.id, err.msg);
    return false;
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

/* What a journal lost, as well as its witnesses tell: user turns (the
 * most any of them counts), bytes (the journal's own damage and what
 * the metadata says it held), tokens (what the saved KV state holds
 * beyond it). */
typedef struct {
    int turns;
    uint64_t bytes;
    size_t tokens;
} journal_loss;

/* What a damaged journal cost, as one session_note. */
static void note_loss(session *s, const journal_scan *j, const journal_loss *l, const char *what, const char *kept,
                      bool rewritten)
{
    strbuf b = { 0 };
    sb_printf(&b, "the journal of session %s %s: ", s->meta.info.id, what);
    if (l->turns > 0) sb_printf(&b, "%d user turn%s and ", l->turns, l->turns == 1 ? "" : "s");
    else sb_puts(&b, "no whole user turn, but ");
    if (l->bytes || !l->tokens) sb_printf(&b, "%" PRIu64 " bytes", l->bytes);
    if (j->lost_records) sb_printf(&b, " (%zu record%s)", j->lost_records, j->lost_records == 1 ? "" : "s");
    if (l->tokens)
        sb_printf(&b, "%s%zu tokens (which the saved KV state still holds)", l->bytes ? " and " : "", l->tokens);
    sb_printf(&b, " were lost; %d user turn%s kept", s->meta.info.user_turns, s->meta.info.user_turns == 1 ? "" : "s");
    if (rewritten) sb_puts(&b, "; the journal was rewritten from its intact records");
    if (kept) sb_printf(&b, "; the damaged original is %s", kept);
    session_note(s, "%s", sb_str(&b));
    sb_free(&b);
}

/* The tokens of the saved KV state (its header and token array only, so
 * a large file costs nothing), and its size; false when there is none
 * that checks out. */
static bool snapshot_tokens(session *s, ds4_tokens *out, uint64_t *bytes)
{
    char path[PATH_MAX];
    session_path_in(s, STATE_FILE, path, sizeof path);
    /* O_NONBLOCK: a FIFO in its place is refused, not waited on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    void *m = ok ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) return false;
    ok = ds4_snapshot_tokens(m, (size_t)st.st_size, out) == 0;
    munmap(m, (size_t)st.st_size);
    *bytes = (uint64_t)st.st_size;
    return ok;
}

/* The saved KV state as a witness of what the journal held: it is
 * written after the journal records it covers, so tokens it holds past
 * the transcript read back were lost with the journal's end. Asked only
 * when the metadata does not describe that state already (then the
 * metadata's counts are the witness, and a loss found here was told).
 * Counts user turns by the token every intact user record starts with.
 * Afterwards the metadata describes the state, so the loss is told once. */
static void snapshot_witness(session *s, const journal_scan *j, journal_loss *l)
{
    ds4_tokens w = { 0 };
    uint64_t bytes = 0;
    if (!snapshot_tokens(s, &w, &bytes) ||
        (s->meta.snap_file_bytes == bytes && s->meta.snap_tokens == w.n && w.n > 0)) {
        ds4_tokens_free(&w);
        return;
    }
    if (w.n > s->tx.n && (s->tx.n == 0 || !memcmp(w.ids, s->tx.ids, s->tx.n * sizeof *w.ids))) {
        l->tokens = w.n - s->tx.n;
        int32_t marker = -1;
        bool same = true;
        for (size_t i = 0; i < j->n; i++) {
            const journal_rec *r = &j->recs[i];
            if (r->kind != AGENT_TURN_USER || !r->n_tokens) continue;
            if (marker < 0) marker = r->tokens[0];
            same = same && r->tokens[0] == marker;
        }
        int users = 0;
        for (size_t i = s->tx.n; marker >= 0 && same && i < w.n; i++) users += w.ids[i] == marker;
        if (users > l->turns) l->turns = users;
        s->meta.snap_tokens = w.n;
        s->meta.snap_hash = session_tokens_hash(w.ids, w.n);
        s->meta.snap_file_bytes = bytes;
    }
    ds4_tokens_free(&w);
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
        /* with meta.json damaged too, the saved KV state is the one
         * witness left that there was a conversation */
        journal_scan none = { 0 };
        journal_loss loss = { 0 };
        snapshot_witness(s, &none, &loss);
        if (turns_before > 0 || loss.tokens) {
            strbuf b = { 0 };
            if (turns_before > 0) sb_printf(&b, "its %d user turns", turns_before);
            if (loss.tokens) sb_printf(&b, "%s%zu tokens (which the saved KV state still holds)", b.len ? " and " : "its ",
                                       loss.tokens);
            session_note(s, "the journal of session %s is missing: %s cannot be recovered", s->meta.info.id, sb_str(&b));
            sb_free(&b);
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
    journal_loss loss = { .turns = (int)j.lost_user > meta_lost ? (int)j.lost_user : meta_lost };
    /* records cut off at a record boundary leave no trace but the size */
    loss.bytes = j.skipped + j.torn + (bytes_before > j.file_size ? bytes_before - j.file_size : 0);
    bool shrunk = bytes_before > j.file_size;
    snapshot_witness(s, &j, &loss);
    /* A crash while appending leaves the start of one record: the turn it
     * belonged to never completed. Anything else lost something. */
    bool crash_tail = j.torn && j.torn_partial && !j.bad_header && !j.damaged_spans && meta_lost <= 0 && !shrunk &&
                      !loss.tokens;
    bool fresh = j.n == 0 && j.file_size < JOURNAL_HEADER_LEN && turns_before == 0 && !shrunk && !loss.tokens;
    /* only the saved state knows: the journal itself reads clean */
    bool short_only = loss.tokens && !j.bad_header && !j.damaged_spans && !j.torn && meta_lost <= 0 && !shrunk &&
                      j.n > 0;
    bool damaged = !fresh && !crash_tail &&
                   (j.bad_header || j.damaged_spans || j.torn || loss.turns > 0 || shrunk || loss.tokens);
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
    } else if (short_only && !inconsistent) {
        note_loss(s, &j, &loss, "was cut short", NULL, false);
        s->dirty = true;
    } else if (damaged || inconsistent) {
        char backup[PATH_MAX + 64];
        bool kept = keep_damaged(s, path, backup, sizeof backup);
        bool rewritten = kept && rewrite_journal(s, j.recs, j.n, path);
        if (damaged) {
            const char *what = j.file_size == 0 ? "is empty"
                               : j.n == 0       ? "holds no readable record"
                               : j.tail_garbage && !j.damaged_spans && !shrunk
                                   ? "ends in bytes that are no record (trailing garbage or a damaged tail)"
                               : (j.torn || shrunk || loss.tokens) && !j.damaged_spans ? "was cut short"
                                                                                       : "is damaged";
            note_loss(s, &j, &loss, what, kept ? backup : NULL, rewritten);
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
