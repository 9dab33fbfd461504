/* jobs.c — supervisor processes behind the bash tools (see jobs.h). */
#include "tools/jobs.h"

#include "tools/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum {
    REP_STARTED = 1,   /* value: shell pid */
    REP_SHELL_EXIT,    /* value: wait status */
    REP_TIMEOUT,
    REP_STOPPING,
    REP_LOG_CAPPED,
    REP_SANDBOX_FAILED, /* value: errno */
    REP_DONE,
};

typedef struct {
    const char *shell_path;
    char *const *argv;
    char *const *envp;
    const char *workspace;
    int log_fd, report_w, devnull;
    pid_t parent;
    int timeout_s;
    const sandbox_plan *plan;
} spawn_args;

/* ---- async-signal-safe helpers (supervisor and shell child) ------------------------------ */

static long long mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void report(int fd, int type, int value)
{
    int rec[2] = { type, value };
    ssize_t w = write(fd, rec, sizeof rec);
    (void)w;
}

static size_t utoa(char *buf, unsigned long v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
    buf[n] = 0;
    return n;
}

static void say(int fd, const char *a, const char *b, long num)
{
    char nb[24];
    ssize_t w = write(fd, a, strlen(a));
    if (b) w = write(fd, b, strlen(b));
    if (num >= 0) {
        utoa(nb, (unsigned long)num);
        w = write(fd, " (errno ", 8);
        w = write(fd, nb, strlen(nb));
        w = write(fd, ")", 1);
    }
    w = write(fd, "\n", 1);
    (void)w;
}

static void close_from(int first)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0) return;
#endif
    for (int fd = first; fd < 65536; fd++) close(fd);
}

/* Closes every descriptor from 3 up except those in keep (sorted). */
static void close_all_except(const int *keep, int n)
{
    int from = 3;
    for (int i = 0; i < n; i++) {
        if (keep[i] < from) continue;
        for (int fd = from; fd < keep[i]; fd++) close(fd);
        from = keep[i] + 1;
    }
    close_from(from);
}

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* Processes already sent SIGTERM: the grace period re-runs the sweep for
 * orphans adopted since, without signalling anyone twice. */
#define SIGNALLED_MAX 4096
static pid_t signalled[SIGNALLED_MAX];
static int nsignalled;

static bool was_signalled(pid_t pid)
{
    for (int i = 0; i < nsignalled; i++)
        if (signalled[i] == pid) return true;
    return false;
}

/* Sends sig to the shell's group and to every process that is a child of
 * this supervisor (orphans it adopted) or belongs to its session. */
static void signal_all(pid_t shell, int sig)
{
    pid_t self = getpid();
    /* a process group lies within one session, so the sweep below reaches
     * the shell's group too; SIGKILL also goes to the group at once */
    if (shell > 0 && sig == SIGKILL) kill(-shell, sig);
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    char buf[4096] __attribute__((aligned(8)));
    for (;;) {
        long n = syscall(SYS_getdents64, dfd, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            struct linux_dirent64 *d = (struct linux_dirent64 *)(buf + off);
            off += d->d_reclen;
            const char *name = d->d_name;
            long pid = 0;
            bool digits = *name != 0;
            for (const char *p = name; *p; p++) {
                if (*p < '0' || *p > '9') { digits = false; break; }
                pid = pid * 10 + (*p - '0');
            }
            if (!digits || pid == self) continue;
            char path[64] = "/proc/";
            size_t k = 6 + utoa(path + 6, (unsigned long)pid);
            memcpy(path + k, "/stat", 6);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            char st[512];
            ssize_t r = read(fd, st, sizeof st - 1);
            close(fd);
            if (r <= 0) continue;
            st[r] = 0;
            char *p = NULL;
            for (char *q = st; *q; q++)
                if (*q == ')') p = q;
            if (!p) continue;
            /* ") S ppid pgrp session" */
            long f[3] = { 0, 0, 0 };
            p += 2;
            while (*p && *p != ' ') p++;
            for (int i = 0; i < 3 && *p; i++) {
                while (*p == ' ') p++;
                long v = 0;
                while (*p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
                f[i] = v;
            }
            if (f[0] != self && f[2] != self) continue;
            if (sig == SIGTERM) {
                if (was_signalled((pid_t)pid)) continue;
                if (nsignalled < SIGNALLED_MAX) signalled[nsignalled++] = (pid_t)pid;
            }
            kill((pid_t)pid, sig);
        }
    }
    close(dfd);
}

static _Noreturn void run_shell(const spawn_args *sp, int out_w)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, NULL);
    if (dup2(sp->devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(out_w, 2) < 0) _exit(127);
    if (chdir(sp->workspace) != 0) {
        say(2, "ds4cl: cannot enter the workspace ", sp->workspace, errno);
        _exit(126);
    }
    if (sp->plan) {
        const char *step = "";
        int e = sandbox_apply(sp->plan, &step);
        if (e) {
            say(2, "ds4cl: the sandbox could not be set up, so the command did not run: ", step, e);
            report(sp->report_w, REP_SANDBOX_FAILED, e);
            _exit(126);
        }
    }
    close_from(3);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(sp->shell_path, sp->argv, sp->envp);
    say(2, "ds4cl: cannot run ", sp->shell_path, errno);
    _exit(127);
}

