/* What interrupted processes leave behind: the temporary files of atomic
 * writes in the workspace (removed by the next session there, only when
 * their writer is gone), the job logs of a session's run directory (kept,
 * bounded, since the transcript points at them), and a bounded crash
 * sweep of scripted sessions that edit and write files, killed at random
 * moments: no completed turn lost, no torn file, no temporary file left
 * after the next start. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sessions/store_impl.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

static void touch_at(const char *path, time_t when)
{
    test_write_file(path, "partial", 7);
    if (when) {
        struct timespec ts[2] = { { when, 0 }, { when, 0 } };
        CHECK_EQ_INT(utimensat(AT_FDCWD, path, ts, 0), 0);
    }
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

TEST(sessions_leftovers, temp_sweep_removes_only_our_temporary_files_whose_writer_is_gone)
{
    const char *ws = test_tmp_path("ws");
    CHECK_EQ_INT(base_mkdir_p(test_printf("%s/sub/deeper", ws), 0700), 0);
    long dead = test_dead_pid();
    const char *gone1 = test_printf("%s/.big.txt.tmp.%ld.AbC123", ws, dead);
    const char *gone2 = test_printf("%s/sub/deeper/.x.c.tmp.%ld.zzzzzz", ws, dead);
    /* PID 1 runs, but started long after this file was last written: the
     * PID was used again */
    const char *reused = test_printf("%s/.old.txt.tmp.1.qwerty", ws);
    /* the writers run: this process, and PID 1 with a file written now */
    const char *mine = test_printf("%s/.live.txt.tmp.%ld.aaaaaa", ws, (long)getpid());
    const char *init_now = test_printf("%s/.now.txt.tmp.1.bbbbbb", ws);
    /* not ours: other names */
    const char *other1 = test_printf("%s/.notes.tmp.swp", ws);
    const char *other2 = test_printf("%s/big.txt.tmp.%ld.AbC123", ws, dead);
    const char *other3 = test_printf("%s/.big.txt.tmp.%ld.toolong7", ws, dead);
    touch_at(gone1, 0);
    touch_at(gone2, 0);
    touch_at(reused, 946684800); /* 2000-01-01 */
    touch_at(mine, 0);
    touch_at(init_now, 0);
    touch_at(other1, 0);
    touch_at(other2, 0);
    touch_at(other3, 0);
    /* a link to elsewhere is not followed */
    const char *outside = test_tmp_path("outside");
    CHECK_EQ_INT(base_mkdir_p(outside, 0700), 0);
    const char *far = test_printf("%s/.f.tmp.%ld.cccccc", outside, dead);
    touch_at(far, 0);
    CHECK_EQ_INT(symlink(outside, test_printf("%s/link", ws)), 0);

    CHECK_EQ_INT(temp_sweep(ws, 100000), 3);
    CHECK(!exists(gone1) && !exists(gone2) && !exists(reused));
    CHECK(exists(mine) && exists(init_now) && exists(other1) && exists(other2) && exists(other3) && exists(far));
    /* and bounded: a walk that may look at two entries finds nothing more */
    touch_at(gone1, 0);
    CHECK(temp_sweep(ws, 2) <= 1);
}

TEST(sessions_leftovers, a_session_start_removes_temporary_files_an_interrupted_write_left)
{
    sessions_test_home();
    const char *lines[] = { script_line("a</think>Done.", NULL), NULL };
    const char *script = write_script(lines);
    const char *left = test_tmp_path(".huge.txt.tmp.%ld.Xy12Zq", test_dead_pid());
    touch_at(left, 0);
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' -p hi --output-format stream-json",
                       test_tmpdir(), test_bindir(), agent_test_model(), script);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK(!exists(left));
    CHECK_CONTAINS(out, "removed 1 temporary file");
}

