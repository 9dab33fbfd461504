/* expert_cache.h — routed experts kept in a bounded host-memory cache and
 * read from the model file on demand, for machines whose memory is smaller
 * than the file.
 *
 * What it promises:
 * - Memory: a fixed number of slots, each holding one whole expert of one
 *   layer (its gate, up and down rows), allocated once at open from the
 *   budget (never more: slots × slot_bytes ≤ budget) and locked in memory
 *   where the system permits (expert_cache_info says how much is). The
 *   routed-expert tensors are never read through the model's mapping:
 *   every byte comes from pread() on a descriptor of its own, with
 *   O_DIRECT where the file system takes it, else buffered reads followed
 *   by posix_fadvise(DONTNEED) on the range so that the page cache does not
 *   keep a second copy ($DS4CL_EXPERT_CACHE_BUFFERED set: always so). The
 *   mapping is advised MADV_RANDOM, so that faults on the other weights do
 *   not read ahead into the experts, and MADV_WILLNEED on the pages between
 *   the expert tensors, so that the other weights are read ahead anyway.
 * - Requests: expert_cache_begin() takes one layer's routing decision (the
 *   distinct experts a MoE call needs, at most expert_cache_slots() of
 *   them), returns where each expert's rows are, and issues every missing
 *   read at once to a pool of reader threads; the caller may compute with
 *   the experts that were resident (hit[i]) while they run, then calls
 *   expert_cache_wait() before touching the others. The slots of a request
 *   are not evicted until the next begin().
 * - Eviction: the resident expert with the lowest popularity (requests of
 *   that layer/expert, halved periodically so that old popularity fades),
 *   ties broken by the least recent use.
 * - Errors: a failed or short read (a truncated or unreadable file) makes
 *   expert_cache_wait() fail with a message naming the file and the byte
 *   offset; the slot is dropped and the cache stays usable.
 * - Counts: hits, misses and bytes read per layer (expert_cache_layer).
 *
 * Not thread safe: one request at a time (one MoE call at a time).
 */
#ifndef DS4CL_EXPERT_CACHE_H
#define DS4CL_EXPERT_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "engine/model.h"

typedef struct expert_cache expert_cache;

/* Where one expert's rows are (valid until the next begin()). */
typedef struct {
    const void *gate, *up, *down;
} expert_rows;

typedef struct {
    uint64_t hits, misses, bytes_read;
} expert_cache_counts;

typedef struct {
    int slots;
    uint64_t slot_bytes, budget;
    uint64_t locked_bytes;  /* slot memory locked in RAM (0 where mlock is refused) */
    bool direct_io;         /* reads bypass the page cache (O_DIRECT) */
    int readers;            /* reader threads */
    double read_ms;         /* time with reads in flight (from a request's first read to its last) */
    expert_cache_counts total;
} expert_cache_info;

/* Bytes one slot of m takes (the largest expert of any layer, with room to
 * align direct reads). */
uint64_t expert_cache_slot_bytes(const ds4_model *m);

/* Bytes of every layer's routed experts in m's file. */
uint64_t expert_cache_expert_bytes(const ds4_model *m);

/* A cache of budget bytes over the routed experts of m, read from the file
 * at path (the file m was bound from). Fails when the budget holds fewer
 * than m's n_expert_used slots, or the file cannot be opened. */
expert_cache *expert_cache_open(const char *path, const ds4_model *m, uint64_t budget, ds4_error *err);
void expert_cache_close(expert_cache *c);

int expert_cache_slots(const expert_cache *c);

/* The layer whose routed gate tensor is `gate` (a pointer into m's
 * layers), or -1. */
int expert_cache_layer_of(const expert_cache *c, const ds4_tensor *gate);

/* Requests experts[0 .. n) of layer (distinct ids, n ≤ slots): fills
 * rows[i] and hit[i] (resident now), and starts the reads of the others.
 * Returns the number of misses, or -1 with err on a bad request. */
int expert_cache_begin(expert_cache *c, int layer, const int32_t *experts, int n, expert_rows *rows, bool *hit,
                       ds4_error *err);
/* Waits for the reads of the last begin(). 0, or -1 with err naming the
 * file and offset of the first failed read. */
int expert_cache_wait(expert_cache *c, ds4_error *err);

/* Warm starts: the popularity counts [n_layer × n_expert] that eviction
 * uses (writable: a start may set them from a previous run's), and a
 * preload of the most popular experts not resident into the free slots,
 * with several reads in flight; progress(ud, 0..1) after each batch.
 * Returns how many experts it loaded, or -1 with err (as wait()). */
uint32_t *expert_cache_popularity(expert_cache *c, int *n_layer, int *n_expert);
int expert_cache_preload(expert_cache *c, void (*progress)(void *ud, double fraction), void *ud, ds4_error *err);

/* The cache an engine's routed experts go through (NULL: none). */
const expert_cache *expert_cache_of(const ds4_engine *e);

void expert_cache_info_get(const expert_cache *c, expert_cache_info *out);
expert_cache_counts expert_cache_layer(const expert_cache *c, int layer);

#endif
