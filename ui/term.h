/* term.h — the terminal under the UI (internal to ui/): curses set up and
 * torn down, colours or their monochrome stand-ins, and the signals that
 * must leave the terminal usable (see ui.h). */
#ifndef DS4CL_UI_TERM_H
#define DS4CL_UI_TERM_H

#include <stdbool.h>
#include <stddef.h>

#include <curses.h>

#include "base/base.h"
#include "ui/text.h"

/* Key codes for the bracketed-paste markers (ESC [ 200 ~ and 201 ~). */
#define UI_KEY_PASTE_BEGIN (KEY_MAX + 1)
#define UI_KEY_PASTE_END (KEY_MAX + 2)
#define UI_KEY_CTRL_LEFT (KEY_MAX + 3)
#define UI_KEY_CTRL_RIGHT (KEY_MAX + 4)
#define UI_KEY_CTRL_HOME (KEY_MAX + 5)
#define UI_KEY_CTRL_END (KEY_MAX + 6)

/* Starts curses on the process's terminal (a UTF-8 locale is selected
 * first). 0, or -1 with msg when there is no usable terminal. Calling it
 * again after ui_term_stop resumes. */
int ui_term_start(bool no_color, ds4_error *msg);
/* Restores the terminal (idempotent) and brings standard error back,
 * printing what was written to it meanwhile (its last lines). */
void ui_term_stop(void);
bool ui_term_active(void);

/* Readable when SIGTERM, SIGHUP or SIGINT arrived; ui_term_take_signal
 * returns them one by one (0: none left). */
int ui_term_signal_fd(void);
int ui_term_take_signal(void);

/* The curses attributes and colour pair of a style. */
void ui_term_style(ui_style st, attr_t *attr, short *pair);
/* Draws a styled line at the cursor. */
void ui_term_draw_line(const ui_line *l);

/* Ctrl+Z: gives the terminal back and stops the process until it is
 * continued. */
void ui_term_suspend(void);

#endif
