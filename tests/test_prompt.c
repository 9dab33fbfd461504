/* `ds4cl -p`: the real binary over the script engine — text and
 * stream-json output, prompt sources, stdin left alone, exit codes,
 * SIGINT, and (with the tool registry) reading, editing and running bash
 * in a temporary workspace. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "opencl/cl_runtime.h"
#include "tests/agent_util.h"
#include "tests/dsml_util.h"
#include "tests/fwd_util.h"
#include "tests/test.h"
#include "tests/tools_util.h"

/* Runs ds4cl -p with a script; extra flags appended. Returns the status. */
static int run_prompt(char **out, const char *script, const char *flags)
{
    return test_runf(out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 %s", test_tmpdir(),
                     test_bindir(), agent_test_model(), script, flags);
}

/* Parses stream-json output: the objects in order (runner-owned array,
 * objects freed at exit is not needed: the test process ends). */
static struct json_object **parse_lines(const char *out, size_t *n)
{
    struct json_object **v = test_alloc(4096 * sizeof *v);
    *n = 0;
    for (const char *p = out; *p && *n < 4096;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len && *p == '{') {
            char *line = test_alloc(len);
            memcpy(line, p, len);
            struct json_object *o = json_tokener_parse(line);
            CHECK_MSG(o != NULL, "not JSON: %s", line);
            v[(*n)++] = o;
        }
        p = nl ? nl + 1 : p + len;
    }
    return v;
}

static const char *str_of(struct json_object *o, const char *key)
{
    struct json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

static struct json_object *find_type(struct json_object **v, size_t n, const char *type, size_t from)
{
    for (size_t i = from; i < n; i++)
        if (str_of(v[i], "type") && !strcmp(str_of(v[i], "type"), type)) return v[i];
    return NULL;
}

TEST(prompt, text_output_is_the_final_answer)
{
    const char *lines[] = { script_line("think</think>The answer is 42.", "\"expect\": \"what is it\""), NULL };
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p 'what is it' 2>/dev/null",
                       test_tmpdir(), test_bindir(), agent_test_model(), write_script(lines));
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "The answer is 42.\n");
    rc = run_prompt(&out, write_script(lines), "-p 'what is it'");
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "tokens read in");
}

static bool valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t k = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (!k) return false;
        for (size_t j = 1; j < k; j++)
            if ((p[j] & 0xc0) != 0x80) return false;
        if (k == 3 && p[0] == 0xed && p[1] >= 0xa0) return false; /* a surrogate */
        p += k;
    }
    return true;
}

TEST(prompt, stream_json_events_and_result)
{
    const char *lines[] = {
        script_line(test_printf("plan</think>Calling.%s", dsml_block("read", "path", "missing.txt", NULL)), NULL),
        /* a lone surrogate decodes to bytes that are not UTF-8 */
        "{\"assistant\": \"ok</think>Finished.\\ud800\"}",
        NULL,
    };
    char *out;
    int rc = run_prompt(&out, write_script(lines), "-p task --output-format stream-json --session s-123 2>/dev/null");
    CHECK_EQ_INT(rc, 0);
    CHECK(valid_utf8(out));
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    CHECK(n >= 5);
    for (size_t i = 0; i < n; i++) {
        struct json_object *sch;
        CHECK(json_object_object_get_ex(v[i], "schema", &sch) && json_object_get_int(sch) == 1);
        CHECK(str_of(v[i], "type") != NULL);
    }
    CHECK_STR_EQ(str_of(v[0], "type"), "init");
    CHECK_STR_EQ(str_of(v[0], "session_id"), "s-123");
    CHECK_STR_EQ(str_of(v[0], "backend"), "script");
    struct json_object *perm;
    CHECK(json_object_object_get_ex(v[0], "permissions", &perm));
    CHECK_STR_EQ(str_of(perm, "mode"), "deny");
    CHECK(find_type(v, n, "thinking", 0) != NULL);
    struct json_object *use = find_type(v, n, "tool_use", 0);
    CHECK(use != NULL);
    CHECK_STR_EQ(str_of(use, "name"), "read");
    struct json_object *input, *x;
    CHECK(json_object_object_get_ex(use, "input", &input) && json_object_object_get_ex(input, "path", &x));
    CHECK_STR_EQ(json_object_get_string(x), "missing.txt");
    struct json_object *res = find_type(v, n, "tool_result", 0), *iserr;
    CHECK(res != NULL);
    CHECK(json_object_object_get_ex(res, "is_error", &iserr) && json_object_get_boolean(iserr));
    struct json_object *r = v[n - 1];
    CHECK_STR_EQ(str_of(r, "type"), "result");
    CHECK_STR_EQ(str_of(r, "session_id"), "s-123");
    CHECK_STR_EQ(str_of(r, "stop_reason"), "done");
    CHECK_STR_EQ(str_of(r, "text"), "Finished.\xef\xbf\xbd");
    static const char *const fields[] = { "prefilled_tokens", "generated_tokens", "prefill_ms", "decode_ms", "exit_code" };
    for (size_t i = 0; i < 5; i++) {
        struct json_object *f;
        CHECK_MSG(json_object_object_get_ex(r, fields[i], &f), "result lacks %s", fields[i]);
    }
    struct json_object *f;
    json_object_object_get_ex(r, "prefilled_tokens", &f);
    CHECK(json_object_get_int64(f) > 100);
    json_object_object_get_ex(r, "generated_tokens", &f);
    CHECK(json_object_get_int64(f) > 5);
    json_object_object_get_ex(r, "exit_code", &f);
    CHECK_EQ_INT(json_object_get_int(f), 0);
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
}

