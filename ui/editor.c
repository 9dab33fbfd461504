/* editor.c — the input buffer and its editing operations (see editor.h). */
#include "ui/editor.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "ui/text.h"

#define UNDO_MAX 200

typedef struct {
    char *text;
    size_t cur;
} snapshot;

struct ui_editor {
    strbuf buf;
    size_t cur;
    strbuf kill;
    ui_history *hist;
    bool walking;        /* the history is being walked */
    size_t hist_pos;     /* == hist->n: the text being written */
    char *draft;         /* that text while the history is walked */
    int goal_col;        /* kept across vertical moves; -1 none */
    snapshot undo[UNDO_MAX];
    size_t n_undo;
    bool last_insert;    /* typing coalesces into one undo step */
};

ui_editor *ui_editor_new(ui_history *history)
{
    ui_editor *e = xcalloc(1, sizeof *e);
    e->hist = history;
    e->goal_col = -1;
    sb_puts(&e->buf, "");
    return e;
}

void ui_editor_free(ui_editor *e)
{
    if (!e) return;
    sb_free(&e->buf);
    sb_free(&e->kill);
    free(e->draft);
    for (size_t i = 0; i < e->n_undo; i++) free(e->undo[i].text);
    free(e);
}

const char *ui_editor_text(const ui_editor *e) { return sb_str(&e->buf); }
size_t ui_editor_len(const ui_editor *e) { return e->buf.len; }
size_t ui_editor_cursor(const ui_editor *e) { return e->cur; }
bool ui_editor_empty(const ui_editor *e) { return e->buf.len == 0; }

static void save_undo(ui_editor *e)
{
    if (e->n_undo == UNDO_MAX) {
        free(e->undo[0].text);
        memmove(e->undo, e->undo + 1, (UNDO_MAX - 1) * sizeof *e->undo);
        e->n_undo--;
    }
    char *t = xstrdup(sb_str(&e->buf));
    e->undo[e->n_undo++] = (snapshot){ t, e->cur };
}

static void splice(ui_editor *e, size_t from, size_t to, const char *s, size_t n)
{
    strbuf nb = { 0 };
    sb_append(&nb, e->buf.s ? e->buf.s : "", from);
    sb_append(&nb, s, n);
    sb_append(&nb, e->buf.s + to, e->buf.len - to);
    if (!nb.s) sb_puts(&nb, "");
    sb_free(&e->buf);
    e->buf = nb;
    e->cur = from + n;
}

/* Text as it may enter the buffer: valid UTF-8, no control codes but
 * newlines and tabs (a pasted CRLF is one newline). */
static void clean(strbuf *out, const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = ui_utf8_decode(s + i, n - i, &cp);
        if (cp == '\r') {
            if (!(i + 1 < n && s[i + 1] == '\n')) sb_putc(out, '\n');
        } else if (cp == '\n' || cp == '\t' || !(cp < 0x20 || (cp >= 0x7f && cp < 0xa0))) {
            if (cp == 0xfffd && k == 1) sb_puts(out, "\xef\xbf\xbd");
            else sb_append(out, s + i, k);
        }
        i += k;
    }
}

void ui_editor_insert(ui_editor *e, const char *s, size_t n)
{
    strbuf c = { 0 };
    clean(&c, s, n);
    if (!c.len) {
        sb_free(&c);
        return;
    }
    bool typing = c.len <= 4 && !memchr(c.s, '\n', c.len);
    if (!typing || !e->last_insert) save_undo(e);
    e->last_insert = typing;
    splice(e, e->cur, e->cur, c.s, c.len);
    e->goal_col = -1;
    sb_free(&c);
}

void ui_editor_set(ui_editor *e, const char *s)
{
    save_undo(e);
    e->last_insert = false;
    splice(e, 0, e->buf.len, s, strlen(s));
    e->goal_col = -1;
}

void ui_editor_replace(ui_editor *e, size_t from, size_t to, const char *s)
{
    if (from > e->buf.len) from = e->buf.len;
    if (to > e->buf.len) to = e->buf.len;
    if (to < from) to = from;
    save_undo(e);
    e->last_insert = false;
    splice(e, from, to, s, strlen(s));
    e->goal_col = -1;
}

static bool word_byte(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }

static size_t line_start(const ui_editor *e, size_t i)
{
    while (i > 0 && e->buf.s[i - 1] != '\n') i--;
    return i;
}