static _Noreturn void supervise(const spawn_args *sp)
{
    setsid();
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_handler = SIG_DFL;
    int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP };
    for (size_t i = 0; i < 4; i++) sigaction(sigs[i], &act, NULL);
    act.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &act, NULL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    bool stop = getppid() != sp->parent;
    prctl(PR_SET_CHILD_SUBREAPER, 1);

    sigset_t set;
    sigemptyset(&set);
    for (size_t i = 0; i < 4; i++) sigaddset(&set, sigs[i]);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    int outp[2];
    if (sfd < 0 || pipe2(outp, O_CLOEXEC) != 0) {
        say(sp->log_fd, "ds4cl: cannot start the job", NULL, errno);
        report(sp->report_w, REP_SHELL_EXIT, 127 << 8);
        report(sp->report_w, REP_DONE, 0);
        _exit(0);
    }
    pid_t sh = fork();
    if (sh == 0) run_shell(sp, outp[1]);
    if (sh < 0) {
        say(sp->log_fd, "ds4cl: cannot fork the shell", NULL, errno);
        report(sp->report_w, REP_SHELL_EXIT, 127 << 8);
        report(sp->report_w, REP_DONE, 0);
        _exit(0);
    }
    close(outp[1]);
    /* from here the supervisor keeps only what it uses */
    int keep[4] = { sp->log_fd, sp->report_w, outp[0], sfd };
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (keep[j] < keep[i]) { int t = keep[i]; keep[i] = keep[j]; keep[j] = t; }
    close_all_except(keep, 4);
    fcntl(outp[0], F_SETFL, O_NONBLOCK);
    report(sp->report_w, REP_STARTED, sh);

    long long deadline = mono_ms() + (long long)sp->timeout_s * 1000, kill_at = 0, gone_at = 0;
    long long sweep_at = 0;
    bool terminating = false, out_eof = false, children_gone = false, capped = false;
    unsigned long long logged = 0;
    char buf[16384];
    if (stop) {
        terminating = true;
        report(sp->report_w, REP_STOPPING, 0);
        signal_all(sh, SIGTERM);
        kill_at = mono_ms() + JOB_KILL_GRACE_MS;
        sweep_at = mono_ms() + 100;
    }
    for (;;) {
        int st;
        pid_t p;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            if (p == sh) report(sp->report_w, REP_SHELL_EXIT, st);
        if (p < 0 && errno == ECHILD && !children_gone) {
            children_gone = true;
            gone_at = mono_ms();
        }
        long long now = mono_ms();
        /* nothing left; the output pipe ends with the last writer (one
         * passed elsewhere is not waited for long) */
        if (children_gone && (out_eof || now - gone_at > 200)) break;
        if (!terminating && now >= deadline) {
            terminating = true;
            report(sp->report_w, REP_TIMEOUT, 0);
            signal_all(sh, SIGTERM);
            kill_at = now + JOB_KILL_GRACE_MS;
            sweep_at = now + 100;
        }
        if (terminating && now >= kill_at) {
            signal_all(sh, SIGKILL);
            kill_at = now + 50;
            sweep_at = kill_at;
        } else if (terminating && now >= sweep_at) {
            /* orphans adopted during the grace period get their SIGTERM too */
            signal_all(sh, SIGTERM);
            sweep_at = now + 100;
        }
        long long next = terminating ? (sweep_at < kill_at ? sweep_at : kill_at) : deadline;
        long long wait = next - now;
        if (wait < 0) wait = 0;
        if (wait > 1000) wait = 1000;
        if (children_gone) wait = 20;
        struct pollfd pf[2] = { { out_eof ? -1 : outp[0], POLLIN, 0 }, { sfd, POLLIN, 0 } };
        poll(pf, 2, (int)wait);
        if (!out_eof && (pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            for (;;) {
                ssize_t r = read(outp[0], buf, sizeof buf);
                if (r > 0) {
                    if (logged + (unsigned long long)r <= JOB_LOG_CAP) {
                        const char *q = buf;
                        size_t left = (size_t)r;
                        while (left) {
                            ssize_t w = write(sp->log_fd, q, left);
                            if (w < 0 && errno == EINTR) continue;
                            if (w <= 0) break;
                            q += w;
                            left -= (size_t)w;
                        }
                        logged += (unsigned long long)r;
                    } else if (!capped) {
                        capped = true;
                        say(sp->log_fd, "\n[ds4cl: log limit reached; further output is discarded]", NULL, -1);
                        report(sp->report_w, REP_LOG_CAPPED, 0);
                    }
                    continue;
                }
                if (r == 0) {
                    out_eof = true;
                    close(outp[0]);
                }
                break;
            }
        }
        if (pf[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                if (si.ssi_signo != SIGCHLD && !terminating) {
                    terminating = true;
                    report(sp->report_w, REP_STOPPING, 0);
                    signal_all(sh, SIGTERM);
                    kill_at = mono_ms() + JOB_KILL_GRACE_MS;
                    sweep_at = mono_ms() + 100;
                }
            }
        }
    }
    report(sp->report_w, REP_DONE, 0);
    _exit(0);
}

