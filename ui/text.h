/* text.h — what the UI needs to put text on a terminal grid: UTF-8
 * decoding that never fails (a bad byte is one U+FFFD), display widths
 * (wcwidth: CJK and emoji take two columns, combining marks none), and
 * styled lines (bytes plus spans of one style each) that the document,
 * the status bar and the editor produce and the screen draws.
 *
 * Widths follow the C library's tables for the current locale, so the
 * front end selects a UTF-8 LC_CTYPE before it lays anything out. No
 * ncurses here: everything is testable without a terminal. */
#ifndef DS4CL_UI_TEXT_H
#define DS4CL_UI_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- UTF-8 --------------------------------------------------------------- */

/* Decodes the sequence at s[0..n) (n > 0): returns its length and the code
 * point in *cp. An invalid, overlong, surrogate or truncated sequence is
 * one byte long with *cp = U+FFFD. */
size_t ui_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Appends the encoding of cp (1-4 bytes) to out; returns the length. */
size_t ui_utf8_encode(uint32_t cp, char out[4]);

/* Columns a code point takes on the terminal: 0 for combining marks,
 * joiners and variation selectors, 2 for wide and emoji, else 1. Control
 * characters are never drawn raw (see text_visible): 1. */
int ui_cp_width(uint32_t cp);
/* Columns of s[0..n). */
int ui_text_width(const char *s, size_t n);

/* A character as the user sees it: a code point and the zero-width ones
 * that follow it (accents, joiners, selectors). Returns the byte offset
 * after the cluster that starts at i. */
size_t ui_text_next(const char *s, size_t n, size_t i);
/* The start of the cluster before offset i (0 when i is 0). */
size_t ui_text_prev(const char *s, size_t i);

/* The control character c as a visible picture (␀…␟, ␡), for text that
 * must never reach the terminal as a control code. */
uint32_t ui_control_picture(uint32_t c);

/* ---- styles -------------------------------------------------------------- */

/* The low byte is a colour role, the high bits attributes; the screen maps
 * roles to colours, or to attributes alone on a monochrome terminal. */
typedef uint16_t ui_style;

enum {
    UI_C_DEFAULT = 0,
    UI_C_USER,       /* the user's messages */
    UI_C_THINK,      /* reasoning */
    UI_C_CODE,       /* inline code and code blocks */
    UI_C_FENCE,      /* ``` lines */
    UI_C_HEADING,
    UI_C_TOOL,       /* tool headers while they run */
    UI_C_OK,         /* finished tools, success */
    UI_C_PATH,
    UI_C_NUMBER,
    UI_C_ADD,        /* diff: added */
    UI_C_DEL,        /* diff: removed */
    UI_C_ERROR,
    UI_C_NOTICE,
    UI_C_MUTED,      /* secondary text: results, hints */
    UI_C_ACCENT,     /* the banner, the prompt, selections */
    UI_C_STATUS,     /* the status bar */
    UI_C_BAR,        /* the filled part of a progress bar */
    UI_C_COUNT
};

#define UI_BOLD      0x0100
#define UI_ITALIC    0x0200
#define UI_DIM       0x0400
#define UI_UNDERLINE 0x0800
#define UI_REVERSE   0x1000

#define UI_ROLE(st) ((st) & 0xff)

/* ---- styled lines -------------------------------------------------------- */

typedef struct {
    uint32_t off, len;   /* bytes of the line's text */
    ui_style style;
} ui_span;

typedef struct {
    char *text;          /* NUL-terminated; never contains control codes */
    size_t len;
    ui_span *spans;
    size_t n_spans, cap_spans;
    int width;           /* columns */
} ui_line;

/* Appends text in a style, merging with the last span when the style is
 * the same. Control codes become pictures (tabs: spaces to the next
 * multiple of 4 columns); invalid UTF-8 becomes U+FFFD. */
void ui_line_add(ui_line *l, const char *s, size_t n, ui_style style);
void ui_line_adds(ui_line *l, const char *s, ui_style style);
void ui_line_free(ui_line *l);
void ui_line_clear(ui_line *l);

/* Shortens a line to at most cols columns (no half characters), ending
 * with "…" when something was cut and cols allows one. */
void ui_line_truncate(ui_line *l, int cols);

#endif
