/* Tests of search, its globs and .gitignore handling. */
#include "tests/test.h"
#include "tests/tools_util.h"

#include "tools/glob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- globs -------------------------------------------------------------------------- */

TEST(tools_glob, stars_classes_and_double_star)
{
    CHECK(glob_match("*.c", "main.c"));
    CHECK(!glob_match("*.c", "src/main.c"));
    CHECK(glob_match("src/*.c", "src/main.c"));
    CHECK(glob_match("**/*.c", "main.c"));
    CHECK(glob_match("**/*.c", "a/b/c/main.c"));
    CHECK(glob_match("src/**", "src/a/b"));
    CHECK(!glob_match("src/**", "src"));
    CHECK(glob_match("a/**/b", "a/b"));
    CHECK(glob_match("a/**/b", "a/x/y/b"));
    CHECK(!glob_match("a/**/b", "a/x/y/c"));
    CHECK(glob_match("fo?.[ch]", "foo.h"));
    CHECK(!glob_match("fo?.[ch]", "fo/.h"));
    CHECK(glob_match("[!a-c]x", "dx"));
    CHECK(!glob_match("[!a-c]x", "bx"));
    CHECK(glob_match("\\*lit", "*lit"));
    CHECK(!glob_match("\\*lit", "xlit"));
    CHECK(glob_match("a**b", "axxb"));
    CHECK(!glob_match("a**b", "a/b"));
    CHECK(glob_match_fold("*.TXT", "notes.txt", true));
    CHECK(glob_match_braces("*.{c,h}", "x.h", false));
    CHECK(!glob_match_braces("*.{c,h}", "x.o", false));
    CHECK(glob_match_braces("{src,lib}/**/*.{c,cc}", "lib/a/b.cc", false));
    CHECK(glob_match("[", "["));
}

TEST(tools_glob, gitignore_rules)
{
    ignore_stack *st = ignore_new();
    const char *gi = "# comment\n"
                     "*.o\n"
                     "!keep.o\n"
                     "build/\n"
                     "/rootonly.txt\n"
                     "docs/*.html\n"
                     "**/gen/**\n"
                     "trailing\\ \n"
                     "\\#hash\n";
    ignore_push_text(st, "/w", gi, strlen(gi));
    CHECK(ignore_match(st, "/w/a.o", false));
    CHECK(ignore_match(st, "/w/sub/deep/a.o", false));
    CHECK(!ignore_match(st, "/w/keep.o", false));
    CHECK(ignore_match(st, "/w/build", true));
    CHECK(!ignore_match(st, "/w/build", false)); /* a file named build */
    CHECK(ignore_match(st, "/w/x/build", true));
    CHECK(ignore_match(st, "/w/rootonly.txt", false));
    CHECK(!ignore_match(st, "/w/sub/rootonly.txt", false));
    CHECK(ignore_match(st, "/w/docs/a.html", false));
    CHECK(!ignore_match(st, "/w/docs/x/a.html", false));
    CHECK(ignore_match(st, "/w/a/gen/b.c", false));
    CHECK(ignore_match(st, "/w/trailing ", false));
    CHECK(ignore_match(st, "/w/#hash", false));
    CHECK(!ignore_match(st, "/w/comment", false));
    CHECK(!ignore_match(st, "/other/a.o", false));
    /* a nested level overrides */
    const char *sub = "!*.o\n";
    ignore_push_text(st, "/w/sub", sub, strlen(sub));
    CHECK(!ignore_match(st, "/w/sub/a.o", false));
    CHECK(ignore_match(st, "/w/a.o", false));
    ignore_pop(st);
    CHECK(ignore_match(st, "/w/sub/a.o", false));
    ignore_free(st);
}

/* ---- search -------------------------------------------------------------------------- */

static void tree(void)
{
    tu_file("src/a.c", "int alpha;\nint beta;\n// alpha again\n");
    tu_file("src/b.h", "#define ALPHA 1\n");
    tu_file("src/deep/c.c", "void f(void) { alpha(); }\n");
    tu_file("README.md", "Alpha and alpha.\n");
    tu_file("build/out.c", "int alpha;\n");
    tu_file("src/gen.c", "alpha generated\n");
    tu_file(".gitignore", "build/\nsrc/gen.c\n");
    test_write_file(tu_path("blob.bin"), "alpha\0\0\0", 8);
}

