/* expert_cache.c — the bounded expert cache (see expert_cache.h). */
#include "engine/expert_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/backend.h"
#include "engine/gguf.h"

/* Direct reads need file offset, length and buffer aligned to the logical
 * block size; 4096 covers every common device. */
#define EC_ALIGN 4096u
#define EC_READERS 4

typedef struct {
    uint64_t off[3]; /* file offset of expert 0's gate, up, down rows */
    uint64_t len[3]; /* bytes of one expert's gate, up, down rows */
} ec_layer;

typedef struct {
    int layer, expert; /* -1: empty */
    uint64_t last;     /* tick of the last request */
    uint64_t gen;      /* request that holds it (not evictable during it) */
} ec_slot;

typedef struct {
    int slot, layer, expert;
} ec_job;

struct expert_cache {
    char *path;
    const ds4_model *m;
    int fd_direct, fd; /* fd_direct: -1 when O_DIRECT is unavailable */
    int fd_direct_opened; /* to close, also after reads fell back to buffered */
    int n_layer, n_expert, n_slots;
    uint64_t part[3];  /* bytes reserved per slot for gate, up, down */
    uint64_t slot_bytes, budget, map_bytes, locked;
    uint8_t *mem;
    ec_layer *layers;
    ec_slot *slots;
    int32_t *where;    /* [layer·n_expert + e]: slot, or -1 */
    uint32_t *pop;     /* [layer·n_expert + e]: requests, halved every decay_every */
    uint64_t tick, gen, since_decay, decay_every;
    double t_begin;    /* when the current request's reads started (ms) */
    double read_ms;    /* Σ over requests: first read issued → last read done */
    expert_cache_counts *counts; /* per layer */

    pthread_mutex_t mu;
    pthread_cond_t work, done;
    ec_job *jobs;
    int n_jobs, next_job, pending;
    bool stop;
    char err[512];
    pthread_t readers[EC_READERS];
    int n_readers;
};

static uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

static void layer_ranges(const ds4_model *m, int l, ec_layer *out)
{
    const ds4_layer *L = &m->layers[l];
    const ds4_tensor *t[3] = { &L->ffn_gate_exps, &L->ffn_up_exps, &L->ffn_down_exps };
    const uint8_t *base = gguf_base(m->file);
    for (int p = 0; p < 3; p++) {
        out->off[p] = (uint64_t)((const uint8_t *)t[p]->data - base);
        out->len[p] = (uint64_t)t[p]->ne[1] * t[p]->row_bytes;
    }
}

static void part_sizes(const ds4_model *m, uint64_t part[3])
{
    part[0] = part[1] = part[2] = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        ec_layer r;
        layer_ranges(m, l, &r);
        for (int p = 0; p < 3; p++) {
            /* an unaligned range spans at most one block more than its rounded length */
            uint64_t need = round_up(r.len[p], EC_ALIGN) + EC_ALIGN;
            if (need > part[p]) part[p] = need;
        }
    }
}

uint64_t expert_cache_slot_bytes(const ds4_model *m)
{
    uint64_t part[3];
    part_sizes(m, part);
    return part[0] + part[1] + part[2];
}

uint64_t expert_cache_expert_bytes(const ds4_model *m)
{
    uint64_t sum = 0;
    for (int l = 0; l < m->hp.n_layer; l++) {
        ec_layer r;
        layer_ranges(m, l, &r);
        sum += (r.len[0] + r.len[1] + r.len[2]) * (uint64_t)m->hp.n_expert;
    }
    return sum;
}

/* ---- reading ---------------------------------------------------------------- */

/* Reads [off, off+len) of the file into the part buffer at the same offset
 * modulo EC_ALIGN. Returns 0, or -1 with *got the bytes read (short read)
 * and errno (0 for a short read). */
