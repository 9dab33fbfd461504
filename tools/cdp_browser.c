/* cdp_browser.c — starting and stopping a headless Chromium/Chrome.
 *
 * Process layout:
 *
 *   agent ──fork──▶ watchdog (setsid: leader of a new process group)
 *                      └─posix_spawn──▶ browser (+ zygotes, renderers, …)
 *
 * The watchdog holds the read end of the "lifeline" pipe; the agent holds
 * the only write end (close-on-exec, so commands the agent runs do not
 * inherit it). When the agent goes away in any manner the pipe reports
 * end-of-file and the watchdog kills the whole group, so no browser outlives
 * the agent. Chrome's crash handler daemonizes out of the group; it exits by
 * itself when the browser dies, and cdp_browser_close() sweeps any process
 * whose command line still names our throwaway directory.
 *
 * Between fork() and exec the child of a multi-threaded process may only use
 * async-signal-safe calls, so everything the watchdog needs (argv, envp,
 * spawn attributes) is built before the fork.
 */
#include "tools/cdp.h"

#include "base/base.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define STARTUP_POLL_MS 20

struct cdp_browser {
    pid_t watchdog; /* our child, leader of the browser's process group */
    int pidfd;      /* of the watchdog; -1 when the kernel has none */
    int lifeline;   /* write end; closing it makes the watchdog kill the group */
    bool exited;
    char *dir;
    char *exe;      /* for messages */
    int start_timeout_ms;
    char http_url[64];
};

static const char *const g_candidates[] = {
    "chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", NULL,
};

static char *search_path(const char *name)
{
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    strbuf full = {0};
    while (*path) {
        size_t n = strcspn(path, ":");
        sb_clear(&full);
        if (n) sb_append(&full, path, n);
        else sb_putc(&full, '.');
        sb_printf(&full, "/%s", name);
        struct stat st;
        if (stat(full.s, &st) == 0 && S_ISREG(st.st_mode) && access(full.s, X_OK) == 0)
            return sb_take(&full);
        path += n;
        if (*path == ':') path++;
    }
    sb_free(&full);
    return NULL;
}

char *cdp_find_browser(const char *explicit_path, ds4_error *err)
{
    if (explicit_path && *explicit_path) {
        if (strchr(explicit_path, '/')) {
            struct stat st;
            if (stat(explicit_path, &st) == 0 && S_ISREG(st.st_mode) &&
                access(explicit_path, X_OK) == 0) {
                char *s = xstrdup(explicit_path);
                return s;
            }
            ds4_error_set(err, "browser %s is not an executable file", explicit_path);
            return NULL;
        }
        char *found = search_path(explicit_path);
        if (!found) ds4_error_set(err, "browser %s not found on PATH", explicit_path);
        return found;
    }
    for (int i = 0; g_candidates[i]; i++) {
        char *found = search_path(g_candidates[i]);
        if (found) return found;
    }
    ds4_error_set(err,
             "no Chromium or Chrome found (looked on PATH for chromium, chromium-browser, "
             "google-chrome, google-chrome-stable, chrome); install one, name it with "
             "--browser PATH, or attach to a running one with --cdp-url");
    return NULL;
}

static bool watchdog_exited(cdp_browser *b)
{
    if (b->exited) return true;
    if (b->pidfd >= 0) {
        struct pollfd p = { b->pidfd, POLLIN, 0 };
        if (poll(&p, 1, 0) > 0) {
            b->exited = true;
            waitpid(b->watchdog, NULL, WNOHANG);
        }
        return b->exited;
    }
    int st;
    pid_t r = waitpid(b->watchdog, &st, WNOHANG);
    if (r == b->watchdog || (r < 0 && errno == ECHILD)) b->exited = true;
    return b->exited;
}

bool cdp_browser_alive(cdp_browser *b) { return b && !watchdog_exited(b); }
const char *cdp_browser_http_url(const cdp_browser *b) { return b->http_url; }
const char *cdp_browser_dir(const cdp_browser *b) { return b->dir; }
pid_t cdp_browser_pgid(const cdp_browser *b) { return b->watchdog; }