/* Text streams a token at a time, however quickly events are read: never
 * a piece of a character (the tiny vocabulary spells "é" and "✓" in
 * bytes, a token each), never more events than tokens. */
TEST(prompt, stream_json_text_events_are_tokens_not_bytes)
{
    const char *lines[] = { script_line("ok</think>caf\u00e9 \u2713 cr\u00e8me br\u00fbl\u00e9e", "\"delay_ms\": 15"), NULL };
    char *out;
    int rc = run_prompt(&out, write_script(lines), "-p task --output-format stream-json 2>/dev/null");
    CHECK_EQ_INT(rc, 0);
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    strbuf text = { 0 };
    int events = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(str_of(v[i], "type"), "text")) continue;
        events++;
        sb_puts(&text, str_of(v[i], "text"));
    }
    CHECK_STR_EQ(sb_str(&text), "caf\xc3\xa9 \xe2\x9c\x93 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e");
    struct json_object *r = v[n - 1], *f;
    CHECK(json_object_object_get_ex(r, "generated_tokens", &f));
    CHECK_MSG(events > 1 && events <= json_object_get_int(f), "%d text events for %d tokens", events,
              json_object_get_int(f));
    /* whole milliseconds */
    static const char *const ms[] = { "prefill_ms", "decode_ms", "duration_ms" };
    for (size_t i = 0; i < 3; i++) {
        CHECK_MSG(json_object_object_get_ex(r, ms[i], &f) && json_object_is_type(f, json_type_int), "%s: %s", ms[i],
                  json_object_to_json_string(r));
    }
    sb_free(&text);
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
}

/* --output-format json: the result object alone, at the end. */
TEST(prompt, json_output_is_one_object)
{
    const char *lines[] = {
        script_line(test_printf("plan</think>Calling.%s", dsml_block("read", "path", "missing.txt", NULL)), NULL),
        script_line("ok</think>Finished.", NULL),
        NULL,
    };
    char *out;
    int rc = run_prompt(&out, write_script(lines), "-p task --output-format json --session s-json 2>&1");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    /* nothing but the object: a progress line would be a parse error */
    const char *start = strchr(out, '{');
    CHECK(start != NULL);
    CHECK_MSG(!strstr(out, "ds4cl: "), "not only the object:\n%s", out);
    struct json_object *r = json_tokener_parse(start), *f, *u;
    CHECK_MSG(r != NULL, "not one JSON object:\n%s", out);
    CHECK_STR_EQ(str_of(r, "type"), "result");
    CHECK_STR_EQ(str_of(r, "text"), "Finished.");
    CHECK_STR_EQ(str_of(r, "stop_reason"), "done");
    CHECK_STR_EQ(str_of(r, "session_id"), "s-json");
    CHECK(json_object_object_get_ex(r, "duration_ms", &f) && json_object_is_type(f, json_type_int));
    CHECK(json_object_object_get_ex(r, "usage", &u) && json_object_object_get_ex(u, "output_tokens", &f));
    CHECK(json_object_get_int(f) > 5);
    CHECK(json_object_object_get_ex(r, "tool_rounds", &f) && json_object_get_int(f) == 1);
    json_object_put(r);
}

