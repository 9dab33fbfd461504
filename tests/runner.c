/* runner.c — runs the registered tests, each in a forked child with its own
 * process group, captured output and temp directory; prints one line per
 * test and ends with exactly one summary line "N passed, N failed[, N skipped]".
 *
 * Usage: ds4cl-tests [-j N] [-v] [--list] [--timeout SEC] [PATTERN...]
 * A PATTERN selects tests whose "suite.name" contains it, or matches it as a
 * shell glob. Suite "selftest" only exists when DS4CL_TEST_SELFTEST=1 (it
 * holds deliberately failing tests used to test the runner itself).
 */
#include "tests/test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_SKIP 77

struct test_case {
    const char *suite, *name, *file;
    int line;
    test_fn fn;
    char full[160];
};

static struct test_case *g_tests;
static size_t g_ntests, g_captests;

void test_register(const char *suite, const char *name, test_fn fn,
                   const char *file, int line)
{
    if (g_ntests == g_captests) {
        g_captests = g_captests ? g_captests * 2 : 256;
        g_tests = realloc(g_tests, g_captests * sizeof *g_tests);
        if (!g_tests) abort();
    }
    struct test_case *t = &g_tests[g_ntests++];
    t->suite = suite;
    t->name = name;
    t->fn = fn;
    t->file = file;
    t->line = line;
    snprintf(t->full, sizeof t->full, "%s.%s", suite, name);
}

/* ---- per-test state (lives in the child) ------------------------------- */

static jmp_buf g_jmp;
static const char *g_status_path;   /* where a skip reason is written */
static char g_tmpdir[4096];          /* assigned by the parent, created lazily */
static bool g_tmpdir_made;

struct allocation { struct allocation *next; };
static struct allocation *g_allocs;

void *test_alloc(size_t n)
{
    struct allocation *a = malloc(sizeof *a + n + 1);
    if (!a) abort();
    a->next = g_allocs;
    g_allocs = a;
    memset(a + 1, 0, n + 1);
    return a + 1;
}

static void free_allocations(void)
{
    while (g_allocs) {
        struct allocation *next = g_allocs->next;
        free(g_allocs);
        g_allocs = next;
    }
}

char *test_strdup(const char *s)
{
    size_t n = strlen(s);
    char *d = test_alloc(n);
    memcpy(d, s, n);
    return d;
}

static char *vformat(const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    char *s = test_alloc((size_t)n);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    return s;
}

char *test_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

void test_fail_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    longjmp(g_jmp, 1);
}

void test_skip(const char *fmt, ...)
{
    va_list ap;
    FILE *f = fopen(g_status_path, "w");
    if (f) {
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fclose(f);
    }
    longjmp(g_jmp, 2);
}

void test_check_str_eq(const char *file, int line, const char *ea,
                       const char *eb, const char *a, const char *b)
{
    if (a && b && strcmp(a, b) == 0) return;
    test_fail_at(file, line, "%s == %s:\n  got:      \"%s\"\n  expected: \"%s\"",
                 ea, eb, a ? a : "(null)", b ? b : "(null)");
}

void test_check_contains(const char *file, int line, const char *ehay,
                         const char *hay, const char *needle)
{
    if (hay && needle && strstr(hay, needle)) return;
    test_fail_at(file, line, "%s does not contain \"%s\"; it is:\n%s", ehay,
                 needle ? needle : "(null)", hay ? hay : "(null)");
}

const char *test_tmpdir(void)
{
    if (!g_tmpdir_made) {
        if (mkdir(g_tmpdir, 0700) != 0 && errno != EEXIST)
            FAIL("cannot create %s: %s", g_tmpdir, strerror(errno));
        g_tmpdir_made = true;
    }
    return g_tmpdir;
}

