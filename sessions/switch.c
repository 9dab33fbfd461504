/* switch.c — one agent over one engine, moved between sessions: /switch,
 * /new and /fork stop the agent and start another on the same engine
 * with the other session's resume data, so a valid snapshot makes the
 * move instant and the model is never loaded twice. */
#include "sessions/sessions_internal.h"

#include <string.h>

agent *session_start_agent(session *s, const agent_config *base, char *err, size_t errlen)
{
    agent_config cfg = *base;
    cfg.persist = NULL;
    cfg.resume = NULL;
    cfg.session_id = NULL;
    if (session_attach(s, base->engine, &cfg, err, errlen) != 0) return NULL;
    ds4_error derr = { "" };
    agent *a = agent_start(&cfg, &derr);
    session_attach_done(s);
    if (!a) strf(err, errlen, "%s", derr.msg);
    return a;
}

int sessions_switch_to(session **s, agent **a, const agent_config *base, session *next, char *msg, size_t msglen)
{
    agent_stop(*a);
    *a = NULL;
    char err[512] = "";
    agent *na = session_start_agent(next, base, err, sizeof err);
    if (na) {
        session_close(*s);
        *s = next;
        *a = na;
        session_info info;
        session_get_info(next, &info);
        strf(msg, msglen, "session %s%s%s (%d turns, %zu tokens)", info.id, info.title[0] ? ": " : "", info.title,
             info.user_turns, info.n_tokens);
        return 0;
    }
    session_close(next);
    char again[512] = "";
    *a = session_start_agent(*s, base, again, sizeof again);
    if (*a) strf(msg, msglen, "cannot switch: %s", err);
    else strf(msg, msglen, "cannot switch: %s; restarting the current session failed too: %s", err, again);
    return -1;
}

int sessions_switch(session **s, agent **a, const agent_config *base, const char *id, char *msg, size_t msglen)
{
    char full[SESSION_ID_MAX], err[512];
    if (sessions_resolve(id, full, sizeof full, err, sizeof err) != 0) {
        strf(msg, msglen, "%s", err);
        return -1;
    }
    if (!strcmp(full, session_id(*s))) {
        strf(msg, msglen, "already in session %s", full);
        return -1;
    }
    session *next = session_open(full, err, sizeof err);
    if (!next) {
        strf(msg, msglen, "%s", err);
        return -1;
    }
    return sessions_switch_to(s, a, base, next, msg, msglen);
}

int sessions_new(session **s, agent **a, const agent_config *base, char *msg, size_t msglen)
{
    char err[512];
    session *next = session_create(NULL, base->workspace, err, sizeof err);
    if (!next) {
        strf(msg, msglen, "%s", err);
        return -1;
    }
    return sessions_switch_to(s, a, base, next, msg, msglen);
}

int sessions_fork(session **s, agent **a, const agent_config *base, char *msg, size_t msglen)
{
    char err[512];
    session *next = session_fork(*s, err, sizeof err);
    if (!next) {
        strf(msg, msglen, "%s", err);
        return -1;
    }
    char from[SESSION_ID_MAX];
    strf(from, sizeof from, "%s", session_id(*s));
    int rc = sessions_switch_to(s, a, base, next, msg, msglen);
    if (rc == 0) {
        size_t l = strlen(msg);
        strf(msg + l, msglen - l, " (forked from %s)", from);
    }
    return rc;
}
