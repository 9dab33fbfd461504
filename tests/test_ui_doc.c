/* The UI's document model without a terminal: UTF-8 and display widths,
 * wrapping, markdown, reasoning folds, tool calls drawn as they stream. */
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/test.h"
#include "ui/doc.h"
#include "ui/render.h"

static void utf8_locale(void)
{
    if (!setlocale(LC_CTYPE, "C.UTF-8") && !setlocale(LC_CTYPE, "C.utf8")) SKIP("no C.UTF-8 locale");
}

/* The style of the first byte of needle in the line, or -1. */
static int style_of(const ui_line *l, const char *needle)
{
    const char *p = strstr(l->text, needle);
    if (!p) return -1;
    size_t off = (size_t)(p - l->text);
    for (size_t s = 0; s < l->n_spans; s++)
        if (off >= l->spans[s].off && off < l->spans[s].off + l->spans[s].len) return l->spans[s].style;
    return -1;
}

/* All lines of the document joined by '\n' (runner-owned). */
static const char *doc_text(ui_doc *d, int width)
{
    size_t n = ui_doc_layout(d, width);
    strbuf b = { 0 };
    for (size_t i = 0; i < n; i++) {
        const ui_line *l = ui_doc_line(d, i);
        CHECK_MSG(l->width <= width, "line %zu is %d columns wide (limit %d): %s", i, l->width, width, l->text);
        CHECK_EQ_INT(l->width, ui_text_width(l->text, l->len));
        CHECK_MSG(!strchr(l->text, '\x1b') && !strchr(l->text, '\r') && !strchr(l->text, '\n'),
                  "control code in line %zu", i);
        sb_puts(&b, l->text);
        sb_putc(&b, '\n');
    }
    char *s = test_strdup(sb_str(&b));
    sb_free(&b);
    return s;
}

/* The first line containing needle. */
static const ui_line *find_line(ui_doc *d, int width, const char *needle)
{
    size_t n = ui_doc_layout(d, width);
    for (size_t i = 0; i < n; i++)
        if (strstr(ui_doc_line(d, i)->text, needle)) return ui_doc_line(d, i);
    FAIL("no line contains \"%s\" in:\n%s", needle, doc_text(d, width));
}

static void ev(ui_doc *d, agent_event_type type, const char *text)
{
    agent_event e = { .type = type, .text = (char *)text, .len = text ? strlen(text) : 0 };
    ui_doc_event(d, &e);
}

static void tool_ev(ui_doc *d, agent_event_type type, int call, const char *tool, const char *name, const char *text)
{
    agent_event e = { .type = type, .text = (char *)text, .len = text ? strlen(text) : 0, .tool = (char *)tool,
                      .name = (char *)name, .call_index = call };
    if (type == AGENT_EV_TOOL_CALL) {
        e.args_json = (char *)text;
        e.text = NULL;
        e.len = 0;
    }
    ui_doc_event(d, &e);
}

TEST(ui_doc, utf8_decoding_never_fails)
{
    uint32_t cp;
    CHECK_EQ_INT(ui_utf8_decode("\xc3\xa9", 2, &cp), 2);
    CHECK_EQ_INT(cp, 0xe9);
    CHECK_EQ_INT(ui_utf8_decode("\xf0\x9f\x98\x80", 4, &cp), 4);
    CHECK_EQ_INT(cp, 0x1f600);
    /* truncated, stray continuation, overlong, surrogate: one byte, U+FFFD */
    CHECK_EQ_INT(ui_utf8_decode("\xe6\x97", 2, &cp), 1);
    CHECK_EQ_INT(cp, 0xfffd);
    CHECK_EQ_INT(ui_utf8_decode("\x80", 1, &cp), 1);
    CHECK_EQ_INT(ui_utf8_decode("\xc0\xaf", 2, &cp), 1);
    CHECK_EQ_INT(ui_utf8_decode("\xed\xa0\x80", 3, &cp), 1);
    CHECK_EQ_INT(cp, 0xfffd);
    char enc[4];
    CHECK_EQ_INT(ui_utf8_encode(0x65e5, enc), 3);
    CHECK(!memcmp(enc, "\xe6\x97\xa5", 3));
}