static int read_part(expert_cache *c, uint8_t *buf, uint64_t off, uint64_t len, uint64_t *got)
{
    uint64_t aoff = off & ~(uint64_t)(EC_ALIGN - 1), lead = off - aoff;
    int fd = __atomic_load_n(&c->fd_direct, __ATOMIC_RELAXED);
    if (fd >= 0) {
        uint64_t alen = round_up(lead + len, EC_ALIGN), done = 0;
        while (done < lead + len) {
            ssize_t r = pread(fd, buf + done, (size_t)(alen - done), (off_t)(aoff + done));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && errno == EINVAL) {
                /* the file system takes O_DIRECT at open but not these reads: buffered from now on */
                __atomic_store_n(&c->fd_direct, -1, __ATOMIC_RELAXED);
                return read_part(c, buf, off, len, got);
            }
            if (r <= 0) {
                *got = done > lead ? done - lead : 0;
                if (r == 0) errno = 0;
                return -1;
            }
            done += (uint64_t)r;
        }
        return 0;
    }
    uint64_t done = 0;
    while (done < len) {
        ssize_t r = pread(c->fd, buf + lead + done, (size_t)(len - done), (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            *got = done;
            if (r == 0) errno = 0;
            return -1;
        }
        done += (uint64_t)r;
    }
    /* the bytes live in the slot now; a second copy in the page cache would
     * only take the memory the cache was sized not to use */
    uint64_t end = round_up(off + len, EC_ALIGN);
    posix_fadvise(c->fd, (off_t)aoff, (off_t)(end - aoff), POSIX_FADV_DONTNEED);
    return 0;
}

static void run_job(expert_cache *c, const ec_job *j)
{
    static const char *const what[3] = { "gate", "up", "down" };
    const ec_layer *L = &c->layers[j->layer];
    uint8_t *buf = c->mem + (uint64_t)j->slot * c->slot_bytes;
    uint64_t bytes = 0;
    for (int p = 0; p < 3; p++) {
        uint64_t off = L->off[p] + (uint64_t)j->expert * L->len[p], got = 0;
        if (read_part(c, buf, off, L->len[p], &got) != 0) {
            int e = errno;
            pthread_mutex_lock(&c->mu);
            if (!c->err[0])
                snprintf(c->err, sizeof c->err,
                         "%s: cannot read the %s rows of expert %d of layer %d at offset %llu (%llu bytes): %s",
                         c->path, what[p], j->expert, j->layer, (unsigned long long)(off + got),
                         (unsigned long long)(L->len[p] - got),
                         e ? strerror(e) : "the file ends there (truncated or replaced?)");
            /* the slot holds nothing usable */
            c->where[(int64_t)j->layer * c->n_expert + j->expert] = -1;
            c->slots[j->slot].layer = c->slots[j->slot].expert = -1;
            pthread_mutex_unlock(&c->mu);
            return;
        }
        bytes += L->len[p];
        buf += c->part[p];
    }
    pthread_mutex_lock(&c->mu);
    c->counts[j->layer].bytes_read += bytes;
    pthread_mutex_unlock(&c->mu);
}

static void *reader_main(void *arg)
{
    expert_cache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->next_job == c->n_jobs) pthread_cond_wait(&c->work, &c->mu);
        if (c->stop) break;
        ec_job j = c->jobs[c->next_job++];
        pthread_mutex_unlock(&c->mu);
        run_job(c, &j);
        pthread_mutex_lock(&c->mu);
        if (--c->pending == 0) {
            c->read_ms += base_now_ms() - c->t_begin;
            pthread_cond_broadcast(&c->done);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- open and close --------------------------------------------------------- */

static int open_fds(expert_cache *c, ds4_error *err)
{
    c->fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0) return ds4_error_set(err, "%s: %s", c->path, strerror(errno));
    /* no readahead past an expert: it would fill the page cache with
     * neighbours nobody asked for */
    posix_fadvise(c->fd, 0, 0, POSIX_FADV_RANDOM);
    c->fd_direct = -1;
    if (!getenv("DS4CL_EXPERT_CACHE_BUFFERED")) c->fd_direct = open(c->path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    c->fd_direct_opened = c->fd_direct;
    return 0;
}

/* The mapping must not read the routed experts either, and a fault next
 * to them reads around into them (and readahead of faults in order runs
 * far ahead), so the whole mapping goes without readahead: the non-routed
 * weights it still reads are brought in beforehand (a warm-up read) or
 * fault in page by page. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void advise_mapping(expert_cache *c)
{
    uint8_t *base = (uint8_t *)(uintptr_t)gguf_base(c->m->file);
    uint64_t size = gguf_size(c->m->file), page = (uint64_t)sysconf(_SC_PAGESIZE);
    madvise(base, (size_t)size, MADV_RANDOM);
    /* ... and the other weights are asked for ahead, gap by gap between
     * the expert tensors, so that they need not fault in page by page */
    size_t n = (size_t)c->n_layer * 3;
    uint64_t *r = malloc(2 * n * sizeof *r);
    if (!r) return;
    for (int l = 0; l < c->n_layer; l++)
        for (int p = 0; p < 3; p++) {
            r[2 * (3 * l + p)] = c->layers[l].off[p];
            r[2 * (3 * l + p) + 1] = c->layers[l].off[p] + c->layers[l].len[p] * (uint64_t)c->n_expert;
        }
    qsort(r, n, 2 * sizeof *r, cmp_u64); /* by start; the ranges do not overlap */
    uint64_t at = 0;
    for (size_t i = 0; i <= n; i++) {
        uint64_t end = i < n ? r[2 * i] : size, lo = (at + page - 1) / page * page, hi = i < n ? end / page * page : end;
        if (hi > size) hi = size;
        if (hi > lo) madvise(base + lo, (size_t)(hi - lo), MADV_WILLNEED);
        if (i < n) at = r[2 * i + 1];
    }
    free(r);
}

