/* model_open.c — resolve, check, load, plan the context, then read the
 * weights into memory with progress. */
#include "cli/model_open.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "cli/expert_setup.h"
#include "cli/model_path.h"
#include "cli/page_warm.h"
#include "base/progress.h"

#define SPLIT_RANKS() ds4_job_ranks()

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void warm_progress(void *ud, uint64_t done, uint64_t total)
{
    char a[32], b[32], detail[80];
    snprintf(detail, sizeof detail, "%s / %s", format_bytes(a, sizeof a, done), format_bytes(b, sizeof b, total));
    progress_update(ud, total ? (double)done / (double)total : 1.0, detail);
}

/* A --ctx below the caller's least: a usage error when the least fits
 * (the message names it), else no context will do. */
static int refuse_small(const ds4_engine *e, const ds4cl_options *o, const model_open_check *check, int least,
                        ds4_error *err)
{
    int n;
    char quiet[8];
    ds4_error fit = { "" };
    int rc = o->backend == DS4_BACKEND_SCRIPT ? 0
           : ds4_memory_session_ctx(e, o->backend, o->device, least, least, least, &n, quiet, sizeof quiet, &fit);
    if (rc == 0) {
        ds4_error_set(err, "--ctx %d is too small: %s take at least %d tokens", o->ctx, check->what, least);
        return -2;
    }
    ds4_error_set(err, "--ctx %d is too small: %s take at least %d tokens, and that does not fit either: %s", o->ctx,
                  check->what, least, fit.msg);
    return -1;
}

/* The context from --ctx / auto / default_ctx, never below the caller's
 * least; false (with *exit_code and why set, the refusal printed) when
 * none will do. */
static bool plan_ctx(ds4_engine *e, const ds4cl_options *o, int default_ctx, int *n_ctx, int *exit_code,
                     const model_open_check *check, ds4_error *why)
{
    int least = check && check->least ? check->least(e, check->ud) : 0;
    ds4_error err = { "" };
    int rc = 0;
    char said[1100] = "";
    if (o->ctx > 0 && o->ctx < least) rc = refuse_small(e, o, check, least, &err);
    else if (o->backend == DS4_BACKEND_SCRIPT) *n_ctx = o->ctx > 0 ? o->ctx : default_ctx;
    else
        rc = ds4_memory_session_ctx(e, o->backend, o->device, o->ctx, default_ctx, least, n_ctx, said, sizeof said,
                                    &err);
    if (said[0]) fprintf(stderr, "ds4cl: %s\n", said);
    if (rc == 0) return true;
    fprintf(stderr, "ds4cl: %s\n%s", err.msg, rc == -2 && o->ctx < least ? "Try 'ds4cl --help'.\n" : "");
    if (why) *why = err;
    if (exit_code) *exit_code = rc == -2 ? 2 : 1;
    return false;
}

/* Opens the engine (e NULL) or opens e again (ds4_engine_reopen: the file
 * is not read again) for plan_only, plan_ctx, layer_end and an expert
 * cache of expert_cache bytes (0: none). NULL after printing why; e is
 * closed then. */
static ds4_engine *open_engine(ds4_engine *e, const ds4cl_options *o, const char *path, bool plan_only, int plan_ctx,
                               int layer_end, uint64_t expert_cache, ds4_error *why)
{
    char stats[4096];
    progress p;
    if (!plan_only) progress_start(&p, "loading model", PROGRESS_QUIET);
    ds4_engine_options eo = {
        .model_path = path,
        .backend = o->backend,
        .script_path = o->script_path,
        .device = o->device,
        .threads = o->threads,
        .quant_sim = o->quant_sim,
        .plan_only = plan_only,
        .host_expert_layers = o->host_expert_layers,
        .split = o->split,
        .layer_end = layer_end,
        .stream_experts = o->stream_experts,
        .plan_ctx = plan_ctx,
        .device_memory = ds4_memory_device_override(),
        .expert_cache = expert_cache,
        .expert_stats = expert_cache ? expert_stats_path(path, stats, sizeof stats) : NULL,
        .load_progress = plan_only ? NULL : progress_load_callback,
        .load_ud = plan_only ? NULL : &p,
    };
    ds4_error err = { "" };
    if (!e) {
        e = ds4_engine_open(&eo, &err);
    } else if (ds4_engine_reopen(e, &eo, &err) != 0) {
        ds4_engine_close(e);
        e = NULL;
    }
    if (!plan_only) progress_finish(&p, NULL);
    if (!e) {
        /* errors of the file itself already start with its path */
        size_t pl = path ? strlen(path) : 0;
        const char *reason = pl && !strncmp(err.msg, path, pl) && err.msg[pl] == ':' ? err.msg + pl + 1 : err.msg;
        while (*reason == ' ') reason++;
        fprintf(stderr, "ds4cl: cannot load %s: %s\n", path ? path : "the model", reason);
        if (why) ds4_error_set(why, "cannot load %s: %s", path ? path : "the model", reason);
    }
    return e;
}

