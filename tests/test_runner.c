/* Tests of the test runner itself: a failing test fails the run, skips are
 * reported, filters select. The "selftest" suite exists only when
 * DS4CL_TEST_SELFTEST=1 and is driven from here through a child run. */
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TEST(selftest, deliberate_failure)
{
    CHECK_EQ_INT(1 + 1, 3);
}

TEST(selftest, deliberate_skip)
{
    SKIP("deliberately skipped");
}

TEST(selftest, deliberate_pass)
{
    CHECK(1);
}

TEST(selftest, deliberate_crash)
{
    volatile int *p = NULL;
    if (getenv("DS4CL_TEST_SELFTEST_CRASH")) *p = 1;
}

static const char *self_exe(void)
{
    char *buf = test_alloc(4096);
    ssize_t n = readlink("/proc/self/exe", buf, 4095);
    CHECK(n > 0);
    buf[n] = 0;
    return buf;
}

static const char *last_line(char *out)
{
    size_t n = strlen(out);
    while (n && out[n - 1] == '\n') out[--n] = 0;
    char *nl = strrchr(out, '\n');
    return nl ? nl + 1 : out;
}

TEST(runner, failing_test_fails_the_run)
{
    char *out;
    int rc = test_runf(&out, "DS4CL_TEST_SELFTEST=1 '%s' selftest.deliberate_failure", self_exe());
    CHECK(rc != 0);
    CHECK_CONTAINS(out, "FAIL selftest.deliberate_failure");
    CHECK_CONTAINS(out, "tests/test_runner.c:");
    CHECK_CONTAINS(out, "1 + 1 == 3: 2 != 3");
    CHECK_STR_EQ(last_line(out), "0 passed, 1 failed");
}

TEST(runner, skip_and_pass_are_counted)
{
    char *out;
    int rc = test_runf(&out, "DS4CL_TEST_SELFTEST=1 '%s' deliberate_skip deliberate_pass",
                       self_exe());
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "skip selftest.deliberate_skip");
    CHECK_CONTAINS(out, "deliberately skipped");
    CHECK_STR_EQ(last_line(out), "1 passed, 0 failed, 1 skipped");
}

TEST(runner, crash_is_a_failure_not_the_end)
{
    char *out;
    int rc = test_runf(&out, "DS4CL_TEST_SELFTEST=1 DS4CL_TEST_SELFTEST_CRASH=1 "
                       "ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=0 "
                       "'%s' 'selftest.deliberate_[cp]*'", self_exe());
    CHECK(rc != 0);
    CHECK_CONTAINS(out, "FAIL selftest.deliberate_crash");
    CHECK_STR_EQ(last_line(out), "1 passed, 1 failed");
}

TEST(runner, unknown_pattern_is_an_error)
{
    char *out;
    int rc = test_runf(&out, "'%s' no_such_test_anywhere", self_exe());
    CHECK(rc != 0);
    CHECK_CONTAINS(out, "no test matches");
    CHECK_STR_EQ(last_line(out), "0 passed, 0 failed");
}

TEST(runner, tmpdir_is_private_and_writable)
{
    const char *d = test_tmpdir();
    const char *p = test_tmp_path("x.txt");
    test_write_file(p, "hello", 5);
    size_t n;
    char *s = test_read_file(p, &n);
    CHECK(s != NULL);
    CHECK_EQ_INT(n, 5);
    CHECK_STR_EQ(s, "hello");
    CHECK(strncmp(p, d, strlen(d)) == 0);
}
