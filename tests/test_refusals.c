/* Runs of `ds4cl -p` refused before they start: the result object names
 * the real cause with a stop_reason the README lists and no session that
 * was never created, and a memory refusal suggests only a context the
 * agent accepts, with one exit status for one failure. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tests/agent_util.h"
#include "tests/fwd_util.h"
#include "tests/test.h"

/* The last line of out that parses as a JSON object (the result). */
static struct json_object *last_object(const char *out)
{
    struct json_object *last = NULL;
    for (const char *p = out; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len && *p == '{') {
            char *line = test_alloc(len + 1);
            memcpy(line, p, len);
            struct json_object *o = json_tokener_parse(line);
            if (o) last = o;
        }
        p = nl ? nl + 1 : p + len;
    }
    CHECK_MSG(last != NULL, "no JSON object in:\n%s", out);
    return last;
}

static const char *str_of(struct json_object *o, const char *key)
{
    struct json_object *v;
    return json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : NULL;
}

/* The stop reasons the README's result row lists. */
static bool readme_lists(const char *reason)
{
    size_t n;
    char path[4096];
    snprintf(path, sizeof path, "%s/README.md", test_root());
    char *readme = file_read_all(path, &n);
    CHECK_MSG(readme != NULL, "README.md not readable from %s", test_root());
    const char *row = strstr(readme, "| `result` |");
    CHECK(row != NULL);
    const char *end = strchr(row, '\n');
    char want[64];
    snprintf(want, sizeof want, "`%s`", reason);
    const char *at = strstr(row, want);
    bool listed = at && at < end;
    free(readme);
    return listed;
}

/* The checks of one refused run's result: the cause, a listed stop_reason,
 * and session_id only when the run was refused on a saved session (sid),
 * never one the run would have created. */
static void check_refused_on(const char *out, int rc, int want_rc, const char *cause, const char *sid)
{
    CHECK_MSG(rc == want_rc, "exit %d, not %d:\n%s", rc, want_rc, out);
    struct json_object *r = last_object(out);
    CHECK_STR_EQ(str_of(r, "type"), "result");
    const char *reason = str_of(r, "stop_reason");
    CHECK(reason != NULL);
    CHECK_MSG(readme_lists(reason), "stop_reason \"%s\" is not in the README's list", reason);
    CHECK_CONTAINS(str_of(r, "error"), cause);
    CHECK_MSG(!strstr(str_of(r, "error"), "could not be opened"), "a wrong cause:\n%s", out);
    struct json_object *v;
    if (sid) CHECK_STR_EQ(str_of(r, "session_id"), sid);
    else CHECK_MSG(!json_object_object_get_ex(r, "session_id", &v), "a session_id for a run that never was:\n%s", out);
    struct json_object *code;
    CHECK(json_object_object_get_ex(r, "exit_code", &code));
    CHECK_EQ_INT(json_object_get_int(code), want_rc);
}

static void check_refused(const char *out, int rc, int want_rc, const char *cause)
{
    check_refused_on(out, rc, want_rc, cause, NULL);
}

TEST(refusals, json_result_names_the_real_cause)
{
    const char *model = agent_test_model();
    static const char *const formats[] = { "json", "stream-json" };
    for (size_t i = 0; i < 2; i++) {
        char *out;
        /* a --ctx the agent cannot use: found on the tokenizer, not a model fault */
        int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --ctx 2000 -p x --output-format %s 2>/dev/null",
                           test_tmpdir(), test_bindir(), model, formats[i]);
        check_refused(out, rc, 2, "--ctx 2000 is too small");
        /* a setting refused before the model: not the workspace's fault */
        rc = test_runf(&out, "cd '%s' && DS4CL_DEVICE_MEM=lots '%s/ds4cl' -m '%s' -p x --output-format %s 2>/dev/null",
                       test_tmpdir(), test_bindir(), model, formats[i]);
        check_refused(out, rc, 2, "DS4CL_DEVICE_MEM=lots");
        CHECK_MSG(!strstr(out, "workspace"), "a wrong cause:\n%s", out);
        /* no model file: said so, not that a model failed to open */
        rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' -p x --output-format %s 2>/dev/null", test_tmpdir(),
                       test_bindir(), test_tmp_path("missing.gguf"), formats[i]);
        check_refused(out, rc, 1, "no model file to open");
    }
}