/* The init event's sandbox object from a run with these flags. */
static void init_sandbox(const char *flags, bool *active, const char **status)
{
    char *out;
    const char *script = write_script((const char *[]){ script_line("ok</think>Done.", NULL), NULL });
    int rc = run_prompt(&out, script, test_printf("-p task --output-format stream-json %s 2>/dev/null", flags));
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    CHECK(n >= 1);
    CHECK_STR_EQ(str_of(v[0], "type"), "init");
    struct json_object *sb, *act;
    CHECK_MSG(json_object_object_get_ex(v[0], "sandbox", &sb), "init has no sandbox: %s", out);
    CHECK(json_object_object_get_ex(sb, "active", &act) && json_object_is_type(act, json_type_boolean));
    *active = json_object_get_boolean(act);
    *status = test_strdup(str_of(sb, "status") ? str_of(sb, "status") : "");
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
}

TEST(prompt, init_event_reports_the_sandbox)
{
    bool active;
    const char *status;
    init_sandbox("", &active, &status);
    /* either confined, or it says why not */
    if (active) CHECK_CONTAINS(status, "bash runs in a Landlock sandbox (ABI ");
    else CHECK_CONTAINS(status, "Landlock is not available on this kernel");
    init_sandbox("--no-sandbox", &active, &status);
    CHECK(!active);
    CHECK_CONTAINS(status, "the bash sandbox is off");
    /* a kernel without Landlock (this process and its children) */
    tu_hide_landlock();
    init_sandbox("", &active, &status);
    CHECK(!active);
    CHECK_CONTAINS(status, "Landlock is not available on this kernel (not built in)");
}

TEST(prompt, prompt_from_stdin_and_from_a_file)
{
    const char *lines[] = { script_line("</think>got it", "\"expect\": \"piped task text\""), NULL };
    char *out;
    int rc = test_runf(&out, "cd '%s' && printf 'piped task text' | '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p - 2>&1",
                       test_tmpdir(), test_bindir(), agent_test_model(), write_script(lines));
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "got it");
    const char *f = test_tmp_path("task.txt");
    test_write_file(f, "piped task text from a file", 27);
    rc = run_prompt(&out, write_script(lines), test_printf("--prompt-file '%s'", f));
    CHECK_EQ_INT(rc, 0);
    CHECK_CONTAINS(out, "got it");
}

TEST(prompt, stdin_is_left_alone_without_dash)
{
    const char *lines[] = { script_line("</think>quick", NULL), NULL };
    const char *fifo = test_tmp_path("stdin.fifo");
    char *out;
    /* stdin: a FIFO with a writer that never writes (the shell holds it
     * open read-write), so any read would block until the timeout */
    double t0 = test_now_ms();
    int rc = test_runf(&out, "cd '%s' && mkfifo '%s' && timeout 10 '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 "
                             "-p hi <>'%s' 2>&1",
                       test_tmpdir(), fifo, test_bindir(), agent_test_model(), write_script(lines), fifo);
    CHECK_MSG(rc == 0, "exit %d: %s", rc, out);
    CHECK_CONTAINS(out, "quick");
    CHECK(test_now_ms() - t0 < 5000);
}

TEST(prompt, exit_codes)
{
    char *out;
    /* usage: empty prompt, script engine without a model */
    int rc = run_prompt(&out, write_script((const char *[]){ script_line("x", NULL), NULL }), "-p '  '");
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "the prompt is empty");
    rc = test_runf(&out, "'%s/ds4cl' --engine script:/dev/null -p hi", test_bindir());
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "needs -m MODEL");
    /* error: a bad script */
    const char *bad = test_tmp_path("bad.jsonl");
    test_write_file(bad, "{nope\n", 6);
    rc = run_prompt(&out, bad, "-p hi");
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "script line 1");
    /* context exhausted: a reply longer than the room */
    strbuf big = { 0 };
    sb_puts(&big, "</think>");
    for (int i = 0; i < 8000; i++) sb_puts(&big, "word ");
    const char *lines[] = { script_line(sb_str(&big), NULL), NULL };
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p hi --output-format stream-json",
                   test_tmpdir(), test_bindir(), agent_test_model(), write_script(lines));
    CHECK_EQ_INT(rc, 4);
    CHECK_CONTAINS(out, "\"stop_reason\":\"context full\"");
    sb_free(&big);
}

