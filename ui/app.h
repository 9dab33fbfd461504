/* app.h — the interactive front end's state (internal to ui/): the event
 * loop (app.c) feeds keys (keys.c) and agent events into it, the slash
 * commands (commands.c) act on it, the screen (screen.c) draws it. */
#ifndef DS4CL_UI_APP_H
#define DS4CL_UI_APP_H

#include <stdbool.h>
#include <stddef.h>
#include <wchar.h>

#include "base/base.h"
#include "ui/doc.h"
#include "ui/editor.h"
#include "ui/ui.h"

#define UI_DOUBLE_PRESS_MS 2000

typedef struct {
    char **v;
    size_t n;
} str_list;

void ui_str_list_push(str_list *l, const char *s);
void ui_str_list_clear(str_list *l);
/* The texts joined by blank lines (malloc'd). */
char *ui_str_list_join(const str_list *l);

typedef struct ui_app {
    ui_config *cfg;
    ui_doc *doc;
    ui_history hist;
    ui_editor *ed;

    agent_status st;
    bool starting;          /* the system prompt is still being read */
    bool interrupting;      /* "Interrupting." is shown until the model stops */
    bool resuming;          /* … and a saved conversation after it */
    char tool[64];          /* the tool the model called last */
    ds4_think think;
    char *trace_path;       /* /trace's file, NULL when off */

    str_list held;          /* typed before the agent could take it */
    str_list steered;       /* given to the running turn, not read yet */

    /* the transcript pane */
    size_t scroll;          /* lines above the bottom; 0 follows new output */
    size_t last_total;
    int pane_h;

    /* the permission dialog */
    bool confirm_open;
    char *confirm_text;
    char confirm_tool[64];
    int confirm_choice;     /* 0 no, 1 yes, 2 always: what Enter picks */

    /* a one-line hint under the input (completions, key help) */
    char *hint;
    double hint_until;

    double ctrl_c_ms;       /* the last Ctrl+C, for "twice quits" */
    bool paste;             /* inside a bracketed paste */
    strbuf paste_buf;

    bool quit;
    int quit_signal;
    bool dirty;
    long frame;
} ui_app;

/* ---- app.c ---------------------------------------------------------------------- */

agent *ui_app_agent(ui_app *app);
bool ui_app_busy(const ui_app *app);
/* Sends what the user typed: a message (queued while busy) or a command. */
void ui_app_submit(ui_app *app);
/* Ctrl+C / Esc while busy: stop the turn; with send_queue the queued
 * text runs next, otherwise it comes back into the input line. */
void ui_app_interrupt(ui_app *app, bool send_queue);
/* Ctrl+C (or SIGINT): interrupt, or clear the input; twice quits. */
void ui_app_ctrl_c(ui_app *app);
void ui_app_hint(ui_app *app, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ui_app_banner(ui_app *app);
/* The agent changed (/switch, /new, /fork): start the picture over. */
void ui_app_agent_replaced(ui_app *app);
void ui_app_answer_confirm(ui_app *app, tool_confirm answer);
/* The session's latest max_user turns drawn into the transcript. */
void ui_app_replay_history(ui_app *app, int max_user, bool header);

/* ---- keys.c ---------------------------------------------------------------------- */

/* One key from get_wch: r is its return (OK or KEY_CODE_YES). */
void ui_keys_handle(ui_app *app, int r, wint_t wc);

/* ---- commands.c ------------------------------------------------------------------ */

/* Runs text when it is a command: 0 when it is a message, 1 when the
 * command ran, 2 when it was refused or unknown. Either way the input is
 * done with (the caller clears it; Up brings it back from the history):
 * text left in the input would prefix the next thing typed. */
int ui_commands_run(ui_app *app, const char *text);
/* Tab: completes the command or session ID under the cursor. */
void ui_commands_complete(ui_app *app);

/* ---- screen.c -------------------------------------------------------------------- */

void ui_screen_draw(ui_app *app);
/* Lines the transcript pane shows (for paging). */
int ui_screen_pane_height(const ui_app *app);

#endif