TEST(ui_doc, display_widths)
{
    utf8_locale();
    CHECK_EQ_INT(ui_text_width("abc", 3), 3);
    CHECK_EQ_INT(ui_text_width("\xe6\x97\xa5\xe6\x9c\xac", 6), 4);           /* 日本 */
    CHECK_EQ_INT(ui_text_width("e\xcc\x81", 3), 1);                          /* e + combining acute */
    CHECK_EQ_INT(ui_text_width("\xf0\x9f\x98\x80", 4), 2);                   /* 😀 */
    /* a cluster: the base and its combining mark move together */
    const char *s = "ae\xcc\x81z";
    CHECK_EQ_INT(ui_text_next(s, 5, 1), 4);
    CHECK_EQ_INT(ui_text_prev(s, 4), 1);
    CHECK_EQ_INT(ui_text_prev(s, 5), 4);
}

TEST(ui_doc, lines_show_control_codes_as_pictures)
{
    utf8_locale();
    ui_line l = { 0 };
    ui_line_adds(&l, "ab\tc", 0);
    CHECK_STR_EQ(l.text, "ab  c"); /* the tab reaches column 4 */
    ui_line_add(&l, "a\x1b[31mb\x80", 8, UI_C_ERROR);
    CHECK(!strchr(l.text, '\x1b'));
    CHECK_CONTAINS(l.text, "a\xe2\x90\x9b[31mb"); /* ␛ */
    CHECK_CONTAINS(l.text, "\xef\xbf\xbd");       /* the bad byte */
    CHECK_EQ_INT(l.n_spans, 2);
    CHECK_EQ_INT(l.width, ui_text_width(l.text, l.len));
    ui_line_truncate(&l, 6);
    CHECK_EQ_INT(l.width, 6);
    CHECK_CONTAINS(l.text, "\xe2\x80\xa6");
    ui_line_free(&l);
}

TEST(ui_doc, wrapping_by_display_width)
{
    utf8_locale();
    line_list out = { 0 };
    ui_line p = { 0 };
    ui_line_adds(&p, "hello world foo", 0);
    ui_wrap_para(&out, &p, 11, NULL, true);
    CHECK_EQ_INT(out.n, 2);
    CHECK_STR_EQ(out.v[0].text, "hello world");
    CHECK_STR_EQ(out.v[1].text, "foo");
    ui_lines_free(&out);
    ui_line_free(&p);

    /* CJK: two columns each, never split across the margin */
    ui_line_adds(&p, "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87", 0); /* 日本語の文 */
    ui_wrap_para(&out, &p, 5, NULL, true);
    CHECK_EQ_INT(out.n, 3);
    for (size_t i = 0; i < out.n; i++) CHECK(out.v[i].width <= 5);
    CHECK_EQ_INT(out.v[0].width, 4);
    ui_lines_free(&out);
    ui_line_free(&p);

    /* a word longer than the line is cut; prefixes hang */
    ui_line_adds(&p, "abcdefghijklmnop qr", 0);
    wrap_prefix wp = { "> ", UI_C_MUTED, "  ", 0 };
    ui_wrap_para(&out, &p, 8, &wp, true);
    CHECK_STR_EQ(out.v[0].text, "> abcdef");
    CHECK_STR_EQ(out.v[1].text, "  ghijkl");
    CHECK_STR_EQ(out.v[2].text, "  mnop");
    CHECK_STR_EQ(out.v[3].text, "  qr");
    CHECK_EQ_INT(style_of(&out.v[0], ">"), UI_C_MUTED);
    ui_lines_free(&out);
    ui_line_free(&p);
}

