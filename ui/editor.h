/* editor.h — the input line: a multi-line UTF-8 buffer with a cursor,
 * Emacs-style editing (characters, words, lines, a kill buffer, undo),
 * movement over wrapped rows, and the input history, persisted.
 *
 * The history file holds one entry per line with "\\" and newlines
 * escaped ("\\\\", "\\n"), the newest last, at most UI_HISTORY_MAX
 * entries. Adding an entry reads the file again first, so two ds4cl
 * processes do not drop each other's entries, and replaces it atomically.
 *
 * No ncurses: keys are mapped to operations by the caller. */
#ifndef DS4CL_UI_EDITOR_H
#define DS4CL_UI_EDITOR_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

#define UI_HISTORY_MAX 1000

typedef struct {
    char **v;        /* oldest first */
    size_t n;
    char *path;      /* NULL: kept in memory only */
} ui_history;

/* Loads path (missing is empty). path NULL keeps the history in memory. */
void ui_history_open(ui_history *h, const char *path);
/* Appends text (blank text is ignored; an older identical entry moves to
 * the end). Returns -1 with err when the file cannot be written (the
 * entry is still kept in memory). */
int ui_history_add(ui_history *h, const char *text, ds4_error *err);
void ui_history_close(ui_history *h);

typedef enum {
    ED_LEFT = 0, ED_RIGHT, ED_WORD_LEFT, ED_WORD_RIGHT,
    ED_LINE_START, ED_LINE_END, ED_TEXT_START, ED_TEXT_END,
    ED_BACKSPACE, ED_DELETE,
    ED_KILL_LINE_END,    /* C-k: to the end of the line (or the newline) */
    ED_KILL_LINE_START,  /* C-u */
    ED_KILL_WORD_BACK,   /* M-Backspace */
    ED_KILL_SPACE_BACK,  /* C-w: back to the previous whitespace */
    ED_KILL_WORD_FWD,    /* M-d */
    ED_YANK,             /* C-y */
    ED_TRANSPOSE,        /* C-t */
    ED_UNDO,             /* C-_ */
} editor_op;

typedef struct ui_editor ui_editor;

ui_editor *ui_editor_new(ui_history *history);
void ui_editor_free(ui_editor *e);

const char *ui_editor_text(const ui_editor *e);
size_t ui_editor_len(const ui_editor *e);
size_t ui_editor_cursor(const ui_editor *e);
bool ui_editor_empty(const ui_editor *e);

/* Inserts at the cursor (pasted text keeps its newlines; invalid UTF-8
 * becomes U+FFFD, other control characters but tab and newline are
 * dropped). */
void ui_editor_insert(ui_editor *e, const char *s, size_t n);
/* Replaces the text, cursor at the end (undoable). */
void ui_editor_set(ui_editor *e, const char *s);
/* Replaces bytes [from, to) with s, cursor after it (completion). */
void ui_editor_replace(ui_editor *e, size_t from, size_t to, const char *s);
/* Returns false when it changed nothing. */
bool ui_editor_apply(ui_editor *e, editor_op op);

/* Moves the cursor one wrapped row up (dir -1) or down (+1), keeping its
 * column; at the first or last row, walks the history instead (the
 * unsent text is kept as the newest entry). False when neither moved. */
bool ui_editor_vertical(ui_editor *e, int dir, int cols);
/* History walking without rows (C-p / C-n). */
bool ui_editor_history(ui_editor *e, int dir);
/* Takes the text for sending: resets the buffer and the history walk. */
char *ui_editor_take(ui_editor *e);

typedef struct {
    size_t start, end;   /* bytes of the text on this row */
} ed_row;

/* The text wrapped at cols columns (each line of the text starts a row).
 * *rows is malloc'd; the cursor's row and column are returned. */
size_t ui_editor_layout(const ui_editor *e, int cols, ed_row **rows, int *crow, int *ccol);

#endif
