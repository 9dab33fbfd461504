/* sandbox.c — Landlock ruleset and read-only mounts for bash commands
 * (see sandbox.h), and the one-time probe of what the kernel offers. */
#include "tools/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/landlock.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif
/* rights newer than some installed headers */
#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER (1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE (1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV (1ULL << 15)
#endif

#define FS_READ (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_READ_DIR)
#define FS_FILE_RIGHTS (LANDLOCK_ACCESS_FS_EXECUTE | LANDLOCK_ACCESS_FS_WRITE_FILE | \
                        LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_TRUNCATE | \
                        LANDLOCK_ACCESS_FS_IOCTL_DEV)

static int ll_abi(int *err)
{
    long v = syscall(__NR_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);
    *err = v < 0 ? errno : 0;
    return v < 0 ? 0 : (int)v;
}

static unsigned long long handled_for(int abi)
{
    unsigned long long h = (1ULL << 13) - 1; /* ABI 1: EXECUTE … MAKE_SYM */
    if (abi >= 2) h |= LANDLOCK_ACCESS_FS_REFER;
    if (abi >= 3) h |= LANDLOCK_ACCESS_FS_TRUNCATE;
    if (abi >= 5) h |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
    return h;
}

static int add_path_rule(int ruleset, const char *path, unsigned long long access, bool must)
{
    int fd = open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return must ? -1 : 0;
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) access &= FS_FILE_RIGHTS;
    struct landlock_path_beneath_attr pb = { .allowed_access = access, .parent_fd = fd };
    long rc = syscall(__NR_landlock_add_rule, ruleset, LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
    int e = errno;
    close(fd);
    if (rc != 0 && must) {
        errno = e;
        return -1;
    }
    return 0;
}

static unsigned long mount_flags_of(const char *path)
{
    struct statvfs sv;
    unsigned long f = 0;
    if (statvfs(path, &sv) != 0) return 0;
    if (sv.f_flag & ST_NOSUID) f |= MS_NOSUID;
    if (sv.f_flag & ST_NODEV) f |= MS_NODEV;
    if (sv.f_flag & ST_NOEXEC) f |= MS_NOEXEC;
    if (sv.f_flag & ST_NOATIME) f |= MS_NOATIME;
    if (sv.f_flag & ST_NODIRATIME) f |= MS_NODIRATIME;
    if (sv.f_flag & ST_RELATIME) f |= MS_RELATIME;
    return f;
}

