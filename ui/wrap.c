/* wrap.c — line lists and wrapping by display width. */
#include "ui/render.h"

#include <stdlib.h>
#include <string.h>

void ui_lines_push(line_list *ls, ui_line *l)
{
    if (ls->n == ls->cap) {
        ls->cap = ls->cap ? ls->cap * 2 : 16;
        ls->v = xrealloc(ls->v, ls->cap * sizeof *ls->v);
    }
    if (!l->text) {
        l->text = xcalloc(1, 1);
    }
    ls->v[ls->n++] = *l;
    memset(l, 0, sizeof *l);
}

void ui_lines_push_text(line_list *ls, const char *s, ui_style style)
{
    ui_line l = { 0 };
    ui_line_adds(&l, s, style);
    ui_lines_push(ls, &l);
}

void ui_lines_free(line_list *ls)
{
    for (size_t i = 0; i < ls->n; i++) ui_line_free(&ls->v[i]);
    free(ls->v);
    memset(ls, 0, sizeof *ls);
}

void ui_line_add_range(ui_line *dst, const ui_line *src, size_t a, size_t b)
{
    for (size_t s = 0; s < src->n_spans && a < b; s++) {
        const ui_span *sp = &src->spans[s];
        size_t lo = sp->off, hi = (size_t)sp->off + sp->len;
        if (hi <= a) continue;
        if (lo >= b) break;
        if (lo < a) lo = a;
        if (hi > b) hi = b;
        ui_line_add(dst, src->text + lo, hi - lo, sp->style);
    }
}

static void emit(line_list *out, const ui_line *para, size_t a, size_t b, const char *prefix, ui_style pst)
{
    ui_line l = { 0 };
    if (prefix && *prefix) ui_line_adds(&l, prefix, pst);
    ui_line_add_range(&l, para, a, b);
    ui_lines_push(out, &l);
}

void ui_wrap_para(line_list *out, const ui_line *para, int width, const wrap_prefix *pfx, bool words)
{
    static const wrap_prefix none = { "", 0, "", 0 };
    if (!pfx) pfx = &none;
    const char *p1 = pfx->text ? pfx->text : "", *p2 = pfx->more ? pfx->more : "";
    int avail1 = width - ui_text_width(p1, strlen(p1));
    int avail2 = width - ui_text_width(p2, strlen(p2));
    /* A prefix that leaves no room is dropped rather than wrapping a
     * character per line. */
    if (avail1 < 4) {
        p1 = "";
        avail1 = width;
    }
    if (avail2 < 4) {
        p2 = "";
        avail2 = width;
    }
    if (avail1 < 1) avail1 = 1;
    if (avail2 < 1) avail2 = 1;
    const char *s = para->text ? para->text : "";
    size_t n = para->len, i = 0;
    bool first = true;
    if (n == 0) {
        emit(out, para, 0, 0, p1, pfx->style);
        return;
    }
    while (i < n) {
        int avail = first ? avail1 : avail2;
        size_t j = i, brk = 0;
        int w = 0;
        bool space_stop = false;
        while (j < n) {
            size_t k = ui_text_next(s, n, j);
            int cw = ui_text_width(s + j, k - j);
            if (w + cw > avail) {
                space_stop = s[j] == ' ';
                break;
            }
            w += cw;
            j = k;
            if (s[j - 1] == ' ') brk = j;
        }
        size_t end, next;
        if (j >= n) {
            end = next = n;
        } else if (words && space_stop && j > i) {
            end = next = j;
        } else if (words && brk > i) {
            end = next = brk;
        } else {
            if (j == i) j = ui_text_next(s, n, i); /* one character wider than the line */
            end = next = j;
        }
        if (words && next < n) {
            while (end > i && s[end - 1] == ' ') end--;
            while (next < n && s[next] == ' ') next++;
        }
        emit(out, para, i, end, first ? p1 : p2, first ? pfx->style : pfx->more_style);
        first = false;
        i = next;
    }
}
