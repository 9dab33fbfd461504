/* expert_setup.c — the expert cache decision before loading (see
 * expert_setup.h). */
#include "cli/expert_setup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/gguf.h"
#include "engine/model.h"

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

/* The model's shape and the bytes of a session of n_ctx tokens, from an
 * engine opened to plan only (nothing is read but the header). */
static int measure(const ds4cl_options *o, const char *path, int least, int want, expert_setup_result *out)
{
    ds4_error err = { "" };
    gguf_file *f = gguf_open(path, &err);
    ds4_model *m = f ? model_bind(f, &err) : NULL;
    if (m) stream_shape_of(m, &out->shape);
    model_free(m);
    gguf_close(f);
    if (!m) return -1; /* the loader reports the file's problem */
    ds4_engine_options eo = { .model_path = path, .backend = o->backend, .threads = o->threads,
                              .quant_sim = o->quant_sim, .plan_only = true };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) return -1;
    out->session = ds4_session_bytes_estimate(e, least);
    out->session_want = ds4_session_bytes_estimate(e, want);
    ds4_engine_close(e);
    return 0;
}

int expert_setup(const ds4cl_options *o, const char *path, int least_ctx, bool quiet, expert_setup_result *out)
{
    memset(out, 0, sizeof *out);
    if (o->backend != DS4_BACKEND_CPU) return 0;
    const char *set = setting(o);
    if (!strcmp(set, "off")) return expert_setup_precheck(path, o->backend);
    uint64_t want = 0;
    bool force = strcmp(set, "auto") != 0;
    if (force) num_parse_size(set, &want, NULL);
    ds4_memory_policy pol = ds4_memory_default_policy();
    /* the smallest session decides a refusal; the wanted one the budget */
    int n_ctx = o->ctx > 0 ? o->ctx : pol.min_ctx, want_ctx = o->ctx > 0 ? o->ctx : least_ctx > n_ctx ? least_ctx : n_ctx;
    uint64_t avail = 0;
    bool known = ds4_memory_host_available(&avail, out->source, sizeof out->source) == 0;
    if (!known && !force) return 0; /* nothing to plan with: the mapping, as without a cache */
    /* a file that does not bind: the size check of old (the loader then
     * reports what is wrong with it) */
    if (measure(o, path, n_ctx, want_ctx, out) != 0) return expert_setup_precheck(path, o->backend);
    if (known) {
        ds4_memory_input in = { .available_bytes = avail };
        ds4_memory_result r;
        ds4_memory_check(&in, &pol, 0, &r);
        out->usable = r.usable_bytes;
    } else {
        out->usable = UINT64_MAX / 4;
    }
    if (stream_plan_make(&out->shape, out->usable, out->session, out->session_want, want, force, &out->plan) != 0) {
        char a[32];
        fprintf(stderr, "ds4cl: the model does not fit in memory: %s\n  (%s available per %s, for a context of %d "
                        "tokens).\nFree some memory, or use a smaller model (DS4CL_MEM_AVAILABLE=BYTES overrides "
                        "the detected memory).\n",
                out->plan.refusal, format_bytes(a, sizeof a, avail), out->source, n_ctx);
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
