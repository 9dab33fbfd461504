/* plan.c — the placement plan's arithmetic (plan.h). */
#include "engine/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define DEFAULT_MAX_CTX (1 << 20)

static void each(const ds4_tensor *t, plan_tensor_fn fn, void *ud)
{
    if (ds4_tensor_present(t) && t->nbytes) fn(ud, t);
}

void plan_part_tensors(const ds4_model *m, plan_part part, int layer, plan_tensor_fn fn, void *ud)
{
    if (part == PLAN_EMBED) {
        each(&m->token_embd, fn, ud);
        return;
    }
    if (part == PLAN_HEAD) {
        const ds4_tensor *h[] = { &m->output_hc_fn, &m->output_hc_base, &m->output_hc_scale, &m->output_norm,
                                  &m->output };
        for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) each(h[i], fn, ud);
        return;
    }
    const ds4_layer *L = &m->layers[layer];
    if (part == PLAN_ATTN) {
        const ds4_tensor *a[] = { &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base, &L->attn_norm,
                                  &L->attn_q_a, &L->attn_q_a_norm, &L->attn_q_b, &L->attn_kv,
                                  &L->attn_kv_a_norm, &L->attn_sinks, &L->attn_output_a, &L->attn_output_b,
                                  &L->comp_ape, &L->comp_kv, &L->comp_gate, &L->comp_norm,
                                  &L->idx_q_b, &L->idx_proj, &L->idx_comp_ape, &L->idx_comp_kv,
                                  &L->idx_comp_gate, &L->idx_comp_norm };
        for (size_t i = 0; i < sizeof a / sizeof a[0]; i++) each(a[i], fn, ud);
    } else if (part == PLAN_FFN) {
        const ds4_tensor *f[] = { &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base, &L->ffn_norm,
                                  &L->ffn_gate_inp, &L->exp_probs_b, &L->tid2eid, &L->ffn_gate_shexp,
                                  &L->ffn_up_shexp, &L->ffn_down_shexp };
        for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) each(f[i], fn, ud);
    } else {
        each(&L->ffn_gate_exps, fn, ud);
        each(&L->ffn_up_exps, fn, ud);
        each(&L->ffn_down_exps, fn, ud);
    }
}

static void add_bytes(void *ud, const ds4_tensor *t) { *(uint64_t *)ud += t->nbytes; }

uint64_t plan_part_bytes(const ds4_model *m, plan_part part, int layer)
{
    uint64_t n = 0;
    plan_part_tensors(m, part, layer, add_bytes, &n);
    return n;
}

/* The model's bytes by part, summed once. */
typedef struct {
    int n_layer;
    bool has_embed;            /* the planned range starts at layer 0 */
    uint64_t embed, head, embed_row;
    uint64_t *dense, *experts; /* per layer */
    double token_share;        /* of a layer's expert bytes read per token */
} sizes;

static void sizes_of(const ds4_model *m, sizes *z)
{
    const ds4_hparams *hp = &m->hp;
    size_t n = hp->n_layer > 0 ? (size_t)hp->n_layer : 1;
    *z = (sizes){ .n_layer = hp->n_layer, .dense = xcalloc(n, sizeof *z->dense), .experts = xcalloc(n, sizeof *z->experts) };
    z->embed = plan_part_bytes(m, PLAN_EMBED, 0);
    z->head = plan_part_bytes(m, PLAN_HEAD, 0);
    z->embed_row = hp->n_vocab > 0 ? z->embed / (uint64_t)hp->n_vocab : 0;
    for (int l = 0; l < hp->n_layer; l++) {
        z->dense[l] = plan_part_bytes(m, PLAN_ATTN, l) + plan_part_bytes(m, PLAN_FFN, l);
        z->experts[l] = plan_part_bytes(m, PLAN_EXPERTS, l);
    }
    z->token_share = hp->n_expert > 0 ? (double)hp->n_expert_used / (double)hp->n_expert : 1.0;
}

static void sizes_free(sizes *z)
{
    free(z->dense);
    free(z->experts);
}

