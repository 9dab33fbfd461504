/* commands.c — the slash commands: the UI's own (think modes, history,
 * compaction, save, clear, trace, help, quit) and the sessions module's
 * (/sessions, /switch, /new, /fork, /delete), with Tab completion of
 * command names and session IDs. */
#include "ui/app.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HISTORY_DEFAULT 3
#define HISTORY_MAX 200
#define HINT_CANDIDATES 8

typedef struct {
    const char *name, *args, *help;
    bool busy_ok;
    int (*run)(ui_app *app, const char *args);
} ui_cmd;

static int refuse(ui_app *app, const char *fmt, const char *arg)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, arg);
    ui_doc_adds(app->doc, DOC_ERROR, msg);
    return 2;
}

static agent *need_agent(ui_app *app)
{
    agent *a = ui_app_agent(app);
    if (!a) ui_doc_adds(app->doc, DOC_ERROR, "No agent is running: `/new` or `/switch` starts one.");
    return a;
}

static int set_think(ui_app *app, ds4_think mode)
{
    agent *a = need_agent(app);
    if (!a) return 2;
    ds4_think got = agent_set_think(a, mode);
    app->think = got;
    app->cfg->base->think = got;
    char msg[256];
    if (got != mode)
        snprintf(msg, sizeof msg, "Think Max needs a context of at least 393216 tokens (this one has %d); thinking "
                                  "stays on.", app->cfg->base->n_ctx);
    else
        snprintf(msg, sizeof msg, "%s from the next request.",
                 mode == DS4_THINK_NONE ? "No thinking" : mode == DS4_THINK_MAX ? "Think Max" : "Thinking");
    ui_doc_adds(app->doc, DOC_NOTICE, msg);
    return 1;
}

static int cmd_think(ui_app *app, const char *args) { (void)args; return set_think(app, DS4_THINK_HIGH); }
static int cmd_nothink(ui_app *app, const char *args) { (void)args; return set_think(app, DS4_THINK_NONE); }
static int cmd_thinkmax(ui_app *app, const char *args) { (void)args; return set_think(app, DS4_THINK_MAX); }

static int cmd_history(ui_app *app, const char *args)
{
    int n = HISTORY_DEFAULT;
    while (*args == ' ') args++;
    if (*args) {
        char *end;
        long v = strtol(args, &end, 10);
        while (*end == ' ') end++;
        if (end == args || *end || v < 1 || v > HISTORY_MAX)
            return refuse(app, "usage: `/history [N]` with N from 1 to 200, not `%s`", args);
        n = (int)v;
    }
    ui_app_replay_history(app, n, true);
    return 1;
}

static int request(ui_app *app, agent_request_kind kind, const char *what)
{
    agent *a = need_agent(app);
    if (!a) return 2;
    agent_request(a, kind);
    if (ui_app_busy(app)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s after the current step.", what);
        ui_doc_adds(app->doc, DOC_NOTICE, msg);
    }
    return 1;
}

static int cmd_compact(ui_app *app, const char *args)
{
    (void)args;
    return request(app, AGENT_REQ_COMPACT, "Compacting the context");
}

static int cmd_uncompact(ui_app *app, const char *args)
{
    (void)args;
    if (!app->st.can_uncompact) {
        ui_doc_adds(app->doc, DOC_NOTICE, "Nothing to uncompact: the context was not compacted in this run.");
        return 1;
    }
    return request(app, AGENT_REQ_UNCOMPACT, "Restoring the context from before the compaction");
}

static int cmd_save(ui_app *app, const char *args)
{
    (void)args;
    return request(app, AGENT_REQ_SAVE, "Saving");
}

static int cmd_clear(ui_app *app, const char *args)
{
    (void)args;
    agent *a = need_agent(app);
    if (!a) return 2;
    agent_request(a, AGENT_REQ_CLEAR);
    ui_doc_clear(app->doc);
    ui_app_banner(app);
    app->scroll = 0;
    return 1;
}

static int cmd_trace(ui_app *app, const char *args)
{
    while (*args == ' ') args++;
    char path[4096];
    snprintf(path, sizeof path, "%s", args);
    size_t n = strlen(path);
    while (n && (path[n - 1] == ' ' || path[n - 1] == '\n')) path[--n] = 0;
    if (!*path) {
        char msg[4200];
        if (app->trace_path) snprintf(msg, sizeof msg, "Tracing to `%s`; `/trace off` stops it.", app->trace_path);
        else snprintf(msg, sizeof msg, "Tracing is off; `/trace FILE` appends a trace of tokens, tools and states.");
        ui_doc_adds(app->doc, DOC_INFO, msg);
        return 1;
    }
    agent *a = need_agent(app);
    if (!a) return 2;
    ds4_error err = { "" };
    bool off = !strcmp(path, "off");
    if (agent_set_trace(a, off ? NULL : path, &err) != 0) return refuse(app, "%s", err.msg);
    free(app->trace_path);
    app->trace_path = NULL;
    if (!off) {
        app->trace_path = xstrdup(path);
    }
    app->cfg->base->trace_path = app->trace_path;
    char msg[4200];
    if (off) snprintf(msg, sizeof msg, "Tracing stopped.");
    else snprintf(msg, sizeof msg, "Tracing to %s from the next request.", path);
    ui_doc_adds(app->doc, DOC_NOTICE, msg);
    return 1;
}

