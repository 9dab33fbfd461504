/* The interactive UI end to end: the real ds4cl binary on a real terminal
 * (a private tmux server), driven by keys, over the script engine and
 * over the tiny model on the CPU engine. Every wait is a bounded poll of
 * the screen, so a loaded machine only makes the tests slower. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/agent_util.h"
#include "tests/test.h"
#include "tests/tmux_util.h"

#define WAIT_MS 30000

/* ds4cl on the script engine in a 100x30 terminal, ready for input. */
static void start(tmux_t *t, const char *const *lines, const char *flags, const char *env)
{
    const char *model = agent_test_model();
    const char *script = write_script(lines);
    tmux_start(t, 100, 30, env);
    tmux_run_ds4cl(t, test_printf("-m '%s' --engine 'script:%s' --ctx 16384 %s", model, script, flags ? flags : ""));
    tmux_wait(t, "ready", WAIT_MS);
    tmux_wait(t, "Ask anything", WAIT_MS);
}

static void quit_and_check(tmux_t *t)
{
    tmux_keys(t, "C-d");
    tmux_wait(t, "EXIT=0", WAIT_MS);
    tmux_check_terminal_restored(t);
    tmux_check_sanitizers();
    tmux_kill(t);
}

/* The input line: the last one starting with the prompt (a hint may
 * follow it), runner-owned. */
static const char *input_line(tmux_t *t)
{
    const char *s = tmux_screen(t);
    const char *found = NULL;
    for (const char *p = s; p && *p;) {
        if (!strncmp(p, "\xe2\x80\xba ", 4)) found = p;
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!found) return "";
    size_t n = strcspn(found, "\n");
    while (n && found[n - 1] == ' ') n--;
    return test_printf("%.*s", (int)n, found);
}

/* Waits until text shows in the transcript (not only in the input line). */
static void wait_in_transcript(tmux_t *t, const char *text)
{
    double until = test_now_ms() + WAIT_MS;
    for (;;) {
        const char *s = tmux_screen(t);
        const char *in = strstr(s, input_line(t));
        for (const char *p = strstr(s, text); p; p = strstr(p + 1, text))
            if (!in || p < in) return;
        if (test_now_ms() > until) FAIL("\"%s\" did not appear in the transcript; the screen:\n%s", text, s);
        usleep(50000);
    }
}

/* Any SGR sequence that sets a colour (not the defaults 39 and 49). */
static bool has_colour(const char *s)
{
    for (const char *p = strstr(s, "\033["); p; p = strstr(p + 1, "\033[")) {
        const char *q = p + 2;
        while (*q && *q != 'm' && (*q == ';' || (*q >= '0' && *q <= '9'))) {
            int v = atoi(q);
            if ((v >= 30 && v <= 38) || (v >= 40 && v <= 48) || (v >= 90 && v <= 97) || (v >= 100 && v <= 107))
                return true;
            while (*q >= '0' && *q <= '9') q++;
            if (*q == ';') q++;
        }
    }
    return false;
}

static void send(tmux_t *t, const char *text)
{
    tmux_type(t, text);
    tmux_keys(t, "Enter");
}

/* The answer is drawn before the turn has ended (the session is saved
 * after it), and commands that restart the agent refuse while it is busy:
 * wait for the status bar to say so before sending one. */
static void wait_idle_status(tmux_t *t)
{
    tmux_wait(t, "\xe2\x97\x8f ready", WAIT_MS);
}