ds4_engine *model_open(const ds4cl_options *o, int default_ctx, int *n_ctx, int *exit_code,
                       const model_open_check *check, ds4_error *why)
{
    if (exit_code) *exit_code = 1;
    /* the steps that print more than a line say what and where to look */
    if (why) ds4_error_set(why, "the model could not be opened (the reason is on stderr)");
    bool scripted = o->backend == DS4_BACKEND_SCRIPT;
    ds4_expert_setup xs;
    memset(&xs, 0, sizeof xs);
    char buf[PATH_MAX];
    const char *path = o->model_path;
    if (!scripted || path) {
        path = model_path_resolve(o->model_path, buf, sizeof buf);
        if (!path) {
            if (why) ds4_error_set(why, "no model file to open (what to do is on stderr)");
            return NULL;
        }
        /* a split job holds only part of the weights here */
        /* the CPU backend streams the routed experts when the file does not fit */
        int rc = scripted || SPLIT_RANKS() > 1 ? 0
               : o->backend == DS4_BACKEND_CPU ? expert_setup(o, path, default_ctx, false, &xs)
               : expert_setup_precheck(path, o->backend);
        if (rc != 0) {
            if (why) ds4_error_set(why, "the model's weights do not fit in memory (the numbers are on stderr)");
            return NULL;
        }
    }

    /* The model is opened once. Planning comes first where it decides
     * what the engine that runs holds: an OpenCL placement for the
     * context (a refusal then costs no upload), and a layer split over
     * MPI ranks (the ranks get their layers first, so that every engine,
     * here the first range's, holds only its own); the plan-only engine
     * then opens to run (ds4_engine_reopen). */
    bool opencl = o->backend == DS4_BACKEND_OPENCL;
    bool plan_first = !scripted && (opencl || SPLIT_RANKS() > 1);
    int layer_end = 0;
    ds4_engine *e = NULL;
    if (plan_first) {
        e = open_engine(NULL, o, path, true, o->ctx > 0 ? o->ctx : default_ctx, 0, 0, why);
        if (!e) return NULL;
    }
    if (!scripted && SPLIT_RANKS() > 1) {
        ds4_error err = { "" };
        if (ds4_job_plan(e, &layer_end, &err) != 0) {
            fprintf(stderr, "ds4cl: cannot split the model over the MPI ranks: %s\n", err.msg);
            ds4_engine_close(e);
            return NULL;
        }
        /* the placement covers this rank's range only */
        if (opencl && layer_end > 0 &&
            !(e = open_engine(e, o, path, true, o->ctx > 0 ? o->ctx : default_ctx, layer_end, 0, why)))
            return NULL;
    }
    if (opencl && !plan_ctx(e, o, default_ctx, n_ctx, exit_code, check, why)) {
        ds4_engine_close(e);
        return NULL;
    }
    double t0 = base_now_ms();
    /* an OpenCL engine places the model for the context just decided */
    e = open_engine(e, o, path, false, opencl ? *n_ctx : 0, layer_end, xs.plan.cache_bytes, why);
    if (!e) return NULL;
    if (!scripted) {
        ds4_error err = { "" };
        if (ds4_job_attach(e, &err) != 0) {
            fprintf(stderr, "ds4cl: cannot split the model over the MPI ranks: %s\n", err.msg);
            ds4_engine_close(e);
            return NULL;
        }
        if (*ds4_job_split_text())
            fprintf(stderr, "ds4cl: split over %d ranks: %s\n", ds4_job_ranks(), ds4_job_split_text());
    }
    /* the context is decided before the weights are read: a refusal
     * should not cost minutes of disk reads */
    if (!opencl && !plan_ctx(e, o, default_ctx, n_ctx, exit_code, check, why)) {
        ds4_engine_close(e);
        return NULL;
    }
    if (scripted) return e;
    if (SPLIT_RANKS() > 1) {
        /* each rank reads its layers' pages as it first uses them */
        progress_print_loaded(base_name(path), t0);
        return e;
    }
    ds4_model_info info;
    memset(&info, 0, sizeof info);
    ds4_engine_info(e, &info);
    if (xs.plan.streaming) {
        /* reading the whole file would fill the page cache with the experts
         * the cache exists to keep out of memory: the other weights come in
         * as they are first used */
        progress_print_loaded(info.name[0] ? info.name : base_name(path), t0);
        return e;
    }
    progress p;
    progress_start(&p, "reading weights", PROGRESS_QUIET);
    page_warm_stats ws;
    ds4_error werr = { "" };
    if (page_warm(path, warm_progress, &p, &ws, &werr) != 0)
        fprintf(stderr, "ds4cl: %s (the weights are read on first use instead)\n", werr.msg);
    progress_finish(&p, NULL);
    progress_print_loaded(info.name[0] ? info.name : base_name(path), t0);
    return e;
}
