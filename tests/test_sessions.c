/* Sessions without an agent: the journal format (round trip, torn
 * tails, damage anywhere), titles, IDs, the budget setting, listing,
 * prefixes, locks, deletion and snapshot eviction. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

/* ---- journal ---------------------------------------------------------------------- */

static const int32_t toks_a[] = { 1, 2, 3, 4, 5 };
static const int32_t toks_b[] = { 7, 8, 9 };
static const int32_t toks_c[] = { 10, 11 };

/* A journal of four records: SYSTEM, USER, ASSISTANT, TOOL. */
static void put_rec(strbuf *b, agent_turn_kind kind, const char *text, const int32_t *toks, size_t n, size_t total)
{
    agent_turn t = { .kind = kind, .text = text, .len = strlen(text), .tokens = toks, .n_tokens = n, .transcript_len = total };
    journal_encode(b, &t);
}

static const agent_tool_call sample_calls[] = {
    { "read", "{\"path\":\"a.c\"}", "int x;", false, false },
    { "bash", "{\"command\":\"rm -rf /\"}", "refused", true, true },
};

static strbuf sample_journal(void)
{
    strbuf b = { 0 };
    journal_encode_header(&b);
    put_rec(&b, AGENT_TURN_SYSTEM, "", toks_a, 5, 5);
    put_rec(&b, AGENT_TURN_USER, "hello", toks_b, 3, 8);
    put_rec(&b, AGENT_TURN_ASSISTANT, "reply \xe2\x9c\x93", toks_c, 2, 10);
    agent_turn t = { .kind = AGENT_TURN_TOOL, .text = "Tool result 1", .len = 13, .tokens = toks_b, .n_tokens = 3,
                     .transcript_len = 13, .calls = sample_calls, .n_calls = 2 };
    journal_encode(&b, &t);
    return b;
}

static void check_record(const journal_rec *r, agent_turn_kind kind, const char *text, const int32_t *t, size_t n)
{
    CHECK_EQ_INT(r->kind, kind);
    CHECK_STR_EQ(r->text, text);
    CHECK_EQ_INT(r->n_tokens, n);
    CHECK(!memcmp(r->tokens, t, n * sizeof *t));
}

TEST(sessions_journal, round_trip)
{
    strbuf b = sample_journal();
    journal_scan j;
    journal_parse((const unsigned char *)b.s, b.len, &j);
    CHECK_EQ_INT(j.n, 4);
    CHECK(!j.bad_header && j.damaged_spans == 0 && j.torn == 0);
    CHECK_EQ_INT(j.valid_end, b.len);
    check_record(&j.recs[0], AGENT_TURN_SYSTEM, "", toks_a, 5);
    check_record(&j.recs[1], AGENT_TURN_USER, "hello", toks_b, 3);
    check_record(&j.recs[2], AGENT_TURN_ASSISTANT, "reply \xe2\x9c\x93", toks_c, 2);
    check_record(&j.recs[3], AGENT_TURN_TOOL, "Tool result 1", toks_b, 3);
    CHECK_EQ_INT(j.recs[3].transcript_len, 13);
    CHECK_EQ_INT(j.recs[2].n_calls, 0);
    CHECK_EQ_INT(j.recs[3].n_calls, 2);
    CHECK_STR_EQ(j.recs[3].calls[0].name, "read");
    CHECK_STR_EQ(j.recs[3].calls[0].args_json, "{\"path\":\"a.c\"}");
    CHECK_STR_EQ(j.recs[3].calls[0].result, "int x;");
    CHECK(!j.recs[3].calls[0].is_error && !j.recs[3].calls[0].denied);
    CHECK_STR_EQ(j.recs[3].calls[1].name, "bash");
    CHECK(j.recs[3].calls[1].is_error && j.recs[3].calls[1].denied);
    journal_scan_free(&j);
    sb_free(&b);
}