TEST(sessions_leftovers, job_logs_outlive_the_session_process_within_a_bound)
{
    sessions_test_home();
    sess_agent x;
    const char *lines[] = { script_line("a</think>Done.", NULL), NULL };
    sa_start(&x, script_engine(write_script(lines)), "logs", true);
    sa_turn(&x, "hi");
    sa_stop(&x);
    const char *run = sess_path("logs", "run");
    CHECK_EQ_INT(base_mkdir_p(test_printf("%s/ds4cl-browser-1/profile", run), 0700), 0);
    const char *small = test_printf("%s/job-1-100.log", run), *newer = test_printf("%s/job-2-100.log", run);
    const char *huge = test_printf("%s/job-1-99.log", run);
    touch_at(small, time(NULL) - 10);
    touch_at(newer, 0);
    /* older and larger than what is kept (sparse) */
    touch_at(huge, 0);
    CHECK_EQ_INT(truncate(huge, (off_t)JOB_LOGS_KEPT), 0);
    struct timespec old[2] = { { time(NULL) - 100, 0 }, { time(NULL) - 100, 0 } };
    CHECK_EQ_INT(utimensat(AT_FDCWD, huge, old, 0), 0);

    /* the next process that opens it clears the scratch, not the logs */
    ds4_error err = { "" };
    session *s = session_open("logs", &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    CHECK(!exists(test_printf("%s/ds4cl-browser-1", run)));
    CHECK(exists(small) && exists(newer));
    CHECK(!exists(huge));
    session_close(s);
    CHECK(exists(small) && exists(newer));
}

/* ---- the crash sweep ------------------------------------------------------------------ */

#define SWEEP_SEED 20261127u
#define BIG_BYTES (1u << 20)

static char *write_content(int k)
{
    strbuf b = { 0 };
    sb_printf(&b, "write %d\n", k);
    for (int i = 0; i < 24; i++) sb_printf(&b, "line %d of write %d: some text to make the file longer\n", i, k);
    char *s = test_strdup(sb_str(&b));
    sb_free(&b);
    return s;
}

/* w.txt is absent or exactly what one write put there. */
static void check_written(const char *path, int run)
{
    size_t len;
    char *d = file_read_all(path, &len);
    if (!d) return;
    int k = -1;
    CHECK_MSG(sscanf(d, "write %d", &k) == 1 && k >= 0, "run %d: w.txt starts with %.20s", run, d);
    const char *want = write_content(k);
    CHECK_MSG(len == strlen(want) && !memcmp(d, want, len), "run %d: w.txt is torn (%zu bytes)", run, len);
    free(d);
}

/* big.txt is the original with its first line either marker. */
static void check_big(const char *path, const char *orig, int run)
{
    size_t len;
    char *d = file_read_all(path, &len);
    CHECK_MSG(d != NULL, "run %d: big.txt is gone", run);
    CHECK_MSG(len == BIG_BYTES, "run %d: big.txt has %zu bytes", run, len);
    CHECK_MSG((!memcmp(d, "AAAA\n", 5) || !memcmp(d, "BBBB\n", 5)) && !memcmp(d + 5, orig + 5, len - 5),
              "run %d: big.txt is torn", run);
    free(d);
}

/* Temporary files of atomic writes under dir, joined by '\n'. */
static const char *temps_in(const char *dir)
{
    char *out;
    test_runf(&out, "find '%s' -name '.*.tmp.*' 2>/dev/null; true", dir);
    return out;
}

TEST(sessions_crash, sweep_with_edits_and_writes_loses_no_turn_tears_no_file_and_leaves_no_temp)
{
    sessions_test_home();
    const char *ws = test_tmp_path("ws");
    CHECK_EQ_INT(base_mkdir_p(ws, 0700), 0);
    char *orig = test_alloc(BIG_BYTES);
    memset(orig, 'x', BIG_BYTES);
    memcpy(orig, "AAAA\n", 5);
    for (size_t i = 79; i < BIG_BYTES; i += 80) orig[i] = '\n';
    const char *big = test_printf("%s/big.txt", ws), *wtxt = test_printf("%s/w.txt", ws);
    test_write_file(big, orig, BIG_BYTES);

    /* each turn writes w.txt, flips big.txt's marker, answers; after a
     * kill the script may be out of step with the turns (an edit then
     * fails, harmlessly) */
    strbuf sc = { 0 };
    for (int k = 0; k < 90; k++) {
        const char *from = k % 2 ? "BBBB" : "AAAA", *to = k % 2 ? "AAAA" : "BBBB";
        sb_printf(&sc, "%s\n", script_line(test_printf("w%d</think>Writing.%s", k,
                                                       dsml_block("write", "path", "w.txt", "content", write_content(k), NULL)),
                                           NULL));
        sb_printf(&sc, "%s\n", script_line(test_printf("e%d</think>Editing.%s", k,
                                                       dsml_block("edit", "path", "big.txt", "old", from, "new", to, NULL)),
                                           NULL));
        sb_printf(&sc, "%s\n", script_line(test_printf("d%d</think>Turn finished.", k), NULL));
    }
    const char *script = test_tmp_path("sweep.jsonl");
    test_write_file(script, sc.s, sc.len);
    sb_free(&sc);
    const char *cmd_fmt = "cd '%s' && exec '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 65536 --seed 1 --yes "
                          "-p 'turn %d' --session sweep --output-format stream-json";

    child_proc c;
    double t0 = test_now_ms();
    child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, 0));
    int rc = child_finish(&c, 0);
    double span = test_now_ms() - t0;
    CHECK_MSG(rc == 0 && strstr(sb_str(&c.text), "\"stop_reason\":\"done\""), "exit %d: %s", rc, sb_str(&c.text));
    sb_free(&c.text);

    strbuf expect = { 0 };
    sb_puts(&expect, "turn 0");
    unsigned seed = SWEEP_SEED;
    int killed = 0, completed = 1, runs = 34, temps_left = 0;
    const char *left_before = "";
    for (int i = 1; i <= runs; i++) {
        seed = seed * 1103515245u + 12345u;
        bool undisturbed = i % 8 == 0;
        int delay = (int)((seed >> 8) % (unsigned)(span * 0.9 + 1));
        double started = test_now_ms();
        child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, i));
        if (!undisturbed) child_pump(&c, delay);
        rc = child_finish(&c, undisturbed || c.eof ? 0 : SIGKILL);
        if (undisturbed) span = test_now_ms() - started;
        const char *out = sb_str(&c.text);
        if (rc == 128 + SIGKILL) killed++;
        else CHECK_MSG(rc == 0, "seed %u run %d exit %d: %s", SWEEP_SEED, i, rc, out);
        if (strstr(out, "\"type\":\"result\"") && strstr(out, "\"stop_reason\":\"done\"")) {
            completed++;
            sb_printf(&expect, "|turn %d", i);
        }
        /* a start that got as far as its session (init is printed after
         * it) removed what the runs before left */
        bool started_session = strstr(out, "\"type\":\"init\"") != NULL;
        for (const char *p = started_session ? left_before : ""; *p;) {
            const char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            char *path = test_strdup(p);
            path[n] = 0;
            CHECK_MSG(access(path, F_OK) != 0, "seed %u run %d: %s is still there", SWEEP_SEED, i, path);
            p += n + (nl ? 1 : 0);
        }
        left_before = temps_in(ws);
        temps_left += left_before[0] != 0;
        check_written(wtxt, i);
        check_big(big, orig, i);
        /* every completed turn is in the journal, in order */
        ds4_error err = { "" };
        session *s = session_open("sweep", &err);
        CHECK_MSG(s != NULL, "seed %u run %d: %s", SWEEP_SEED, i, err.msg);
        const char *notes = notes_of(s);
        /* a kill while a record was being written leaves it torn, which the
         * load drops, saying that "no completed turn was lost": that phrase
         * is the one "lost" allowed here */
        char *loss = test_strdup(notes);
        for (char *q; (q = strstr(loss, "no completed turn was lost"));) memset(q, '.', strlen("no completed turn was lost"));
        CHECK_MSG(!strstr(loss, "damaged") && !strstr(loss, "lost") && !strstr(loss, "add up"), "seed %u run %d: %s",
                  SWEEP_SEED, i, notes);
        session_close(s);
        const char *users = journal_users("sweep"), *want = sb_str(&expect);
        for (const char *p = want; *p;) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            char *turn = test_strdup(p);
            turn[n] = 0;
            const char *at = strstr(users, turn);
            CHECK_MSG(at && (at[n] == '|' || at[n] == 0), "seed %u run %d: the completed \"%s\" is lost", SWEEP_SEED, i,
                      turn);
            users = at + n;
            p += n + (bar ? 1 : 0);
        }
        sb_free(&c.text);
    }
    printf("seed %u: %d runs, %d killed, %d turns completed, %d left temporary files; an undisturbed run takes "
           "%.0f ms\n", SWEEP_SEED, runs, killed, completed, temps_left, span);
    CHECK_MSG(killed >= 20, "only %d runs were killed", killed);
    CHECK_MSG(completed >= 4, "only %d runs completed", completed);
    /* a last undisturbed start leaves nothing behind, anywhere */
    child_start(&c, test_printf(cmd_fmt, ws, test_bindir(), agent_test_model(), script, 999));
    CHECK_EQ_INT(child_finish(&c, 0), 0);
    sb_free(&c.text);
    CHECK_STR_EQ(temps_in(ws), "");
    CHECK_STR_EQ(temps_in(sess_path("sweep", "")), "");
    sb_free(&expect);
}
