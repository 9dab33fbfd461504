/* list.c — the `list` tool: one directory, sorted, directories first,
 * with sizes, entry counts and .gitignore marks. */
#include "tools/tool_env.h"

#include "tools/glob.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LIST_DEFAULT_MAX 500

typedef struct {
    char *name;
    struct stat st;
    bool stat_ok, is_dir, ignored;
    char *link;        /* symlink target */
    long entries;      /* for directories, -1 when unreadable */
} entry;

static int by_kind_then_name(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->is_dir != y->is_dir) return x->is_dir ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void human_size(char *buf, size_t n, long long v)
{
    if (v < 1024) snprintf(buf, n, "%lldB", v);
    else if (v < 1024 * 1024) snprintf(buf, n, "%.1fK", v / 1024.0);
    else if (v < 1024LL * 1024 * 1024) snprintf(buf, n, "%.1fM", v / (1024.0 * 1024));
    else snprintf(buf, n, "%.1fG", v / (1024.0 * 1024 * 1024));
}

static long count_entries(int dirfd, const char *name)
{
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return -1;
    }
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static int run_list(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    const char *path = targ_str(args, "path");
    if (!path || !*path) path = ".";
    long long max = LIST_DEFAULT_MAX;
    targ_int(args, "max_entries", &max);
    if (max < 1) return tool_fail(out, "max_entries must be 1 or more (got %lld)", max);
    char *abs = tool_abs_path(env, path);
    const char *shown = tool_display_path(env, abs);
    struct stat st;
    if (stat(abs, &st) != 0) {
        strbuf b = {0};
        sb_printf(&b, "%s does not exist.", shown);
        if (errno == ENOENT) tool_suggest_names(abs, &b);
        int rc = tool_fail(out, "%s", sb_str(&b));
        sb_free(&b);
        free(abs);
        return rc;
    }
    if (!S_ISDIR(st.st_mode)) {
        char size[32];
        human_size(size, sizeof size, (long long)st.st_size);
        int rc = tool_fail(out, "%s is a file (%s), not a directory; use read to see it", shown, size);
        free(abs);
        return rc;
    }
    int dfd = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        int rc = tool_fail(out, "cannot list %s: %s", shown, strerror(errno));
        if (dfd >= 0) close(dfd);
        free(abs);
        return rc;
    }
    ignore_stack *ign = ignore_new();
    ignore_push_ancestors(ign, abs);
    ignore_push_dir(ign, abs);
    entry *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    strbuf full = {0};
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            v = xrealloc(v, cap * sizeof *v);
        }
        entry *x = &v[n++];
        memset(x, 0, sizeof *x);
        x->name = xstrdup(e->d_name);
        x->stat_ok = fstatat(dfd, e->d_name, &x->st, AT_SYMLINK_NOFOLLOW) == 0;
        if (x->stat_ok && S_ISLNK(x->st.st_mode)) {
            char target[4096];
            ssize_t k = readlinkat(dfd, e->d_name, target, sizeof target - 1);
            if (k >= 0) {
                target[k] = 0;
                x->link = strdup(target);
            }
            struct stat ts;
            if (fstatat(dfd, e->d_name, &ts, 0) == 0 && S_ISDIR(ts.st_mode)) x->is_dir = true;
        } else if (x->stat_ok && S_ISDIR(x->st.st_mode)) {
            x->is_dir = true;
        }
        sb_clear(&full);
        sb_printf(&full, "%s/%s", strcmp(abs, "/") ? abs : "", e->d_name);
        x->ignored = ignore_match(ign, sb_str(&full), x->is_dir);
        if (tool_cancelled(ctx)) break;
    }
    closedir(d);
    sb_free(&full);
    ignore_free(ign);
    qsort(v, n, sizeof *v, by_kind_then_name);
    size_t ndirs = 0;
    for (size_t i = 0; i < n; i++) ndirs += v[i].is_dir;
    strbuf b = {0};
    sb_printf(&b, "%s: %zu director%s, %zu file%s\n", shown, ndirs, ndirs == 1 ? "y" : "ies", n - ndirs,
              n - ndirs == 1 ? "" : "s");
    int dfd2 = open(abs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    size_t shown_n = 0;
    for (size_t i = 0; i < n && shown_n < (size_t)max; i++, shown_n++) {
        entry *x = &v[i];
        sb_append_visible(&b, x->name, strlen(x->name));
        if (x->link) {
            sb_puts(&b, "@ -> ");
            sb_append_visible(&b, x->link, strlen(x->link));
            if (x->is_dir) sb_puts(&b, " (directory)");
        } else if (x->is_dir) {
            sb_putc(&b, '/');
            long k = dfd2 >= 0 && !x->ignored ? count_entries(dfd2, x->name) : -2;
            if (k >= 0) sb_printf(&b, "  %ld entr%s", k, k == 1 ? "y" : "ies");
            else if (k == -1) sb_puts(&b, "  (unreadable)");
        } else if (x->stat_ok) {
            char size[32];
            human_size(size, sizeof size, (long long)x->st.st_size);
            if (S_ISREG(x->st.st_mode) && (x->st.st_mode & 0111)) sb_putc(&b, '*');
            if (S_ISREG(x->st.st_mode)) sb_printf(&b, "  %s", size);
            else if (S_ISFIFO(x->st.st_mode)) sb_puts(&b, "  (pipe)");
            else if (S_ISSOCK(x->st.st_mode)) sb_puts(&b, "  (socket)");
            else sb_puts(&b, "  (device)");
        }
        if (x->ignored) sb_puts(&b, "  [ignored]");
        sb_putc(&b, '\n');
    }
    if (dfd2 >= 0) close(dfd2);
    if (shown_n < n)
        sb_printf(&b, "… %zu more entr%s not shown (raise max_entries, or use search with a glob)\n",
                  n - shown_n, n - shown_n == 1 ? "y" : "ies");
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].link);
    }
    free(v);
    free(abs);
    return tool_ok(out, &b);
}

static void summarize_list(json_object *args, char *buf, size_t size)
{
    const char *p = targ_str(args, "path");
    tool_summary_clip(buf, size, "list: ", p && *p ? p : ".");
}

const tool_def tool_list = {
    .name = "list",
    .description =
        "List one directory: subdirectories first (name/ and how many entries they hold), then "
        "files with sizes; * marks executables, @ symlinks, [ignored] what .gitignore excludes. "
        "Not recursive: to find files by name in a tree use search with a glob, or bash.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"directory (default: the workspace root)\"},"
        "\"max_entries\":{\"type\":\"integer\",\"description\":\"most entries to show (default 500)\"}}}",
    .cls = TOOL_CLASS_READ,
    .run = run_list,
    .summarize = summarize_list,
};
