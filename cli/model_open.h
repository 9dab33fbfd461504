/* model_open.h — the first minute of every command that runs the model:
 * find it, check it fits, load it with progress, pick the context.
 *
 *   int n_ctx;
 *   int rc;
 *   ds4_engine *e = model_open(o, 65536, &n_ctx, &rc, NULL, NULL);
 *   if (!e) return rc;                    // the reason is already on stderr
 *   ds4_session *s = ds4_session_open(e, n_ctx, &err);
 *
 * Steps: -m or the default model (model_path_resolve: explains how to
 * download one when there is none); the weights against the backend's
 * memory before anything is read (the engine's ds4_memory_precheck_file;
 * for the CPU backend expert_setup, which streams the routed experts
 * through an expert cache when the file does not fit); ds4_engine_open
 * with a progress line on a terminal; the context from --ctx N / auto /
 * the default (the engine's ds4_memory_session_ctx, counting the expert
 * cache instead of the experts; its account printed on stderr), refused with the numbers when it cannot fit, or below the caller's least (the agent's system prompt must
 * fit in it), still before any weight is read or uploaded —
 * OpenCL (and a split over MPI ranks) plans on the engine opened without
 * weights first, then opens it to run without reading the file again
 * (ds4_engine_reopen); the weights read into memory (page_warm; not when
 * the experts stream) with a progress
 * line on a terminal; "loaded NAME in X s". The scripted test engine skips
 * the memory steps, the reading and the load report.
 */
#ifndef DS4CL_MODEL_OPEN_H
#define DS4CL_MODEL_OPEN_H

#include "cli/options.h"
#include "engine/ds4.h"

/* The caller's least context, counted on an engine that can tokenize (its
 * weights may not be there yet): least(e, ud) tokens (0: no least), taken
 * by `what` ("the system prompt and …"). A smaller --ctx is refused, and
 * the memory planner never suggests one. */
typedef struct {
    int (*least)(ds4_engine *e, void *ud);
    void *ud;
    const char *what;
} model_open_check;

/* NULL on failure, with the message printed on stderr and, when why is not
 * NULL, its text there (without the "ds4cl: " prefix); *exit_code (when
 * not NULL) is then 2 (usage) when --ctx N was refused while another
 * context would work (beyond the model's limit, more than the memory
 * holds, or less than check's least, when a context in between fits),
 * else 1. default_ctx is the context used when the command line gives
 * none (o->ctx == 0). check may be NULL. */
ds4_engine *model_open(const ds4cl_options *o, int default_ctx, int *n_ctx, int *exit_code,
                       const model_open_check *check, ds4_error *why);

#endif
