/* screen.c — one frame: the transcript pane (scrolled or following), the
 * queued messages, the status bar, the input rows, a hint line and the
 * permission dialog on top. curses sends only what changed. */
#include "ui/app.h"

#include <curses.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ui/render.h"
#include "ui/status.h"
#include "ui/term.h"

#define PROMPT "\xe2\x80\xba "   /* › */
#define PROMPT_COLS 2
#define QUEUE_ROWS_MAX 3
#define DIALOG_TEXT_ROWS 6

int ui_screen_pane_height(const ui_app *app)
{
    return app->pane_h > 1 ? app->pane_h : 1;
}

static void draw_at(int row, int col, const ui_line *l)
{
    move(row, col);
    ui_term_draw_line(l);
}

/* A row filled with the style's background, then the line on it. */
static void draw_bar(int row, const ui_line *l, ui_style fill)
{
    attr_t a;
    short p;
    ui_term_style(fill, &a, &p);
    attr_set(a, p, NULL);
    mvhline(row, 0, ' ', COLS);
    attr_set(A_NORMAL, 0, NULL);
    draw_at(row, 0, l);
}

static void draw_queue(ui_app *app, int row, int rows)
{
    size_t total = app->steered.n + app->held.n, shown = 0;
    for (size_t i = 0; i < total && (int)shown < rows; i++) {
        const char *t = i < app->steered.n ? app->steered.v[i] : app->held.v[i - app->steered.n];
        ui_line l = { 0 };
        bool last_row = (int)shown == rows - 1 && total > shown + 1;
        if (last_row) {
            char more[64];
            snprintf(more, sizeof more, "\xe2\x80\xa6 and %zu more queued", total - shown);
            ui_line_adds(&l, more, UI_C_ACCENT | UI_BOLD);
        } else {
            ui_line_adds(&l, "\xe2\xa7\x97 queued: ", UI_C_ACCENT | UI_BOLD);
            /* one row of it (enough for any width), newlines as spaces */
            char row_text[1024];
            size_t n = strlen(t) < sizeof row_text - 1 ? strlen(t) : sizeof row_text - 1;
            while (n && n < strlen(t) && ((unsigned char)t[n] & 0xc0) == 0x80) n--;
            for (size_t k = 0; k < n; k++) row_text[k] = t[k] == '\n' ? ' ' : t[k];
            ui_line_add(&l, row_text, n, UI_C_ACCENT);
        }
        ui_line_truncate(&l, COLS);
        draw_at(row + (int)shown, 0, &l);
        ui_line_free(&l);
        shown++;
    }
}

static void draw_input(ui_app *app, int row, int rows, int *cur_y, int *cur_x)
{
    ed_row *v;
    int crow, ccol;
    size_t n = ui_editor_layout(app->ed, COLS - PROMPT_COLS, &v, &crow, &ccol);
    int first = crow >= rows ? crow - rows + 1 : 0;
    const char *text = ui_editor_text(app->ed);
    for (int r = 0; r < rows && (size_t)(first + r) < n; r++) {
        ed_row *er = &v[first + r];
        ui_line l = { 0 };
        bool starts_line = er->start == 0 || text[er->start - 1] == '\n';
        ui_line_adds(&l, first + r == 0 ? PROMPT : starts_line ? "\xc2\xb7 " : "  ",
                     (ui_style)(UI_C_ACCENT | UI_BOLD));
        /* a tab is one column here, as the editor counts it */
        for (size_t i = er->start; i < er->end;) {
            const char *tab = memchr(text + i, '\t', er->end - i);
            size_t upto = tab ? (size_t)(tab - text) : er->end;
            ui_line_add(&l, text + i, upto - i, 0);
            if (tab) ui_line_adds(&l, "\xe2\x90\x89", UI_C_MUTED);
            i = tab ? upto + 1 : upto;
        }
        draw_at(row + r, 0, &l);
        ui_line_free(&l);
    }
    if (ui_editor_empty(app->ed)) {
        ui_line l = { 0 };
        ui_line_adds(&l, ui_app_busy(app) ? "Type to queue a message for the model" : "Ask anything, or /help",
                     UI_C_MUTED);
        draw_at(row, PROMPT_COLS, &l);
        ui_line_free(&l);
    }
    *cur_y = row + crow - first;
    *cur_x = PROMPT_COLS + ccol;
    free(v);
}

static void box_row(line_list *out, const ui_line *content, int inner)
{
    ui_line l = { 0 };
    ui_line_adds(&l, "\xe2\x94\x82 ", UI_C_NOTICE | UI_BOLD);
    if (content) ui_line_add_range(&l, content, 0, content->len);
    int pad = inner - (content ? content->width : 0);
    for (int i = 0; i < pad; i++) ui_line_adds(&l, " ", 0);
    ui_line_adds(&l, " \xe2\x94\x82", UI_C_NOTICE | UI_BOLD);
    ui_lines_push(out, &l);
}

static void box_edge(line_list *out, const char *left, const char *title, const char *right, int inner)
{
    ui_line l = { 0 };
    ui_line_adds(&l, left, UI_C_NOTICE | UI_BOLD);
    int used = 0;
    if (title) {
        ui_line_adds(&l, title, UI_C_NOTICE | UI_BOLD);
        used = ui_text_width(title, strlen(title));
    }
    for (int i = used; i < inner + 2; i++) ui_line_adds(&l, "\xe2\x94\x80", UI_C_NOTICE | UI_BOLD);
    ui_line_adds(&l, right, UI_C_NOTICE | UI_BOLD);
    ui_lines_push(out, &l);
}

