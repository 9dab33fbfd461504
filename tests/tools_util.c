/* tools_util.c — see tools_util.h. */
#include "tests/tools_util.h"

#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/capability.h>
#include <sys/prctl.h>

static tool_env *g_env;

static void cleanup(void)
{
    if (g_env) tool_env_free(g_env);
    g_env = NULL;
}

const char *tu_workspace(void)
{
    const char *ws = test_tmp_path("ws");
    mkdir(ws, 0755);
    return ws;
}

#define TAG_VAR "DS4CL_TEST_PROCESS_TAG"

void tu_tag_processes(void)
{
    char v[32];
    snprintf(v, sizeof v, "%d", (int)getpid());
    setenv(TAG_VAR, v, 1);
}

/* True when the environment of process pid carries this test's tag. */
static bool tagged(const char *pid)
{
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/environ", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char want[64];
    int wl = snprintf(want, sizeof want, TAG_VAR "=%d", (int)getpid());
    static char buf[1 << 18];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)r;
    close(fd);
    for (size_t i = 0; i < len;) {
        size_t n = strnlen(buf + i, len - i);
        if (n == (size_t)wl && !memcmp(buf + i, want, n)) return true;
        i += n + 1;
    }
    return false;
}

tool_env *tu_env_cfg(tool_env_config *cfg)
{
    tu_tag_processes();
    setenv("XDG_CONFIG_HOME", test_tmp_path("xdg"), 1);
    if (!cfg->workspace) cfg->workspace = tu_workspace();
    if (!cfg->state_dir) cfg->state_dir = test_tmp_path("state");
    ds4_error err = { "" };
    tool_env *env = tool_env_new(cfg, &err);
    if (!env) FAIL("tool_env_new: %s", err.msg);
    if (!g_env) {
        g_env = env;
        atexit(cleanup);
    }
    return env;
}

tool_env *tu_env(void)
{
    tool_env_config cfg = { .yes_to_all = true };
    return tu_env_cfg(&cfg);
}

void tu_free(tool_env *env)
{
    if (env == g_env) g_env = NULL;
    tool_env_free(env);
}

tu_result tu_call_ctx(tool_env *env, const char *tool, const char *args_json, const tool_call_ctx *ctx)
{
    tool_result r;
    tools_run(env, tool, args_json, ctx, &r);
    tu_result t = { test_strdup(r.text ? r.text : "(null)"), r.is_error, r.denied };
    if (!r.text) FAIL("tools_run left no text for %s", tool);
    if (r.is_error != (strncmp(r.text, "Tool error: ", 12) == 0))
        FAIL("is_error does not match the text of %s: %s", tool, r.text);
    tool_result_free(&r);
    return t;
}

tu_result tu_call(tool_env *env, const char *tool, const char *args_json)
{
    return tu_call_ctx(env, tool, args_json, NULL);
}

const char *tu_path(const char *rel)
{
    return test_printf("%s/%s", tu_workspace(), rel);
}

const char *tu_file(const char *rel, const char *content)
{
    const char *p = tu_path(rel);
    char *dir = test_strdup(p);
    char *slash = strrchr(dir, '/');
    *slash = 0;
    test_runf(NULL, "mkdir -p '%s'", dir);
    test_write_file(p, content, strlen(content));
    return p;
}

const char *tu_content(const char *rel)
{
    return test_read_file(tu_path(rel), NULL);
}

const char *tu_json_str(const char *s)
{
    json_object *o = json_object_new_string(s);
    const char *r = test_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    json_object_put(o);
    return r;
}

int tu_procs_with(const char *marker, int *zombies)
{
    DIR *d = opendir("/proc");
    int n = 0, z = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (atoi(e->d_name) == getpid()) continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        bool match = false;
        if (r > 0) {
            for (ssize_t i = 0; i < r; i++)
                if (!buf[i]) buf[i] = ' ';
            buf[r] = 0;
            match = strstr(buf, marker) != NULL;
        }
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        r = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (r <= 0) continue;
        buf[r] = 0;
        char *p = strrchr(buf, ')');
        bool zombie = p && p[1] == ' ' && p[2] == 'Z';
        /* a zombie's cmdline is empty: match it by its comm */
        if (!match && zombie) continue;
        /* processes of other test runs (a parallel `make test`) carry
         * the same markers */
        if (match && !zombie && !tagged(e->d_name)) continue;
        if (match) {
            if (zombie) z++;
            else n++;
        }
    }
    closedir(d);
    if (zombies) *zombies = z;
    return n;
}

bool tu_wait_gone(const char *marker, int ms)
{
    double until = test_now_ms() + ms;
    for (;;) {
        if (tu_procs_with(marker, NULL) == 0) return true;
        if (test_now_ms() > until) return false;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

int tu_my_zombies(void)
{
    DIR *d = opendir("/proc");
    int z = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t r = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (r <= 0) continue;
        buf[r] = 0;
        char *p = strrchr(buf, ')');
        if (!p) continue;
        char state;
        int ppid;
        if (sscanf(p + 2, "%c %d", &state, &ppid) == 2 && state == 'Z' && ppid == getpid()) z++;
    }
    closedir(d);
    return z;
}

bool tu_wait_no_zombies(int ms)
{
    double until = test_now_ms() + ms;
    for (;;) {
        if (tu_my_zombies() == 0) return true;
        if (test_now_ms() > until) return false;
        struct timespec ts = { 0, 10 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

void tu_hide_landlock(void)
{
    /* landlock_create_ruleset, _add_rule, _restrict_self: the same numbers
     * on every architecture */
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 444, 0, 2),
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 446, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        SKIP("cannot install a seccomp filter: %s", strerror(errno));
}

void tu_obey_permission_bits(void)
{
    if (geteuid() != 0) return;
    cap_t c = cap_get_proc();
    cap_value_t v[] = { CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER };
    if (!c || cap_set_flag(c, CAP_EFFECTIVE, 3, v, CAP_CLEAR) != 0 || cap_set_proc(c) != 0) {
        if (c) cap_free(c);
        SKIP("cannot drop the capabilities that override permission bits");
    }
    cap_free(c);
}
