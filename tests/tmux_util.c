/* tmux_util.c — see tmux_util.h. */
#include "tests/tmux_util.h"
#include "tests/test.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 50
#define SHELL_LIFETIME_S 900

static char g_socks[8][96];
static int g_nsocks;

static void kill_all(void)
{
    for (int i = 0; i < g_nsocks; i++) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "tmux -L '%s' kill-server >/dev/null 2>&1", g_socks[i]);
        int rc = system(cmd);
        (void)rc;
    }
    g_nsocks = 0;
}

/* 'text' for sh, with embedded quotes escaped (runner-owned). */
static char *quote(const char *s)
{
    size_t n = strlen(s), k = 2;
    for (size_t i = 0; i < n; i++) k += s[i] == '\'' ? 4 : 1;
    char *q = test_alloc(k + 1);
    char *p = q;
    *p++ = '\'';
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') {
            memcpy(p, "'\\''", 4);
            p += 4;
        } else {
            *p++ = s[i];
        }
    }
    *p++ = '\'';
    *p = 0;
    return q;
}

static void tmux(tmux_t *t, const char *fmt, const char *arg)
{
    char *out;
    char *cmd = test_printf(fmt, arg ? arg : "");
    int rc = test_runf(&out, "tmux -L '%s' %s", t->sock, cmd);
    CHECK_MSG(rc == 0, "tmux %s: exit %d: %s", cmd, rc, out);
}

static const char *san_dir(void) { return test_tmp_path("sanitizer-logs"); }

/* The current value of an environment variable with more appended. */
static char *env_plus(const char *name, const char *more)
{
    const char *v = getenv(name);
    return test_printf("%s=%s%s%s", name, v && *v ? v : "", v && *v ? ":" : "", more);
}

void tmux_start(tmux_t *t, int cols, int rows, const char *env)
{
    if (!test_have_program("tmux")) SKIP("tmux is not installed");
    static int counter;
    snprintf(t->sock, sizeof t->sock, "ds4cl-test-%d-%d", (int)getpid(), counter++);
    snprintf(t->target, sizeof t->target, "t");
    if (g_nsocks == 0) atexit(kill_all);
    if (g_nsocks < 8) snprintf(g_socks[g_nsocks++], sizeof g_socks[0], "%s", t->sock);
    char *mk = test_printf("mkdir -p '%s'", san_dir());
    char *out;
    CHECK_EQ_INT(test_run(mk, &out), 0);
    const char *term = "tmux-256color";
    if (test_runf(&out, "infocmp tmux-256color >/dev/null 2>&1") != 0) term = "screen-256color";
    /* The shell gets a fixed environment: a UTF-8 locale, the XDG dirs
     * of the test, the sanitizers' reports in files. */
    char *shell_env = test_printf(
        "env -u TMUX TERM=%s LANG=C.UTF-8 LC_ALL= HOME=%s XDG_DATA_HOME=%s XDG_CACHE_HOME=%s XDG_STATE_HOME=%s "
        "XDG_CONFIG_HOME=%s PS1='ds4sh$ ' ENV= %s %s %s %s",
        term, test_tmpdir(), test_tmp_path(".xdg/data"), test_tmp_path(".xdg/cache"), test_tmp_path(".xdg/state"),
        test_tmp_path(".xdg/config"), quote(env_plus("ASAN_OPTIONS", test_printf("log_path=%s/asan", san_dir()))),
        quote(env_plus("TSAN_OPTIONS", test_printf("log_path=%s/tsan", san_dir()))),
        quote(env_plus("UBSAN_OPTIONS", test_printf("log_path=%s/ubsan", san_dir()))), env ? env : "");
    char *cmd = test_printf("cd %s && exec timeout %d %s sh", quote(test_tmpdir()), SHELL_LIFETIME_S, shell_env);
    int rc = test_runf(&out,
                       "tmux -L '%s' -f /dev/null new-session -d -s t -x %d -y %d %s && "
                       "tmux -L '%s' set-option -g status off && tmux -L '%s' set-option -g escape-time 10",
                       t->sock, cols, rows, quote(cmd), t->sock, t->sock);
    CHECK_MSG(rc == 0, "cannot start tmux (%d): %s", rc, out);
    tmux_wait(t, "ds4sh$", 10000);
}

void tmux_type(tmux_t *t, const char *text)
{
    tmux(t, "send-keys -t t -l -- %s", quote(text));
}

void tmux_keys(tmux_t *t, const char *keys)
{
    tmux(t, "send-keys -t t %s", keys);
}

