/* sessions_util.c — see sessions_util.h. */
#include "tests/sessions_util.h"
#include "tests/test.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void sessions_test_home(void)
{
    setenv("XDG_DATA_HOME", test_tmp_path(".xdg/data"), 1);
    setenv("XDG_CACHE_HOME", test_tmp_path(".xdg/cache"), 1);
    setenv("XDG_STATE_HOME", test_tmp_path(".xdg/state"), 1);
}

void sa_start(sess_agent *x, ds4_engine *e, const char *id, bool create)
{
    sessions_test_home();
    memset(x, 0, sizeof *x);
    ds4_error err = { "" };
    x->s = create ? session_create(id, test_tmpdir(), &err) : session_open(id, &err);
    if (!x->s) FAIL("session %s: %s", id ? id : "(new)", err.msg);
    x->cfg = test_config(e, 8192);
    if (session_attach(x->s, e, &x->cfg, &err) != 0) FAIL("attach: %s", err.msg);
    ds4_error derr = { "" };
    x->a = agent_start(&x->cfg, &derr);
    session_attach_done(x->s);
    if (!x->a) FAIL("agent_start: %s", derr.msg);
    wait_idle(x->a, &x->log, 10000);
}

void sa_turn(sess_agent *x, const char *text)
{
    run_turn(x->a, text, &x->log);
}

void sa_stop(sess_agent *x)
{
    agent_stop(x->a);
    session_close(x->s);
    ev_log_free(&x->log);
    memset(x, 0, sizeof *x);
}

size_t sa_workspace_part(sess_agent *x)
{
    ds4_tokens sys = { 0 };
    size_t shared = 0;
    ds4_error err = { "" };
    CHECK_MSG(agent_system_prompt_parts(&x->cfg, &sys, &shared, &err) == 0, "%s", err.msg);
    CHECK(shared > 0 && shared < sys.n);
    size_t n = sys.n - shared;
    ds4_tokens_free(&sys);
    return n;
}

size_t sa_prefilled(sess_agent *x)
{
    agent_status st;
    agent_get_status(x->a, &st);
    return st.prefilled_total;
}

const char *sess_path(const char *id, const char *file)
{
    char dir[4096];
    if (!sessions_dir(dir, sizeof dir)) FAIL("no sessions directory");
    return test_printf("%s/%s/%s", dir, id, file);
}

void read_journal(const char *id, journal_scan *j)
{
    if (journal_read(sess_path(id, "journal"), j) != 0) FAIL("cannot read the journal of %s: %s", id, strerror(errno));
}

void check_journal_adds_up(const char *id)
{
    journal_scan j;
    read_journal(id, &j);
    size_t n = 0;
    for (size_t i = 0; i < j.n; i++) {
        if (j.recs[i].kind == AGENT_TURN_SYSTEM || j.recs[i].kind == AGENT_TURN_REBUILD) n = 0;
        n += j.recs[i].n_tokens;
        CHECK_MSG(j.recs[i].transcript_len == n, "record %zu of %zu: length %llu, the records before make %zu", i, j.n,
                  (unsigned long long)j.recs[i].transcript_len, n);
    }
    CHECK(!j.bad_header);
    CHECK_EQ_INT(j.torn, 0);
    CHECK_EQ_INT(j.damaged_spans, 0);
    journal_scan_free(&j);
}

const char *journal_users(const char *id)
{
    journal_scan j;
    read_journal(id, &j);
    strbuf b = { 0 };
    for (size_t i = 0; i < j.n; i++)
        if (j.recs[i].kind == AGENT_TURN_USER) sb_printf(&b, "%s%s", b.len ? "|" : "", j.recs[i].text);
    journal_scan_free(&j);
    char *s = test_strdup(sb_str(&b));
    sb_free(&b);
    return s;
}

const char *notes_of(const session *s)
{
    const char *const *lines;
    size_t n = session_notes(s, &lines);
    strbuf b = { 0 };
    for (size_t i = 0; i < n; i++) sb_printf(&b, "%s\n", lines[i]);
    char *r = test_strdup(sb_str(&b));
    sb_free(&b);
    return r;
}

/* ---- child processes ---------------------------------------------------------------- */

void child_start(child_proc *c, const char *cmd)
{
    memset(c, 0, sizeof *c);
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) FAIL("pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        int devnull = open("/dev/null", O_RDWR);
        dup2(devnull, 0);
        dup2(p[1], 1);
        dup2(devnull, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    c->pid = pid;
    c->out = p[0];
    fcntl(c->out, F_SETFL, O_NONBLOCK);
}

void child_pump(child_proc *c, int ms)
{
    double t0 = test_now_ms();
    while (!c->eof) {
        int left = ms - (int)(test_now_ms() - t0);
        if (left < 0) break;
        struct pollfd pfd = { c->out, POLLIN, 0 };
        if (poll(&pfd, 1, left) <= 0) continue;
        char buf[4096];
        ssize_t n = read(c->out, buf, sizeof buf);
        if (n > 0) sb_append(&c->text, buf, (size_t)n);
        else if (n == 0) c->eof = true;
        else if (errno != EAGAIN && errno != EINTR) c->eof = true;
    }
}

int child_finish(child_proc *c, int sig)
{
    /* sh -c execs the last command, so pid is ds4cl itself. */
    if (sig) kill(c->pid, sig);
    while (!c->eof) child_pump(c, 1000);
    close(c->out);
    int status = 0;
    while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
