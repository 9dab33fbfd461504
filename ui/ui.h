/* ui.h — the interactive terminal front end (ncursesw).
 *
 * ui_run() owns the terminal while the agent's worker thread does the
 * work: it reads keys, sends what the user types (a message while the
 * model works is queued and read after the current tool round; Esc
 * interrupts and sends it at once), answers permission questions in a
 * timed dialog (yes / no / always, no after the timeout), runs the slash
 * commands, and draws the transcript, the status bar and the input line
 * from the agent's events and status snapshot. It never touches the
 * engine: everything goes through agent.h (and sessions.h for the session
 * commands).
 *
 * The terminal is restored on every way out: quit, an error, SIGTERM,
 * SIGHUP (the UI stops, the agent saves), and crashes (SIGSEGV, SIGABRT,
 * SIGBUS, SIGFPE, SIGILL: reset sequences written straight to the
 * terminal, a short message, then the signal's default action). While
 * the UI runs, the process's standard error goes to a log file in the
 * XDG state directory so that stray messages cannot corrupt the screen;
 * its tail is printed after the terminal is restored.
 *
 * Keys: Enter sends (queues while busy), Alt+Enter, Ctrl+J or a trailing
 * "\" newline, Esc interrupts (sending what is queued), Ctrl+C interrupts
 * or clears the input (twice quits), Ctrl+D on an empty line quits,
 * PgUp/PgDn/Home/End and the mouse wheel scroll, Ctrl+O shows or hides
 * reasoning, Tab completes commands and session IDs, Emacs keys edit,
 * Up/Down walk rows and the history.
 */
#ifndef DS4CL_UI_H
#define DS4CL_UI_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/agent.h"
#include "sessions/sessions.h"

typedef struct {
    agent **a;              /* the running agent; /switch, /new and /fork replace it */
    session **s;            /* its session; NULL when sessions are unavailable */
    agent_config *base;     /* how agents are (re)started; /think and /trace update it */
    const char *model;      /* shown in the status bar */
    const char *device;
    bool no_color;
    bool resumed;           /* show the latest turns of the session at start */
    const char *const *notes;  /* warnings to show at start (session damage, …) */
    size_t n_notes;
    const char *history_path;  /* NULL: $XDG_STATE_HOME/ds4cl/history */
} ui_config;

typedef enum {
    UI_EXIT_QUIT = 0,   /* the user quit */
    UI_EXIT_SIGNAL,     /* SIGTERM or SIGHUP: *sig says which */
    UI_EXIT_ERROR,      /* no terminal to run on: msg says why */
} ui_exit;

ui_exit ui_run(ui_config *cfg, int *sig, ds4_error *msg);

/* Whether this process can run the interface (standard input and output
 * on a terminal that can place its cursor): 0, or -1 with msg. Cheap, so
 * it comes before the model is loaded. */
int ui_terminal_check(ds4_error *msg);

/* --resume without an ID: the user picks from the list. Returns 1 with
 * the ID, 0 for a new session, -1 when the user gave up or there is no
 * terminal (msg says so). */
int ui_pick_session(const session_info *v, size_t n, bool no_color, char *id, size_t idsize, ds4_error *msg);

#endif