static size_t line_end(const ui_editor *e, size_t i)
{
    while (i < e->buf.len && e->buf.s[i] != '\n') i++;
    return i;
}

static size_t word_left(const ui_editor *e, size_t i)
{
    const unsigned char *s = (const unsigned char *)e->buf.s;
    while (i > 0 && !word_byte(s[i - 1])) i--;
    while (i > 0 && word_byte(s[i - 1])) i--;
    return i;
}

static size_t word_right(const ui_editor *e, size_t i)
{
    const unsigned char *s = (const unsigned char *)e->buf.s;
    while (i < e->buf.len && !word_byte(s[i])) i++;
    while (i < e->buf.len && word_byte(s[i])) i++;
    return i;
}

static bool kill_range(ui_editor *e, size_t from, size_t to, bool append_front)
{
    if (from >= to) return false;
    save_undo(e);
    strbuf k = { 0 };
    if (append_front) {
        sb_append(&k, e->buf.s + from, to - from);
        sb_append(&k, e->kill.s ? e->kill.s : "", e->kill.len);
    } else {
        sb_append(&k, e->buf.s + from, to - from);
    }
    sb_free(&e->kill);
    e->kill = k;
    splice(e, from, to, "", 0);
    return true;
}

bool ui_editor_apply(ui_editor *e, editor_op op)
{
    size_t cur = e->cur, len = e->buf.len;
    const char *s = sb_str(&e->buf);
    bool changed = true;
    if (op != ED_UNDO) e->last_insert = false;
    e->goal_col = -1;
    switch (op) {
    case ED_LEFT:
        if (!cur) return false;
        e->cur = ui_text_prev(s, cur);
        return true;
    case ED_RIGHT:
        if (cur >= len) return false;
        e->cur = ui_text_next(s, len, cur);
        return true;
    case ED_WORD_LEFT: e->cur = word_left(e, cur); return e->cur != cur;
    case ED_WORD_RIGHT: e->cur = word_right(e, cur); return e->cur != cur;
    case ED_LINE_START: e->cur = line_start(e, cur); return e->cur != cur;
    case ED_LINE_END: e->cur = line_end(e, cur); return e->cur != cur;
    case ED_TEXT_START: e->cur = 0; return cur != 0;
    case ED_TEXT_END: e->cur = len; return cur != len;
    case ED_BACKSPACE:
        if (!cur) return false;
        save_undo(e);
        splice(e, ui_text_prev(s, cur), cur, "", 0);
        return true;
    case ED_DELETE:
        if (cur >= len) return false;
        save_undo(e);
        splice(e, cur, ui_text_next(s, len, cur), "", 0);
        return true;
    case ED_KILL_LINE_END: {
        size_t end = line_end(e, cur);
        if (end == cur && cur < len) end++; /* the newline itself */
        return kill_range(e, cur, end, false);
    }
    case ED_KILL_LINE_START: return kill_range(e, line_start(e, cur), cur, false);
    case ED_KILL_WORD_BACK: return kill_range(e, word_left(e, cur), cur, true);
    case ED_KILL_SPACE_BACK: {
        size_t i = cur;
        while (i > 0 && isspace((unsigned char)s[i - 1])) i--;
        while (i > 0 && !isspace((unsigned char)s[i - 1])) i--;
        return kill_range(e, i, cur, true);
    }
    case ED_KILL_WORD_FWD: return kill_range(e, cur, word_right(e, cur), false);
    case ED_YANK:
        if (!e->kill.len) return false;
        save_undo(e);
        splice(e, cur, cur, e->kill.s, e->kill.len);
        return true;
    case ED_TRANSPOSE: {
        /* the characters before and at the cursor swap (at the end: the
         * last two) */
        if (len < 2 || cur == 0) return false;
        size_t b = cur >= len ? ui_text_prev(s, len) : cur;
        size_t a = ui_text_prev(s, b);
        size_t c = ui_text_next(s, len, b);
        if (a == b) return false;
        save_undo(e);
        strbuf t = { 0 };
        sb_append(&t, s + b, c - b);
        sb_append(&t, s + a, b - a);
        char *swapped = sb_take(&t);
        splice(e, a, c, swapped, c - a);
        free(swapped);
        return true;
    }
    case ED_UNDO:
        if (!e->n_undo) return false;
        e->n_undo--;
        sb_clear(&e->buf);
        sb_puts(&e->buf, e->undo[e->n_undo].text);
        e->cur = e->undo[e->n_undo].cur <= e->buf.len ? e->undo[e->n_undo].cur : e->buf.len;
        free(e->undo[e->n_undo].text);
        e->last_insert = false;
        return true;
    }
    return changed;
}

