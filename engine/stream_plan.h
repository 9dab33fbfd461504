/* stream_plan.h — where the routed experts live when host memory is
 * smaller than the model file, and what that costs per token.
 *
 * Pure arithmetic over a model's shape and the memory a plan may use: the
 * non-routed weights and a session stay resident, the routed experts go
 * through an expert cache (engine/expert_cache.h) of whole-expert slots
 * sized from what is left, and the rest is read from the file as tokens
 * need it. A plan is refused only when the non-routed weights and the
 * smallest session leave no room for one token's experts of a layer.
 */
#ifndef DS4CL_STREAM_PLAN_H
#define DS4CL_STREAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model.h"

/* Share of the memory left after the non-routed weights that an automatic
 * budget gives the cache (the rest: the session and its growth). */
#define STREAM_CACHE_SHARE 0.8

typedef struct {
    uint64_t weights_bytes;  /* tensor bytes of the file */
    uint64_t expert_bytes;   /* the routed experts among them */
    uint64_t resident_bytes; /* the rest: kept in memory */
    uint64_t slot_bytes;     /* one cache slot (expert_cache_slot_bytes) */
    uint64_t n_experts;      /* layers × routed experts */
    int min_slots;           /* experts per token (a layer's request) */
    uint64_t token_bytes;    /* routed expert bytes one decoded token reads */
} stream_shape;

void stream_shape_of(const ds4_model *m, stream_shape *out);

typedef struct {
    bool streaming;         /* the experts go through a cache */
    uint64_t cache_bytes;   /* its budget (whole slots) */
    uint64_t slots;
    char refusal[512];      /* why no plan works, in numbers; "" otherwise */
} stream_plan;

/* usable: the memory a plan may use (after any reserve); session: a
 * session of the least context the caller will take; session_want: one
 * of the context it would like (the automatic budget leaves room for it
 * where it can); want: a budget asked for (0: automatic); force: stream
 * even when everything fits (a budget was given). Without force and with
 * room for the whole file and the wanted session, nothing streams.
 * Returns 0, or -1 with out->refusal. */
int stream_plan_make(const stream_shape *s, uint64_t usable, uint64_t session, uint64_t session_want, uint64_t want,
                     bool force, stream_plan *out);

/* Bytes read from the file per decoded token at a cache hit rate. */
uint64_t stream_disk_bytes(const stream_shape *s, double hit_rate);

/* The hit rate of a cache of `slots` under uniform routing (the worst
 * case): the share of the experts it holds. */
double stream_uniform_hit_rate(const stream_shape *s, uint64_t slots);

#endif