/* The layers planned: [*first, end). */
static int range_of(const ds4_model *m, const plan_input *in, int *first)
{
    *first = in->layer_end > 0 ? in->layer_first : 0;
    return in->layer_end > 0 ? in->layer_end : m->hp.n_layer;
}

int plan_split(const ds4_model *m, const plan_input *in, ds4_placement *out, ds4_error *err)
{
    int l0, l1 = range_of(m, in, &l0);
    int nd = in->n_devices;
    if (nd < 1 || nd > DS4_MAX_DEVICES) return ds4_error_set(err, "%d devices: from 1 to %d can share a model", nd, DS4_MAX_DEVICES);
    double w[DS4_MAX_DEVICES];
    bool given = false;
    for (int d = 0; d < nd; d++) given |= in->split[d] > 0;
    /* by memory where it is known; equal shares where it is not */
    for (int d = 0; d < nd; d++)
        w[d] = given ? in->split[d] : in->memory[d] ? (double)(in->memory[d] - ds4_memory_reserve(in->memory[d])) : 1.0;
    int bound[DS4_MAX_DEVICES + 1];
    if (ds4_split_layers(l1 - l0, nd, w, "device", bound, err)) return -1;
    out->n_devices = nd;
    out->n_layer = m->hp.n_layer;
    for (int d = 0; d < nd; d++) {
        out->dev[d].first_layer = l0 + bound[d];
        out->dev[d].n_layers = bound[d + 1] - bound[d];
        /* the stage that starts the pass also ends it */
        out->dev[d].head = d == nd - 1 && l0 == 0;
    }
    return 0;
}

/* Device d's weight bytes with the first h layers of its range keeping
 * their experts on the host. */
static uint64_t dev_weights(const sizes *z, const ds4_placement_device *dv, int d, int h, bool embed_host)
{
    uint64_t w = (dv->head ? z->head : 0) + (d == 0 && z->has_embed && !embed_host ? z->embed : 0);
    for (int l = dv->first_layer; l < dv->first_layer + dv->n_layers; l++)
        w += z->dense[l] + (l - dv->first_layer >= h ? z->experts[l] : 0);
    return w;
}

/* Room for streaming the largest of the first h layers' experts through
 * the device (when asked for and there are host layers). */
static uint64_t dev_stream(const sizes *z, const plan_input *in, const ds4_placement_device *dv, int h)
{
    uint64_t most = 0;
    if (in->stream_experts > 0)
        for (int l = dv->first_layer; l < dv->first_layer + h; l++)
            if (z->experts[l] > most) most = z->experts[l];
    return most;
}

static uint64_t dev_total(const sizes *z, const plan_input *in, const ds4_placement_device *dv, int d, int h,
                          bool embed_host, int n_ctx)
{
    /* streamed experts run here: the MoE's scratch counts then too */
    bool moe = h < dv->n_layers || (h > 0 && in->stream_experts > 0);
    return dev_weights(z, dv, d, h, embed_host) + dev_stream(z, in, dv, h) + in->session_bytes(in->ud, d, n_ctx, moe);
}

static int dev_largest_ctx(const sizes *z, const plan_input *in, const ds4_placement_device *dv, int d, int h,
                           bool embed_host)
{
    int hi = in->max_ctx > 0 ? in->max_ctx : DEFAULT_MAX_CTX;
    if (dev_total(z, in, dv, d, h, embed_host, 1) > dv->budget) return 0;
    if (dev_total(z, in, dv, d, h, embed_host, hi) <= dv->budget) return hi;
    int good = 1, bad = hi;
    while (bad - good > 1) {
        int mid = good + (bad - good) / 2;
        if (dev_total(z, in, dv, d, h, embed_host, mid) <= dv->budget) good = mid;
        else bad = mid;
    }
    return good;
}

