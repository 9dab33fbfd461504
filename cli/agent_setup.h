/* agent_setup.h — the agent configuration both front ends (the interactive
 * UI and -p) derive from the command line, so that a flag means the same
 * thing in either mode. */
#ifndef DS4CL_AGENT_SETUP_H
#define DS4CL_AGENT_SETUP_H

#include <stdbool.h>

#include "agent/agent.h"
#include "cli/options.h"

/* Fills *cfg (zeroed first) for the engine e with a context of n_ctx tokens
 * working in ws. Strings point into o and ws, which must outlive the agent.
 * Without --seed every run samples differently. `interactive`: permission
 * questions go to the user instead of the non-interactive policy. */
void agent_setup_config(agent_config *cfg, const ds4cl_options *o, ds4_engine *e, int n_ctx, const char *ws,
                        bool interactive);

/* A context given with --ctx N that cannot hold the system prompt and the
 * room the agent needs is a usage error: says so with the smallest that
 * works and returns 2 (EXIT_USAGE); 0 when it is fine or was not given. */
int agent_setup_check_ctx(const agent_config *cfg, const ds4cl_options *o);

/* How long the interactive agent waits for a permission answer:
 * $DS4CL_CONFIRM_TIMEOUT seconds (0 < s ≤ 86400) in ms, else 0 (the
 * agent's default). The agent keeps the deadline; the UI's countdown reads
 * it from the agent's status, so the two cannot disagree. */
int agent_setup_confirm_timeout_ms(void);

/* The same check as a model_open_check (ud: an agent_setup_ctx), run on
 * the engine model_open plans with, before the weights are read. */
typedef struct {
    const ds4cl_options *o;
    const char *ws;
    bool interactive;
} agent_setup_ctx;
int agent_setup_check_engine(ds4_engine *e, int n_ctx, void *ud);

#endif
