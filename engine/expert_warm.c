/* expert_warm.c — the popularity file of the expert cache (see
 * expert_warm.h). */
#include "engine/expert_warm.h"

#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define WARM_MAGIC "DS4CLPOP"
#define WARM_HEADER 28 /* magic 8, version 4, identity 8, n_layer 4, n_expert 4 */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int expert_warm_save(expert_cache *c, uint64_t identity, const char *path, ds4_error *err)
{
    int nl, ne;
    const uint32_t *pop = expert_cache_popularity(c, &nl, &ne);
    size_t cells = (size_t)nl * (size_t)ne, len = WARM_HEADER + 4 * cells;
    uint8_t *b = malloc(len);
    if (!b) return ds4_error_set(err, "out of memory");
    memcpy(b, WARM_MAGIC, 8);
    put_u32(b + 8, 1);
    put_u32(b + 12, (uint32_t)identity);
    put_u32(b + 16, (uint32_t)(identity >> 32));
    put_u32(b + 20, (uint32_t)nl);
    put_u32(b + 24, (uint32_t)ne);
    for (size_t i = 0; i < cells; i++) put_u32(b + WARM_HEADER + 4 * i, pop[i]);
    int rc = file_write_atomic(path, b, len, 0600, true, err);
    free(b);
    return rc;
}

/* The counts of path into pop (cells of n_layer × n_expert) when the file
 * is this model's; false otherwise. */
static bool read_counts(const char *path, uint64_t identity, int nl, int ne, uint32_t *pop)
{
    size_t cells = (size_t)nl * (size_t)ne, len = 0;
    char *d = file_read_regular(path, &len);
    const uint8_t *b = (const uint8_t *)d;
    bool ok = d && len == WARM_HEADER + 4 * cells && !memcmp(b, WARM_MAGIC, 8) && get_u32(b + 8) == 1 &&
              ((uint64_t)get_u32(b + 16) << 32 | get_u32(b + 12)) == identity && get_u32(b + 20) == (uint32_t)nl &&
              get_u32(b + 24) == (uint32_t)ne;
    if (ok)
        for (size_t i = 0; i < cells; i++) pop[i] = get_u32(b + WARM_HEADER + 4 * i);
    free(d);
    return ok;
}

int expert_warm_load(expert_cache *c, uint64_t identity, const char *path)
{
    int nl, ne;
    uint32_t *pop = expert_cache_popularity(c, &nl, &ne);
    return read_counts(path, identity, nl, ne, pop) ? 1 : 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ds4_expert_stats_hit_rate(const char *path, uint64_t identity, int n_layer, int n_expert, uint64_t slots,
                              double *rate)
{
    size_t cells = (size_t)n_layer * (size_t)n_expert;
    uint32_t *pop = cells ? malloc(cells * sizeof *pop) : NULL;
    if (!pop || !read_counts(path, identity, n_layer, n_expert, pop)) {
        free(pop);
        return -1;
    }
    qsort(pop, cells, sizeof *pop, cmp_desc);
    double top = 0, all = 0;
    for (size_t i = 0; i < cells; i++) {
        all += pop[i];
        if (i < slots) top += pop[i];
    }
    free(pop);
    if (all <= 0) return -1;
    *rate = top / all;
    return 0;
}
