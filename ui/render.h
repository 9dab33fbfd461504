/* render.h — the layout steps the document is built from (internal to
 * ui/): wrapping one styled paragraph, markdown, and the picture of one
 * tool call. Each appends finished lines to a line list. */
#ifndef DS4CL_UI_RENDER_H
#define DS4CL_UI_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"
#include "ui/text.h"

typedef struct {
    ui_line *v;
    size_t n, cap;
} line_list;

/* Takes ownership of l's buffers. */
void ui_lines_push(line_list *ls, ui_line *l);
void ui_lines_push_text(line_list *ls, const char *s, ui_style style);
void ui_lines_free(line_list *ls);

/* Copies bytes [a, b) of src with their styles. */
void ui_line_add_range(ui_line *dst, const ui_line *src, size_t a, size_t b);

typedef struct {
    const char *text;   /* prefix of the first line, "" for none */
    ui_style style;
    const char *more;   /* prefix of the lines that continue it */
    ui_style more_style;
} wrap_prefix;

/* Wraps para into lines of at most width columns: at spaces when words is
 * true (a longer word is cut), anywhere otherwise. An empty paragraph
 * gives one line (the prefix alone). */
void ui_wrap_para(line_list *out, const ui_line *para, int width, const wrap_prefix *pfx, bool words);

/* Inline markdown of s[0..n) appended to para in base style. With
 * open_tail, an opening delimiter that has no partner yet styles the rest
 * (text still streaming) instead of staying literal. */
void ui_md_inline(ui_line *para, const char *s, size_t n, ui_style base, bool open_tail);
/* Markdown blocks of a whole text; streaming: the text may still grow
 * (its last line is open). */
void ui_md_render(line_list *out, const char *text, size_t len, int width, ui_style base, bool streaming);
/* The same for the UI's own messages (help, lists): a fenced block keeps
 * its lines as they are, but the fences themselves are not drawn; the
 * model's answers show them, as what it wrote. */
void ui_md_render_info(line_list *out, const char *text, size_t len, int width);

/* ---- tool calls ---------------------------------------------------------- */

typedef struct {
    char *name;
    strbuf value;
} tool_param;

typedef struct {
    char *tool;
    int call;
    tool_param *params;
    size_t n_params;
    bool parsed;        /* the call is complete (arguments known) */
    strbuf progress;    /* live output, the newest part */
    bool progress_cut;  /* older output was dropped */
    char *result;
    bool done, is_error, denied, asking;
    char *not_run;      /* why it got no result */
} tool_view;

void ui_tool_view_free(tool_view *t);
/* The value of a parameter, NULL when it has not arrived. */
const char *ui_tool_param_get(const tool_view *t, const char *name);
tool_param *ui_tool_param_get_or_add(tool_view *t, const char *name);
/* Replaces the streamed parameters with the call's JSON arguments. */
void ui_tool_view_set_args(tool_view *t, const char *args_json);
void ui_tool_view_add_progress(tool_view *t, const char *s, size_t n);

void ui_tool_render(line_list *out, const tool_view *t, int width);

#endif