/* The host layers device d takes for the request. */
static int dev_host_layers(const sizes *z, const plan_input *in, const ds4_placement_device *dv, int d, bool embed_host)
{
    int want = in->host_expert_layers;
    if (want == DS4_EXPERTS_ON_DEVICE) return 0;
    if (want > 0) {
        /* the first N layers of the model: the part of them in this range */
        int h = want - dv->first_layer;
        return h < 0 ? 0 : h > dv->n_layers ? dv->n_layers : h;
    }
    if (!dv->memory || dv->shares_host_memory) return 0;
    int h = 0;
    while (h < dv->n_layers && dev_total(z, in, dv, d, h, embed_host, in->n_ctx) > dv->budget) h++;
    return h;
}

static void refuse(const sizes *z, const plan_input *in, const ds4_placement *out, int d, ds4_error *err)
{
    const ds4_placement_device *dv = &out->dev[d];
    char w[32], s[32], have[32], usable[32], who[200] = "the device";
    format_bytes(w, sizeof w, dv->weights);
    format_bytes(s, sizeof s, dv->session);
    format_bytes(have, sizeof have, dv->memory);
    format_bytes(usable, sizeof usable, dv->budget);
    if (out->n_devices > 1) snprintf(who, sizeof who, "device %d (%.100s, layers %d-%d)", d, dv->name, dv->first_layer,
                                     dv->first_layer + dv->n_layers - 1);
    int all_host = dev_largest_ctx(z, in, dv, d, dv->n_layers, true);
    if (in->host_expert_layers > 0 && dv->host_expert_layers < dv->n_layers) {
        /* the user's number is too small: say which would do */
        int ok = 0;
        for (int h = dv->host_expert_layers + 1; h <= dv->n_layers && !ok; h++)
            if (dev_total(z, in, dv, d, h, true, in->n_ctx) <= dv->budget) ok = dv->first_layer + h;
        if (ok) {
            ds4_error_set(err,
                          "with the routed experts of the first %d layer%s in host memory %s needs %s of weights and "
                          "%s for a session of %d tokens, more than the %s usable of its %s; %d layers "
                          "(--n-cpu-moe %d) or the automatic placement fit",
                          in->host_expert_layers, in->host_expert_layers == 1 ? "" : "s", who, w, s, in->n_ctx, usable,
                          have, ok, ok);
            return;
        }
    }
    if (in->host_expert_layers == DS4_EXPERTS_ON_DEVICE && all_host > 0) {
        ds4_error_set(err,
                      "with every routed expert on the device %s needs %s of weights and %s for a session of %d "
                      "tokens, more than the %s usable of its %s; leave the experts' placement automatic to keep "
                      "some in host memory",
                      who, w, s, in->n_ctx, usable, have);
        return;
    }
    char tail[160];
    if (all_host > 0) snprintf(tail, sizeof tail, "; the largest context that fits is %d tokens (--ctx %d)", all_host, all_host);
    else snprintf(tail, sizeof tail, "; no context fits: use a device with more memory%s or --backend cpu",
                  out->n_devices > 1 ? ", another --split" : "");
    ds4_error_set(err,
                  "%s cannot hold its part of the model: with every routed expert of its layers in host memory it "
                  "needs %s of weights and %s for a session of %d tokens, more than the %s usable of its %s%s",
                  who, w, s, in->n_ctx, usable, have, tail);
}

