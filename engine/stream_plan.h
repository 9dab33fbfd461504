/* stream_plan.h — where the routed experts live when host memory is
 * smaller than the model file, and what that costs per token.
 *
 * Pure arithmetic over a model's shape and the memory a plan may use: the
 * non-routed weights and a session stay resident, the routed experts go
 * through an expert cache (engine/expert_cache.h) of whole-expert slots
 * sized from what is left, and the rest is read from the file as tokens
 * need it (ds4_expert_setup_plan in engine/ds4.h plans with it before
 * loading; ds4_expert_disk_bytes and ds4_expert_uniform_hit_rate, defined
 * in stream_plan.c, say what a plan costs). A plan is refused only when
 * the non-routed weights and the smallest session leave no room for one
 * token's experts of a layer.
 */
#ifndef DS4CL_STREAM_PLAN_H
#define DS4CL_STREAM_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "engine/model.h"

/* Share of the memory left after the non-routed weights that an automatic
 * budget gives the cache (the rest: the session and its growth). */
#define STREAM_CACHE_SHARE 0.8

/* The shape (engine/ds4.h: ds4_expert_shape) of m's routed experts. */
void stream_shape_of(const ds4_model *m, ds4_expert_shape *out);

/* usable: the memory a plan may use (after any reserve); session: a
 * session of the least context the caller will take; session_want: one
 * of the context it would like (the automatic budget leaves room for it
 * where it can); want: a budget asked for (0: automatic); force: stream
 * even when everything fits (a budget was given). Without force and with
 * room for the whole file and the wanted session, nothing streams.
 * Returns 0, or -1 with out->refusal. */
int stream_plan_make(const ds4_expert_shape *s, uint64_t usable, uint64_t session, uint64_t session_want, uint64_t want,
                     bool force, ds4_expert_plan *out);

#endif
