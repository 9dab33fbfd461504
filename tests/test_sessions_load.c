/* Loading a session never loses anything silently: a journal cut at every
 * record boundary and inside every record, emptied, zero-filled, or with
 * its system prompt record damaged is reported in user turns and bytes,
 * kept beside as it was, repaired so that it does not warn again; a
 * journal that is a directory or a FIFO is refused at once with a clear
 * error (never opened blocking); a tool call whose result never reached
 * the journal is answered on resume. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

static const char *script_of(int n)
{
    const char **lines = test_alloc((size_t)(n + 1) * sizeof *lines);
    for (int i = 0; i < n; i++) lines[i] = script_line(test_printf("r%d</think>Answer %d.", i, i), NULL);
    lines[n] = NULL;
    return write_script(lines);
}

/* A session of three user turns, closed. */
static void three_turns(const char *id, const char *script)
{
    sess_agent x;
    sa_start(&x, script_engine(script), id, true);
    sa_turn(&x, "one");
    sa_turn(&x, "two");
    sa_turn(&x, "three");
    sa_stop(&x);
}

static char *slurp(const char *path, size_t *len)
{
    char *d = file_read_all(path, len);
    CHECK_MSG(d != NULL, "%s", path);
    return d;
}

static void put(const char *path, const char *data, size_t len)
{
    ds4_error err = { "" };
    CHECK_MSG(file_write_atomic(path, data, len, 0600, false, &err) == 0, "%s", err.msg);
}