static int alloc_slots(expert_cache *c, ds4_error *err)
{
    int64_t cells = (int64_t)c->n_layer * c->n_expert;
    c->map_bytes = (uint64_t)c->n_slots * c->slot_bytes;
    void *mem = mmap(NULL, (size_t)c->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        char b[32];
        return ds4_error_set(err, "cannot allocate the expert cache (%s): %s",
                             format_bytes(b, sizeof b, c->map_bytes), strerror(errno));
    }
    c->mem = mem;
    /* locked where permitted: a cache the kernel may swap out is a second,
     * slower copy of the file */
    if (mlock(c->mem, (size_t)c->map_bytes) == 0) c->locked = c->map_bytes;
    c->layers = calloc((size_t)c->n_layer, sizeof *c->layers);
    c->slots = calloc((size_t)c->n_slots, sizeof *c->slots);
    c->where = malloc((size_t)cells * sizeof *c->where);
    c->pop = calloc((size_t)cells, sizeof *c->pop);
    c->counts = calloc((size_t)c->n_layer, sizeof *c->counts);
    c->jobs = calloc((size_t)c->n_slots, sizeof *c->jobs);
    if (!c->layers || !c->slots || !c->where || !c->pop || !c->counts || !c->jobs)
        return ds4_error_set(err, "out of memory");
    for (int64_t i = 0; i < cells; i++) c->where[i] = -1;
    for (int s = 0; s < c->n_slots; s++) c->slots[s].layer = c->slots[s].expert = -1;
    for (int l = 0; l < c->n_layer; l++) layer_ranges(c->m, l, &c->layers[l]);
    advise_mapping(c);
    return 0;
}

expert_cache *expert_cache_open(const char *path, const ds4_model *m, uint64_t budget, ds4_error *err)
{
    const ds4_hparams *hp = &m->hp;
    uint64_t slot = expert_cache_slot_bytes(m), cells = (uint64_t)hp->n_layer * (uint64_t)hp->n_expert;
    uint64_t n = slot ? budget / slot : 0;
    if (n < (uint64_t)hp->n_expert_used) {
        char b[32], s[32];
        ds4_error_set(err, "an expert cache of %s holds %llu experts; this model needs at least %d (%s each)",
                      format_bytes(b, sizeof b, budget), (unsigned long long)n, hp->n_expert_used,
                      format_bytes(s, sizeof s, slot));
        return NULL;
    }
    if (n > cells) n = cells;
    expert_cache *c = calloc(1, sizeof *c);
    if (!c) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    c->fd = c->fd_direct = c->fd_direct_opened = -1;
    c->m = m;
    c->path = strdup(path);
    c->n_layer = hp->n_layer;
    c->n_expert = hp->n_expert;
    c->n_slots = (int)n;
    c->budget = budget;
    c->slot_bytes = slot;
    c->decay_every = cells * 4;
    part_sizes(m, c->part);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->work, NULL);
    pthread_cond_init(&c->done, NULL);
    if (!c->path || open_fds(c, err) || alloc_slots(c, err)) {
        expert_cache_close(c);
        return NULL;
    }
    for (; c->n_readers < EC_READERS; c->n_readers++)
        if (pthread_create(&c->readers[c->n_readers], NULL, reader_main, c) != 0) break;
    if (!c->n_readers) {
        ds4_error_set(err, "cannot start the expert cache's reader threads");
        expert_cache_close(c);
        return NULL;
    }
    return c;
}

