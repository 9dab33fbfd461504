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

/* How long the interactive agent waits for a permission answer:
 * $DS4CL_CONFIRM_TIMEOUT seconds (0 < s ≤ 86400) in ms, else 0 (the
 * agent's default). The agent keeps the deadline; the UI's countdown reads
 * it from the agent's status, so the two cannot disagree. */
int agent_setup_confirm_timeout_ms(void);

/* The least context the agent accepts on e: its system prompt and the room
 * a first turn needs (agent_min_ctx), as a model_open_check (ud: an
 * agent_setup_ctx), counted on the engine model_open plans with, before
 * the weights are read. 0 when it cannot be counted (agent_start then
 * says why). */
typedef struct {
    const ds4cl_options *o;
    const char *ws;
    bool interactive;
} agent_setup_ctx;
int agent_setup_least_ctx(ds4_engine *e, void *ud);
/* What takes that least, for the refusal of a smaller --ctx. */
#define AGENT_LEAST_CTX_WHAT "the system prompt and the room the agent needs"

#endif