static const char *opened_notes(const char *id)
{
    ds4_error err = { "" };
    session *s = session_open(id, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    const char *n = notes_of(s);
    session_close(s);
    return n;
}

static int damaged_copies(const char *id)
{
    DIR *d = opendir(sess_path(id, ""));
    CHECK(d != NULL);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += !strncmp(de->d_name, "journal.damaged-", 16);
    closedir(d);
    return n;
}

TEST(sessions_load, a_journal_cut_anywhere_reports_the_turns_and_bytes_lost_once)
{
    sessions_test_home();
    three_turns("cut", script_of(3));
    const char *jp = sess_path("cut", "journal"), *mp = sess_path("cut", "meta.json");
    size_t full, mlen;
    char *orig = slurp(jp, &full), *meta = slurp(mp, &mlen);
    journal_scan j;
    read_journal("cut", &j);
    /* where each record ends, and how many user turns end by then */
    size_t ends[64], users_by[64], total_users = 0;
    CHECK(j.n < 64);
    size_t off = JOURNAL_HEADER_LEN;
    for (size_t i = 0; i < j.n; i++) {
        strbuf b = { 0 };
        agent_turn t = journal_rec_turn(&j.recs[i]);
        journal_encode(&b, &t);
        off += b.len;
        sb_free(&b);
        total_users += j.recs[i].kind == AGENT_TURN_USER;
        ends[i] = off;
        users_by[i] = total_users;
    }
    CHECK_EQ_INT(off, full);
    size_t n_recs = j.n;
    journal_scan_free(&j);

    /* every boundary, and three places inside every record and the header */
    size_t cuts[256], n_cuts = 0;
    cuts[n_cuts++] = 0;
    cuts[n_cuts++] = 10;
    size_t start = JOURNAL_HEADER_LEN;
    for (size_t i = 0; i < n_recs; i++) {
        cuts[n_cuts++] = start;
        cuts[n_cuts++] = start + 5;
        cuts[n_cuts++] = start + JOURNAL_FRAME_LEN + 3;
        cuts[n_cuts++] = (start + ends[i]) / 2;
        start = ends[i];
    }
    for (size_t c = 0; c < n_cuts; c++) {
        size_t cut = cuts[c];
        put(jp, orig, full);
        put(mp, meta, mlen);
        CHECK_EQ_INT(truncate(jp, (off_t)cut), 0);
        size_t kept_end = cut < JOURNAL_HEADER_LEN ? 0 : JOURNAL_HEADER_LEN, kept_users = 0;
        for (size_t i = 0; i < n_recs && ends[i] <= cut; i++) {
            kept_end = ends[i];
            kept_users = users_by[i];
        }
        size_t lost = total_users - kept_users;
        int copies = damaged_copies("cut");
        const char *notes = opened_notes("cut");
        CHECK_MSG(notes[0], "cut at %zu of %zu: nothing said", cut, full);
        if (lost)
            CHECK_MSG(strstr(notes, test_printf("%zu user turn%s and", lost, lost == 1 ? "" : "s")) != NULL,
                      "cut at %zu: %zu user turns lost, the note says: %s", cut, lost, notes);
        else
            CHECK_CONTAINS(notes, "no whole user turn");
        CHECK_MSG(strstr(notes, test_printf(" %zu bytes", full - kept_end)) != NULL, "cut at %zu: %zu bytes lost: %s",
                  cut, full - kept_end, notes);
        CHECK_CONTAINS(notes, "the damaged original is");
        CHECK_EQ_INT(damaged_copies("cut"), copies + 1);
        /* repaired: the rest loads, adds up, and is not reported again */
        const char *want[] = { "", "one", "one|two", "one|two|three" };
        CHECK_STR_EQ(journal_users("cut"), want[kept_users]);
        check_journal_adds_up("cut");
        CHECK_STR_EQ(opened_notes("cut"), "");
    }

    /* a crash while appending a record after the last metadata write
     * leaves the start of that record: cut off with a line, nothing lost,
     * nothing kept beside */
    put(jp, orig, full);
    put(mp, meta, mlen);
    strbuf rec = { 0 };
    int32_t toks[3] = { 1, 2, 3 };
    agent_turn t = { .kind = AGENT_TURN_USER, .text = "four", .len = 4, .tokens = toks, .n_tokens = 3 };
    journal_encode(&rec, &t);
    strbuf torn = { 0 };
    sb_append(&torn, orig, full);
    sb_append(&torn, rec.s, rec.len / 2);
    put(jp, torn.s, torn.len);
    int copies = damaged_copies("cut");
    const char *notes = opened_notes("cut");
    CHECK_CONTAINS(notes, "was incomplete");
    CHECK_CONTAINS(notes, "no completed turn was lost");
    CHECK_EQ_INT(damaged_copies("cut"), copies);
    CHECK_EQ_INT(session_file_bytes(jp), full);
    CHECK_STR_EQ(opened_notes("cut"), "");
    sb_free(&rec);
    sb_free(&torn);
    free(orig);
    free(meta);
}

TEST(sessions_load, empty_tiny_and_zero_filled_journals_are_reported_and_kept)
{
    sessions_test_home();
    const char *script = script_of(8);
    three_turns("z", script);
    const char *jp = sess_path("z", "journal");
    size_t full;
    char *orig = slurp(jp, &full);

    /* zero-filled, as a crashed file system may leave it */
    char *zeros = calloc(1, full);
    put(jp, zeros, full);
    const char *notes = opened_notes("z");
    CHECK_CONTAINS(notes, "holds no readable record");
    CHECK_CONTAINS(notes, "3 user turns and");
    CHECK_CONTAINS(notes, test_printf("%zu bytes", full));
    char *out;
    CHECK_EQ_INT(test_runf(&out, "for f in '%s'/journal.damaged-*; do cmp -s -n %zu \"$f\" /dev/zero && "
                                 "[ $(stat -c %%s \"$f\") = %zu ] && echo same; done; true",
                           sess_path("z", ""), full, full),
                 0);
    CHECK_CONTAINS(out, "same");
    CHECK_STR_EQ(opened_notes("z"), "");
    free(zeros);

    /* emptied, then cut to ten bytes: each time the loss is said */
    three_turns("e", script);
    CHECK_EQ_INT(truncate(sess_path("e", "journal"), 0), 0);
    notes = opened_notes("e");
    CHECK_CONTAINS(notes, "is empty");
    CHECK_CONTAINS(notes, "3 user turns and");
    CHECK_STR_EQ(opened_notes("e"), "");
    three_turns("t", script);
    CHECK_EQ_INT(truncate(sess_path("t", "journal"), 10), 0);
    CHECK_CONTAINS(opened_notes("t"), "3 user turns and");
    CHECK_STR_EQ(opened_notes("t"), "");
    free(orig);
}

TEST(sessions_load, a_damaged_system_record_is_rebuilt_from_the_prompt)
{
    sessions_test_home();
    const char *script = script_of(4);
    three_turns("sys", script);
    journal_scan j;
    read_journal("sys", &j);
    CHECK(j.n > 0 && j.recs[0].kind == AGENT_TURN_SYSTEM);
    size_t sys_n = j.recs[0].n_tokens, total = 0;
    for (size_t i = 0; i < j.n; i++) total += j.recs[i].n_tokens;
    journal_scan_free(&j);
    /* a byte of the system record's tokens flipped */
    const char *jp = sess_path("sys", "journal");
    int fd = open(jp, O_RDWR);
    CHECK(fd >= 0);
    unsigned char c;
    off_t at = JOURNAL_HEADER_LEN + JOURNAL_FRAME_LEN + JOURNAL_BODY_FIXED + 8;
    CHECK_EQ_INT(pread(fd, &c, 1, at), 1);
    c ^= 0x5a;
    CHECK_EQ_INT(pwrite(fd, &c, 1, at), 1);
    close(fd);

    sess_agent x;
    sa_start(&x, script_engine(script), "sys", false);
    const char *notes = notes_of(x.s);
    CHECK_CONTAINS(notes, "no whole user turn");
    CHECK_CONTAINS(notes, "system prompt record");
    session_info info;
    session_get_info(x.s, &info);
    CHECK_EQ_INT(info.n_tokens, total);
    agent_status st;
    agent_get_status(x.a, &st);
    CHECK_EQ_INT(st.ctx_used, total);
    sa_turn(&x, "four");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);
    sa_stop(&x);
    read_journal("sys", &j);
    CHECK(j.recs[0].kind == AGENT_TURN_SYSTEM);
    CHECK_EQ_INT(j.recs[0].n_tokens, sys_n);
    journal_scan_free(&j);
    check_journal_adds_up("sys");
    CHECK_STR_EQ(journal_users("sys"), "one|two|three|four");
    CHECK_STR_EQ(opened_notes("sys"), "");
}

