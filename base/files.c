/* files.c — whole-file reads, atomic replacement, directory helpers, XDG
 * locations and clocks. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char *file_read_all(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); return NULL; }
    if (S_ISDIR(st.st_mode)) { close(fd); errno = EISDIR; return NULL; }
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

static void fmt_err(char *err, size_t errlen, const char *what, const char *path)
{
    if (err && errlen) snprintf(err, errlen, "%s %s: %s", what, path, strerror(errno));
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

int file_write_atomic(const char *path, const void *data, size_t len, int mode,
                      bool make_parents, char *err, size_t errlen)
{
    char dir[4096], tmp[4200];
    if (strlen(path) >= sizeof dir) {
        errno = ENAMETOOLONG;
        fmt_err(err, errlen, "cannot write", path);
        return -1;
    }
    strcpy(dir, path);
    char *d = dirname(dir);
    if (make_parents && base_mkdir_p(d, 0755) != 0) {
        fmt_err(err, errlen, "cannot create directory", d);
        return -1;
    }
    struct stat st;
    mode_t m = 0644;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            fmt_err(err, errlen, "cannot write", path);
            return -1;
        }
        if (mode < 0) m = st.st_mode & 07777;
    }
    if (mode >= 0) m = (mode_t)mode;
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/.%s.tmp.", d, strrchr(path, '/') ? strrchr(path, '/') + 1 : path);
    int fd = temp_template(tmp, sizeof tmp, prefix) == 0 ? mkstemp(tmp) : -1;
    if (fd < 0) {
        fmt_err(err, errlen, "cannot create a temporary file next to", path);
        return -1;
    }
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            fmt_err(err, errlen, "cannot write", tmp);
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fchmod(fd, m) != 0 || fsync(fd) != 0) {
        fmt_err(err, errlen, "cannot sync", tmp);
        close(fd);
        unlink(tmp);
        return -1;
    }
    if (close(fd) != 0) {
        fmt_err(err, errlen, "cannot close", tmp);
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        fmt_err(err, errlen, "cannot replace", path);
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
