/* markdown.c — the markdown a model writes, made readable on a terminal:
 * inline emphasis and code, fenced code blocks, headings, lists, quotes
 * and rules. Not CommonMark: a delimiter without a partner is text, and
 * nothing is ever hidden except the delimiters that were used. */
#include "ui/render.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Longer lines are shown as they are: finding partners is quadratic. */
#define MD_INLINE_MAX 4096

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static bool is_punct(char c) { return c > ' ' && c < 0x7f && !isalnum((unsigned char)c); }

/* The closing run of k backticks after i, or n. */
static size_t find_ticks(const char *s, size_t n, size_t i, size_t k)
{
    while (i < n) {
        if (s[i] != '`') {
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] == '`') j++;
        if (j - i == k) return i;
        i = j;
    }
    return n;
}

/* Code spans hide delimiters: when a span opens at *j and closes, moves
 * *j to its last backtick and says so. */
static bool skip_code_span(const char *s, size_t n, size_t *j)
{
    size_t k = 0;
    while (*j + k < n && s[*j + k] == '`') k++;
    size_t c = find_ticks(s, n, *j + k, k);
    if (c >= n) return false;
    *j = c + k - 1;
    return true;
}

/* The partner of a two-character delimiter dd at i (i is past it). */
static size_t find_double(const char *s, size_t n, size_t i, char d)
{
    for (size_t j = i; j + 1 < n; j++) {
        if (s[j] == '\\') {
            j++;
            continue;
        }
        if (s[j] == '`' && skip_code_span(s, n, &j)) continue;
        if (s[j] == d && s[j + 1] == d && j > i && !is_space(s[j - 1])) return j;
    }
    return n;
}

static size_t find_single(const char *s, size_t n, size_t i, char d)
{
    for (size_t j = i; j < n; j++) {
        if (s[j] == '\\') {
            j++;
            continue;
        }
        if (s[j] == '`' && skip_code_span(s, n, &j)) continue;
        if (s[j] != d) continue;
        if (j + 1 < n && s[j + 1] == d) {
            j++; /* a double one belongs to bold */
            continue;
        }
        if (j == i || is_space(s[j - 1])) continue;
        if (d == '_' && j + 1 < n && isalnum((unsigned char)s[j + 1])) continue;
        return j;
    }
    return n;
}

void ui_md_inline(ui_line *para, const char *s, size_t n, ui_style base, bool open_tail)
{
    if (n > MD_INLINE_MAX) {
        ui_line_add(para, s, n, base);
        return;
    }
    size_t i = 0, lit = 0;
#define FLUSH() ui_line_add(para, s + lit, i - lit, base)
    while (i < n) {
        char c = s[i];
        if (c == '\\' && i + 1 < n && is_punct(s[i + 1])) {
            FLUSH();
            ui_line_add(para, s + i + 1, 1, base);
            i += 2;
            lit = i;
            continue;
        }
        if (c == '`') {
            size_t k = 0;
            while (i + k < n && s[i + k] == '`') k++;
            size_t close = find_ticks(s, n, i + k, k);
            if (close < n || open_tail) {
                FLUSH();
                size_t a = i + k, b = close;
                if (close < n && b - a >= 2 && s[a] == ' ' && s[b - 1] == ' ') a++, b--;
                ui_line_add(para, s + a, b - a, (ui_style)((base & ~0xff) | UI_C_CODE));
                i = close < n ? close + k : n;
                lit = i;
                continue;
            }
            i += k;
            continue;
        }
        if ((c == '*' || c == '_') && i + 1 < n && s[i + 1] == c) {
            bool opens = i + 2 < n && !is_space(s[i + 2]);
            if (c == '_' && i > 0 && isalnum((unsigned char)s[i - 1])) opens = false;
            size_t close = opens ? find_double(s, n, i + 2, c) : n;
            if (opens && (close < n || open_tail)) {
                FLUSH();
                ui_md_inline(para, s + i + 2, close - (i + 2), (ui_style)(base | UI_BOLD), open_tail && close == n);
                i = close < n ? close + 2 : n;
                lit = i;
                continue;
            }
            if (open_tail && i + 2 == n) {
                /* just typed: the partner may follow */
                FLUSH();
                i = lit = n;
                continue;
            }
            i += 2;
            continue;
        }
        if (c == '*' || c == '_') {
            bool opens = i + 1 < n && !is_space(s[i + 1]);
            if (c == '_' && i > 0 && isalnum((unsigned char)s[i - 1])) opens = false;
            size_t close = opens ? find_single(s, n, i + 1, c) : n;
            if (opens && (close < n || (open_tail && c == '*'))) {
                FLUSH();
                ui_md_inline(para, s + i + 1, close - (i + 1), (ui_style)(base | UI_ITALIC), open_tail && close == n);
                i = close < n ? close + 1 : n;
                lit = i;
                continue;
            }
        }
        i++;
    }
    FLUSH();
#undef FLUSH
}