TEST(sessions_load, a_journal_that_is_a_directory_or_a_fifo_is_refused_at_once)
{
    sessions_test_home();
    const char *script = script_of(2);
    three_turns("odd", script);
    const char *jp = sess_path("odd", "journal");
    CHECK_EQ_INT(unlink(jp), 0);
    CHECK_EQ_INT(mkdir(jp, 0700), 0);
    ds4_error err = { "" };
    session *s = session_open("odd", &err);
    CHECK(s == NULL);
    CHECK_CONTAINS(err.msg, "is a directory");
    CHECK_CONTAINS(err.msg, jp);
    /* the lock went with the refusal */
    CHECK(!session_locked(sess_path("odd", "")));

    CHECK_EQ_INT(rmdir(jp), 0);
    CHECK_EQ_INT(mkfifo(jp, 0600), 0);
    double t0 = test_now_ms();
    s = session_open("odd", &err);
    CHECK(s == NULL);
    CHECK_CONTAINS(err.msg, "is a FIFO");
    /* listing it (metadata gone: rebuilt from the journal) does not hang either */
    CHECK_EQ_INT(unlink(sess_path("odd", "meta.json")), 0);
    session_info *v;
    CHECK(sessions_list(&v, &err) >= 0);
    free(v);
    CHECK(test_now_ms() - t0 < 5000);

    /* a saved KV state that is a FIFO is not waited on: read again */
    three_turns("kvf", script_of(4));
    CHECK_EQ_INT(unlink(sess_path("kvf", "state.kv")), 0);
    CHECK_EQ_INT(mkfifo(sess_path("kvf", "state.kv"), 0600), 0);
    sess_agent x;
    sa_start(&x, script_engine(script_of(4)), "kvf", false);
    CHECK_CONTAINS(notes_of(x.s), "reading its");
    sa_stop(&x);

    /* -p refuses it with the reason, also in stream-json's result */
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --resume odd -p x "
                             "--output-format stream-json 2>/dev/null",
                       test_tmpdir(), test_bindir(), agent_test_model(), script);
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "\"type\":\"result\"");
    CHECK_CONTAINS(out, "is a FIFO");
}

/* ds4cl -p in the test's directory over script, every call allowed. */
static int run_p(char **out, const char *script, const char *flags)
{
    return test_runf(out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --yes %s 2>&1", test_tmpdir(),
                     test_bindir(), agent_test_model(), script, flags);
}

/* The session as a kill -9 during its last tool call leaves it: the
 * journal ends with the reply that made the call, the metadata is the one
 * of the turn before. */
