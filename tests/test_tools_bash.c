/* Tests of the bash tools (jobs, timeouts, stopping, cancellation, no
 * leftover processes) and of the Landlock sandbox. */
#include "tests/test.h"
#include "tests/tools_util.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *bash_args(const char *cmd, const char *extra)
{
    return test_printf("{\"command\":%s%s%s}", tu_json_str(cmd), extra ? "," : "", extra ? extra : "");
}

static int job_of(const char *text)
{
    const char *p = strstr(text, "job ");
    CHECK_MSG(p != NULL, "no job number in: %s", text);
    return atoi(p + 4);
}

/* Every process the test started is gone and reaped. The job may still be
 * ending when the call returns (a stopped or cancelled one), so both are
 * waited for, with bounds far above what an idle machine needs. */
static void check_clean(const char *marker)
{
    CHECK_MSG(tu_wait_gone(marker, 4000), "processes with '%s' are still running", marker);
    CHECK_MSG(tu_wait_no_zombies(4000), "%d zombie children are left", tu_my_zombies());
}

TEST(tools_bash, output_and_exit_status)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("echo out; echo err >&2; exit 3", NULL));
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "job 1: exit status 3 after");
    CHECK_CONTAINS(r.text, "out\nerr\n");
    r = tu_call(env, "bash", bash_args("true", NULL));
    CHECK_CONTAINS(r.text, "job 2: exit status 0");
    CHECK_CONTAINS(r.text, "(no output)");
    r = tu_call(env, "bash", bash_args("pwd", NULL));
    CHECK_CONTAINS(r.text, tu_workspace());
    r = tu_call(env, "bash", bash_args("kill -SEGV $$", NULL));
    CHECK_CONTAINS(r.text, "killed by SIGSEGV (11; exit status 139)");
    CHECK_EQ_INT(tu_my_zombies(), 0);
}

TEST(tools_bash, stdin_is_not_inherited_and_there_is_no_terminal)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("cat; readlink /proc/self/fd/0; test -t 1 || echo notty; "
                                                 "(exec 3</dev/tty) 2>/dev/null || echo nottydev",
                                                 "\"timeout_sec\":5"));
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "exit status 0");
    CHECK_CONTAINS(r.text, "/dev/null\nnotty\nnottydev\n");
}

TEST(tools_bash, bad_parameters)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", "{\"command\":\"  \"}");
    CHECK(r.is_error);
    r = tu_call(env, "bash", bash_args("true", "\"timeout_sec\":0"));
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "timeout_sec must be 1 or more");
    r = tu_call(env, "bash", bash_args("true", "\"refresh_sec\":-1"));
    CHECK(r.is_error);
    r = tu_call(env, "bash", bash_args("true", "\"timeout_sec\":99999"));
    CHECK_CONTAINS(r.text, "limited to 3600");
    r = tu_call(env, "bash_status", "{\"job\":42}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "there is no job 42 (jobs: 1)");
    r = tu_call(env, "bash_stop", "{}");
    CHECK(r.is_error);
    r = tu_call(env, "bash_stop", "{\"job\":1}");
    CHECK_CONTAINS(r.text, "had already ended");
}

TEST(tools_bash, timeout_kills_the_whole_tree)
{
    tool_env *env = tu_env();
    double t0 = test_now_ms();
    tu_result r = tu_call(env, "bash", bash_args("sleep $((7710+1)) & (sleep $((7710+2)); echo never) & echo started; sleep $((7710+3))",
                                                 "\"timeout_sec\":1"));
    double took = test_now_ms() - t0;
    CHECK_CONTAINS(r.text, "timed out: stopped at the 1 s limit");
    CHECK_CONTAINS(r.text, "started\n");
    CHECK(!strstr(r.text, "never"));
    CHECK_MSG(took < 3500, "took %.0f ms", took);
    check_clean("sleep 771");
}

