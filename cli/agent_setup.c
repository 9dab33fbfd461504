/* agent_setup.c — see agent_setup.h. */
#include "cli/agent_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cli/commands.h"

void agent_setup_config(agent_config *cfg, const ds4cl_options *o, ds4_engine *e, int n_ctx, const char *ws,
                        bool interactive)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->engine = e;
    cfg->n_ctx = n_ctx;
    cfg->sampling = o->sampling;
    if (!o->seed_given) cfg->sampling.seed = (uint64_t)base_wall_time_s() ^ ((uint64_t)getpid() << 32);
    cfg->max_tokens = o->max_tokens;
    cfg->think = o->think;
    cfg->max_tool_rounds = o->max_tool_rounds;
    cfg->workspace = ws;
    cfg->system_extra = o->system_extra;
    cfg->trace_path = o->trace_path;
    cfg->tools.workspace = ws;
    cfg->tools.yes_to_all = o->yes;
    cfg->tools.allow = o->n_allow ? o->allow : NULL;
    cfg->tools.rules_path = o->rules_path;
    cfg->tools.interactive = interactive;
    cfg->tools.sandbox = !o->no_sandbox;
    cfg->tools.cdp_url = o->cdp_url;
    cfg->tools.browser_path = o->browser_path;
    cfg->tools.search_url = o->search_url;
    if (interactive) cfg->confirm_timeout_ms = agent_setup_confirm_timeout_ms();
}

int agent_setup_confirm_timeout_ms(void)
{
    const char *v = getenv("DS4CL_CONFIRM_TIMEOUT");
    double s;
    /* 0 (no timeout) for anything else, as for an unset variable */
    if (v && *v && !num_parse_double(v, 0, 86400, &s, NULL) && s > 0) return (int)(s * 1000);
    return 0;
}

int agent_setup_least_ctx(ds4_engine *e, void *ud)
{
    const agent_setup_ctx *c = ud;
    agent_config cfg;
    agent_setup_config(&cfg, c->o, e, AGENT_MIN_CTX, c->ws, c->interactive);
    ds4_error err = { "" };
    int need = agent_min_ctx(&cfg, &err);
    return need > 0 ? need : 0; /* agent_start reports other failures */
}
