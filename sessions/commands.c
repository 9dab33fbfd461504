/* commands.c — /sessions, /switch, /new, /fork and /delete, for whatever
 * command table the front end keeps: parse the argument, do it, say what
 * happened in a short markdown message. */
#include "sessions/store_impl.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECAP_TURNS 3
#define RECAP_BYTES 200

/* How long a /delete waits for the same command to confirm it. */
#define DELETE_CONFIRM_MS 30000

static int reply(char **out, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int reply(char **out, int rc, const char *fmt, ...)
{
    strbuf b = { 0 };
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    *out = sb_take(&b);
    return rc;
}

/* The argument's first word (no spaces in IDs). */
static void first_word(const char *args, char *out, size_t size)
{
    while (*args && isspace((unsigned char)*args)) args++;
    size_t n = 0;
    while (args[n] && !isspace((unsigned char)args[n]) && n + 1 < size) n++;
    memcpy(out, args, n);
    out[n] = 0;
}

static void list_into(strbuf *b, const char *current, size_t max)
{
    session_info *v;
    ds4_error err = { "" };
    int n = sessions_list(&v, &err);
    if (n < 0) {
        sb_printf(b, "%s\n", err.msg);
        return;
    }
    char *text = sessions_format_list(v, (size_t)n, max, current);
    if (n) sb_puts(b, "**Sessions**, the latest first (* this one; USED: how long ago)\n");
    sb_puts(b, "```\n");
    if (n) {
        char *head = sessions_format_header(v, (size_t)n, max);
        sb_puts(b, head);
        free(head);
    }
    sb_puts(b, text);
    sb_puts(b, "```\n");
    free(text);
    free(v);
}

static int cmd_list(sessions_ctx *c, const char *args, char **out)
{
    char word[32];
    first_word(args, word, sizeof word);
    size_t max = 20;
    if (!strcmp(word, "all")) max = 0;
    else if (word[0] && atoi(word) > 0) max = (size_t)atoi(word);
    strbuf b = { 0 };
    list_into(&b, *c->s ? session_id(*c->s) : NULL, max);
    sb_puts(&b, "Resume one with `/switch ID` (a prefix is enough), branch this one with `/fork`.");
    *out = sb_take(&b);
    return 0;
}

/* What the session was about: its last user turns, clipped. */
static void recap(strbuf *b, session *s)
{
    session_turn *h;
    size_t n = session_history(s, RECAP_TURNS, &h);
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if (h[i].kind != AGENT_TURN_USER) continue;
        if (!any) sb_puts(b, "\n\nRecent requests:");
        any = true;
        char line[RECAP_BYTES + 8];
        session_title_from_text(line, RECAP_BYTES, h[i].text, h[i].len);
        sb_printf(b, "\n> %s%s", line, h[i].len >= RECAP_BYTES - 1 ? " …" : "");
    }
    session_turns_free(h, n);
}

static int after_move(sessions_ctx *c, int rc, const char *verb, const char *msg, char **out)
{
    if (rc != 0) return reply(out, -1, "%s", msg);
    strbuf b = { 0 };
    sb_printf(&b, "%s %s", verb, msg);
    const char *const *notes;
    size_t n = session_notes(*c->s, &notes);
    for (size_t i = 0; i < n; i++) sb_printf(&b, "\n\n%s", notes[i]);
    recap(&b, *c->s);
    *out = sb_take(&b);
    return 0;
}

static int cmd_switch(sessions_ctx *c, const char *args, char **out)
{
    char id[SESSION_ID_MAX + 1];
    first_word(args, id, sizeof id);
    if (!id[0]) {
        strbuf b = { 0 };
        sb_puts(&b, "usage: `/switch ID`\n\n");
        list_into(&b, *c->s ? session_id(*c->s) : NULL, 10);
        *out = sb_take(&b);
        return -1;
    }
    char msg[1024];
    int rc = sessions_switch(c->s, c->a, c->base, id, msg, sizeof msg);
    return after_move(c, rc, "Switched to", msg, out);
}

static int cmd_new(sessions_ctx *c, const char *args, char **out)
{
    (void)args;
    char msg[1024];
    int rc = sessions_new(c->s, c->a, c->base, msg, sizeof msg);
    return after_move(c, rc, "New", msg, out);
}

static int cmd_fork(sessions_ctx *c, const char *args, char **out)
{
    (void)args;
    char msg[1024];
    int rc = sessions_fork(c->s, c->a, c->base, msg, sizeof msg);
    return after_move(c, rc, "Now in", msg, out);
}

static int cmd_delete(sessions_ctx *c, const char *args, char **out)
{
    char word[SESSION_ID_MAX + 1], id[SESSION_ID_MAX];
    ds4_error err = { "" };
    first_word(args, word, sizeof word);
    if (!word[0]) return reply(out, -1, "usage: `/delete ID`");
    if (sessions_resolve(word, id, sizeof id, &err) != 0) return reply(out, -1, "%s", err.msg);
    if (*c->s && !strcmp(id, session_id(*c->s)))
        return reply(out, -1, "%s is the current session; `/new` or `/switch` first", id);
    /* Deleting cannot be undone: the first /delete says what would go,
     * the same command again soon after deletes it (as Ctrl+C twice quits). */
    static char pending[SESSION_ID_MAX];
    static double pending_ms;
    double now = base_now_ms();
    if (strcmp(pending, id) || now - pending_ms > DELETE_CONFIRM_MS) {
        snprintf(pending, sizeof pending, "%s", id);
        pending_ms = now;
        session_info *v;
        int n = sessions_list(&v, &err);
        const session_info *si = NULL;
        for (int i = 0; i < n && !si; i++)
            if (!strcmp(v[i].id, id)) si = &v[i];
        strbuf b = { 0 };
        sb_printf(&b, "Delete session %s", id);
        if (si)
            sb_printf(&b, " (\"%s\", %zu tokens, in %s)", si->title[0] ? si->title : "untitled", si->n_tokens,
                      si->cwd[0] ? si->cwd : "an unknown directory");
        sb_printf(&b, "? It cannot be undone: `/delete %s` again within %d s deletes it.", id,
                  DELETE_CONFIRM_MS / 1000);
        if (n >= 0) free(v);
        *out = sb_take(&b);
        return 0;
    }
    pending[0] = 0;
    if (sessions_delete(id, &err) != 0) return reply(out, -1, "%s", err.msg);
    return reply(out, 0, "Deleted session %s.", id);
}

static const sessions_command g_commands[] = {
    { "sessions", "[N|all]", "list saved sessions (title, age, tokens, directory)", true, false, cmd_list },
    { "switch", "ID", "continue another session (instant when its KV state is saved)", false, true, cmd_switch },
    { "new", "", "start a new session (this one stays saved)", false, false, cmd_new },
    { "fork", "", "branch this session: a copy under a new ID, continued from here", false, false, cmd_fork },
    { "delete", "ID", "delete a saved session (asks first: the same command again confirms)", true, true,
      cmd_delete },
};

const sessions_command *sessions_commands(size_t *n)
{
    *n = sizeof g_commands / sizeof g_commands[0];
    return g_commands;
}

void sessions_complete(const char *prefix, void (*add)(void *ud, const char *id), void *ud)
{
    session_info *v;
    ds4_error err = { "" };
    int n = sessions_list(&v, &err);
    if (n < 0) return;
    size_t pl = prefix ? strlen(prefix) : 0;
    for (int i = 0; i < n; i++)
        if (!pl || !strncmp(v[i].id, prefix, pl)) add(ud, v[i].id);
    free(v);
}
