/* test.h — the project's test runner: named tests grouped in suites,
 * assertions that report file:line, skips with a reason, helpers for
 * temporary directories and for running the built programs.
 *
 * Each test runs in its own forked process, so a crash, a leak report or a
 * hang is charged to the test that caused it and the run goes on. A failed
 * assertion ends the test at once (longjmp back to the runner), so checks
 * may live in helper functions too.
 *
 *   TEST(gguf, rejects_bad_magic) {
 *       CHECK(x == 1);
 *       CHECK_EQ_INT(n, 3);
 *       if (!have_opencl) SKIP("no OpenCL device");
 *   }
 */
#ifndef DS4CL_TEST_H
#define DS4CL_TEST_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

typedef void (*test_fn)(void);

void test_register(const char *suite, const char *name, test_fn fn,
                   const char *file, int line);

#define TEST(suite, name)                                                     \
    static void test_##suite##__##name(void);                                 \
    __attribute__((constructor)) static void test_reg_##suite##__##name(void) \
    {                                                                         \
        test_register(#suite, #name, test_##suite##__##name, __FILE__,       \
                      __LINE__);                                              \
    }                                                                         \
    static void test_##suite##__##name(void)

/* Ends the current test as failed / skipped. Never return. */
_Noreturn void test_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
_Noreturn void test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define FAIL(...) test_fail_at(__FILE__, __LINE__, __VA_ARGS__)
#define SKIP(...) test_skip(__VA_ARGS__)

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) test_fail_at(__FILE__, __LINE__, "CHECK(%s)", #cond);    \
    } while (0)

#define CHECK_MSG(cond, ...)                                                  \
    do {                                                                      \
        if (!(cond)) test_fail_at(__FILE__, __LINE__, __VA_ARGS__);           \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                    \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_)                                                         \
            test_fail_at(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a,    \
                         #b, a_, b_);                                         \
    } while (0)

#define CHECK_STR_EQ(a, b)                                                    \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        test_check_str_eq(__FILE__, __LINE__, #a, #b, a_, b_);                \
    } while (0)

#define CHECK_CONTAINS(hay, needle)                                           \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        test_check_contains(__FILE__, __LINE__, #hay, h_, n_);                \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                 \
    do {                                                                      \
        double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);        \
        if (!(a_ - b_ <= t_ && b_ - a_ <= t_))                                \
            test_fail_at(__FILE__, __LINE__, "%s ≈ %s: %.9g vs %.9g (tol %g)", \
                         #a, #b, a_, b_, t_);                                 \
    } while (0)

void test_check_str_eq(const char *file, int line, const char *ea,
                       const char *eb, const char *a, const char *b);
void test_check_contains(const char *file, int line, const char *ehay,
                         const char *hay, const char *needle);

/* ---- helpers ---------------------------------------------------------- */

/* A fresh empty directory, removed with its contents when the test ends. */
const char *test_tmpdir(void);

/* Joins the formatted path onto the temp dir; static buffer per call site is
 * not needed: the string is heap-owned by the runner until the test ends. */
const char *test_tmp_path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Directory holding the built programs (ds4cl, ds4cl-bench, ds4cl-mkmodel)
 * of the variant under test, and the repository root. */
const char *test_bindir(void);
const char *test_root(void);

/* Path of a file of the golden reference data ($DS4CL_GOLDEN, else a
 * shared/golden directory beside the checkout or one of its parents), or
 * NULL (the caller skips) when it is not present. */
const char *test_golden_path(const char *rel);

/* Runs `sh -c cmd` with stdin from /dev/null, capturing stdout+stderr into
 * a heap string (owned by the runner). Returns the exit status, or 128+sig
 * when killed by a signal. */
int test_run(const char *cmd, char **output);
int test_runf(char **output, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads a whole file into a runner-owned NUL-terminated buffer; NULL on error. */
char *test_read_file(const char *path, size_t *len);
/* Sends stderr to a file of the test's until test_stderr_end(saved),
 * which puts it back and returns what was written (runner-owned). */
int test_stderr_begin(void);
char *test_stderr_end(int saved);
/* Writes bytes to a file, failing the test on error. */
void test_write_file(const char *path, const void *data, size_t len);

/* Memory released automatically when the test ends. */
void *test_alloc(size_t n);
char *test_strdup(const char *s);
char *test_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A PID that runs no process now (a child that has exited and been
 * reaped). */
long test_dead_pid(void);

/* Monotonic milliseconds. */
double test_now_ms(void);

/* Reaction times on a crowded machine. A bound such as "a cancel ends the
 * call within 100 ms" is a product requirement, but other work on the
 * machine can keep every thread of the test off the CPUs for a while
 * without the product doing any more. test_mark_now() marks where the
 * reaction starts (any thread may take it); test_reaction_ms() is the time
 * since then less the longest time one thread of this process was ready to
 * run but waiting for a CPU meanwhile (Linux schedstat), which it stores
 * in *waited_ms when that is not NULL. Where the kernel does not tell,
 * nothing is taken off. Only one thread's wait is taken off, not their
 * sum, so a reaction that really is slow fails on a crowded machine too. */
#define TEST_MARK_THREADS 256
typedef struct {
    double t0;
    int n;
    int tid[TEST_MARK_THREADS];
    uint64_t wait_ns[TEST_MARK_THREADS];
} test_mark;
void test_mark_now(test_mark *m);
double test_reaction_ms(const test_mark *m, double *waited_ms);

/* True when the program is on PATH. */
bool test_have_program(const char *name);

#endif
