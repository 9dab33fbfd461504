/* progress.h — one-line progress reports on stderr for long operations
 * (model downloads, model loading).
 *
 * On a terminal the line is redrawn in place ("\r") at most ten times a
 * second: label, bar, percentage, elapsed time and a caller-supplied detail
 * (bytes, speed, ETA). When the output is not a terminal the style decides:
 * PROGRESS_QUIET prints nothing at all (model loading in scripts), while
 * PROGRESS_LINES prints a plain line at each 10 % step or every 30 s
 * (downloads, whose logs should show that something is happening).
 */
#ifndef DS4CL_PROGRESS_H
#define DS4CL_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/base.h"

typedef enum {
    PROGRESS_QUIET = 0, /* not a terminal: say nothing */
    PROGRESS_LINES,     /* not a terminal: occasional plain lines */
} progress_style;

typedef struct {
    FILE *out;
    char label[64];
    bool tty;          /* redraw in place */
    bool lines;        /* plain lines (non-tty, PROGRESS_LINES) */
    bool drawn;        /* a tty line is on screen and needs ending */
    double t_start_ms;
    double t_last_ms;  /* last redraw / last plain line */
    int last_step;     /* last 10 % step printed in line mode */
    double fraction;
    char detail[160]; /* last detail, for the final redraw */
} progress;

/* Starts a report on stderr; the terminal check is isatty(2). */
void progress_start(progress *p, const char *label, progress_style style);

/* Same on any stream with the terminal decision made by the caller
 * (tests render both forms into files). */
void progress_start_on(progress *p, FILE *out, bool tty, const char *label, progress_style style);

/* Reports fraction (0..1, clamped; negative = unknown) with an optional
 * detail text. Cheap to call often: output is rate-limited. */
void progress_update(progress *p, double fraction, const char *detail);

/* Ends the report: on a terminal, redraws the final state and ends the
 * line; in line mode prints the summary when given. */
void progress_finish(progress *p, const char *summary);

/* Adapter for ds4_engine_options.load_progress: ud is a progress *, the
 * short label the engine passes becomes the detail text. */
void progress_load_callback(void *ud, double fraction, const char *what);

/* Prints "loaded NAME in 12.3 s" on stderr (start_ms from base_now_ms()). */
void progress_print_loaded(const char *name, double start_ms);

/* Human durations: "95 s", "9m12s", "2h03m" (byte counts: format_bytes,
 * base/base.h). Return buf. */
const char *format_duration(char *buf, size_t n, double seconds);

/* The text of one report line without the terminal control codes, e.g.
 * "download  [#######.............]  35%  0:42  1.2/3.4 GiB". */
void progress_format(char *buf, size_t n, const char *label, double fraction,
                     double elapsed_s, const char *detail, int bar_width);

#endif