/* A session asked for that does not exist is not reported; a saved one the
 * run was refused on is. */
TEST(refusals, session_id_only_for_a_saved_session)
{
    const char *model = agent_test_model();
    const char *script = write_script((const char *[]){ script_line("t</think>Done.", NULL), NULL });
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 --resume nosuch -p x "
                             "--output-format json 2>/dev/null", test_tmpdir(), test_bindir(), model, script);
    check_refused(out, rc, 1, "no session \"nosuch\"");
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 --session kept -p x 2>&1",
                   test_tmpdir(), test_bindir(), model, script);
    CHECK_MSG(rc == 0, "%s", out);
    rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 2000 --resume kept -p x "
                         "--output-format json 2>/dev/null", test_tmpdir(), test_bindir(), model, script);
    check_refused_on(out, rc, 2, "--ctx 2000 is too small", "kept");
}

/* The least context the agent accepts here, from the refusal of a smaller
 * one on the CPU engine. */
static int agent_least(const char *model)
{
    char *out;
    test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --ctx 300 -p x", test_tmpdir(), test_bindir(), model);
    const char *at = strstr(out, "take at least ");
    CHECK_MSG(at != NULL, "%s", out);
    return atoi(at + strlen("take at least "));
}

/* Every "--ctx N" a message suggests is at least `least`. */
static void check_suggestions(const char *out, int least)
{
    for (const char *p = strstr(out, "(--ctx "); p; p = strstr(p + 1, "(--ctx ")) {
        int n = atoi(p + 7);
        CHECK_MSG(n >= least, "suggests --ctx %d, below the agent's least of %d:\n%s", n, least, out);
    }
    const char *fit = strstr(out, "largest context that fits is ");
    if (fit) CHECK_MSG(atoi(fit + 29) >= least, "suggests a context below %d:\n%s", least, out);
}

/* Device memory that holds the weights and a few hundred tokens, but not
 * the agent's least: the refusal says no usable context fits, and exits
 * as the one for a device that holds no context at all. */
TEST(refusals, device_memory_refusal_suggests_a_usable_context)
{
    fwd_require_backend(DS4_BACKEND_OPENCL);
    const char *model = agent_test_model();
    int least = agent_least(model);
    CHECK(least > 1000);
    char *out;
    int rc_small = test_runf(&out, "cd '%s' && DS4CL_DEVICE_MEM=100M '%s/ds4cl' -m '%s' --backend opencl --ctx 200000 "
                                   "-p x", test_tmpdir(), test_bindir(), model);
    CHECK_CONTAINS(out, "cannot hold its part of the model");
    check_suggestions(out, least);
    CHECK_CONTAINS(out, "no context of the ");
    int rc_none = test_runf(&out, "cd '%s' && DS4CL_DEVICE_MEM=20M '%s/ds4cl' -m '%s' --backend opencl --ctx 200000 "
                                  "-p x", test_tmpdir(), test_bindir(), model);
    CHECK_CONTAINS(out, "cannot hold its part of the model");
    CHECK_MSG(rc_small == rc_none, "the same failure exits %d and %d", rc_small, rc_none);
    CHECK_EQ_INT(rc_none, 1);
    /* a --ctx below the least: the least named, and that it does not fit */
    int rc = test_runf(&out, "cd '%s' && DS4CL_DEVICE_MEM=100M '%s/ds4cl' -m '%s' --backend opencl --ctx 2000 -p x",
                       test_tmpdir(), test_bindir(), model);
    CHECK_EQ_INT(rc, 1);
    char want[96];
    snprintf(want, sizeof want, "take at least %d tokens, and that does not fit either", least);
    CHECK_CONTAINS(out, want);
    check_suggestions(out, least);
}