static void draw_dialog(ui_app *app, int pane_h)
{
    int width = COLS - 4 > 76 ? 76 : COLS - 4;
    if (width < 20) width = COLS;
    int inner = width - 4;
    if (inner < 4) return;
    line_list rows = { 0 };
    char title[160];
    snprintf(title, sizeof title, "\xe2\x94\x80 Allow %s? ", app->confirm_tool[0] ? app->confirm_tool : "this call");
    box_edge(&rows, "\xe2\x95\xad", title, "\xe2\x95\xae", inner);
    line_list text = { 0 };
    ui_line para = { 0 };
    ui_line_adds(&para, app->confirm_text ? app->confirm_text : "", UI_BOLD);
    ui_wrap_para(&text, &para, inner, NULL, true);
    ui_line_free(&para);
    for (size_t i = 0; i < text.n && i < DIALOG_TEXT_ROWS; i++) box_row(&rows, &text.v[i], inner);
    ui_lines_free(&text);
    box_row(&rows, NULL, inner);
    static const char *const labels[] = { "[n] No", "[y] Yes", "[a] Always" };
    static const int order[] = { 1, 0, 2 };
    ui_line opts = { 0 };
    for (int k = 0; k < 3; k++) {
        int i = order[k];
        if (k) ui_line_adds(&opts, "   ", 0);
        ui_line_adds(&opts, labels[i], i == app->confirm_choice ? (ui_style)(UI_C_ACCENT | UI_REVERSE | UI_BOLD) : 0);
    }
    double left = (app->confirm_deadline - base_now_ms()) / 1000.0;
    char cd[64];
    snprintf(cd, sizeof cd, "   no in %.0f s", left > 0 ? left + 0.499 : 0);
    ui_line_adds(&opts, cd, UI_C_MUTED);
    ui_line_truncate(&opts, inner);
    box_row(&rows, &opts, inner);
    ui_line_free(&opts);
    box_edge(&rows, "\xe2\x95\xb0", NULL, "\xe2\x95\xaf", inner);
    int top = pane_h - (int)rows.n;
    if (top < 0) top = 0;
    int x = (COLS - width) / 2;
    for (size_t i = 0; i < rows.n && top + (int)i < LINES; i++) {
        move(top + (int)i, x);
        clrtoeol();
        ui_term_draw_line(&rows.v[i]);
    }
    ui_lines_free(&rows);
}

void ui_screen_draw(ui_app *app)
{
    int H = LINES, W = COLS;
    erase();
    if (H < 3 || W < 10) {
        mvaddstr(0, 0, "ds4cl: too small");
        refresh();
        return;
    }
    ed_row *v;
    int crow, ccol;
    size_t nrows = ui_editor_layout(app->ed, W - PROMPT_COLS, &v, &crow, &ccol);
    free(v);
    int in_h = (int)nrows, in_max = H / 3 > 1 ? H / 3 : 1;
    if (in_h > in_max) in_h = in_max;
    if (in_h < 1) in_h = 1;
    size_t queued = app->steered.n + app->held.n;
    int q_h = H >= 12 ? (int)(queued < QUEUE_ROWS_MAX ? queued : QUEUE_ROWS_MAX) : 0;
    int hint_h = app->hint && H >= 8 ? 1 : 0;
    int pane_h = H - 1 - in_h - q_h - hint_h;
    if (pane_h < 1) {
        q_h = hint_h = 0;
        pane_h = H - 1 - in_h;
    }
    if (pane_h < 0) pane_h = 0;
    app->pane_h = pane_h;

    /* the transcript: while scrolled back, new output does not move it */
    size_t total = ui_doc_layout(app->doc, W);
    if (app->scroll && total > app->last_total) app->scroll += total - app->last_total;
    app->last_total = total;
    size_t max_scroll = total > (size_t)pane_h ? total - (size_t)pane_h : 0;
    if (app->scroll > max_scroll) app->scroll = max_scroll;
    size_t bottom = total - app->scroll;
    size_t top = bottom > (size_t)pane_h ? bottom - (size_t)pane_h : 0;
    for (size_t i = top; i < bottom; i++) draw_at((int)(i - top), 0, ui_doc_line(app->doc, i));
    if (app->scroll && pane_h > 0) {
        ui_line l = { 0 };
        char b[128];
        snprintf(b, sizeof b, " \xe2\x86\x93 %zu more line%s below \xc2\xb7 End follows the output ", app->scroll,
                 app->scroll == 1 ? "" : "s");
        ui_line_adds(&l, b, (ui_style)(UI_C_ACCENT | UI_REVERSE));
        ui_line_truncate(&l, W);
        move(pane_h - 1, 0);
        clrtoeol();
        ui_term_draw_line(&l);
        ui_line_free(&l);
    }
    int row = pane_h;
    if (q_h) {
        draw_queue(app, row, q_h);
        row += q_h;
    }
    ui_status_in in = {
        .st = app->st, .starting = app->starting, .resumed = app->resuming, .tool = app->tool, .queued = queued, .think = app->think,
        .model = app->cfg->model, .device = app->cfg->device, .frame = app->frame,
    };
    ui_line status = { 0 };
    ui_status_line(&in, W, &status);
    draw_bar(row++, &status, UI_C_STATUS);
    ui_line_free(&status);
    int cy, cx;
    draw_input(app, row, in_h, &cy, &cx);
    row += in_h;
    if (hint_h) {
        ui_line l = { 0 };
        ui_line_adds(&l, app->hint, UI_C_MUTED);
        ui_line_truncate(&l, W);
        draw_at(row, 0, &l);
        ui_line_free(&l);
    }
    if (app->confirm_open) draw_dialog(app, pane_h);
    if (cy >= H) cy = H - 1;
    if (cx >= W) cx = W - 1;
    move(cy, cx);
    curs_set(app->confirm_open ? 0 : 1);
    refresh();
}