const char *test_tmp_path(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *rel = vformat(fmt, ap);
    va_end(ap);
    return test_printf("%s/%s", test_tmpdir(), rel);
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

const char *test_root(void) { return env_or("DS4CL_ROOT", "."); }
const char *test_bindir(void) { return env_or("DS4CL_BINDIR", test_root()); }

/* The golden reference data lives outside the repository, in a
 * "shared/golden" directory beside the checkout or beside one of its parent
 * directories (CI may clone the repository deeper than the developers'
 * checkout); DS4CL_GOLDEN names it explicitly. */
const char *test_golden_path(const char *rel)
{
    const char *base = getenv("DS4CL_GOLDEN");
    if (base && *base) {
        char *p = test_printf("%s/%s", base, rel);
        return access(p, R_OK) == 0 ? p : NULL;
    }
    char dir[4096];
    if (!realpath(test_root(), dir)) return NULL;
    for (int depth = 0; depth < 8; depth++) {
        char *slash = strrchr(dir, '/');
        if (!slash) break;
        *slash = 0;
        char *p = test_printf("%s/shared/golden/%s", dir, rel);
        if (access(p, R_OK) == 0) return p;
        if (!dir[0]) break;
    }
    return NULL;
}

int test_run(const char *cmd, char **output)
{
    char *full = test_printf("( %s ) </dev/null 2>&1", cmd);
    fflush(stdout);
    fflush(stderr);
    FILE *p = popen(full, "r");
    if (!p) FAIL("popen failed: %s", strerror(errno));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    if (!buf) abort();
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
    }
    buf[len] = 0;
    int st = pclose(p);
    if (output) {
        *output = test_alloc(len);
        memcpy(*output, buf, len);
    }
    free(buf);
    if (st == -1) return -1;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

int test_runf(char **output, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *cmd = vformat(fmt, ap);
    va_end(ap);
    return test_run(cmd, output);
}

char *test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) abort();
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
    }
    fclose(f);
    char *out = test_alloc(n);
    memcpy(out, buf, n);
    free(buf);
    if (len) *len = n;
    return out;
}

void test_write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) FAIL("cannot write %s: %s", path, strerror(errno));
    if (len && fwrite(data, 1, len, f) != len) FAIL("short write to %s", path);
    if (fclose(f) != 0) FAIL("cannot close %s", path);
}

long test_dead_pid(void)
{
    pid_t p = fork();
    CHECK(p >= 0);
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

double test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Calls fn for each thread of this process with its run-queue wait in ns
 * (the second field of /proc/self/task/TID/schedstat); false when the
 * kernel does not report it. */
static bool each_thread_wait(void (*fn)(void *ud, int tid, uint64_t wait_ns), void *ud)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return false;
    bool any = false;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[64], buf[128];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/schedstat", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue; /* the thread has just ended, or no schedstat */
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        unsigned long long run_ns, wait_ns;
        if (got <= 0) continue;
        buf[got] = 0;
        if (sscanf(buf, "%llu %llu", &run_ns, &wait_ns) != 2) continue;
        fn(ud, atoi(de->d_name), wait_ns);
        any = true;
    }
    closedir(d);
    return any;
}

static void mark_thread(void *ud, int tid, uint64_t wait_ns)
{
    test_mark *m = ud;
    if (m->n == TEST_MARK_THREADS) return;
    m->tid[m->n] = tid;
    m->wait_ns[m->n++] = wait_ns;
}

void test_mark_now(test_mark *m)
{
    m->n = 0;
    each_thread_wait(mark_thread, m);
    m->t0 = test_now_ms();
}

struct longest_wait {
    const test_mark *m;
    uint64_t longest;
};

static void longest_thread_wait(void *ud, int tid, uint64_t wait_ns)
{
    struct longest_wait *w = ud;
    uint64_t before = 0; /* a thread started since the mark waited all its wait since */
    for (int i = 0; i < w->m->n; i++)
        if (w->m->tid[i] == tid) before = w->m->wait_ns[i];
    if (wait_ns > before && wait_ns - before > w->longest) w->longest = wait_ns - before;
}

double test_reaction_ms(const test_mark *m, double *waited_ms)
{
    double elapsed = test_now_ms() - m->t0;
    struct longest_wait w = { m, 0 };
    each_thread_wait(longest_thread_wait, &w);
    double waited = (double)w.longest / 1e6;
    if (waited > elapsed) waited = elapsed;
    if (waited_ms) *waited_ms = waited;
    return elapsed - waited;
}

