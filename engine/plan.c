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

uint64_t plan_reserve(uint64_t memory)
{
    uint64_t r = memory / 16;
    return r < (1ull << 30) ? r : 1ull << 30;
}

/* The model's bytes by part, summed once. */
typedef struct {
    int n_layer;
    uint64_t embed, head, dense, experts_total;
    uint64_t *experts; /* per layer */
    double token_share; /* of a layer's expert bytes read per token */
} sizes;

static uint64_t device_weights(const sizes *z, int host_layers, bool embed_host)
{
    uint64_t w = z->dense + z->head + (embed_host ? 0 : z->embed);
    for (int l = host_layers; l < z->n_layer; l++) w += z->experts[l];
    return w;
}

static uint64_t device_total(const sizes *z, const plan_input *in, int host_layers, int n_ctx)
{
    return device_weights(z, host_layers, host_layers > 0) +
           in->session_bytes(in->ud, n_ctx, host_layers < z->n_layer);
}

static int largest_ctx(const sizes *z, const plan_input *in, int host_layers, uint64_t budget)
{
    int hi = in->max_ctx > 0 ? in->max_ctx : DEFAULT_MAX_CTX;
    if (device_total(z, in, host_layers, 1) > budget) return 0;
    if (device_total(z, in, host_layers, hi) <= budget) return hi;
    int good = 1, bad = hi;
    while (bad - good > 1) {
        int mid = good + (bad - good) / 2;
        if (device_total(z, in, host_layers, mid) <= budget) good = mid;
        else bad = mid;
    }
    return good;
}

static void fill(const sizes *z, const plan_input *in, int host_layers, ds4_placement *out)
{
    bool embed_host = host_layers > 0;
    out->host_expert_layers = host_layers;
    out->embed_on_host = embed_host;
    out->device_weights = device_weights(z, host_layers, embed_host);
    out->host_weights = z->dense + z->head + z->embed + z->experts_total - out->device_weights;
    out->device_session = in->session_bytes(in->ud, in->n_ctx, host_layers < z->n_layer);
    uint64_t host_exp = 0, dev_exp = 0;
    for (int l = 0; l < z->n_layer; l++) {
        if (l < host_layers) host_exp += z->experts[l];
        else dev_exp += z->experts[l];
    }
    out->token_device_bytes = z->dense + z->head + (uint64_t)((double)dev_exp * z->token_share);
    out->token_host_bytes = (uint64_t)((double)host_exp * z->token_share);
}

static void describe_need(char *buf, size_t n, uint64_t weights, uint64_t session, int n_ctx)
{
    char w[32], s[32];
    snprintf(buf, n, "%s of weights and %s for a session of %d tokens", format_bytes(w, sizeof w, weights),
             format_bytes(s, sizeof s, session), n_ctx);
}

static int refuse(const sizes *z, const plan_input *in, ds4_placement *out, ds4_error *err)
{
    char need[128], have[32], usable[32];
    describe_need(need, sizeof need, out->device_weights, out->device_session, in->n_ctx);
    format_bytes(have, sizeof have, out->device_memory);
    format_bytes(usable, sizeof usable, out->device_budget);
    const char *fix = out->largest_ctx_all_host > 0 ? "" : "; no context fits: use a device with more memory or --backend cpu";
    char tail[160] = "";
    if (out->largest_ctx_all_host > 0)
        snprintf(tail, sizeof tail, "; the largest context that fits is %d tokens (--ctx %d)", out->largest_ctx_all_host,
                 out->largest_ctx_all_host);
    if (in->host_expert_layers > 0 && in->host_expert_layers < z->n_layer) {
        /* the user's number is too small: say which would do */
        int ok = 0;
        for (int h = in->host_expert_layers + 1; h <= z->n_layer && !ok; h++)
            if (device_total(z, in, h, in->n_ctx) <= out->device_budget) ok = h;
        if (ok)
            return ds4_error_set(err,
                                 "with the routed experts of the first %d layer%s in host memory the device needs %s, "
                                 "more than the %s usable of its %s; %d layers (--n-cpu-moe %d) or the automatic "
                                 "placement fit",
                                 in->host_expert_layers, in->host_expert_layers == 1 ? "" : "s", need, usable, have, ok,
                                 ok);
    }
    if (in->host_expert_layers == DS4_EXPERTS_ON_DEVICE)
        return ds4_error_set(err,
                             "with every routed expert on the device it needs %s, more than the %s usable of its %s; "
                             "leave the experts' placement automatic to keep some in host memory",
                             need, usable, have);
    return ds4_error_set(err,
                         "the device cannot hold its part of the model: even with every layer's routed experts in "
                         "host memory it needs %s, more than the %s usable of its %s%s%s",
                         need, usable, have, tail, fix);
}