static void kill_during_the_call(const char *id, const char *script, const char *call_block)
{
    char *out;
    CHECK_EQ_INT(run_p(&out, script, test_printf("--session %s -p one", id)), 0);
    size_t mlen;
    char *meta = slurp(sess_path(id, "meta.json"), &mlen);
    CHECK_EQ_INT(run_p(&out, script, test_printf("--session %s -p two", id)), 0);
    journal_scan j;
    read_journal(id, &j);
    size_t off = JOURNAL_HEADER_LEN, cut = 0;
    bool after_two = false;
    for (size_t i = 0; i < j.n && !cut; i++) {
        strbuf b = { 0 };
        agent_turn t = journal_rec_turn(&j.recs[i]);
        journal_encode(&b, &t);
        off += b.len;
        sb_free(&b);
        if (j.recs[i].kind == AGENT_TURN_USER) after_two = !strcmp(j.recs[i].text, "two");
        if (after_two && j.recs[i].kind == AGENT_TURN_ASSISTANT && strstr(j.recs[i].text, call_block)) cut = off;
    }
    journal_scan_free(&j);
    CHECK_MSG(cut > 0, "no call in the journal of %s", id);
    CHECK_EQ_INT(truncate(sess_path(id, "journal"), (off_t)cut), 0);
    put(sess_path(id, "meta.json"), meta, mlen);
    unlink(sess_path(id, "state.kv"));
    free(meta);
}

/* The result the resumed session gave the call, and the journal's order. */
static const char *answered_call(const char *id, const char *tool)
{
    journal_scan j;
    read_journal(id, &j);
    const char *result = NULL;
    for (size_t i = 1; i < j.n && !result; i++) {
        if (j.recs[i].kind != AGENT_TURN_TOOL || j.recs[i - 1].kind != AGENT_TURN_ASSISTANT) continue;
        if (!strstr(j.recs[i - 1].text, "DSML") || j.recs[i].n_calls != 1 || strcmp(j.recs[i].calls[0].name, tool))
            continue;
        if (strstr(j.recs[i].calls[0].result, "may or may not")) result = test_strdup(j.recs[i].calls[0].result);
    }
    journal_scan_free(&j);
    CHECK_MSG(result != NULL, "no answered %s call in the journal", tool);
    return result;
}

TEST(sessions_load, a_call_killed_before_its_result_was_saved_is_answered_on_resume)
{
    sessions_test_home();
    const char *wblock = dsml_block("write", "path", "f.txt", "content", "hello\n", NULL);
    const char *wlines[] = {
        script_line("a</think>First.", NULL),
        script_line(test_printf("b</think>Writing.%s", wblock), NULL),
        script_line("c</think>Written.", NULL),
        script_line("d</think>Resumed.", NULL),
        script_line("e</think>Resumed.", NULL),
        NULL,
    };
    const char *script = write_script(wlines);
    kill_during_the_call("w", script, "f.txt");
    char *out;
    int rc = run_p(&out, script, "--session w -p three --output-format stream-json");
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "got no result");
    const char *r = answered_call("w", "write");
    CHECK_CONTAINS(r, "f.txt now holds exactly the content of this call");
    CHECK_STR_EQ(journal_users("w"), "one|two|three");

    /* an edit whose file is as it was before the call */
    test_write_file(test_tmp_path("g.txt"), "old text\n", 9);
    const char *eblock = dsml_block("edit", "path", "g.txt", "old", "old text", "new", "new text", NULL);
    const char *elines[] = {
        script_line("a</think>First.", NULL),
        script_line(test_printf("b</think>Editing.%s", eblock), NULL),
        script_line("c</think>Edited.", NULL),
        script_line("d</think>Resumed.", NULL),
        script_line("e</think>Resumed.", NULL),
        NULL,
    };
    script = write_script(elines);
    kill_during_the_call("e", script, "g.txt");
    test_write_file(test_tmp_path("g.txt"), "old text\n", 9);
    rc = run_p(&out, script, "--session e -p three --output-format stream-json");
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    r = answered_call("e", "edit");
    CHECK_CONTAINS(r, "still holds the old text and not the new: the edit did not take effect");
    /* answered once: a later resume adds nothing */
    rc = run_p(&out, script, "--session e -p four --output-format stream-json");
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK(strstr(out, "got no result") == NULL);
}

