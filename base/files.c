/* files.c — whole-file reads, atomic replacement, directory helpers, XDG
 * locations and clocks. */
#include "base/base.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static char *read_fd(int fd, const struct stat *st, size_t *len);

char *file_read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return NULL; }
    if (S_ISDIR(st.st_mode)) { close(fd); errno = EISDIR; return NULL; }
    return read_fd(fd, &st, len);
}

char *file_read_regular(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return NULL; }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        errno = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        return NULL;
    }
    return read_fd(fd, &st, len);
}

/* Reads fd to its end and closes it. */
static char *read_fd(int fd, const struct stat *stp, size_t *len)
{
    struct stat st = *stp;
    size_t cap = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            free(buf);
            close(fd);
            errno = e;
            return NULL;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int base_mkdir_p(const char *path, mode_t mode)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) { errno = ENAMETOOLONG; return -1; }
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, mode) != 0 && errno != EEXIST) return -1;
    struct stat st;
    if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) { errno = ENOTDIR; return -1; }
    return 0;
}

static void fmt_err(ds4_error *err, const char *what, const char *path)
{
    ds4_error_set(err, "%s %s: %s", what, path, strerror(errno));
}

/* ---- writes, free space and the test hook that fills the disk ----------------- */

static atomic_llong fault_left = -1;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

static void fault_from_env(void)
{
    const char *v = getenv("DS4CL_FAULT_SPACE");
    if (v && *v >= '0' && *v <= '9') atomic_store(&fault_left, strtoll(v, NULL, 10));
}

void fault_space_set(int64_t bytes)
{
    pthread_once(&fault_once, fault_from_env);
    atomic_store(&fault_left, bytes < 0 ? -1 : (long long)bytes);
}

/* How many of n bytes the simulated disk still takes (n when it is off). */
static size_t fault_take(size_t n)
{
    pthread_once(&fault_once, fault_from_env);
    for (;;) {
        long long left = atomic_load(&fault_left);
        if (left < 0) return n;
        size_t k = (unsigned long long)left < n ? (size_t)left : n;
        if (atomic_compare_exchange_weak(&fault_left, &left, left - (long long)k)) return k;
    }
}

int fd_write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        size_t allowed = fault_take(len);
        if (allowed == 0) {
            errno = ENOSPC;
            return -1;
        }
        ssize_t w = write(fd, p, allowed);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (w == 0) {
            errno = ENOSPC;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

uint64_t fs_free_bytes(const char *path)
{
    struct statvfs v;
    uint64_t free_b = statvfs(path, &v) == 0 ? (uint64_t)v.f_bavail * (uint64_t)v.f_frsize : UINT64_MAX;
    pthread_once(&fault_once, fault_from_env);
    long long left = atomic_load(&fault_left);
    if (left >= 0 && (uint64_t)left < free_b) free_b = (uint64_t)left;
    return free_b;
}

int temp_template(char *buf, size_t size, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n + 7 > size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, prefix, n);
    memset(buf + n, 'X', 6);
    buf[n + 6] = '\0';
    return 0;
}

int temp_prefix_for(char *buf, size_t size, const char *path)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    int n = snprintf(buf, size, "%.*s.%s.tmp.%ld.", (int)(name - path), path, name, (long)getpid());
    if (n < 0 || (size_t)n >= size) {
        errno = ENAMETOOLONG;
        return -1;
    }
    return 0;
}

/* The PID in a name made by temp_prefix_for + temp_template
 * (".NAME.tmp.PID." and mkstemp's six characters), or 0 when it is not one. */
static long temp_writer(const char *name)
{
    size_t n = strlen(name);
    if (name[0] != '.' || n < 1 + 5 + 2 + 6) return 0;
    const char *tail = name + n - 7; /* the dot and mkstemp's six characters */
    if (tail[0] != '.') return 0;
    for (int i = 1; i < 7; i++)
        if (!isalnum((unsigned char)tail[i])) return 0;
    const char *d = tail;
    while (d > name && isdigit((unsigned char)d[-1])) d--;
    if (d == tail || tail - d > 10 || d - name < 6 || memcmp(d - 5, ".tmp.", 5)) return 0;
    return strtol(d, NULL, 10);
}

/* When the process now running as pid started (seconds since the epoch);
 * -1 when there is none, 0 when that cannot be told. */
