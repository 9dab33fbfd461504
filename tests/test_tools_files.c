/* Tests of the registry and the file tools: read, more, write, edit, list. */
#include "tests/test.h"
#include "tests/tools_util.h"
#include "tests/web_util.h"
#include "tools/tool_env.h"

#include <errno.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *numbered_lines(int n)
{
    char *s = test_alloc((size_t)n * 16 + 1);
    size_t k = 0;
    for (int i = 1; i <= n; i++) k += (size_t)sprintf(s + k, "line %d\n", i);
    return s;
}

/* ---- registry ----------------------------------------------------------------------- */

TEST(tools_registry, lists_tools_in_prompt_order_with_valid_schemas)
{
    size_t n;
    const tool_def *const *all = tools_all(&n);
    CHECK(n >= 9);
    static const char *const order[] = { "read", "more", "search", "list", "write", "edit", "bash",
                                         "bash_status", "bash_stop" };
    for (size_t i = 0; i < 9; i++) CHECK_STR_EQ(all[i]->name, order[i]);
    for (size_t i = 0; i < n; i++) {
        CHECK(tools_find(all[i]->name) == all[i]);
        CHECK(all[i]->description && strlen(all[i]->description) > 40);
        char *js = tools_schema_json(all[i]);
        json_object *o = json_tokener_parse(js);
        CHECK_MSG(o != NULL, "schema of %s is not JSON: %s", all[i]->name, js);
        json_object *params, *type;
        CHECK(json_object_object_get_ex(o, "parameters", &params));
        CHECK(json_object_object_get_ex(params, "type", &type));
        CHECK_STR_EQ(json_object_get_string(type), "object");
        json_object_put(o);
        free(js);
    }
    CHECK(tools_find("nope") == NULL);
    CHECK(tools_find(NULL) == NULL);
}

/* The design rule "one tool, one file": tools/<name>.c defines tool_<name>
 * and no other tool. */
TEST(tools_registry, one_source_file_per_tool)
{
    const char *dir = test_printf("%s/tools", test_root());
    if (access(dir, R_OK) != 0) SKIP("no sources at %s (DS4CL_ROOT)", dir);
    size_t n;
    const tool_def *const *all = tools_all(&n);
    for (size_t i = 0; i < n; i++) {
        const char *path = test_printf("%s/%s.c", dir, all[i]->name);
        char *src = test_read_file(path, NULL);
        CHECK_MSG(src != NULL, "tool %s has no file %s", all[i]->name, path);
        if (!src) continue;
        const char *def = test_printf("const tool_def tool_%s =", all[i]->name);
        CHECK_MSG(strstr(src, def) != NULL, "%s does not define tool_%s", path, all[i]->name);
        size_t defs = 0;
        for (const char *p = src; (p = strstr(p, "const tool_def tool_")) != NULL; p++) defs++;
        CHECK_MSG(defs == 1, "%s defines %zu tools", path, defs);
    }
}

TEST(tools_registry, unknown_tool_and_bad_json_are_results)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "frobnicate", "{}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "no tool named 'frobnicate'");
    CHECK_CONTAINS(r.text, "read, more");
    r = tu_call(env, "read", "{\"path\": ");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "not valid JSON");
    r = tu_call(env, "read", "[1,2]");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "must be a JSON object");
    r = tu_call(env, "read", "{\"path\":\"a\"} trailing");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "extra text");
}

