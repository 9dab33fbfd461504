/* backend_cpu.c — the CPU backend: the forward schedule over the host ops
 * of cpu_ops.c. */
#include "engine/backend.h"
#include "cpu/cpu_ops.h"
#include "engine/expert_warm.h"
#include "engine/forward.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cpu/cpu_kernels.h"
#include "cpu/qk.h"

static void preload_progress(void *ud, double f)
{
    const ds4_engine *e = ud;
    e->opt.load_progress(e->opt.load_ud, f, "preloading popular experts");
}

/* The experts the previous runs used most, back in the cache. */
static int warm_start(const ds4_engine *e, expert_cache *ec, ds4_error *err)
{
    if (!e->opt.expert_stats || !expert_warm_load(ec, e->identity, e->opt.expert_stats)) return 0;
    return expert_cache_preload(ec, e->opt.load_progress ? preload_progress : NULL, (void *)e, err) < 0 ? -1 : 0;
}

/* An ops context over e's model: the backend's own, or one that computes
 * parts another backend's placement keeps in host memory. */
static int cpu_ops_for(const ds4_engine *e, const ds4_ops **ops, void **ctx, void (**free_ctx)(void *), ds4_error *err)
{
    *ctx = cpu_ops_new(e->model, e->opt.threads, err);
    if (!*ctx) return -1;
    cpu_ops_set_expert_arith(*ctx, cpu_expert_arith_for(e->opt.quant_sim));
    if (e->opt.expert_cache && !e->opt.plan_only) {
        expert_cache *ec = expert_cache_open(e->model_path, e->model, e->opt.expert_cache, err);
        if (!ec || cpu_ops_set_expert_cache(*ctx, ec, err) || warm_start(e, ec, err)) {
            cpu_ops_free(*ctx);
            return -1;
        }
    }
    *ops = &cpu_ops;
    *free_ctx = cpu_ops_free;
    return 0;
}

static int cpu_open(ds4_engine *e, ds4_error *err)
{
    const ds4_ops *ops;
    void *ctx;
    void (*free_ctx)(void *);
    if (cpu_ops_for(e, &ops, &ctx, &free_ctx, err)) return -1;
    return fwd_backend_open(e, ops, ctx, free_ctx, err);
}

static void cpu_close(ds4_engine *e)
{
    expert_cache *ec = e->impl ? cpu_ops_expert_cache(fwd_ops_ctx(e->impl)) : NULL;
    ds4_error err = { "" };
    /* the popularity for the next start; a failure costs only its warmth */
    if (ec && e->opt.expert_stats && expert_warm_save(ec, e->identity, e->opt.expert_stats, &err) != 0)
        fprintf(stderr, "ds4cl: cannot keep the experts' popularity: %s\n", err.msg);
    fwd_backend_close(e, cpu_ops_free);
}

static void cpu_describe(const ds4_engine *e, ds4_model_info *info)
{
    int n = cpu_ops_threads(fwd_ops_ctx(e->impl));
    bool q8k = cpu_expert_arith_for(e->opt.quant_sim) == CPU_EXPERTS_Q8K;
    snprintf(info->device_name, sizeof info->device_name, "cpu (%d thread%s, %s, experts %s%s)", n, n == 1 ? "" : "s",
             cpu_kernels_isa(), q8k ? "Q8_K " : "exact f32", q8k ? qk_level_name(qk_level_active()) : "");
}

const char *ds4_cpu_experts_mode(ds4_quant_sim q, const char **note)
{
    if (note) *note = *cpu_expert_arith_error() ? cpu_expert_arith_error() : qk_level_error();
    return cpu_expert_arith_name(cpu_expert_arith_for(q));
}

static const expert_cache *cpu_expert_cache(const ds4_engine *e)
{
    return e->impl ? cpu_ops_expert_cache(fwd_ops_ctx(e->impl)) : NULL;
}

static uint64_t cpu_session_bytes(const ds4_engine *e, int n_ctx)
{
    fwd_engine *f = e->impl;
    return fwd_session_buffers_bytes(f, n_ctx) +
           cpu_ops_scratch_estimate(e->model, fwd_chunk(f) < n_ctx ? fwd_chunk(f) : n_ctx, n_ctx,
                                    cpu_ops_threads(fwd_ops_ctx(f)));
}

/* One device: the host, whatever `piece` says (the CPU backend takes no
 * device selection). */
static int cpu_devices(const char *piece, const char *src, ds4_device **out, int *n, int *selected, ds4_error *err)
{
    (void)piece, (void)src;
    ds4_device *d = calloc(1, sizeof *d);
    if (!d) return ds4_error_set(err, "out of memory");
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    d->kind = DS4_DEVICE_CPU;
    snprintf(d->name, sizeof d->name, "host CPU (%s kernels)", cpu_kernels_isa());
    d->compute_units = cores > 0 ? (uint32_t)cores : 1;
    d->memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    d->max_alloc = d->memory;
    d->shares_host_memory = true;
    *out = d;
    *n = 1;
    *selected = 0;
    return 0;
}

static const ds4_backend_ops cpu_backend = {
    .id = DS4_BACKEND_CPU,
    .name = "cpu",
    .needs_model = true,
    .open = cpu_open,
    .close = cpu_close,
    .devices = cpu_devices,
    .describe = cpu_describe,
    .session_bytes = cpu_session_bytes,
    .ops_new = cpu_ops_for,
    .expert_cache = cpu_expert_cache,
    FWD_BACKEND_SESSION_OPS,
};
DS4_BACKEND_REGISTER(cpu_backend)