static int64_t process_start(long pid)
{
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return -1;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? -1 : 0;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return 0;
    buf[r] = 0;
    /* field 22, counted after the command name, which may hold anything */
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
    if (!p) return 0;
    unsigned long long ticks = strtoull(p + 1, NULL, 10);
    char *st = file_read_all("/proc/stat", NULL);
    char *bt = st ? strstr(st, "\nbtime ") : NULL;
    int64_t boot = bt ? strtoll(bt + 7, NULL, 10) : 0;
    free(st);
    long hz = sysconf(_SC_CLK_TCK);
    return boot && hz > 0 ? boot + (int64_t)(ticks / (unsigned long long)hz) : 0;
}

static void sweep_dir(int dfd, int depth, size_t *budget, size_t *removed)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return;
    }
    struct dirent *de;
    while (*budget > 0 && (de = readdir(d))) {
        (*budget)--;
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        struct stat st;
        if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) {
            if (depth >= 32 || !strcmp(name, ".git")) continue;
            int sub = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub >= 0) sweep_dir(sub, depth + 1, budget, removed);
            continue;
        }
        long pid;
        if (!S_ISREG(st.st_mode) || (pid = temp_writer(name)) <= 0 || pid == (long)getpid()) continue;
        int64_t started = process_start(pid);
        /* a PID used again by a process that started after the last write */
        if (started < 0 || (started > 0 && started > (int64_t)st.st_mtime + 1)) {
            if (unlinkat(dirfd(d), name, 0) == 0) (*removed)++;
        }
    }
    closedir(d);
}

size_t temp_sweep(const char *root, size_t max_entries)
{
    size_t removed = 0, budget = max_entries;
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) sweep_dir(fd, 0, &budget, &removed);
    return removed;
}

int file_write_atomic(const char *path, const void *data, size_t len, int mode,
                      bool make_parents, ds4_error *err)
{
    char dir[4096], tmp[4200];
    if (strlen(path) >= sizeof dir) {
        errno = ENAMETOOLONG;
        fmt_err(err, "cannot write", path);
        return -1;
    }
    strcpy(dir, path);
    char *d = dirname(dir);
    if (make_parents && base_mkdir_p(d, 0755) != 0) {
        fmt_err(err, "cannot create directory", d);
        return -1;
    }
    struct stat st;
    mode_t m = 0644;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            fmt_err(err, "cannot write", path);
            return -1;
        }
        if (mode < 0) m = st.st_mode & 07777;
    }
    if (mode >= 0) m = (mode_t)mode;
    char prefix[4200];
    int fd = temp_prefix_for(prefix, sizeof prefix, path) == 0 && temp_template(tmp, sizeof tmp, prefix) == 0
                 ? mkstemp(tmp) : -1;
    if (fd < 0) {
        fmt_err(err, "cannot create a temporary file next to", path);
        return -1;
    }
    if (fd_write_all(fd, data, len) != 0) {
        fmt_err(err, "cannot write", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (fchmod(fd, m) != 0 || fsync(fd) != 0) {
        fmt_err(err, "cannot sync", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0) {
        fmt_err(err, "cannot close", tmp);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fmt_err(err, "cannot replace", path);
        unlink(tmp);
        return -1;
    }
    int dfd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)ftw;
    if (flag == FTW_DP) return rmdir(path) == 0 ? 0 : -1;
    return unlink(path) == 0 ? 0 : -1;
}

int rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    return nftw(path, rm_one, 32, FTW_DEPTH | FTW_PHYS);
}

const char *xdg_dir(xdg_kind kind, char *buf, size_t size)
{
    static const char *const env[] = { "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME" };
    static const char *const dflt[] = { ".local/share", ".config", ".cache", ".local/state" };
    const char *base = getenv(env[kind]);
    int n;
    if (base && base[0] == '/') {
        n = snprintf(buf, size, "%s/ds4cl", base);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) return NULL;
        n = snprintf(buf, size, "%s/%s/ds4cl", home, dflt[kind]);
    }
    if (n < 0 || (size_t)n >= size) return NULL;
    if (base_mkdir_p(buf, 0700) != 0) return NULL;
    return buf;
}

double base_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int64_t base_wall_time_s(void) { return (int64_t)time(NULL); }