TEST(ui_doc, markdown_inline_styles)
{
    utf8_locale();
    line_list out = { 0 };
    const char *md = "A **bold** and *italic* word with `co*de*`, snake_case_name and 2 * 3 * 4.";
    ui_md_render(&out, md, strlen(md), 200, 0, false);
    CHECK_EQ_INT(out.n, 1);
    const ui_line *l = &out.v[0];
    CHECK_STR_EQ(l->text, "A bold and italic word with co*de*, snake_case_name and 2 * 3 * 4.");
    CHECK_EQ_INT(style_of(l, "bold"), UI_BOLD);
    CHECK_EQ_INT(style_of(l, "italic"), UI_ITALIC);
    CHECK_EQ_INT(UI_ROLE(style_of(l, "co*de*")), UI_C_CODE);
    CHECK_EQ_INT(style_of(l, "snake"), 0);
    ui_lines_free(&out);

    /* without a partner a delimiter is text; while streaming it styles the rest */
    ui_md_render(&out, "a **bold start", 14, 80, 0, false);
    CHECK_STR_EQ(out.v[0].text, "a **bold start");
    ui_lines_free(&out);
    ui_md_render(&out, "a **bold start", 14, 80, 0, true);
    CHECK_STR_EQ(out.v[0].text, "a bold start");
    CHECK_EQ_INT(style_of(&out.v[0], "bold"), UI_BOLD);
    ui_lines_free(&out);
    ui_md_render(&out, "escaped \\*stars\\*", 17, 80, 0, false);
    CHECK_STR_EQ(out.v[0].text, "escaped *stars*");
    ui_lines_free(&out);
}

TEST(ui_doc, markdown_blocks)
{
    utf8_locale();
    line_list out = { 0 };
    const char *md = "# Title\n\n- one item that is long enough to wrap\n2. second\n> quoted\n---\n```c\nint *p = **q;\n```\nafter";
    ui_md_render(&out, md, strlen(md), 24, 0, false);
    strbuf b = { 0 };
    for (size_t i = 0; i < out.n; i++) {
        sb_puts(&b, out.v[i].text);
        sb_putc(&b, '\n');
    }
    const char *t = sb_str(&b);
    CHECK_CONTAINS(t, "Title\n\n");
    CHECK_CONTAINS(t, "\xe2\x80\xa2 one item that is long\n  enough to wrap\n"); /* hanging indent */
    CHECK_CONTAINS(t, "2. second\n");
    CHECK_CONTAINS(t, "\xe2\x96\x8e quoted\n");
    CHECK_CONTAINS(t, "\xe2\x94\x80\xe2\x94\x80\xe2\x94\x80");
    CHECK_CONTAINS(t, "```c\nint *p = **q;\n```\nafter\n"); /* code is not markdown */
    CHECK_EQ_INT(style_of(&out.v[0], "Title") & ~0xff, UI_BOLD | UI_UNDERLINE);
    for (size_t i = 0; i < out.n; i++) {
        if (!strcmp(out.v[i].text, "int *p = **q;")) CHECK_EQ_INT(UI_ROLE(out.v[i].spans[0].style), UI_C_CODE);
        if (!strcmp(out.v[i].text, "```c")) CHECK_EQ_INT(UI_ROLE(out.v[i].spans[0].style), UI_C_FENCE);
    }
    sb_free(&b);
    ui_lines_free(&out);
}

TEST(ui_doc, reasoning_streams_then_folds)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    ev(d, AGENT_EV_USER, "explain");
    ev(d, AGENT_EV_THINKING, "\nfirst thought\n");
    ev(d, AGENT_EV_THINKING, "second thought");
    const char *t = doc_text(d, 60);
    CHECK_CONTAINS(t, "\xe2\x80\xba explain");
    CHECK_CONTAINS(t, "first thought\n  second thought");
    CHECK_EQ_INT(UI_ROLE(style_of(find_line(d, 60, "second thought"), "second")), UI_C_THINK);
    ev(d, AGENT_EV_TEXT, "\n\nThe **answer**.");
    t = doc_text(d, 60);
    CHECK(!strstr(t, "second thought"));
    CHECK_CONTAINS(t, "Thought for 2 lines");
    CHECK_CONTAINS(t, "The answer.");
    ui_doc_set_show_thinking(d, true);
    t = doc_text(d, 60);
    CHECK_CONTAINS(t, "second thought");
    CHECK_EQ_INT(ui_doc_blocks(d), 3);
    ui_doc_free(d);
}