static void plan_ns(sandbox_plan *plan)
{
    plan->userns = geteuid() != 0;
    snprintf(plan->uid_map, sizeof plan->uid_map, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(plan->gid_map, sizeof plan->gid_map, "%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
}

static int write_file(const char *path, const char *s)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = strlen(s);
    ssize_t w = write(fd, s, n);
    int e = errno;
    close(fd);
    if (w != (ssize_t)n) {
        errno = w < 0 ? e : EIO;
        return -1;
    }
    return 0;
}

int sandbox_apply(const sandbox_plan *plan, const char **step)
{
    if (plan->mount_ns && plan->nprotect > 0) {
        *step = "unshare";
        if (unshare(plan->userns ? CLONE_NEWUSER | CLONE_NEWNS : CLONE_NEWNS) != 0) return errno;
        if (plan->userns) {
            *step = "user namespace maps";
            if (write_file("/proc/self/setgroups", "deny") != 0 && errno != ENOENT) return errno;
            if (write_file("/proc/self/uid_map", plan->uid_map) != 0) return errno;
            if (write_file("/proc/self/gid_map", plan->gid_map) != 0) return errno;
        }
        *step = "private mounts";
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) return errno;
        for (int i = 0; i < plan->nprotect; i++) {
            *step = "read-only bind mount";
            if (mount(plan->protect[i], plan->protect[i], NULL, MS_BIND | MS_REC, NULL) != 0) return errno;
            if (mount(NULL, plan->protect[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | plan->protect_flags[i],
                      NULL) != 0)
                return errno;
        }
    }
    if (plan->ruleset_fd >= 0) {
        *step = "no_new_privs";
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
        *step = "landlock_restrict_self";
        if (syscall(__NR_landlock_restrict_self, plan->ruleset_fd, 0) != 0) return errno;
    }
    return 0;
}

/* Whether a read-only bind mount works here: a child tries it on a
 * scratch directory and checks that a write there fails. */
static bool probe_mount_ns(const char *scratch)
{
    sandbox_plan plan = { .ruleset_fd = -1, .mount_ns = true, .nprotect = 1 };
    size_t n = strlen(scratch);
    if (n + 8 >= sizeof plan.protect[0]) return false;
    plan_ns(&plan);
    memcpy(plan.protect[0], scratch, n + 1);
    plan.protect_flags[0] = mount_flags_of(scratch);
    char probe[sizeof plan.protect[0]];
    memcpy(probe, scratch, n);
    memcpy(probe + n, "/probe", 7);
    pid_t pid = fork();
    if (pid < 0) return false;
    if (pid == 0) {
        const char *step;
        if (sandbox_apply(&plan, &step) != 0) _exit(1);
        int fd = open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        _exit(fd < 0 && errno == EROFS ? 0 : 2);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    unlink(probe);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

void sandbox_probe(tool_env *env)
{
    if (env->sandbox.abi >= 0) return;
    int err = 0;
    env->sandbox.abi = ll_abi(&err);
    if (!env->cfg.sandbox) {
        snprintf(env->sandbox.status, sizeof env->sandbox.status,
                 "the bash sandbox is off: commands run unconfined and need approval");
        return;
    }
    if (env->sandbox.abi <= 0) {
        snprintf(env->sandbox.status, sizeof env->sandbox.status,
                 "Landlock is not available on this kernel (%s): bash commands run unconfined and need approval",
                 err == ENOSYS ? "not built in" : err == EOPNOTSUPP ? "disabled at boot" : strerror(err));
        return;
    }
    char scratch[4200];
    snprintf(scratch, sizeof scratch, "%s/mount-probe", env->state_dir);
    if (mkdir(scratch, 0700) == 0 || errno == EEXIST) {
        env->sandbox.mount_ns = probe_mount_ns(scratch);
        rmdir(scratch);
    }
    snprintf(env->sandbox.status, sizeof env->sandbox.status,
             "bash runs in a Landlock sandbox (ABI %d): it writes only to the workspace and temp "
             "directories%s",
             env->sandbox.abi,
             env->sandbox.mount_ns ? "; .git and .ds4cl are read-only"
                                   : "; .git and .ds4cl stay writable (no mount namespaces here)");
}

bool sandbox_active(tool_env *env)
{
    sandbox_probe(env);
    return env->cfg.sandbox && env->sandbox.abi > 0;
}

bool tools_sandbox_active(tool_env *env)
{
    return env && sandbox_active(env);
}

const char *tools_sandbox_status(tool_env *env)
{
    if (!env) return "";
    sandbox_probe(env);
    return env->sandbox.status;
}

static void default_writable(const char **dirs, int *n)
{
    static const char *const fixed[] = { "/tmp", "/var/tmp", "/dev/shm" };
    for (size_t i = 0; i < 3; i++) dirs[(*n)++] = fixed[i];
    const char *t = getenv("TMPDIR");
    if (t && t[0] == '/') dirs[(*n)++] = t;
}

int sandbox_prepare(tool_env *env, const char *log_path, sandbox_plan *plan, ds4_error *err)
{
    memset(plan, 0, sizeof *plan);
    plan->ruleset_fd = -1;
    sandbox_probe(env);
    int abi = env->sandbox.abi;
    unsigned long long handled = handled_for(abi);
    struct landlock_ruleset_attr attr = { .handled_access_fs = handled };
    int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0) {
        ds4_error_set(err, "cannot create a Landlock ruleset: %s", strerror(errno));
        return -1;
    }
    unsigned long long dev_rights = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE;
    if (abi >= 3) dev_rights |= LANDLOCK_ACCESS_FS_TRUNCATE;
    if (abi >= 5) dev_rights |= LANDLOCK_ACCESS_FS_IOCTL_DEV;
    unsigned long long read_rights = FS_READ | (abi >= 5 ? LANDLOCK_ACCESS_FS_IOCTL_DEV : 0);
    if (add_path_rule(rs, "/", read_rights, true) != 0 ||
        add_path_rule(rs, env->workspace, handled, true) != 0 ||
        (log_path && add_path_rule(rs, log_path, dev_rights & FS_FILE_RIGHTS, true) != 0)) {
        ds4_error_set(err, "cannot add a Landlock rule: %s", strerror(errno));
        close(rs);
        return -1;
    }
    const char *dirs[16];
    int nd = 0;
    if (env->cfg.writable_dirs) {
        for (size_t i = 0; env->cfg.writable_dirs[i] && nd < 16; i++) dirs[nd++] = env->cfg.writable_dirs[i];
    } else {
        default_writable(dirs, &nd);
    }
    for (int i = 0; i < nd; i++) add_path_rule(rs, dirs[i], handled, false);
    static const char *const devs[] = { "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom" };
    for (size_t i = 0; i < sizeof devs / sizeof devs[0]; i++) add_path_rule(rs, devs[i], dev_rights, false);
    plan->ruleset_fd = rs;

    if (env->sandbox.mount_ns) {
        plan_ns(plan);
        static const char *const names[SANDBOX_MAX_PROTECT] = { ".git", ".ds4cl" };
        for (int i = 0; i < SANDBOX_MAX_PROTECT; i++) {
            char p[sizeof plan->protect[0]];
            int k = snprintf(p, sizeof p, "%s/%s", env->workspace_len ? env->workspace : "", names[i]);
            struct stat st;
            if (k < 0 || (size_t)k >= sizeof p || lstat(p, &st) != 0 || S_ISLNK(st.st_mode)) continue;
            memcpy(plan->protect[plan->nprotect], p, (size_t)k + 1);
            plan->protect_flags[plan->nprotect] = mount_flags_of(p);
            plan->nprotect++;
        }
        plan->mount_ns = plan->nprotect > 0;
    }
    return 0;
}

void sandbox_plan_release(sandbox_plan *plan)
{
    if (plan->ruleset_fd >= 0) close(plan->ruleset_fd);
    plan->ruleset_fd = -1;
}
