/* status.c — the status bar's text (see status.h). */
#include "ui/status.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define BAR_CELLS 16

static const char *const SPINNER[] = { "\xe2\xa0\x8b", "\xe2\xa0\x99", "\xe2\xa0\xb9", "\xe2\xa0\xb8", "\xe2\xa0\xbc",
                                       "\xe2\xa0\xb4", "\xe2\xa0\xa6", "\xe2\xa0\xa7", "\xe2\xa0\x87", "\xe2\xa0\x8f" };

void ui_fmt_count(char *buf, size_t size, double n)
{
    if (n < 0) n = 0;
    if (n < 1000) snprintf(buf, size, "%.0f", n);
    else if (n < 1e6 && fmod(n, 1000) == 0) snprintf(buf, size, "%.0fk", n / 1000);
    else if (n < 99950) snprintf(buf, size, "%.1fk", n / 1000);
    else if (n < 999500) snprintf(buf, size, "%.0fk", n / 1000);
    else snprintf(buf, size, "%.1fM", n / 1e6);
}

void ui_fmt_duration(char *buf, size_t size, double s)
{
    if (!(s >= 0)) s = 0;
    long t = (long)ceil(s);
    if (t < 60) snprintf(buf, size, "%lds", t);
    else if (t < 3600) snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, size, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

/* One part of the bar; the lower its rank, the sooner it goes. */
typedef struct {
    ui_line line;
    int rank;
} part;

static void add_tps(ui_line *l, double tps, ui_style st)
{
    if (tps <= 0) return;
    char b[48];
    snprintf(b, sizeof b, tps >= 100 ? " \xc2\xb7 %.0f t/s" : " \xc2\xb7 %.1f t/s", tps);
    ui_line_adds(l, b, st);
}

static void state_part(const ui_status_in *in, ui_line *l)
{
    const agent_status *st = &in->st;
    ui_style base = UI_C_STATUS;
    const char *spin = SPINNER[(size_t)(in->frame < 0 ? 0 : in->frame) % (sizeof SPINNER / sizeof *SPINNER)];
    char b[320], x[32], y[32];
    if (st->confirm_pending) {
        ui_line_adds(l, "? waiting for your answer", (ui_style)(UI_C_NOTICE | UI_BOLD | UI_REVERSE));
        return;
    }
    switch (st->state) {
    case AGENT_IDLE:
        ui_line_adds(l, "\xe2\x97\x8f ready", (ui_style)(base | UI_BOLD));
        return;
    case AGENT_ERROR:
        snprintf(b, sizeof b, "\xe2\x9c\x97 error: %s", st->error[0] ? st->error : "see above");
        ui_line_adds(l, b, (ui_style)(UI_C_ERROR | UI_BOLD | UI_REVERSE));
        return;
    case AGENT_PREFILL: {
        snprintf(b, sizeof b, "%s %s ", spin,
                 !in->starting ? "reading" : in->resumed ? "reading the conversation" : "reading the system prompt");
        ui_line_adds(l, b, (ui_style)(base | UI_BOLD));
        int done = st->prefill_done, total = st->prefill_total;
        if (total <= 0) return;
        double frac = (double)done / total;
        if (frac > 1) frac = 1;
        int filled = (int)(frac * BAR_CELLS + 0.5);
        for (int i = 0; i < BAR_CELLS; i++)
            ui_line_adds(l, i < filled ? "\xe2\x96\xb0" : "\xe2\x96\xb1", i < filled ? UI_C_BAR : base);
        ui_fmt_count(x, sizeof x, done);
        ui_fmt_count(y, sizeof y, total);
        snprintf(b, sizeof b, " %s/%s %d%%", x, y, (int)(frac * 100));
        ui_line_adds(l, b, base);
        add_tps(l, st->prefill_tps, base);
        if (st->prefill_tps > 0 && done < total) {
            ui_fmt_duration(x, sizeof x, (total - done) / st->prefill_tps);
            snprintf(b, sizeof b, " \xc2\xb7 ETA %s", x);
            ui_line_adds(l, b, base);
        }
        return;
    }
    case AGENT_GENERATING:
        snprintf(b, sizeof b, "%s writing \xc2\xb7 %d token%s", spin, st->generated, st->generated == 1 ? "" : "s");
        ui_line_adds(l, b, (ui_style)(base | UI_BOLD));
        add_tps(l, st->gen_tps, base);
        if (st->greedy) ui_line_adds(l, " \xe2\x9d\x84 greedy", (ui_style)(UI_C_ACCENT | UI_REVERSE));
        return;
    case AGENT_TOOL:
        snprintf(b, sizeof b, "%s running %s", spin, in->tool && *in->tool ? in->tool : "a tool");
        ui_line_adds(l, b, (ui_style)(base | UI_BOLD));
        return;
    case AGENT_COMPACTING:
        snprintf(b, sizeof b, "%s compacting the context", spin);
        ui_line_adds(l, b, (ui_style)(UI_C_NOTICE | UI_BOLD | UI_REVERSE));
        if (st->generated > 0) {
            snprintf(b, sizeof b, " \xc2\xb7 summary %d tokens", st->generated);
            ui_line_adds(l, b, base);
            add_tps(l, st->gen_tps, base);
        }
        return;
    case AGENT_SAVING:
        snprintf(b, sizeof b, "%s saving", spin);
        ui_line_adds(l, b, (ui_style)(base | UI_BOLD));
        return;
    }
}

void ui_status_line(const ui_status_in *in, int width, ui_line *out)
{
    const agent_status *st = &in->st;
    part parts[8];
    size_t np = 0;
    memset(parts, 0, sizeof parts);
    char b[256], x[32], y[32];

    state_part(in, &parts[np].line);
    parts[np++].rank = 100;

    if (in->queued) {
        snprintf(b, sizeof b, "%zu queued (Esc sends now)", in->queued);
        ui_line_adds(&parts[np].line, b, (ui_style)(UI_C_ACCENT | UI_BOLD | UI_REVERSE));
        parts[np++].rank = 90;
    }
    if (st->ctx_size > 0) {
        ui_fmt_count(x, sizeof x, st->ctx_used);
        ui_fmt_count(y, sizeof y, st->ctx_size);
        int pct = (int)(100.0 * st->ctx_used / st->ctx_size);
        snprintf(b, sizeof b, "ctx %s/%s %d%%", x, y, pct);
        ui_line_adds(&parts[np].line, b, pct >= 85 ? (ui_style)(UI_C_NOTICE | UI_BOLD | UI_REVERSE) : UI_C_STATUS);
        parts[np++].rank = 80;
    }
    if (st->prefilled_total) {
        ui_fmt_count(x, sizeof x, (double)st->prefilled_total);
        snprintf(b, sizeof b, "read %s", x);
        ui_line_adds(&parts[np].line, b, UI_C_STATUS);
        parts[np++].rank = 30;
    }
    const char *think = in->think == DS4_THINK_NONE ? "no thinking" : in->think == DS4_THINK_MAX ? "think max" : "thinking";
    ui_line_adds(&parts[np].line, think, UI_C_STATUS);
    parts[np++].rank = 40;
    if (in->model && *in->model) {
        snprintf(b, sizeof b, "%s%s%s", in->model, in->device && *in->device ? " \xc2\xb7 " : "",
                 in->device ? in->device : "");
        ui_line_adds(&parts[np].line, b, UI_C_STATUS);
        parts[np++].rank = 20;
    }

    /* drop the least important parts until the rest fits */
    const char *sep = " \xe2\x94\x82 ";
    int sepw = ui_text_width(sep, strlen(sep));
    bool keep[8];
    for (size_t i = 0; i < np; i++) keep[i] = true;
    for (;;) {
        int w = 1;
        size_t kept = 0;
        for (size_t i = 0; i < np; i++)
            if (keep[i]) w += parts[i].line.width + (kept++ ? sepw : 0);
        if (w <= width || kept <= 1) break;
        size_t worst = np;
        for (size_t i = 0; i < np; i++)
            if (keep[i] && parts[i].rank < 100 && (worst == np || parts[i].rank < parts[worst].rank)) worst = i;
        if (worst == np) break;
        keep[worst] = false;
    }
    ui_line_clear(out);
    ui_line_adds(out, " ", UI_C_STATUS);
    size_t kept = 0;
    for (size_t i = 0; i < np; i++) {
        if (!keep[i]) continue;
        if (kept++) ui_line_adds(out, sep, UI_C_STATUS);
        for (size_t s = 0; s < parts[i].line.n_spans; s++)
            ui_line_add(out, parts[i].line.text + parts[i].line.spans[s].off, parts[i].line.spans[s].len,
                        parts[i].line.spans[s].style);
    }
    ui_line_truncate(out, width);
    for (size_t i = 0; i < np; i++) ui_line_free(&parts[i].line);
}
