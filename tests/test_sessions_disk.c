/* Sessions on a disk that fills up: a record the journal cannot take ends
 * the turn with an error naming the file and the cause, the journal keeps
 * every record before it, and the next write that fits puts the missed
 * records back in order; the KV state (large, recomputable) gives way to
 * the journal; `ds4cl -p` exits 5 and stream-json ends with an error
 * result, also for a run refused before it starts. The full disk is
 * base's fault hook (fault_space_set, DS4CL_FAULT_SPACE). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

static const char *answers_script(int n)
{
    const char **lines = test_alloc((size_t)(n + 1) * sizeof *lines);
    for (int i = 0; i < n; i++) lines[i] = script_line(test_printf("r%d</think>Answer %d.", i, i), NULL);
    lines[n] = NULL;
    return write_script(lines);
}

static const char *open_notes(const char *id)
{
    ds4_error err = { "" };
    session *s = session_open(id, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    const char *n = notes_of(s);
    session_close(s);
    return n;
}

TEST(sessions_disk, a_full_disk_ends_the_turn_with_an_error_and_the_next_write_repairs_the_journal)
{
    sess_agent x;
    sa_start(&x, script_engine(answers_script(4)), "full", true);
    sa_turn(&x, "first");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);

    fault_space_set(0);
    sa_turn(&x, "second");
    CHECK_STR_EQ(x.log.end, AGENT_END_NOT_SAVED);
    const char *errors = sb_str(&x.log.errors);
    CHECK_CONTAINS(errors, sess_path("full", "journal"));
    CHECK_CONTAINS(errors, "No space left on device");
    /* everything before the failed record is on disk and loads */
    CHECK_STR_EQ(journal_users("full"), "first");
    check_journal_adds_up("full");
    CHECK_CONTAINS(sb_str(&x.log.notices), "is still not saved");
    /* the turn stopped for the disk, not for the user */
    CHECK(strstr(sb_str(&x.log.notices), "by user") == NULL);
    CHECK(strstr(sb_str(&x.log.notices), "reading interrupted") == NULL);

    /* room again: the next turn writes what was missed first */
    fault_space_set(-1);
    sa_turn(&x, "third");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);
    CHECK_STR_EQ(journal_users("full"), "first|second|third");
    check_journal_adds_up("full");
    sa_stop(&x);
    CHECK_STR_EQ(open_notes("full"), "");
}

TEST(sessions_disk, a_journal_failure_and_a_kv_failure_are_both_told)
{
    sess_agent x;
    ds4_engine *e = script_engine(answers_script(3));
    sa_start(&x, e, "both", true);
    sa_turn(&x, "first");
    /* room for the next user record exactly: its reply is refused, and
     * the KV state that holds the reply has to wait for it */
    ds4_tokens u = { 0 };
    ds4_chat_user(ds4_engine_tokenizer(e), &u, "second");
    fault_space_set(JOURNAL_FRAME_LEN + JOURNAL_BODY_FIXED + 6 + 4 * u.n);
    ds4_tokens_free(&u);
    sa_turn(&x, "second");
    CHECK_STR_EQ(x.log.end, AGENT_END_NOT_SAVED);
    CHECK_CONTAINS(sb_str(&x.log.errors), "No space left on device");
    const char *notices = sb_str(&x.log.notices);
    CHECK_CONTAINS(notices, "is still not saved");
    CHECK_CONTAINS(notices, "the KV state was not saved either");
    CHECK_STR_EQ(journal_users("both"), "first|second");
    fault_space_set(-1);
    sa_turn(&x, "third");
    CHECK_STR_EQ(journal_users("both"), "first|second|third");
    check_journal_adds_up("both");
    sa_stop(&x);
    CHECK_STR_EQ(open_notes("both"), "");
}

TEST(sessions_disk, little_space_keeps_the_journal_and_skips_the_kv_state_saying_so)
{
    sess_agent x;
    sa_start(&x, script_engine(answers_script(2)), "low", true);
    /* room for the records, not for a KV state and the margin beside it */
    fault_space_set(1 << 20);
    sa_turn(&x, "first");
    CHECK_STR_EQ(x.log.end, AGENT_END_DONE);
    const char *notices = sb_str(&x.log.notices);
    CHECK_CONTAINS(notices, "the KV state was not saved");
    CHECK_CONTAINS(notices, "free");
    CHECK_EQ_INT(access(sess_path("low", "state.kv"), F_OK), -1);
    CHECK_STR_EQ(journal_users("low"), "first");
    check_journal_adds_up("low");
    fault_space_set(-1);
    sa_turn(&x, "second");
    CHECK(access(sess_path("low", "state.kv"), F_OK) == 0);
    sa_stop(&x);
    CHECK_STR_EQ(open_notes("low"), "");
}