TEST(sessions_journal, every_torn_tail_keeps_the_complete_records)
{
    strbuf b = sample_journal();
    /* where each record ends */
    journal_scan full;
    journal_parse((const unsigned char *)b.s, b.len, &full);
    for (size_t cut = 0; cut <= b.len; cut++) {
        journal_scan j;
        journal_parse((const unsigned char *)b.s, cut, &j);
        /* the records that lie entirely before the cut */
        strbuf prefix = { 0 };
        journal_encode_header(&prefix);
        size_t expect = 0;
        for (size_t k = 0; k < full.n; k++) {
            const journal_rec *r = &full.recs[k];
            strbuf one = { 0 };
            agent_turn t = journal_rec_turn(r);
            journal_encode(&one, &t);
            bool fits = prefix.len + one.len <= cut;
            if (fits) {
                sb_append(&prefix, one.s, one.len);
                expect++;
            }
            sb_free(&one);
            if (!fits) break;
        }
        CHECK_MSG(j.n == expect, "cut at %zu: %zu records, expected %zu", cut, j.n, expect);
        CHECK_EQ_INT(j.damaged_spans, 0);
        if (cut >= 16) CHECK_EQ_INT(j.valid_end + j.torn, cut);
        for (size_t k = 0; k < j.n; k++) CHECK_STR_EQ(j.recs[k].text, full.recs[k].text);
        sb_free(&prefix);
        journal_scan_free(&j);
    }
    journal_scan_free(&full);
    sb_free(&b);
}

TEST(sessions_journal, a_flipped_byte_anywhere_loses_at_most_its_record)
{
    strbuf b = sample_journal();
    journal_scan full;
    journal_parse((const unsigned char *)b.s, b.len, &full);
    for (size_t pos = 0; pos < b.len; pos++) {
        for (int bit = 0; bit < 8; bit += 3) {
            unsigned char *copy = test_alloc(b.len);
            memcpy(copy, b.s, b.len);
            copy[pos] ^= (unsigned char)(1u << bit);
            journal_scan j;
            journal_parse(copy, b.len, &j);
            /* every record read is one of the originals, in order */
            size_t k = 0;
            for (size_t i = 0; i < j.n; i++) {
                while (k < full.n && strcmp(full.recs[k].text, j.recs[i].text)) k++;
                CHECK_MSG(k < full.n, "byte %zu bit %d: a record that was never written", pos, bit);
                CHECK_EQ_INT(j.recs[i].n_tokens, full.recs[k].n_tokens);
                k++;
            }
            CHECK_MSG(j.n + 1 >= full.n, "byte %zu bit %d: %zu of %zu records kept", pos, bit, j.n, full.n);
            CHECK(j.n == full.n || j.damaged_spans > 0 || j.torn > 0 || j.bad_header);
            journal_scan_free(&j);
        }
    }
    journal_scan_free(&full);
    sb_free(&b);
}

TEST(sessions_journal, garbage_and_empty_files)
{
    unsigned char junk[4096];
    srand(7);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    journal_scan j;
    journal_parse(junk, sizeof junk, &j);
    CHECK_EQ_INT(j.n, 0);
    CHECK(j.bad_header);
    journal_scan_free(&j);
    journal_parse(junk, 0, &j);
    CHECK_EQ_INT(j.n, 0);
    CHECK(!j.bad_header && j.torn == 0);
    journal_scan_free(&j);
    /* a valid record after garbage is still found */
    strbuf b = { 0 };
    sb_append(&b, (const char *)junk, 100);
    put_rec(&b, AGENT_TURN_USER, "survivor", toks_b, 3, 3);
    journal_parse((const unsigned char *)b.s, b.len, &j);
    CHECK_EQ_INT(j.n, 1);
    CHECK_STR_EQ(j.recs[0].text, "survivor");
    journal_scan_free(&j);
    sb_free(&b);
    errno = 0;
    CHECK(journal_read(test_tmp_path("absent"), &j) == -1 && errno == ENOENT);
}

/* ---- small pieces ------------------------------------------------------------------- */

