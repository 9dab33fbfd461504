/* switch.c — one agent over one engine, moved between sessions: /switch,
 * /new and /fork stop the agent and start another on the same engine
 * with the other session's resume data, so a valid snapshot makes the
 * move instant and the model is never loaded twice. */
#include "sessions/store_impl.h"

#include <string.h>

agent *session_start_agent(session *s, const agent_config *base, ds4_error *err)
{
    agent_config cfg = *base;
    cfg.persist = NULL;
    cfg.resume = NULL;
    cfg.session_id = NULL;
    if (session_attach(s, base->engine, &cfg, err) != 0) return NULL;
    agent *a = agent_start(&cfg, err);
    session_attach_done(s);
    return a;
}

int sessions_switch_to(session **s, agent **a, const agent_config *base, session *next, char *msg, size_t msglen)
{
    agent_stop(*a);
    *a = NULL;
    ds4_error err = { "" };
    agent *na = session_start_agent(next, base, &err);
    if (na) {
        session_close(*s);
        *s = next;
        *a = na;
        session_info info;
        session_get_info(next, &info);
        session_strf(msg, msglen, "session %s%s%s (%d turns, %zu tokens)", info.id, info.title[0] ? ": " : "", info.title,
             info.user_turns, info.n_tokens);
        return 0;
    }
    session_close(next);
    ds4_error again = { "" };
    *a = session_start_agent(*s, base, &again);
    if (*a) session_strf(msg, msglen, "cannot switch: %s", err.msg);
    else session_strf(msg, msglen, "cannot switch: %s; restarting the current session failed too: %s", err.msg, again.msg);
    return -1;
}

int sessions_switch(session **s, agent **a, const agent_config *base, const char *id, char *msg, size_t msglen)
{
    char full[SESSION_ID_MAX];
    ds4_error err = { "" };
    if (sessions_resolve(id, full, sizeof full, &err) != 0) {
        session_strf(msg, msglen, "%s", err.msg);
        return -1;
    }
    if (!strcmp(full, session_id(*s))) {
        session_strf(msg, msglen, "already in session %s", full);
        return -1;
    }
    session *next = session_open(full, &err);
    if (!next) {
        session_strf(msg, msglen, "%s", err.msg);
        return -1;
    }
    return sessions_switch_to(s, a, base, next, msg, msglen);
}

int sessions_new(session **s, agent **a, const agent_config *base, char *msg, size_t msglen)
{
    ds4_error err = { "" };
    session *next = session_create(NULL, base->workspace, &err);
    if (!next) {
        session_strf(msg, msglen, "%s", err.msg);
        return -1;
    }
    return sessions_switch_to(s, a, base, next, msg, msglen);
}

int sessions_fork(session **s, agent **a, const agent_config *base, char *msg, size_t msglen)
{
    ds4_error err = { "" };
    session *next = session_fork(*s, &err);
    if (!next) {
        session_strf(msg, msglen, "%s", err.msg);
        return -1;
    }
    char from[SESSION_ID_MAX];
    session_strf(from, sizeof from, "%s", session_id(*s));
    int rc = sessions_switch_to(s, a, base, next, msg, msglen);
    if (rc == 0) {
        size_t l = strlen(msg);
        session_strf(msg + l, msglen - l, " (forked from %s)", from);
    }
    return rc;
}
