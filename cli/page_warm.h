/* page_warm.h — bringing a model file into memory before the first prompt.
 *
 * The engine maps the weights and reads them on first touch, so without
 * this the first prompt would silently wait for tens of gigabytes of page
 * faults. page_warm() reads the file through a mapping of its own, ahead
 * of the page being touched (readahead one chunk ahead), skipping pages
 * already in memory (mincore), and reports progress as it goes; the pages
 * then sit in the page cache that the engine's mapping shares.
 */
#ifndef DS4CL_PAGE_WARM_H
#define DS4CL_PAGE_WARM_H

#include <stdint.h>
#include <stddef.h>

#include "base/base.h"

typedef struct {
    uint64_t bytes;           /* size of the file */
    uint64_t resident_before; /* bytes already in memory */
    double ms;                /* time taken */
} page_warm_stats;

/* Called after each chunk with the bytes covered so far (the last call has
 * done == total). */
typedef void (*page_warm_fn)(void *ud, uint64_t done, uint64_t total);

/* Returns 0, or -1 with err when the file cannot be opened or mapped.
 * fn may be NULL; st may be NULL. */
int page_warm(const char *path, page_warm_fn fn, void *ud, page_warm_stats *st, ds4_error *err);

#endif
