/* expert_warm.h — warm starts of the expert cache: the popularity of every
 * routed expert kept in a small file between runs, so that the next start
 * preloads the experts the last ones used most.
 *
 * File: "DS4CLPOP", u32 version 1, u64 model identity (gguf_identity),
 * u32 n_layer, u32 n_expert, then n_layer·n_expert u32 counts, little
 * endian. A file of another model or shape is ignored (a different model
 * has other popular experts), a damaged one too: both are no error.
 */
#ifndef DS4CL_EXPERT_WARM_H
#define DS4CL_EXPERT_WARM_H

#include <stdint.h>

#include "engine/ds4.h"
#include "engine/expert_cache.h"

/* Writes c's counts to path (atomically). 0, or -1 with err. */
int expert_warm_save(expert_cache *c, uint64_t identity, const char *path, ds4_error *err);

/* Sets c's counts from path: 1 when loaded, 0 when absent or not this
 * model's (nothing changed). */
int expert_warm_load(expert_cache *c, uint64_t identity, const char *path);

/* ds4_expert_stats_hit_rate (engine/ds4.h) reads such a file too. */

#endif