bool test_have_program(const char *name)
{
    const char *path = getenv("PATH");
    if (!path) return false;
    char dir[4096];
    while (*path) {
        size_t n = strcspn(path, ":");
        if (n < sizeof dir - 256) {
            memcpy(dir, path, n);
            dir[n] = 0;
            char full[4400];
            snprintf(full, sizeof full, "%s/%s", n ? dir : ".", name);
            if (access(full, X_OK) == 0) return true;
        }
        path += n;
        if (*path == ':') path++;
    }
    return false;
}

/* ---- parent side ------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    remove(path);
    return 0;
}

static void rm_tree(const char *path)
{
    /* Tests may leave read-only dirs behind; make them writable first. */
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx '%s' 2>/dev/null", path);
    if (access(path, F_OK) == 0) {
        int rc = system(cmd);
        (void)rc;
        nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
}

static _Noreturn void run_child(struct test_case *t, const char *out_path,
                                const char *status_path, const char *tmpdir)
{
    setpgid(0, 0);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_status_path = status_path;
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s", tmpdir);
    int code = setjmp(g_jmp);
    if (code == 0) t->fn();
    free_allocations();
    fflush(stdout);
    fflush(stderr);
    exit(code == 0 ? 0 : code == 2 ? EXIT_SKIP : 1);
}

struct running {
    pid_t pid;
    size_t index;
    double start_ms;
    char out_path[4096], status_path[4096], tmpdir[4096];
    bool timed_out;
};

static void print_file_indented(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        fputs("    ", stdout);
        fputs(line, stdout);
        size_t n = strlen(line);
        if (n && line[n - 1] != '\n') fputc('\n', stdout);
    }
    fclose(f);
}

static bool selected(const struct test_case *t, int npat, char **pats)
{
    if (strcmp(t->suite, "selftest") == 0 && !getenv("DS4CL_TEST_SELFTEST")) return false;
    if (npat == 0) return true;
    for (int i = 0; i < npat; i++) {
        if (strstr(t->full, pats[i])) return true;
        if (fnmatch(pats[i], t->full, 0) == 0) return true;
    }
    return false;
}

static int by_file_line(const void *a, const void *b)
{
    const struct test_case *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : x->line - y->line;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: ds4cl-tests [-j N] [-v] [--list] [--timeout SEC] [PATTERN...]\n");
}

