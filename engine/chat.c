/* chat.c — DS4 chat transcripts as token ids (doc/model.md §14).
 *
 * Layout: BOS [Think Max prefix] [system text...] then per turn
 * <｜User｜> text | <｜User｜><tool_result>…</tool_result>, and
 * <｜Assistant｜> <think>|</think> … EOS. Structural tokens are pushed by id;
 * message text goes through plain BPE so that it can never produce a
 * control token; only text we render ourselves (the tool block) may be
 * trusted.
 *
 * Adjacent text must be tokenized as one string (doc/model.md §13.4), as the reference
 * tokenizer sees the rendered transcript: "….\n\n" is one token where
 * "…." + "\n\n" are two. Since the transcript is append-only token ids, a
 * system text that continues a text run (after the prefix or after other
 * system text) takes back the tokens since the last special token and
 * re-tokenizes their bytes together with the new text.
 */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/tokenizer.h"

#define THINK_MAX_MIN_CTX 393216

static const char think_max_prefix[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the "
    "root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
    "adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n"
    "\n";

static const char tool_result_open[] = "<tool_result>";
static const char tool_result_close[] = "</tool_result>";

ds4_think ds4_think_for_context(ds4_think wanted, int n_ctx)
{
    if (wanted == DS4_THINK_MAX && n_ctx < THINK_MAX_MIN_CTX) return DS4_THINK_HIGH;
    return wanted;
}

static void push_special(const ds4_tokenizer *t, ds4_tokens *out, ds4_special which)
{
    ds4_tokens_push(out, ds4_token_special(t, which));
}

/* Index of the first token of the text run that ends the transcript. */
static size_t text_run_start(const ds4_tokenizer *t, const ds4_tokens *out)
{
    size_t k = out->n;
    while (k > 0 && !tokenizer_is_special(t, out->ids[k - 1])) k--;
    return k;
}

/* Appends the bytes of out->ids[k..] to text. */
static void run_bytes(const ds4_tokenizer *t, const ds4_tokens *out, size_t k, strbuf *text)
{
    for (size_t i = k; i < out->n; i++) {
        size_t len;
        const char *b = ds4_token_bytes(t, out->ids[i], &len);
        if (b) sb_append(text, b, len);
    }
}

/* Takes back the tokens of the trailing text run, appending their bytes. */
static void take_back_run(const ds4_tokenizer *t, ds4_tokens *out, strbuf *text)
{
    size_t k = text_run_start(t, out);
    run_bytes(t, out, k, text);
    ds4_tokens_truncate(out, k);
}

/* Tokenizes plain bytes followed by more text as one run; when the more
 * text is trusted, its specials (from the first one on) are recognised,
 * never anything in the plain part. */
static void append_run(const ds4_tokenizer *t, ds4_tokens *out, strbuf *plain, const char *text, size_t len,
                       bool trusted)
{
    size_t cut = trusted ? tokenizer_first_special(text, len) : len;
    sb_append(plain, text, cut);
    ds4_tokenize(t, sb_str(plain), plain->len, out);
    if (cut < len) ds4_tokenize_trusted(t, text + cut, len - cut, out);
}

void ds4_chat_begin(const ds4_tokenizer *t, ds4_tokens *out, ds4_think mode)
{
    if (!t || !out) return;
    push_special(t, out, DS4_TOK_BOS);
    if (mode == DS4_THINK_MAX) ds4_tokenize(t, think_max_prefix, sizeof think_max_prefix - 1, out);
}

void ds4_chat_system(const ds4_tokenizer *t, ds4_tokens *out, const char *text, bool trusted)
{
    if (!t || !out || !text || !*text) return;
    strbuf run = { 0 };
    take_back_run(t, out, &run);
    append_run(t, out, &run, text, strlen(text), trusted);
    sb_free(&run);
}

void ds4_chat_user(const ds4_tokenizer *t, ds4_tokens *out, const char *text)
{
    if (!t || !out) return;
    push_special(t, out, DS4_TOK_USER);
    if (text) ds4_tokenize(t, text, strlen(text), out);
}

void ds4_chat_tool_result(const ds4_tokenizer *t, ds4_tokens *out, const char *text)
{
    if (!t || !out) return;
    /* Always a turn of its own: were a result merged into a preceding
     * wrapper, user text shaped like one could absorb it. */
    push_special(t, out, DS4_TOK_USER);
    strbuf run = { 0 };
    /* The result cannot close the wrapper early: "</tool_result>" inside it
     * is written "&lt;/tool_result>". */
    sb_puts(&run, tool_result_open);
    const char *p = text ? text : "";
    for (const char *hit; (hit = strstr(p, tool_result_close)); p = hit + 1) {
        sb_append(&run, p, (size_t)(hit - p));
        sb_puts(&run, "&lt;");
    }
    sb_puts(&run, p);
    sb_puts(&run, tool_result_close);
    ds4_tokenize(t, sb_str(&run), run.len, out);
    sb_free(&run);
}

void ds4_chat_assistant_prefix(const ds4_tokenizer *t, ds4_tokens *out, ds4_think mode)
{
    if (!t || !out) return;
    push_special(t, out, DS4_TOK_ASSISTANT);
    push_special(t, out, mode == DS4_THINK_NONE ? DS4_TOK_THINK_END : DS4_TOK_THINK);
}

void ds4_chat_assistant_end(const ds4_tokenizer *t, ds4_tokens *out)
{
    if (!t || !out) return;
    push_special(t, out, DS4_TOK_EOS);
}

static const char tools_head[] =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user question. You can invoke tools by writing a "
    "\"<｜DSML｜tool_calls>\" block like the following:\n"
    "\n"
    "<｜DSML｜tool_calls>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n"
    "\n"
    "String parameters should be specified as raw text and set `string=\"true\"`. Preserve characters such as "
    "`>`, `&`, and `&&` exactly; never replace normal string characters with XML or HTML entity escapes. Only "
    "if a string value itself contains the exact closing parameter tag `</｜DSML｜parameter>`, write that tag "
    "as `&lt;/｜DSML｜parameter>` inside the value. For all other types (numbers, booleans, arrays, objects), "
    "pass the value in JSON format and set `string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside "
    "<think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n";

static const char tools_tail[] =
    "\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls. Use the "
    "exact parameter names from the schemas.";

char *ds4_chat_tools_block(const char *const *schemas_json, size_t n)
{
    strbuf b = { 0 };
    sb_puts(&b, tools_head);
    for (size_t i = 0; i < n; i++) {
        if (i) sb_putc(&b, '\n');
        sb_puts(&b, schemas_json[i] ? schemas_json[i] : "");
    }
    sb_puts(&b, tools_tail);
    return sb_take(&b);
}
