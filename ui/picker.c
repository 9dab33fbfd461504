/* picker.c — `ds4cl --resume` without an ID: the saved sessions as a list
 * to pick from (Up/Down, PgUp/PgDn, Enter; Esc or q gives up), the first
 * row being a new session. */
#include <curses.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ui/render.h"
#include "ui/term.h"
#include "ui/ui.h"

static void draw(const session_info *v, size_t n, size_t sel, size_t *first)
{
    erase();
    int rows_per = 2, top = 3;
    int fit = (LINES - top - 1) / rows_per;
    if (fit < 1) fit = 1;
    if (sel < *first) *first = sel;
    if (sel >= *first + (size_t)fit) *first = sel - (size_t)fit + 1;
    ui_line l = { 0 };
    ui_line_adds(&l, "Resume a session \xc2\xb7 Enter picks, Esc gives up", (ui_style)(UI_C_ACCENT | UI_BOLD));
    ui_line_truncate(&l, COLS);
    move(0, 0);
    ui_term_draw_line(&l);
    ui_line_clear(&l);
    if (n) {
        /* the heads of the columns the rows below are in (their first lines) */
        char *head = sessions_format_header(v, n, 0);
        char *nl = strchr(head, '\n');
        ui_line_adds(&l, "  ", UI_C_MUTED);
        ui_line_add(&l, head, nl ? (size_t)(nl - head) : strlen(head), (ui_style)(UI_C_MUTED | UI_BOLD));
        ui_line_truncate(&l, COLS);
        move(1, 0);
        ui_term_draw_line(&l);
        ui_line_clear(&l);
        free(head);
    }
    for (size_t i = *first; i < n + 1 && (int)(i - *first) < fit; i++) {
        int y = top + (int)(i - *first) * rows_per;
        ui_style mark = i == sel ? (ui_style)(UI_C_ACCENT | UI_REVERSE | UI_BOLD) : 0;
        if (i == 0) {
            ui_line_adds(&l, i == sel ? "\xe2\x96\xb8 " : "  ", mark);
            ui_line_adds(&l, "a new session", mark);
        } else {
            /* the sessions module's own line for it: "ID  age  tokens  title\n     cwd" */
            char *text = sessions_format_list(&v[i - 1], 1, 1, NULL);
            char *nl = strchr(text, '\n');
            ui_line_adds(&l, i == sel ? "\xe2\x96\xb8 " : "  ", mark);
            ui_line_add(&l, text, nl ? (size_t)(nl - text) : strlen(text), mark);
            ui_line_truncate(&l, COLS);
            move(y, 0);
            ui_term_draw_line(&l);
            ui_line_clear(&l);
            if (nl && nl[1]) {
                size_t k = strlen(nl + 1);
                while (k && nl[1 + k - 1] == '\n') k--;
                ui_line_adds(&l, "  ", 0);
                ui_line_add(&l, nl + 1, k, UI_C_MUTED);
                y++;
            }
            free(text);
        }
        ui_line_truncate(&l, COLS);
        move(y, 0);
        ui_term_draw_line(&l);
        ui_line_clear(&l);
    }
    ui_line_free(&l);
    move(LINES - 1, 0);
    refresh();
}

int ui_pick_session(const session_info *v, size_t n, bool no_color, char *id, size_t idsize, ds4_error *msg)
{
    if (ui_term_start(no_color, msg) != 0) return -1;
    size_t sel = n ? 1 : 0, first = 0;
    int result = -2;
    curs_set(0);
    while (result == -2) {
        draw(v, n, sel, &first);
        struct pollfd p[2] = { { STDIN_FILENO, POLLIN, 0 }, { ui_term_signal_fd(), POLLIN, 0 } };
        poll(p, ui_term_signal_fd() >= 0 ? 2 : 1, 1000);
        int s;
        while ((s = ui_term_take_signal()) != 0) result = -1;
        int r;
        wint_t wc;
        while (result == -2 && (r = get_wch(&wc)) != ERR) {
            size_t page = LINES > 6 ? (size_t)(LINES - 3) / 2 : 1;
            if (r == KEY_CODE_YES) {
                if (wc == KEY_UP && sel > 0) sel--;
                else if (wc == KEY_DOWN && sel < n) sel++;
                else if (wc == KEY_PPAGE) sel = sel > page ? sel - page : 0;
                else if (wc == KEY_NPAGE) sel = sel + page < n ? sel + page : n;
                else if (wc == KEY_HOME) sel = 0;
                else if (wc == KEY_END) sel = n;
                else if (wc == KEY_ENTER) result = sel ? 1 : 0;
            } else if (wc == '\r' || wc == '\n') {
                result = sel ? 1 : 0;
            } else if (wc == 27 || wc == 'q' || wc == 3 || wc == 4) {
                result = -1;
            } else if (wc == 16 || wc == 'k') {
                if (sel > 0) sel--;
            } else if (wc == 14 || wc == 'j') {
                if (sel < n) sel++;
            }
        }
    }
    curs_set(1);
    ui_term_stop();
    if (result == 1) snprintf(id, idsize, "%s", v[sel - 1].id);
    if (result == -1) ds4_error_set(msg, "no session picked");
    return result;
}