TEST(sessions_store, titles_ids_and_budget)
{
    char t[SESSION_TITLE_MAX];
    const char *p = "  fix\tthe\n\n parser   bug  ";
    session_title_from_text(t, sizeof t, p, strlen(p));
    CHECK_STR_EQ(t, "fix the parser bug");
    /* clipped on a character boundary: 3-byte characters, 10-byte room */
    const char *u = "\xe2\x9c\x93\xe2\x9c\x93\xe2\x9c\x93\xe2\x9c\x93";
    session_title_from_text(t, 10, u, strlen(u));
    CHECK_STR_EQ(t, "\xe2\x9c\x93\xe2\x9c\x93\xe2\x9c\x93");
    session_title_from_text(t, 9, u, strlen(u));
    CHECK_STR_EQ(t, "\xe2\x9c\x93\xe2\x9c\x93");

    CHECK(session_id_valid("a1b2c3d4"));
    CHECK(session_id_valid("my-task_2.v1"));
    CHECK(!session_id_valid(""));
    CHECK(!session_id_valid(".hidden"));
    CHECK(!session_id_valid("../etc"));
    CHECK(!session_id_valid("a/b"));
    CHECK(!session_id_valid("sp ace"));
    CHECK(!session_id_valid("\xc3\xa9t\xc3\xa9"));
    char longid[80];
    memset(longid, 'x', 64);
    longid[64] = 0;
    CHECK(session_id_valid(longid));
    longid[64] = 'x';
    longid[65] = 0;
    CHECK(!session_id_valid(longid));

    char warn[256];
    unsetenv("DS4CL_SESSION_BUDGET");
    CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 20ull << 30);
    setenv("DS4CL_SESSION_BUDGET", "512M", 1);
    CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 512ull << 20);
    setenv("DS4CL_SESSION_BUDGET", "2GiB", 1);
    CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 2ull << 30);
    setenv("DS4CL_SESSION_BUDGET", "12345", 1);
    CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 12345);
    setenv("DS4CL_SESSION_BUDGET", "0", 1);
    CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 0);
    CHECK_STR_EQ(warn, "");
    static const char *const bad[] = { "lots", "-5", "5X", "99999999999999999999T", "1Gx" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("DS4CL_SESSION_BUDGET", bad[i], 1);
        CHECK_EQ_INT(sessions_budget(warn, sizeof warn), 20ull << 30);
        CHECK_CONTAINS(warn, "not a size");
    }
}

/* A session with records written through its hooks' format: a journal
 * and metadata as ds4cl leaves them. */
static void fake_session(const char *id, const char *title, const char *cwd, int64_t updated, size_t snapshot_bytes)
{
    char dir[4096];
    CHECK(session_dir_of(id, dir, sizeof dir) != NULL);
    CHECK_EQ_INT(base_mkdir_p(dir, 0700), 0);
    strbuf b = { 0 };
    journal_encode_header(&b);
    put_rec(&b, AGENT_TURN_SYSTEM, "", toks_a, 5, 5);
    put_rec(&b, AGENT_TURN_USER, title, toks_b, 3, 8);
    test_write_file(test_printf("%s/journal", dir), b.s, b.len);
    sb_free(&b);
    session_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.info.id, sizeof m.info.id, "%s", id);
    snprintf(m.info.title, sizeof m.info.title, "%s", title);
    snprintf(m.info.cwd, sizeof m.info.cwd, "%s", cwd);
    m.info.created = m.info.updated = updated;
    m.info.user_turns = 1;
    m.info.n_tokens = 8;
    ds4_error err = { "" };
    CHECK_MSG(session_meta_write(dir, &m, &err) == 0, "%s", err.msg);
    if (snapshot_bytes) {
        char *junk = test_alloc(snapshot_bytes);
        memset(junk, 'k', snapshot_bytes);
        test_write_file(test_printf("%s/state.kv", dir), junk, snapshot_bytes);
        struct timespec ts[2] = { { updated, 0 }, { updated, 0 } };
        CHECK_EQ_INT(utimensat(AT_FDCWD, test_printf("%s/state.kv", dir), ts, 0), 0);
    }
}