/* Where the n-th (0-based) user record of a journal starts. */
static size_t user_record_at(const char *id, int nth)
{
    journal_scan j;
    read_journal(id, &j);
    size_t off = JOURNAL_HEADER_LEN, at = 0;
    int seen = 0;
    for (size_t i = 0; i < j.n; i++) {
        if (j.recs[i].kind == AGENT_TURN_USER && seen++ == nth) {
            at = off;
            break;
        }
        strbuf b = { 0 };
        agent_turn t = journal_rec_turn(&j.recs[i]);
        journal_encode(&b, &t);
        off += b.len;
        sb_free(&b);
    }
    journal_scan_free(&j);
    CHECK_MSG(at > 0, "session %s has no user record %d", id, nth);
    return at;
}

TEST(sessions_load, a_cut_journal_with_garbage_metadata_is_told_from_the_saved_kv_state)
{
    sessions_test_home();
    const char *script = script_of(3);
    three_turns("df", script);
    const char *jp = sess_path("df", "journal"), *mp = sess_path("df", "meta.json");
    size_t full;
    char *orig = slurp(jp, &full);
    size_t third = user_record_at("df", 2);
    /* the journal cut where the third turn starts, inside its first
     * record, and halfway through it; the metadata unreadable each time:
     * the snapshot (written after the third turn) is the witness */
    size_t cuts[] = { third, third + 7, third + JOURNAL_FRAME_LEN + 5 };
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        put(jp, orig, full);
        CHECK_EQ_INT(truncate(jp, (off_t)cuts[c]), 0);
        test_write_file(mp, "{\"id\": garbage", 14);
        const char *notes = opened_notes("df");
        CHECK_MSG(strstr(notes, "no completed turn was lost") == NULL, "cut at %zu: %s", cuts[c], notes);
        CHECK_MSG(strstr(notes, "1 user turn and") != NULL, "cut at %zu: %s", cuts[c], notes);
        CHECK_MSG(strstr(notes, " tokens") != NULL, "cut at %zu: %s", cuts[c], notes);
        CHECK_CONTAINS(notes, "rebuilt from the journal");
        CHECK_STR_EQ(journal_users("df"), "one|two");
        check_journal_adds_up("df");
        /* told once */
        CHECK_STR_EQ(opened_notes("df"), "");
    }

    /* two turns gone: both counted */
    put(jp, orig, full);
    CHECK_EQ_INT(truncate(jp, (off_t)user_record_at("df", 1)), 0);
    test_write_file(mp, "garbage", 7);
    CHECK_CONTAINS(opened_notes("df"), "2 user turns and");
    CHECK_STR_EQ(journal_users("df"), "one");

    /* the same loss found by listing first (which rebuilds the metadata
     * from the journal) is still told when the session opens */
    put(jp, orig, full);
    CHECK_EQ_INT(truncate(jp, (off_t)third), 0);
    test_write_file(mp, "[1, 2", 5);
    session_info *v;
    ds4_error err = { "" };
    int n = sessions_list(&v, &err);
    CHECK_MSG(n == 1, "%s", err.msg);
    CHECK_EQ_INT(v[0].user_turns, 2);
    free(v);
    CHECK_CONTAINS(opened_notes("df"), "1 user turn and");
    CHECK_STR_EQ(opened_notes("df"), "");
    free(orig);
}

TEST(sessions_load, a_damaged_metadata_file_is_kept_beside_and_wrong_types_count_as_damage)
{
    sessions_test_home();
    three_turns("dm", script_of(3));
    const char *mp = sess_path("dm", "meta.json");
    size_t mlen;
    char *good = slurp(mp, &mlen);
    /* values of the wrong type or out of range: damage, not defaults */
    static const char *const bad[] = {
        "\"ctx\": -1", "\"user_turns\": -5", "\"tokens\": -3", "\"user_turns\": \"3\"", "\"created\": -1",
        "\"snapshot\": 7",
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        const char *text;
        if (!strncmp(bad[k], "\"ctx\"", 5)) text = test_printf("{\"id\":\"dm\",\"created\":1,\"settings\":{%s}}", bad[k]);
        else if (!strncmp(bad[k], "\"created\"", 9)) text = test_printf("{\"id\":\"dm\",%s}", bad[k]);
        else text = test_printf("{\"id\":\"dm\",\"created\":1,%s}", bad[k]);
        session_meta m;
        CHECK_MSG(session_meta_parse(text, strlen(text), &m) == -1, "accepted: %s", text);
        put(mp, text, strlen(text));
        const char *notes = opened_notes("dm");
        CHECK_MSG(strstr(notes, "rebuilt from the journal") != NULL, "%s: %s", text, notes);
        CHECK_MSG(strstr(notes, "meta.json.damaged-") != NULL, "%s: %s", text, notes);
        char *out;
        CHECK_EQ_INT(test_runf(&out, "cat '%s'/meta.json.damaged-* | grep -c -F '%s'; true", sess_path("dm", ""),
                               bad[k]),
                     0);
        CHECK_MSG(atoi(out) >= 1, "the damaged original of %s was not kept", text);
        CHECK_STR_EQ(opened_notes("dm"), "");
        test_runf(&out, "rm -f '%s'/meta.json.damaged-*", sess_path("dm", ""));
    }
    /* listing rebuilds it too, and keeps the original as well */
    test_write_file(mp, "[1, 2", 5);
    session_info *v;
    ds4_error err = { "" };
    CHECK_EQ_INT(sessions_list(&v, &err), 1);
    free(v);
    char *out;
    CHECK_EQ_INT(test_runf(&out, "cat '%s'/meta.json.damaged-*", sess_path("dm", "")), 0);
    CHECK_STR_EQ(out, "[1, 2");
    /* the settings as written are accepted as ever */
    session_meta m;
    CHECK_EQ_INT(session_meta_parse(good, mlen, &m), 0);
    free(good);
}