void expert_cache_close(expert_cache *c)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n_readers; i++) pthread_join(c->readers[i], NULL);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->work);
    pthread_cond_destroy(&c->done);
    if (c->mem) munmap(c->mem, (size_t)c->map_bytes);
    if (c->fd >= 0) close(c->fd);
    if (c->fd_direct_opened >= 0) close(c->fd_direct_opened);
    free(c->layers);
    free(c->slots);
    free(c->where);
    free(c->pop);
    free(c->counts);
    free(c->jobs);
    free(c->path);
    free(c);
}

/* ---- requests --------------------------------------------------------------- */

int expert_cache_slots(const expert_cache *c) { return c->n_slots; }

int expert_cache_layer_of(const expert_cache *c, const ds4_tensor *gate)
{
    for (int l = 0; l < c->n_layer; l++)
        if (gate == &c->m->layers[l].ffn_gate_exps) return l;
    return -1;
}

/* The slot to load into: an empty one, else the resident expert with the
 * lowest popularity, then the least recently used; never one this request
 * holds. */
static int victim(expert_cache *c)
{
    int best = -1;
    uint32_t best_pop = 0;
    for (int s = 0; s < c->n_slots; s++) {
        const ec_slot *sl = &c->slots[s];
        if (sl->gen == c->gen) continue;
        if (sl->layer < 0) return s;
        uint32_t p = c->pop[(int64_t)sl->layer * c->n_expert + sl->expert];
        if (best < 0 || p < best_pop || (p == best_pop && sl->last < c->slots[best].last)) {
            best = s;
            best_pop = p;
        }
    }
    return best;
}

static void rows_of(const expert_cache *c, int slot, int layer, int e, expert_rows *r)
{
    const ec_layer *L = &c->layers[layer];
    const uint8_t *buf = c->mem + (uint64_t)slot * c->slot_bytes;
    const void **out[3] = { &r->gate, &r->up, &r->down };
    for (int p = 0; p < 3; p++) {
        *out[p] = buf + ((L->off[p] + (uint64_t)e * L->len[p]) & (EC_ALIGN - 1));
        buf += c->part[p];
    }
}

static void count_request(expert_cache *c, int64_t key)
{
    c->pop[key]++;
    if (++c->since_decay < c->decay_every) return;
    c->since_decay = 0;
    int64_t cells = (int64_t)c->n_layer * c->n_expert;
    for (int64_t i = 0; i < cells; i++) c->pop[i] >>= 1;
}

int expert_cache_begin(expert_cache *c, int layer, const int32_t *experts, int n, expert_rows *rows, bool *hit,
                       ds4_error *err)
{
    if (layer < 0 || layer >= c->n_layer || n < 0 || n > c->n_slots)
        return ds4_error_set(err, "expert cache: request of %d experts of layer %d (%d slots, %d layers)", n, layer,
                             c->n_slots, c->n_layer);
    c->gen++;
    c->tick++;
    int misses = 0;
    /* the hits first, so that no miss evicts an expert this request uses */
    for (int i = 0; i < n; i++) {
        if (experts[i] < 0 || experts[i] >= c->n_expert)
            return ds4_error_set(err, "expert cache: expert %d outside 0..%d", experts[i], c->n_expert - 1);
        int64_t key = (int64_t)layer * c->n_expert + experts[i];
        count_request(c, key);
        int s = c->where[key];
        hit[i] = s >= 0;
        if (s < 0) continue;
        c->slots[s].gen = c->gen;
        c->slots[s].last = c->tick;
        rows_of(c, s, layer, experts[i], &rows[i]);
    }
    pthread_mutex_lock(&c->mu);
    c->n_jobs = c->next_job = 0;
    c->err[0] = 0;
    for (int i = 0; i < n; i++) {
        if (hit[i]) continue;
        int s = victim(c);
        ec_slot *sl = &c->slots[s];
        if (sl->layer >= 0) c->where[(int64_t)sl->layer * c->n_expert + sl->expert] = -1;
        *sl = (ec_slot){ layer, experts[i], c->tick, c->gen };
        c->where[(int64_t)layer * c->n_expert + experts[i]] = s;
        rows_of(c, s, layer, experts[i], &rows[i]);
        c->jobs[c->n_jobs++] = (ec_job){ s, layer, experts[i] };
        misses++;
    }
    c->pending = c->n_jobs;
    c->t_begin = base_now_ms();
    c->counts[layer].hits += (uint64_t)(n - misses);
    c->counts[layer].misses += (uint64_t)misses;
    if (misses) pthread_cond_broadcast(&c->work);
    pthread_mutex_unlock(&c->mu);
    return misses;
}

