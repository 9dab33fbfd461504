/* forward_place.c — the backends of a forward engine and the placement of
 * the pass over them (engine/forward.h). */
#include "engine/forward_impl.h"

#include <stdlib.h>
#include <string.h>

int fwd_add_backend(fwd_engine *f, const ds4_ops *ops, void *ctx, void (*free_ctx)(void *), ds4_error *err)
{
    if (f->be.n >= XBUF_MAX_BACKENDS) {
        if (free_ctx) free_ctx(ctx);
        return ds4_error_set(err, "a forward pass runs on at most %d backends", XBUF_MAX_BACKENDS);
    }
    int i = f->be.n++;
    f->be.be[i] = (xbuf_backend){ ops, ctx };
    f->free_ctx[i] = free_ctx;
    return i;
}

int fwd_n_backends(const fwd_engine *f) { return f->be.n; }

unsigned fwd_place_used(const fwd_engine *f, uint8_t embed, uint8_t head, const fwd_layer_place *place)
{
    unsigned used = XBUF_ON(embed) | XBUF_ON(head);
    for (int l = 0; l < f->hp->n_layer; l++)
        used |= XBUF_ON(place[l].attn) | XBUF_ON(place[l].ffn) | XBUF_ON(place[l].experts);
    return used;
}

int fwd_set_placement(fwd_engine *f, const fwd_placement *p, ds4_error *err)
{
    const int n = f->be.n, nl = f->hp->n_layer;
    if (p->embed >= n || p->head >= n)
        return ds4_error_set(err, "placement names backend %d of %d", p->embed >= n ? p->embed : p->head, n);
    for (int l = 0; l < nl; l++) {
        const fwd_layer_place *q = &p->layer[l];
        if (q->attn >= n || q->ffn >= n || q->experts >= n)
            return ds4_error_set(err, "placement of layer %d names a backend beyond the %d there are", l, n);
    }
    memcpy(f->place, p->layer, (size_t)nl * sizeof *f->place);
    f->embed = p->embed;
    f->head = p->head;
    return 0;
}

void fwd_get_handover_stats(fwd_engine *f, fwd_handover_stats *out)
{
    pthread_mutex_lock(&f->mu);
    out->count = f->be.handovers;
    out->bytes = f->be.bytes_moved;
    out->ms = f->be.ms;
    out->wait_ms = f->be.wait_ms;
    out->experts_ms = f->experts_ms;
    out->streamed = f->streamed;
    pthread_mutex_unlock(&f->mu);
}

int fwd_set_layers(fwd_engine *f, int l0, int l1, ds4_error *err)
{
    if (l0 < 0 || l1 <= l0 || l1 > f->hp->n_layer)
        return ds4_error_set(err, "layer range %d-%d outside the model's %d layers", l0, l1 - 1, f->hp->n_layer);
    f->l0 = l0;
    f->l1 = l1;
    return 0;
}

void fwd_set_next(fwd_engine *f, fwd_next_fn fn, void *ud)
{
    f->next = fn;
    f->next_ud = ud;
}

void fwd_set_on_host_cores(fwd_engine *f, int b, bool on)
{
    if (b >= 0 && b < XBUF_MAX_BACKENDS) f->on_host_cores[b] = on;
}

void fwd_set_stream(fwd_engine *f, int min_tokens) { f->stream_min = min_tokens > 0 ? min_tokens : 0; }
