/* model_path.c — the default model link and the friendly "no model yet". */
#include "cli/model_path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

const char *default_model_path(char *buf, size_t n)
{
    char dir[PATH_MAX];
    if (!xdg_dir(XDG_DATA, dir, sizeof dir)) return NULL;
    int w = snprintf(buf, n, "%s/models/default", dir);
    if (w < 0 || (size_t)w >= n) return NULL;
    return buf;
}

static void explain_no_model(const char *dflt)
{
    fprintf(stderr,
            "ds4cl: no model yet.\n"
            "Download DeepSeek V4 Flash with one of:\n"
            "    ds4cl download q2-imatrix   # 2-bit experts, about 81 GB, for 96-128 GB of memory\n"
            "    ds4cl download q4-imatrix   # 4-bit experts, about 153 GB, for 256 GB or more\n"
            "or use a DS4 GGUF you already have:\n"
            "    ds4cl -m /path/to/DeepSeek-V4-Flash-....gguf\n");
    if (dflt)
        fprintf(stderr, "(or link it to %s to make it the default)\n", dflt);
}

static bool is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

const char *model_path_resolve(const char *given, char *buf, size_t n)
{
    if (given) {
        struct stat st;
        if (stat(given, &st) != 0) {
            fprintf(stderr, "ds4cl: cannot open the model %s: %s\n", given, strerror(errno));
            if (errno == ENOENT)
                fprintf(stderr, "Check the path, or run 'ds4cl download q2-imatrix' to fetch the model.\n");
            return NULL;
        }
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "ds4cl: the model %s is not a regular file\n", given);
            return NULL;
        }
        return given;
    }
    char dflt[PATH_MAX];
    if (!default_model_path(dflt, sizeof dflt)) {
        explain_no_model(NULL);
        return NULL;
    }
    struct stat lst;
    if (lstat(dflt, &lst) != 0) {
        explain_no_model(dflt);
        return NULL;
    }
    if (!is_regular_file(dflt)) {
        char target[PATH_MAX];
        ssize_t k = S_ISLNK(lst.st_mode) ? readlink(dflt, target, sizeof target - 1) : -1;
        if (k > 0) {
            target[k] = 0;
            fprintf(stderr, "ds4cl: the default model %s points to %s, which is missing.\n", dflt, target);
        } else {
            fprintf(stderr, "ds4cl: the default model %s is not a file.\n", dflt);
        }
        explain_no_model(NULL);
        return NULL;
    }
    /* Show and open the real file: messages then name the GGUF, not the link. */
    char real[PATH_MAX];
    const char *use = realpath(dflt, real) ? real : dflt;
    if (strlen(use) >= n) {
        fprintf(stderr, "ds4cl: the default model path is too long\n");
        return NULL;
    }
    memcpy(buf, use, strlen(use) + 1);
    return buf;
}

int default_model_set(const char *target, ds4_error *err)
{
    char dflt[PATH_MAX], abs_target[PATH_MAX], dir[PATH_MAX], tmp[PATH_MAX + 32];
    if (!default_model_path(dflt, sizeof dflt)) {
        ds4_error_set(err, "no home directory to keep the default model link in");
        return -1;
    }
    if (!realpath(target, abs_target)) {
        ds4_error_set(err, "cannot resolve %s: %s", target, strerror(errno));
        return -1;
    }
    struct stat st;
    if (lstat(dflt, &st) == 0 && !S_ISLNK(st.st_mode)) {
        ds4_error_set(err, "%s is a file of its own; leaving it as the default model", dflt);
        return -1;
    }
    snprintf(dir, sizeof dir, "%s", dflt);
    *strrchr(dir, '/') = 0;
    if (base_mkdir_p(dir, 0755) != 0) {
        ds4_error_set(err, "cannot create %s: %s", dir, strerror(errno));
        return -1;
    }
    /* A fresh link under a temporary name renamed over the old one: the
     * default path always names either the old or the new model. */
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dflt, (long)getpid());
    unlink(tmp);
    if (symlink(abs_target, tmp) != 0) {
        ds4_error_set(err, "cannot create the link %s: %s", tmp, strerror(errno));
        return -1;
    }
    if (rename(tmp, dflt) != 0) {
        ds4_error_set(err, "cannot replace %s: %s", dflt, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}