int expert_cache_wait(expert_cache *c, ds4_error *err)
{
    pthread_mutex_lock(&c->mu);
    while (c->pending > 0) pthread_cond_wait(&c->done, &c->mu);
    int rc = c->err[0] ? ds4_error_set(err, "%s", c->err) : 0;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

const expert_cache *expert_cache_of(const ds4_engine *e)
{
    return e && e->backend && e->backend->expert_cache ? e->backend->expert_cache(e) : NULL;
}

uint32_t *expert_cache_popularity(expert_cache *c, int *n_layer, int *n_expert)
{
    *n_layer = c->n_layer;
    *n_expert = c->n_expert;
    return c->pop;
}

static int cmp_pop_desc(const void *a, const void *b, void *pop)
{
    uint32_t x = ((const uint32_t *)pop)[*(const int32_t *)a], y = ((const uint32_t *)pop)[*(const int32_t *)b];
    return x < y ? 1 : x > y ? -1 : *(const int32_t *)a - *(const int32_t *)b;
}

/* Sorts cells by popularity (descending; ties by layer, then expert). */
static void sort_by_pop(int32_t *cells, int64_t n, const uint32_t *pop)
{
    /* insertion into runs would do; qsort_r keeps it short */
    qsort_r(cells, (size_t)n, sizeof *cells, cmp_pop_desc, (void *)pop);
}

int expert_cache_preload(expert_cache *c, void (*progress)(void *ud, double fraction), void *ud, ds4_error *err)
{
    int64_t cells = (int64_t)c->n_layer * c->n_expert, n = 0;
    int32_t *order = malloc((size_t)cells * sizeof *order);
    if (!order) return ds4_error_set(err, "out of memory");
    for (int64_t i = 0; i < cells; i++)
        if (c->pop[i] && c->where[i] < 0) order[n++] = (int32_t)i;
    sort_by_pop(order, n, c->pop);
    int free_slots = 0;
    for (int s = 0; s < c->n_slots; s++) free_slots += c->slots[s].layer < 0;
    if (n > free_slots) n = free_slots;
    /* batches of reads in flight, as a layer's misses are */
    int64_t batch = c->n_slots < 64 ? c->n_slots : 64, done = 0;
    int rc = 0;
    c->gen++;
    while (done < n && !rc) {
        int64_t m = n - done < batch ? n - done : batch;
        pthread_mutex_lock(&c->mu);
        c->n_jobs = c->next_job = 0;
        c->err[0] = 0;
        for (int64_t i = 0; i < m; i++) {
            int32_t cell = order[done + i];
            int s = victim(c), layer = cell / c->n_expert, e = cell % c->n_expert;
            c->slots[s] = (ec_slot){ layer, e, c->tick, c->gen };
            c->where[cell] = s;
            c->jobs[c->n_jobs++] = (ec_job){ s, layer, e };
        }
        c->pending = c->n_jobs;
        c->t_begin = base_now_ms();
        pthread_cond_broadcast(&c->work);
        pthread_mutex_unlock(&c->mu);
        rc = expert_cache_wait(c, err);
        done += m;
        if (progress) progress(ud, (double)done / (double)n);
    }
    free(order);
    return rc ? -1 : (int)done;
}

void expert_cache_info_get(const expert_cache *c, expert_cache_info *out)
{
    memset(out, 0, sizeof *out);
    out->slots = c->n_slots;
    out->slot_bytes = c->slot_bytes;
    out->budget = c->budget;
    out->locked_bytes = c->locked;
    out->direct_io = c->fd_direct >= 0;
    out->readers = c->n_readers;
    out->read_ms = c->read_ms;
    for (int l = 0; l < c->n_layer; l++) {
        out->total.hits += c->counts[l].hits;
        out->total.misses += c->counts[l].misses;
        out->total.bytes_read += c->counts[l].bytes_read;
    }
}

expert_cache_counts expert_cache_layer(const expert_cache *c, int layer)
{
    expert_cache_counts z = { 0, 0, 0 };
    return layer >= 0 && layer < c->n_layer ? c->counts[layer] : z;
}
