/* keys.c — what each key does (the list is in ui.h and /help). */
#include "ui/app.h"

#include <curses.h>
#include <string.h>

#include "ui/term.h"
#include "ui/text.h"

#define WHEEL_LINES 3
#define PROMPT_COLS 2

static int input_cols(void) { return COLS - PROMPT_COLS > 1 ? COLS - PROMPT_COLS : 1; }

static void scroll_by(ui_app *app, long delta)
{
    if (delta < 0 && (size_t)-delta > app->scroll) app->scroll = 0;
    else app->scroll = (size_t)((long)app->scroll + delta);
    app->dirty = true; /* the screen clamps it */
}

static void insert_char(ui_app *app, wint_t wc)
{
    char enc[4];
    size_t n = ui_utf8_encode((uint32_t)wc, enc);
    ui_editor_insert(app->ed, enc, n);
}

static void enter(ui_app *app)
{
    const char *t = ui_editor_text(app->ed);
    size_t len = ui_editor_len(app->ed);
    /* a trailing backslash continues the message on a new line */
    if (len && t[len - 1] == '\\' && ui_editor_cursor(app->ed) == len) {
        ui_editor_apply(app->ed, ED_BACKSPACE);
        ui_editor_insert(app->ed, "\n", 1);
        return;
    }
    ui_app_submit(app);
}

static void escape(ui_app *app)
{
    if (ui_app_busy(app)) {
        bool queued = app->steered.n > 0;
        ui_app_interrupt(app, true);
        ui_app_hint(app, queued ? "Interrupted; the queued message goes next." : "Interrupted.");
    } else if (app->hint) {
        app->hint_until = 0;
    } else if (app->scroll) {
        app->scroll = 0;
    }
    app->dirty = true;
}

/* Alt+key arrives as Esc then the key, both already read. */
static void alt_key(ui_app *app, int r, wint_t wc)
{
    if (r == KEY_CODE_YES) {
        if (wc == KEY_BACKSPACE) ui_editor_apply(app->ed, ED_KILL_WORD_BACK);
        else if (wc == KEY_ENTER) ui_editor_insert(app->ed, "\n", 1);
        return;
    }
    switch (wc) {
    case '\r':
    case '\n': ui_editor_insert(app->ed, "\n", 1); break;
    case 'b':
    case 'B': ui_editor_apply(app->ed, ED_WORD_LEFT); break;
    case 'f':
    case 'F': ui_editor_apply(app->ed, ED_WORD_RIGHT); break;
    case 'd':
    case 'D': ui_editor_apply(app->ed, ED_KILL_WORD_FWD); break;
    case 127:
    case 8: ui_editor_apply(app->ed, ED_KILL_WORD_BACK); break;
    case '<': ui_editor_apply(app->ed, ED_TEXT_START); break;
    case '>': ui_editor_apply(app->ed, ED_TEXT_END); break;
    case '[':
    case 'O': {
        /* a sequence curses does not know (Alt+arrows, say): skip it */
        wint_t c;
        int k;
        while ((k = get_wch(&c)) != ERR)
            if (k == OK && c >= 0x40 && c <= 0x7e) break;
        break;
    }
    default: break;
    }
}

static bool dialog_key(ui_app *app, int r, wint_t wc)
{
    static const tool_confirm answers[] = { TOOL_CONFIRM_NO, TOOL_CONFIRM_YES, TOOL_CONFIRM_ALWAYS };
    if (r == KEY_CODE_YES) {
        switch (wc) {
        case KEY_LEFT: app->confirm_choice = (app->confirm_choice + 2) % 3; break;
        case KEY_RIGHT:
        case KEY_BTAB: app->confirm_choice = (app->confirm_choice + 1) % 3; break;
        case KEY_ENTER: ui_app_answer_confirm(app, answers[app->confirm_choice]); break;
        case KEY_PPAGE:
        case KEY_NPAGE:
        case KEY_MOUSE:
        case KEY_RESIZE: return false;
        default: break;
        }
        app->dirty = true;
        return true;
    }
    switch (wc) {
    case 'y':
    case 'Y': ui_app_answer_confirm(app, TOOL_CONFIRM_YES); break;
    case 'n':
    case 'N':
    case 27: ui_app_answer_confirm(app, TOOL_CONFIRM_NO); break;
    case 'a':
    case 'A': ui_app_answer_confirm(app, TOOL_CONFIRM_ALWAYS); break;
    case '\t': app->confirm_choice = (app->confirm_choice + 1) % 3; break;
    case '\r': ui_app_answer_confirm(app, answers[app->confirm_choice]); break;
    case 3: ui_app_ctrl_c(app); break;
    default: break;
    }
    app->dirty = true;
    return true;
}