TEST(sessions_store, list_resolve_and_format)
{
    sessions_test_home();
    int64_t now = base_wall_time_s();
    fake_session("aa11", "first task", "/w/one", now - 7200, 0);
    fake_session("aa22", "second task", "/w/two", now - 60, 100);
    fake_session("bb33", "third\ttask", "/w/one", now - 5, 0);
    /* an empty directory (a session that never got a turn), old and new */
    char dir[4096];
    session_dir_of("cc44", dir, sizeof dir);
    base_mkdir_p(dir, 0700);
    struct timespec old[2] = { { now - 3600, 0 }, { now - 3600, 0 } };
    utimensat(AT_FDCWD, dir, old, 0);
    session_dir_of("cc55", dir, sizeof dir);
    base_mkdir_p(dir, 0700);

    session_info *v;
    ds4_error err = { "" };
    int n = sessions_list(&v, &err);
    CHECK_MSG(n == 3, "%d sessions: %s", n, err.msg);
    CHECK_STR_EQ(v[0].id, "bb33");
    CHECK_STR_EQ(v[1].id, "aa22");
    CHECK_STR_EQ(v[2].id, "aa11");
    CHECK_STR_EQ(v[0].title, "third\ttask");
    CHECK_EQ_INT(v[1].snapshot_bytes, 100);
    CHECK(!v[0].in_use);
    char *text = sessions_format_list(v, (size_t)n, 2, "aa22");
    /* ID, age, tokens, title; then the directory */
    CHECK_CONTAINS(text, "* aa22        1m       8  second task\n");
    CHECK_CONTAINS(text, "\n           /w/two\n");
    CHECK_CONTAINS(text, "and 1 more");
    CHECK(strstr(text, "first task") == NULL);
    free(text);
    free(v);
    /* the stale empty directory is gone, the fresh one (maybe being
     * created right now) stays */
    session_dir_of("cc44", dir, sizeof dir);
    CHECK(access(dir, F_OK) != 0);
    session_dir_of("cc55", dir, sizeof dir);
    CHECK(access(dir, F_OK) == 0);

    char id[SESSION_ID_MAX];
    CHECK_EQ_INT(sessions_resolve("bb", id, sizeof id, &err), 0);
    CHECK_STR_EQ(id, "bb33");
    CHECK_EQ_INT(sessions_resolve("aa11", id, sizeof id, &err), 0);
    CHECK_STR_EQ(id, "aa11");
    CHECK_EQ_INT(sessions_resolve("aa", id, sizeof id, &err), -1);
    CHECK_CONTAINS(err.msg, "matches 2 sessions");
    CHECK_CONTAINS(err.msg, "aa11");
    CHECK_EQ_INT(sessions_resolve("zz", id, sizeof id, &err), -1);
    CHECK_CONTAINS(err.msg, "no session \"zz\"");
    CHECK_EQ_INT(sessions_resolve("../x", id, sizeof id, &err), -1);
    CHECK_CONTAINS(err.msg, "not a session ID");
}