TEST(tools_bash, background_jobs_and_status)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("echo start; sleep 1.5; echo end", "\"refresh_sec\":1"));
    CHECK_CONTAINS(r.text, "job 1: running for");
    CHECK_CONTAINS(r.text, "start\n");
    CHECK_CONTAINS(r.text, "bash_status job=1");
    r = tu_call(env, "bash_status", "{\"job\":1,\"refresh_sec\":10}");
    CHECK_CONTAINS(r.text, "job 1: exit status 0");
    CHECK_CONTAINS(r.text, "new output (1 line):\nend\n");
    CHECK(!strstr(r.text, "start"));
    r = tu_call(env, "bash_status", "{\"job\":1}");
    CHECK_CONTAINS(r.text, "(no new output)");
    CHECK_EQ_INT(tu_my_zombies(), 0);
}

TEST(tools_bash, concurrent_jobs)
{
    tool_env *env = tu_env();
    tu_result a = tu_call(env, "bash", bash_args("echo A; exec sleep $((7720+1))", "\"refresh_sec\":1"));
    tu_result b = tu_call(env, "bash", bash_args("echo B", NULL));
    tu_result c = tu_call(env, "bash", bash_args("echo C; exec sleep $((7720+2))", "\"refresh_sec\":1"));
    CHECK_EQ_INT(job_of(a.text), 1);
    CHECK_EQ_INT(job_of(b.text), 2);
    CHECK_EQ_INT(job_of(c.text), 3);
    CHECK_EQ_INT(tools_jobs_running(env), 2);
    tu_result l = tu_call(env, "bash_status", "{}");
    CHECK_CONTAINS(l.text, "job 1: running");
    CHECK_CONTAINS(l.text, "job 2: exit status 0");
    CHECK_CONTAINS(l.text, "job 3: running");
    char *rep = tools_jobs_report(env);
    CHECK(rep && strstr(rep, "job 1: running") && !strstr(rep, "job 2:"));
    free(rep);
    tu_result s = tu_call(env, "bash_stop", "{\"job\":1}");
    CHECK_CONTAINS(s.text, "killed by SIGTERM");
    CHECK_CONTAINS(s.text, "stopped");
    CHECK_EQ_INT(tools_jobs_running(env), 1);
    s = tu_call(env, "bash_stop", "{\"job\":3}");
    CHECK_EQ_INT(tools_jobs_running(env), 0);
    check_clean("sleep 772");
}

TEST(tools_bash, stop_escalates_to_kill_and_finds_escaped_processes)
{
    tool_env *env = tu_env();
    /* a process ignoring SIGTERM, one in a new session, one in a new group */
    tu_result r = tu_call(env, "bash", bash_args("setsid sleep $((7730+1)) & (set -m; sleep $((7730+2)) &) ; "
                                                 "trap '' TERM; sleep $((7730+3)) & wait",
                                                 "\"refresh_sec\":1"));
    CHECK_CONTAINS(r.text, "running");
    int z;
    CHECK_EQ_INT(tu_procs_with("sleep 773", &z), 3);
    double t0 = test_now_ms();
    r = tu_call(env, "bash_stop", test_printf("{\"job\":%d}", job_of(r.text)));
    CHECK_CONTAINS(r.text, "stopped");
    CHECK(test_now_ms() - t0 < 4000);
    check_clean("sleep 773");
}

TEST(tools_bash, shell_exit_leaves_job_running_until_children_end)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("sleep $((7740+1)) & echo forked", "\"refresh_sec\":1"));
    CHECK_CONTAINS(r.text, "the shell has exited (status 0) but processes it started in the background are still running");
    CHECK_EQ_INT(tu_procs_with("sleep 7741", NULL), 1);
    tu_call(env, "bash_stop", "{\"job\":1}");
    check_clean("sleep 7741");
}

TEST(tools_bash, freeing_the_environment_stops_everything)
{
    tool_env *env = tu_env();
    tu_call(env, "bash", bash_args("sleep $((7750+1)) & sleep $((7750+2))", "\"refresh_sec\":1"));
    tu_call(env, "bash", bash_args("setsid sleep $((7750+3)) & wait", "\"refresh_sec\":1"));
    CHECK_EQ_INT(tu_procs_with("sleep 775", NULL), 3);
    tu_free(env);
    CHECK_EQ_INT(tu_procs_with("sleep 775", NULL), 0);
    CHECK_EQ_INT(tu_my_zombies(), 0);
}

typedef struct {
    double start, cancel_at;
    bool raised; /* cancelled() said true: the reaction is measured from there */
    test_mark mark;
    int progress_calls;
    char progress[256];
} cancel_state;