void ui_keys_handle(ui_app *app, int r, wint_t wc)
{
    app->dirty = true;
    if (app->paste) {
        if (r == KEY_CODE_YES && wc == UI_KEY_PASTE_END) {
            app->paste = false;
            ui_editor_insert(app->ed, sb_str(&app->paste_buf), app->paste_buf.len);
            sb_clear(&app->paste_buf);
        } else if (r == OK) {
            char enc[4];
            size_t n = wc == '\r' ? (enc[0] = '\n', 1) : ui_utf8_encode((uint32_t)wc, enc);
            sb_append(&app->paste_buf, enc, n);
        }
        return;
    }
    if (r == KEY_CODE_YES && wc == UI_KEY_PASTE_BEGIN) {
        app->paste = true;
        sb_clear(&app->paste_buf);
        return;
    }
    if (app->confirm_open && dialog_key(app, r, wc)) return;

    if (r == KEY_CODE_YES) {
        switch (wc) {
        case KEY_LEFT: ui_editor_apply(app->ed, ED_LEFT); break;
        case KEY_RIGHT: ui_editor_apply(app->ed, ED_RIGHT); break;
        case KEY_UP: ui_editor_vertical(app->ed, -1, input_cols()); break;
        case KEY_DOWN: ui_editor_vertical(app->ed, 1, input_cols()); break;
        case UI_KEY_CTRL_LEFT: ui_editor_apply(app->ed, ED_WORD_LEFT); break;
        case UI_KEY_CTRL_RIGHT: ui_editor_apply(app->ed, ED_WORD_RIGHT); break;
        case UI_KEY_CTRL_HOME: ui_editor_apply(app->ed, ED_TEXT_START); break;
        case UI_KEY_CTRL_END: ui_editor_apply(app->ed, ED_TEXT_END); break;
        case KEY_BACKSPACE: ui_editor_apply(app->ed, ED_BACKSPACE); break;
        case KEY_DC: ui_editor_apply(app->ed, ED_DELETE); break;
        case KEY_ENTER: enter(app); break;
        case KEY_PPAGE: scroll_by(app, ui_screen_pane_height(app) - 2); break;
        case KEY_NPAGE: scroll_by(app, -(ui_screen_pane_height(app) - 2)); break;
        case KEY_HOME: app->scroll = (size_t)-1 / 2; break;
        case KEY_END: app->scroll = 0; break;
        case KEY_MOUSE: {
            MEVENT m;
            if (getmouse(&m) == OK) {
                if (m.bstate & BUTTON4_PRESSED) scroll_by(app, WHEEL_LINES);
                else if (m.bstate & BUTTON5_PRESSED) scroll_by(app, -WHEEL_LINES);
            }
            break;
        }
        default: break; /* KEY_RESIZE: a redraw is all it needs */
        }
        return;
    }
    switch (wc) {
    case 1: ui_editor_apply(app->ed, ED_LINE_START); break;
    case 2: ui_editor_apply(app->ed, ED_LEFT); break;
    case 3: ui_app_ctrl_c(app); break;
    case 4:
        if (ui_editor_empty(app->ed)) app->quit = true;
        else ui_editor_apply(app->ed, ED_DELETE);
        break;
    case 5: ui_editor_apply(app->ed, ED_LINE_END); break;
    case 6: ui_editor_apply(app->ed, ED_RIGHT); break;
    case 7: app->hint_until = 0; break;
    case 8:
    case 127: ui_editor_apply(app->ed, ED_BACKSPACE); break;
    case '\t': ui_commands_complete(app); break;
    case '\n': ui_editor_insert(app->ed, "\n", 1); break;
    case 11: ui_editor_apply(app->ed, ED_KILL_LINE_END); break;
    case 12: clearok(curscr, TRUE); break;
    case '\r': enter(app); break;
    case 14: ui_editor_history(app->ed, 1); break;
    case 15:
        ui_doc_set_show_thinking(app->doc, !ui_doc_show_thinking(app->doc));
        ui_app_hint(app, ui_doc_show_thinking(app->doc) ? "Reasoning shown (Ctrl+O hides it)."
                                                   : "Reasoning folded (Ctrl+O shows it).");
        break;
    case 16: ui_editor_history(app->ed, -1); break;
    case 20: ui_editor_apply(app->ed, ED_TRANSPOSE); break;
    case 21: ui_editor_apply(app->ed, ED_KILL_LINE_START); break;
    case 23: ui_editor_apply(app->ed, ED_KILL_SPACE_BACK); break;
    case 25: ui_editor_apply(app->ed, ED_YANK); break;
    case 26: ui_term_suspend(); break;
    case 31: ui_editor_apply(app->ed, ED_UNDO); break;
    case 27: {
        wint_t c2;
        int r2 = get_wch(&c2);
        if (r2 == ERR) escape(app);
        else alt_key(app, r2, c2);
        break;
    }
    default:
        if (wc >= 0x20 && wc != 0x7f) insert_char(app, wc);
        break;
    }
}
