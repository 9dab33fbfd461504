/* forward_impl.h — what forward.c (the schedule) and forward_state.c
 * (session state: allocation, rewind, snapshots) share. */
#ifndef DS4CL_FORWARD_IMPL_H
#define DS4CL_FORWARD_IMPL_H

#include <pthread.h>

#include "engine/forward.h"

#define FWD_MAGIC 0x44533446u /* "DS4F": e->impl of a forward-based backend */

struct fwd_engine {
    uint32_t magic;
    const ds4_model *m;
    const ds4_hparams *hp;
    const ds4_ops *ops;
    void *ctx;
    ds4_quant_sim qsim;
    int chunk, rewind;
    ds4_rope rope_plain, rope_comp;    /* RoPE of ratio-0 and compressed layers */
    pthread_mutex_t mu;                /* one evaluation at a time on the ops context */
    fwd_trace_fn trace;
    void *trace_ud;
};

typedef struct {
    ds4_buf *raw;            /* raw_rows × head_dim */
    ds4_buf *comp, *cfront;  /* R ≠ 0 */
    ds4_buf *icomp, *ifront; /* R = 4 */
    int64_t cfront_rows, ifront_rows;
} fwd_layer;

/* Activations of one chunk of up to T_max tokens. */
typedef struct {
    ds4_buf *tokens, *S[2], *x, *xn, *post, *comb;
    ds4_buf *qa, *q, *kv, *o, *low, *F, *Fm, *Fs;
    ds4_buf *ca, *cb, *pooled, *ia, *ib, *ipooled, *qI, *iw, *isel;
    ds4_buf *rlog, *rsel, *rw, *g, *u, *mid;
    ds4_buf *s_last, *y, *logits;
} fwd_acts;

typedef struct fwd_state {
    fwd_engine *f;
    int n_ctx, T_max;
    int64_t n;        /* tokens the state holds */
    int64_t hi;       /* one past the highest position written into the rings since reset */
    ds4_cache_type ct;
    int64_t raw_rows, margin;
    fwd_layer *L;
    fwd_acts a;
    int s_cur;        /* which of a.S holds the residual state */
    bool has_last;    /* a.s_last holds token n−1's final HC state */
} fwd_state;

size_t fwd_cache_elem(ds4_cache_type ct);
int64_t fwd_front_rows(const fwd_state *st, int R);

#endif
