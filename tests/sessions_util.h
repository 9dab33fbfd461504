/* sessions_util.h — helpers for the sessions tests: an agent bound to a
 * session over the script engine, journal inspection, file damage, and
 * child processes that can be killed mid-run. */
#ifndef DS4CL_SESSIONS_UTIL_H
#define DS4CL_SESSIONS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/base.h"
#include "sessions/journal.h"
#include "sessions/sessions.h"
#include "tests/agent_util.h"

/* Points XDG_DATA_HOME / XDG_CACHE_HOME into the test's temp dir (also
 * done by agent_test_model). */
void sessions_test_home(void);

/* A session and the agent running on it. */
typedef struct {
    session *s;
    agent *a;
    agent_config cfg;
    ev_log log;
} sess_agent;

/* Opens (or, with create, creates) session id — NULL id: a generated one —
 * attaches it to e with test_config's settings and starts the agent;
 * waits until it is idle. */
void sa_start(sess_agent *x, ds4_engine *e, const char *id, bool create);
void sa_turn(sess_agent *x, const char *text);
void sa_stop(sess_agent *x);
size_t sa_prefilled(sess_agent *x);
/* Tokens of x's system prompt after its shared prefix (the workspace's
 * part): what a start from the cached prefix still reads. */
size_t sa_workspace_part(sess_agent *x);

/* Paths inside a session's directory (runner-owned). */
const char *sess_path(const char *id, const char *file);

/* The journal of session id (fails the test when unreadable). */
void read_journal(const char *id, journal_scan *j);
/* Fails the test unless the journal of id is whole (header, no damaged or
 * torn span) and every record's transcript length follows from the ones
 * before it. */
void check_journal_adds_up(const char *id);
/* Texts of its USER records joined by '|' (runner-owned). */
const char *journal_users(const char *id);

/* The notes of an open session joined by '\n' (runner-owned). */
const char *notes_of(const session *s);

/* A command run under sh with stdout captured, killable at any moment. */
typedef struct {
    pid_t pid;
    int out;
    strbuf text;
    bool eof;
} child_proc;

void child_start(child_proc *c, const char *cmd);
/* Reads what is available for up to ms milliseconds (stops early at EOF). */
void child_pump(child_proc *c, int ms);
/* Sends sig (0: none), reads the rest, reaps; the exit status or 128+signal. */
int child_finish(child_proc *c, int sig);

#endif
