/* The web tools through the real `ds4cl -p` binary (script engine, real
 * headless Chromium, the local page fixture): the permission check comes
 * before any browser starts, an allowed visit returns the page, Ctrl+C in
 * the middle of a page that never finishes loading ends the call at once,
 * and no browser process outlives the agent. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/sessions_util.h"
#include "tests/test.h"
#include "tests/web_util.h"
#include "tools/cdp.h"

/* A --browser that notes each start in MARK, then runs the real one. */
static const char *browser_wrapper(const char *mark)
{
    char err[512];
    char *exe = cdp_find_browser(NULL, err, sizeof err);
    CHECK_MSG(exe != NULL, "%s", err);
    const char *path = test_tmp_path("browser.sh");
    const char *body = test_printf("#!/bin/sh\necho started >> '%s'\nexec '%s' \"$@\"\n", mark, exe);
    free(exe);
    test_write_file(path, body, strlen(body));
    CHECK(chmod(path, 0755) == 0);
    return path;
}

/* One visit_page call, then an answer. */
static const char *visit_script(const char *url)
{
    const char *lines[] = {
        script_line(test_printf("v</think>Reading it.%s", dsml_block("visit_page", "url", url, NULL)), NULL),
        script_line("w</think>Read.", NULL),
        NULL,
    };
    return write_script(lines);
}

static const char *run_cmd(const char *script, const char *browser, const char *flags)
{
    return test_printf("cd '%s' && exec env TMPDIR='%s' '%s/ds4cl' -m '%s' --engine 'script:%s' --ctx 16384 "
                       "--browser '%s' --output-format stream-json -p 'read the page' %s",
                       test_tmpdir(), test_tmpdir(), test_bindir(), agent_test_model(), script, browser, flags);
}

/* The first tool_result line of stream-json output (runner-owned). */
static const char *tool_result_line(const char *out)
{
    const char *p = strstr(out, "{\"type\":\"tool_result\"");
    if (!p) return NULL;
    size_t n = strcspn(p, "\n");
    char *line = test_alloc(n + 1);
    memcpy(line, p, n);
    return line;
}

TEST(web_agent, asks_before_starting_a_browser_and_leaves_none_behind)
{
    web_require_browser();
    web_server fx;
    web_fixture_start(&fx);
    const char *mark = test_tmp_path("starts");
    const char *browser = browser_wrapper(mark);
    const char *script = visit_script(test_printf("%s/static", fx.base));
    char *out;

    /* not allowed: refused before anything starts */
    int rc = test_runf(&out, "%s 2>&1", run_cmd(script, browser, ""));
    CHECK_MSG(rc == 0, "%s", out);
    const char *tr = tool_result_line(out);
    CHECK_MSG(tr != NULL, "%s", out);
    CHECK_CONTAINS(tr, "\"denied\":true");
    CHECK_CONTAINS(tr, "needs approval");
    CHECK_MSG(access(mark, F_OK) != 0, "a browser was started for a refused call");

    /* allowed: the page comes back as untrusted text */
    rc = test_runf(&out, "%s 2>&1", run_cmd(script, browser, "--allow visit_page"));
    CHECK_MSG(rc == 0, "%s", out);
    tr = tool_result_line(out);
    CHECK_MSG(tr != NULL, "%s", out);
    CHECK_CONTAINS(tr, "\"is_error\":false");
    CHECK_CONTAINS(tr, "Title: Fixture & Static");
    CHECK_CONTAINS(tr, "# Static heading");
    CHECK_CONTAINS(tr, "untrusted data from the web");
    CHECK_MSG(access(mark, F_OK) == 0, "the browser wrapper never ran");
    /* the agent has exited: so has every browser process */
    CHECK_EQ_INT(web_count_processes(test_tmpdir()), 0);
    web_server_stop(&fx);
}

TEST(web_agent, ctrl_c_ends_a_page_that_never_loads)
{
    web_require_browser();
    web_server fx;
    web_fixture_start(&fx);
    const char *mark = test_tmp_path("starts");
    const char *browser = browser_wrapper(mark);
    const char *script = visit_script(test_printf("%s/hang", fx.base));
    child_proc c;
    child_start(&c, run_cmd(script, browser, "--allow visit_page"));
    /* until the browser is up and the page is loading (it would wait 10 s
     * for the load, 20 s for the browser) */
    double t0 = test_now_ms();
    while (!c.eof && access(mark, F_OK) != 0 && test_now_ms() - t0 < 20000) child_pump(&c, 20);
    CHECK_MSG(access(mark, F_OK) == 0, "the browser never started: %s", sb_str(&c.text));
    child_pump(&c, 2500);
    CHECK_MSG(!c.eof, "ds4cl ended before the interrupt: %s", sb_str(&c.text));
    CHECK(strstr(sb_str(&c.text), "\"type\":\"tool_result\"") == NULL);
    double t_int = test_now_ms();
    kill(c.pid, SIGINT);
    double t_result = 0;
    while (!c.eof && test_now_ms() - t_int < 15000) {
        child_pump(&c, 5);
        if (!t_result && strstr(sb_str(&c.text), "\"type\":\"tool_result\"")) t_result = test_now_ms();
    }
    int rc = child_finish(&c, 0);
    double t_exit = test_now_ms();
    const char *out = sb_str(&c.text);
    printf("Ctrl+C to tool result: %.0f ms, to exit: %.0f ms\n", t_result ? t_result - t_int : -1.0, t_exit - t_int);
    CHECK_EQ_INT(rc, 3); /* interrupted */
    const char *tr = tool_result_line(out);
    CHECK_MSG(tr != NULL, "%s", out);
    CHECK_CONTAINS(tr, "visit_page cancelled");
    CHECK_CONTAINS(out, "\"stop_reason\":\"interrupted\"");
    /* the page's own limits are 10 and 20 s: the call ended on the
     * interrupt, not on a timeout */
    CHECK_MSG(t_result - t_int < 2000, "the tool result came %.0f ms after Ctrl+C", t_result - t_int);
    CHECK_MSG(t_exit - t_int < 5000, "ds4cl exited %.0f ms after Ctrl+C", t_exit - t_int);
    CHECK_EQ_INT(web_count_processes(test_tmpdir()), 0);
    sb_free(&c.text);
    web_server_stop(&fx);
}