static bool cancel_cb(void *ud)
{
    cancel_state *s = ud;
    double now = test_now_ms();
    if (now - s->start < s->cancel_at) return false;
    if (!s->raised) test_mark_now(&s->mark);
    s->raised = true;
    return true;
}

static void progress_cb(void *ud, const char *text, size_t len)
{
    cancel_state *s = ud;
    s->progress_calls++;
    size_t have = strlen(s->progress);
    if (have + len < sizeof s->progress) memcpy(s->progress + have, text, len + 1);
}

TEST(tools_bash, cancellation_within_100ms)
{
    tool_env *env = tu_env();
    cancel_state st = { .start = test_now_ms(), .cancel_at = 400 };
    tool_call_ctx ctx = { .cancelled = cancel_cb, .progress = progress_cb, .ud = &st };
    tu_result r = tu_call_ctx(env, "bash", bash_args("echo begun; sleep $((7760+1))", NULL), &ctx);
    CHECK(st.raised);
    double waited, reaction = test_reaction_ms(&st.mark, &waited);
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "interrupted by the user; job 1 was stopped");
    CHECK_MSG(reaction <= 100, "reacted after %.1f ms (+%.1f ms waiting for a CPU)", reaction, waited);
    CHECK_CONTAINS(st.progress, "begun\n");
    check_clean("sleep 7761");
}

TEST(tools_bash, live_progress_while_running)
{
    tool_env *env = tu_env();
    cancel_state st = { .start = test_now_ms(), .cancel_at = 1e9 };
    tool_call_ctx ctx = { .cancelled = cancel_cb, .progress = progress_cb, .ud = &st };
    tu_result r = tu_call_ctx(env, "bash", bash_args("echo one; sleep 0.6; echo two", NULL), &ctx);
    CHECK_CONTAINS(r.text, "exit status 0");
    CHECK(st.progress_calls >= 2);
    CHECK_STR_EQ(st.progress, "one\ntwo\n");
}

TEST(tools_bash, long_output_head_tail_and_log)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("seq 1 100000; printf '\\033[1;31mred\\033[0m done\\r\\n'", NULL));
    CHECK_CONTAINS(r.text, "output (100001 lines,");
    CHECK_CONTAINS(r.text, "\n1\n2\n");
    CHECK_CONTAINS(r.text, "\n100000\nred done\n");
    CHECK_CONTAINS(r.text, "lines (");
    CHECK_CONTAINS(r.text, "not shown; the whole log is ");
    CHECK(strlen(r.text) < 20000);
    const char *log = strstr(r.text, "the whole log is ") + strlen("the whole log is ");
    char path[512];
    CHECK(sscanf(log, "%511s", path) == 1);
    tu_result rr = tu_call(env, "read", test_printf("{\"path\":\"%s\",\"start_line\":50000,\"max_lines\":1}", path));
    CHECK_CONTAINS(rr.text, "50000\t50000\n");
}

TEST(tools_bash, progress_bars_and_controls_are_cleaned)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("printf '10%%\\r50%%\\r100%%\\nbell\\007 \\033]0;title\\007ok\\n'", NULL));
    CHECK_CONTAINS(r.text, "\n100%\nbell^G ok\n");
    CHECK(!strstr(r.text, "title"));
}

TEST(tools_bash, environment_for_commands)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "bash", bash_args("echo $DS4CL_JOB $GIT_TERMINAL_PROMPT $PAGER", NULL));
    CHECK_CONTAINS(r.text, "1 0 cat\n");
}

/* ---- sandbox ----------------------------------------------------------------------------- */

static tool_env *sandboxed_env(bool yes)
{
    static const char *const none[] = { NULL };
    tool_env_config cfg = { .sandbox = true, .writable_dirs = none, .yes_to_all = yes, .interactive = true };
    tool_env *env = tu_env_cfg(&cfg);
    const char *st = tools_sandbox_status(env);
    if (!strstr(st, "Landlock sandbox")) SKIP("no Landlock here: %s", st);
    return env;
}