/* The watchdog: runs in the forked child, async-signal-safe calls only. */
static _Noreturn void watchdog_main(int lifeline_rd, int devnull, const char *exe,
                                    posix_spawn_file_actions_t *fa, posix_spawnattr_t *attr,
                                    char *const argv[], char *const envp[])
{
    setsid();
    pid_t browser;
    if (posix_spawn(&browser, exe, fa, attr, argv, envp) != 0) _exit(127);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (lifeline_rd != 3) {
        dup2(lifeline_rd, 3);
        lifeline_rd = 3;
    }
    syscall(SYS_close_range, 4u, ~0u, 0u);
    for (;;) {
        struct pollfd p = { lifeline_rd, POLLIN, 0 };
        int r = poll(&p, 1, 200);
        if (r > 0) break; /* end of file: the agent is gone or wants us gone */
        int st;
        pid_t w = waitpid(browser, &st, WNOHANG);
        if (w == browser || (w < 0 && errno == ECHILD)) break;
    }
    /* The whole group, ourselves included. */
    kill(0, SIGKILL);
    _exit(0);
}

/* Processes whose command line mentions dir (the crash handler leaves the
 * group); killed so nothing holds the profile or outlives the agent.
 * Returns how many were still alive (a dying process keeps its command line
 * until its memory is gone). */
static int sweep_stragglers(const char *dir)
{
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int alive = 0;
    pid_t self = getpid();
    size_t dlen = strlen(dir);
    struct dirent *e;
    char path[64];
    char buf[8192];
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 1 || pid == self) continue;
        snprintf(path, sizeof path, "/proc/%ld/cmdline", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        for (ssize_t i = 0; i < n; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[n] = 0;
        if (memmem(buf, (size_t)n, dir, dlen)) {
            kill((pid_t)pid, SIGKILL);
            alive++;
        }
    }
    closedir(d);
    return alive;
}

void cdp_browser_close(cdp_browser *b)
{
    if (!b) return;
    if (b->lifeline >= 0) close(b->lifeline);
    /* The watchdog would do this within a poll period; doing it here makes
     * the shutdown immediate. The group id stays reserved while any member
     * lives, so it cannot name a stranger. */
    if (!watchdog_exited(b)) kill(-b->watchdog, SIGKILL);
    double deadline = base_now_ms() + 3000;
    while (!watchdog_exited(b) && base_now_ms() < deadline) {
        struct pollfd p = { b->pidfd, POLLIN, 0 };
        if (b->pidfd >= 0) poll(&p, 1, 20);
        else usleep(5000);
    }
    if (!b->exited) {
        kill(b->watchdog, SIGKILL);
        waitpid(b->watchdog, NULL, 0);
    }
    if (b->pidfd >= 0) close(b->pidfd);
    if (b->dir) {
        /* SIGKILL takes effect asynchronously: wait until the browser's
         * processes are really gone, so none outlives this call. */
        double until = base_now_ms() + 3000;
        while (sweep_stragglers(b->dir) > 0 && base_now_ms() < until) usleep(5000);
        rm_rf(b->dir);
        free(b->dir);
    }
    free(b->exe);
    free(b);
}

/* The last lines of the browser's log that say something (the D-Bus noise
 * of containers left out), for startup errors. */
static void log_tail(const char *dir, char *out, size_t size)
{
    out[0] = 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/browser.log", dir);
    size_t len = 0;
    char *log = file_read_all(path, &len);
    if (!log) return;
    strbuf keep = {0};
    char *save = NULL;
    for (char *line = strtok_r(log, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "dbus") || strstr(line, "D-Bus") || !*line) continue;
        sb_clear(&keep);
        sb_puts(&keep, line);
    }
    if (keep.len) {
        size_t off = keep.len > size - 1 ? keep.len - (size - 1) : 0;
        snprintf(out, size, "%s", keep.s + off);
    }
    sb_free(&keep);
    free(log);
}