TEST(ui_doc, tool_calls_drawn_while_they_stream)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    ev(d, AGENT_EV_USER, "fix it");
    ev(d, AGENT_EV_TEXT, "Reading it.");
    tool_ev(d, AGENT_EV_TOOL_START, 0, "read", NULL, NULL);
    tool_ev(d, AGENT_EV_TOOL_PARAM, 0, "read", "path", "src/ma");
    CHECK_CONTAINS(doc_text(d, 80), "Reading src/ma 1:500\xe2\x80\xa6");
    tool_ev(d, AGENT_EV_TOOL_PARAM, 0, "read", "path", "in.c");
    tool_ev(d, AGENT_EV_TOOL_CALL, 0, "read", NULL, "{\"path\":\"src/main.c\",\"start_line\":10,\"max_lines\":20}");
    CHECK_CONTAINS(doc_text(d, 80), "Reading src/main.c 10:20\xe2\x80\xa6");
    tool_ev(d, AGENT_EV_TOOL_START, 1, "edit", NULL, NULL);
    tool_ev(d, AGENT_EV_TOOL_PARAM, 1, "edit", "path", "src/main.c");
    tool_ev(d, AGENT_EV_TOOL_PARAM, 1, "edit", "old", "return 1;\n");
    tool_ev(d, AGENT_EV_TOOL_PARAM, 1, "edit", "new", "return 0;");
    const ui_line *del = find_line(d, 80, "- return 1;");
    CHECK_EQ_INT(UI_ROLE(style_of(del, "return")), UI_C_DEL);
    const ui_line *add = find_line(d, 80, "+ return 0;");
    CHECK_EQ_INT(UI_ROLE(style_of(add, "return")), UI_C_ADD);
    agent_event r = { .type = AGENT_EV_TOOL_RESULT, .text = "src/main.c: lines 10-20 of 40\n10\tint main", .tool = "read",
                      .call_index = 0 };
    r.len = strlen(r.text);
    ui_doc_event(d, &r);
    const char *t = doc_text(d, 80);
    CHECK_CONTAINS(t, "Read src/main.c 10:20\n");
    CHECK_CONTAINS(t, "src/main.c: lines 10-20 of 40 (+1 line)");
    CHECK_EQ_INT(UI_ROLE(style_of(find_line(d, 80, "Read src"), "\xe2\x97\x8f")), UI_C_OK);
    /* the edit never ran: the turn was interrupted */
    ev(d, AGENT_EV_TURN_END, AGENT_END_INTERRUPTED);
    t = doc_text(d, 80);
    CHECK_CONTAINS(t, "not run: interrupted");
    CHECK_EQ_INT(UI_ROLE(style_of(find_line(d, 80, "Editing"), "\xe2\x97\x8f")), UI_C_ERROR);
    ui_doc_free(d);

    /* a malformed block: its calls will not run */
    d = ui_doc_new();
    ev(d, AGENT_EV_USER, "search");
    tool_ev(d, AGENT_EV_TOOL_START, 0, "search", NULL, NULL);
    tool_ev(d, AGENT_EV_TOOL_PARAM, 0, "search", "query", "main(");
    agent_event bad = { .type = AGENT_EV_NOTICE, .text = "incomplete DSML tool call", .is_error = true };
    bad.len = strlen(bad.text);
    ui_doc_event(d, &bad);
    t = doc_text(d, 80);
    CHECK_CONTAINS(t, "Search main(");
    CHECK_CONTAINS(t, "not run: the call was malformed");
    ui_doc_free(d);
}

TEST(ui_doc, bash_shows_the_command_and_a_live_tail)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    tool_ev(d, AGENT_EV_TOOL_START, 0, "bash", NULL, NULL);
    tool_ev(d, AGENT_EV_TOOL_PARAM, 0, "bash", "command", "make test");
    tool_ev(d, AGENT_EV_TOOL_CALL, 0, "bash", NULL, "{\"command\":\"make test\"}");
    strbuf out = { 0 };
    for (int i = 1; i <= 20; i++) sb_printf(&out, "line %d\n", i);
    tool_ev(d, AGENT_EV_TOOL_PROGRESS, 0, "bash", NULL, sb_str(&out));
    const char *t = doc_text(d, 80);
    CHECK_CONTAINS(t, "$ make test");
    CHECK_CONTAINS(t, "12 earlier lines");
    CHECK_CONTAINS(t, "line 20");
    CHECK(!strstr(t, "line 12\n"));
    agent_event c = { .type = AGENT_EV_CONFIRM, .text = "bash: make test", .tool = "bash", .call_index = 0 };
    c.len = strlen(c.text);
    ui_doc_event(d, &c);
    CHECK_CONTAINS(doc_text(d, 80), "waiting for your answer");
    agent_event r = { .type = AGENT_EV_TOOL_RESULT, .text = "job 1: exit status 2 after 0.3 s\nboom", .tool = "bash",
                      .call_index = 0 };
    r.len = strlen(r.text);
    ui_doc_event(d, &r);
    t = doc_text(d, 80);
    CHECK(!strstr(t, "waiting for your answer"));
    CHECK_EQ_INT(UI_ROLE(style_of(find_line(d, 80, "exit status 2"), "job")), UI_C_ERROR);
    sb_free(&out);
    ui_doc_free(d);
}

