/* cmd_interactive.c — `ds4cl` without -p: the terminal interface.
 *
 * The session first (a new one; --resume ID, --continue or --session;
 * --resume alone lets the user pick from the list), then the model (its
 * loading progress on stderr, before the screen is taken), then the agent
 * bound to the session with permission questions enabled, then the UI
 * (ui/ui.h) until the user quits or a signal ends it. Stopping the agent
 * afterwards saves the session's state.
 */
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "base/base.h"
#include "cli/agent_setup.h"
#include "cli/commands.h"
#include "cli/model_open.h"
#include "cli/preflight.h"
#include "cli/workspace.h"
#include "sessions/sessions.h"
#include "ui/ui.h"

#define DEFAULT_CTX 65536

/* --resume without an ID: the list, then the pick. */
static session_open_status pick(const char *ws, bool no_color, session **out, ds4_error *err)
{
    session_info *v;
    int n = sessions_list(&v, err);
    if (n < 0) return SESSION_OPEN_ERROR;
    char id[SESSION_ID_MAX];
    int r = ui_pick_session(v, (size_t)n, no_color, id, sizeof id, err);
    free(v);
    if (r < 0) return SESSION_OPEN_PICK;
    *out = r == 1 ? session_open(id, err) : session_create(NULL, ws, err);
    return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
}

int cmd_interactive(const ds4cl_options *o)
{
    ds4_error terr = { "" };
    if (ui_terminal_check(&terr) != 0) {
        fprintf(stderr, "ds4cl: %s\n", terr.msg);
        return EXIT_USAGE;
    }
    if (o->backend == DS4_BACKEND_SCRIPT && !o->model_path) {
        fprintf(stderr, "ds4cl: the script engine needs -m MODEL (its tokenizer is used)\n");
        return EXIT_USAGE;
    }
    char ws[PATH_MAX];
    int wrc = workspace_resolve(o, ws);
    if (wrc == 0) wrc = preflight_check(o, ws, NULL);
    if (wrc != 0) return wrc;

    session *sess = NULL;
    ds4_error serr = { "" };
    session_request rq = { .resume = o->resume, .resume_id = o->resume_id, .continue_last = o->continue_last,
                           .session_id = o->session_id, .cwd = ws };
    sessions_set_prompt_cache(!o->no_prompt_cache);
    session_open_status so = session_open_request(&rq, &sess, &serr);
    if (so == SESSION_OPEN_PICK) {
        so = pick(ws, o->no_color, &sess, &serr);
        if (so == SESSION_OPEN_PICK) {
            fprintf(stderr, "ds4cl: %s\n", serr.msg);
            return EXIT_DONE;
        }
    }
    bool asked = o->resume || o->continue_last || o->session_id;
    if (so == SESSION_OPEN_ERROR && !asked) {
        /* nowhere to keep it (no home, say): the conversation still runs */
        fprintf(stderr, "ds4cl: this conversation is not saved: %s\n", serr.msg);
        so = SESSION_OPEN_OK;
    }
    if (so != SESSION_OPEN_OK) {
        fprintf(stderr, "ds4cl: %s\n", serr.msg);
        return EXIT_ERROR;
    }
    session_info sinfo = { .n_ctx = 0 };
    if (sess) session_get_info(sess, &sinfo);

    int n_ctx = 0;
    int open_rc = EXIT_ERROR;
    agent_setup_ctx chk = { .o = o, .ws = ws, .interactive = true };
    model_open_check mc = { agent_setup_least_ctx, &chk, AGENT_LEAST_CTX_WHAT };
    ds4_engine *e = model_open(o, sinfo.n_ctx > 0 ? sinfo.n_ctx : DEFAULT_CTX, &n_ctx, &open_rc, &mc, NULL);
    if (!e) {
        session_close(sess);
        return open_rc;
    }

    agent_config cfg;
    agent_setup_config(&cfg, o, e, n_ctx, ws, true);

    agent *a = NULL;
    ds4_error err = { "" };
    a = sess ? session_start_agent(sess, &cfg, &err) : agent_start(&cfg, &err);
    if (!a) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        session_close(sess);
        ds4_engine_close(e);
        return EXIT_ERROR;
    }

    ds4_model_info info;
    memset(&info, 0, sizeof info);
    ds4_engine_info(e, &info);
    const char *const *notes = NULL;
    size_t n_notes = sess ? session_notes(sess, &notes) : 0;
    ui_config uc = {
        .a = &a,
        .s = &sess,
        .base = &cfg,
        .model = info.name,
        .device = info.device_name[0] ? info.device_name : info.backend_name,
        .no_color = o->no_color,
        .resumed = asked && sinfo.user_turns > 0,
        .notes = notes,
        .n_notes = n_notes,
    };
    int sig = 0;
    ds4_error msg = { "" };
    ui_exit how = ui_run(&uc, &sig, &msg);
    if (how == UI_EXIT_ERROR) fprintf(stderr, "ds4cl: %s\n", msg.msg);
    if (how == UI_EXIT_SIGNAL) fprintf(stderr, "ds4cl: %s: stopping\n", sig == SIGHUP ? "hangup" : "terminated");

    /* Stopping runs the idle hook of a busy worker: the state is saved. */
    char id[SESSION_ID_MAX] = "";
    if (sess) snprintf(id, sizeof id, "%s", session_id(sess));
    bool had_turns = false;
    if (sess) {
        session_info now;
        session_get_info(sess, &now);
        had_turns = now.user_turns > 0;
    }
    agent_stop(a);
    session_close(sess);
    ds4_engine_close(e);
    if (had_turns && how != UI_EXIT_ERROR) fprintf(stderr, "ds4cl: session %s saved; ds4cl --resume %s continues it\n", id, id);
    if (how == UI_EXIT_SIGNAL) return EXIT_INTERRUPTED;
    return how == UI_EXIT_ERROR ? EXIT_ERROR : EXIT_DONE;
}