static int read_port_file(const char *path)
{
    size_t len = 0;
    char *s = file_read_all(path, &len);
    if (!s) return 0;
    /* Chrome writes "PORT\n/devtools/browser/UUID"; a half-written file has
     * no newline yet. */
    int port = 0;
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = 0;
        char *end;
        long v = strtol(s, &end, 10);
        if (end != s && !*end && v > 0 && v < 65536) port = (int)v;
    }
    free(s);
    return port;
}

static char **build_env(const char *dir)
{
    size_t n = 0;
    while (environ[n]) n++;
    char **envp = xcalloc(n + 3, sizeof *envp);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        if (!strncmp(environ[i], "XDG_CONFIG_HOME=", 16) || !strncmp(environ[i], "XDG_CACHE_HOME=", 15))
            continue;
        envp[j++] = xstrdup(environ[i]);
    }
    /* Chrome puts its crash database and caches under these; keep them in
     * the throwaway directory instead of the user's home. */
    strbuf s = {0};
    sb_printf(&s, "XDG_CONFIG_HOME=%s/config", dir);
    envp[j++] = sb_take(&s);
    sb_printf(&s, "XDG_CACHE_HOME=%s/cache", dir);
    envp[j++] = sb_take(&s);
    envp[j] = NULL;
    return envp;
}

static void free_strv(char **v)
{
    if (!v) return;
    for (size_t i = 0; v[i]; i++) free(v[i]);
    free(v);
}

