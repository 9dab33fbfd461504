/* stream_plan.c — sizing the expert cache (see stream_plan.h). */
#include "engine/stream_plan.h"

#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "engine/expert_cache.h"

void stream_shape_of(const ds4_model *m, ds4_expert_shape *out)
{
    memset(out, 0, sizeof *out);
    const ds4_hparams *hp = &m->hp;
    out->weights_bytes = m->weights_bytes;
    out->expert_bytes = expert_cache_expert_bytes(m);
    out->resident_bytes = out->weights_bytes - out->expert_bytes;
    out->slot_bytes = expert_cache_slot_bytes(m);
    out->n_experts = (uint64_t)hp->n_layer * (uint64_t)hp->n_expert;
    out->min_slots = hp->n_expert_used;
    out->token_bytes = hp->n_expert ? out->expert_bytes / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used : 0;
}

int stream_plan_make(const ds4_expert_shape *s, uint64_t usable, uint64_t session, uint64_t session_want, uint64_t want,
                     bool force, ds4_expert_plan *out)
{
    memset(out, 0, sizeof *out);
    if (session_want < session) session_want = session;
    if (!force && s->weights_bytes + session_want <= usable) return 0;
    uint64_t least = (uint64_t)s->min_slots * s->slot_bytes;
    char r[32], se[32], u[32], l[32];
    if (s->resident_bytes + session + least > usable && !want) {
        snprintf(out->refusal, sizeof out->refusal,
                 "the non-routed weights (%s) and a session (%s) leave no room for an expert cache in %s "
                 "usable: it needs at least %s (%d experts)",
                 format_bytes(r, sizeof r, s->resident_bytes), format_bytes(se, sizeof se, session),
                 format_bytes(u, sizeof u, usable), format_bytes(l, sizeof l, least), s->min_slots);
        return -1;
    }
    uint64_t budget = want;
    if (!budget) {
        /* the share, less what the preferred session needs; at least one
         * request, which the smallest session leaves room for (above) */
        uint64_t left = usable - s->resident_bytes, room = left > session_want ? left - session_want : 0;
        budget = (uint64_t)((double)left * STREAM_CACHE_SHARE);
        if (budget > room) budget = room;
        if (budget < least) budget = least;
    }
    uint64_t slots = s->slot_bytes ? budget / s->slot_bytes : 0;
    if (slots > s->n_experts) slots = s->n_experts;
    if (slots < (uint64_t)s->min_slots) {
        snprintf(out->refusal, sizeof out->refusal, "an expert cache of %s is too small: it needs at least %s (%d experts)",
                 format_bytes(u, sizeof u, budget), format_bytes(l, sizeof l, least), s->min_slots);
        return -1;
    }
    out->streaming = true;
    out->slots = slots;
    out->cache_bytes = slots * s->slot_bytes;
    return 0;
}

uint64_t ds4_expert_disk_bytes(const ds4_expert_shape *s, double hit_rate)
{
    if (hit_rate < 0) hit_rate = 0;
    if (hit_rate > 1) hit_rate = 1;
    return (uint64_t)((double)s->token_bytes * (1.0 - hit_rate) + 0.5);
}

double ds4_expert_uniform_hit_rate(const ds4_expert_shape *s, uint64_t slots)
{
    return s->n_experts ? (double)(slots < s->n_experts ? slots : s->n_experts) / (double)s->n_experts : 1.0;
}
