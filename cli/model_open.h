/* model_open.h — the first minute of every command that runs the model:
 * find it, check it fits, load it with progress, pick the context.
 *
 *   int n_ctx;
 *   int rc;
 *   ds4_engine *e = model_open(o, 65536, &n_ctx, &rc);
 *   if (!e) return rc;                    // the reason is already on stderr
 *   ds4_session *s = ds4_session_open(e, n_ctx, &err);
 *
 * Steps: -m or the default model (model_path_resolve: explains how to
 * download one when there is none); the weights against the backend's
 * memory before anything is read (memplan_precheck_file); ds4_engine_open
 * with a progress line on a terminal; the context from --ctx N / auto /
 * the default (memplan_session_ctx), refused with the numbers when it
 * cannot fit; the caller's own check of that context (the agent's system
 * prompt must fit in it), still before any weight is read or uploaded —
 * OpenCL plans on an engine opened without weights first; the weights
 * read into memory (page_warm) with a progress
 * line on a terminal; "loaded NAME in X s". The scripted test engine skips
 * the memory steps, the reading and the load report.
 */
#ifndef DS4CL_MODEL_OPEN_H
#define DS4CL_MODEL_OPEN_H

#include "cli/options.h"
#include "engine/ds4.h"

/* Checks the planned context on an engine that can tokenize (its weights
 * may not be there yet): 0 when it is fine, else the exit status, after
 * printing why. */
typedef struct {
    int (*fn)(ds4_engine *e, int n_ctx, void *ud);
    void *ud;
} model_open_check;

/* NULL on failure, with the message printed on stderr; *exit_code (when
 * not NULL) is then 2 (usage) when --ctx N was refused as beyond the
 * model's limit or the memory, else 1, or what check returned. default_ctx
 * is the context used when the command line gives none (o->ctx == 0).
 * check may be NULL. */
ds4_engine *model_open(const ds4cl_options *o, int default_ctx, int *n_ctx, int *exit_code,
                       const model_open_check *check);

#endif
