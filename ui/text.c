/* text.c — UTF-8, display widths and styled lines (see text.h). */
#include "ui/text.h"

#include "base/base.h"

#include <stdlib.h>
#include <string.h>
#include <wchar.h>

size_t ui_utf8_decode(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned char c = p[0];
    size_t k;
    uint32_t v;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if (c >= 0xc2 && c <= 0xdf) {
        k = 2;
        v = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        k = 3;
        v = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        k = 4;
        v = c & 0x07;
    } else {
        *cp = 0xfffd;
        return 1;
    }
    if (k > n) {
        *cp = 0xfffd;
        return 1;
    }
    for (size_t j = 1; j < k; j++) {
        if ((p[j] & 0xc0) != 0x80) {
            *cp = 0xfffd;
            return 1;
        }
        v = (v << 6) | (p[j] & 0x3f);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((k == 3 && v < 0x800) || (k == 4 && (v < 0x10000 || v > 0x10ffff)) || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = 0xfffd;
        return 1;
    }
    *cp = v;
    return k;
}

size_t ui_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

int ui_cp_width(uint32_t cp)
{
    if (cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) return 1; /* drawn as a picture */
    int w = wcwidth((wchar_t)cp);
    if (w >= 0) return w > 2 ? 2 : w;
    return 1; /* unassigned: most terminals advance one column */
}

int ui_text_width(const char *s, size_t n)
{
    int w = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += ui_utf8_decode(s + i, n - i, &cp);
        w += ui_cp_width(cp);
    }
    return w;
}

size_t ui_text_next(const char *s, size_t n, size_t i)
{
    if (i >= n) return n;
    uint32_t cp;
    i += ui_utf8_decode(s + i, n - i, &cp);
    while (i < n) {
        size_t k = ui_utf8_decode(s + i, n - i, &cp);
        if (cp < 0x20 || ui_cp_width(cp) != 0) break;
        i += k;
    }
    return i;
}

size_t ui_text_prev(const char *s, size_t i)
{
    while (i > 0) {
        size_t j = i - 1;
        while (j > 0 && ((unsigned char)s[j] & 0xc0) == 0x80) j--;
        uint32_t cp;
        size_t k = ui_utf8_decode(s + j, i - j, &cp);
        if (k != i - j) {
            /* a stray continuation byte stands alone */
            j = i - 1;
            cp = 0xfffd;
        }
        i = j;
        if (i == 0 || cp < 0x20 || ui_cp_width(cp) != 0) break;
    }
    return i;
}

uint32_t ui_control_picture(uint32_t c)
{
    if (c < 0x20) return 0x2400 + c;
    if (c == 0x7f) return 0x2421;
    return 0xfffd; /* C1 controls */
}

/* ---- styled lines ------------------------------------------------------------------ */

static void raw_add(ui_line *l, const char *s, size_t n, ui_style style, int width)
{
    if (!n) return;
    char *t = xrealloc(l->text, l->len + n + 1);
    l->text = t;
    memcpy(l->text + l->len, s, n);
    if (l->n_spans && l->spans[l->n_spans - 1].style == style &&
        l->spans[l->n_spans - 1].off + l->spans[l->n_spans - 1].len == l->len) {
        l->spans[l->n_spans - 1].len += (uint32_t)n;
    } else {
        if (l->n_spans == l->cap_spans) {
            l->cap_spans = l->cap_spans ? l->cap_spans * 2 : 4;
            l->spans = xrealloc(l->spans, l->cap_spans * sizeof *l->spans);
        }
        l->spans[l->n_spans++] = (ui_span){ (uint32_t)l->len, (uint32_t)n, style };
    }
    l->len += n;
    l->text[l->len] = 0;
    l->width += width;
}

void ui_line_add(ui_line *l, const char *s, size_t n, ui_style style)
{
    size_t i = 0, run = 0;
    int run_w = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = ui_utf8_decode(s + i, n - i, &cp);
        bool plain = !(cp < 0x20 || (cp >= 0x7f && cp < 0xa0)) && !(cp == 0xfffd && k == 1 && (unsigned char)s[i] >= 0x80);
        if (plain) {
            run_w += ui_cp_width(cp);
            i += k;
            continue;
        }
        raw_add(l, s + run, i - run, style, run_w);
        run_w = 0;
        if (cp == '\t') {
            int spaces = 4 - (l->width % 4);
            raw_add(l, "    ", (size_t)spaces, style, spaces);
        } else {
            char enc[4];
            uint32_t pic = cp == 0xfffd ? 0xfffd : ui_control_picture(cp);
            raw_add(l, enc, ui_utf8_encode(pic, enc), style, 1);
        }
        i += k;
        run = i;
    }
    raw_add(l, s + run, n - run, style, run_w);
}

void ui_line_adds(ui_line *l, const char *s, ui_style style)
{
    ui_line_add(l, s, strlen(s), style);
}

void ui_line_clear(ui_line *l)
{
    l->len = 0;
    l->n_spans = 0;
    l->width = 0;
    if (l->text) l->text[0] = 0;
}

void ui_line_free(ui_line *l)
{
    free(l->text);
    free(l->spans);
    memset(l, 0, sizeof *l);
}

void ui_line_truncate(ui_line *l, int cols)
{
    if (cols < 0) cols = 0;
    if (l->width <= cols) return;
    int room = cols >= 2 ? cols - 1 : cols; /* keep a column for "…" */
    size_t i = 0;
    int w = 0;
    while (i < l->len) {
        size_t j = ui_text_next(l->text, l->len, i);
        int cw = ui_text_width(l->text + i, j - i);
        if (w + cw > room) break;
        w += cw;
        i = j;
    }
    ui_style last = 0;
    size_t keep = 0;
    for (size_t s = 0; s < l->n_spans; s++) {
        ui_span *sp = &l->spans[s];
        if (sp->off >= i) break;
        if (sp->off + sp->len > i) sp->len = (uint32_t)(i - sp->off);
        last = sp->style;
        keep = s + 1;
    }
    l->n_spans = keep;
    l->len = i;
    l->text[i] = 0;
    l->width = w;
    if (cols >= 2) ui_line_add(l, "\xe2\x80\xa6", 3, last);
}