/* ds4cl -p over the script engine in the test's directory. */
static int run_p(char **out, const char *env, const char *script, const char *flags)
{
    return test_runf(out, "cd '%s' && %s '%s/ds4cl' -m '%s' --engine 'script:%s' %s 2>&1", test_tmpdir(), env,
                     test_bindir(), agent_test_model(), script, flags);
}

TEST(sessions_disk, prompt_mode_exits_5_with_an_error_result_when_the_session_is_not_saved)
{
    sessions_test_home();
    const char *script = answers_script(4);
    char *out;
    CHECK_EQ_INT(run_p(&out, "", script, "--session disk -p one --output-format stream-json"), 0);

    int rc = run_p(&out, "DS4CL_FAULT_SPACE=0", script, "--session disk -p two --output-format stream-json");
    CHECK_MSG(rc == 5, "exit %d: %s", rc, out);
    const char *r = strstr(out, "{\"type\":\"result\"");
    CHECK_MSG(r != NULL, "no result: %s", out);
    CHECK_CONTAINS(r, "\"stop_reason\":\"not saved\"");
    CHECK_CONTAINS(r, "\"is_error\":true");
    CHECK_CONTAINS(r, "\"exit_code\":5");
    CHECK_CONTAINS(r, "No space left on device");
    CHECK_CONTAINS(r, "journal");

    /* text mode: the same exit status, the cause on stderr */
    rc = run_p(&out, "DS4CL_FAULT_SPACE=0", script, "--session disk -p three");
    CHECK_MSG(rc == 5, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "No space left on device");

    /* a new session on a full disk: the same */
    rc = run_p(&out, "DS4CL_FAULT_SPACE=0", script, "--session fresh -p one --output-format stream-json");
    CHECK_MSG(rc == 5, "exit %d: %s", rc, out);

    /* what was saved loads without a word, and the next turn adds up */
    rc = run_p(&out, "", script, "--session disk -p four --output-format stream-json");
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_MSG(strstr(out, "\"type\":\"notice\"") == NULL || strstr(out, "\"level\":\"warning\"") == NULL, "%s", out);
    CHECK_STR_EQ(journal_users("disk"), "one|four");
    check_journal_adds_up("disk");
}

TEST(sessions_disk, a_refused_stream_json_run_still_ends_with_a_result)
{
    sessions_test_home();
    const char *script = answers_script(2);
    char *out;
    CHECK_EQ_INT(run_p(&out, "", script, "--session held -p one --output-format stream-json"), 0);
    ds4_error err = { "" };
    session *s = session_open("held", &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --resume held -p two "
                             "--output-format stream-json 2>/dev/null",
                       test_tmpdir(), test_bindir(), agent_test_model(), script);
    session_close(s);
    CHECK_EQ_INT(rc, 1);
    const char *r = strstr(out, "{\"type\":\"result\"");
    CHECK_MSG(r != NULL, "no result: %s", out);
    CHECK_CONTAINS(r, "\"is_error\":true");
    CHECK_CONTAINS(r, "\"exit_code\":1");
    CHECK_CONTAINS(r, "open in another ds4cl process");
    CHECK_CONTAINS(r, "\"session_id\":\"held\"");

    /* refused for its arguments: a result too, with the usage status */
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' -p ' ' --output-format stream-json "
                         "2>/dev/null",
                   test_tmpdir(), test_bindir(), agent_test_model(), script);
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "\"type\":\"result\"");
    CHECK_CONTAINS(out, "\"exit_code\":2");
    CHECK_CONTAINS(out, "the prompt is empty");
}

/* The same on a real file system that fills up: an 8 MiB tmpfs in a
 * mount namespace of its own (skipped where mounting is not allowed). */
