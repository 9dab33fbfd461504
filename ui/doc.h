/* doc.h — the transcript as the user sees it: a list of blocks (the user's
 * messages, reasoning, answers, tool calls, notices, errors, command
 * output) that grow while the agent's events stream in, laid out into
 * styled lines for a given width.
 *
 * Answers and command output are markdown-ish: **bold**, *italic*,
 * `code`, fenced code blocks, headings, lists, quotes and rules;
 * delimiters without a partner stay literal, so text that is still
 * streaming reads sensibly and settles once its closing marker arrives.
 * Reasoning is dim; a finished reasoning block folds to one line unless
 * reasoning is shown (ui_doc_set_show_thinking). Tool calls are drawn from
 * their parameters as they stream: "Reading path 1:500…", an edit as
 * red and green diff lines, bash as "$ command" with a live tail of its
 * output, then the result's first lines.
 *
 * Lines wrap at spaces by display width (a word longer than the line is
 * cut), code wraps anywhere. Each block keeps its lines for the width it
 * was last laid out at, so a frame re-lays only what changed. No ncurses:
 * the screen module draws the lines. */
#ifndef DS4CL_UI_DOC_H
#define DS4CL_UI_DOC_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/agent.h"
#include "ui/text.h"

typedef struct ui_doc ui_doc;

typedef enum {
    DOC_BANNER = 0,  /* start-up lines (plain) */
    DOC_USER,        /* what the user sent */
    DOC_THINKING,
    DOC_ANSWER,      /* markdown */
    DOC_TOOL,
    DOC_NOTICE,
    DOC_ERROR,
    DOC_COMPACTION,  /* text: the summary (folds like reasoning) */
    DOC_INFO,        /* command output (markdown) */
    DOC_COMMAND,     /* a slash command the user ran (not sent to the model) */
    DOC_KINDS
} doc_kind;

ui_doc *ui_doc_new(void);
void ui_doc_free(ui_doc *d);
void ui_doc_clear(ui_doc *d);

/* Applies one agent event: text streams into the open block of its kind,
 * tool events into the block of their call. */
void ui_doc_event(ui_doc *d, const agent_event *e);

/* A finished block of the given kind (user, notice, error, info, banner,
 * answer, thinking). */
void ui_doc_add(ui_doc *d, doc_kind kind, const char *text, size_t len);
void ui_doc_adds(ui_doc *d, doc_kind kind, const char *text);
/* A finished tool call (history replay): arguments as a JSON object. */
void ui_doc_add_tool(ui_doc *d, const char *tool, const char *args_json, const char *result, bool is_error,
                  bool denied);
/* An assistant reply exactly as sampled (reasoning, "</think>", text,
 * DSML): reasoning and text become blocks, the DSML is dropped (the calls
 * come with the tool records). */
void ui_doc_add_reply(ui_doc *d, const char *raw, size_t len);

/* Ends the open reply: open blocks close (reasoning folds), tools that got
 * no result are marked as not run with the reason. */
void ui_doc_end_turn(ui_doc *d, const char *reason);

void ui_doc_set_show_thinking(ui_doc *d, bool on);
bool ui_doc_show_thinking(const ui_doc *d);

size_t ui_doc_blocks(const ui_doc *d);
doc_kind ui_doc_block_kind(const ui_doc *d, size_t i);

/* Lays every block out for width columns (≥ 8); returns the number of
 * lines (blank lines between blocks included). */
size_t ui_doc_layout(ui_doc *d, int width);
/* Line i of the last layout (an empty line between blocks). */
const ui_line *ui_doc_line(const ui_doc *d, size_t i);

/* Markdown of one block's text laid out alone (command output, tests):
 * appends the lines to *out (malloc'd array grown as needed). */
void ui_doc_render_markdown(const char *text, size_t len, int width, ui_line **out, size_t *n);

#endif