static int cmd_quit(ui_app *app, const char *args)
{
    (void)args;
    app->quit = true;
    return 1;
}

static int cmd_help(ui_app *app, const char *args);

static const ui_cmd g_cmds[] = {
    { "help", "", "this list of commands and keys", true, cmd_help },
    { "think", "", "let the model think before it answers (the default)", true, cmd_think },
    { "nothink", "", "answer without thinking", true, cmd_nothink },
    { "thinkmax", "", "think as much as it wants (needs a context of 384K tokens)", true, cmd_thinkmax },
    { "history", "[N]", "show the last N requests of this session with their answers", true, cmd_history },
    { "compact", "", "summarize the conversation to free the context", true, cmd_compact },
    { "uncompact", "", "undo the last compaction", true, cmd_uncompact },
    { "save", "", "save the session's state now (it is also saved after every turn)", true, cmd_save },
    { "clear", "", "start the conversation over (the session keeps its history)", false, cmd_clear },
    { "trace", "[FILE|off]", "append a trace of tokens, tool calls and states to FILE", true, cmd_trace },
    { "quit", "", "leave (the session is saved; --resume continues it)", true, cmd_quit },
    { "exit", "", "the same as /quit", true, cmd_quit },
};
#define N_CMDS (sizeof g_cmds / sizeof *g_cmds)

static int cmd_help(ui_app *app, const char *args)
{
    (void)args;
    strbuf b = { 0 };
    sb_puts(&b, "**Commands**\n");
    for (size_t i = 0; i < N_CMDS; i++)
        sb_printf(&b, "- `/%s%s%s` \xe2\x80\x94 %s\n", g_cmds[i].name, *g_cmds[i].args ? " " : "", g_cmds[i].args,
                  g_cmds[i].help);
    size_t ns;
    const sessions_command *sc = sessions_commands(&ns);
    for (size_t i = 0; i < ns; i++)
        sb_printf(&b, "- `/%s%s%s` \xe2\x80\x94 %s\n", sc[i].name, *sc[i].args ? " " : "", sc[i].args, sc[i].help);
    sb_printf(&b,
              "\n**Keys**\n"
              "- Enter sends; while the model works the message is queued and read after its current step\n"
              "- Esc interrupts and sends the queued message at once\n"
              "- Ctrl+C interrupts (queued text comes back to the input) or clears the input; twice quits\n"
              "- Ctrl+D on an empty line quits\n"
              "- Alt+Enter, Ctrl+J or a trailing `\\` starts a new line; pasted text keeps its lines\n"
              "- Up and Down move between rows, then through the history (Ctrl+P and Ctrl+N too)\n"
              "- PgUp, PgDn, Home, End and the mouse wheel scroll the transcript\n"
              "- Ctrl+O shows or hides the reasoning; Tab completes commands and session IDs\n"
              "- Ctrl+A E B F K U W Y T, Alt+B F D edit as in Emacs; Ctrl+_ undoes; Ctrl+L redraws\n"
              "- Permission questions: y yes, n no, a always (for the rest of the session); no answer in %d s "
              "is a no\n"
              "- A message that starts with `/` is a command; start it with a space to send it as text\n",
              (agent_confirm_timeout_ms(app->cfg->base) + 999) / 1000);
    ui_doc_add(app->doc, DOC_INFO, b.s, b.len);
    sb_free(&b);
    return 1;
}

/* ---- the sessions module's commands ---------------------------------------------------- */

static int run_session_cmd(ui_app *app, const sessions_command *sc, const char *args)
{
    if (!app->cfg->s || !*app->cfg->s) return refuse(app, "Sessions are not available in this run%s.", "");
    if (!sc->busy_ok && (ui_app_busy(app) || app->starting))
        return refuse(app, "`/%s` needs the model to be idle: wait, or press Esc to interrupt it.", sc->name);
    sessions_ctx c = { app->cfg->s, app->cfg->a, app->cfg->base };
    char *out = NULL;
    int rc = sc->run(&c, args, &out);
    /* These restart the agent, even when they fail after stopping it (the
     * current session is started again); a new agent may well live at
     * the old one's address, so the command says it, not the pointer. */
    bool restarts = !sc->busy_ok;
    if (restarts && rc == 0) {
        ui_app_agent_replaced(app);
        app->resuming = strcmp(sc->name, "new") != 0;
    } else if (restarts) {
        app->starting = true;
        if (!ui_app_agent(app)) ui_app_agent_replaced(app);
    }
    /* a session moved to shows its history, then what the command says
     * (its ID, what it was forked from): the last thing on the screen */
    if (restarts && rc == 0 && strcmp(sc->name, "new")) ui_app_replay_history(app, HISTORY_DEFAULT, true);
    if (out && *out) ui_doc_adds(app->doc, rc == 0 ? DOC_INFO : DOC_ERROR, out);
    free(out);
    return rc == 0 ? 1 : 2;
}