int main(int argc, char **argv)
{
    int jobs = 1, verbose = 0, list = 0;
    double timeout_s = atof(env_or("DS4CL_TEST_TIMEOUT", "900"));
    char **pats = calloc((size_t)argc + 1, sizeof *pats);
    int npat = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-j") && i + 1 < argc) jobs = atoi(argv[++i]);
        else if (!strncmp(argv[i], "-j", 2) && argv[i][2]) jobs = atoi(argv[i] + 2);
        else if (!strcmp(argv[i], "-v")) verbose = 1;
        else if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc) timeout_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-') { usage(stderr); return 2; }
        else pats[npat++] = argv[i];
    }
    if (jobs < 1) jobs = 1;
    qsort(g_tests, g_ntests, sizeof *g_tests, by_file_line);

    size_t *sel = calloc(g_ntests + 1, sizeof *sel), nsel = 0;
    for (size_t i = 0; i < g_ntests; i++)
        if (selected(&g_tests[i], npat, pats)) sel[nsel++] = i;
    if (list) {
        for (size_t i = 0; i < nsel; i++) printf("%s\n", g_tests[sel[i]].full);
        return 0;
    }

    char root[] = "/tmp/ds4cl-tests-XXXXXX";
    const char *tmpbase = env_or("TMPDIR", "/tmp");
    char rootpath[4096];
    snprintf(rootpath, sizeof rootpath, "%s/ds4cl-tests-XXXXXX", tmpbase);
    if (!mkdtemp(rootpath)) {
        snprintf(rootpath, sizeof rootpath, "%s", root);
        if (!mkdtemp(rootpath)) { perror("mkdtemp"); return 1; }
    }

    int passed = 0, failed = 0, skipped = 0;
    struct running *run = calloc((size_t)jobs, sizeof *run);
    size_t next = 0, active = 0;
    double run_start = test_now_ms();

    while (next < nsel || active > 0) {
        /* Start as many as allowed. */
        for (int s = 0; s < jobs && next < nsel; s++) {
            if (run[s].pid) continue;
            struct running *r = &run[s];
            r->index = sel[next];
            if (snprintf(r->out_path, sizeof r->out_path, "%s/%zu.out", rootpath, next) >= (int)sizeof r->out_path ||
                snprintf(r->status_path, sizeof r->status_path, "%s/%zu.status", rootpath, next) >=
                    (int)sizeof r->status_path ||
                snprintf(r->tmpdir, sizeof r->tmpdir, "%s/t%zu", rootpath, next) >= (int)sizeof r->tmpdir) {
                fprintf(stderr, "ds4cl-tests: the temporary directory's path is too long: %s\n", rootpath);
                return 1;
            }
            r->timed_out = false;
            r->start_ms = test_now_ms();
            fflush(stdout);
            fflush(stderr);
            pid_t pid = fork();
            if (pid < 0) { perror("fork"); return 1; }
            if (pid == 0) run_child(&g_tests[r->index], r->out_path, r->status_path, r->tmpdir);
            setpgid(pid, pid);
            r->pid = pid;
            next++;
            active++;
        }
        /* Reap finished children; enforce timeouts. */
        int st;
        pid_t done = waitpid(-1, &st, WNOHANG);
        if (done <= 0) {
            double now = test_now_ms();
            for (int s = 0; s < jobs; s++) {
                if (run[s].pid && !run[s].timed_out && now - run[s].start_ms > timeout_s * 1e3) {
                    run[s].timed_out = true;
                    kill(-run[s].pid, SIGKILL);
                }
            }
            struct timespec ts = { 0, 2 * 1000 * 1000 };
            nanosleep(&ts, NULL);
            continue;
        }
        int s;
        for (s = 0; s < jobs; s++) if (run[s].pid == done) break;
        if (s == jobs) continue;
        struct running *r = &run[s];
        struct test_case *t = &g_tests[r->index];
        double ms = test_now_ms() - r->start_ms;
        /* Whatever the test left running in its group goes with it. */
        kill(-r->pid, SIGKILL);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
            printf("ok   %-60s %8.0f ms\n", t->full, ms);
            if (verbose) print_file_indented(r->out_path);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_SKIP) {
            skipped++;
            char reason[512] = "";
            FILE *f = fopen(r->status_path, "r");
            if (f) {
                if (!fgets(reason, sizeof reason, f)) reason[0] = 0;
                fclose(f);
            }
            printf("skip %-60s (%s)\n", t->full, reason);
            if (verbose) print_file_indented(r->out_path);
        } else {
            failed++;
            if (r->timed_out)
                printf("FAIL %s (%s:%d): timed out after %.0f s\n", t->full, t->file, t->line, timeout_s);
            else if (WIFSIGNALED(st))
                printf("FAIL %s (%s:%d): killed by signal %d (%s)\n", t->full, t->file,
                       t->line, WTERMSIG(st), strsignal(WTERMSIG(st)));
            else
                printf("FAIL %s (%s:%d): exit status %d\n", t->full, t->file, t->line,
                       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
            print_file_indented(r->out_path);
        }
        fflush(stdout);
        if (!getenv("DS4CL_KEEP_TMP")) rm_tree(r->tmpdir);
        unlink(r->out_path);
        unlink(r->status_path);
        r->pid = 0;
        active--;
    }
    if (!getenv("DS4CL_KEEP_TMP")) rm_tree(rootpath);

    if (nsel == 0 && npat > 0) printf("no test matches the given pattern(s)\n");
    printf("(%.1f s)\n", (test_now_ms() - run_start) / 1e3);
    if (skipped)
        printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    else
        printf("%d passed, %d failed\n", passed, failed);
    free(run);
    free(sel);
    free(pats);
    return failed > 0 || (nsel == 0 && npat > 0) ? 1 : 0;
}

int test_stderr_begin(void)
{
    fflush(stderr);
    int saved = dup(2);
    int fd = open(test_tmp_path("stderr.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    return saved;
}

char *test_stderr_end(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return test_read_file(test_tmp_path("stderr.txt"), NULL);
}