TEST(tools_sandbox, status_says_what_applies)
{
    tool_env_config off = { .sandbox = false };
    tool_env *env = tu_env_cfg(&off);
    CHECK_CONTAINS(tools_sandbox_status(env), "sandbox is off");
    tu_result r = tu_call(env, "bash", bash_args("ls", NULL));
    CHECK(r.denied); /* not sandboxed, not interactive, no rule */
    tu_free(env);
    env = sandboxed_env(false);
    CHECK_CONTAINS(tools_sandbox_status(env), "writes only to the workspace");
}

static tool_confirm say_yes(void *ud, const char *tool, const char *summary)
{
    (void)tool;
    (void)summary;
    ++*(int *)ud;
    return TOOL_CONFIRM_YES;
}

TEST(tools_sandbox, without_landlock_bash_asks_and_says_why)
{
    tu_hide_landlock();
    tool_env_config cfg = { .sandbox = true, .interactive = false };
    tool_env *env = tu_env_cfg(&cfg);
    CHECK(!tools_sandbox_active(env));
    CHECK_CONTAINS(tools_sandbox_status(env), "Landlock is not available on this kernel (not built in)");
    CHECK_CONTAINS(tools_sandbox_status(env), "need approval");
    /* no sandbox: a command needs approval, which this run cannot give */
    tu_result r = tu_call(env, "bash", bash_args("ls", NULL));
    CHECK(r.denied);
    CHECK_CONTAINS(r.text, "needs approval");
    tu_free(env);
    /* asked and approved, it runs unconfined; the first result says why
     * it was asked, once */
    tool_env_config ask = { .sandbox = true, .interactive = true };
    env = tu_env_cfg(&ask);
    int asked = 0;
    tool_call_ctx ctx = { .confirm = say_yes, .ud = &asked };
    r = tu_call_ctx(env, "bash", bash_args("ls; echo first", NULL), &ctx);
    CHECK_EQ_INT(asked, 1);
    CHECK_CONTAINS(r.text, "first");
    CHECK_CONTAINS(r.text, "(note: Landlock is not available");
    r = tu_call_ctx(env, "bash", bash_args("ls; echo second", NULL), &ctx);
    CHECK_EQ_INT(asked, 2);
    CHECK_CONTAINS(r.text, "second");
    CHECK(strstr(r.text, "Landlock") == NULL);
}

TEST(tools_sandbox, cannot_write_outside_the_workspace)
{
    tool_env *env = sandboxed_env(false);
    const char *outside = test_tmp_path("outside");
    mkdir(outside, 0755);
    /* allowed without asking: it runs in the sandbox */
    tu_result r = tu_call(env, "bash", bash_args(test_printf(
        "echo in > inside.txt && mkdir -p sub/dir && echo ok > sub/dir/f; "
        "echo out > %s/escaped.txt; echo \"status $?\"; rm -f %s/../ws-sibling; "
        "touch /etc/ds4cl-sandbox-probe; echo x > /dev/null && echo devnull-ok; echo viaerr > /dev/stderr", outside, outside), NULL));
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "status 1");
    CHECK_CONTAINS(r.text, "Permission denied");
    CHECK_CONTAINS(r.text, "devnull-ok\nviaerr\n");
    CHECK_STR_EQ(tu_content("inside.txt"), "in\n");
    CHECK_STR_EQ(tu_content("sub/dir/f"), "ok\n");
    CHECK(access(test_tmp_path("outside/escaped.txt"), F_OK) != 0);
    CHECK(access("/etc/ds4cl-sandbox-probe", F_OK) != 0);
    /* reading outside works */
    r = tu_call(env, "bash", bash_args("head -c 4 /etc/hostname >/dev/null && echo read-ok", NULL));
    CHECK_CONTAINS(r.text, "read-ok");
}

TEST(tools_sandbox, symlink_out_of_the_workspace_does_not_help)
{
    tool_env *env = sandboxed_env(false);
    const char *outside = test_tmp_path("outside2");
    mkdir(outside, 0755);
    CHECK(symlink(outside, tu_path("door")) == 0);
    tu_result r = tu_call(env, "bash", bash_args("echo x > door/through.txt; echo $?", NULL));
    CHECK_CONTAINS(r.text, "Permission denied");
    CHECK(access(test_tmp_path("outside2/through.txt"), F_OK) != 0);
}

