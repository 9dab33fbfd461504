/* forward_impl.h — what forward.c (the schedule), forward_state.c
 * (session state: allocation, rewind, snapshots) and forward_place.c
 * (backends and placement) share. */
#ifndef DS4CL_FORWARD_IMPL_H
#define DS4CL_FORWARD_IMPL_H

#include <pthread.h>

#include "engine/forward.h"

#define FWD_MAGIC 0x44533446u /* "DS4F": e->impl of a forward-based backend */

struct fwd_engine {
    uint32_t magic;
    const ds4_model *m;
    const ds4_hparams *hp;
    xbuf_set be;                                  /* be.be[0]: the backend the engine was opened with */
    void (*free_ctx[XBUF_MAX_BACKENDS])(void *);  /* of added backends; [0] stays the opener's */
    uint8_t embed, head;                          /* the placement (forward.h) */
    fwd_layer_place *place;                       /* [n_layer] */
    ds4_quant_sim qsim;
    int chunk, rewind;
    ds4_rope rope_plain, rope_comp;    /* RoPE of ratio-0 and compressed layers */
    pthread_mutex_t mu;                /* one evaluation at a time on the backends */
    double experts_ms;                 /* wall time of routed experts run off their layer's FFN backend */
    bool on_host_cores[XBUF_MAX_BACKENDS]; /* fwd_set_on_host_cores */
    int stream_min;                    /* fwd_set_stream (0: never) */
    uint64_t streamed;                 /* layers whose experts were streamed */
    fwd_trace_fn trace;
    void *trace_ud;
    int l0, l1;                        /* the layers this engine evaluates (forward.h, stages) */
    fwd_next_fn next;                  /* where the streams go after layer l1 − 1, or NULL */
    void *next_ud;
    xbuf blogits;                      /* a batched step's logits (forward.c), blogits_rows rows */
    int blogits_rows;
    uint8_t blogits_head;              /* the backend they are on */
    uint64_t batched;                  /* fwd_batched_steps */
};

typedef struct {
    xbuf raw;            /* raw_rows × head_dim */
    xbuf comp, cfront;   /* R ≠ 0 */
    xbuf icomp, ifront;  /* R = 4 */
    int64_t cfront_rows, ifront_rows;
} fwd_layer;

/* Activations of one chunk of up to T_max tokens. */
typedef struct {
    xbuf tokens, S[2], x, xn, post, comb;
    xbuf qa, q, kv, o, low, F, Fm, Fs;
    xbuf ca, cb, pooled, ia, ib, ipooled, qI, iw, isel;
    xbuf rlog, rsel, rw, g, u, mid;
    xbuf s_last, y, logits;
} fwd_acts;

typedef struct fwd_state {
    fwd_engine *f;
    int n_ctx, T_max;
    int64_t n;        /* tokens the state holds */
    int64_t hi;       /* one past the highest position written into the rings since reset */
    int64_t loaded;   /* tokens the last snapshot load wrote (0: none since reset): the
                       * rings hold only its window and frontier, not the margin below */
    ds4_cache_type ct;
    int64_t raw_rows, margin;
    uint8_t embed, head;    /* the placement the state was made for */
    fwd_layer_place *place; /* [n_layer] */
    int l0, l1;             /* the layers it keeps state for and evaluates */
    unsigned used;          /* bit set of the backends it uses */
    fwd_layer *L;
    fwd_acts a;
    int s_cur;        /* which of a.S holds the residual state */
    bool has_last;    /* a.s_last holds token n−1's final HC state */
} fwd_state;

size_t fwd_cache_elem(ds4_cache_type ct);
int64_t fwd_front_rows(const fwd_state *st, int R);
/* The bit set of backends a placement uses. */
unsigned fwd_place_used(const fwd_engine *f, uint8_t embed, uint8_t head, const fwd_layer_place *place);

#endif