TEST(ui_doc, history_replay_of_a_raw_reply)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    const char *raw = "let me look</think>\n\nI will read it.\n\n<\xef\xbd\x9c" "DSML\xef\xbd\x9ctool_calls>\n<...";
    ui_doc_add_reply(d, raw, strlen(raw));
    ui_doc_add_tool(d, "read", "{\"path\":\"a.c\"}", "a.c: 3 lines", false, false);
    ui_doc_add_tool(d, "write", "{\"path\":\"b.c\",\"content\":\"x\"}", "Tool error: denied", true, true);
    const char *t = doc_text(d, 80);
    CHECK_CONTAINS(t, "Thought for 1 line");
    CHECK_CONTAINS(t, "I will read it.\n");
    CHECK(!strstr(t, "DSML"));
    CHECK_CONTAINS(t, "Read a.c 1:500");
    CHECK_CONTAINS(t, "denied: denied");
    ui_doc_free(d);
}

TEST(ui_doc, every_line_fits_any_width)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    ev(d, AGENT_EV_USER, "\xe8\xaf\xb7\xe8\xa7\xa3\xe9\x87\x8a\xe8\xbf\x99\xe4\xb8\xaa\xe5\x87\xbd\xe6\x95\xb0 please");
    ev(d, AGENT_EV_TEXT, "Emoji \xf0\x9f\x98\x80\xf0\x9f\x9a\x80 and **\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e** "
                         "`code \xe2\x86\x92 arrow` in a paragraph long enough to need several lines.\n```\n"
                         "a very long code line without any spaces at all xxxxxxxxxxxxxxxxxxxxxxxxx\n```\n- item "
                         "\xe2\x80\xa2 bullet");
    ev(d, AGENT_EV_NOTICE, "a notice\nwith two lines");
    for (int w = 8; w <= 50; w++) (void)doc_text(d, w);
    /* the layout follows appended text */
    size_t before = ui_doc_layout(d, 30);
    ev(d, AGENT_EV_ERROR, "boom");
    CHECK(ui_doc_layout(d, 30) > before);
    ui_doc_free(d);
}

/* Narrow terminals: headers wrap between words, and a wrapped job line
 * keeps the indent of its tool block. */
TEST(ui_doc, narrow_widths_wrap_words_and_keep_indents)
{
    utf8_locale();
    ui_doc *d = ui_doc_new();
    ev(d, AGENT_EV_USER, "explain");
    ev(d, AGENT_EV_THINKING, "one\ntwo");
    ev(d, AGENT_EV_TEXT, "\n\nDone.");
    const char *t = doc_text(d, 40);
    CHECK_CONTAINS(t, "Thought for 2 lines");
    CHECK_MSG(strstr(t, "reasoning\n") != NULL, "\"reasoning\" split at 40 columns:\n%s", t);
    ui_doc_free(d);

    d = ui_doc_new();
    tool_ev(d, AGENT_EV_TOOL_START, 0, "bash", NULL, NULL);
    tool_ev(d, AGENT_EV_TOOL_PARAM, 0, "bash", "command", "make");
    tool_ev(d, AGENT_EV_TOOL_CALL, 0, "bash", NULL, "{\"command\":\"make\"}");
    agent_event r = { .type = AGENT_EV_TOOL_RESULT, .text = "job 1: exit status 0 after 12.5 s (pid 4242)",
                      .tool = "bash", .call_index = 0 };
    r.len = strlen(r.text);
    ui_doc_event(d, &r);
    t = doc_text(d, 30);
    const char *job = strstr(t, "job 1:");
    CHECK(job != NULL);
    const char *nl = strchr(job, '\n');
    CHECK(nl != NULL);
    CHECK_MSG(!strncmp(nl + 1, "    ", 4), "the job line's second row is not indented:\n%s", t);
    CHECK_CONTAINS(t, "after\n");
    ui_doc_free(d);
}
