/* backend_cpu.c — the CPU backend: the forward schedule over the host ops
 * of cpu_ops.c. */
#include "engine/backend.h"
#include "engine/cpu_ops.h"
#include "engine/forward.h"

#include <stdio.h>

#include "engine/cpu_kernels.h"
#include "engine/qk.h"

static int cpu_open(ds4_engine *e, ds4_error *err)
{
    void *ctx = cpu_ops_new(e->model, e->opt.threads, err);
    if (!ctx) return -1;
    cpu_ops_set_expert_arith(ctx, cpu_expert_arith_for(e->opt.quant_sim));
    return fwd_backend_open(e, &cpu_ops, ctx, cpu_ops_free, err);
}

static void cpu_close(ds4_engine *e)
{
    fwd_backend_close(e, cpu_ops_free);
}

static void cpu_describe(const ds4_engine *e, ds4_model_info *info)
{
    int n = cpu_ops_threads(fwd_ops_ctx(e->impl));
    bool q8k = cpu_expert_arith_for(e->opt.quant_sim) == CPU_EXPERTS_Q8K;
    snprintf(info->device_name, sizeof info->device_name, "cpu (%d thread%s, %s%s%s)", n, n == 1 ? "" : "s",
             cpu_kernels_isa(), q8k ? ", experts Q8_K " : "", q8k ? qk_level_name(qk_level_active()) : "");
}

static uint64_t cpu_session_bytes(const ds4_engine *e, int n_ctx)
{
    fwd_engine *f = e->impl;
    return fwd_session_buffers_bytes(f, n_ctx) +
           cpu_ops_scratch_estimate(e->model, fwd_chunk(f) < n_ctx ? fwd_chunk(f) : n_ctx, n_ctx,
                                    cpu_ops_threads(fwd_ops_ctx(f)));
}

const ds4_backend_ops ds4_backend_cpu = {
    .name = "cpu",
    .needs_model = true,
    .open = cpu_open,
    .close = cpu_close,
    .describe = cpu_describe,
    .session_bytes = cpu_session_bytes,
    FWD_BACKEND_SESSION_OPS,
};