/* ---- the agent's side ------------------------------------------------------------- */

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...)
{
    strbuf b = {0};
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    return sb_take(&b);
}

/* The environment of a command: the agent's, with settings that keep
 * programs from waiting for a terminal that is not there. */
static char **build_env(int id)
{
    static const char *const set[][2] = {
        { "TERM", "dumb" },           { "PAGER", "cat" },          { "GIT_PAGER", "cat" },
        { "GIT_TERMINAL_PROMPT", "0" }, { "GIT_EDITOR", "true" },  { "NO_COLOR", "1" },
        { "DEBIAN_FRONTEND", "noninteractive" }, { "PYTHONUNBUFFERED", "1" },
    };
    size_t nset = sizeof set / sizeof set[0];
    size_t n = 0;
    while (environ && environ[n]) n++;
    char **e = xcalloc(n + nset + 2, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        bool overridden = !strncmp(environ[i], "DS4CL_JOB=", 10);
        for (size_t j = 0; j < nset && !overridden; j++) {
            size_t l = strlen(set[j][0]);
            if (!strncmp(environ[i], set[j][0], l) && environ[i][l] == '=') overridden = true;
        }
        if (!overridden) e[k++] = xstrdup(environ[i]);
    }
    for (size_t j = 0; j < nset; j++) e[k++] = xprintf("%s=%s", set[j][0], set[j][1]);
    e[k++] = xprintf("DS4CL_JOB=%d", id);
    e[k] = NULL;
    return e;
}

static void free_env(char **e)
{
    for (size_t i = 0; e && e[i]; i++) free(e[i]);
    free(e);
}

static struct job_table *table(tool_env *env)
{
    if (!env->jobs) {
        env->jobs = xcalloc(1, sizeof *env->jobs);
    }
    return env->jobs;
}