TEST(tools_registry, missing_unknown_and_mistyped_parameters)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "read", "{}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "read needs the parameter 'path'");
    r = tu_call(env, "read", "{\"path\":\"x\",\"lines\":3}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "unknown parameter 'lines'");
    CHECK_CONTAINS(r.text, "max_lines");
    r = tu_call(env, "read", "{\"path\":\"x\",\"max_lines\":\"many\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "must be an integer");
    r = tu_call(env, "read", "{\"path\":\"x\",\"whole\":\"perhaps\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "must be a boolean");
    r = tu_call(env, "read", "{\"path\":null}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "needs the parameter 'path'");
}

TEST(tools_registry, numbers_and_booleans_given_as_strings_are_accepted)
{
    tool_env *env = tu_env();
    tu_file("a.txt", numbered_lines(20));
    tu_result r = tu_call(env, "read", "{\"path\":\"a.txt\",\"start_line\":\"5\",\"max_lines\":\" 2 \",\"raw\":\"false\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "lines 5-6 of 20");
    /* a number where a string is expected becomes its text */
    r = tu_call(env, "write", "{\"path\":\"n.txt\",\"content\":12345}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("n.txt"), "12345");
}

TEST(tools_registry, result_is_capped_to_the_room_given)
{
    tool_env *env = tu_env();
    char *big = test_alloc(300000);
    for (int i = 0; i < 299999; i++) big[i] = (i % 100 == 99) ? '\n' : 'x';
    tu_file("big.txt", big);
    tool_call_ctx ctx = { .max_result_bytes = 4096 };
    tu_result r = tu_call_ctx(env, "read", "{\"path\":\"big.txt\",\"raw\":true,\"max_lines\":3000}", &ctx);
    CHECK(strlen(r.text) <= 4096);
    CHECK_CONTAINS(r.text, "continue_offset=");
}

/* ---- read ------------------------------------------------------------------------------ */

TEST(tools_read, numbered_chunk_with_continue_offset)
{
    tool_env *env = tu_env();
    tu_file("src/a.c", numbered_lines(1200));
    tu_result r = tu_call(env, "read", "{\"path\":\"src/a.c\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "src/a.c: lines 1-500 of 1200; continue_offset=501");
    CHECK_CONTAINS(r.text, "\n1\tline 1\n");
    CHECK_CONTAINS(r.text, "\n500\tline 500\n");
    CHECK(!strstr(r.text, "line 501"));
    r = tu_call(env, "read", "{\"path\":\"src/a.c\",\"start_line\":1190,\"max_lines\":50}");
    CHECK_CONTAINS(r.text, "lines 1190-1200 of 1200\n");
    CHECK(!strstr(r.text, "continue_offset"));
    r = tu_call(env, "read", "{\"path\":\"src/a.c\",\"start_line\":1300}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "past the end");
}

TEST(tools_read, missing_directory_binary_and_empty)
{
    tool_env *env = tu_env();
    tu_file("src/main.c", "int main;\n");
    tu_result r = tu_call(env, "read", "{\"path\":\"src/mian.c\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "src/mian.c does not exist");
    CHECK_CONTAINS(r.text, "main.c");
    r = tu_call(env, "read", "{\"path\":\"src\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "is a directory");
    test_write_file(tu_path("bin.dat"), "ab\0cd", 5);
    r = tu_call(env, "read", "{\"path\":\"bin.dat\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "binary");
    tu_file("empty", "");
    r = tu_call(env, "read", "{\"path\":\"empty\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "empty file");
    r = tu_call(env, "read", "{\"path\":\"/dev/zero\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "not a regular file");
    r = tu_call(env, "read", "{\"path\":\"src/main.c\",\"max_lines\":0}");
    CHECK(r.is_error);
}

TEST(tools_read, permission_denied)
{
    tu_obey_permission_bits();
    tool_env *env = tu_env();
    const char *p = tu_file("secret", "x\n");
    chmod(p, 0);
    tu_result r = tu_call(env, "read", "{\"path\":\"secret\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "Permission denied");
    /* the other file tools: clean errors, nothing lost */
    const char *ro = tu_file("ro/kept.txt", "kept\n");
    chmod(ro, 0444);
    chmod(tu_path("ro"), 0555);
    r = tu_call(env, "write", "{\"path\":\"ro/kept.txt\",\"content\":\"new\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "ermission denied");
    r = tu_call(env, "write", "{\"path\":\"ro/new.txt\",\"content\":\"new\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "ermission denied");
    r = tu_call(env, "edit", "{\"path\":\"ro/kept.txt\",\"old\":\"kept\",\"new\":\"gone\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "ermission denied");
    CHECK_STR_EQ(tu_content("ro/kept.txt"), "kept\n");
    chmod(tu_path("ro"), 0755);
    chmod(ro, 0644);
    tu_file("closed/inner.txt", "needle\n");
    chmod(tu_path("closed"), 0);
    r = tu_call(env, "list", "{\"path\":\"closed\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "ermission denied");
    r = tu_call(env, "search", "{\"query\":\"needle\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "No matches");
    CHECK_CONTAINS(r.text, "unreadable");
    chmod(tu_path("closed"), 0755);
}

TEST(tools_read, read_errors_are_results)
{
    /* a file that opens but cannot be read, for root too */
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "read", "{\"path\":\"/proc/self/mem\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "error reading /proc/self/mem");
}

TEST(tools_write, unwritable_place_is_a_clean_error)
{
    const char *rules = test_tmp_path("rules");
    test_write_file(rules, "allow write /proc/**\n", 20);
    tool_env_config cfg = { .rules_path = rules };
    tool_env *env = tu_env_cfg(&cfg);
    tu_result r = tu_call(env, "write", "{\"path\":\"/proc/version\",\"content\":\"x\"}");
    CHECK(r.is_error);
    CHECK(!r.denied);
    CHECK_CONTAINS(r.text, "/proc/version was not written");
    CHECK_CONTAINS(r.text, "unchanged");
}

TEST(tools_read, long_lines_cut_visibly_and_crlf_handled)
{
    tool_env *env = tu_env();
    char *line = test_alloc(5002);
    memset(line, 'y', 5000);
    line[5000] = '\n';
    tu_file("long.txt", test_printf("short\r\n%sthird\rfourth", line));
    tu_result r = tu_call(env, "read", "{\"path\":\"long.txt\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "lines 1-4 of 4");
    CHECK_CONTAINS(r.text, "\n1\tshort\n");
    CHECK_CONTAINS(r.text, "[line cut: 5000 bytes in all]");
    CHECK_CONTAINS(r.text, "\n3\tthird\n4\tfourth\n");
    r = tu_call(env, "read", "{\"path\":\"long.txt\",\"raw\":true,\"start_line\":3}");
    CHECK_STR_EQ(r.text, "third\rfourth\n");
}

TEST(tools_read, whole_refused_when_it_does_not_fit)
{
    tool_env *env = tu_env();
    tu_file("big.txt", numbered_lines(5000));
    tool_call_ctx ctx = { .max_result_bytes = 8192 };
    tu_result r = tu_call_ctx(env, "read", "{\"path\":\"big.txt\",\"whole\":true}", &ctx);
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "does not fit the room left in the context");
    ctx.max_result_bytes = 1 << 20;
    r = tu_call_ctx(env, "read", "{\"path\":\"big.txt\",\"whole\":true}", &ctx);
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "lines 1-5000 of 5000");
}

TEST(tools_read, huge_file_streams_a_range)
{
    tool_env *env = tu_env();
    const char *p = tu_path("huge.log");
    FILE *f = fopen(p, "w");
    for (int i = 1; i <= 400000; i++) fprintf(f, "entry %d of the log with some padding text\n", i);
    fclose(f);
    tu_result r = tu_call(env, "read", "{\"path\":\"huge.log\",\"start_line\":399999,\"max_lines\":5}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "lines 399999-400000 of 400000");
    CHECK_CONTAINS(r.text, "400000\tentry 400000 of the log");
}

/* ---- more ------------------------------------------------------------------------------- */

TEST(tools_more, continues_a_read_and_ends)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "more", "{}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "no previous output");
    tu_file("a.txt", numbered_lines(250));
    r = tu_call(env, "read", "{\"path\":\"a.txt\",\"max_lines\":100}");
    CHECK_CONTAINS(r.text, "continue_offset=101");
    r = tu_call(env, "more", "{}");
    CHECK_CONTAINS(r.text, "lines 101-200 of 250; continue_offset=201");
    r = tu_call(env, "more", "{\"count\":10}");
    CHECK_CONTAINS(r.text, "lines 201-210 of 250");
    r = tu_call(env, "more", "{\"count\":1000}");
    CHECK_CONTAINS(r.text, "lines 211-250 of 250\n");
    r = tu_call(env, "more", "{}");
    CHECK(r.is_error);
    r = tu_call(env, "more", "{\"count\":0}");
    CHECK(r.is_error);
}

/* ---- write ------------------------------------------------------------------------------ */

TEST(tools_write, creates_parents_and_keeps_mode)
{
    tool_env *env = tu_env();
    tu_result r = tu_call(env, "write", "{\"path\":\"deep/er/new.sh\",\"content\":\"#!/bin/sh\\necho hi\\n\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "Created deep/er/new.sh: 2 lines");
    CHECK_STR_EQ(tu_content("deep/er/new.sh"), "#!/bin/sh\necho hi\n");
    chmod(tu_path("deep/er/new.sh"), 0751);
    r = tu_call(env, "write", "{\"path\":\"deep/er/new.sh\",\"content\":\"exit 0\"}");
    CHECK_CONTAINS(r.text, "Replaced deep/er/new.sh: 1 line, 6 bytes (it had 2 lines); no newline at the end");
    struct stat st;
    CHECK(stat(tu_path("deep/er/new.sh"), &st) == 0);
    CHECK_EQ_INT(st.st_mode & 0777, 0751);
    r = tu_call(env, "write", "{\"path\":\"deep\",\"content\":\"x\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "is a directory");
}

TEST(tools_write, through_a_symlink_writes_the_target)
{
    tool_env *env = tu_env();
    tu_file("real.txt", "old\n");
    CHECK(symlink("real.txt", tu_path("link.txt")) == 0);
    tu_result r = tu_call(env, "write", "{\"path\":\"link.txt\",\"content\":\"new\\n\"}");
    CHECK(!r.is_error);
    struct stat st;
    CHECK(lstat(tu_path("link.txt"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK_STR_EQ(tu_content("real.txt"), "new\n");
}

TEST(tools_write, interrupted_write_leaves_the_original)
{
    tool_env *env = tu_env();
    tu_file("keep.txt", "precious\n");
    /* a file size limit makes the write fail midway, for root too */
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = { 1000, 1000 };
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    char *big = test_alloc(5000);
    memset(big, 'z', 4999);
    tu_result r = tu_call(env, "write", test_printf("{\"path\":\"keep.txt\",\"content\":\"%s\"}", big));
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "unchanged");
    CHECK_STR_EQ(tu_content("keep.txt"), "precious\n");
    /* no temporary file is left behind */
    char *out;
    test_runf(&out, "ls -A '%s'", tu_workspace());
    CHECK_STR_EQ(out, "keep.txt\n");
}

TEST(tools_write, parent_is_a_file)
{
    tool_env *env = tu_env();
    tu_file("plain", "x");
    tu_result r = tu_call(env, "write", "{\"path\":\"plain/child.txt\",\"content\":\"y\"}");
    CHECK(r.is_error);
    CHECK_STR_EQ(tu_content("plain"), "x");
}

/* ---- edit ------------------------------------------------------------------------------- */

TEST(tools_edit, exact_replacement_with_diff)
{
    tool_env *env = tu_env();
    tu_file("f.c", "int a;\nint b;\nint c;\nint d;\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.c\",\"old\":\"int b;\\n\",\"new\":\"int b1;\\nint b2;\\n\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("f.c"), "int a;\nint b1;\nint b2;\nint c;\nint d;\n");
    CHECK_CONTAINS(r.text, "Edited f.c: line 2 became lines 2-3; later lines moved by +1");
    CHECK_CONTAINS(r.text, " 1\tint a;\n-2\tint b;\n+2\tint b1;\n+3\tint b2;\n 4\tint c;\n");
}

/* One line or several, the words agree with the count. */
TEST(tools_edit, line_counts_read_as_english)
{
    tool_env *env = tu_env();
    tu_file("f.c", "int a;\nint b;\nint c;\nint d;\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.c\",\"old\":\"int d;\\n\",\"new\":\"int e;\\n\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "Edited f.c: changed line 4; the file has 4 lines now");
    r = tu_call(env, "edit", "{\"path\":\"f.c\",\"start_line\":2,\"end_line\":3,\"new\":\"\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "Edited f.c: deleted lines 2-3");
    r = tu_call(env, "edit", "{\"path\":\"f.c\",\"start_line\":2,\"end_line\":2,\"new\":\"\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "; the file has 1 line now\n");
    const tool_def *t = tools_find("edit");
    CHECK(t && t->summarize);
    static const char *const cases[][2] = {
        { "{\"path\":\"f.c\",\"old\":\"x\",\"new\":\"y\"}", "edit: f.c (change 1 line)" },
        { "{\"path\":\"f.c\",\"old\":\"x\",\"new\":\"y\\nz\"}", "edit: f.c (replace 1 line with 2)" },
        { "{\"path\":\"f.c\",\"start_line\":4,\"end_line\":4,\"new\":\"y\"}", "edit: f.c (line 4 \xe2\x86\x92 1 line)" },
        { "{\"path\":\"f.c\",\"start_line\":4,\"end_line\":3,\"new\":\"y\"}", "edit: f.c (insert 1 line before line 4)" },
    };
    const tool_def *w = tools_find("write");
    struct json_object *wargs = json_tokener_parse("{\"path\":\"g.c\",\"content\":\"x\\n\"}");
    char wbuf[256];
    w->summarize(wargs, wbuf, sizeof wbuf);
    json_object_put(wargs);
    CHECK_STR_EQ(wbuf, "write: g.c (1 line)");
    for (size_t i = 0; i < 4; i++) {
        struct json_object *args = json_tokener_parse(cases[i][0]);
        char buf[256];
        t->summarize(args, buf, sizeof buf);
        json_object_put(args);
        CHECK_STR_EQ(buf, cases[i][1]);
    }
}

TEST(tools_edit, not_found_shows_closest_lines)
{
    tool_env *env = tu_env();
    tu_file("f.py", "def alpha():\n    return 1\n\ndef beta(x):\n    return x * 2\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.py\",\"old\":\"def beta(x):\\n  return x * 2\\n\",\"new\":\"y\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "old text not found in f.py");
    CHECK_CONTAINS(r.text, "lines 4-5");
    CHECK_CONTAINS(r.text, "4\tdef beta(x):");
    /* those lines were shown: a line edit on them works now */
    r = tu_call(env, "edit", "{\"path\":\"f.py\",\"start_line\":5,\"new\":\"    return x * 3\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("f.py"), "def alpha():\n    return 1\n\ndef beta(x):\n    return x * 3\n");
}

TEST(tools_edit, ambiguous_and_disambiguated)
{
    tool_env *env = tu_env();
    tu_file("f.txt", "x = 1\ny = 2\nx = 1\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"old\":\"x = 1\",\"new\":\"x = 9\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "occurs 2 times in f.txt, at lines 1, 3");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"old\":\"x = 1\",\"new\":\"x = 9\",\"start_line\":3}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("f.txt"), "x = 1\ny = 2\nx = 9\n");
}

TEST(tools_edit, bad_input)
{
    tool_env *env = tu_env();
    tu_file("f.txt", "a\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"new\":\"b\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "either old");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"old\":\"\",\"new\":\"b\"}");
    CHECK(r.is_error);
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"old\":\"a\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "needs the parameter 'new'");
    r = tu_call(env, "edit", "{\"path\":\"nope.txt\",\"old\":\"a\",\"new\":\"b\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "To create a file use write");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"old\":\"a\",\"new\":\"a\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "nothing to change");
    test_write_file(tu_path("b.bin"), "a\0b", 3);
    r = tu_call(env, "edit", "{\"path\":\"b.bin\",\"old\":\"a\",\"new\":\"b\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "binary");
    /* a huge file (sparse: no disk used) is refused before it is read */
    const char *huge = tu_file("huge.txt", "a\n");
    CHECK(truncate(huge, 80ll << 20) == 0);
    double t0 = test_now_ms();
    r = tu_call(env, "edit", "{\"path\":\"huge.txt\",\"old\":\"a\",\"new\":\"b\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "more than edit handles");
    CHECK(test_now_ms() - t0 < 1000);
    /* read and search treat it as what it is: zeros make it binary */
    r = tu_call(env, "read", "{\"path\":\"huge.txt\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "binary");
    r = tu_call(env, "search", "{\"query\":\"a\",\"path\":\"huge.txt\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "search skips binaries");
}

TEST(tools_edit, line_edit_requires_shown_unchanged_lines)
{
    tool_env *env = tu_env();
    tu_file("f.txt", numbered_lines(30));
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":3,\"new\":\"x\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "not seen lines of f.txt");
    tu_call(env, "read", "{\"path\":\"f.txt\",\"max_lines\":10}");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":9,\"end_line\":12,\"new\":\"x\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "line 11 of f.txt has not been shown");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":3,\"end_line\":4,\"new\":\"three+four\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "lines 3-4 became line 3; later lines moved by -1");
    CHECK(strstr(tu_content("f.txt"), "line 2\nthree+four\nline 5\n"));
    /* lines after an edit that moved them are not trusted any more */
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":9,\"new\":\"x\"}");
    CHECK(r.is_error);
    /* lines shown in the diff are */
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":4,\"new\":\"five\"}");
    CHECK(!r.is_error);
    /* a change made by something else invalidates what was shown */
    tu_call(env, "read", "{\"path\":\"f.txt\"}");
    tu_file("f.txt", "changed\nline 2\n");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":2,\"new\":\"y\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "changed since you last saw it");
}

TEST(tools_edit, insert_delete_and_append)
{
    tool_env *env = tu_env();
    tu_file("f.txt", "a\nb\nc");
    tu_call(env, "read", "{\"path\":\"f.txt\"}");
    tu_result r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":2,\"end_line\":1,\"new\":\"ins\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "inserted 1 line before line 2");
    CHECK_STR_EQ(tu_content("f.txt"), "a\nins\nb\nc");
    tu_call(env, "read", "{\"path\":\"f.txt\"}");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":3,\"new\":\"\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("f.txt"), "a\nins\nc");
    tu_call(env, "read", "{\"path\":\"f.txt\"}");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":4,\"end_line\":3,\"new\":\"d\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("f.txt"), "a\nins\nc\nd\n");
    r = tu_call(env, "edit", "{\"path\":\"f.txt\",\"start_line\":9,\"new\":\"x\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "do not exist");
}

TEST(tools_edit, crlf_files_and_copied_line_numbers)
{
    tool_env *env = tu_env();
    tu_file("w.txt", "one\r\ntwo\r\nthree\r\n");
    tu_result r = tu_call(env, "edit", "{\"path\":\"w.txt\",\"old\":\"one\\ntwo\\n\",\"new\":\"uno\\ndos\\n\"}");
    CHECK(!r.is_error);
    CHECK_STR_EQ(tu_content("w.txt"), "uno\r\ndos\r\nthree\r\n");
    tu_file("n.txt", "alpha\nbeta\ngamma\n");
    r = tu_call(env, "edit", "{\"path\":\"n.txt\",\"old\":\"2\\tbeta\\n3\\tgamma\",\"new\":\"2\\tBETA\\n3\\tgamma\"}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "line-number prefixes removed");
    CHECK_STR_EQ(tu_content("n.txt"), "alpha\nBETA\ngamma\n");
}

TEST(tools_edit, keeps_mode_and_is_atomic_on_failure)
{
    tool_env *env = tu_env();
    const char *p = tu_file("run.sh", "echo a\n");
    chmod(p, 0700);
    tu_result r = tu_call(env, "edit", "{\"path\":\"run.sh\",\"old\":\"a\",\"new\":\"b\"}");
    CHECK(!r.is_error);
    struct stat st;
    stat(p, &st);
    CHECK_EQ_INT(st.st_mode & 0777, 0700);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = { 100, 100 };
    CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    char *big = test_alloc(300);
    memset(big, 'q', 299);
    r = tu_call(env, "edit", test_printf("{\"path\":\"run.sh\",\"old\":\"b\",\"new\":\"%s\"}", big));
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "was not changed");
    CHECK_STR_EQ(tu_content("run.sh"), "echo b\n");
}

/* ---- list -------------------------------------------------------------------------------- */

TEST(tools_list, sorted_dirs_first_with_sizes_and_marks)
{
    tool_env *env = tu_env();
    tu_file("zeta.txt", "12345");
    tu_file("alpha/one", "1");
    tu_file("alpha/two", "2");
    tu_file("build/out.o", "o");
    tu_file(".gitignore", "build/\n");
    const char *s = tu_file("run.sh", "#!/bin/sh\n");
    chmod(s, 0755);
    CHECK(symlink("zeta.txt", tu_path("link")) == 0);
    tu_result r = tu_call(env, "list", "{}");
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, ".: 2 directories, 4 files\nalpha/  2 entries\nbuild/  [ignored]\n.gitignore  7B\n");
    CHECK_CONTAINS(r.text, "link@ -> zeta.txt\nrun.sh*  10B\nzeta.txt  5B\n");
    r = tu_call(env, "list", "{\"path\":\"alpha\",\"max_entries\":1}");
    CHECK_CONTAINS(r.text, "one  1B\n… 1 more entry not shown");
    r = tu_call(env, "list", "{\"path\":\"alpha\"}");
    CHECK_CONTAINS(r.text, "alpha: 0 directories, 2 files\n");
    tu_file("solo/only", "1");
    r = tu_call(env, "list", "{}");
    CHECK_CONTAINS(r.text, ".: 3 directories, 4 files\n");
    CHECK_CONTAINS(r.text, "solo/  1 entry\n");
    r = tu_call(env, "list", "{\"path\":\"zeta.txt\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "is a file");
    r = tu_call(env, "list", "{\"path\":\"nowhere\"}");
    CHECK(r.is_error);
    CHECK_CONTAINS(r.text, "does not exist");
}

TEST(tools_more, continues_a_web_page)
{
    web_require_browser();
    web_server fx;
    web_fixture_start(&fx);
    tool_env *env = tu_env();
    tu_file("a.txt", numbered_lines(900));
    tu_call(env, "read", "{\"path\":\"a.txt\"}");
    tool_call_ctx ctx = { .max_result_bytes = 16384 };
    tu_result r = tu_call_ctx(env, "visit_page", test_printf("{\"url\":\"%s/big\"}", fx.base), &ctx);
    CHECK_MSG(!r.is_error, "%s", r.text);
    CHECK_CONTAINS(r.text, "Title: Big");
    /* more now continues the page, not the earlier read */
    r = tu_call_ctx(env, "more", "{}", &ctx);
    CHECK(!r.is_error);
    CHECK_CONTAINS(r.text, "(continued, part 2)");
    CHECK(strlen(r.text) <= 16384);
    web_server_stop(&fx);
}

TEST(tools_more, pager_for_any_tool_output)
{
    tool_env *env = tu_env();
    strbuf out = {0};
    const char *text = "l1\nl2\nl3\nl4\nl5\n";
    tool_pager_show(env, "demo output", text, strlen(text), 2, 1 << 20, &out);
    CHECK_STR_EQ(sb_str(&out), "l1\nl2\n[2 of 5 lines shown; call more to see the next 2]\n");
    sb_free(&out);
    tu_result r = tu_call(env, "more", "{}");
    CHECK_STR_EQ(r.text, "[demo output, continued: lines 3-4 of 5]\nl3\nl4\n[1 more lines; call more to continue]\n");
    r = tu_call(env, "more", "{}");
    CHECK_STR_EQ(r.text, "[demo output, continued: lines 5-5 of 5]\nl5\n[end of output]\n");
    r = tu_call(env, "more", "{}");
    CHECK(r.is_error);
    /* a text that fits is shown whole and leaves nothing */
    tool_pager_show(env, "small", "a\nb", 3, 10, 1 << 20, &out);
    CHECK_STR_EQ(sb_str(&out), "a\nb\n");
    sb_free(&out);
    CHECK(tu_call(env, "more", "{}").is_error);
}
