/* expert_setup.c — the expert cache's set-up before loading: the routed
 * experts' shape from the file's header, the sessions from an engine opened
 * to plan only, the host memory, and the budget (engine/ds4.h,
 * ds4_expert_setup_plan; the arithmetic: engine/stream_plan.h). */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/stream_plan.h"

/* The model's shape and the bytes of the sessions planned for (nothing is
 * read but the header); -1 when the file does not bind. */
static int measure(const ds4_expert_setup_request *rq, ds4_expert_setup *out)
{
    ds4_error err = { "" };
    gguf_file *f = gguf_open(rq->model_path, &err);
    ds4_model *m = f ? model_bind(f, &err) : NULL;
    if (m) stream_shape_of(m, &out->shape);
    model_free(m);
    gguf_close(f);
    if (!m) return -1;
    ds4_engine_options eo = { .model_path = rq->model_path, .backend = rq->backend, .threads = rq->threads,
                              .quant_sim = rq->quant_sim, .plan_only = true };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) return -1;
    out->session = ds4_session_bytes_estimate(e, rq->least_ctx);
    out->session_want = ds4_session_bytes_estimate(e, rq->want_ctx);
    ds4_engine_close(e);
    return 0;
}

int ds4_expert_setup_plan(const ds4_expert_setup_request *rq, ds4_expert_setup *out, ds4_error *err)
{
    memset(out, 0, sizeof *out);
    if (rq->backend != DS4_BACKEND_CPU) return 0;
    bool force = rq->budget != 0;
    uint64_t avail = 0;
    bool known = ds4_memory_host_available(&avail, out->source, sizeof out->source) == 0;
    if (!known && !force) return 0; /* nothing to plan with: the mapping, as without a cache */
    /* a file that does not bind: the size check (the loader then reports
     * what is wrong with it) */
    if (measure(rq, out) != 0) return ds4_memory_precheck_file(rq->model_path, rq->backend, err);
    if (known) {
        ds4_memory_input in = { .available_bytes = avail };
        ds4_memory_policy pol = ds4_memory_default_policy();
        ds4_memory_result r;
        ds4_memory_check(&in, &pol, 0, &r);
        out->available = avail;
        out->usable = r.usable_bytes;
    } else {
        out->usable = UINT64_MAX / 4;
    }
    if (stream_plan_make(&out->shape, out->usable, out->session, out->session_want, rq->budget, force,
                         &out->plan) != 0) {
        char a[32];
        return ds4_error_set(err, "the model does not fit in memory: %s\n  (%s available per %s, for a context of %d "
                                  "tokens).\nFree some memory, or use a smaller model (DS4CL_MEM_AVAILABLE=BYTES "
                                  "overrides the detected memory).",
                             out->plan.refusal, format_bytes(a, sizeof a, avail), out->source, rq->least_ctx);
    }
    return 0;
}