TEST(sessions_store, metadata_lost_or_garbage_is_rebuilt_from_the_journal)
{
    sessions_test_home();
    fake_session("m1", "keep this title", "/w", base_wall_time_s(), 0);
    fake_session("m2", "another", "/w", base_wall_time_s(), 0);
    test_write_file(sess_path("m1", "meta.json"), "{\"id\": \"m1\", garbage", 20);
    CHECK_EQ_INT(unlink(sess_path("m2", "meta.json")), 0);
    session_info *v;
    ds4_error err = { "" };
    int n = sessions_list(&v, &err);
    CHECK_EQ_INT(n, 2);
    for (int i = 0; i < n; i++) {
        CHECK(v[i].meta_missing);
        CHECK_EQ_INT(v[i].user_turns, 1);
        CHECK_EQ_INT(v[i].n_tokens, 8);
    }
    CHECK(!strcmp(v[0].title, "keep this title") || !strcmp(v[1].title, "keep this title"));
    free(v);
    /* repaired on the way */
    session_meta m;
    char dir[4096];
    session_dir_of("m1", dir, sizeof dir);
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
    CHECK_STR_EQ(m.info.title, "keep this title");
    /* opening says what happened */
    fake_session("m3", "third", "/w", base_wall_time_s(), 0);
    test_write_file(sess_path("m3", "meta.json"), "\x01\x02\x03", 3);
    session *s = session_open("m3", &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    CHECK_CONTAINS(notes_of(s), "rebuilt from the journal");
    session_info info;
    session_get_info(s, &info);
    CHECK_STR_EQ(info.title, "third");
    session_close(s);
    CHECK_EQ_INT(session_meta_read(dir, &m), 0);
}

TEST(sessions_store, locks_delete_and_ids)
{
    sessions_test_home();
    ds4_error err = { "" };
    session *s = session_create("held", "/w", &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    CHECK_STR_EQ(session_id(s), "held");
    CHECK(session_create("held", "/w", &err) == NULL);
    CHECK_CONTAINS(err.msg, "exists already");
    CHECK(session_open("held", &err) == NULL);
    CHECK_CONTAINS(err.msg, "open in another ds4cl process");
    CHECK_EQ_INT(sessions_delete("held", &err), -1);
    CHECK_CONTAINS(err.msg, "is open");
    CHECK(session_create("bad/name", "/w", &err) == NULL);
    CHECK_CONTAINS(err.msg, "not a session ID");
    CHECK(session_open("nothere", &err) == NULL);
    CHECK_CONTAINS(err.msg, "no session");
    /* never got a user turn: gone when closed */
    char dir[4096];
    session_dir_of("held", dir, sizeof dir);
    session_close(s);
    CHECK(access(dir, F_OK) != 0);

    fake_session("del1", "to delete", "/w", base_wall_time_s(), 10);
    CHECK_EQ_INT(sessions_delete("del1", &err), 0);
    session_dir_of("del1", dir, sizeof dir);
    CHECK(access(dir, F_OK) != 0);
    CHECK_EQ_INT(sessions_delete("del1", &err), -1);
    CHECK_CONTAINS(err.msg, "no session");

    /* generated IDs are distinct */
    session *a = session_create(NULL, "/w", &err), *b = session_create(NULL, "/w", &err);
    CHECK(a && b);
    CHECK(strcmp(session_id(a), session_id(b)) != 0);
    CHECK(session_id_valid(session_id(a)));
    session_close(a);
    session_close(b);

    session_request rq = { .resume = true, .cwd = "/w" };
    session *out;
    CHECK_EQ_INT(session_open_request(&rq, &out, &err), SESSION_OPEN_PICK);
    rq.session_id = "x";
    CHECK_EQ_INT(session_open_request(&rq, &out, &err), SESSION_OPEN_ERROR);
    CHECK_CONTAINS(err.msg, "exclude each other");
}

TEST(sessions_store, budget_evicts_least_recently_used_snapshots_only)
{
    sessions_test_home();
    int64_t now = base_wall_time_s();
    fake_session("old", "old", "/w", now - 300, 4000);
    fake_session("mid", "mid", "/w", now - 200, 4000);
    fake_session("new", "new", "/w", now - 100, 4000);
    fake_session("open", "open", "/w", now - 400, 4000);
    ds4_error err = { "" };
    session *held = session_open("open", &err);
    CHECK_MSG(held != NULL, "%s", err.msg);
    /* a cached system prompt, used long ago */
    char cache[4096];
    CHECK(session_sysprompt_cache_dir(cache, sizeof cache) != NULL);
    const char *sp = test_printf("%s/%064d.kv", cache, 0);
    char *junk = test_alloc(3000);
    memset(junk, 's', 3000);
    test_write_file(sp, junk, 3000);
    struct timespec ts[2] = { { now - 250, 0 }, { now - 250, 0 } };
    utimensat(AT_FDCWD, sp, ts, 0);

    /* 19000 bytes in all; 10000 allowed: the open one stays, then the
     * oldest go first (old 4000, the cache 3000, mid 4000) */
    uint64_t freed = sessions_enforce_budget(10000);
    CHECK_EQ_INT(freed, 11000);
    CHECK(access(sess_path("old", "state.kv"), F_OK) != 0);
    CHECK(access(sp, F_OK) != 0);
    CHECK(access(sess_path("mid", "state.kv"), F_OK) != 0);
    CHECK(access(sess_path("new", "state.kv"), F_OK) == 0);
    CHECK(access(sess_path("open", "state.kv"), F_OK) == 0);
    /* journals and metadata stay */
    CHECK(access(sess_path("old", "journal"), F_OK) == 0);
    CHECK(access(sess_path("old", "meta.json"), F_OK) == 0);
    /* a budget of 0 keeps only what is open */
    CHECK_EQ_INT(sessions_enforce_budget(0), 4000);
    CHECK(access(sess_path("open", "state.kv"), F_OK) == 0);
    session_close(held);
    CHECK_EQ_INT(sessions_enforce_budget(0), 4000);
}

TEST(sessions_store, budget_counts_a_shared_snapshot_once_and_clears_leftovers)
{
    sessions_test_home();
    int64_t now = base_wall_time_s();
    fake_session("parent", "p", "/w", now - 300, 4000);
    fake_session("other", "o", "/w", now - 100, 4000);
    /* a fork shares its parent's snapshot through a hard link */
    fake_session("child", "p", "/w", now - 200, 0);
    CHECK_EQ_INT(link(sess_path("parent", "state.kv"), sess_path("child", "state.kv")), 0);
    /* 8000 bytes on disk: within a budget of 9000, nothing goes */
    CHECK_EQ_INT(sessions_enforce_budget(9000), 0);
    CHECK(access(sess_path("child", "state.kv"), F_OK) == 0);
    /* over 5000: the shared file is the oldest; both names go before
     * its 4000 bytes come back, and the newer one stays */
    CHECK_EQ_INT(sessions_enforce_budget(5000), 4000);
    CHECK(access(sess_path("parent", "state.kv"), F_OK) != 0);
    CHECK(access(sess_path("child", "state.kv"), F_OK) != 0);
    CHECK(access(sess_path("other", "state.kv"), F_OK) == 0);

    /* what a killed process left: its tools' scratch, a half-written
     * snapshot; removed from sessions nobody has open */
    const char *files[] = { "run/ds4cl-browser-x/profile/Cookies", ".state.kv.tmp.AbCdEf" };
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(base_mkdir_p(test_printf("%s/run/ds4cl-browser-x/profile", sess_path("parent", "")), 0700), 0);
        CHECK_EQ_INT(base_mkdir_p(test_printf("%s/run/ds4cl-browser-x/profile", sess_path("other", "")), 0700), 0);
        test_write_file(sess_path("parent", files[i]), "x", 1);
        test_write_file(sess_path("other", files[i]), "x", 1);
    }
    ds4_error err = { "" };
    session *held = session_open("other", &err);
    CHECK_MSG(held != NULL, "%s", err.msg);
    /* opening cleans its own */
    CHECK(access(sess_path("other", "run"), F_OK) != 0);
    CHECK(access(sess_path("other", ".state.kv.tmp.AbCdEf"), F_OK) != 0);
    test_write_file(sess_path("other", ".state.kv.tmp.ZzZzZz"), "x", 1);
    sessions_enforce_budget(1u << 30);
    CHECK(access(sess_path("parent", "run"), F_OK) != 0);
    CHECK(access(sess_path("parent", ".state.kv.tmp.AbCdEf"), F_OK) != 0);
    CHECK(access(sess_path("parent", "journal"), F_OK) == 0);
    /* an open session's files are its own business */
    CHECK(access(sess_path("other", ".state.kv.tmp.ZzZzZz"), F_OK) == 0);
    session_close(held);
    CHECK(access(sess_path("other", "state.kv"), F_OK) == 0);
}
