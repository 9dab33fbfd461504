/* bench_search.c — the search tool against `grep -rn`.
 *
 * Both search the same tree for the same queries, single-threaded, with
 * their output read to the end (grep's through a pipe, counted by lines;
 * the tool formats every match into its result and pager, as the agent
 * would). Each measurement is the best of --runs after one warm-up run, so
 * both read from the page cache; wall-clock time and CPU time (user +
 * system: the figure that a loaded machine disturbs least) are reported. Literal queries run as `grep -rnF`,
 * case-insensitive ones as `grep -rniF`, regular expressions as
 * `grep -rnP` (the tool's regex syntax is PCRE2 too). The tool skips what
 * grep does not (binary files, .gitignored paths, .git): on a tree without
 * those both read the same bytes. CSV on stdout:
 *   query,kind,tool_matches,grep_matches,tool_ms,grep_ms,tool_cpu_ms,grep_cpu_ms,tool_vs_grep
 * tool_vs_grep = tool_cpu_ms / grep_cpu_ms (below 1: the tool is faster). */
#include "bench/bench_search.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "base/base.h"
#include "tools/tools.h"

extern char **environ;

typedef enum { Q_LITERAL = 0, Q_ICASE, Q_REGEX } query_kind;

typedef struct {
    query_kind kind;
    const char *text;
} query;

static const char *const kind_names[] = { "literal", "icase", "regex" };

/* Suited to a C source or header tree such as /usr/include. */
static const query default_queries[] = {
    { Q_LITERAL, "pthread_mutex_lock" },
    { Q_LITERAL, "uint32_t" },
    { Q_ICASE, "einval" },
    { Q_REGEX, "static inline \\w+ \\*?\\w+\\(" },
    { Q_REGEX, "^#\\s*define\\s+\\w+\\s+0x[0-9a-fA-F]{8}\\b" },
};

static double cpu_ms(const struct rusage *r)
{
    return (r->ru_utime.tv_sec + r->ru_stime.tv_sec) * 1e3 + (r->ru_utime.tv_usec + r->ru_stime.tv_usec) / 1e3;
}

static int usage(void)
{
    fputs("usage: ds4cl-bench --search-bench DIR [--runs N] [--query [literal:|icase:|regex:]TEXT]...\n", stderr);
    return 2;
}

/* Runs grep with its output counted by lines; -1 on failure. */
static long run_grep(const query *q, const char *dir, double *ms, double *cpu)
{
    const char *flags = q->kind == Q_LITERAL ? "-rnF" : q->kind == Q_ICASE ? "-rniF" : "-rnP";
    char *argv[] = { "grep", (char *)flags, "-e", (char *)q->text, "--", (char *)dir, NULL };
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    double t0 = base_now_ms();
    int rc = posix_spawnp(&pid, "grep", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        errno = rc;
        return -1;
    }
    long lines = 0;
    char buf[65536];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) != 0) {
        if (n < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (ssize_t i = 0; i < n; i++) lines += buf[i] == '\n';
    }
    close(fds[0]);
    int st;
    struct rusage ru;
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
    }
    *ms = base_now_ms() - t0;
    *cpu = cpu_ms(&ru);
    /* 1 = no match, which is a result too */
    if (!WIFEXITED(st) || WEXITSTATUS(st) > 1) return -1;
    return lines;
}

/* Runs the search tool; the number of matching lines it reports, or -1. */
static long run_tool(tool_env *env, const query *q, double *ms, double *cpu, ds4_error *err)
{
    struct json_object *args = json_object_new_object();
    json_object_object_add(args, "query", json_object_new_string(q->text));
    if (q->kind == Q_REGEX) json_object_object_add(args, "regex", json_object_new_boolean(1));
    if (q->kind == Q_ICASE) json_object_object_add(args, "case_sensitive", json_object_new_boolean(0));
    const char *js = json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN);
    tool_result r;
    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = base_now_ms();
    tools_run(env, "search", js, NULL, &r);
    *ms = base_now_ms() - t0;
    getrusage(RUSAGE_SELF, &r1);
    *cpu = cpu_ms(&r1) - cpu_ms(&r0);
    json_object_put(args);
    long matches = -1;
    if (r.is_error) ds4_error_set(err, "%s", r.text);
    else if (!strncmp(r.text, "No matches", 10)) matches = 0;
    else if (!strncmp(r.text, "At least ", 9)) {
        /* the tool stops at its match limit: not comparable with grep */
        ds4_error_set(err, "more matches than the tool reports (%.60s); choose a narrower query", r.text);
    } else matches = strtol(r.text, NULL, 10);
    tool_result_free(&r);
    return matches;
}

