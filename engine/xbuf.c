/* xbuf.c — buffers with copies on several backends and the hand-over
 * between them (engine/xbuf.h). */
#include "engine/xbuf.h"

#include <stdlib.h>

#include "base/base.h"

static const char *be_error(const xbuf_backend *be)
{
    const char *m = be->ops->last_error ? be->ops->last_error(be->ctx) : NULL;
    return m && *m ? m : "failed";
}

int xbuf_alloc(xbuf_set *s, xbuf *b, unsigned where, size_t bytes, size_t tok_bytes)
{
    *b = (xbuf){ .bytes = bytes, .tok_bytes = tok_bytes };
    for (int i = 0; i < s->n; i++) {
        if (!(where & XBUF_ON(i))) continue;
        b->on[i] = s->be[i].ops->alloc(s->be[i].ctx, bytes);
        if (!b->on[i]) {
            xbuf_release(s, b);
            return -1;
        }
        b->valid |= XBUF_ON(i);
    }
    return 0;
}

void xbuf_release(xbuf_set *s, xbuf *b)
{
    for (int i = 0; i < XBUF_MAX_BACKENDS; i++)
        if (b->on[i]) s->be[i].ops->release(s->be[i].ctx, b->on[i]);
    *b = (xbuf){ 0 };
}

size_t xbuf_span(const xbuf *b, int T)
{
    if (!b->tok_bytes) return b->bytes;
    size_t n = (size_t)T * b->tok_bytes;
    return n < b->bytes ? n : b->bytes;
}

void xbuf_wrote(xbuf *b, int i)
{
    if (b && b->on[i]) b->valid = XBUF_ON(i);
}

static int source_of(const xbuf *b)
{
    for (int i = 0; i < XBUF_MAX_BACKENDS; i++)
        if (b->valid & XBUF_ON(i)) return i;
    return -1;
}

/* One move of n bytes from backend `from` to backend `to`. */
static int move(xbuf_set *s, xbuf *b, int from, int to, size_t n, ds4_error *err)
{
    const xbuf_backend *src = &s->be[from], *dst = &s->be[to];
    void *dh = dst->ops->host ? dst->ops->host(dst->ctx, b->on[to]) : NULL;
    void *sh = src->ops->host ? src->ops->host(src->ctx, b->on[from]) : NULL;
    if (dh) {
        /* the destination's host memory may still be read by its queued work */
        if (dst->ops->finish && dst->ops->finish(dst->ctx))
            return ds4_error_set(err, "%s backend: %s", dst->ops->name, be_error(dst));
        if (src->ops->read(src->ctx, b->on[from], 0, dh, n))
            return ds4_error_set(err, "hand-over from %s: %s", src->ops->name, be_error(src));
        return 0;
    }
    if (sh) {
        if (src->ops->finish && src->ops->finish(src->ctx))
            return ds4_error_set(err, "%s backend: %s", src->ops->name, be_error(src));
        if (dst->ops->write(dst->ctx, b->on[to], 0, sh, n))
            return ds4_error_set(err, "hand-over to %s: %s", dst->ops->name, be_error(dst));
        return 0;
    }
    if (s->stage_cap < n) {
        void *p = realloc(s->stage, n);
        if (!p) return ds4_error_set(err, "out of memory for a hand-over of %zu bytes", n);
        s->stage = p;
        s->stage_cap = n;
    }
    /* read() waits for the source's queued work; write() copies or waits,
     * so the staging area is free again when it returns */
    if (src->ops->read(src->ctx, b->on[from], 0, s->stage, n))
        return ds4_error_set(err, "hand-over from %s: %s", src->ops->name, be_error(src));
    if (dst->ops->write(dst->ctx, b->on[to], 0, s->stage, n))
        return ds4_error_set(err, "hand-over to %s: %s", dst->ops->name, be_error(dst));
    return 0;
}

int xbuf_handover(xbuf_set *s, xbuf *b, int to, size_t bytes, ds4_error *err)
{
    if (to < 0 || to >= s->n || !b->on[to])
        return ds4_error_set(err, "internal: a buffer of %zu bytes has no copy on backend %d", b->bytes, to);
    if (b->valid & XBUF_ON(to)) return 0;
    int from = source_of(b);
    if (from < 0) return ds4_error_set(err, "internal: a buffer of %zu bytes has no current copy", b->bytes);
    if (bytes > b->bytes) bytes = b->bytes;
    /* The source's queued work first, timed apart: that wait is the
     * source computing, not the hand-over. */
    const xbuf_backend *src = &s->be[from];
    double t0 = base_now_ms();
    if (bytes && src->ops->finish && src->ops->finish(src->ctx))
        return ds4_error_set(err, "%s backend: %s", src->ops->name, be_error(src));
    double t1 = base_now_ms();
    if (bytes && move(s, b, from, to, bytes, err)) return -1;
    s->wait_ms += t1 - t0;
    s->ms += base_now_ms() - t1;
    s->handovers++;
    s->bytes_moved += bytes;
    b->valid |= XBUF_ON(to);
    return 0;
}

int xbuf_read(xbuf_set *s, xbuf *b, size_t off, void *dst, size_t n, ds4_error *err)
{
    int from = source_of(b);
    if (from < 0) return ds4_error_set(err, "internal: a buffer of %zu bytes has no current copy", b->bytes);
    const xbuf_backend *be = &s->be[from];
    if (be->ops->read(be->ctx, b->on[from], off, dst, n))
        return ds4_error_set(err, "%s backend: %s", be->ops->name, be_error(be));
    return 0;
}

void xbuf_set_free(xbuf_set *s)
{
    free(s->stage);
    s->stage = NULL;
    s->stage_cap = 0;
}