/* ---- blocks ------------------------------------------------------------------------ */

typedef struct {
    bool on;
    char ch;
    size_t len;
    bool hide;   /* the fence lines themselves are not drawn */
} fence_state;

/* A fence line: up to 3 spaces, 3+ backticks or tildes. */
static bool fence_at(const char *s, size_t n, char *ch, size_t *len)
{
    size_t i = 0;
    while (i < n && i < 3 && s[i] == ' ') i++;
    if (i >= n || (s[i] != '`' && s[i] != '~')) return false;
    char c = s[i];
    size_t k = 0;
    while (i + k < n && s[i + k] == c) k++;
    if (k < 3) return false;
    if (c == '`' && memchr(s + i + k, '`', n - i - k)) return false;
    *ch = c;
    *len = k;
    return true;
}

static bool rule_at(const char *s, size_t n)
{
    size_t i = 0, count = 0;
    char c = 0;
    while (i < n && i < 3 && s[i] == ' ') i++;
    for (; i < n; i++) {
        if (s[i] == ' ') continue;
        if (s[i] != '-' && s[i] != '*' && s[i] != '_') return false;
        if (c && s[i] != c) return false;
        c = s[i];
        count++;
    }
    return count >= 3;
}

static void render_line(line_list *out, const char *s, size_t n, int width, ui_style base, bool open, fence_state *fs)
{
    char ch;
    size_t flen;
    ui_line para = { 0 };
    if (fs->on) {
        if (fence_at(s, n, &ch, &flen) && ch == fs->ch && flen >= fs->len) {
            size_t k = 0;
            while (k < n && (s[k] == ' ' || s[k] == ch)) k++;
            if (k == n) {
                fs->on = false;
                if (fs->hide) return;
                ui_line_add(&para, s, n, UI_C_FENCE);
                ui_wrap_para(out, &para, width, NULL, false);
                ui_line_free(&para);
                return;
            }
        }
        ui_line_add(&para, s, n, UI_C_CODE);
        ui_wrap_para(out, &para, width, NULL, false);
        ui_line_free(&para);
        return;
    }
    if (fence_at(s, n, &ch, &flen)) {
        fs->on = true;
        fs->ch = ch;
        fs->len = flen;
        if (fs->hide) return;
        ui_line_add(&para, s, n, UI_C_FENCE);
        ui_wrap_para(out, &para, width, NULL, false);
        ui_line_free(&para);
        return;
    }
    size_t ind = 0;
    while (ind < n && s[ind] == ' ') ind++;
    /* headings */
    if (ind <= 3 && ind < n && s[ind] == '#') {
        size_t h = 0;
        while (ind + h < n && s[ind + h] == '#') h++;
        if (h <= 6 && (ind + h == n || s[ind + h] == ' ')) {
            size_t a = ind + h;
            while (a < n && s[a] == ' ') a++;
            size_t b = n;
            while (b > a && (s[b - 1] == '#' || s[b - 1] == ' ')) b--;
            ui_style st = (ui_style)(UI_C_HEADING | UI_BOLD | (h == 1 ? UI_UNDERLINE : 0));
            ui_md_inline(&para, s + a, b - a, st, open);
            ui_wrap_para(out, &para, width, NULL, true);
            ui_line_free(&para);
            return;
        }
    }
    if (rule_at(s, n) && n - ind >= 3 && (s[ind] != '*' || n - ind > 1)) {
        int w = width > 60 ? 60 : width;
        ui_line l = { 0 };
        for (int k = 0; k < w; k++) ui_line_add(&l, "\xe2\x94\x80", 3, UI_C_MUTED);
        ui_lines_push(out, &l);
        return;
    }
    char pfx1[64], pfx2[64];
    wrap_prefix wp = { pfx1, UI_C_MUTED, pfx2, 0 };
    size_t body = ind;
    if (ind < n && s[ind] == '>') {
        body = ind + 1;
        if (body < n && s[body] == ' ') body++;
        snprintf(pfx1, sizeof pfx1, "%*s\xe2\x96\x8e ", (int)(ind > 16 ? 16 : ind), "");
        snprintf(pfx2, sizeof pfx2, "%s", pfx1);
        wp.more_style = UI_C_MUTED;
        ui_md_inline(&para, s + body, n - body, (ui_style)(base | UI_ITALIC), open);
        ui_wrap_para(out, &para, width, &wp, true);
        ui_line_free(&para);
        return;
    }
    if (ind + 1 < n && (s[ind] == '-' || s[ind] == '*' || s[ind] == '+') && s[ind + 1] == ' ') {
        int in = (int)(ind > 24 ? 24 : ind);
        snprintf(pfx1, sizeof pfx1, "%*s\xe2\x80\xa2 ", in, "");
        snprintf(pfx2, sizeof pfx2, "%*s", in + 2, "");
        body = ind + 2;
        while (body < n && s[body] == ' ') body++;
        ui_md_inline(&para, s + body, n - body, base, open);
        ui_wrap_para(out, &para, width, &wp, true);
        ui_line_free(&para);
        return;
    }
    size_t dg = 0;
    while (ind + dg < n && isdigit((unsigned char)s[ind + dg])) dg++;
    if (dg > 0 && dg < 10 && ind + dg + 1 < n && (s[ind + dg] == '.' || s[ind + dg] == ')') && s[ind + dg + 1] == ' ') {
        int in = (int)(ind > 24 ? 24 : ind);
        snprintf(pfx1, sizeof pfx1, "%*s%.*s ", in, "", (int)dg + 1, s + ind);
        snprintf(pfx2, sizeof pfx2, "%*s", in + (int)dg + 2, "");
        wp.style = UI_C_NUMBER;
        body = ind + dg + 2;
        while (body < n && s[body] == ' ') body++;
        ui_md_inline(&para, s + body, n - body, base, open);
        ui_wrap_para(out, &para, width, &wp, true);
        ui_line_free(&para);
        return;
    }
    /* plain text keeps its indentation on the first line only */
    ui_md_inline(&para, s, n, base, open);
    ui_wrap_para(out, &para, width, NULL, true);
    ui_line_free(&para);
}

static void render_text(line_list *out, const char *text, size_t len, int width, ui_style base, bool streaming,
                        bool hide_fences)
{
    fence_state fs = { .hide = hide_fences };
    size_t i = 0;
    while (i < len || (i == 0 && len == 0)) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        size_t n = end - i;
        if (n && text[i + n - 1] == '\r') n--;
        bool last_open = streaming && !nl;
        render_line(out, text + i, n, width, base, last_open, &fs);
        if (!nl) break;
        i = end + 1;
        if (i == len) break; /* a final newline adds no line */
    }
}

void ui_md_render(line_list *out, const char *text, size_t len, int width, ui_style base, bool streaming)
{
    render_text(out, text, len, width, base, streaming, false);
}

void ui_md_render_info(line_list *out, const char *text, size_t len, int width)
{
    render_text(out, text, len, width, 0, false, true);
}
