/* app.c — the UI's event loop: the terminal's keys, the agent's events and
 * status, signals and timers, one thread; what the user sends and how it
 * is queued while the model works (see ui.h). */
#include "ui/app.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ui/term.h"

#define FRAME_MS 100      /* spinner, progress and countdown refresh */
#define MIN_DRAW_MS 30    /* streaming output is drawn at most this often */
#define HINT_MS 4000
/* Idle wake-ups: SIGWINCH may land on the worker thread and so not cut
 * the poll short; the resize is then seen at the next wake-up. */
#define IDLE_MS 250

void ui_str_list_push(str_list *l, const char *s)
{
    char **grown = xrealloc(l->v, (l->n + 1) * sizeof *grown);
    l->v = grown;
    l->v[l->n] = xstrdup(s);
    l->n++;
}

void ui_str_list_clear(str_list *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

char *ui_str_list_join(const str_list *l)
{
    strbuf b = { 0 };
    for (size_t i = 0; i < l->n; i++) {
        if (i) sb_puts(&b, "\n\n");
        sb_puts(&b, l->v[i]);
    }
    return sb_take(&b);
}

agent *ui_app_agent(ui_app *app) { return *app->cfg->a; }

bool ui_app_busy(const ui_app *app)
{
    return app->st.state != AGENT_IDLE && app->st.state != AGENT_ERROR;
}

void ui_app_hint(ui_app *app, const char *fmt, ...)
{
    strbuf b = { 0 };
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    free(app->hint);
    app->hint = sb_take(&b);
    app->hint_until = base_now_ms() + HINT_MS;
    app->dirty = true;
}

void ui_app_banner(ui_app *app)
{
    ui_config *c = app->cfg;
    strbuf b = { 0 };
    char ctx[32];
    snprintf(ctx, sizeof ctx, "%d", c->base->n_ctx);
    sb_printf(&b, "**ds4cl** %s \xc2\xb7 %s%s%s \xc2\xb7 context %s tokens\n", DS4CL_VERSION, c->model ? c->model : "",
              c->device && *c->device ? " \xc2\xb7 " : "", c->device ? c->device : "", ctx);
    if (c->s && *c->s) sb_printf(&b, "Session `%s` in `%s`\n", session_id(*c->s), c->base->workspace);
    else sb_printf(&b, "In `%s` (this conversation is not saved)\n", c->base->workspace);
    sb_puts(&b, "Type a request and press Enter. `/help` lists commands and keys; Ctrl+D quits.");
    ui_doc_add(app->doc, DOC_BANNER, b.s, b.len);
    sb_free(&b);
}

void ui_app_replay_history(ui_app *app, int max_user, bool header)
{
    session *s = app->cfg->s ? *app->cfg->s : NULL;
    if (!s) {
        ui_doc_adds(app->doc, DOC_ERROR, "There is no session to show the history of.");
        return;
    }
    session_turn *v;
    size_t n = session_history(s, max_user, &v);
    int users = 0;
    for (size_t i = 0; i < n; i++) users += v[i].kind == AGENT_TURN_USER;
    if (header) {
        char h[128];
        snprintf(h, sizeof h, n ? "History: the last %d request%s" : "History: nothing yet", users,
                 users == 1 ? "" : "s");
        ui_doc_adds(app->doc, DOC_INFO, h);
    }
    for (size_t i = 0; i < n; i++) {
        const session_turn *t = &v[i];
        switch (t->kind) {
        case AGENT_TURN_USER: ui_doc_add(app->doc, DOC_USER, t->text, t->len); break;
        case AGENT_TURN_ASSISTANT: ui_doc_add_reply(app->doc, t->text, t->len); break;
        case AGENT_TURN_TOOL:
            for (size_t k = 0; k < t->n_calls; k++)
                ui_doc_add_tool(app->doc, t->calls[k].name, t->calls[k].args_json, t->calls[k].result,
                             t->calls[k].is_error, t->calls[k].denied);
            break;
        case AGENT_TURN_REBUILD:
            if (t->len) ui_doc_add(app->doc, DOC_COMPACTION, t->text, t->len);
            break;
        case AGENT_TURN_SYSTEM: break;
        }
    }
    session_turns_free(v, n);
    if (header && n) ui_doc_adds(app->doc, DOC_INFO, "*End of the history.*");
    app->scroll = 0;
    app->dirty = true;
}

void ui_app_agent_replaced(ui_app *app)
{
    app->starting = true;
    ui_str_list_clear(&app->steered);
    free(app->confirm_text);
    app->confirm_text = NULL;
    app->confirm_open = false;
    memset(&app->st, 0, sizeof app->st);
    app->st.state = AGENT_PREFILL;
    agent *a = ui_app_agent(app);
    if (a) {
        agent_get_status(a, &app->st);
    } else {
        app->starting = false;
        app->st.state = AGENT_ERROR;
        snprintf(app->st.error, sizeof app->st.error, "no agent is running");
    }
    ui_doc_clear(app->doc);
    ui_app_banner(app);
    app->scroll = 0;
    app->dirty = true;
}

/* ---- sending ------------------------------------------------------------------------- */

static void send_text(ui_app *app, const char *text)
{
    agent *a = ui_app_agent(app);
    if (!a) {
        ui_doc_adds(app->doc, DOC_ERROR, "No agent is running: `/new` or `/switch` starts one, `/quit` leaves.");
        return;
    }
    /* Order is kept: once something waits here, the rest waits too. */
    if (!app->starting && !app->held.n) {
        if (!ui_app_busy(app) && agent_submit(a, text) == 0) {
            app->st.state = AGENT_PREFILL;
            return;
        }
        if (ui_app_busy(app) && agent_steer(a, text) == 0) {
            ui_str_list_push(&app->steered, text);
            return;
        }
        if (agent_submit(a, text) == 0) {
            app->st.state = AGENT_PREFILL;
            return;
        }
    }
    ui_str_list_push(&app->held, text);
}

void ui_app_submit(ui_app *app)
{
    const char *t = ui_editor_text(app->ed);
    bool blank = true;
    for (const char *p = t; *p && blank; p++) blank = *p == ' ' || *p == '\n' || *p == '\t';
    if (blank) return;
    ds4_error err = { "" };
    if (t[0] == '/') {
        char *line = xstrdup(t);
        int rc = ui_commands_run(app, line);
        if (rc != 0) {
            if (ui_history_add(&app->hist, line, &err) != 0) ui_app_hint(app, "history not saved: %s", err.msg);
            /* the command may have left text to edit (e.g. a completion) */
            if (!strcmp(ui_editor_text(app->ed), line)) free(ui_editor_take(app->ed));
        }
        free(line);
        if (rc != 0) {
            app->dirty = true;
            return;
        }
    }
    char *text = ui_editor_take(app->ed);
    if (ui_history_add(&app->hist, text, &err) != 0) ui_app_hint(app, "history not saved: %s", err.msg);
    send_text(app, text);
    free(text);
    app->scroll = 0;
    app->dirty = true;
}

void ui_app_interrupt(ui_app *app, bool send_queue)
{
    agent *a = ui_app_agent(app);
    if (!a) return;
    if (!send_queue) {
        /* taken back before the interrupt: an interrupted turn sends it */
        char *back = agent_unsteer(a);
        strbuf b = { 0 };
        if (back) sb_puts(&b, back);
        free(back);
        for (size_t i = 0; i < app->held.n; i++) {
            if (b.len) sb_puts(&b, "\n\n");
            sb_puts(&b, app->held.v[i]);
        }
        if (b.len) {
            if (!ui_editor_empty(app->ed)) {
                sb_puts(&b, "\n");
                sb_puts(&b, ui_editor_text(app->ed));
            }
            ui_editor_set(app->ed, sb_str(&b));
        }
        sb_free(&b);
        ui_str_list_clear(&app->steered);
        ui_str_list_clear(&app->held);
    }
    agent_interrupt(a);
    app->dirty = true;
}

void ui_app_answer_confirm(ui_app *app, tool_confirm answer)
{
    agent *a = ui_app_agent(app);
    if (a && app->confirm_open) agent_confirm(a, answer);
    app->confirm_open = false;
    free(app->confirm_text);
    app->confirm_text = NULL;
    app->dirty = true;
}

void ui_app_ctrl_c(ui_app *app)
{
    double now = base_now_ms();
    bool twice = now - app->ctrl_c_ms < UI_DOUBLE_PRESS_MS;
    app->ctrl_c_ms = now;
    if (twice) {
        app->quit = true;
        return;
    }
    if (app->confirm_open) ui_app_answer_confirm(app, TOOL_CONFIRM_NO);
    if (ui_app_busy(app) || app->held.n) {
        ui_app_interrupt(app, false);
        ui_app_hint(app, "Interrupting. Ctrl+C again quits.");
        app->interrupting = ui_app_busy(app);
    } else if (!ui_editor_empty(app->ed)) {
        ui_editor_set(app->ed, "");
        ui_app_hint(app, "Input cleared (Ctrl+_ brings it back). Ctrl+C again quits.");
    } else {
        ui_app_hint(app, "Press Ctrl+C again or Ctrl+D to quit.");
    }
    /* "again quits" is true only as long as a second press counts as one */
    app->hint_until = now + UI_DOUBLE_PRESS_MS;
}

/* ---- the agent's side ------------------------------------------------------------------ */

/* The model read queued text: what it read leaves the queue. */
static void steered_read(ui_app *app, const char *text)
{
    strbuf b = { 0 };
    for (size_t k = 0; k < app->steered.n; k++) {
        if (k) sb_puts(&b, "\n\n");
        sb_puts(&b, app->steered.v[k]);
        if (!strcmp(sb_str(&b), text)) {
            for (size_t i = 0; i <= k; i++) free(app->steered.v[i]);
            memmove(app->steered.v, app->steered.v + k + 1, (app->steered.n - k - 1) * sizeof *app->steered.v);
            app->steered.n -= k + 1;
            break;
        }
    }
    sb_free(&b);
}

static void handle_event(ui_app *app, const agent_event *e)
{
    switch (e->type) {
    case AGENT_EV_USER:
        if (app->steered.n && e->text) steered_read(app, e->text);
        break;
    case AGENT_EV_TOOL_START:
        snprintf(app->tool, sizeof app->tool, "%s", e->tool ? e->tool : "");
        break;
    case AGENT_EV_CONFIRM:
        free(app->confirm_text);
        app->confirm_text = xstrdup(e->text ? e->text : "");
        snprintf(app->confirm_tool, sizeof app->confirm_tool, "%s", e->tool ? e->tool : "");
        app->confirm_open = true;
        app->confirm_choice = 0;
        break;
    default:
        break;
    }
    ui_doc_event(app->doc, e);
    app->dirty = true;
}

static void tick(ui_app *app)
{
    agent *a = ui_app_agent(app);
    if (a) {
        agent_event *ev;
        size_t n = agent_drain(a, &ev);
        for (size_t i = 0; i < n; i++) handle_event(app, &ev[i]);
        agent_events_free(ev, n);
        agent_status old = app->st;
        agent_get_status(a, &app->st);
        if (memcmp(&old, &app->st, sizeof old)) app->dirty = true;
    }
    if (app->starting && !ui_app_busy(app)) app->starting = false;
    /* the interrupt is over: the transcript says how it ended */
    if (app->interrupting && !ui_app_busy(app)) {
        app->interrupting = false;
        app->hint_until = 0;
    }
    if (a && !app->starting && !ui_app_busy(app) && app->held.n) {
        char *text = ui_str_list_join(&app->held);
        if (agent_submit(a, text) == 0) {
            ui_str_list_clear(&app->held);
            app->st.state = AGENT_PREFILL;
        }
        free(text);
    }
    double now = base_now_ms();
    /* The agent keeps the question's deadline: when it passes, the agent
     * refuses the call, tells the model nobody answered and says so in a
     * notice; the dialog only follows. */
    if (app->confirm_open && !app->st.confirm_pending) app->confirm_open = false;
    if (app->hint && now >= app->hint_until) {
        free(app->hint);
        app->hint = NULL;
        app->dirty = true;
    }
}


ui_exit ui_run(ui_config *cfg, int *sig, ds4_error *msg)
{
    ui_app app;
    memset(&app, 0, sizeof app);
    app.cfg = cfg;
    app.doc = ui_doc_new();
    char hpath[4096];
    const char *hp = cfg->history_path;
    if (!hp) {
        char dir[4000];
        if (xdg_dir(XDG_STATE, dir, sizeof dir)) {
            snprintf(hpath, sizeof hpath, "%s/history", dir);
            hp = hpath;
        }
    }
    ui_history_open(&app.hist, hp);
    app.ed = ui_editor_new(&app.hist);
    app.think = cfg->base->think;
    app.starting = true;
    app.resuming = cfg->resumed;
    app.st.state = AGENT_PREFILL;
    if (cfg->base->trace_path) {
        app.trace_path = xstrdup(cfg->base->trace_path);
        cfg->base->trace_path = app.trace_path;
    }
    ui_exit rc = UI_EXIT_QUIT;
    if (ui_term_start(cfg->no_color, msg) != 0) {
        rc = UI_EXIT_ERROR;
        goto done;
    }
    ui_app_banner(&app);
    for (size_t i = 0; i < cfg->n_notes; i++) ui_doc_adds(app.doc, DOC_NOTICE, cfg->notes[i]);
    if (cfg->resumed) ui_app_replay_history(&app, 3, true);
    app.dirty = true;

    double last_draw = 0, last_frame = base_now_ms();
    while (!app.quit) {
        agent *a = ui_app_agent(&app);
        struct pollfd p[3];
        int np = 0;
        p[np++] = (struct pollfd){ STDIN_FILENO, POLLIN, 0 };
        if (ui_term_signal_fd() >= 0) p[np++] = (struct pollfd){ ui_term_signal_fd(), POLLIN, 0 };
        if (a) p[np++] = (struct pollfd){ agent_wake_fd(a), POLLIN, 0 };
        bool animated = ui_app_busy(&app) || app.confirm_open || app.hint || app.held.n;
        double now = base_now_ms();
        int timeout = animated ? FRAME_MS : IDLE_MS;
        if (app.dirty) timeout = (int)(last_draw + MIN_DRAW_MS - now) > 0 ? (int)(last_draw + MIN_DRAW_MS - now) : 0;
        if (poll(p, (nfds_t)np, timeout) < 0 && errno != EINTR) break;

        int s;
        while ((s = ui_term_take_signal()) != 0) {
            if (s == SIGINT) {
                ui_app_ctrl_c(&app);
            } else {
                app.quit = true;
                app.quit_signal = s;
            }
        }
        bool keyed = false;
        int r;
        wint_t wc;
        while (!app.quit && (r = get_wch(&wc)) != ERR) {
            ui_keys_handle(&app, r, wc);
            keyed = true;
        }
        tick(&app);
        now = base_now_ms();
        if (animated && now - last_frame >= FRAME_MS) {
            app.frame++;
            last_frame = now;
            app.dirty = true;
        }
        if (app.dirty && (keyed || now - last_draw >= MIN_DRAW_MS)) {
            ui_screen_draw(&app);
            last_draw = now;
            app.dirty = false;
        }
    }
    ui_term_stop();
    if (app.quit_signal) {
        rc = UI_EXIT_SIGNAL;
        *sig = app.quit_signal;
    }
done:
    cfg->base->trace_path = NULL;
    free(app.trace_path);
    free(app.hint);
    free(app.confirm_text);
    ui_str_list_clear(&app.held);
    ui_str_list_clear(&app.steered);
    sb_free(&app.paste_buf);
    ui_editor_free(app.ed);
    ui_history_close(&app.hist);
    ui_doc_free(app.doc);
    return rc;
}