TEST(sessions_disk, a_full_tmpfs_never_loses_a_turn_that_reported_success)
{
    sessions_test_home();
    const char *script = answers_script(20);
    const char *mnt = test_tmp_path("mnt"), *out = test_tmp_path("out"), *ws = test_tmp_path("ws");
    CHECK_EQ_INT(base_mkdir_p(mnt, 0700), 0);
    CHECK_EQ_INT(base_mkdir_p(out, 0700), 0);
    CHECK_EQ_INT(base_mkdir_p(ws, 0700), 0);
    const char *sh = test_tmp_path("full.sh");
    const char *text =
        "set -u\n"
        "D=$1 OUT=$2 BIN=$3 MODEL=$4 SCRIPT=$5 WS=$6\n"
        "mount -t tmpfs -o size=8m tmpfs \"$D\" 2>/dev/null || exit 77\n"
        "export XDG_DATA_HOME=\"$D/data\"\n"
        "run() { \"$BIN/ds4cl\" -m \"$MODEL\" --engine \"script:$SCRIPT\" --session full -p \"turn $1\" "
        "--output-format stream-json > \"$OUT/run$1.json\" 2>/dev/null; echo \"$1 $?\" >> \"$OUT/rcs\"; }\n"
        "cd \"$WS\"\n"
        "run 0\n"
        "cat /dev/zero > \"$D/fill\" 2>/dev/null\n"
        "for i in 1 2 3 4 5 6 7 8 9 10; do run $i; done\n"
        "rm -f \"$D/fill\"\n"
        "run 11\n"
        "cp -r \"$D/data\" \"$OUT/data\"\n"
        "umount \"$D\"\n";
    test_write_file(sh, text, strlen(text));
    char *log;
    const char *args = test_printf("'%s' '%s' '%s' '%s' '%s' '%s' '%s'", sh, mnt, out, test_bindir(), agent_test_model(),
                                   script, ws);
    int rc = test_runf(&log, "unshare -m sh %s 2>&1 || { [ $? = 77 ] || unshare -rm sh %s 2>&1; }", args, args);
    if (access(test_printf("%s/rcs", out), F_OK) != 0) SKIP("cannot mount a tmpfs here (%d: %.200s)", rc, log);

    size_t n;
    char *rcs = file_read_all(test_printf("%s/rcs", out), &n);
    CHECK(rcs != NULL);
    int refused = 0, saved = 0;
    strbuf want = { 0 };
    for (char *line = strtok(rcs, "\n"); line; line = strtok(NULL, "\n")) {
        int i, code;
        CHECK(sscanf(line, "%d %d", &i, &code) == 2);
        char *res = file_read_all(test_printf("%s/run%d.json", out, i), &n);
        CHECK(res != NULL);
        const char *r = strstr(res, "{\"type\":\"result\"");
        CHECK_MSG(r != NULL, "run %d: no result: %s", i, res);
        CHECK_MSG(code == 0 || code == 5, "run %d: exit %d: %s", i, code, r);
        if (code == 0) {
            CHECK_MSG(strstr(r, "\"stop_reason\":\"done\"") != NULL, "run %d: %s", i, r);
            sb_printf(&want, "%sturn %d", want.len ? "|" : "", i);
            saved++;
        } else {
            CHECK_CONTAINS(r, "\"stop_reason\":\"not saved\"");
            CHECK_CONTAINS(r, "No space left on device");
            refused++;
        }
        free(res);
    }
    free(rcs);
    printf("%d runs saved, %d refused with the disk full\n", saved, refused);
    CHECK_MSG(refused > 0, "the disk never filled up");
    CHECK(saved >= 2);
    /* every run that said done is in the journal, in order (a refused
     * run's user record may be there too when only its reply found no
     * room: it was said not saved, and what reached the disk is kept) */
    setenv("XDG_DATA_HOME", test_printf("%s/data", out), 1);
    const char *users = journal_users("full");
    for (const char *p = sb_str(&want); *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        char *turn = test_strdup(p);
        turn[len] = 0;
        const char *at = strstr(users, turn);
        CHECK_MSG(at && (at[len] == '|' || at[len] == 0), "\"%s\" said done and is not in the journal: %s", turn,
                  journal_users("full"));
        users = at + len;
        p += len + (bar ? 1 : 0);
    }
    check_journal_adds_up("full");
    CHECK_STR_EQ(open_notes("full"), "");
    sb_free(&want);
}
