/* place.c — the engine places the model over a backend's devices
 * (backend.h, ds4_device_ops): it opens the devices a device list names,
 * plans which layers and parts each holds and what stays in host memory
 * for the CPU backend (plan.h), applies the plan to the forward pass, and
 * tells each device which weights to hold. The backend answers questions
 * about its devices and allocates what it is told; it never sees the
 * plan. */
#include "engine/place.h"
#include "engine/forward.h"
#include "engine/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const ds4_device_ops *dev_ops(const ds4_engine *e) { return e->backend->device; }

/* Device d's share of a session of n_ctx tokens: the schedule's buffers
 * on its backend (backend d: devices come first) and its scratch. */
static uint64_t device_session_bytes(void *ud, int d, int n_ctx, bool experts)
{
    const ds4_engine *e = ud;
    fwd_engine *f = e->impl;
    int T = fwd_chunk(f) < n_ctx ? fwd_chunk(f) : n_ctx;
    return fwd_session_buffers_bytes_on(f, n_ctx, d) + dev_ops(e)->scratch_bytes(fwd_backend_ctx(f, d), T, n_ctx, experts);
}

typedef struct {
    const ds4_tensor **t;
    size_t n, cap;
} tensor_list;

static void list_add(void *ud, const ds4_tensor *t)
{
    tensor_list *l = ud;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->t = xrealloc(l->t, l->cap * sizeof *l->t);
    }
    l->t[l->n++] = t;
}

/* Gives each device the weights of the parts the plan puts there. */
static int hold_weights(ds4_engine *e, ds4_error *err)
{
    const ds4_model *m = e->model;
    const ds4_placement *p = &e->place;
    for (int d = 0; d < p->n_devices; d++) {
        const ds4_placement_device *dv = &p->dev[d];
        tensor_list l = { 0 };
        if (d == 0 && dv->first_layer == 0 && !p->embed_on_host) plan_part_tensors(m, PLAN_EMBED, 0, list_add, &l);
        for (int i = dv->first_layer; i < dv->first_layer + dv->n_layers; i++) {
            plan_part_tensors(m, PLAN_ATTN, i, list_add, &l);
            plan_part_tensors(m, PLAN_FFN, i, list_add, &l);
            if (i - dv->first_layer >= dv->host_expert_layers) plan_part_tensors(m, PLAN_EXPERTS, i, list_add, &l);
        }
        if (dv->head) plan_part_tensors(m, PLAN_HEAD, 0, list_add, &l);
        int rc = dev_ops(e)->hold(e, fwd_backend_ctx(e->impl, d), l.t, l.n, err);
        free(l.t);
        if (rc) return -1;
    }
    return 0;
}

/* The forward placement of the plan in force: devices are backends
 * 0 … n−1, the host (when the plan uses it) backend n. */
static int apply_placement(ds4_engine *e, int host, ds4_error *err)
{
    const ds4_placement *p = &e->place;
    uint8_t dev[DS4_MAX_DEVICES];
    for (int d = 0; d < p->n_devices; d++) dev[d] = (uint8_t)d;
    fwd_layer_place *lp = xcalloc((size_t)p->n_layer, sizeof *lp);
    fwd_placement fp;
    plan_to_fwd(p, dev, (uint8_t)(host >= 0 ? host : 0), lp, &fp);
    int rc = fwd_set_placement(e->impl, &fp, err);
    free(lp);
    return rc;
}

/* The parts the plan keeps in host memory run on the host backend (the
 * registry's), added as backend n_dev; the sessions' device shares are
 * then sized again under the placement in force. */
static int place_on_host(ds4_engine *e, int n_dev, ds4_error *err)
{
    ds4_placement *p = &e->place;
    const ds4_backend_ops *hb = engine_host_backend();
    const ds4_ops *ops;
    void *cpu;
    void (*free_cpu)(void *);
    if (!hb || hb->ops_new(e, &ops, &cpu, &free_cpu, err)) return -1;
    int host = fwd_add_backend(e->impl, ops, cpu, free_cpu, err);
    if (host < 0 || apply_placement(e, host, err)) return -1;
    p->device_session = 0;
    for (int d = 0; d < n_dev; d++) {
        ds4_placement_device *dv = &p->dev[d];
        dv->session = device_session_bytes(e, d, p->n_ctx, dv->host_expert_layers < dv->n_layers || dv->stream_bytes);
        p->device_session += dv->session;
    }
    if (p->stream_bytes) fwd_set_stream(e->impl, p->stream_experts);
    return 0;
}

/* Plans the placement (plan.h) over the devices already opened as
 * backends 0 … n−1. A plan that does not fit fails the open, except when
 * only planning: then the caller reads the numbers from
 * ds4_engine_placement. */