int plan_make(const ds4_model *m, const plan_input *in, ds4_placement *out, ds4_error *err)
{
    const ds4_hparams *hp = &m->hp;
    sizes z = { .n_layer = hp->n_layer };
    uint64_t *experts = xcalloc(hp->n_layer > 0 ? (size_t)hp->n_layer : 1, sizeof *experts);
    z.experts = experts;
    z.embed = plan_part_bytes(m, PLAN_EMBED, 0);
    z.head = plan_part_bytes(m, PLAN_HEAD, 0);
    for (int l = 0; l < hp->n_layer; l++) {
        z.dense += plan_part_bytes(m, PLAN_ATTN, l) + plan_part_bytes(m, PLAN_FFN, l);
        experts[l] = plan_part_bytes(m, PLAN_EXPERTS, l);
        z.experts_total += experts[l];
    }
    z.token_share = hp->n_expert > 0 ? (double)hp->n_expert_used / (double)hp->n_expert : 1.0;
    /* the embedding is read one row per token */
    uint64_t embed_row = hp->n_vocab > 0 ? z.embed / (uint64_t)hp->n_vocab : 0;

    char name[sizeof out->device_name];
    memcpy(name, out->device_name, sizeof name);
    memset(out, 0, sizeof *out);
    memcpy(out->device_name, name, sizeof name);
    out->n_layer = hp->n_layer;
    out->n_ctx = in->n_ctx;
    out->shares_host_memory = in->shares_host_memory;
    out->device_memory = in->memory;
    out->device_budget = in->memory - plan_reserve(in->memory);
    bool budgeted = in->memory > 0 && !in->shares_host_memory;

    int want = in->host_expert_layers;
    int h;
    if (want == DS4_EXPERTS_ON_DEVICE) h = 0;
    else if (want > 0) h = want < hp->n_layer ? want : hp->n_layer;
    else {
        h = 0;
        if (budgeted)
            while (h < hp->n_layer && device_total(&z, in, h, in->n_ctx) > out->device_budget) h++;
    }
    fill(&z, in, h, out);
    if (out->embed_on_host) out->token_host_bytes += embed_row;
    else out->token_device_bytes += embed_row;
    int rc = 0;
    if (!budgeted) {
        out->fits = true;
        out->largest_ctx = out->largest_ctx_all_host = in->max_ctx > 0 ? in->max_ctx : DEFAULT_MAX_CTX;
    } else {
        out->largest_ctx = largest_ctx(&z, in, h, out->device_budget);
        out->largest_ctx_all_host = largest_ctx(&z, in, hp->n_layer, out->device_budget);
        out->fits = out->device_weights + out->device_session <= out->device_budget;
        if (!out->fits) {
            ds4_error why = { "" };
            refuse(&z, in, out, &why);
            snprintf(out->refusal, sizeof out->refusal, "%s", why.msg);
            rc = ds4_error_set(err, "%s", why.msg);
        }
    }
    free(experts);
    return rc;
}

void plan_to_fwd(const ds4_placement *p, uint8_t dev, uint8_t host, fwd_layer_place *lp, fwd_placement *fp)
{
    for (int l = 0; l < p->n_layer; l++)
        lp[l] = (fwd_layer_place){ .attn = dev, .ffn = dev, .experts = l < p->host_expert_layers ? host : dev };
    *fp = (fwd_placement){ .embed = p->embed_on_host ? host : dev, .head = dev, .layer = lp };
}
