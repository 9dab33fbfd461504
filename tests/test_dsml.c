/* DSML: the streaming parser (every state, the tolerated variants, values,
 * errors, chunking), the greedy/constrained policy, and the structural
 * mask over a synthetic vocabulary (validity, liveness, speed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "tests/dsml_util.h"
#include "tests/test.h"
#include "tests/tok_util.h"

#define BLOCK_READ                                                                     \
    "<" D "tool_calls>\n"                                                              \
    "<" D "invoke name=\"read\">\n"                                                    \
    "<" D "parameter name=\"path\" string=\"true\">/tmp/x.c</" D "parameter>\n"         \
    "<" D "parameter name=\"max_lines\" string=\"false\">10</" D "parameter>\n"         \
    "</" D "invoke>\n"                                                                 \
    "</" D "tool_calls>"

static dsml_parser *parse(const char *text, bool thinking, dsml_log *log)
{
    memset(log, 0, sizeof *log);
    return dsml_parse_chunked(dsml_test_schema(), thinking, text, strlen(text), 0, log);
}

static const char *call_args(const dsml_parser *p, size_t i)
{
    const dsml_call *c = dsml_call_at(p, i);
    CHECK(c != NULL);
    return c->args_json;
}

/* Compares two JSON texts structurally. */
static void check_json(const char *got, const char *want)
{
    struct json_object *a = json_tokener_parse(got), *b = json_tokener_parse(want);
    CHECK_MSG(a && b, "bad JSON: %s / %s", got, want);
    bool eq = json_object_equal(a, b);
    json_object_put(a);
    json_object_put(b);
    CHECK_MSG(eq, "JSON %s != %s", got, want);
}

/* ---- parser: the canonical shape ----------------------------------------------- */