const char *tmux_screen(tmux_t *t)
{
    char *out;
    test_runf(&out, "tmux -L '%s' capture-pane -p -t t", t->sock);
    return out;
}

const char *tmux_screen_escapes(tmux_t *t)
{
    char *out;
    test_runf(&out, "tmux -L '%s' capture-pane -p -e -t t", t->sock);
    return out;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

const char *tmux_wait(tmux_t *t, const char *text, int timeout_ms)
{
    double until = test_now_ms() + timeout_ms;
    for (;;) {
        const char *s = tmux_screen(t);
        if (strstr(s, text)) return s;
        if (test_now_ms() > until) FAIL("\"%s\" did not appear within %d ms; the screen:\n%s", text, timeout_ms, s);
        sleep_ms(POLL_MS);
    }
}

void tmux_wait_gone(tmux_t *t, const char *text, int timeout_ms)
{
    double until = test_now_ms() + timeout_ms;
    for (;;) {
        const char *s = tmux_screen(t);
        if (!strstr(s, text)) return;
        if (test_now_ms() > until) FAIL("\"%s\" stayed for %d ms; the screen:\n%s", text, timeout_ms, s);
        sleep_ms(POLL_MS);
    }
}

bool tmux_alternate_screen(tmux_t *t)
{
    char *out;
    test_runf(&out, "tmux -L '%s' display-message -p -t t '#{alternate_on}'", t->sock);
    return out[0] == '1';
}

void tmux_resize(tmux_t *t, int cols, int rows)
{
    char *arg = test_printf("-x %d -y %d", cols, rows);
    tmux(t, "resize-window -t t %s", arg);
}

int tmux_program_pid(tmux_t *t)
{
    char *out;
    test_runf(&out, "tmux -L '%s' display-message -p -t t '#{pane_pid}'", t->sock);
    int shell = atoi(out);
    if (shell <= 0) return -1;
    /* the pane runs timeout, which runs sh, which runs the program */
    for (int depth = 0; depth < 3; depth++) {
        test_runf(&out, "pgrep -P %d | head -n 1", shell);
        int child = atoi(out);
        if (child <= 0) return depth ? shell : -1;
        test_runf(&out, "cat /proc/%d/comm", child);
        if (!strncmp(out, "ds4cl", 5)) return child;
        shell = child;
    }
    return -1;
}

void tmux_kill(tmux_t *t)
{
    char *out;
    test_runf(&out, "tmux -L '%s' kill-server", t->sock);
}

void tmux_run_ds4cl(tmux_t *t, const char *args)
{
    char *line = test_printf("clear; '%s/ds4cl' %s; echo EXIT=$?", test_bindir(), args);
    tmux_type(t, line);
    tmux_keys(t, "Enter");
}

void tmux_check_terminal_restored(tmux_t *t)
{
    CHECK_MSG(!tmux_alternate_screen(t), "the alternate screen is still on:\n%s", tmux_screen(t));
    /* markers the shell computes, so the typed line itself never matches */
    tmux_type(t, "clear; echo STTY $(stty -a | tr ' ;' '\\n\\n' | grep -E '^-?(icanon|echo|icrnl|opost|isig)$') "
                 "DONE-$((40+2))");
    tmux_keys(t, "Enter");
    const char *s = tmux_wait(t, "DONE-42", 10000);
    const char *line = strstr(s, "STTY ");
    while (line && !strstr(line, "DONE-42")) line = strstr(line + 1, "STTY ");
    CHECK_MSG(line != NULL, "no stty output:\n%s", s);
    const char *end = strstr(line, "DONE-42");
    char *words = test_printf("%.*s", (int)(end - line), line);
    const char *want[] = { " icanon ", " echo ", " icrnl ", " opost ", " isig " };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECK_MSG(strstr(words, want[i]), "the tty is not sane (%s missing): %s", want[i], words);
    CHECK_MSG(!strstr(words, " -"), "the tty is not sane: %s", words);
    /* the shell reads lines again: typed text echoes and runs */
    tmux_type(t, "echo shell-$((40+2))");
    tmux_keys(t, "Enter");
    tmux_wait(t, "shell-42", 10000);
}

void tmux_check_sanitizers(void)
{
    DIR *d = opendir(san_dir());
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *path = test_printf("%s/%s", san_dir(), e->d_name);
        char *text = test_read_file(path, NULL);
        closedir(d);
        FAIL("a sanitizer reported (%s):\n%s", e->d_name, text ? text : "");
    }
    closedir(d);
}