static void *reaper_main(void *arg)
{
    job *j = arg;
    int st = 0;
    pid_t p;
    while ((p = waitpid(j->sup, &st, 0)) < 0 && errno == EINTR) {}
    atomic_store(&j->sup_status, p == j->sup ? st : 0);
    atomic_store(&j->reaped, true);
    return NULL;
}

job *jobs_start(tool_env *env, const char *command, int timeout_s, bool sandbox, ds4_error *err)
{
    struct job_table *t = table(env);
    jobs_poll_all(env);
    if (jobs_running(env) >= JOB_MAX_RUNNING) {
        ds4_error_set(err, "%d jobs are running already; stop one (bash_stop) or wait for one to end",
                 JOB_MAX_RUNNING);
        return NULL;
    }
    int id = ++t->next_id;
    job *j = xcalloc(1, sizeof *j);
    j->id = id;
    j->report_fd = j->log_fd = -1;
    j->command = xstrdup(command);
    /* The process in the name: a session's logs outlive it (see
     * sessions.h), and the next process numbers its jobs from 1 again. */
    j->log_path = xprintf("%s/job-%d-%ld.log", env->state_dir, id, (long)getpid());
    j->timeout_s = timeout_s;
    j->sandboxed = sandbox;
    int log_w = open(j->log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    j->log_fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    int rep[2] = { -1, -1 };
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    sandbox_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.ruleset_fd = -1;
    const char *fail = NULL;
    if (log_w < 0 || j->log_fd < 0) fail = "cannot create the job log";
    else if (pipe2(rep, O_CLOEXEC) != 0) fail = "cannot create a pipe";
    else if (devnull < 0) fail = "cannot open /dev/null";
    if (!fail && sandbox && sandbox_prepare(env, NULL, &plan, err) != 0) fail = "";
    if (fail) {
        if (*fail) ds4_error_set(err, "%s: %s", fail, strerror(errno));
        if (log_w >= 0) close(log_w);
        if (rep[0] >= 0) { close(rep[0]); close(rep[1]); }
        if (devnull >= 0) close(devnull);
        if (j->log_fd >= 0) close(j->log_fd);
        unlink(j->log_path);
        free(j->command);
        free(j->log_path);
        free(j);
        t->next_id--;
        return NULL;
    }
    const char *shell = access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
    char *argv[] = { (char *)(strcmp(shell, "/bin/bash") ? "sh" : "bash"), "-c", j->command, NULL };
    char **envp = build_env(id);
    spawn_args sp = {
        .shell_path = shell, .argv = argv, .envp = envp, .workspace = env->workspace,
        .log_fd = log_w, .report_w = rep[1], .devnull = devnull, .parent = getpid(),
        .timeout_s = timeout_s, .plan = sandbox ? &plan : NULL,
    };
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    j->start_ms = base_now_ms();
    pid_t pid = fork();
    if (pid == 0) supervise(&sp);
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(log_w);
    close(rep[1]);
    close(devnull);
    sandbox_plan_release(&plan);
    free_env(envp);
    if (pid < 0) {
        ds4_error_set(err, "cannot start the job: %s", strerror(fork_errno));
        close(rep[0]);
        close(j->log_fd);
        unlink(j->log_path);
        free(j->command);
        free(j->log_path);
        free(j);
        t->next_id--;
        return NULL;
    }
    j->sup = pid;
    j->report_fd = rep[0];
    fcntl(j->report_fd, F_SETFL, O_NONBLOCK);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int prc = pthread_create(&j->reaper, &attr, reaper_main, j);
    pthread_attr_destroy(&attr);
    if (prc != 0) {
        /* no thread: reap synchronously after a kill so nothing is left */
        kill(pid, SIGTERM);
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        ds4_error_set(err, "cannot start the job: no thread for it");
        close(rep[0]);
        close(j->log_fd);
        unlink(j->log_path);
        free(j->command);
        free(j->log_path);
        free(j);
        t->next_id--;
        return NULL;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 8;
        t->v = xrealloc(t->v, t->cap * sizeof *t->v);
    }
    t->v[t->n++] = j;
    return j;
}

void job_poll(job *j)
{
    if (j->done) return;
    if (j->report_fd >= 0) {
        int rec[2];
        for (;;) {
            ssize_t r = read(j->report_fd, rec, sizeof rec);
            if (r == (ssize_t)sizeof rec) {
                switch (rec[0]) {
                case REP_STARTED: j->shell = rec[1]; break;
                case REP_SHELL_EXIT: j->shell_exited = true; j->shell_status = rec[1]; break;
                case REP_TIMEOUT: j->timed_out = true; break;
                case REP_STOPPING: j->stopping = true; break;
                case REP_LOG_CAPPED: j->log_capped = true; break;
                default: break;
                }
                continue;
            }
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) {
                close(j->report_fd);
                j->report_fd = -1;
            }
            break;
        }
    }
    if (atomic_load(&j->reaped)) {
        int st = atomic_load(&j->sup_status);
        pthread_join(j->reaper, NULL);
        j->reaper_joined = true;
        j->done = true;
        j->end_ms = base_now_ms();
        if (j->report_fd >= 0) {
            /* records written just before the exit */
            int rec[2];
            while (read(j->report_fd, rec, sizeof rec) == (ssize_t)sizeof rec) {
                if (rec[0] == REP_SHELL_EXIT) { j->shell_exited = true; j->shell_status = rec[1]; }
                else if (rec[0] == REP_TIMEOUT) j->timed_out = true;
                else if (rec[0] == REP_STOPPING) j->stopping = true;
            }
            close(j->report_fd);
            j->report_fd = -1;
        }
        /* a supervisor that died abnormally leaves its group behind */
        if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
            if (j->shell > 0) kill(-j->shell, SIGKILL);
            kill(-j->sup, SIGKILL);
        }
    }
}