/* A --ctx that the model or the agent cannot use is a usage error found
 * before any work, naming the flag and what would do. */
TEST(prompt, unusable_context_sizes_are_usage_errors)
{
    const char *script = write_script((const char *[]){ script_line("x", NULL), NULL });
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 2000 -p hi", test_tmpdir(),
                       test_bindir(), agent_test_model(), script);
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "--ctx 2000 is too small: the system prompt and the room the agent needs take at least ");
    /* the smallest it names works */
    const char *at = strstr(out, "at least ");
    CHECK(at != NULL);
    int need = atoi(at + 9);
    CHECK(need > 2000);
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx %d -p hi", test_tmpdir(),
                   test_bindir(), agent_test_model(), script, need);
    CHECK_MSG(rc == 0, "--ctx %d: exit %d:\n%s", need, rc, out);
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx %d -p hi", test_tmpdir(),
                   test_bindir(), agent_test_model(), script, need - 1);
    CHECK_MSG(rc == 2, "--ctx %d: exit %d:\n%s", need - 1, rc, out);
    /* the real engine knows the model's limit */
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --ctx 2000000000 -p hi", test_tmpdir(), test_bindir(),
                   agent_test_model());
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "--ctx 2000000000 is beyond the model's limit");
}

/* A flag's mistake is told before the model is touched: the message names
 * the flag, and the model (missing here, so any attempt to open it would
 * say so instead) is never mentioned. */
TEST(prompt, flags_are_checked_before_the_model_is_opened)
{
    const char *missing = test_tmp_path("no-model.gguf");
    static const char *const cases[][3] = {
        { "--rules /nonexistent-rules", "--rules: cannot read rules file /nonexistent-rules", "2" },
        { "--engine script:/nonexistent-script", "--engine script:/nonexistent-script: No such file", "2" },
        { "--device 7", "--device 7 picks an OpenCL device; add --backend opencl", "2" },
        { "-C /nonexistent-dir", "/nonexistent-dir", "2" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out;
        int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' -p hi %s", test_tmpdir(), test_bindir(), missing,
                           cases[i][0]);
        CHECK_MSG(rc == atoi(cases[i][2]), "'%s' exited %d:\n%s", cases[i][0], rc, out);
        CHECK_CONTAINS(out, cases[i][1]);
        CHECK_MSG(!strstr(out, missing), "'%s' opened the model first:\n%s", cases[i][0], out);
    }
    /* a broken rules file of the workspace is found before the load too */
    CHECK_EQ_INT(mkdir(test_tmp_path(".ds4cl"), 0755), 0);
    test_write_file(test_tmp_path(".ds4cl/rules"), "allow bash(\n", 12);
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' -p hi", test_tmpdir(), test_bindir(), missing);
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, ".ds4cl/rules");
    CHECK(!strstr(out, missing));
    CHECK_EQ_INT(remove(test_tmp_path(".ds4cl/rules")), 0);
    /* the context needs the tokenizer: refused before the weights are read */
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --ctx 2000 -p hi", test_tmpdir(), test_bindir(),
                   agent_test_model());
    CHECK_MSG(rc == 2, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "--ctx 2000 is too small");
    CHECK_MSG(!strstr(out, "loaded "), "the weights were read first:\n%s", out);
}

/* -p cannot take a message: the limit says how to go on from the shell. */
TEST(prompt, tool_round_limit_says_how_to_go_on)
{
    const char *call = dsml_block("read", "path", "missing.txt", NULL);
    const char *lines[] = {
        script_line(test_printf("one</think>%s", call), NULL),
        script_line(test_printf("two</think>%s", call), NULL),
        NULL,
    };
    char *out;
    int rc = run_prompt(&out, write_script(lines), "-p task --max-tool-rounds 1 --session s-rounds 2>&1");
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "Stopped after 1 tool round (the limit");
    CHECK_CONTAINS(out, "(--resume s-rounds) with a new prompt");
    CHECK_MSG(!strstr(out, "send a message"), "%s", out);
}

