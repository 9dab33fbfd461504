/* xbuf.h — a buffer of the forward schedule when the ops of one forward
 * pass run on more than one compute backend (engine/ops.h): one copy per
 * backend that uses it, which of those copies hold the current contents,
 * and the hand-over that brings a copy up to date.
 *
 * The rule the schedule follows (engine/forward.c): before an op runs on
 * backend i, every buffer it reads is handed over to i (a no-op when i's
 * copy is current); after it, every buffer it wrote is current on i only.
 * A single-backend pass never moves a byte.
 *
 * A hand-over moves bytes through host memory: when one side keeps the
 * buffer in host memory (ds4_ops.host, e.g. the CPU backend) the other
 * side reads into it or writes from it directly; between two device
 * backends the bytes pass through a host staging area. Only the bytes the
 * schedule names move (a decode step moves one token's row, not the
 * chunk-sized buffer).
 */
#ifndef DS4CL_XBUF_H
#define DS4CL_XBUF_H

#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "engine/ops.h"

#define XBUF_MAX_BACKENDS 5 /* DS4_MAX_DEVICES devices and the host */

typedef struct {
    const ds4_ops *ops;
    void *ctx;
} xbuf_backend;

/* The backends of one forward pass, and what hand-overs between them cost. */
typedef struct {
    xbuf_backend be[XBUF_MAX_BACKENDS];
    int n;
    uint64_t handovers;   /* hand-overs that moved bytes */
    uint64_t bytes_moved;
    double ms;            /* wall time spent moving the bytes */
    double wait_ms;       /* wall time spent before that waiting for the source's queued work */
    void *stage;          /* host staging between two device backends */
    size_t stage_cap;
} xbuf_set;

typedef struct {
    ds4_buf *on[XBUF_MAX_BACKENDS]; /* the copy on each backend; NULL where there is none */
    unsigned valid;                 /* bit i: on[i] holds the current contents */
    size_t bytes;                   /* size of every copy */
    size_t tok_bytes;               /* bytes per token of a chunk; 0: one unit */
} xbuf;

/* Bit set of backends. */
#define XBUF_ON(i) (1u << (unsigned)(i))

/* Allocates a zero-filled copy of `bytes` on every backend in the bit set
 * `where` (all of them then current). 0, or -1 when an allocation failed
 * (the copies made so far are released). */
int xbuf_alloc(xbuf_set *s, xbuf *b, unsigned where, size_t bytes, size_t tok_bytes);
void xbuf_release(xbuf_set *s, xbuf *b);

/* True when b has a copy anywhere (an unallocated buffer stands for an
 * absent optional argument). */
static inline int xbuf_present(const xbuf *b) { return b && b->valid != 0; }

/* Bytes the schedule names for a chunk of T tokens. */
size_t xbuf_span(const xbuf *b, int T);

/* Makes the first `bytes` bytes of b's copy on backend `to` current,
 * moving them from a backend whose copy is. 0 when done (or nothing had
 * to move), -1 with err when `to` has no copy or a read/write failed. */
int xbuf_handover(xbuf_set *s, xbuf *b, int to, size_t bytes, ds4_error *err);

/* An op on backend i has written b: only that copy is current now. */
void xbuf_wrote(xbuf *b, int i);

/* Reads bytes [off, off + n) of b from a current copy. */
int xbuf_read(xbuf_set *s, xbuf *b, size_t off, void *dst, size_t n, ds4_error *err);

/* Host staging and statistics end with the set. */
void xbuf_set_free(xbuf_set *s);

#endif