TEST(sessions_load, garbage_after_the_last_record_is_not_called_a_cut)
{
    sessions_test_home();
    three_turns("tg", script_of(3));
    const char *jp = sess_path("tg", "journal");
    size_t full;
    char *orig = slurp(jp, &full);
    static const char *const junk[] = { "hello world, this is not a record\n", "xyz" };
    for (size_t k = 0; k < 2; k++) {
        strbuf b = { 0 };
        sb_append(&b, orig, full);
        sb_puts(&b, junk[k]);
        put(jp, b.s, b.len);
        sb_free(&b);
        const char *notes = opened_notes("tg");
        CHECK_MSG(strstr(notes, "cut short") == NULL && strstr(notes, "was incomplete") == NULL, "%s", notes);
        CHECK_CONTAINS(notes, "trailing garbage");
        CHECK_CONTAINS(notes, test_printf("%zu bytes", strlen(junk[k])));
        CHECK_CONTAINS(notes, "no whole user turn");
        CHECK_EQ_INT(session_file_bytes(jp), full);
        CHECK_STR_EQ(opened_notes("tg"), "");
    }
    free(orig);
}

TEST(sessions_load, an_empty_kv_state_file_is_called_empty_not_missing)
{
    sessions_test_home();
    const char *script = script_of(6);
    three_turns("ek", script);
    const char *kv = sess_path("ek", "state.kv");
    CHECK(session_file_bytes(kv) > 0);
    CHECK_EQ_INT(truncate(kv, 0), 0);
    sess_agent x;
    sa_start(&x, script_engine(script), "ek", false);
    const char *notes = notes_of(x.s);
    CHECK_CONTAINS(notes, "state.kv is empty");
    CHECK_MSG(strstr(notes, "disk budget") == NULL && strstr(notes, "never written") == NULL, "%s", notes);
    sa_stop(&x);
    /* gone: that is what the budget does */
    CHECK_EQ_INT(unlink(kv), 0);
    sa_start(&x, script_engine(script), "ek", false);
    CHECK_CONTAINS(notes_of(x.s), "no saved KV state");
    CHECK(strstr(notes_of(x.s), "is empty") == NULL);
    sa_stop(&x);
}

TEST(sessions_load, a_missing_journal_with_garbage_metadata_is_told_and_the_session_kept)
{
    sessions_test_home();
    three_turns("mj", script_of(3));
    CHECK_EQ_INT(unlink(sess_path("mj", "journal")), 0);
    test_write_file(sess_path("mj", "meta.json"), "[1, 2", 5);
    /* listing does not take it for a directory that never got a turn,
     * even once it is older than a session being created */
    char *out;
    CHECK_EQ_INT(test_runf(&out, "touch -d '-2 hours' '%s'", sess_path("mj", "")), 0);
    session_info *v;
    ds4_error err = { "" };
    CHECK(sessions_list(&v, &err) >= 0);
    free(v);
    CHECK(session_file_bytes(sess_path("mj", "state.kv")) > 0);
    const char *notes = opened_notes("mj");
    CHECK_CONTAINS(notes, "the journal of session mj is missing");
    CHECK_CONTAINS(notes, "tokens (which the saved KV state still holds)");
}