TEST(prompt, a_broken_model_file_is_named_once)
{
    const char *bad = test_tmp_path("bad.gguf");
    test_write_file(bad, "junk\n", 5);
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' -p hi 2>&1", test_tmpdir(), test_bindir(), bad);
    CHECK_MSG(rc == 1, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, test_printf("ds4cl: cannot load %s: truncated GGUF", bad));
    const char *first = strstr(out, bad);
    CHECK_MSG(!strstr(first + strlen(bad), bad), "the path twice:\n%s", out);
}

TEST(prompt, sigint_interrupts_cooperatively)
{
    strbuf slow = { 0 };
    sb_puts(&slow, "</think>");
    for (int i = 0; i < 500; i++) sb_puts(&slow, "word ");
    const char *lines[] = { script_line(sb_str(&slow), "\"delay_ms\": 10"), NULL };
    char *out;
    double t0 = test_now_ms();
    int rc = test_runf(&out, "cd '%s' && timeout --preserve-status -s INT 1 '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p hi "
                             "--output-format stream-json",
                       test_tmpdir(), test_bindir(), agent_test_model(), write_script(lines));
    CHECK_EQ_INT(rc, 3);
    CHECK(test_now_ms() - t0 < 3000);
    CHECK_CONTAINS(out, "\"stop_reason\":\"interrupted\"");
    CHECK_CONTAINS(out, "\"exit_code\":3");
    sb_free(&slow);
}

/* ---- with the real tools ----------------------------------------------------- */

TEST(prompt, reads_edits_and_runs_bash_in_a_workspace)
{
    const char *ws = test_tmp_path("ws");
    base_mkdir_p(ws, 0700);
    test_write_file(test_tmp_path("ws/hello.c"), "int main(void) { return 1; }\n", 29);
    const char *lines[] = {
        script_line(test_printf("Look first.</think>%s", dsml_block("read", "path", "hello.c", NULL)), NULL),
        script_line(test_printf("It returns 1.</think>%s",
                                dsml_block("edit", "path", "hello.c", "old", "return 1;", "new", "return 0;", NULL)),
                    "\"expect\": \"return 1;\""),
        script_line(test_printf("Check it.</think>%s", dsml_block("bash", "command", "cat hello.c; echo status=ok", NULL)),
                    NULL),
        script_line("Done.</think>hello.c now returns 0.", "\"expect\": \"status=ok\""),
        NULL,
    };
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p 'make main return 0' "
                             "--yes --output-format stream-json 2>&1",
                       ws, test_bindir(), agent_test_model(), write_script(lines));
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    CHECK(n > 0);
    struct json_object *tools;
    CHECK(json_object_object_get_ex(v[0], "tools", &tools));
    bool have = false;
    for (size_t i = 0; i < json_object_array_length(tools); i++)
        have |= !strcmp(json_object_get_string(json_object_array_get_idx(tools, i)), "edit");
    CHECK_MSG(have, "the edit tool is not offered");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    char *file = test_read_file(test_tmp_path("ws/hello.c"), NULL);
    CHECK_STR_EQ(file, "int main(void) { return 0; }\n");
    CHECK_STR_EQ(str_of(v[n - 1], "text"), "hello.c now returns 0.");
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
}

TEST(prompt, text_mode_prints_a_denial_whole)
{
    const char *ws = test_tmp_path("ws");
    base_mkdir_p(ws, 0700);
    const char *lines[] = {
        script_line(test_printf("Try it.</think>%s", dsml_block("bash", "command", "echo hi > out.txt", NULL)), NULL),
        script_line("Not allowed.</think>I could not run it.", "\"expect\": \"denied by policy\""),
        NULL,
    };
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 --no-sandbox -p 'write out.txt' 2>&1",
                       ws, test_bindir(), agent_test_model(), write_script(lines));
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    const char *at = strstr(out, "ds4cl: bash denied: ");
    CHECK_MSG(at != NULL, "%s", out);
    /* the way to allow it, to the end of the sentence */
    const char *eol = strchr(at, '\n');
    CHECK(eol != NULL);
    char *line = test_printf("%.*s", (int)(eol - at), at);
    CHECK_CONTAINS(line, "allow it with --yes, --allow bash, or a rule such as");
    CHECK_CONTAINS(line, "in .ds4cl/rules.");
}

/* ---- the real engine ----------------------------------------------------------------- */

/* One task on the golden tiny model; extra: more options (and the
 * environment before the command). Returns the result event's prefilled
 * token count. */