int plan_make(const ds4_model *m, const plan_input *in, ds4_placement *out, ds4_error *err)
{
    sizes z;
    sizes_of(m, &z);
    int l0, l1 = range_of(m, in, &l0);
    z.has_embed = l0 == 0;
    int nd = out->n_devices;
    out->n_layer = m->hp.n_layer;
    out->n_ctx = in->n_ctx;
    out->refusal[0] = 0;
    for (int d = 0; d < nd; d++) {
        ds4_placement_device *dv = &out->dev[d];
        dv->memory = in->memory[d];
        dv->shares_host_memory = in->shares_host_memory[d];
        dv->budget = dv->memory - ds4_memory_reserve(dv->memory);
    }
    /* The embedding goes to the host as soon as any experts do; a device
     * that needed host layers only for the embedding's room keeps none. */
    bool embed_host = false;
    for (int d = 0; d < nd; d++) embed_host |= dev_host_layers(&z, in, &out->dev[d], d, false) > 0;
    out->embed_on_host = embed_host;
    out->fits = true;
    out->shares_host_memory = true;
    out->host_expert_layers = 0;
    out->device_memory = out->device_budget = out->device_weights = out->device_session = out->stream_bytes = 0;
    out->stream_experts = in->stream_experts > 0 ? in->stream_experts : 0;
    out->token_device_bytes = 0;
    out->largest_ctx = out->largest_ctx_all_host = in->max_ctx > 0 ? in->max_ctx : DEFAULT_MAX_CTX;
    uint64_t total = z.has_embed ? z.embed + z.head : 0, host_exp = 0;
    int failed = -1;
    for (int l = l0; l < l1; l++) total += z.dense[l] + z.experts[l];
    for (int d = 0; d < nd; d++) {
        ds4_placement_device *dv = &out->dev[d];
        int h = dev_host_layers(&z, in, dv, d, embed_host);
        dv->host_expert_layers = h;
        dv->weights = dev_weights(&z, dv, d, h, embed_host);
        dv->stream_bytes = dev_stream(&z, in, dv, h);
        dv->session = in->session_bytes(in->ud, d, in->n_ctx, h < dv->n_layers || dv->stream_bytes > 0);
        uint64_t dev_exp = 0;
        for (int l = dv->first_layer; l < dv->first_layer + dv->n_layers; l++) {
            if (l - dv->first_layer < h) host_exp += z.experts[l];
            else dev_exp += z.experts[l];
        }
        bool embed_here = d == 0 && z.has_embed && !embed_host;
        dv->token_bytes = dv->weights - dev_exp - (embed_here ? z.embed : 0) + (uint64_t)((double)dev_exp * z.token_share) +
                          (embed_here ? z.embed_row : 0);
        bool budgeted = dv->memory && !dv->shares_host_memory;
        dv->fits = !budgeted || dv->weights + dv->stream_bytes + dv->session <= dv->budget;
        if (budgeted) {
            int lc = dev_largest_ctx(&z, in, dv, d, h, embed_host), la = dev_largest_ctx(&z, in, dv, d, dv->n_layers, true);
            if (lc < out->largest_ctx) out->largest_ctx = lc;
            if (la < out->largest_ctx_all_host) out->largest_ctx_all_host = la;
        }
        if (!dv->fits && failed < 0) failed = d;
        out->fits &= dv->fits;
        out->shares_host_memory &= dv->shares_host_memory;
        out->host_expert_layers += h;
        out->device_memory += dv->memory;
        out->device_budget += dv->budget;
        out->device_weights += dv->weights;
        out->device_session += dv->session;
        out->stream_bytes += dv->stream_bytes;
        out->token_device_bytes += dv->token_bytes;
    }
    out->host_weights = total - out->device_weights;
    out->token_host_bytes = (uint64_t)((double)host_exp * z.token_share) + (embed_host && z.has_embed ? z.embed_row : 0);
    if (nd == 1 || !out->device_name[0]) snprintf(out->device_name, sizeof out->device_name, "%s", out->dev[0].name);
    int rc = 0;
    if (failed >= 0) {
        ds4_error why = { "" };
        refuse(&z, in, out, failed, &why);
        snprintf(out->refusal, sizeof out->refusal, "%.511s", why.msg);
        rc = ds4_error_set(err, "%s", why.msg);
    }
    sizes_free(&z);
    return rc;
}

void plan_to_fwd(const ds4_placement *p, const uint8_t *dev, uint8_t host, fwd_layer_place *lp, fwd_placement *fp)
{
    for (int d = 0; d < p->n_devices; d++) {
        const ds4_placement_device *dv = &p->dev[d];
        for (int l = dv->first_layer; l < dv->first_layer + dv->n_layers; l++)
            lp[l] = (fwd_layer_place){ .attn = dev[d], .ffn = dev[d],
                                       .experts = l - dv->first_layer < dv->host_expert_layers ? host : dev[d] };
    }
    *fp = (fwd_placement){ .embed = p->embed_on_host ? host : dev[0], .head = dev[p->n_devices - 1], .layer = lp };
}