TEST(tools_sandbox, git_directory_is_read_only)
{
    tool_env *env = sandboxed_env(false);
    tu_file(".git/HEAD", "ref: refs/heads/main\n");
    tu_file(".ds4cl/rules", "");
    const char *st = tools_sandbox_status(env);
    if (!strstr(st, ".git and .ds4cl are read-only")) SKIP("no mount namespaces here: %s", st);
    tu_result r = tu_call(env, "bash", bash_args("echo bad > .git/HEAD; echo 'allow bash *' >> .ds4cl/rules; "
                                                 "cat .git/HEAD; echo fine > ok.txt", NULL));
    CHECK_CONTAINS(r.text, "Read-only file system");
    CHECK_CONTAINS(r.text, "ref: refs/heads/main");
    CHECK_STR_EQ(tu_content(".git/HEAD"), "ref: refs/heads/main\n");
    CHECK_STR_EQ(tu_content(".ds4cl/rules"), "");
    CHECK_STR_EQ(tu_content("ok.txt"), "fine\n");
}

TEST(tools_sandbox, temp_dirs_by_default_and_opt_out_asks)
{
    tool_env_config cfg = { .sandbox = true, .interactive = false };
    tool_env *env = tu_env_cfg(&cfg);
    if (!strstr(tools_sandbox_status(env), "Landlock sandbox")) SKIP("no Landlock here");
    const char *tmpfile = test_tmp_path("in-tmp.txt");
    if (strncmp(tmpfile, "/tmp/", 5) != 0) SKIP("the test directory is not under /tmp");
    tu_result r = tu_call(env, "bash", bash_args(test_printf("echo t > %s && echo wrote", tmpfile), NULL));
    CHECK_CONTAINS(r.text, "wrote");
    /* sandbox=false needs approval; this run cannot ask */
    r = tu_call(env, "bash", bash_args("ls", "\"sandbox\":false"));
    CHECK(r.denied);
    CHECK_CONTAINS(r.text, "[without sandbox]");
}

TEST(tools_sandbox, opt_out_runs_unconfined_when_allowed)
{
    tool_env *env = sandboxed_env(true);
    const char *outside = test_tmp_path("outside3");
    mkdir(outside, 0755);
    tu_result r = tu_call(env, "bash", bash_args(test_printf("echo x > %s/f && echo done", outside), "\"sandbox\":false"));
    CHECK_CONTAINS(r.text, "done");
    CHECK_CONTAINS(r.text, "ran without the sandbox");
    CHECK(access(test_tmp_path("outside3/f"), F_OK) == 0);
}

/* Entries of a /proc directory of this process, counted in-process: a
 * command run to count them would race with popen closing its own pipe. */
static int proc_entries(const char *dir)
{
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* The process's threads once those already joined have left the task
 * list, where a joined thread's task lingers for a moment after the join:
 * the count is polled until it is at most at_most (up to 5 s), or, with
 * at_most < 0, the least of counts taken over 100 ms. */
static int settled_threads(int at_most)
{
    int n = proc_entries("/proc/self/task");
    double until = test_now_ms() + (at_most < 0 ? 100 : 5000);
    while ((at_most < 0 || n > at_most) && test_now_ms() < until) {
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        int m = proc_entries("/proc/self/task");
        if (at_most >= 0 || m < n) n = m;
    }
    return n;
}

TEST(tools_bash, many_jobs_do_not_pile_up_descriptors_or_threads)
{
    tool_env *env = tu_env();
    tu_call(env, "bash", bash_args("true", NULL));
    /* the directory's own descriptor is counted both times */
    int fds = proc_entries("/proc/self/fd");
    /* sanitizer runtimes keep threads of their own: compare, do not count */
    int threads = settled_threads(-1);
    for (int i = 0; i < 40; i++) {
        tu_result r = tu_call(env, "bash", bash_args("echo $DS4CL_JOB", NULL));
        CHECK_CONTAINS(r.text, "exit status 0");
    }
    CHECK_EQ_INT(proc_entries("/proc/self/fd"), fds);
    int now = settled_threads(threads);
    CHECK_MSG(now <= threads, "%d threads after 40 jobs, %d before", now, threads);
    /* an old job can still be looked at */
    tu_result r = tu_call(env, "bash_status", "{\"job\":3}");
    CHECK_CONTAINS(r.text, "job 3: exit status 0");
    CHECK_EQ_INT(tu_my_zombies(), 0);
}