/* ---- dispatch and completion ---------------------------------------------------------------- */

/* The command word of text ("/name …"): its length, 0 when text is not
 * a command (a path such as /etc/hosts is a message). */
static size_t command_word(const char *text)
{
    if (text[0] != '/') return 0;
    size_t n = 1;
    while (islower((unsigned char)text[n])) n++;
    if (n == 1 || (text[n] && text[n] != ' ' && text[n] != '\n')) return 0;
    return n - 1;
}

int ui_commands_run(ui_app *app, const char *text)
{
    size_t n = command_word(text);
    if (!n) return 0;
    const char *name = text + 1;
    const char *args = text + 1 + n;
    while (*args == ' ') args++;
    bool known = false;
    for (size_t i = 0; i < N_CMDS && !known; i++) known = strlen(g_cmds[i].name) == n && !strncmp(g_cmds[i].name, name, n);
    size_t ns;
    const sessions_command *sc = sessions_commands(&ns);
    for (size_t i = 0; i < ns && !known; i++) known = strlen(sc[i].name) == n && !strncmp(sc[i].name, name, n);
    if (!known) {
        ui_app_hint(app, "Unknown command /%.*s: /help lists them, Up brings it back (a leading space sends it as "
                         "text).", (int)n, name);
        return 2;
    }
    /* the command stays in the transcript, apart from what the model read */
    ui_doc_adds(app->doc, DOC_COMMAND, text);
    for (size_t i = 0; i < N_CMDS; i++) {
        if (strlen(g_cmds[i].name) != n || strncmp(g_cmds[i].name, name, n)) continue;
        if (!g_cmds[i].busy_ok && ui_app_busy(app))
            return refuse(app, "`/%s` needs the model to be idle: wait, or press Esc to interrupt it.", g_cmds[i].name);
        return g_cmds[i].run(app, args);
    }
    for (size_t i = 0; i < ns; i++)
        if (strlen(sc[i].name) == n && !strncmp(sc[i].name, name, n)) return run_session_cmd(app, &sc[i], args);
    return 2;
}

static void add_candidate(void *ud, const char *s) { ui_str_list_push(ud, s); }

/* Completes text[from, cur) among the candidates: the one, or their common
 * part with the list shown. */
static void complete_among(ui_app *app, size_t from, size_t cur, const str_list *c, const char *lead, const char *tail)
{
    if (!c->n) {
        ui_app_hint(app, "Nothing to complete.");
        return;
    }
    strbuf b = { 0 };
    if (c->n == 1) {
        sb_printf(&b, "%s%s%s", lead, c->v[0], tail);
        ui_editor_replace(app->ed, from, cur, sb_str(&b));
        sb_free(&b);
        return;
    }
    size_t common = strlen(c->v[0]);
    for (size_t i = 1; i < c->n; i++) {
        size_t k = 0;
        while (k < common && c->v[i][k] == c->v[0][k]) k++;
        common = k;
    }
    sb_printf(&b, "%s%.*s", lead, (int)common, c->v[0]);
    ui_editor_replace(app->ed, from, cur, sb_str(&b));
    sb_clear(&b);
    for (size_t i = 0; i < c->n && i < HINT_CANDIDATES; i++) sb_printf(&b, "%s%s%s", i ? "  " : "", lead, c->v[i]);
    if (c->n > HINT_CANDIDATES) sb_printf(&b, "  (+%zu)", c->n - HINT_CANDIDATES);
    ui_app_hint(app, "%s", sb_str(&b));
    sb_free(&b);
}

void ui_commands_complete(ui_app *app)
{
    const char *text = ui_editor_text(app->ed);
    size_t cur = ui_editor_cursor(app->ed);
    if (text[0] != '/' || memchr(text, '\n', cur)) return;
    const char *sp = memchr(text, ' ', cur);
    str_list c = { 0 };
    size_t ns;
    const sessions_command *sc = sessions_commands(&ns);
    if (!sp) {
        size_t n = cur - 1;
        for (size_t i = 0; i < N_CMDS; i++)
            if (!strncmp(g_cmds[i].name, text + 1, n)) ui_str_list_push(&c, g_cmds[i].name);
        for (size_t i = 0; i < ns; i++)
            if (!strncmp(sc[i].name, text + 1, n)) ui_str_list_push(&c, sc[i].name);
        complete_among(app, 0, cur, &c, "/", " ");
        ui_str_list_clear(&c);
        return;
    }
    size_t wl = (size_t)(sp - text) - 1;
    for (size_t i = 0; i < ns; i++) {
        if (!sc[i].takes_id || strlen(sc[i].name) != wl || strncmp(sc[i].name, text + 1, wl)) continue;
        size_t from = (size_t)(sp - text) + 1;
        while (from < cur && text[from] == ' ') from++;
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(cur - from), text + from);
        sessions_complete(prefix, add_candidate, &c);
        complete_among(app, from, cur, &c, "", "");
        ui_str_list_clear(&c);
        return;
    }
}