static int place_model(ds4_engine *e, int n_dev, ds4_error *err)
{
    fwd_engine *f = e->impl;
    plan_input in = {
        .n_devices = n_dev,
        .n_ctx = e->opt.plan_ctx > 0 ? e->opt.plan_ctx : DS4_DEFAULT_PLAN_CTX,
        .max_ctx = (int)(e->model->hp.n_ctx_train > 0 && e->model->hp.n_ctx_train < (1 << 30) ? e->model->hp.n_ctx_train : 0),
        .host_expert_layers = e->opt.host_expert_layers,
        .layer_first = e->opt.layer_first,
        .layer_end = e->opt.layer_end,
        .stream_experts = e->opt.stream_experts,
        .session_bytes = device_session_bytes,
        .ud = e,
    };
    ds4_placement *p = &e->place;
    memset(p, 0, sizeof *p);
    for (int d = 0; d < n_dev; d++) {
        ds4_device dv;
        memset(&dv, 0, sizeof dv);
        dev_ops(e)->describe(fwd_backend_ctx(f, d), &dv);
        in.memory[d] = e->opt.device_memory ? e->opt.device_memory : dv.memory;
        in.shares_host_memory[d] = dv.shares_host_memory;
        snprintf(p->dev[d].name, sizeof p->dev[d].name, "%s", dv.name);
    }
    if (n_dev > 1)
        snprintf(p->device_name, sizeof p->device_name, "%d %s devices: %.40s, %.40s%s", n_dev, dev_ops(e)->family,
                 p->dev[0].name, p->dev[1].name, n_dev > 2 ? ", …" : "");
    if (e->opt.split && *e->opt.split) {
        char what[160];
        snprintf(what, sizeof what, "--split %s", e->opt.split);
        if (ds4_parse_shares(e->opt.split, n_dev, in.split, what, "device", err)) return -1;
    }
    if (plan_split(e->model, &in, p, err)) return -1;
    e->placed = true;
    /* each range's state on its device before sizing the sessions */
    if (n_dev > 1 && apply_placement(e, -1, err)) return -1;
    if (plan_make(e->model, &in, p, err) && !e->opt.plan_only) return -1;
    if ((p->host_expert_layers > 0 || p->embed_on_host) && place_on_host(e, n_dev, err)) return -1;
    return 0;
}

/* The devices of opt.device ("0,1": several; NULL or one piece: one),
 * each opened as a context without weights, the first as the forward
 * pass's own backend. Returns how many, or -1. */
static int open_devices(ds4_engine *e, ds4_error *err)
{
    const ds4_device_ops *dops = dev_ops(e);
    char pieces[DS4_MAX_DEVICES][DS4_DEVICE_PIECE_MAX];
    const char *src;
    int n = engine_device_pieces(e->opt.device, pieces, &src, err);
    if (n < 0) return -1;
    int count = n ? n : 1;
    int index[DS4_MAX_DEVICES];
    for (int d = 0; d < count; d++) {
        const ds4_ops *ops;
        void *ctx;
        if (dops->open(e, n ? pieces[d] : NULL, &ops, &ctx, err)) return -1;
        ds4_device dv;
        memset(&dv, 0, sizeof dv);
        dops->describe(ctx, &dv);
        index[d] = dv.index;
        for (int k = 0; k < d; k++)
            if (index[k] == index[d]) {
                dops->free(ctx);
                return ds4_error_set(err, "%s %s: device %d is named twice", src,
                                     src[0] == '-' ? e->opt.device : getenv("DS4CL_DEVICE"), index[d]);
            }
        int rc = d == 0 ? fwd_backend_open(e, ops, ctx, dops->free, err)
                        : fwd_add_backend(e->impl, ops, ctx, dops->free, err) < 0 ? -1 : 0;
        if (rc) return -1;
        fwd_set_on_host_cores(e->impl, d, dv.kind == DS4_DEVICE_CPU);
    }
    return count;
}

int place_open(ds4_engine *e, ds4_error *err)
{
    int n_dev = open_devices(e, err);
    if (n_dev < 0) {
        if (e->impl) place_close(e);
        return -1;
    }
    fwd_set_chunk(e->impl, dev_ops(e)->prefill_chunk);
    if (place_model(e, n_dev, err) || (!e->opt.plan_only && hold_weights(e, err))) {
        place_close(e);
        return -1;
    }
    return 0;
}

void place_close(ds4_engine *e)
{
    fwd_backend_close(e, dev_ops(e)->free);
}

uint64_t place_session_bytes(const ds4_engine *e, int n_ctx)
{
    uint64_t n = 0;
    for (int d = 0; d < e->place.n_devices; d++) {
        const ds4_placement_device *dv = &e->place.dev[d];
        n += device_session_bytes((void *)e, d, n_ctx, dv->host_expert_layers < dv->n_layers || dv->stream_bytes) +
             dv->stream_bytes;
    }
    return n;
}
