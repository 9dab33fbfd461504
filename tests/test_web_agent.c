/* The web tools through the real `ds4cl -p` binary (script engine, real
 * headless Chromium, the local page fixture): the permission check comes
 * before any browser starts, an allowed visit returns the page, the
 * browser's throwaway profile lives in the session's directory, Ctrl+C in
 * the middle of a page that never finishes loading ends the call at once,
 * and no browser process outlives the agent, even one killed with SIGKILL. */
#include <glob.h>
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

/* A --browser that notes each start (its arguments) in MARK, then runs
 * the real one. */
static const char *browser_wrapper(const char *mark)
{
    ds4_error err = { "" };
    char *exe = cdp_find_browser(NULL, &err);
    CHECK_MSG(exe != NULL, "%s", err.msg);
    const char *path = test_tmp_path("browser.sh");
    const char *body = test_printf("#!/bin/sh\necho \"$@\" >> '%s'\nexec '%s' \"$@\"\n", mark, exe);
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

/* The session directory of ID (runner-owned). */
static const char *session_dir(const char *id)
{
    char root[4096];
    CHECK(sessions_dir(root, sizeof root) != NULL);
    return test_printf("%s/%s", root, id);
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
    rc = test_runf(&out, "%s 2>&1", run_cmd(script, browser, "--allow visit_page --session web1"));
    CHECK_MSG(rc == 0, "%s", out);
    tr = tool_result_line(out);
    CHECK_MSG(tr != NULL, "%s", out);
    CHECK_CONTAINS(tr, "\"is_error\":false");
    CHECK_CONTAINS(tr, "Title: Fixture & Static");
    CHECK_CONTAINS(tr, "# Static heading");
    CHECK_CONTAINS(tr, "untrusted data from the web");
    /* its profile was a throwaway one in the session's directory */
    char *args = file_read_all(mark, NULL);
    CHECK(args != NULL);
    const char *where = test_printf("--user-data-dir=%s/run/ds4cl-browser-", session_dir("web1"));
    CHECK_MSG(strstr(args, where) != NULL, "browser arguments: %s", args);
    free(args);
    /* the agent has exited: so has every browser process, and the
     * profile is gone */
    CHECK_EQ_INT(web_count_processes(test_tmpdir()), 0);
    CHECK(access(test_printf("%s/run", session_dir("web1")), F_OK) != 0);
    CHECK(access(test_printf("%s/journal", session_dir("web1")), F_OK) == 0);
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
    /* the page's own limits are 10 and 20 s, of which at most the 2.5 s
     * before the interrupt had passed: the call ended on the interrupt,
     * not on a timeout (with room for a crowded machine) */
    CHECK_MSG(t_result > 0 && t_result - t_int < 5000, "the tool result came %.0f ms after Ctrl+C", t_result - t_int);
    CHECK_MSG(t_exit - t_int < 5000, "ds4cl exited %.0f ms after Ctrl+C", t_exit - t_int);
    CHECK_EQ_INT(web_count_processes(test_tmpdir()), 0);
    sb_free(&c.text);
    web_server_stop(&fx);
}

/* True once a browser under dir has opened its DevTools port. */
static bool browser_up(const char *dir)
{
    glob_t g;
    bool up = glob(test_printf("%s/ds4cl-browser-*/profile/DevToolsActivePort", dir), 0, NULL, &g) == 0;
    if (up) globfree(&g);
    return up;
}

TEST(web_agent, sigkill_leaves_no_browser_and_the_next_run_clears_its_profile)
{
    web_require_browser();
    web_server fx;
    web_fixture_start(&fx);
    const char *mark = test_tmp_path("starts");
    const char *browser = browser_wrapper(mark);
    const char *script = visit_script(test_printf("%s/hang", fx.base));
    child_proc c;
    child_start(&c, run_cmd(script, browser, "--allow visit_page --session killed"));
    double t0 = test_now_ms();
    while (!c.eof && access(mark, F_OK) != 0 && test_now_ms() - t0 < 20000) child_pump(&c, 20);
    CHECK_MSG(access(mark, F_OK) == 0, "the browser never started: %s", sb_str(&c.text));
    const char *run = test_printf("%s/run", session_dir("killed"));
    /* until the browser runs from its profile in the session and loads the page */
    while (!browser_up(run) && test_now_ms() - t0 < 20000) child_pump(&c, 20);
    CHECK_MSG(browser_up(run), "no browser runs from %s", run);
    child_pump(&c, 500);
    CHECK(!c.eof);
    int procs = web_count_processes(run);
    CHECK_MSG(procs >= 3, "%d browser processes", procs);
    CHECK_EQ_INT(child_finish(&c, SIGKILL), 128 + SIGKILL);
    sb_free(&c.text);
    /* the browser goes with the agent */
    double deadline = test_now_ms() + 5000;
    while (web_count_processes(run) > 0 && test_now_ms() < deadline) usleep(20 * 1000);
    CHECK_EQ_INT(web_count_processes(run), 0);
    CHECK(access(run, F_OK) == 0); /* nobody was left to remove it */

    /* the session's next run clears what the killed one left */
    const char *lines[] = { script_line("z</think>Back.", NULL), NULL };
    char *out;
    int rc = test_runf(&out, "cd '%s' && '%s/ds4cl' -m '%s' --engine 'script:%s' -p again --resume killed 2>&1",
                       test_tmpdir(), test_bindir(), agent_test_model(), write_script(lines));
    CHECK_MSG(rc == 0, "%s", out);
    CHECK_MSG(access(run, F_OK) != 0, "%s is still there", run);
    CHECK_STR_EQ(journal_users("killed"), "read the page|again");
    web_server_stop(&fx);
}
