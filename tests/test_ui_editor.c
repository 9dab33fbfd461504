/* The UI's input editor, its persisted history and the status bar text,
 * without a terminal. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/test.h"
#include "ui/editor.h"
#include "ui/status.h"

static void utf8_locale(void)
{
    if (!setlocale(LC_CTYPE, "C.UTF-8") && !setlocale(LC_CTYPE, "C.utf8")) SKIP("no C.UTF-8 locale");
}

static void type(ui_editor *e, const char *s) { ui_editor_insert(e, s, strlen(s)); }

TEST(ui_editor, utf8_editing_moves_by_characters)
{
    utf8_locale();
    ui_editor *e = ui_editor_new(NULL);
    type(e, "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac e\xcc\x81"); /* héllo 日本 é (combining) */
    CHECK(ui_editor_apply(e, ED_BACKSPACE));                     /* e + accent go together */
    CHECK_STR_EQ(ui_editor_text(e), "h\xc3\xa9llo \xe6\x97\xa5\xe6\x9c\xac ");
    CHECK(ui_editor_apply(e, ED_LEFT));
    CHECK(ui_editor_apply(e, ED_LEFT));
    CHECK(ui_editor_apply(e, ED_BACKSPACE));                     /* 日 */
    CHECK_STR_EQ(ui_editor_text(e), "h\xc3\xa9llo \xe6\x9c\xac ");
    CHECK(ui_editor_apply(e, ED_LINE_START));
    CHECK(ui_editor_apply(e, ED_RIGHT));
    CHECK(ui_editor_apply(e, ED_DELETE));                        /* é */
    CHECK_STR_EQ(ui_editor_text(e), "hllo \xe6\x9c\xac ");
    /* control codes never enter; CRLF pastes as one newline; bad bytes are U+FFFD */
    ui_editor_apply(e, ED_TEXT_END);
    type(e, "\x1b[31mx\r\ny\x80");
    CHECK_STR_EQ(ui_editor_text(e), "hllo \xe6\x9c\xac [31mx\ny\xef\xbf\xbd");
    ui_editor_free(e);
}

TEST(ui_editor, emacs_kills_yank_transpose_undo)
{
    utf8_locale();
    ui_editor *e = ui_editor_new(NULL);
    type(e, "git commit -m message");
    CHECK(ui_editor_apply(e, ED_KILL_WORD_BACK));
    CHECK_STR_EQ(ui_editor_text(e), "git commit -m ");
    CHECK(ui_editor_apply(e, ED_KILL_SPACE_BACK));
    CHECK_STR_EQ(ui_editor_text(e), "git commit ");
    CHECK(ui_editor_apply(e, ED_YANK));                          /* the kills joined */
    CHECK_STR_EQ(ui_editor_text(e), "git commit -m message");
    CHECK(ui_editor_apply(e, ED_LINE_START));
    CHECK(ui_editor_apply(e, ED_WORD_RIGHT));
    CHECK(ui_editor_apply(e, ED_KILL_LINE_END));
    CHECK_STR_EQ(ui_editor_text(e), "git");
    CHECK(ui_editor_apply(e, ED_TRANSPOSE));
    CHECK_STR_EQ(ui_editor_text(e), "gti");
    CHECK(ui_editor_apply(e, ED_UNDO));
    CHECK_STR_EQ(ui_editor_text(e), "git");
    CHECK(ui_editor_apply(e, ED_UNDO));
    CHECK_STR_EQ(ui_editor_text(e), "git commit -m message");
    type(e, "abc");                                            /* typing is one step */
    CHECK(ui_editor_apply(e, ED_UNDO));
    CHECK_STR_EQ(ui_editor_text(e), "git commit -m message");
    CHECK(ui_editor_apply(e, ED_LINE_START));
    CHECK(ui_editor_apply(e, ED_KILL_WORD_FWD));
    CHECK_STR_EQ(ui_editor_text(e), " commit -m message");
    ui_editor_free(e);
}

TEST(ui_editor, rows_wrap_by_width_and_the_cursor_moves_between_them)
{
    utf8_locale();
    ui_editor *e = ui_editor_new(NULL);
    type(e, "abcdefgh\n\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e");  /* 日本語: 6 columns */
    ed_row *rows;
    int r, c;
    size_t n = ui_editor_layout(e, 5, &rows, &r, &c);
    CHECK_EQ_INT(n, 4); /* abcde | fgh | 日本 | 語 */
    CHECK_EQ_INT(rows[1].end - rows[1].start, 3);
    CHECK_EQ_INT(rows[2].end - rows[2].start, 6);
    CHECK_EQ_INT(r, 3);
    CHECK_EQ_INT(c, 2);
    free(rows);
    CHECK(ui_editor_vertical(e, -1, 5));
    n = ui_editor_layout(e, 5, &rows, &r, &c);
    CHECK_EQ_INT(r, 2);
    CHECK_EQ_INT(c, 2);
    free(rows);
    CHECK(ui_editor_vertical(e, -1, 5));
    CHECK(ui_editor_vertical(e, -1, 5));
    n = ui_editor_layout(e, 5, &rows, &r, &c);
    CHECK_EQ_INT(r, 0);
    CHECK_EQ_INT(c, 2); /* the goal column is kept */
    free(rows);
    /* a row that is exactly full puts the cursor on the next one */
    ui_editor_set(e, "abcde");
    n = ui_editor_layout(e, 5, &rows, &r, &c);
    CHECK_EQ_INT(n, 2);
    CHECK_EQ_INT(r, 1);
    CHECK_EQ_INT(c, 0);
    free(rows);
    ui_editor_free(e);
}