bool ui_editor_history(ui_editor *e, int dir)
{
    ui_history *h = e->hist;
    if (!h) return false;
    if (!e->walking || e->hist_pos > h->n) e->hist_pos = h->n;
    if (dir < 0 && e->hist_pos == 0) return false;
    if (dir > 0 && e->hist_pos >= h->n) return false;
    if (e->hist_pos == h->n) {
        free(e->draft);
        e->draft = xstrdup(sb_str(&e->buf));
    }
    e->walking = true;
    e->hist_pos = dir < 0 ? e->hist_pos - 1 : e->hist_pos + 1;
    const char *t = e->hist_pos == h->n ? (e->draft ? e->draft : "") : h->v[e->hist_pos];
    sb_clear(&e->buf);
    sb_puts(&e->buf, t);
    /* going back lands at the top, going forward at the end */
    e->cur = dir < 0 ? line_end(e, 0) : e->buf.len;
    e->last_insert = false;
    return true;
}

char *ui_editor_take(ui_editor *e)
{
    char *t = xstrdup(sb_str(&e->buf));
    sb_clear(&e->buf);
    sb_puts(&e->buf, "");
    e->cur = 0;
    e->goal_col = -1;
    free(e->draft);
    e->draft = NULL;
    e->walking = false;
    for (size_t i = 0; i < e->n_undo; i++) free(e->undo[i].text);
    e->n_undo = 0;
    e->last_insert = false;
    return t;
}

/* ---- rows ---------------------------------------------------------------------------- */

size_t ui_editor_layout(const ui_editor *e, int cols, ed_row **rows, int *crow, int *ccol)
{
    if (cols < 1) cols = 1;
    const char *s = sb_str(&e->buf);
    size_t len = e->buf.len, n = 0, cap = 8;
    ed_row *v = xmalloc(cap * sizeof *v);
    *crow = 0;
    *ccol = 0;
    bool found = false;
    size_t i = 0;
    for (;;) {
        size_t le = i;
        while (le < len && s[le] != '\n') le++;
        size_t rs = i;
        do {
            size_t j = rs;
            int w = 0;
            while (j < le) {
                size_t k = ui_text_next(s, le, j);
                int cw = ui_text_width(s + j, k - j);
                if (w + cw > cols && j > rs) break;
                w += cw;
                j = k;
            }
            if (n == cap) {
                cap *= 2;
                v = xrealloc(v, cap * sizeof *v);
            }
            v[n] = (ed_row){ rs, j };
            if (!found && e->cur >= rs && (e->cur < j || (e->cur == j && j == le))) {
                found = true;
                *crow = (int)n;
                *ccol = ui_text_width(s + rs, e->cur - rs);
            }
            n++;
            rs = j;
        } while (rs < le);
        if (le >= len) break;
        i = le + 1;
    }
    if (*ccol >= cols) {
        /* the cursor after a full row sits at the start of the next one */
        if (n == cap) {
            v = xrealloc(v, (cap + 1) * sizeof *v);
        }
        memmove(v + *crow + 2, v + *crow + 1, (n - (size_t)*crow - 1) * sizeof *v);
        v[*crow + 1] = (ed_row){ e->cur, e->cur };
        n++;
        (*crow)++;
        *ccol = 0;
    }
    *rows = v;
    return n;
}

bool ui_editor_vertical(ui_editor *e, int dir, int cols)
{
    ed_row *rows;
    int crow, ccol;
    size_t n = ui_editor_layout(e, cols, &rows, &crow, &ccol);
    int target = crow + dir;
    if (target < 0 || (size_t)target >= n) {
        free(rows);
        return ui_editor_history(e, dir);
    }
    int goal = e->goal_col >= 0 ? e->goal_col : ccol;
    const char *s = sb_str(&e->buf);
    size_t j = rows[target].start;
    int w = 0;
    while (j < rows[target].end) {
        size_t k = ui_text_next(s, rows[target].end, j);
        int cw = ui_text_width(s + j, k - j);
        if (w + cw > goal) break;
        w += cw;
        j = k;
    }
    e->cur = j;
    e->goal_col = goal;
    e->last_insert = false;
    free(rows);
    return true;
}