cdp_browser *cdp_browser_start(const cdp_launch_opts *opts, ds4_error *err)
{
    cdp_launch_opts none = {0};
    if (!opts) opts = &none;
    char *exe = cdp_find_browser(opts->executable, err);
    if (!exe) return NULL;

    const char *base = opts->base_dir;
    if (!base || !*base) base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    if (base_mkdir_p(base, 0700) != 0) {
        ds4_error_set(err, "cannot create %s: %s", base, strerror(errno));
        free(exe);
        return NULL;
    }
    char prefix[4096], dir[4200];
    snprintf(prefix, sizeof prefix, "%s/ds4cl-browser-", base);
    if (temp_template(dir, sizeof dir, prefix) != 0 || !mkdtemp(dir)) {
        ds4_error_set(err, "cannot create a browser profile under %s: %s", base, strerror(errno));
        free(exe);
        return NULL;
    }
    cdp_browser *b = xcalloc(1, sizeof *b);
    b->dir = xstrdup(dir);
    b->exe = exe;
    b->start_timeout_ms = opts->start_timeout_ms > 0 ? opts->start_timeout_ms : 20000;
    b->lifeline = -1;
    b->pidfd = -1;
    b->watchdog = -1;
    b->exited = true; /* until there is a watchdog */

    strbuf p = {0};
    const char *subdirs[] = { "profile", "config", "cache" };
    for (int i = 0; i < 3; i++) {
        sb_clear(&p);
        sb_printf(&p, "%s/%s", b->dir, subdirs[i]);
        base_mkdir_p(p.s, 0700);
    }

    char *argv[32];
    int argc = 0;
    argv[argc++] = strdup(exe);
    const char *flags[] = {
        "--headless", "--no-first-run", "--no-default-browser-check", "--disable-sync",
        "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
        "--disable-gpu", "--disable-quic", "--disable-extensions", "--disable-breakpad",
        "--disable-dev-shm-usage", "--mute-audio", "--hide-scrollbars", "--password-store=basic",
        "--window-size=1280,900", "--remote-debugging-port=0", NULL,
    };
    for (int i = 0; flags[i]; i++) argv[argc++] = strdup(flags[i]);
    /* Chrome's sandbox cannot run as root; as anyone else keep it. */
    if (geteuid() == 0) argv[argc++] = strdup("--no-sandbox");
    sb_clear(&p);
    sb_printf(&p, "--user-data-dir=%s/profile", b->dir);
    argv[argc++] = sb_take(&p);
    argv[argc++] = strdup("about:blank");
    argv[argc] = NULL;
    char **envp = build_env(b->dir);

    sb_printf(&p, "%s/browser.log", b->dir);
    int logfd = open(p.s, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int pipefd[2] = { -1, -1 };
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    bool ok = logfd >= 0 && devnull >= 0 && pipe2(pipefd, O_CLOEXEC) == 0;
    if (ok) {
        posix_spawn_file_actions_adddup2(&fa, devnull, 0);
        posix_spawn_file_actions_adddup2(&fa, logfd, 1);
        posix_spawn_file_actions_adddup2(&fa, logfd, 2);
        posix_spawn_file_actions_addclosefrom_np(&fa, 3);
        sigset_t none_set, all_set;
        sigemptyset(&none_set);
        sigfillset(&all_set);
        sigdelset(&all_set, SIGKILL);
        sigdelset(&all_set, SIGSTOP);
        posix_spawnattr_setsigmask(&attr, &none_set);
        posix_spawnattr_setsigdefault(&attr, &all_set);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        pid_t pid = fork();
        if (pid == 0) watchdog_main(pipefd[0], devnull, exe, &fa, &attr, argv, envp);
        if (pid < 0) {
            ok = false;
        } else {
            b->watchdog = pid;
            b->exited = false;
            b->lifeline = pipefd[1];
            pipefd[1] = -1;
            b->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        }
    }
    int saved = errno;
    if (pipefd[0] >= 0) close(pipefd[0]);
    if (pipefd[1] >= 0) close(pipefd[1]);
    if (logfd >= 0) close(logfd);
    if (devnull >= 0) close(devnull);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    for (int i = 0; i < argc; i++) free(argv[i]);
    free_strv(envp);
    sb_free(&p);
    if (!ok) {
        ds4_error_set(err, "cannot start %s: %s", exe, strerror(saved));
        cdp_browser_close(b);
        return NULL;
    }
    return b;
}

int cdp_browser_wait_ready(cdp_browser *b, const cdp_cancel *cancel, ds4_error *err)
{
    const char *exe = b->exe;
    strbuf p = {0};
    sb_printf(&p, "%s/profile/DevToolsActivePort", b->dir);
    double deadline = base_now_ms() + b->start_timeout_ms;
    int port = 0, rc = CDP_OK;
    for (;;) {
        port = read_port_file(p.s);
        if (port) break;
        if (watchdog_exited(b)) {
            char tail[300];
            log_tail(b->dir, tail, sizeof tail);
            ds4_error_set(err, "the browser %s exited during startup%s%s", exe,
                     tail[0] ? ": " : "", tail);
            rc = CDP_CLOSED;
            break;
        }
        if (cancel && cancel->fn && cancel->fn(cancel->ud)) {
            ds4_error_set(err, "cancelled");
            rc = CDP_CANCELLED;
            break;
        }
        if (base_now_ms() >= deadline) {
            char tail[300];
            log_tail(b->dir, tail, sizeof tail);
            ds4_error_set(err, "the browser %s did not open its DevTools port within %.0f s%s%s",
                     exe, b->start_timeout_ms / 1e3, tail[0] ? ": " : "", tail);
            rc = CDP_TIMEOUT;
            break;
        }
        usleep(STARTUP_POLL_MS * 1000);
    }
    sb_free(&p);
    if (rc == CDP_OK) {
        snprintf(b->http_url, sizeof b->http_url, "http://127.0.0.1:%d", port);
        int left = (int)(deadline - base_now_ms());
        if (left < 1000) left = 1000;
        rc = cdp_version(b->http_url, left, cancel, NULL, NULL, NULL, err);
    }
    return rc;
}

cdp_browser *cdp_browser_launch(const cdp_launch_opts *opts, const cdp_cancel *cancel,
                                ds4_error *err)
{
    cdp_browser *b = cdp_browser_start(opts, err);
    if (b && cdp_browser_wait_ready(b, cancel, err) != CDP_OK) {
        cdp_browser_close(b);
        b = NULL;
    }
    return b;
}