TEST(ui_editor, history_is_walked_and_persisted)
{
    utf8_locale();
    const char *path = test_tmp_path("state/ds4cl/history");
    ui_history h;
    ui_history_open(&h, path);
    CHECK_EQ_INT(h.n, 0);
    ds4_error err = { "" };
    CHECK_EQ_INT(ui_history_add(&h, "first", &err), 0);
    CHECK_EQ_INT(ui_history_add(&h, "two\nlines with a \\ backslash", &err), 0);
    CHECK_EQ_INT(ui_history_add(&h, "   ", &err), 0); /* blank: ignored */
    CHECK_EQ_INT(ui_history_add(&h, "first", &err), 0); /* moves to the end */
    CHECK_EQ_INT(h.n, 2);
    char *file = test_read_file(path, NULL);
    CHECK_STR_EQ(file, "two\\nlines with a \\\\ backslash\nfirst\n");
    struct stat sb;
    CHECK_EQ_INT(stat(path, &sb), 0);
    CHECK_EQ_INT(sb.st_mode & 0777, 0600);

    /* another process added one meanwhile: both survive */
    ui_history other;
    ui_history_open(&other, path);
    CHECK_EQ_INT(ui_history_add(&other, "from elsewhere", &err), 0);
    ui_history_close(&other);
    CHECK_EQ_INT(ui_history_add(&h, "mine", &err), 0);
    CHECK_EQ_INT(h.n, 4);
    CHECK_STR_EQ(h.v[2], "from elsewhere");

    ui_editor *e = ui_editor_new(&h);
    type(e, "draft");
    CHECK(ui_editor_vertical(e, -1, 80));
    CHECK_STR_EQ(ui_editor_text(e), "mine");
    CHECK(ui_editor_history(e, -1));
    CHECK(ui_editor_history(e, -1));
    CHECK(ui_editor_history(e, -1));
    CHECK_STR_EQ(ui_editor_text(e), "two\nlines with a \\ backslash");
    CHECK(!ui_editor_history(e, -1));
    /* at the top row of a multi-line entry, down walks rows first */
    CHECK(ui_editor_vertical(e, 1, 80));
    CHECK_STR_EQ(ui_editor_text(e), "two\nlines with a \\ backslash");
    for (int i = 0; i < 4; i++) CHECK(ui_editor_history(e, 1));
    CHECK_STR_EQ(ui_editor_text(e), "draft");
    CHECK(!ui_editor_history(e, 1));
    char *t = ui_editor_take(e);
    CHECK_STR_EQ(t, "draft");
    free(t);
    CHECK(ui_editor_empty(e));
    ui_editor_free(e);
    ui_history_close(&h);

    /* an unwritable place keeps the history in memory and says why */
    test_write_file(test_tmp_path("blocker"), "x", 1);
    ui_history_open(&h, test_tmp_path("blocker/history"));
    CHECK_EQ_INT(ui_history_add(&h, "kept", &err), -1);
    CHECK_EQ_INT(h.n, 1);
    ui_history_close(&h);
}

TEST(ui_editor, status_bar_parts)
{
    utf8_locale();
    ui_status_in in;
    memset(&in, 0, sizeof in);
    in.st.state = AGENT_PREFILL;
    in.st.prefill_done = 1234;
    in.st.prefill_total = 8896;
    in.st.prefill_tps = 1250;
    in.st.ctx_used = 12345;
    in.st.ctx_size = 65536;
    in.st.prefilled_total = 9000;
    in.think = DS4_THINK_HIGH;
    in.model = "DeepSeek-V4-Flash";
    in.device = "cpu (2 threads)";
    ui_line l = { 0 };
    ui_status_line(&in, 200, &l);
    CHECK_CONTAINS(l.text, "reading ");
    CHECK_CONTAINS(l.text, "1.2k/8.9k 13%");
    CHECK_CONTAINS(l.text, "1250 t/s");
    CHECK_CONTAINS(l.text, "ETA 7s");
    CHECK_CONTAINS(l.text, "ctx 12.3k/65.5k 18%");
    CHECK_CONTAINS(l.text, "read 9k");
    CHECK_CONTAINS(l.text, "DeepSeek-V4-Flash \xc2\xb7 cpu (2 threads)");
    CHECK(l.width <= 200);
    /* narrow: the model goes first, the state stays */
    ui_status_line(&in, 70, &l);
    CHECK(l.width <= 70);
    CHECK(!strstr(l.text, "DeepSeek"));
    CHECK_CONTAINS(l.text, "reading");

    in.st.state = AGENT_GENERATING;
    in.st.generated = 42;
    in.st.gen_tps = 12.34;
    in.st.greedy = true;
    in.queued = 2;
    ui_status_line(&in, 200, &l);
    CHECK_CONTAINS(l.text, "writing \xc2\xb7 42 tokens \xc2\xb7 12.3 t/s \xe2\x9d\x84 greedy");
    CHECK_CONTAINS(l.text, "2 queued");
    in.st.confirm_pending = true;
    ui_status_line(&in, 200, &l);
    CHECK_CONTAINS(l.text, "waiting for your answer");
    ui_line_free(&l);

    char b[32];
    ui_fmt_count(b, sizeof b, 65536);
    CHECK_STR_EQ(b, "65.5k");
    ui_fmt_count(b, sizeof b, 64000);
    CHECK_STR_EQ(b, "64k");
    ui_fmt_count(b, sizeof b, 1048576);
    CHECK_STR_EQ(b, "1.0M");
    ui_fmt_duration(b, sizeof b, 83);
    CHECK_STR_EQ(b, "1m23s");
}
