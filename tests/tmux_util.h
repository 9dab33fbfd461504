/* tmux_util.h — driving a program on a real terminal: a private tmux
 * server (its own socket, no configuration) with a shell in a window of
 * fixed size, keys sent to it, the screen read back, and bounded waits
 * for text to appear. The server is killed when the test ends, however
 * it ends; its shell also stops by itself after a while.
 *
 * Programs run under the sanitizers write their reports to files in the
 * test's temp dir (not on the screen): tmux_check_sanitizers() fails the
 * test when there are any. */
#ifndef DS4CL_TMUX_UTIL_H
#define DS4CL_TMUX_UTIL_H

#include <stdbool.h>

typedef struct {
    char sock[96];
    char target[32];
} tmux_t;

/* Starts the server with `sh` in a cols x rows window; env holds extra
 * VAR=value words for the shell's environment (or NULL). Skips the test
 * when tmux is not installed. The shell's prompt is "ds4sh$ ". */
void tmux_start(tmux_t *t, int cols, int rows, const char *env);
/* Types text literally. */
void tmux_type(tmux_t *t, const char *text);
/* Sends tmux key names ("Enter", "C-c", "Escape", "PPage", "M-Enter"). */
void tmux_keys(tmux_t *t, const char *keys);
/* The visible screen as text (runner-owned); with escapes, its colours
 * and attributes too. */
const char *tmux_screen(tmux_t *t);
const char *tmux_screen_escapes(tmux_t *t);
/* Polls the screen until it contains (or no longer contains) text;
 * fails the test with the screen after timeout_ms. Returns the screen. */
const char *tmux_wait(tmux_t *t, const char *text, int timeout_ms);
void tmux_wait_gone(tmux_t *t, const char *text, int timeout_ms);
bool tmux_alternate_screen(tmux_t *t);
void tmux_resize(tmux_t *t, int cols, int rows);
/* The pid of the shell's foreground child (the program it runs), or -1. */
int tmux_program_pid(tmux_t *t);
void tmux_kill(tmux_t *t);

/* Runs `ds4cl ARGS` in the shell, followed by "echo EXIT=$?". */
void tmux_run_ds4cl(tmux_t *t, const char *args);
/* After the program ended: the shell prompt answers, the main screen is
 * back, the tty is sane (stty -a: icanon, echo, icrnl, opost). */
void tmux_check_terminal_restored(tmux_t *t);
void tmux_check_sanitizers(void);

#endif