static int64_t tiny_model_task(const char *backend, const char *env, const char *extra, const char *task)
{
    char *out;
    int rc = test_runf(&out, "cd '%s' && %s '%s/ds4cl' -m '%s' --backend %s --ctx 16384 --nothink --seed 3 %s "
                             "-p '%s' --output-format stream-json 2>&1",
                       test_tmpdir(), env, test_bindir(), agent_test_model(), backend, extra, task);
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    CHECK(n >= 2);
    struct json_object *r = v[n - 1], *f;
    CHECK_STR_EQ(str_of(r, "type"), "result");
    CHECK(json_object_object_get_ex(r, "generated_tokens", &f));
    int64_t generated = json_object_get_int64(f);
    CHECK(generated >= 1 && generated <= 12);
    /* the real engine's tokens, read as fast as they come: at most one
     * text or reasoning event each */
    int64_t streamed = 0;
    for (size_t i = 1; i + 1 < n; i++)
        streamed += !strcmp(str_of(v[i], "type"), "text") || !strcmp(str_of(v[i], "type"), "thinking");
    CHECK_MSG(streamed <= generated, "%lld events for %lld tokens:\n%s", (long long)streamed, (long long)generated, out);
    CHECK(json_object_object_get_ex(r, "prefilled_tokens", &f));
    int64_t prefilled = json_object_get_int64(f);
    CHECK_STR_EQ(str_of(v[0], "backend"), backend);
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
    return prefilled;
}

TEST(prompt, tiny_model_on_the_cpu_engine)
{
    CHECK(tiny_model_task("cpu", "", "-n 12", "Say hello.") > 100);
}

/* Name, inode and modification time of every cached OpenCL program: a
 * program built again is written anew (temp file + rename). */
static char *program_cache_listing(int *n)
{
    char *out;
    CHECK_EQ_INT(test_runf(&out, "cd '%s' && stat -c '%%n %%i %%Y' *.bin 2>&1 | sort",
                           test_tmp_path(".xdg/cache/ds4cl/cl")), 0);
    *n = 0;
    for (const char *p = out; *p; p++) *n += *p == '\n';
    return out;
}

/* By device index; then the session resumes on the device the
 * environment names by a piece of its name, and that second start builds
 * no program (all come from the binary cache). A device that does not
 * exist is refused with its name. */
TEST(prompt, tiny_model_on_the_opencl_engine)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    CHECK(tiny_model_task("opencl", "", "--device 0 -n 12", "Say hello.") > 100);
    int programs, again;
    char *before = program_cache_listing(&programs);
    CHECK_MSG(programs >= 5, "%d programs cached:\n%s", programs, before);
    clrt_device *d;
    int nd;
    ds4_error err = { "" };
    CHECK_MSG(clrt_devices(&d, &nd, &err) == 0, "%s", err.msg);
    char piece[8];
    snprintf(piece, sizeof piece, "%.7s", d[0].name);
    free(d);
    for (char *p = piece; *p; p++)
        if (*p == '\'' || *p == ' ') *p = 0;
    int64_t prefilled = tiny_model_task("opencl", test_printf("DS4CL_DEVICE='%s'", piece), "--continue -n 2", "Again.");
    CHECK_MSG(prefilled > 0 && prefilled < 100, "the resumed session read %lld tokens", (long long)prefilled);
    char *after = program_cache_listing(&again);
    CHECK_STR_EQ(after, before);

    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --backend opencl --device no-such-device-xyz -p hi 2>&1",
                       test_tmpdir(), test_bindir(), agent_test_model());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no OpenCL device name contains \"no-such-device-xyz\"");
    CHECK_CONTAINS(out, "--list-devices");
}

