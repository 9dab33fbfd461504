/* progress.c — stderr progress lines for downloads and model loading. */
#include "base/progress.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

#define REDRAW_INTERVAL_MS 100.0
#define LINE_INTERVAL_MS 30000.0
#define BAR_WIDTH 24

const char *format_duration(char *buf, size_t n, double seconds)
{
    if (!(seconds >= 0) || seconds > 99.0 * 86400) {
        snprintf(buf, n, "--");
        return buf;
    }
    long s = lround(seconds);
    if (s < 100) snprintf(buf, n, "%ld s", s);
    else if (s < 3600) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else if (s < 86400) snprintf(buf, n, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
    else snprintf(buf, n, "%ldd%02ldh", s / 86400, (s % 86400) / 3600);
    return buf;
}

void progress_format(char *buf, size_t n, const char *label, double fraction,
                     double elapsed_s, const char *detail, int bar_width)
{
    strbuf b = { 0 };
    sb_puts(&b, label);
    if (bar_width > 0) {
        sb_puts(&b, "  [");
        int filled = fraction >= 0 ? (int)(fraction * bar_width + 1e-9) : 0;
        if (filled > bar_width) filled = bar_width;
        for (int i = 0; i < bar_width; i++) sb_putc(&b, i < filled ? '#' : '.');
        sb_putc(&b, ']');
    }
    if (fraction >= 0) sb_printf(&b, " %3d%%", (int)(fraction * 100.0 + 1e-9));
    char el[32];
    sb_printf(&b, "  %s", format_duration(el, sizeof el, elapsed_s));
    if (detail && *detail) sb_printf(&b, "  %s", detail);
    snprintf(buf, n, "%s", sb_str(&b));
    sb_free(&b);
}

void progress_start_on(progress *p, FILE *out, bool tty, const char *label, progress_style style)
{
    memset(p, 0, sizeof *p);
    p->out = out;
    p->tty = tty;
    p->lines = !tty && style == PROGRESS_LINES;
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->t_start_ms = base_now_ms();
    p->t_last_ms = -1e18;
    p->last_step = -1;
    p->fraction = -1;
}

void progress_start(progress *p, const char *label, progress_style style)
{
    progress_start_on(p, stderr, isatty(STDERR_FILENO) == 1, label, style);
}

static void draw(progress *p, const char *detail, double now)
{
    char line[512];
    progress_format(line, sizeof line, p->label, p->fraction,
                    (now - p->t_start_ms) / 1000.0, detail, p->tty ? BAR_WIDTH : 0);
    if (p->tty) {
        /* \033[K clears what a longer previous line left behind. */
        fprintf(p->out, "\r%s\033[K", line);
        p->drawn = true;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->t_last_ms = now;
}

void progress_update(progress *p, double fraction, const char *detail)
{
    if (!p->out || (!p->tty && !p->lines)) return;
    if (fraction > 1.0) fraction = 1.0;
    p->fraction = fraction < 0 ? -1.0 : fraction;
    snprintf(p->detail, sizeof p->detail, "%s", detail ? detail : "");
    double now = base_now_ms();
    if (p->tty) {
        if (now - p->t_last_ms >= REDRAW_INTERVAL_MS) draw(p, p->detail, now);
        return;
    }
    int step = p->fraction >= 0 ? (int)(p->fraction * 10.0 + 1e-9) : -1;
    if (step > p->last_step || now - p->t_last_ms >= LINE_INTERVAL_MS) {
        if (step > p->last_step) p->last_step = step;
        draw(p, p->detail, now);
    }
}

void progress_finish(progress *p, const char *summary)
{
    if (!p->out) return;
    if (p->tty) {
        if (summary && *summary) {
            fprintf(p->out, "\r%s\033[K\n", summary);
        } else if (p->drawn) {
            draw(p, p->detail, base_now_ms()); /* the final state, not the last rate-limited one */
            fputc('\n', p->out);
        }
    } else if (p->lines && summary && *summary) {
        fprintf(p->out, "%s\n", summary);
    }
    fflush(p->out);
    p->drawn = false;
}

void progress_load_callback(void *ud, double fraction, const char *what)
{
    progress_update((progress *)ud, fraction, what);
}

void progress_print_loaded(const char *name, double start_ms)
{
    fprintf(stderr, "loaded %s in %.1f s\n", name && *name ? name : "model",
            (base_now_ms() - start_ms) / 1000.0);
}
