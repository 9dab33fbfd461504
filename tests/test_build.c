/* The Makefile as users drive it: `make test` fails when a test fails, and
 * `make install` puts the programs and the man page under DESTDIR/PREFIX;
 * and the folders' arrows (build-aux/arrows.sh) point down.
 * Each runs a nested make on the variant under test (the one already
 * built), so nothing is compiled here. */
#include "tests/test.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* make with the given environment, without the outer make's job server,
 * on this test run's variant. */
static const char *make_cmd(const char *env)
{
    const char *v = getenv("DS4CL_VARIANT");
    const char *flag = v && !strcmp(v, "san") ? "SAN=1" : v && !strcmp(v, "tsan") ? "TSAN=1" : "";
    /* an MPI build's programs share the directory: keep them MPI ones */
    const char *m = getenv("DS4CL_MPI_BUILD");
    const char *mpi = m && !strcmp(m, "mpi") ? "MPI=1" : "";
    /* and a build for another -march keeps to its own directories */
    const char *a = getenv("DS4CL_ARCH");
    const char *arch = a && *a ? test_printf("ARCH=%s", a) : "";
    return test_printf("cd '%s' && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL %s make -s --no-print-directory %s %s %s",
                       test_root(), env, flag, mpi, arch);
}

static void need_make(void)
{
    if (!test_have_program("make")) SKIP("make is not installed");
    char *path = test_printf("%s/Makefile", test_root());
    if (access(path, R_OK) != 0) SKIP("no Makefile at %s (DS4CL_ROOT)", test_root());
}

static const char *last_line(char *out)
{
    size_t n = strlen(out);
    while (n && out[n - 1] == '\n') out[--n] = 0;
    char *nl = strrchr(out, '\n');
    return nl ? nl + 1 : out;
}

TEST(build, make_test_fails_when_a_test_fails)
{
    need_make();
    char *out;
    int rc = test_runf(&out, "%s test T=selftest.deliberate_failure", make_cmd("DS4CL_TEST_SELFTEST=1"));
    CHECK_MSG(rc != 0, "make test exited 0 on a failing test:\n%s", out);
    CHECK_CONTAINS(out, "FAIL selftest.deliberate_failure");
    CHECK_CONTAINS(out, "0 passed, 1 failed");
    /* the same command on a passing test succeeds: the status is the runner's */
    rc = test_runf(&out, "%s test T=selftest.deliberate_pass", make_cmd("DS4CL_TEST_SELFTEST=1"));
    CHECK_MSG(rc == 0, "make test exited %d on a passing test:\n%s", rc, out);
    CHECK_STR_EQ(last_line(out), "1 passed, 0 failed");
}

TEST(build, make_install_honours_destdir_and_prefix)
{
    need_make();
    const char *dest = test_tmp_path("root");
    char *out;
    int rc = test_runf(&out, "%s install DESTDIR='%s' PREFIX=/usr", make_cmd(""), dest);
    CHECK_MSG(rc == 0, "make install exited %d:\n%s", rc, out);
    static const char *const programs[] = { "ds4cl", "ds4cl-bench", "ds4cl-mkmodel" };
    for (int i = 0; i < 3; i++) {
        const char *p = test_printf("%s/usr/bin/%s", dest, programs[i]);
        struct stat st;
        CHECK_MSG(stat(p, &st) == 0, "%s not installed", p);
        CHECK_MSG((st.st_mode & 0111) == 0111, "%s is not executable by all", p);
        rc = test_runf(&out, "'%s' --version", p);
        CHECK_EQ_INT(rc, 0);
        CHECK_CONTAINS(out, DS4CL_VERSION);
    }
    size_t n;
    char *man = test_read_file(test_printf("%s/usr/share/man/man1/ds4cl.1", dest), &n);
    CHECK_MSG(man != NULL, "man page not installed");
    CHECK_CONTAINS(man, ".TH DS4CL 1");
    /* nothing outside DESTDIR/PREFIX */
    rc = test_runf(&out, "cd '%s' && find . -type f | sort", dest);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "./usr/bin/ds4cl\n./usr/bin/ds4cl-bench\n./usr/bin/ds4cl-mkmodel\n"
                      "./usr/share/man/man1/ds4cl.1\n");
}

/* The include and call arrows of doc/architecture.md, over the sources and
 * the objects of the variant under test. */
TEST(build, arrows_point_down)
{
    const char *v = getenv("DS4CL_VARIANT"), *a = getenv("DS4CL_ARCH"), *m = getenv("DS4CL_MPI_BUILD");
    const char *objdir = test_printf("%s/build/%s%s%s%s", test_root(), v && *v ? v : "rel", a && *a ? "-" : "",
                                     a && *a ? a : "", m && !strcmp(m, "mpi") ? "-mpi" : "");
    char *out;
    int rc = test_runf(&out, "sh '%s/build-aux/arrows.sh' '%s'", test_root(), objdir);
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_CONTAINS(out, "arrows point down");
}

/* The checker itself: a tree with a wrong arrow of each kind fails, and
 * names each one. */
TEST(build, arrows_check_names_each_wrong_arrow)
{
    const char *root = test_tmp_path("tree");
    const char *files[][2] = {
        { "serve/worker.c", "#include \"agent/agent.h\"\n" },
        { "engine/quant.c", "#include \"cpu/qk.h\"\n" },
        { "opencl/cl_runtime.c", "#include \"prompts/embedded.h\"\n" },
        { "cli/cmd_x.c", "#include \"engine/ds4.h\"\n#include \"opencl/cl_ops.h\"\n" },
        { "agent/turn.c", "#include \"engine/ops.h\"\n" },
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char *path = test_printf("%s/%s", root, files[i][0]);
        CHECK(test_runf(NULL, "mkdir -p \"$(dirname '%s')\"", path) == 0);
        test_write_file(path, files[i][1], strlen(files[i][1]));
    }
    char *out;
    int rc = test_runf(&out, "ARROWS_ROOT='%s' sh '%s/build-aux/arrows.sh'", root, test_root());
    CHECK_MSG(rc != 0, "the check passed a tree with wrong arrows:\n%s", out);
    CHECK_CONTAINS(out, "serve/worker.c -> agent/agent.h");
    CHECK_CONTAINS(out, "engine/quant.c -> cpu/qk.h");
    CHECK_CONTAINS(out, "opencl/cl_runtime.c -> prompts/embedded.h");
    CHECK_CONTAINS(out, "cli/cmd_x.c -> opencl/cl_ops.h");
    CHECK_CONTAINS(out, "agent/turn.c -> engine/ops.h");
    CHECK(!strstr(out, "-> engine/ds4.h"));
}