TEST(dsml, canonical_block)
{
    dsml_log log;
    dsml_parser *p = parse("I will read it.\n\n" BLOCK_READ, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_STR_EQ(sb_str(&log.text), "I will read it.");
    CHECK_EQ_INT(dsml_n_calls(p), 1);
    CHECK_STR_EQ(dsml_call_at(p, 0)->name, "read");
    check_json(call_args(p, 0), "{\"path\":\"/tmp/x.c\",\"max_lines\":10}");
    CHECK_STR_EQ(sb_str(&log.seq), "BLOCK CALL(read) PARAM(path) PARAM(max_lines) "
                                   "END(read,{\"path\":\"/tmp/x.c\",\"max_lines\":10}) DONE ");
    CHECK_STR_EQ(sb_str(&log.values), "path=/tmp/x.cmax_lines=10;");
    size_t n;
    const char *st = dsml_stanza(p, &n);
    CHECK(n > 0 && !strncmp(st, "<" D "tool_calls>", 22));
    dsml_log_free(&log);
}

TEST(dsml, several_invokes_in_one_block)
{
    const char *text =
        "<" D "tool_calls>\n"
        "<" D "invoke name=\"bash\">\n"
        "<" D "parameter name=\"command\" string=\"true\">make test</" D "parameter>\n"
        "</" D "invoke>\n"
        "<" D "invoke name=\"bash_status\">\n"
        "<" D "parameter name=\"job\" string=\"false\">3</" D "parameter>\n"
        "</" D "invoke>\n"
        "</" D "tool_calls>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_EQ_INT(dsml_n_calls(p), 2);
    CHECK_STR_EQ(dsml_call_at(p, 0)->name, "bash");
    CHECK_STR_EQ(dsml_call_at(p, 1)->name, "bash_status");
    check_json(call_args(p, 0), "{\"command\":\"make test\"}");
    check_json(call_args(p, 1), "{\"job\":3}");
    CHECK_EQ_INT(log.calls, 2);
    CHECK_EQ_INT(log.call_ends, 2);
    dsml_log_free(&log);
}

TEST(dsml, zero_parameter_invoke)
{
    dsml_log log;
    dsml_parser *p = parse("<" D "tool_calls>\n<" D "invoke name=\"list\">\n</" D "invoke>\n</" D "tool_calls>",
                           false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    check_json(call_args(p, 0), "{}");
    dsml_log_free(&log);
}

/* ---- thinking --------------------------------------------------------------------- */

TEST(dsml, thinking_then_answer)
{
    dsml_log log;
    dsml_parser *p = parse("Let me think: a < b </thin k.</think>\n\n  The answer is 4.\n", true, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_OK);
    CHECK_STR_EQ(sb_str(&log.think), "Let me think: a < b </thin k.");
    CHECK_STR_EQ(sb_str(&log.text), "The answer is 4.");
    CHECK_EQ_INT(log.think_end, 1);
    CHECK(dsml_answering(p));
    dsml_log_free(&log);
}

TEST(dsml, thinking_unfinished_is_not_an_answer)
{
    dsml_log log;
    dsml_parser *p = parse("still thinking </thi", true, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_OK);
    CHECK(!dsml_answering(p));
    CHECK_STR_EQ(sb_str(&log.think), "still thinking </thi");
    CHECK_STR_EQ(sb_str(&log.text), "");
    dsml_log_free(&log);
}

TEST(dsml, dsml_inside_thinking_is_an_error)
{
    dsml_log log;
    dsml_parser *p = parse("I should call <" D "tool_calls> now</think>", true, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_ERROR);
    CHECK_EQ_INT(dsml_error_kind_of(p), DSML_ERR_IN_THINK);
    CHECK_CONTAINS(dsml_error(p), "inside <think>");
    CHECK_EQ_INT(dsml_n_calls(p), 0);
    dsml_log_free(&log);

    /* the typo form too */
    p = parse("hmm <DSML\xef\xbd\x9ctool_calls>", true, &log);
    CHECK_EQ_INT(dsml_error_kind_of(p), DSML_ERR_IN_THINK);
    dsml_log_free(&log);
}

TEST(dsml, ascii_dsml_mention_in_thinking_is_text)
{
    dsml_log log;
    dsml_parser *p = parse("the |DSML| format uses <|DSML|tool_calls> tags</think>ok", true, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_OK);
    CHECK_STR_EQ(sb_str(&log.think), "the |DSML| format uses <|DSML|tool_calls> tags");
    CHECK_STR_EQ(sb_str(&log.text), "ok");
    dsml_log_free(&log);
}

TEST(dsml, thinking_then_tool_call)
{
    dsml_log log;
    dsml_parser *p = parse("plan</think>\n\n" BLOCK_READ, true, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_STR_EQ(sb_str(&log.think), "plan");
    CHECK_STR_EQ(sb_str(&log.text), "");
    CHECK_EQ_INT(dsml_n_calls(p), 1);
    dsml_log_free(&log);
}

/* ---- tolerated variants ------------------------------------------------------------ */

TEST(dsml, opener_without_leading_bar)
{
    dsml_log log;
    const char *text = "<DSML\xef\xbd\x9ctool_calls>\n<" D "invoke name=\"bash\">\n<" D
                       "parameter name=\"command\" string=\"true\">ls</" D "parameter>\n</" D "invoke>\n</" D
                       "tool_calls>";
    dsml_parser *p = parse(text, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    check_json(call_args(p, 0), "{\"command\":\"ls\"}");
    size_t n;
    CHECK(!strncmp(dsml_stanza(p, &n), "<" D "tool_calls>", 22)); /* canonical opener recorded */
    dsml_log_free(&log);
}

TEST(dsml, implicit_invoke_closed_by_eos)
{
    dsml_log log;
    const char *text = "Running it.\n<" D "invoke name=\"bash\">\n<" D
                       "parameter name=\"command\" string=\"true\">echo hi</" D "parameter>\n</" D "invoke>\n";
    dsml_parser *p = parse(text, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_STR_EQ(sb_str(&log.text), "Running it.");
    check_json(call_args(p, 0), "{\"command\":\"echo hi\"}");
    CHECK_EQ_INT(log.done, 1);
    dsml_log_free(&log);
}

TEST(dsml, implicit_invoke_closed_by_wrapper_close)
{
    dsml_log log;
    const char *text = "<DSML\xef\xbd\x9cinvoke name=\"bash\">\n<" D
                       "parameter name=\"command\" string=\"true\">x</" D "parameter>\n</" D "invoke>\n</" D
                       "tool_calls>";
    dsml_parser *p = parse(text, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_EQ_INT(log.done, 1);
    check_json(call_args(p, 0), "{\"command\":\"x\"}");
    dsml_log_free(&log);
}

TEST(dsml, stray_whitespace_and_attribute_variants)
{
    const char *text =
        "<" D "tool_calls>\n\n  \t"
        "<" D "invoke\n   name = \"edit\" >\r\n"
        "<" D "parameter string=\"true\"  name=\"path\">a.c</" D "parameter  >\n"
        "<" D "parameter\tname=\"old\" string=\"true\">x</" D "parameter \xef\xbd\x9c >\n"
        "<" D "parameter name=\"new\"   string=\"true\"  >y</" D "parameter>"
        "</" D "invoke >   \n"
        "</" D "tool_calls\n>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    CHECK_MSG(dsml_get_state(p) == DSML_DONE, "state %d: %s", dsml_get_state(p), dsml_error(p));
    check_json(call_args(p, 0), "{\"path\":\"a.c\",\"old\":\"x\",\"new\":\"y\"}");
    dsml_log_free(&log);
}

TEST(dsml, missing_string_attribute_follows_the_schema)
{
    const char *text =
        "<" D "tool_calls>\n<" D "invoke name=\"read\">\n"
        "<" D "parameter name=\"path\">123</" D "parameter>\n"
        "<" D "parameter name=\"max_lines\">20</" D "parameter>\n"
        "<" D "parameter name=\"whole\">true</" D "parameter>\n"
        "</" D "invoke>\n</" D "tool_calls>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    /* path is a string in the schema even though it looks like a number */
    check_json(call_args(p, 0), "{\"path\":\"123\",\"max_lines\":20,\"whole\":true}");
    dsml_log_free(&log);
}

TEST(dsml, numbers_written_as_strings_are_coerced_by_schema)
{
    const char *text =
        "<" D "tool_calls>\n<" D "invoke name=\"read\">\n"
        "<" D "parameter name=\"path\" string=\"true\">f</" D "parameter>\n"
        "<" D "parameter name=\"start_line\" string=\"true\">7</" D "parameter>\n"
        "</" D "invoke>\n</" D "tool_calls>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    check_json(call_args(p, 0), "{\"path\":\"f\",\"start_line\":7}");
    dsml_log_free(&log);
}

TEST(dsml, duplicate_parameter_first_wins)
{
    const char *text =
        "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n"
        "<" D "parameter name=\"command\" string=\"true\">first</" D "parameter>\n"
        "<" D "parameter name=\"command\" string=\"true\">second</" D "parameter>\n"
        "</" D "invoke>\n</" D "tool_calls>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    check_json(call_args(p, 0), "{\"command\":\"first\"}");
    dsml_log_free(&log);
}

TEST(dsml, unknown_tool_still_parses)
{
    /* The registry answers "unknown tool" at execution; the parser only
     * checks syntax when not constrained. */
    dsml_log log;
    dsml_parser *p = parse("<" D "tool_calls>\n<" D "invoke name=\"frobnicate\">\n<" D
                           "parameter name=\"x\" string=\"false\">[1,2]</" D "parameter>\n</" D "invoke>\n</" D
                           "tool_calls>", false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_STR_EQ(dsml_call_at(p, 0)->name, "frobnicate");
    check_json(call_args(p, 0), "{\"x\":[1,2]}");
    dsml_log_free(&log);
}

/* ---- values ------------------------------------------------------------------------ */

TEST(dsml, values_keep_markup_and_code)
{
    const char *value = "<div>a < b && c > d</div>\n</ not a close\nif (x) { return \"y\"; }\n"
                        "</" D "invoke> inside a value\n\xe4\xbd\xa0\xe5\xa5\xbd";
    strbuf t = { 0 };
    sb_printf(&t, "<" D "tool_calls>\n<" D "invoke name=\"edit\">\n<" D
                  "parameter name=\"path\" string=\"true\">p</" D "parameter>\n<" D
                  "parameter name=\"old\" string=\"true\">%s</" D "parameter>\n<" D
                  "parameter name=\"new\" string=\"true\"></" D "parameter>\n</" D "invoke>\n</" D "tool_calls>",
              value);
    dsml_log log;
    dsml_parser *p = parse(sb_str(&t), false, &log);
    CHECK_MSG(dsml_get_state(p) == DSML_DONE, "%s", dsml_error(p));
    struct json_object *o = json_tokener_parse(call_args(p, 0)), *v;
    CHECK(json_object_object_get_ex(o, "old", &v));
    CHECK_STR_EQ(json_object_get_string(v), value);
    CHECK(json_object_object_get_ex(o, "new", &v));
    CHECK_STR_EQ(json_object_get_string(v), "");
    json_object_put(o);
    sb_free(&t);
    dsml_log_free(&log);
}

TEST(dsml, escaped_close_tag_in_value_is_decoded)
{
    const char *text =
        "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">"
        "echo '&lt;/" D "parameter>'</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>";
    dsml_log log;
    dsml_parser *p = parse(text, false, &log);
    struct json_object *o = json_tokener_parse(call_args(p, 0)), *v;
    CHECK(json_object_object_get_ex(o, "command", &v));
    CHECK_STR_EQ(json_object_get_string(v), "echo '</" D "parameter>'");
    json_object_put(o);
    dsml_log_free(&log);
}

TEST(dsml, json_values)
{
    static const char *const cases[][2] = {
        { "10", "10" }, { " true\n", "true" }, { "[1, \"a\"]", "[1,\"a\"]" }, { "{\"k\": {\"n\": null}}", "{\"k\":{\"n\":null}}" },
        { "", "null" }, { "-2.5e3", "-2500.0" }, { "\"quoted\"", "\"quoted\"" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[1024];
        snprintf(text, sizeof text,
                 "<" D "tool_calls>\n<" D "invoke name=\"x\">\n<" D "parameter name=\"v\" string=\"false\">%s</" D
                 "parameter>\n</" D "invoke>\n</" D "tool_calls>", cases[i][0]);
        dsml_log log;
        dsml_parser *p = parse(text, false, &log);
        CHECK_MSG(dsml_get_state(p) == DSML_DONE, "case %zu: %s", i, dsml_error(p));
        char want[256];
        snprintf(want, sizeof want, "{\"v\":%s}", cases[i][1]);
        check_json(call_args(p, 0), want);
        dsml_log_free(&log);
    }
}

TEST(dsml, invalid_json_value_is_a_syntax_error)
{
    static const char *const bad[] = { "{oops", "10 20", "tru", "[1,]", "'a'" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "<" D "tool_calls>\n<" D "invoke name=\"read\">\n<" D
                 "parameter name=\"max_lines\" string=\"false\">%s</" D "parameter>\n</" D "invoke>\n</" D
                 "tool_calls>", bad[i]);
        dsml_log log;
        dsml_parser *p = parse(text, false, &log);
        CHECK_MSG(dsml_get_state(p) == DSML_ERROR, "'%s' accepted", bad[i]);
        CHECK_EQ_INT(dsml_error_kind_of(p), DSML_ERR_SYNTAX);
        CHECK_CONTAINS(dsml_error(p), "max_lines");
        CHECK_CONTAINS(dsml_error(p), "not JSON");
        CHECK_EQ_INT(dsml_n_calls(p), 0);
        dsml_log_free(&log);
    }
}

/* ---- errors -------------------------------------------------------------------------- */

TEST(dsml, malformed_inputs)
{
    static const struct { const char *text; const char *msg; dsml_error_kind kind; } cases[] = {
        { "text <" D "parameter name=\"x\">", "outside a valid tool_calls block", DSML_ERR_SYNTAX },
        { "text </" D "invoke>", "outside a valid tool_calls block", DSML_ERR_SYNTAX },
        { "<" D "invokes name=\"x\">", "outside a valid tool_calls block", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "call name=\"x\">", "unexpected DSML tag", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<invoke name=\"x\">", "unexpected DSML tag", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\nhello", "unexpected text between DSML tags", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke>", "tool invoke without name", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"\">", "tool invoke without name", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke string=\"true\">", "tool invoke without name", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"a\">\n<" D "parameter string=\"true\">", "parameter without name", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"a\" name=\"b\">", "repeated attribute", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"a>\n", "malformed attribute", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n</" D "tool_calls>", "empty tool call block", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"a\">\n</" D "tool_callsX>", "unexpected DSML tag", DSML_ERR_SYNTAX },
        { "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">ls",
          "incomplete DSML tool call", DSML_ERR_INCOMPLETE },
        { "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n", "incomplete DSML tool call", DSML_ERR_INCOMPLETE },
        { "<" D "tool_c", "incomplete DSML tool call", DSML_ERR_INCOMPLETE },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsml_log log;
        dsml_parser *p = parse(cases[i].text, false, &log);
        CHECK_MSG(dsml_get_state(p) == DSML_ERROR, "case %zu accepted: %s", i, cases[i].text);
        CHECK_MSG(dsml_error_kind_of(p) == cases[i].kind, "case %zu kind %d", i, dsml_error_kind_of(p));
        CHECK_CONTAINS(dsml_error(p), cases[i].msg);
        CHECK_EQ_INT(log.errors, 1);
        dsml_log_free(&log);
    }
}

/* A name the mask refuses (the model's next token cannot continue any
 * name): the error names the tool, the name begun and the names there are. */
/* A stream fed so far, not finished (the parser as the sampler sees it). */
static dsml_parser *feed_only(const char *text)
{
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    dsml_feed(p, text, strlen(text));
    return p;
}

TEST(dsml, refused_names_are_named)
{
    dsml_parser *p = feed_only("<" D "tool_calls>\n<" D "invoke name=\"read\">\n<" D "parameter name=\"pa");
    CHECK(dsml_get_state(p) != DSML_ERROR);
    CHECK(dsml_refuse_name(p, "ttern\"", 6));
    CHECK_EQ_INT(dsml_get_state(p), DSML_ERROR);
    CHECK_EQ_INT(dsml_error_kind_of(p), DSML_ERR_SYNTAX);
    CHECK_STR_EQ(dsml_error(p), "read has no parameter \"pattern\"; read takes max_lines, path (required), start_line, whole");
    dsml_parser_free(p);
    /* the name not finished: what was begun */
    p = feed_only("<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"cmd");
    CHECK(dsml_refuse_name(p, "line", 4));
    CHECK_STR_EQ(dsml_error(p), "bash has no parameter \"cmdline…\"; bash takes command (required), refresh_sec, timeout_sec");
    dsml_parser_free(p);
    /* a parameter given twice */
    p = feed_only("<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">ls</" D
                  "parameter>\n<" D "parameter name=\"");
    CHECK(dsml_refuse_name(p, "command\"", 8));
    CHECK_CONTAINS(dsml_error(p), "the bash call gives the parameter \"command\" twice");
    dsml_parser_free(p);
    /* a tool name */
    p = feed_only("<" D "tool_calls>\n<" D "invoke name=\"gre");
    CHECK(dsml_refuse_name(p, "p\"", 2));
    CHECK_STR_EQ(dsml_error(p), "there is no tool named \"grep\"; the tools are bash, bash_status, edit, list, read");
    dsml_parser_free(p);
    /* outside a name: the mask steers, nothing is refused */
    p = feed_only("<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">l");
    CHECK(!dsml_refuse_name(p, "s", 1));
    CHECK(dsml_get_state(p) != DSML_ERROR);
    dsml_parser_free(p);
}

TEST(dsml, prose_that_resembles_markup_stays_text)
{
    static const char *const texts[] = {
        "a <b> tag and </b> and <｜User｜> and <DSML and <D and </",
        "use x < y and <\xef\xbd\x9c" "DS",  /* cut before the marker is whole */
        "fullwidth \xef\xbd\x9c" "DSML\xef\xbd\x9c alone is a mention",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        dsml_log log;
        dsml_parser *p = parse(texts[i], false, &log);
        CHECK_MSG(dsml_get_state(p) == DSML_OK, "case %zu: %s", i, dsml_error(p));
        CHECK_STR_EQ(sb_str(&log.text), texts[i]);
        dsml_log_free(&log);
    }
}

TEST(dsml, bytes_after_done_are_ignored)
{
    dsml_log log;
    dsml_parser *p = parse(BLOCK_READ "\n\nand more text <" D "tool_calls>", false, &log);
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK_EQ_INT(dsml_n_calls(p), 1);
    CHECK_EQ_INT(log.done, 1);
    dsml_log_free(&log);
}

TEST(dsml, reset_starts_a_new_round)
{
    dsml_log log = { 0 };
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, dsml_log_event, &log);
    dsml_feed(p, BLOCK_READ, strlen(BLOCK_READ));
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    dsml_parser_reset(p, true);
    CHECK_EQ_INT(dsml_get_state(p), DSML_OK);
    CHECK_EQ_INT(dsml_n_calls(p), 0);
    CHECK(!dsml_answering(p));
    dsml_feed(p, "x</think>y", 10);
    dsml_finish(p);
    CHECK_STR_EQ(sb_str(&log.think), "x");
    dsml_parser_free(p);
    dsml_log_free(&log);
}

/* ---- chunking and UTF-8 ---------------------------------------------------------------- */

static const char *const corpus[] = {
    "I will read it.\n\n" BLOCK_READ,
    "reasoning \xe4\xbd\xa0\xe5\xa5\xbd </thi</think>\n\xc3\xa9t\xc3\xa9 " BLOCK_READ,
    "<DSML\xef\xbd\x9cinvoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">echo \xe2\x80\x9c</" D
    "parameter >\n</" D "invoke>\n",
    "text only with < and </ and <\xef\xbd\x9c and a final newline\n\n",
    "<" D "tool_calls>\n<" D "invoke name=\"a\">\nbad",
    "think <" D " here</think>",
};

TEST(dsml, chunking_does_not_change_the_result)
{
    for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++) {
        bool thinking = i == 1 || i == 5;
        dsml_log whole = { 0 };
        dsml_parser *pw = dsml_parse_chunked(dsml_test_schema(), thinking, corpus[i], strlen(corpus[i]), 0, &whole);
        for (size_t chunk = 1; chunk <= 7; chunk++) {
            dsml_log part = { 0 };
            dsml_parser *pp = dsml_parse_chunked(dsml_test_schema(), thinking, corpus[i], strlen(corpus[i]), chunk, &part);
            CHECK_EQ_INT(dsml_get_state(pp), dsml_get_state(pw));
            CHECK_STR_EQ(sb_str(&part.text), sb_str(&whole.text));
            CHECK_STR_EQ(sb_str(&part.think), sb_str(&whole.think));
            CHECK_STR_EQ(sb_str(&part.seq), sb_str(&whole.seq));
            CHECK_STR_EQ(sb_str(&part.values), sb_str(&whole.values));
            CHECK_STR_EQ(dsml_error(pp), dsml_error(pw));
            dsml_log_free(&part);
        }
        dsml_log_free(&whole);
    }
}

static bool utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80) return false;
        i += k;
    }
    return true;
}

static void check_chunk_utf8(void *ud, const dsml_event *ev)
{
    (void)ud;
    if ((ev->type == DSML_EV_TEXT || ev->type == DSML_EV_THINK) && !utf8_valid(ev->text, ev->len))
        FAIL("event %d split a UTF-8 sequence: %.*s", ev->type, (int)ev->len, ev->text);
}

TEST(dsml, text_events_never_split_utf8)
{
    const char *text = "\xe4\xbd\xa0\xe5\xa5\xbd\xf0\x9f\x98\x80 \xc3\xa9</think>\xe2\x80\x9cquote\xe2\x80\x9d \xef\xbd\x9c";
    dsml_parser *p = dsml_parser_new(NULL, true, check_chunk_utf8, NULL);
    for (size_t i = 0; text[i]; i++) dsml_feed(p, text + i, 1);
    dsml_finish(p);
    dsml_parser_free(p);
}

/* ---- sampling policy ----------------------------------------------------------------- */

TEST(dsml, greedy_and_constrained_follow_the_structure)
{
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
#define FEED(s) dsml_feed(p, s, strlen(s))
    FEED("Some prose ");
    CHECK(!dsml_wants_greedy(p) && !dsml_constrained(p));
    FEED("<");
    CHECK(!dsml_wants_greedy(p)); /* a lone '<' is too common */
    FEED("\xef\xbd");
    CHECK(dsml_wants_greedy(p) && !dsml_constrained(p));
    FEED("\x9c" "DSML\xef\xbd\x9c");
    CHECK(dsml_wants_greedy(p) && dsml_constrained(p));
    FEED("tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"command\" string=\"true\">");
    CHECK_EQ_INT(dsml_get_state(p), DSML_IN_BLOCK);
    CHECK(!dsml_wants_greedy(p) && !dsml_constrained(p)); /* the value is free */
    FEED("ls <");
    CHECK(!dsml_wants_greedy(p));
    FEED("/");
    CHECK(dsml_wants_greedy(p) && !dsml_constrained(p)); /* "</" may be HTML */
    FEED("div");
    CHECK(!dsml_wants_greedy(p));
    FEED("</" D);
    CHECK(dsml_wants_greedy(p) && dsml_constrained(p)); /* a close tag has begun */
    FEED("parameter>\n");
    CHECK(dsml_wants_greedy(p) && dsml_constrained(p));
    FEED("</" D "invoke>\n</" D "tool_calls>");
    CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
    CHECK(!dsml_wants_greedy(p) && !dsml_constrained(p));
#undef FEED
    dsml_parser_free(p);
}

TEST(dsml, thinking_is_never_constrained)
{
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), true, NULL, NULL);
    dsml_feed(p, "<\xef\xbd", 3);
    CHECK(!dsml_wants_greedy(p) && !dsml_constrained(p));
    dsml_parser_free(p);
}

/* ---- mask ------------------------------------------------------------------------------ */

typedef struct {
    synth_vocab *sv;
    dsml_vocab *v;
    dsml_masker *m;
} mask_fixture;

static void fixture_init(mask_fixture *f, int extra)
{
    f->sv = synth_vocab_new(extra, 12345);
    f->v = synth_dsml_vocab(f->sv);
    f->m = dsml_masker_new(f->v, dsml_test_schema());
}

static void fixture_free(mask_fixture *f)
{
    dsml_masker_free(f->m);
    dsml_vocab_free(f->v);
    synth_vocab_free(f->sv);
}

static bool allowed(mask_fixture *f, dsml_parser *p, const char *tok)
{
    int32_t id = strcmp(tok, D) ? synth_find(f->sv, tok) : f->sv->dsml;
    CHECK_MSG(id >= 0, "no token '%s'", tok);
    const int32_t *ids;
    int n = dsml_mask_allowed(f->m, p, &ids);
    CHECK_MSG(n >= 0, "not constrained before '%s'", tok);
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

TEST(dsml, mask_walks_a_canonical_call)
{
    mask_fixture f;
    fixture_init(&f, 2000);
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    dsml_feed(p, "Reading.\n\n<", 11);
    CHECK(dsml_constrained(p) == false);
    dsml_feed(p, D, 10);
    /* each step: the canonical piece is allowed, plausible wrong ones are not */
    static const char *const path[][2] = {
        { "tool", "read" }, { "_c", "_status" }, { "alls", "tool" }, { ">\n", " name" }, { "<", "inv" },
        { D, "｜" }, { "inv", "parameter" }, { "oke", "alls" }, { " name", "\n" }, { "=\"", " " },
        { "re", "pa" }, { "ad", "_status" }, { "\">\n", "\"\"" }, { "<", "x" }, { D, "/" },
        { "parameter", "invoke" }, { " name", " string" }, { "=\"", "\"" }, { "pa", "old" }, { "th", "x" },
        { "\"", "\">" }, { " string", " name" }, { "=\"", "\">" }, { "true", "false" }, { "\">", ">" },
    };
    for (size_t i = 0; i < sizeof path / sizeof path[0]; i++) {
        CHECK_MSG(allowed(&f, p, path[i][0]), "step %zu: '%s' masked", i, path[i][0]);
        CHECK_MSG(!allowed(&f, p, path[i][1]), "step %zu: '%s' allowed", i, path[i][1]);
        dsml_feed(p, path[i][0], strlen(path[i][0]));
    }
    CHECK(!dsml_constrained(p)); /* inside the value */
    dsml_feed(p, "/tmp/x.c</", 10);
    CHECK(!dsml_constrained(p));
    dsml_feed(p, D, 10);
    CHECK(dsml_constrained(p));
    CHECK(allowed(&f, p, "parameter>\n"));
    CHECK(!allowed(&f, p, "tool"));
    dsml_feed(p, "parameter>\n", 11);
    /* required parameters are in, so closing is allowed; path was given
     * already, so it cannot be repeated */
    dsml_feed(p, "<", 1);
    CHECK(allowed(&f, p, "/"));
    dsml_feed(p, D, 10);
    CHECK(allowed(&f, p, "parameter"));
    dsml_feed(p, "parameter name=\"", 16);
    CHECK(!allowed(&f, p, "pa"));
    CHECK(allowed(&f, p, "max"));
    CHECK(allowed(&f, p, "start"));
    CHECK(allowed(&f, p, "whole"));
    dsml_feed(p, "max_lines\" string=\"", 19);
    CHECK(allowed(&f, p, "false"));
    CHECK(!allowed(&f, p, "true")); /* an integer is JSON */
    const char *rest = "false\">10</" D "parameter>\n</" D "invoke>\n</" D "tool_calls";
    dsml_feed(p, rest, strlen(rest));
    CHECK(allowed(&f, p, ">"));
    CHECK(allowed(&f, p, ">\n"));
    CHECK(!allowed(&f, p, ">>"));
    dsml_parser_free(p);
    fixture_free(&f);
}

TEST(dsml, mask_keeps_scalars_within_bounds)
{
    mask_fixture f;
    fixture_init(&f, 0);
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    const char *pre = "<" D "tool_calls>\n<" D "invoke name=\"read\">\n<" D "parameter name=\"max_lines\" string=\"false\">";
    dsml_feed(p, pre, strlen(pre));
    CHECK(dsml_constrained(p) && !dsml_wants_greedy(p)); /* checked, yet sampled freely */
    CHECK(!allowed(&f, p, "<")); /* no value yet */
    CHECK(!allowed(&f, p, "x"));
    CHECK(allowed(&f, p, "1"));
    dsml_feed(p, "123456789012345678", 18); /* 18 digits: an int64 */
    CHECK(!allowed(&f, p, "1"));
    CHECK(allowed(&f, p, "<"));
    CHECK(!allowed(&f, p, "."));
    dsml_parser_free(p);

    p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    pre = "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D "parameter name=\"refresh_sec\" string=\"false\">2.5e";
    dsml_feed(p, pre, strlen(pre));
    CHECK(!allowed(&f, p, "<")); /* an exponent needs a digit */
    dsml_feed(p, "-1", 2);
    CHECK(allowed(&f, p, "0"));
    dsml_feed(p, "0", 1);
    CHECK(!allowed(&f, p, "0")); /* at most two exponent digits */
    CHECK(allowed(&f, p, "</"));
    dsml_parser_free(p);

    p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    pre = "<" D "tool_calls>\n<" D "invoke name=\"read\">\n<" D "parameter name=\"whole\" string=\"false\">";
    dsml_feed(p, pre, strlen(pre));
    CHECK(allowed(&f, p, "true"));
    CHECK(allowed(&f, p, "false"));
    CHECK(!allowed(&f, p, "1"));
    dsml_feed(p, "tr", 2);
    CHECK(!allowed(&f, p, "<"));
    dsml_parser_free(p);
    fixture_free(&f);
}

TEST(dsml, mask_forbids_closing_before_required_parameters)
{
    mask_fixture f;
    fixture_init(&f, 0);
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    const char *pre = "<" D "tool_calls>\n<" D "invoke name=\"edit\">\n<";
    dsml_feed(p, pre, strlen(pre));
    CHECK(!allowed(&f, p, "/"));
    CHECK(!allowed(&f, p, "</"));
    CHECK(allowed(&f, p, D));
    dsml_parser_free(p);
    /* and an empty block cannot be closed */
    p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    pre = "<" D "tool_calls>\n<";
    dsml_feed(p, pre, strlen(pre));
    CHECK(!allowed(&f, p, "/"));
    dsml_parser_free(p);
    fixture_free(&f);
}

TEST(dsml, mask_allows_eos_only_where_a_bare_invoke_may_end)
{
    mask_fixture f;
    fixture_init(&f, 0);
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    const char *pre = "<" D "invoke name=\"list\">\n</" D "invoke>\n";
    dsml_feed(p, pre, strlen(pre));
    CHECK(dsml_constrained(p));
    const int32_t *ids;
    int n = dsml_mask_allowed(f.m, p, &ids);
    bool eos = false;
    for (int i = 0; i < n; i++) eos |= ids[i] == f.sv->eos;
    CHECK(eos);
    dsml_parser_free(p);

    p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    pre = "<" D "tool_calls>\n<" D "invoke name=\"list\">\n</" D "invoke>\n";
    dsml_feed(p, pre, strlen(pre));
    n = dsml_mask_allowed(f.m, p, &ids);
    for (int i = 0; i < n; i++) CHECK(ids[i] != f.sv->eos);
    CHECK(n > 0);
    dsml_parser_free(p);
    fixture_free(&f);
}

TEST(dsml, mask_apply_sets_minus_infinity)
{
    mask_fixture f;
    fixture_init(&f, 500);
    dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
    const char *pre = "<" D "tool_calls>\n<" D "invoke name=\"";
    dsml_feed(p, pre, strlen(pre));
    float *logits = malloc((size_t)f.sv->n * sizeof *logits);
    for (int i = 0; i < f.sv->n; i++) logits[i] = (float)(i % 17);
    int kept = dsml_mask_apply(f.m, p, logits, f.sv->n);
    CHECK(kept > 0 && kept < f.sv->n);
    int finite = 0;
    for (int i = 0; i < f.sv->n; i++)
        if (isfinite(logits[i])) {
            finite++;
            CHECK_EQ_INT((int)logits[i], i % 17); /* allowed logits are untouched */
            size_t len;
            const char *b = synth_bytes(f.sv, i, &len);
            bool ok = false;
            for (size_t k = 0; k < dsml_test_n_schemas; k++) {
                static const char *const names[] = { "read", "edit", "bash", "bash_status", "list" };
                size_t nl = strlen(names[k]);
                size_t cmp = len < nl ? len : nl;
                if (!memcmp(b, names[k], cmp) && (len <= nl || b[nl] == '"')) ok = true;
            }
            CHECK_MSG(ok, "token '%.*s' allowed in a tool name", (int)len, b);
        }
    CHECK_EQ_INT(finite, kept);
    free(logits);
    dsml_parser_free(p);
    fixture_free(&f);
}

/* Random walks: in structure pick a random allowed token; in values pick
 * random tokens and sometimes start a close tag. Whatever happens, the
 * call parses, names a known tool, has its required parameters with the
 * schema's types, and the mask is never empty. */
TEST(dsml, mask_random_walks_always_parse)
{
    mask_fixture f;
    fixture_init(&f, 3000);
    uint64_t st = 42;
    int32_t close_tok = synth_find(f.sv, "</");
    for (int walk = 0; walk < 300; walk++) {
        dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
        dsml_feed(p, "ok\n\n<", 5);
        dsml_feed(p, D, 10);
        strbuf all = { 0 };
        sb_puts(&all, "ok\n\n<" D);
        int steps = 0;
        while (dsml_get_state(p) == DSML_IN_BLOCK || dsml_constrained(p)) {
            CHECK_MSG(++steps < 5000, "walk %d does not end", walk);
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            int32_t id;
            if (dsml_constrained(p)) {
                const int32_t *ids;
                int n = dsml_mask_allowed(f.m, p, &ids);
                CHECK_MSG(n > 0, "dead end after: %s", sb_str(&all));
                id = ids[st % (uint64_t)n];
            } else {
                id = (st % 8 == 0) ? close_tok : (st % 8 == 1) ? f.sv->dsml : (int32_t)(st % (uint64_t)f.sv->n);
                if (id == f.sv->eos || id == f.sv->bos || id == f.sv->user || id == f.sv->assistant ||
                    id == f.sv->think || id == f.sv->think_end)
                    id = 'a';
            }
            if (id == f.sv->eos) {
                dsml_finish(p);
                break;
            }
            size_t len;
            const char *b = synth_bytes(f.sv, id, &len);
            sb_append(&all, b, len);
            dsml_feed(p, b, len);
        }
        CHECK_MSG(dsml_get_state(p) == DSML_DONE, "walk %d: %s\n%s", walk, dsml_error(p), sb_str(&all));
        CHECK(dsml_n_calls(p) >= 1);
        for (size_t i = 0; i < dsml_n_calls(p); i++) {
            const dsml_call *c = dsml_call_at(p, i);
            struct json_object *o = json_tokener_parse(c->args_json), *v;
            CHECK(o != NULL);
            if (!strcmp(c->name, "read")) {
                CHECK(json_object_object_get_ex(o, "path", &v) && json_object_is_type(v, json_type_string));
            } else if (!strcmp(c->name, "edit")) {
                CHECK(json_object_object_get_ex(o, "old", &v) && json_object_object_get_ex(o, "new", &v));
            } else if (!strcmp(c->name, "bash")) {
                CHECK(json_object_object_get_ex(o, "command", &v));
            } else if (!strcmp(c->name, "bash_status")) {
                CHECK(json_object_object_get_ex(o, "job", &v));
            } else {
                CHECK_STR_EQ(c->name, "list");
            }
            json_object_put(o);
        }
        sb_free(&all);
        dsml_parser_free(p);
    }
    fixture_free(&f);
}

/* Time per masked step over a vocabulary the size of DS4's (129280 ids),
 * cold (cache misses) and warm. Reported, not asserted. */
TEST(dsml, mask_speed_full_vocabulary)
{
    mask_fixture f;
    f.sv = synth_vocab_new(129280 - 256 - 7 - 200, 777);
    f.v = synth_dsml_vocab(f.sv);
    f.m = dsml_masker_new(f.v, dsml_test_schema());
    const char *call = "<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D
                       "parameter name=\"command\" string=\"true\">x</" D "parameter>\n<" D
                       "parameter name=\"timeout_sec\" string=\"false\">5</" D "parameter>\n</" D "invoke>\n</" D
                       "tool_calls>";
    float *logits = malloc((size_t)f.sv->n * sizeof *logits);
    double cold = 0, warm = 0;
    int steps = 0;
    uint64_t first_misses = 0;
    for (int round = 0; round < 2; round++) {
        dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
        size_t n = strlen(call);
        int s = 0;
        double t0 = test_now_ms();
        for (size_t i = 0; i < n; i++) {
            if (dsml_constrained(p)) {
                for (int k = 0; k < f.sv->n; k++) logits[k] = 0;
                CHECK(dsml_mask_apply(f.m, p, logits, f.sv->n) > 0);
                s++;
            }
            dsml_feed(p, call + i, 1);
        }
        double ms = test_now_ms() - t0;
        uint64_t hits, misses;
        dsml_masker_stats(f.m, &hits, &misses);
        if (round == 0) {
            cold = ms;
            first_misses = misses;
        } else {
            warm = ms;
            CHECK_EQ_INT(misses, first_misses); /* the same call again: every state cached */
        }
        steps = s;
        CHECK_EQ_INT(dsml_get_state(p), DSML_DONE);
        dsml_parser_free(p);
    }
    fprintf(stderr, "mask over %d tokens: %d masked steps, cold %.1f us/step, warm %.1f us/step\n",
            f.sv->n, steps, cold * 1000 / steps, warm * 1000 / steps);
    free(logits);
    fixture_free(&f);
}

/* ---- the real DeepSeek vocabulary ------------------------------------------------- */

static const char *tok_bytes_cb(void *ud, int32_t id, size_t *len) { return ds4_token_bytes(ud, id, len); }

/* With DS4's own 129280-token vocabulary: the model's tokenization of
 * canonical calls passes the mask token by token, and the mask's cost per
 * structural step is measured (reported, not asserted). */
TEST(dsml, mask_on_the_real_vocabulary)
{
    ds4_tokenizer *t = tok_v3();
    int n_vocab = ds4_vocab_size(t);
    int32_t control[] = { ds4_token_special(t, DS4_TOK_BOS), ds4_token_special(t, DS4_TOK_USER),
                          ds4_token_special(t, DS4_TOK_ASSISTANT), ds4_token_special(t, DS4_TOK_THINK),
                          ds4_token_special(t, DS4_TOK_THINK_END) };
    dsml_vocab *v = dsml_vocab_new(n_vocab, tok_bytes_cb, t, ds4_token_special(t, DS4_TOK_EOS),
                                   ds4_token_special(t, DS4_TOK_DSML), control, 5);
    dsml_masker *m = dsml_masker_new(v, dsml_test_schema());
    static const char *const calls[] = {
        "I'll read it.\n\n" BLOCK_READ,
        "Running the tests.\n\n<" D "tool_calls>\n<" D "invoke name=\"bash\">\n<" D
        "parameter name=\"command\" string=\"true\">make test && echo \"done\" > /tmp/x</" D "parameter>\n<" D
        "parameter name=\"timeout_sec\" string=\"false\">600</" D "parameter>\n<" D
        "parameter name=\"refresh_sec\" string=\"false\">2.5</" D "parameter>\n</" D "invoke>\n<" D
        "invoke name=\"bash_status\">\n<" D "parameter name=\"job\" string=\"false\">1</" D "parameter>\n</" D
        "invoke>\n</" D "tool_calls>",
        "<" D "tool_calls>\n<" D "invoke name=\"edit\">\n<" D "parameter name=\"path\" string=\"true\">src/main.c</" D
        "parameter>\n<" D "parameter name=\"old\" string=\"true\">\treturn 1;\n}</" D "parameter>\n<" D
        "parameter name=\"new\" string=\"true\">\treturn 0;\n}</" D "parameter>\n</" D "invoke>\n</" D "tool_calls>",
    };
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    double ms = 0;
    int steps = 0;
    for (int round = 0; round < 2; round++) {
        for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
            ds4_tokens toks = { 0 };
            ds4_tokenize_trusted(t, calls[c], strlen(calls[c]), &toks);
            dsml_parser *p = dsml_parser_new(dsml_test_schema(), false, NULL, NULL);
            for (size_t i = 0; i < toks.n; i++) {
                if (dsml_constrained(p)) {
                    const int32_t *ids;
                    int n = dsml_mask_allowed(m, p, &ids);
                    bool ok = false;
                    for (int k = 0; k < n && !ok; k++) ok = ids[k] == toks.ids[i];
                    size_t len;
                    const char *b = ds4_token_bytes(t, toks.ids[i], &len);
                    CHECK_MSG(ok, "call %zu: token %zu '%.*s' masked", c, i, (int)len, b);
                    for (int k = 0; k < n_vocab; k++) logits[k] = 0;
                    double t0 = test_now_ms();
                    CHECK(dsml_mask_apply(m, p, logits, n_vocab) > 0);
                    ms += test_now_ms() - t0;
                    steps++;
                }
                size_t len;
                const char *b = ds4_token_bytes(t, toks.ids[i], &len);
                dsml_feed(p, b, len);
            }
            CHECK_MSG(dsml_get_state(p) == DSML_DONE, "call %zu: %s", c, dsml_error(p));
            dsml_parser_free(p);
            ds4_tokens_free(&toks);
        }
        if (round == 0) {
            uint64_t hits, misses;
            dsml_masker_stats(m, &hits, &misses);
            fprintf(stderr, "real vocabulary (%d tokens), first pass: %d masked steps, %.1f us/step (%llu cached)\n",
                    n_vocab, steps, ms * 1000 / steps, (unsigned long long)hits);
            ms = 0;
            steps = 0;
        }
    }
    fprintf(stderr, "real vocabulary, same calls again: %.1f us/step\n", ms * 1000 / steps);
    free(logits);
    dsml_masker_free(m);
    dsml_vocab_free(v);
}