void jobs_poll_all(tool_env *env)
{
    if (!env->jobs) return;
    for (size_t i = 0; i < env->jobs->n; i++) job_poll(env->jobs->v[i]);
}

void job_stop(job *j)
{
    job_poll(j);
    if (j->done) return;
    kill(j->sup, SIGTERM);
    j->stopping = true;
}

job *jobs_find(tool_env *env, int id)
{
    if (!env->jobs) return NULL;
    for (size_t i = 0; i < env->jobs->n; i++)
        if (env->jobs->v[i]->id == id) return env->jobs->v[i];
    return NULL;
}

size_t jobs_running(tool_env *env)
{
    size_t n = 0;
    if (!env->jobs) return 0;
    for (size_t i = 0; i < env->jobs->n; i++) n += !env->jobs->v[i]->done;
    return n;
}

int job_log_fd(job *j)
{
    if (j->log_fd < 0) j->log_fd = open(j->log_path, O_RDONLY | O_CLOEXEC);
    return j->log_fd;
}

size_t job_log_size(job *j)
{
    struct stat st;
    int fd = job_log_fd(j);
    if (fd < 0 || fstat(fd, &st) != 0) return 0;
    return (size_t)st.st_size;
}

void job_release(job *j)
{
    if (!j->done) return;
    if (j->log_fd >= 0) close(j->log_fd);
    j->log_fd = -1;
}

void jobs_free(tool_env *env)
{
    struct job_table *t = env->jobs;
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) job_stop(t->v[i]);
    double until = base_now_ms() + JOB_KILL_GRACE_MS + 1000;
    for (;;) {
        jobs_poll_all(env);
        if (!jobs_running(env) || base_now_ms() > until) break;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    for (size_t i = 0; i < t->n; i++) {
        job *j = t->v[i];
        if (!j->done) {
            if (j->shell > 0) kill(-j->shell, SIGKILL);
            kill(-j->sup, SIGKILL);
            kill(j->sup, SIGKILL);
        }
        if (!j->reaper_joined) pthread_join(j->reaper, NULL);
        if (j->report_fd >= 0) close(j->report_fd);
        if (j->log_fd >= 0) close(j->log_fd);
        /* kept: the transcript may point at it; its directory's owner
         * (a session, or the environment's own temporary one) bounds it */
        free(j->command);
        free(j->log_path);
        free(j);
    }
    free(t->v);
    free(t);
    env->jobs = NULL;
}
