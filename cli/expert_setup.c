/* expert_setup.c — the expert cache's setting, the engine's plan for it,
 * and what is said about it (see expert_setup.h). */
#include "cli/expert_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* The setting in force: the option, else the environment, else "auto". */
static const char *setting(const ds4cl_options *o)
{
    if (o->expert_cache) return o->expert_cache;
    const char *env = getenv("DS4CL_EXPERT_CACHE");
    uint64_t v;
    if (!env || !*env) return "auto";
    if (!strcmp(env, "auto") || !strcmp(env, "off") || (num_parse_size(env, &v, NULL) == 0 && v)) return env;
    fprintf(stderr, "ds4cl: ignoring DS4CL_EXPERT_CACHE=%s (want a size such as 12G, auto or off)\n", env);
    return "auto";
}

int expert_setup_precheck(const char *path, ds4_backend backend)
{
    ds4_error err = { "" };
    if (ds4_memory_precheck_file(path, backend, &err) == 0) return 0;
    fprintf(stderr, "ds4cl: %s\n", err.msg);
    return -1;
}

int expert_setup(const ds4cl_options *o, const char *path, int least_ctx, bool quiet, ds4_expert_setup *out)
{
    memset(out, 0, sizeof *out);
    if (o->backend != DS4_BACKEND_CPU) return 0;
    const char *set = setting(o);
    if (!strcmp(set, "off")) return expert_setup_precheck(path, o->backend);
    ds4_expert_setup_request rq = { .model_path = path, .backend = o->backend, .threads = o->threads,
                                    .quant_sim = o->quant_sim };
    if (strcmp(set, "auto") != 0) num_parse_size(set, &rq.budget, NULL);
    /* the smallest session decides a refusal; the wanted one the budget */
    int min_ctx = ds4_memory_default_policy().min_ctx;
    rq.least_ctx = o->ctx > 0 ? o->ctx : min_ctx;
    rq.want_ctx = o->ctx > 0 ? o->ctx : least_ctx > rq.least_ctx ? least_ctx : rq.least_ctx;
    ds4_error err = { "" };
    if (ds4_expert_setup_plan(&rq, out, &err) != 0) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        return -1;
    }
    if (out->plan.streaming && !quiet) {
        char c[32], x[32], r[32];
        fprintf(stderr, "ds4cl: the routed experts (%s) are read from the file as needed, through an expert cache "
                        "of %s (%llu experts); the other weights (%s) stay in memory\n",
                format_bytes(x, sizeof x, out->shape.expert_bytes), format_bytes(c, sizeof c, out->plan.cache_bytes),
                (unsigned long long)out->plan.slots, format_bytes(r, sizeof r, out->shape.resident_bytes));
    }
    return 0;
}

const char *expert_stats_path(const char *model, char *buf, size_t size)
{
    char dir[4096];
    if (!xdg_dir(XDG_CACHE, dir, sizeof dir)) return NULL;
    const char *name = strrchr(model, '/') ? strrchr(model, '/') + 1 : model;
    int n = snprintf(buf, size, "%s/expert-popularity/%s.pop", dir, name);
    return n > 0 && (size_t)n < size ? buf : NULL;
}