TEST(ui_tmux, startup_screen_and_a_clean_quit)
{
    const char *lines[] = { NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    const char *s = tmux_screen(&t);
    CHECK_CONTAINS(s, "ds4cl 0.1.0");
    CHECK_CONTAINS(s, "context 16384 tokens");
    CHECK_CONTAINS(s, "Session ");
    CHECK_CONTAINS(s, "/help lists commands");
    CHECK_CONTAINS(s, "ctx ");
    CHECK_CONTAINS(s, "script");
    CHECK(tmux_alternate_screen(&t));
    quit_and_check(&t);
}

TEST(ui_tmux, typing_and_streaming_markdown)
{
    const char *lines[] = {
        script_line("Weighing it.\nSecond thought.</think>Here is **bold**, *italic* and `code`.\n\n```c\nint x = "
                    "*p;\n```\n\n- first\n- second",
                    "\"delay_ms\": 15, \"expect\": \"explain it\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    tmux_type(&t, "explain \xe6\x97\xa5\xe6\x9c\xac it");
    tmux_wait(&t, "explain \xe6\x97\xa5\xe6\x9c\xac it", WAIT_MS);
    /* editing: back over "it", remove the CJK word, retype */
    tmux_keys(&t, "Left Left Left BSpace BSpace BSpace");
    tmux_wait(&t, "\xe2\x80\xba explain it", WAIT_MS);
    tmux_keys(&t, "End Enter");
    tmux_wait(&t, "\xe2\x80\xba explain it", WAIT_MS);
    const char *s = tmux_wait(&t, "\xe2\x80\xa2 second", WAIT_MS);
    CHECK_CONTAINS(s, "Here is bold, italic and code.");
    CHECK_CONTAINS(s, "int x = *p;");
    CHECK_CONTAINS(s, "Thought for 2 lines");
    CHECK(!strstr(s, "Second thought."));
    tmux_wait(&t, "ready", WAIT_MS);
    const char *e = tmux_screen_escapes(&t);
    CHECK_CONTAINS(e, "\033[1mbold");  /* bold */
    CHECK_CONTAINS(e, "\033[3mitalic"); /* italic */
    CHECK_CONTAINS(e, "\033[36mcode"); /* inline code in cyan */
    tmux_keys(&t, "C-o");
    tmux_wait(&t, "Second thought.", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, tools_are_drawn_while_they_run)
{
    test_write_file(test_tmp_path("hello.c"), "int main(void) { return 1; }\n", 29);
    const char *lines[] = {
        script_line(test_printf("Look first.</think>Reading it.%s",
                                dsml_block("read", "path", "hello.c", "max_lines", "=20", NULL)),
                    NULL),
        script_line(test_printf("Fix.</think>%s", dsml_block("edit", "path", "hello.c", "old", "return 1;", "new",
                                                             "return 0;", NULL)),
                    "\"expect\": \"Tool result 1 (read)\""),
        script_line(test_printf("Run.</think>%s",
                                dsml_block("bash", "command", "for i in 1 2 3; do echo step-$i; done", NULL)),
                    NULL),
        script_line("Done.</think>Fixed and checked.", "\"expect\": \"step-3\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, "--yes", NULL);
    send(&t, "fix hello.c");
    const char *s = tmux_wait(&t, "Fixed and checked.", WAIT_MS);
    CHECK_CONTAINS(s, "Read hello.c 1:20");
    CHECK_CONTAINS(s, "Edit hello.c");
    CHECK_CONTAINS(s, "- return 1;");
    CHECK_CONTAINS(s, "+ return 0;");
    CHECK_CONTAINS(s, "$ for i in 1 2 3; do echo step-$i; done");
    CHECK_CONTAINS(s, "\xe2\x94\x82 step-3");
    CHECK_CONTAINS(s, "exit status 0");
    const char *e = tmux_screen_escapes(&t);
    CHECK_CONTAINS(e, "\033[31m  - return 1;"); /* red */
    CHECK_CONTAINS(e, "\033[32m  + return 0;"); /* green */
    CHECK_STR_EQ(test_read_file(test_tmp_path("hello.c"), NULL), "int main(void) { return 0; }\n");
    quit_and_check(&t);
}

static const char *write_call(const char *path, const char *content)
{
    return script_line(test_printf("Writing.</think>%s", dsml_block("write", "path", path, "content", content, NULL)),
                       NULL);
}

TEST(ui_tmux, confirmation_answered)
{
    const char *lines[] = {
        write_call("yes.txt", "allowed\n"),
        script_line("ok</think>Wrote it.", "\"expect\": \"Tool result 1 (write)\""),
        write_call("no.txt", "refused\n"),
        script_line("ok</think>Could not write.", "\"expect\": \"declined\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "write yes.txt");
    const char *s = tmux_wait(&t, "Allow write?", WAIT_MS);
    CHECK_CONTAINS(s, "[y] Yes");
    CHECK_CONTAINS(s, "[a] Always");
    CHECK_CONTAINS(s, "no in ");
    CHECK_CONTAINS(s, "waiting for your answer");
    tmux_keys(&t, "y");
    tmux_wait(&t, "Wrote it.", WAIT_MS);
    CHECK_STR_EQ(test_read_file(test_tmp_path("yes.txt"), NULL), "allowed\n");
    send(&t, "write no.txt");
    tmux_wait(&t, "Allow write?", WAIT_MS);
    tmux_keys(&t, "n");
    s = tmux_wait(&t, "Could not write.", WAIT_MS);
    CHECK_CONTAINS(s, "denied:");
    CHECK(access(test_tmp_path("no.txt"), F_OK) != 0);
    quit_and_check(&t);
}

/* "N s" somewhere on the screen: the time left to answer. */
static bool has_countdown(const char *s)
{
    for (const char *p = strstr(s, " s"); p; p = strstr(p + 1, " s"))
        if (p > s && p[-1] >= '0' && p[-1] <= '9') return true;
    return false;
}

/* However narrow (down to the 10 columns the UI draws at) or short the
 * terminal, the dialog keeps every answer key and the time left. */
TEST(ui_tmux, confirmation_fits_narrow_terminals)
{
    const char *lines[] = {
        write_call("narrow.txt", "x\n"),
        script_line("ok</think>Could not write.", "\"expect\": \"declined\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "write narrow.txt");
    tmux_wait(&t, "Allow write?", WAIT_MS);
    static const int sizes[][2] = { { 44, 24 }, { 36, 24 }, { 24, 24 }, { 16, 24 }, { 12, 24 }, { 10, 24 }, { 44, 8 } };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        tmux_resize(&t, sizes[i][0], sizes[i][1]);
        const char *s = NULL;
        double until = test_now_ms() + WAIT_MS;
        do {
            usleep(100000);
            s = tmux_screen(&t);
        } while (!(strstr(s, "[y]") && strstr(s, "[n]") && strstr(s, "[a]") && has_countdown(s)) &&
                 test_now_ms() < until);
        CHECK_MSG(strstr(s, "[y]") && strstr(s, "[n]") && strstr(s, "[a]") && has_countdown(s),
                  "%dx%d:\n%s", sizes[i][0], sizes[i][1], s);
    }
    tmux_resize(&t, 80, 24);
    tmux_keys(&t, "n");
    tmux_wait(&t, "Could not write.", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, confirmation_times_out_as_no)
{
    const char *lines[] = {
        write_call("late.txt", "too late\n"),
        /* the model is told what happened: nobody answered, nobody declined */
        script_line("ok</think>Nobody answered.", "\"expect\": \"nobody answered the approval question\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, NULL, "DS4CL_CONFIRM_TIMEOUT=3");
    send(&t, "write late.txt");
    /* the countdown is the agent's deadline */
    const char *s = tmux_wait(&t, "Allow write?", WAIT_MS);
    CHECK_MSG(strstr(s, "no in 3 s") || strstr(s, "no in 2 s"), "%s", s);
    s = tmux_wait(&t, "Nobody answered.", WAIT_MS);
    CHECK_CONTAINS(s, "No answer to the permission question within 3 s");
    CHECK(!strstr(s, "Allow write?"));
    CHECK(access(test_tmp_path("late.txt"), F_OK) != 0);
    quit_and_check(&t);
}

TEST(ui_tmux, ctrl_c_during_prefill)
{
    /* the reply is the next one after the interrupted read */
    const char *lines[] = { script_line("ok</think>Back again.", "\"prefill_delay_ms\": 100"), NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "read slowly, read slowly, read slowly, read slowly, read slowly, read slowly");
    /* the progress bar with its speed and time left */
    const char *bar = tmux_wait(&t, "ETA", WAIT_MS);
    CHECK_CONTAINS(bar, "reading ");
    CHECK_CONTAINS(bar, " t/s");
    tmux_keys(&t, "C-c");
    const char *s = tmux_wait(&t, "Model reading interrupted", WAIT_MS);
    CHECK(!strstr(s, "Back again."));
    tmux_wait(&t, "ready", WAIT_MS);
    send(&t, "again");
    tmux_wait(&t, "Back again.", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, ctrl_c_during_generation_keeps_what_was_written)
{
    strbuf b = { 0 };
    sb_puts(&b, "hm</think>Partial words");
    for (int i = 0; i < 200; i++) sb_puts(&b, " more");
    const char *lines[] = { script_line(sb_str(&b), "\"delay_ms\": 60"), NULL };
    sb_free(&b);
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "write a lot");
    tmux_wait(&t, "Partial words more more", WAIT_MS);
    tmux_wait(&t, "writing", WAIT_MS);
    /* a queued message comes back to the input line instead of being sent */
    send(&t, "queued words");
    tmux_wait(&t, "queued: queued words", WAIT_MS);
    tmux_keys(&t, "C-c");
    const char *s = tmux_wait(&t, "Stopped by user.", WAIT_MS);
    CHECK_CONTAINS(s, "Partial words");
    tmux_wait(&t, "ready", WAIT_MS);
    /* the hint goes with the interrupt it spoke of */
    tmux_wait_gone(&t, "Interrupting.", 1000);
    CHECK_STR_EQ(input_line(&t), "\xe2\x80\xba queued words");
    CHECK(!strstr(tmux_screen(&t), "queued: queued words"));
    tmux_keys(&t, "C-u");
    quit_and_check(&t);
}

TEST(ui_tmux, queued_message_is_read_after_the_tool_round)
{
    const char *lines[] = {
        script_line(test_printf("Wait.</think>%s", dsml_block("bash", "command", "sleep 2", NULL)), NULL),
        script_line("ok</think>Got the follow-up.", "\"expect\": \"and then this\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, "--yes", NULL);
    send(&t, "sleep a bit");
    tmux_wait(&t, "running bash", WAIT_MS);
    send(&t, "and then this \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac");
    const char *s = tmux_wait(&t, "queued: and then this \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac", WAIT_MS);
    CHECK_CONTAINS(s, "1 queued");
    s = tmux_wait(&t, "Got the follow-up.", WAIT_MS);
    CHECK(!strstr(s, "queued: and then this"));
    CHECK_CONTAINS(s, "\xe2\x80\xba and then this \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac");
    quit_and_check(&t);
}

TEST(ui_tmux, esc_interrupts_and_sends_the_queue)
{
    strbuf b = { 0 };
    sb_puts(&b, "hm</think>Slow");
    for (int i = 0; i < 300; i++) sb_puts(&b, " words");
    const char *lines[] = {
        script_line(sb_str(&b), "\"delay_ms\": 50"),
        script_line("ok</think>Switched to the new request.", "\"expect\": \"do this instead\""),
        NULL,
    };
    sb_free(&b);
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "go slowly");
    tmux_wait(&t, "Slow words", WAIT_MS);
    send(&t, "do this instead");
    tmux_wait(&t, "queued: do this instead", WAIT_MS);
    tmux_keys(&t, "Escape");
    tmux_wait(&t, "Switched to the new request.", WAIT_MS);
    /* Ctrl+C instead gives queued text back to the input line */
    quit_and_check(&t);
}

TEST(ui_tmux, resize_rewraps_everything)
{
    strbuf b = { 0 };
    sb_puts(&b, "t</think>");
    for (int i = 0; i < 12; i++) sb_printf(&b, "word%02d ", i);
    sb_puts(&b, "END");
    const char *lines[] = { script_line(sb_str(&b), NULL), NULL };
    sb_free(&b);
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "wrap");
    tmux_wait(&t, "word11 END", WAIT_MS);
    tmux_resize(&t, 40, 20);
    const char *s = tmux_wait(&t, "word04\n", WAIT_MS); /* a line now ends early */
    for (const char *line = s; *line;) {
        const char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        /* count columns: every byte but UTF-8 continuations */
        int cols = 0;
        for (size_t i = 0; i < n; i++) cols += ((unsigned char)line[i] & 0xc0) != 0x80;
        CHECK_MSG(cols <= 40, "a line is wider than the terminal: %.*s", (int)n, line);
        if (!nl) break;
        line = nl + 1;
    }
    CHECK_CONTAINS(s, "ready");
    tmux_resize(&t, 100, 30);
    tmux_wait(&t, "word11 END", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, scrolling_back_and_following_again)
{
    strbuf b = { 0 };
    sb_puts(&b, "t</think>");
    for (int i = 1; i <= 80; i++) sb_printf(&b, "line number %d\n\n", i);
    const char *lines[] = { script_line(sb_str(&b), NULL), NULL };
    sb_free(&b);
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "many lines");
    const char *s = tmux_wait(&t, "line number 80", WAIT_MS);
    CHECK(!strstr(s, "line number 50\n"));
    tmux_keys(&t, "PPage");
    s = tmux_wait(&t, "more lines below", WAIT_MS);
    CHECK(!strstr(s, "line number 80"));
    CHECK_CONTAINS(s, "line number 60\n");
    tmux_keys(&t, "NPage");
    tmux_wait_gone(&t, "more lines below", WAIT_MS);
    tmux_keys(&t, "PPage PPage");
    tmux_wait(&t, "line number 45\n", WAIT_MS);
    tmux_keys(&t, "Home");
    tmux_wait(&t, "ds4cl 0.1.0", WAIT_MS);
    tmux_keys(&t, "End");
    s = tmux_wait(&t, "line number 80", WAIT_MS);
    CHECK(!strstr(s, "more lines below"));
    quit_and_check(&t);
}

TEST(ui_tmux, slash_commands)
{
    const char *lines[] = {
        script_line("t</think>First answer.", NULL),
        script_line("Without thinking.", NULL),
        script_line("The user asked twice; both answered.", "\"expect\": \"user requested compaction\""),
        NULL,
    };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    /* completion */
    tmux_type(&t, "/hel");
    tmux_keys(&t, "Tab");
    tmux_wait(&t, "\xe2\x80\xba /help\n", WAIT_MS);
    tmux_keys(&t, "Enter");
    const char *s = tmux_wait(&t, "/delete ID", WAIT_MS);
    CHECK_CONTAINS(s, "Keys");
    tmux_type(&t, "/th");
    tmux_keys(&t, "Tab");
    tmux_wait(&t, "/thinkmax", WAIT_MS); /* the candidates */
    tmux_keys(&t, "C-u");
    send(&t, "/nosuchthing");
    tmux_wait(&t, "Unknown command /nosuchthing", WAIT_MS);
    /* the input is done with, not prefixed to what comes next; Up brings it back */
    tmux_keys(&t, "Up");
    tmux_wait(&t, "\xe2\x80\xba /nosuchthing\n", WAIT_MS);
    tmux_keys(&t, "C-u");
    send(&t, "/nosuchthing");
    tmux_wait(&t, "Unknown command /nosuchthing", WAIT_MS);
    send(&t, "first");
    tmux_wait(&t, "First answer.", WAIT_MS);
    const char *trace = test_tmp_path("ui.trace");
    send(&t, test_printf("/trace %s", trace));
    tmux_wait(&t, "Tracing to", WAIT_MS);
    send(&t, "/nothink");
    tmux_wait(&t, "No thinking from the next request.", WAIT_MS);
    wait_in_transcript(&t, "\xe2\x80\xba /nothink"); /* the command stays in view */
    send(&t, "second");
    tmux_wait(&t, "Without thinking.", WAIT_MS);
    tmux_wait(&t, "no thinking", WAIT_MS); /* the status bar */
    send(&t, "/history 1");
    s = tmux_wait(&t, "End of the history.", WAIT_MS);
    CHECK_CONTAINS(s, "History: the last 1 request");
    send(&t, "/sessions");
    s = tmux_wait(&t, "/switch ID", WAIT_MS);
    /* a header, and the list without the fences that keep it aligned */
    CHECK_CONTAINS(s, "Sessions, the latest first");
    CHECK_MSG(!strstr(s, "```"), "%s", s);
    send(&t, "/compact");
    tmux_wait(&t, "Context compacted", WAIT_MS);
    tmux_keys(&t, "C-o");
    tmux_wait(&t, "The user asked twice; both answered.", WAIT_MS);
    tmux_keys(&t, "C-o");
    wait_idle_status(&t);
    send(&t, "/clear");
    tmux_wait(&t, "conversation cleared", WAIT_MS);
    char *tr = test_read_file(trace, NULL);
    CHECK(tr != NULL);
    CHECK_CONTAINS(tr, "user=\"second\"");
    send(&t, "/quit");
    tmux_wait(&t, "EXIT=0", WAIT_MS);
    tmux_check_terminal_restored(&t);
    tmux_check_sanitizers();
    tmux_kill(&t);
}

TEST(ui_tmux, history_is_kept_between_runs)
{
    const char *lines[] = { script_line("t</think>One.", NULL), NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    send(&t, "remember this request");
    tmux_wait(&t, "One.", WAIT_MS);
    quit_and_check(&t);
    start(&t, lines, "--continue", NULL);
    /* the session is back, with its last turn */
    tmux_wait(&t, "History: the last 1 request", WAIT_MS);
    tmux_keys(&t, "Up");
    double until = test_now_ms() + WAIT_MS;
    while (strcmp(input_line(&t), "\xe2\x80\xba remember this request") && test_now_ms() < until) usleep(50000);
    CHECK_STR_EQ(input_line(&t), "\xe2\x80\xba remember this request");
    tmux_keys(&t, "C-u");
    quit_and_check(&t);
}

TEST(ui_tmux, sigterm_restores_the_terminal)
{
    const char *lines[] = { NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    int pid = tmux_program_pid(&t);
    CHECK_MSG(pid > 0, "no ds4cl process");
    CHECK_EQ_INT(kill(pid, SIGTERM), 0);
    const char *s = tmux_wait(&t, "EXIT=3", WAIT_MS);
    CHECK_CONTAINS(s, "terminated");
    tmux_check_terminal_restored(&t);
    tmux_check_sanitizers();
    tmux_kill(&t);
}

TEST(ui_tmux, sighup_and_crashes_restore_the_terminal)
{
    const char *lines[] = { NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    int pid = tmux_program_pid(&t);
    CHECK_MSG(pid > 0, "no ds4cl process");
    CHECK_EQ_INT(kill(pid, SIGHUP), 0);
    tmux_wait(&t, "EXIT=3", WAIT_MS);
    tmux_check_terminal_restored(&t);
    tmux_kill(&t);

    if (strcmp(getenv("DS4CL_VARIANT") ? getenv("DS4CL_VARIANT") : "rel", "rel"))
        SKIP("a crash under a sanitizer is the sanitizer's report");
    start(&t, lines, NULL, NULL);
    pid = tmux_program_pid(&t);
    CHECK_MSG(pid > 0, "no ds4cl process");
    CHECK_EQ_INT(kill(pid, SIGSEGV), 0);
    const char *s = tmux_wait(&t, "EXIT=139", WAIT_MS);
    CHECK_CONTAINS(s, "ds4cl: crashed (SIGSEGV)");
    tmux_check_terminal_restored(&t);
    tmux_kill(&t);
}

TEST(ui_tmux, no_color_and_monochrome)
{
    const char *lines[] = { script_line("t</think>Plain **bold** `code`.", NULL), NULL };
    tmux_t t;
    start(&t, lines, NULL, "NO_COLOR=1");
    send(&t, "hi");
    tmux_wait(&t, "Plain bold code.", WAIT_MS);
    const char *e = tmux_screen_escapes(&t);
    CHECK_CONTAINS(e, "\033[1mbold"); /* attributes stay */
    CHECK_MSG(!has_colour(e), "colours under NO_COLOR:\n%s", e);
    quit_and_check(&t);

    start(&t, lines, NULL, "TERM=xterm-mono");
    send(&t, "hi");
    tmux_wait(&t, "Plain bold code.", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, tiny_model_on_the_cpu_engine)
{
    const char *model = agent_test_model();
    tmux_t t;
    tmux_start(&t, 100, 30, NULL);
    tmux_run_ds4cl(&t, test_printf("-m '%s' --ctx 24576 --nothink -n 8 --seed 5", model));
    /* the system prompt is read first, with a progress bar (minutes under
     * the sanitizers) */
    const char *variant = getenv("DS4CL_VARIANT");
    int slow = variant && strcmp(variant, "rel") ? 10 : 1;
    const char *s = tmux_wait(&t, "ctx ", 120000);
    if (!strstr(s, "ready")) tmux_wait(&t, "reading the system prompt", 120000);
    tmux_wait(&t, "ready", 120000 * slow);
    send(&t, "Say hello.");
    wait_in_transcript(&t, "\xe2\x80\xba Say hello.");
    s = tmux_wait(&t, "ready", 60000 * slow);
    CHECK_CONTAINS(s, "read ");
    /* a long request is read slowly enough to interrupt */
    strbuf b = { 0 };
    for (int i = 0; i < 200; i++) sb_puts(&b, "please read all of these words slowly ");
    send(&t, sb_str(&b));
    sb_free(&b);
    tmux_wait(&t, "reading", WAIT_MS);
    tmux_keys(&t, "C-c");
    tmux_wait(&t, "Model reading interrupted", 60000 * slow);
    tmux_wait(&t, "ready", 60000 * slow);
    quit_and_check(&t);
}

TEST(ui_tmux, multi_line_input_paste_and_mouse_wheel)
{
    strbuf b = { 0 };
    sb_puts(&b, "t</think>");
    for (int i = 1; i <= 60; i++) sb_printf(&b, "row %d\n\n", i);
    const char *lines[] = {
        script_line("t</think>Read both lines.", "\"expect\": \"second line\\npasted one\\npasted two\""),
        script_line(sb_str(&b), NULL),
        NULL,
    };
    sb_free(&b);
    tmux_t t;
    start(&t, lines, NULL, NULL);
    tmux_type(&t, "first line");
    tmux_keys(&t, "M-Enter");
    tmux_type(&t, "second line");
    tmux_keys(&t, "C-j");
    /* a bracketed paste keeps its newlines and sends nothing */
    char *out;
    CHECK_EQ_INT(test_runf(&out, "tmux -L '%s' set-buffer -b p \"$(printf 'pasted one\\npasted two')\" && "
                                 "tmux -L '%s' paste-buffer -p -b p -t t",
                           t.sock, t.sock),
                 0);
    const char *s = tmux_wait(&t, "pasted two", WAIT_MS);
    CHECK_CONTAINS(s, "\xe2\x80\xba first line\n");
    CHECK_CONTAINS(s, "\xc2\xb7 second line\n");
    CHECK_CONTAINS(s, "\xc2\xb7 pasted one\n");
    CHECK(!strstr(s, "Read both lines."));
    tmux_keys(&t, "Enter");
    tmux_wait(&t, "Read both lines.", WAIT_MS);
    send(&t, "rows");
    tmux_wait(&t, "row 60", WAIT_MS);
    /* wheel up (X10 mouse report: button 64+32, column and row 1) */
    tmux_type(&t, "\033[M`!!");
    tmux_wait(&t, "more lines below", WAIT_MS);
    tmux_type(&t, "\033[Ma!!");
    tmux_wait_gone(&t, "more lines below", WAIT_MS);
    quit_and_check(&t);
}

TEST(ui_tmux, ctrl_c_clears_the_input_and_twice_quits)
{
    const char *lines[] = { NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    tmux_type(&t, "something unsent");
    tmux_wait(&t, "something unsent", WAIT_MS);
    tmux_keys(&t, "C-c");
    tmux_wait_gone(&t, "something unsent", WAIT_MS);
    tmux_wait(&t, "Ctrl+C again quits", WAIT_MS);
    tmux_keys(&t, "C-c");
    tmux_wait(&t, "EXIT=0", WAIT_MS);
    tmux_check_terminal_restored(&t);
    tmux_check_sanitizers();
    tmux_kill(&t);
}

/* The ID in the banner's "Session ID in …" line (runner-owned). */
static const char *session_on_screen(tmux_t *t)
{
    const char *s = tmux_wait(t, "Session ", WAIT_MS);
    const char *p = strstr(s, "Session ") + 8;
    size_t n = strcspn(p, " \n");
    return test_printf("%.*s", (int)n, p);
}

TEST(ui_tmux, sessions_new_switch_and_resume_picker)
{
    /* a new session starts the script over (its cursor is part of the
     * saved state), so both answer alike */
    const char *lines[] = { script_line("t</think>Answered.", NULL), NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    const char *first = session_on_screen(&t);
    send(&t, "first session request");
    tmux_wait(&t, "Answered.", WAIT_MS);
    wait_idle_status(&t);
    send(&t, "/new");
    tmux_wait(&t, "New session", WAIT_MS);
    const char *second = session_on_screen(&t);
    CHECK_MSG(strcmp(first, second) != 0, "still %s after /new:\n%s", first, tmux_screen(&t));
    send(&t, "second session request");
    wait_in_transcript(&t, "\xe2\x80\xba second session request");
    tmux_wait(&t, "Answered.", WAIT_MS);
    wait_idle_status(&t);
    /* Tab offers the saved sessions' IDs */
    tmux_type(&t, "/switch ");
    tmux_keys(&t, "Tab");
    const char *s = tmux_wait(&t, first, WAIT_MS);
    CHECK_CONTAINS(s, second);
    tmux_keys(&t, "C-u");
    tmux_type(&t, test_printf("/switch %.4s", first));
    tmux_keys(&t, "Tab");
    tmux_wait(&t, test_printf("/switch %s", first), WAIT_MS);
    tmux_keys(&t, "Enter");
    s = tmux_wait(&t, "End of the history.", WAIT_MS);
    CHECK_CONTAINS(s, "\xe2\x80\xba first session request");
    CHECK_CONTAINS(s, "Answered.");
    CHECK(!strstr(s, "second session request"));
    quit_and_check(&t);

    /* --resume without an ID: the list to pick from */
    tmux_start(&t, 100, 30, NULL);
    tmux_run_ds4cl(&t, test_printf("-m '%s' --engine 'script:%s' --ctx 16384 --resume", agent_test_model(),
                                   write_script(lines)));
    s = tmux_wait(&t, "Resume a session", WAIT_MS);
    CHECK_CONTAINS(s, "a new session");
    CHECK_CONTAINS(s, "ID"); /* the heads of the columns */
    CHECK_CONTAINS(s, "USED");
    CHECK_CONTAINS(s, "TOKENS  TITLE");
    CHECK_CONTAINS(s, "first session request");
    CHECK_CONTAINS(s, "second session request");
    tmux_keys(&t, "Down");
    tmux_keys(&t, "Enter");
    s = tmux_wait(&t, "End of the history.", WAIT_MS);
    CHECK(strstr(s, "first session request") || strstr(s, "second session request"));
    quit_and_check(&t);
}

/* After /fork the new session's ID is at the bottom, below the history
 * that fills the screen; /sessions heads its columns. */
TEST(ui_tmux, fork_names_the_new_session_at_the_bottom)
{
    strbuf answer = { 0 };
    sb_puts(&answer, "t</think>");
    for (int i = 1; i <= 40; i++) sb_printf(&answer, "answer line %d\n\n", i);
    const char *lines[] = { script_line(sb_str(&answer), NULL), NULL };
    tmux_t t;
    start(&t, lines, NULL, NULL);
    const char *first = session_on_screen(&t);
    send(&t, "a long request");
    tmux_wait(&t, "answer line 40", WAIT_MS);
    wait_idle_status(&t);
    send(&t, "/fork");
    const char *s = tmux_wait(&t, test_printf("(forked from %s)", first), WAIT_MS);
    CHECK_CONTAINS(s, "Now in ");
    CHECK_CONTAINS(s, "End of the history.");
    CHECK(strstr(s, "End of the history.") < strstr(s, "Now in "));
    wait_idle_status(&t);
    send(&t, "/sessions");
    s = tmux_wait(&t, "/switch ID", WAIT_MS);
    CHECK_CONTAINS(s, "TOKENS  TITLE");
    CHECK_CONTAINS(s, "DIRECTORY");
    sb_free(&answer);
    quit_and_check(&t);
}

TEST(ui_tmux, refuses_without_a_usable_terminal)
{
    const char *model = agent_test_model();
    char *out;
    /* standard input from /dev/null: no terminal, nothing loaded */
    int rc = test_runf(&out, "'%s/ds4cl' -m '%s' --engine 'script:%s' 2>&1", test_bindir(), model,
                       test_tmp_path("none.jsonl"));
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "the interactive mode needs a terminal; -p TEXT runs one task without one");
    CHECK(!strstr(out, "loading model"));
    /* a terminal that cannot place its cursor */
    tmux_t t;
    tmux_start(&t, 80, 24, "TERM=dumb");
    tmux_run_ds4cl(&t, test_printf("-m '%s' --engine 'script:%s'", model, test_tmp_path("none.jsonl")));
    const char *s = tmux_wait(&t, "EXIT=2", WAIT_MS);
    CHECK_CONTAINS(s, "cannot place its cursor");
    tmux_kill(&t);
}