TEST(prompt, stream_json_compaction_and_error_events)
{
    /* a read that brings the conversation past the soft limit: the
     * context is compacted before the next round (the script's second
     * reply is the summary) */
    const char *ws = test_tmp_path("ws");
    base_mkdir_p(ws, 0700);
    strbuf big = { 0 };
    for (int i = 1; i <= 1200; i++) sb_printf(&big, "row %d\n", i);
    test_write_file(test_tmp_path("ws/big.txt"), big.s, big.len);
    sb_free(&big);
    const char *lines[] = {
        script_line(test_printf("r</think>%s", dsml_block("read", "path", "big.txt", "max_lines", "=300", NULL)), NULL),
        script_line("SUMMARY: the user wants big.txt read.", NULL),
        script_line("ok</think>Read the first 300 lines.", NULL),
        NULL,
    };
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 -p 'read big.txt' "
                             "--output-format stream-json 2>/dev/null",
                       ws, test_bindir(), agent_test_model(), write_script(lines));
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    size_t n;
    struct json_object **v = parse_lines(out, &n);
    struct json_object *c = find_type(v, n, "compaction", 0);
    CHECK_MSG(c != NULL, "no compaction event:\n%s", out);
    CHECK_STR_EQ(str_of(c, "summary"), "SUMMARY: the user wants big.txt read.");
    struct json_object *r = v[n - 1], *f;
    CHECK_STR_EQ(str_of(r, "type"), "result");
    CHECK(json_object_object_get_ex(r, "compactions", &f) && json_object_get_int(f) >= 1);
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);

    /* a reply longer than the room left: an error event, then the result */
    strbuf longer = { 0 };
    sb_puts(&longer, "</think>");
    for (int i = 0; i < 8000; i++) sb_puts(&longer, "word ");
    const char *lines2[] = { script_line(sb_str(&longer), NULL), NULL };
    rc = run_prompt(&out, write_script(lines2), "-p hi --output-format stream-json 2>/dev/null");
    CHECK_EQ_INT(rc, 4);
    v = parse_lines(out, &n);
    struct json_object *e = find_type(v, n, "error", 0);
    CHECK_MSG(e != NULL, "no error event:\n%.2000s", out);
    CHECK_CONTAINS(str_of(e, "message"), "the context is full");
    CHECK_STR_EQ(str_of(v[n - 1], "type"), "result");
    CHECK_STR_EQ(str_of(v[n - 1], "error"), str_of(e, "message"));
    for (size_t i = 0; i < n; i++) json_object_put(v[i]);
    sb_free(&longer);
}

/* `make demo`: a generated tiny model, ds4cl -p on the CPU engine, then the
 * scripted session that fixes and runs hello.c with the real tools. */
TEST(prompt, demo_runs_end_to_end)
{
    if (!test_have_program("cc")) SKIP("no C compiler for the demo's hello.c");
    char *out;
    /* its caches in the test's directory too (the vocabulary may then
     * not be fetched: the demo falls back to its own) */
    int rc = test_runf(&out, "cd '%s' && TMPDIR='%s' XDG_CACHE_HOME='%s/cache' NO_COLOR=1 sh build-aux/demo.sh '%s' 2>&1",
                       test_root(), test_tmpdir(), test_tmpdir(), test_bindir());
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "== 2. ds4cl -p on it, with the real CPU engine");
    CHECK_CONTAINS(out, "tokens read in");
    CHECK(strstr(out, "(skipped:") == NULL);
    CHECK_CONTAINS(out, "ds4cl: edit done: Edited hello.c");
    CHECK_CONTAINS(out, "puts(\"Hello, world!\");");
    CHECK_CONTAINS(out, "$ ./hello\nHello, world!\n");
    /* its sessions go away with it: none is offered to resume */
    CHECK_MSG(!strstr(out, "continue it with --resume"), "%s", out);
    CHECK_CONTAINS(out, "removed with the demo");
}

/* A parameter name the tool does not have (search's "pattern" for its
 * "query"): the mask would turn it into another name, so the call ends
 * with an error naming the tool, the name begun and the ones it takes,
 * which the model reads before it tries again. */
TEST(prompt, a_wrong_parameter_name_is_named)
{
    const char *call = "</think><" D "tool_calls>\n<" D "invoke name=\"search\">\n<" D
                       "parameter name=\"pattern\" string=\"true\">foo</" D "parameter>\n</" D "invoke>\n</"
                       D "tool_calls>";
    const char *lines[] = { script_line(call, NULL), script_line("</think>retried", "\"expect\": \"search takes\""),
                            NULL };
    char *out;
    int rc = run_prompt(&out, write_script(lines), "-p 'find foo' --output-format stream-json 2>/dev/null");
    CHECK_MSG(rc == 0, "exit %d:\n%s", rc, out);
    CHECK_CONTAINS(out, "search has no parameter \\\"patt");
    CHECK_CONTAINS(out, "query (required)");
    CHECK_MSG(!strstr(out, "incomplete DSML tool call"), "%s", out);
    /* the model was told, and answered */
    CHECK_CONTAINS(out, "\"text\":\"retried\"");
}