int bench_search_main(int argc, char **argv)
{
    const char *dir = NULL;
    int runs = 5;
    query *qs = xcalloc((size_t)argc + 1, sizeof *qs);
    size_t nq = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--search-bench") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            if (num_parse_int(argv[++i], 1, 100000, &runs, NULL)) runs = 0; /* refused below */
        } else if (!strcmp(argv[i], "--query") && i + 1 < argc) {
            const char *t = argv[++i];
            query q = { Q_LITERAL, t };
            if (!strncmp(t, "literal:", 8)) q.text = t + 8;
            else if (!strncmp(t, "icase:", 6)) q = (query){ Q_ICASE, t + 6 };
            else if (!strncmp(t, "regex:", 6)) q = (query){ Q_REGEX, t + 6 };
            qs[nq++] = q;
        } else {
            fprintf(stderr, "ds4cl-bench: unexpected argument '%s' for --search-bench\n", argv[i]);
            free(qs);
            return usage();
        }
    }
    if (!dir || runs < 1) {
        free(qs);
        return usage();
    }
    const query *list = nq ? qs : default_queries;
    size_t n = nq ? nq : sizeof default_queries / sizeof default_queries[0];
    char real[PATH_MAX];
    if (!realpath(dir, real)) {
        fprintf(stderr, "ds4cl-bench: %s: %s\n", dir, strerror(errno));
        free(qs);
        return 1;
    }
    ds4_error err = { "" };
    tool_env_config cfg = { .workspace = real };
    tool_env *env = tool_env_new(&cfg, &err);
    if (!env) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        free(qs);
        return 1;
    }
    printf("query,kind,tool_matches,grep_matches,tool_ms,grep_ms,tool_cpu_ms,grep_cpu_ms,tool_vs_grep\n");
    int status = 0;
    for (size_t i = 0; i < n; i++) {
        const query *q = &list[i];
        double best_tool = -1, best_grep = -1, cpu_tool = -1, cpu_grep = -1;
        long tm = -1, gm = -1;
        for (int r = 0; r <= runs; r++) {
            double ms, cpu;
            tm = run_tool(env, q, &ms, &cpu, &err);
            if (tm < 0) break;
            if (r > 0 && (best_tool < 0 || ms < best_tool)) best_tool = ms;
            if (r > 0 && (cpu_tool < 0 || cpu < cpu_tool)) cpu_tool = cpu;
            gm = run_grep(q, real, &ms, &cpu);
            if (gm < 0) break;
            if (r > 0 && (best_grep < 0 || ms < best_grep)) best_grep = ms;
            if (r > 0 && (cpu_grep < 0 || cpu < cpu_grep)) cpu_grep = cpu;
        }
        if (tm < 0 || gm < 0) {
            fprintf(stderr, "ds4cl-bench: query '%s': %s\n", q->text,
                    tm < 0 ? err.msg : "grep failed (is it installed, and does it take -P?)");
            status = 1;
            continue;
        }
        /* CSV: quote the query */
        putchar('"');
        for (const char *p = q->text; *p; p++) {
            if (*p == '"') putchar('"');
            putchar(*p);
        }
        printf("\",%s,%ld,%ld,%.1f,%.1f,%.1f,%.1f,%.2f\n", kind_names[q->kind], tm, gm, best_tool, best_grep,
               cpu_tool, cpu_grep, cpu_grep > 0 ? cpu_tool / cpu_grep : 0.0);
        fflush(stdout);
    }
    tool_env_free(env);
    free(qs);
    return status;
}
