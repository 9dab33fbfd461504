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

#include "sessions/sessions_internal.h"
#include "tests/sessions_util.h"
#include "tests/test.h"

/* A PID that runs no process now. */
static long dead_pid(void)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

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
    CHECK_EQ_INT(mkdir_p(test_printf("%s/sub/deeper", ws), 0700), 0);
    long dead = dead_pid();
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
    CHECK_EQ_INT(mkdir_p(outside, 0700), 0);
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
    const char *left = test_tmp_path(".huge.txt.tmp.%ld.Xy12Zq", dead_pid());
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
    CHECK_EQ_INT(mkdir_p(test_printf("%s/ds4cl-browser-1/profile", run), 0700), 0);
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
    char err[256];
    session *s = session_open("logs", err, sizeof err);
    CHECK_MSG(s != NULL, "%s", err);
    CHECK(!exists(test_printf("%s/ds4cl-browser-1", run)));
    CHECK(exists(small) && exists(newer));
    CHECK(!exists(huge));
    session_close(s);
    CHECK(exists(small) && exists(newer));
}