TEST(tools_search, literal_grouped_sorted_and_ignoring)
{
    tool_env *env = tu_env();
    tree();
    tu_result r = tu_call(env, "search", "{\"query\":\"alpha\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "4 matching lines in 3 files for text \"alpha\" in . (6 files searched;");
    CHECK_CONTAINS(r.text, "2 paths skipped by .gitignore; 1 binary files skipped");
    CHECK_CONTAINS(r.text, "README.md\n1:\tAlpha and alpha.\nsrc/a.c\n1:\tint alpha;\n3:\t// alpha again\nsrc/deep/c.c\n1:\t");
    CHECK(!strstr(r.text, "build/out.c"));
    CHECK(!strstr(r.text, "gen.c"));
    r = tu_call(env, "search", "{\"query\":\"alpha\",\"include_ignored\":true}");
    CHECK_CONTAINS(r.text, "build/out.c");
    CHECK_CONTAINS(r.text, "src/gen.c");
}

TEST(tools_search, case_regex_glob_and_context)
{
    tool_env *env = tu_env();
    tree();
    tu_result r = tu_call(env, "search", "{\"query\":\"alpha\",\"case_sensitive\":false,\"glob\":\"*.h\"}");
    CHECK_CONTAINS(r.text, "1 matching line in 1 file");
    CHECK_CONTAINS(r.text, "src/b.h\n1:\t#define ALPHA 1\n");
    r = tu_call(env, "search", "{\"query\":\"^int (alpha|beta);$\",\"regex\":true,\"path\":\"src\"}");
    CHECK_CONTAINS(r.text, "2 matching lines in 1 file");
    r = tu_call(env, "search", "{\"query\":\"beta\",\"context\":1}");
    CHECK_CONTAINS(r.text, "src/a.c\n1-\tint alpha;\n2:\tint beta;\n3-\t// alpha again\n");
    r = tu_call(env, "search", "{\"query\":\"alpha\",\"glob\":\"src/**/*.c,!src/a.c\"}");
    CHECK_CONTAINS(r.text, "src/deep/c.c");
    CHECK(!strstr(r.text, "src/a.c"));
    r = tu_call(env, "search", "{\"query\":\"(unclosed\",\"regex\":true}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "invalid regex");
    r = tu_call(env, "search", "{\"query\":\"zzz-not-there\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "No matches");
    r = tu_call(env, "search", "{\"query\":\"x\",\"path\":\"nowhere\"}");
    CHECK(r.is_error);
    r = tu_call(env, "search", "{\"query\":\"x\",\"context\":99}");
    CHECK(r.is_error);
    r = tu_call(env, "search", "{\"query\":\"\"}");
    CHECK(r.is_error);
}

TEST(tools_search, merged_context_windows_and_a_single_file)
{
    tool_env *env = tu_env();
    tu_file("f.txt", "a\nhit1\nb\nhit2\nc\nd\ne\nf\nhit3\n");
    tu_result r = tu_call(env, "search", "{\"query\":\"hit\",\"path\":\"f.txt\",\"context\":1}");
    CHECK_CONTAINS(r.text, "f.txt\n1-\ta\n2:\thit1\n3-\tb\n4:\thit2\n5-\tc\n--\n8-\tf\n9:\thit3\n");
    /* a file named explicitly is searched even when ignored */
    tu_file(".gitignore", "f.txt\n");
    r = tu_call(env, "search", "{\"query\":\"hit2\",\"path\":\"f.txt\"}");
    CHECK_CONTAINS(r.text, "1 matching line in");
}

TEST(tools_search, many_matches_page_through_more)
{
    tool_env *env = tu_env();
    char *s = test_alloc(200 * 20);
    size_t k = 0;
    for (int i = 1; i <= 200; i++) k += (size_t)sprintf(s + k, "match %d\n", i);
    tu_file("m.txt", s);
    tu_result r = tu_call(env, "search", "{\"query\":\"match\",\"max_results\":10}");
    CHECK_CONTAINS(r.text, "200 matching lines in 1 file");
    CHECK_CONTAINS(r.text, "10:\tmatch 10\n[11 of 201 output lines shown; call more");
    CHECK(!strstr(r.text, "match 11\n"));
    r = tu_call(env, "more", "{\"count\":5}");
    CHECK_CONTAINS(r.text, "lines 12-16 of 201");
    CHECK_CONTAINS(r.text, "11:\tmatch 11\n");
    /* lines paged in through more count as shown */
    r = tu_call(env, "edit", "{\"path\":\"m.txt\",\"start_line\":12,\"new\":\"edited\"}");
    CHECK(!r.is_error);
    r = tu_call(env, "edit", "{\"path\":\"m.txt\",\"start_line\":150,\"new\":\"edited\"}");
    CHECK(r.is_error);
}

TEST(tools_search, shown_lines_allow_line_edits)
{
    tool_env *env = tu_env();
    tu_file("code.c", "a\nb\nc\nd\ne\nf\ntarget();\ng\n");
    tu_call(env, "search", "{\"query\":\"target\"}");
    tu_result r = tu_call(env, "edit", "{\"path\":\"code.c\",\"start_line\":1,\"new\":\"z\"}");
    CHECK(r.is_error);
    r = tu_call(env, "edit", "{\"path\":\"code.c\",\"start_line\":7,\"new\":\"other();\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("code.c"), "a\nb\nc\nd\ne\nf\nother();\ng\n");
}

TEST(tools_search, nested_gitignore_and_repository_top)
{
    tool_env *env = tu_env();
    mkdirat(AT_FDCWD, tu_path(".git"), 0755);
    tu_file(".gitignore", "*.log\n");
    tu_file("pkg/.gitignore", "!keep.log\nlocal/\n");
    tu_file("pkg/keep.log", "needle\n");
    tu_file("pkg/drop.log", "needle\n");
    tu_file("pkg/local/x.txt", "needle\n");
    tu_file("pkg/sub/y.txt", "needle\n");
    tu_file(".git/config", "needle\n");
    /* searching below the top still applies the top's .gitignore */
    tu_result r = tu_call(env, "search", "{\"query\":\"needle\",\"path\":\"pkg\"}");
    CHECK_CONTAINS(r.text, "2 matching lines in 2 files");
    CHECK_CONTAINS(r.text, "pkg/keep.log");
    CHECK_CONTAINS(r.text, "pkg/sub/y.txt");
    CHECK(!strstr(r.text, "drop.log"));
    CHECK(!strstr(r.text, "local"));
    CHECK(!strstr(r.text, ".git/config"));
}

TEST(tools_search, skips_symlinks_and_lone_cr_numbering_matches_read)
{
    tool_env *env = tu_env();
    tu_file("t.txt", "one\rtwo\rneedle\r");
    CHECK(symlink(tu_path("t.txt"), tu_path("link.txt")) == 0);
    tu_result r = tu_call(env, "search", "{\"query\":\"needle\"}");
    CHECK_CONTAINS(r.text, "1 matching line in 1 file");
    CHECK_CONTAINS(r.text, "t.txt\n3:\tneedle\n");
}

/* The benchmark of bench/README.md: on the repository's engine sources
 * the tool finds exactly the lines grep -rn finds. */
TEST(tools_search, benchmark_agrees_with_grep)
{
    if (!test_have_program("grep")) SKIP("grep is not installed");
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl-bench' --search-bench '%s/engine' --runs 1 --query ds4_session "
                             "--query icase:Ds4_Error --query 'regex:^static \\w+ \\*?\\w+\\(' 2>&1",
                       test_bindir(), test_root());
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "query,kind,tool_matches,grep_matches,tool_ms,grep_ms,tool_cpu_ms,grep_cpu_ms,tool_vs_grep\n");
    int rows = 0;
    for (char *line = strchr(out, '\n'); line && line[1]; line = strchr(line + 1, '\n')) {
        char kind[16];
        long tm, gm;
        const char *p = strrchr(line + 1, '"');
        CHECK_MSG(p && sscanf(p, "\",%15[a-z],%ld,%ld,", kind, &tm, &gm) == 3, "bad row: %.80s", line + 1);
        CHECK_MSG(tm == gm && tm > 0, "the tool found %ld lines, grep %ld: %.80s", tm, gm, line + 1);
        rows++;
    }
    CHECK_EQ_INT(rows, 3);
}
