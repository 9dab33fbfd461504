/* forward_state.c — the forward engine's lifetime and a session's state:
 * buffer planning (one routine both allocates and counts, so the memory
 * estimate is what is allocated), rewind, and the canonical snapshot
 * payload of engine/kvstate.h. */
#include "engine/forward_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/kvstate.h"
#include "engine/numerics.h"
#include "engine/quant.h"

/* ---- engine ------------------------------------------------------------------- */

static int ops_error(const xbuf_backend *be, ds4_error *err, const char *what)
{
    const char *m = be->ops->last_error ? be->ops->last_error(be->ctx) : "";
    return ds4_error_set(err, "%s backend: %s%s%s", be->ops->name, what, m && *m ? ": " : "", m ? m : "");
}

fwd_engine *fwd_open(const ds4_model *m, const ds4_ops *ops, void *ctx, ds4_quant_sim qsim, const fwd_config *cfg,
                     ds4_error *err)
{
    fwd_engine *f = calloc(1, sizeof *f);
    if (!f) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    f->magic = FWD_MAGIC;
    f->m = m;
    f->hp = &m->hp;
    f->be.be[0] = (xbuf_backend){ ops, ctx };
    f->be.n = 1;
    f->qsim = qsim;
    f->chunk = cfg && cfg->chunk > 0 ? cfg->chunk : FWD_DEFAULT_CHUNK;
    f->rewind = cfg && cfg->rewind_margin > 0 ? cfg->rewind_margin : FWD_DEFAULT_REWIND;
    f->l0 = 0;
    f->l1 = m->hp.n_layer;
    pthread_mutex_init(&f->mu, NULL);
    const ds4_hparams *hp = f->hp;
    f->place = calloc((size_t)hp->n_layer, sizeof *f->place);
    if (!f->place) {
        ds4_error_set(err, "out of memory");
        fwd_close(f);
        return NULL;
    }
    if (hp->n_rot / 2 > 512 || hp->n_hc > 64) {
        ds4_error_set(err, "model shape outside what the forward pass supports (n_rot %d, n_hc %d)", hp->n_rot, hp->n_hc);
        fwd_close(f);
        return NULL;
    }
    rope_params(hp, 0, &f->rope_plain);
    rope_params(hp, 1, &f->rope_comp);
    return f;
}

void fwd_close(fwd_engine *f)
{
    if (!f) return;
    xbuf_release(&f->be, &f->blogits);
    for (int i = 1; i < f->be.n; i++)
        if (f->free_ctx[i]) f->free_ctx[i](f->be.be[i].ctx);
    xbuf_set_free(&f->be);
    free(f->place);
    pthread_mutex_destroy(&f->mu);
    f->magic = 0;
    free(f);
}

fwd_engine *fwd_of(const ds4_engine *e)
{
    fwd_engine *f = e ? e->impl : NULL;
    return f && e->backend && e->backend->session.eval == fwd_backend_eval && f->magic == FWD_MAGIC ? f : NULL;
}

void *fwd_ops_ctx(const fwd_engine *f) { return f->be.be[0].ctx; }

void *fwd_backend_ctx(const fwd_engine *f, int b) { return b >= 0 && b < f->be.n ? f->be.be[b].ctx : NULL; }
void fwd_set_chunk(fwd_engine *f, int chunk) { f->chunk = chunk > 0 ? chunk : FWD_DEFAULT_CHUNK; }
int fwd_chunk(const fwd_engine *f) { return f->chunk; }

void fwd_set_trace(fwd_engine *f, fwd_trace_fn fn, void *ud)
{
    f->trace = fn;
    f->trace_ud = ud;
}

/* ---- state planning ------------------------------------------------------------- */

size_t fwd_cache_elem(ds4_cache_type ct) { return ct == DS4_CACHE_F16 ? 2 : 4; }

int64_t fwd_front_rows(const fwd_state *st, int R)
{
    return (int64_t)ds4_compress_lanes(R) * R + st->margin;
}

/* Sizes every buffer of a state; with alloc, allocates them too. Returns
 * the byte total over all backends (per backend into per[] when not
 * NULL), or 0 when an allocation failed. Activations get a copy on every
 * backend of the placement, a layer's state one on its attention's. */
static uint64_t size_buffers(fwd_state *st, bool alloc, uint64_t *per)
{
    fwd_engine *f = st->f;
    const ds4_hparams *hp = f->hp;
    uint64_t total = 0;
    bool ok = true;
    unsigned where = st->used;
#define BUF(field, bytes, tok)                                                           \
    do {                                                                                 \
        size_t b_ = (size_t)(bytes);                                                     \
        if (b_ == 0) b_ = 4;                                                             \
        for (int i_ = 0; i_ < f->be.n; i_++)                                             \
            if (where & XBUF_ON(i_)) {                                                   \
                total += b_;                                                             \
                if (per) per[i_] += b_;                                                  \
            }                                                                            \
        if (alloc && ok) ok = xbuf_alloc(&f->be, &(field), where, b_, (size_t)(tok)) == 0; \
    } while (0)
    const size_t T = (size_t)st->T_max, D = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    const size_t id = (size_t)hp->indexer_head_dim, es = fwd_cache_elem(st->ct);
    for (int l = st->l0; l < st->l1; l++) {
        fwd_layer *L = &st->L[l];
        int R = hp->compress_ratio[l];
        where = XBUF_ON(st->place[l].attn);
        BUF(L->raw, (size_t)st->raw_rows * hd * es, 0);
        if (R == 0) continue;
        size_t C = (size_t)ds4_compress_lanes(R);
        L->cfront_rows = fwd_front_rows(st, R);
        BUF(L->comp, (size_t)(st->n_ctx / R) * hd * es, 0);
        BUF(L->cfront, (size_t)L->cfront_rows * 2 * C * hd * 4, 0);
        if (R == 4) {
            L->ifront_rows = L->cfront_rows;
            BUF(L->icomp, (size_t)(st->n_ctx / R) * id * es, 0);
            BUF(L->ifront, (size_t)L->ifront_rows * 2 * 2 * id * 4, 0);
        }
    }
    where = st->used;
    fwd_acts *a = &st->a;
    const size_t nhc = (size_t)hp->n_hc, q_dim = (size_t)hp->q_dim, low = (size_t)hp->n_out_group * (size_t)hp->o_lora;
    const size_t W = 2 * hd, Wi = 2 * id, k = (size_t)hp->n_expert_used, SF = (size_t)hp->shared_ff;
    const size_t nhi = (size_t)hp->n_indexer_head;
    /* per-token activations: a hand-over moves T rows of them */
#define ACT(field, row) BUF(field, T * (row), (row))
    ACT(a->tokens, 4);
    ACT(a->S[0], nhc * D * 4);
    ACT(a->S[1], nhc * D * 4);
    ACT(a->x, D * 4);
    ACT(a->xn, D * 4);
    ACT(a->post, nhc * 4);
    ACT(a->comb, nhc * nhc * 4);
    ACT(a->qa, (size_t)hp->q_lora * 4);
    ACT(a->q, q_dim * 4);
    ACT(a->kv, hd * 4);
    ACT(a->o, q_dim * 4);
    ACT(a->low, low * 4);
    ACT(a->F, D * 4);
    ACT(a->Fm, D * 4);
    ACT(a->Fs, D * 4);
    ACT(a->ca, W * 4);
    ACT(a->cb, W * 4);
    ACT(a->pooled, hd * 4);
    ACT(a->ia, Wi * 4);
    ACT(a->ib, Wi * 4);
    ACT(a->ipooled, id * 4);
    ACT(a->qI, nhi * id * 4);
    ACT(a->iw, nhi * 4);
    ACT(a->isel, (size_t)hp->indexer_top_k * 4);
    ACT(a->rlog, (size_t)hp->n_expert * 4);
    ACT(a->rsel, k * 4);
    ACT(a->rw, k * 4);
    ACT(a->g, SF * 4);
    ACT(a->u, SF * 4);
    ACT(a->mid, SF * 4);
#undef ACT
    BUF(a->s_last, nhc * D * 4, 0);
    BUF(a->y, D * 4, 0);
    BUF(a->logits, (size_t)hp->n_vocab * 4, 0);
#undef BUF
    return ok ? total : 0;
}

static void init_shape(fwd_state *st, fwd_engine *f, int n_ctx)
{
    const ds4_hparams *hp = f->hp;
    st->f = f;
    st->embed = f->embed;
    st->head = f->head;
    st->l0 = f->l0;
    st->l1 = f->l1;
    st->used = fwd_place_used(f, f->embed, f->head, f->place);
    st->n_ctx = n_ctx;
    st->T_max = f->chunk < n_ctx ? f->chunk : n_ctx;
    st->ct = f->qsim == DS4_QSIM_NONE ? DS4_CACHE_F32 : DS4_CACHE_F16;
    st->margin = f->rewind > st->T_max ? f->rewind : st->T_max;
    st->raw_rows = (int64_t)hp->n_swa + st->margin;
    if (st->raw_rows > n_ctx) st->raw_rows = n_ctx;
    if (st->raw_rows < 1) st->raw_rows = 1;
}

static uint64_t count_bytes(const fwd_engine *f, int n_ctx, uint64_t *per)
{
    fwd_state st = { 0 };
    fwd_layer *L = calloc((size_t)f->hp->n_layer, sizeof *L);
    if (!L) return 0;
    init_shape(&st, (fwd_engine *)f, n_ctx < 1 ? 1 : n_ctx);
    st.L = L;
    st.place = f->place;
    uint64_t b = size_buffers(&st, false, per);
    free(L);
    return b;
}

uint64_t fwd_session_buffers_bytes(const fwd_engine *f, int n_ctx) { return count_bytes(f, n_ctx, NULL); }

uint64_t fwd_session_buffers_bytes_on(const fwd_engine *f, int n_ctx, int b)
{
    uint64_t per[XBUF_MAX_BACKENDS] = { 0 };
    count_bytes(f, n_ctx, per);
    return b >= 0 && b < XBUF_MAX_BACKENDS ? per[b] : 0;
}

static void release_all(fwd_state *st)
{
    fwd_engine *f = st->f;
    if (st->L)
        for (int l = 0; l < f->hp->n_layer; l++) {
            fwd_layer *L = &st->L[l];
            xbuf *bs[] = { &L->raw, &L->comp, &L->cfront, &L->icomp, &L->ifront };
            for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) xbuf_release(&f->be, bs[i]);
        }
    xbuf *a = (xbuf *)(void *)&st->a;
    for (size_t i = 0; i < sizeof st->a / sizeof(xbuf); i++) xbuf_release(&f->be, &a[i]);
    free(st->L);
    free(st->place);
}

int fwd_backend_open(ds4_engine *e, const ds4_ops *ops, void *ctx, void (*free_ctx)(void *), ds4_error *err)
{
    fwd_engine *f = fwd_open(e->model, ops, ctx, e->opt.quant_sim, NULL, err);
    if (!f) {
        free_ctx(ctx);
        return -1;
    }
    e->impl = f;
    if (e->opt.layer_end > 0 && fwd_set_layers(f, e->opt.layer_first, e->opt.layer_end, err)) {
        fwd_close(f);
        free_ctx(ctx);
        e->impl = NULL;
        return -1;
    }
    return 0;
}

void fwd_backend_close(ds4_engine *e, void (*free_ctx)(void *))
{
    fwd_engine *f = e->impl;
    void *ctx = fwd_ops_ctx(f);
    fwd_close(f);
    free_ctx(ctx);
    e->impl = NULL;
}

void *fwd_backend_state_new(ds4_engine *e, int n_ctx, ds4_error *err)
{
    /* e->impl, not fwd_of(e): an engine hook (mpi/) wraps these members */
    fwd_engine *f = e->impl;
    if (!f || f->magic != FWD_MAGIC) {
        ds4_error_set(err, "engine has no forward pass");
        return NULL;
    }
    fwd_state *st = calloc(1, sizeof *st);
    if (!st) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    init_shape(st, f, n_ctx);
    st->L = calloc((size_t)f->hp->n_layer, sizeof *st->L);
    st->place = malloc((size_t)f->hp->n_layer * sizeof *st->place);
    if (st->place) memcpy(st->place, f->place, (size_t)f->hp->n_layer * sizeof *st->place);
    if (!st->L || !st->place || size_buffers(st, true, NULL) == 0) {
        ds4_error_set(err, "out of memory for a session of %d tokens (%.1f MiB of %s buffers)", n_ctx,
                      (double)fwd_session_buffers_bytes(f, n_ctx) / 1048576.0, f->be.be[0].ops->name);
        release_all(st);
        free(st);
        return NULL;
    }
    return st;
}

void fwd_backend_state_free(void *p)
{
    fwd_state *st = p;
    if (!st) return;
    release_all(st);
    free(st);
}

void fwd_backend_reset(void *p)
{
    fwd_state *st = p;
    st->n = st->hi = st->loaded = 0;
    st->has_last = false;
}

/* Lowest token of layer l's frontier for a state of n tokens. */
static int64_t front_lo(int64_t n, int R)
{
    int64_t cut = n - n % R, lo = cut - (int64_t)(ds4_compress_lanes(R) - 1) * R;
    return lo < 0 ? 0 : lo;
}

int fwd_backend_rewind(void *p, size_t n_new)
{
    fwd_state *st = p;
    const ds4_hparams *hp = st->f->hp;
    int64_t n = (int64_t)n_new;
    if (n > st->n) return -1;
    if (n == st->n) return 0;
    if (n == 0) {
        fwd_backend_reset(st);
        return 0;
    }
    /* a loaded state has no rows below its snapshot's window and frontier */
    if (n < st->loaded) return -1;
    int64_t raw_lo = n - hp->n_swa < 0 ? 0 : n - hp->n_swa;
    if (raw_lo < st->hi - st->raw_rows) return -1;
    for (int l = st->l0; l < st->l1; l++) {
        int R = hp->compress_ratio[l];
        if (R && front_lo(n, R) < st->hi - st->L[l].cfront_rows) return -1;
    }
    st->n = n;
    st->has_last = false;
    return 0;
}

/* ---- snapshots ------------------------------------------------------------------ */

/* Bytes of layer l's block in the canonical payload of n tokens. */
static uint64_t block_bytes(const ds4_hparams *hp, ds4_cache_type ct, int64_t n, int l)
{
    uint64_t es = fwd_cache_elem(ct), hd = (uint64_t)hp->head_dim, id = (uint64_t)hp->indexer_head_dim;
    int64_t raw = n < hp->n_swa ? n : hp->n_swa;
    int R = hp->compress_ratio[l];
    uint64_t b = (uint64_t)raw * hd * es;
    if (!R) return b;
    uint64_t C = (uint64_t)ds4_compress_lanes(R), fr = (uint64_t)(n - front_lo(n, R));
    b += (uint64_t)(n / R) * hd * es + fr * 2 * C * hd * 4;
    if (R == 4) b += (uint64_t)(n / R) * id * es + fr * 2 * 2 * id * 4;
    return b;
}

/* Offset of layer l's block (l = n_layer: the payload's length). */
static uint64_t block_offset(const ds4_hparams *hp, ds4_cache_type ct, int64_t n, int l)
{
    uint64_t b = KVSTATE_HEADER;
    for (int i = 0; i < l; i++) b += block_bytes(hp, ct, n, i);
    return b;
}

static uint64_t payload_bytes(const ds4_hparams *hp, ds4_cache_type ct, int64_t n)
{
    return block_offset(hp, ct, n, hp->n_layer);
}

uint64_t fwd_payload_offset(const fwd_engine *f, bool f16, int64_t n_tokens, int l)
{
    return block_offset(f->hp, f16 ? DS4_CACHE_F16 : DS4_CACHE_F32, n_tokens, l);
}

uint64_t fwd_backend_kv_bytes(void *p)
{
    fwd_state *st = p;
    return payload_bytes(st->f->hp, st->ct, st->n) - KVSTATE_HEADER;
}

/* Reads ring rows of positions [lo, hi) (slot = pos mod ring) as one or
 * two contiguous ranges, appending them to out. */
static int read_ring(const xbuf_backend *be, ds4_buf *b, int64_t ring, size_t row_bytes, int64_t lo, int64_t hi, strbuf *out)
{
    while (lo < hi) {
        int64_t s = lo % ring, m = hi - lo < ring - s ? hi - lo : ring - s;
        size_t bytes = (size_t)m * row_bytes, at = out->len;
        if (out->cap < at + bytes + 1) {
            char *nb = realloc(out->s, at + bytes + 1);
            if (!nb) return -1;
            out->s = nb;
            out->cap = at + bytes + 1;
        }
        if (be->ops->read(be->ctx, b, (size_t)s * row_bytes, out->s + at, bytes)) return -1;
        out->len = at + bytes;
        out->s[out->len] = 0;
        lo += m;
    }
    return 0;
}

/* Appends the blocks of the state's layers; `need` bytes are reserved
 * first. */
static int save_blocks(fwd_state *st, strbuf *out, size_t need, ds4_error *err)
{
    fwd_engine *f = st->f;
    const ds4_hparams *hp = f->hp;
    if (out->cap < need) {
        char *nb = realloc(out->s, need);
        if (!nb) return ds4_error_set(err, "out of memory for a snapshot of %zu bytes", need);
        out->s = nb;
        out->cap = need;
    }
    const size_t es = fwd_cache_elem(st->ct), hd = (size_t)hp->head_dim, id = (size_t)hp->indexer_head_dim;
    const int64_t n = st->n, raw_lo = n - hp->n_swa < 0 ? 0 : n - hp->n_swa;
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    const xbuf_backend *be = &f->be.be[0];
    for (int l = st->l0; l < st->l1 && rc == 0; l++) {
        fwd_layer *L = &st->L[l];
        int R = hp->compress_ratio[l], bk = st->place[l].attn;
        be = &f->be.be[bk];
        rc |= read_ring(be, L->raw.on[bk], st->raw_rows, hd * es, raw_lo, n, out);
        if (!R) continue;
        size_t C = (size_t)ds4_compress_lanes(R);
        int64_t lo = front_lo(n, R);
        rc |= read_ring(be, L->comp.on[bk], n / R + 1, hd * es, 0, n / R, out);
        rc |= read_ring(be, L->cfront.on[bk], L->cfront_rows, 2 * C * hd * 4, lo, n, out);
        if (R == 4) {
            rc |= read_ring(be, L->icomp.on[bk], n / R + 1, id * es, 0, n / R, out);
            rc |= read_ring(be, L->ifront.on[bk], L->ifront_rows, 2 * 2 * id * 4, lo, n, out);
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (rc) return ops_error(be, err, "cannot read the session state");
    return 0;
}

int fwd_backend_save(void *p, strbuf *out, ds4_error *err)
{
    fwd_state *st = p;
    const ds4_hparams *hp = st->f->hp;
    unsigned char h[KVSTATE_HEADER] = { 0 };
    memcpy(h, KVSTATE_MAGIC, 8);
    le_put_u32(h + 8, st->ct == DS4_CACHE_F16 ? 1u : 0u);
    le_put_u32(h + 12, (uint32_t)hp->n_layer);
    le_put_u32(h + 16, (uint32_t)hp->head_dim);
    le_put_u32(h + 20, (uint32_t)hp->indexer_head_dim);
    le_put_u32(h + 24, (uint32_t)hp->n_swa);
    le_put_u32(h + 32, (uint32_t)st->n);
    le_put_u32(h + 36, (uint32_t)((uint64_t)st->n >> 32));
    size_t need = out->len + (size_t)payload_bytes(hp, st->ct, st->n) + 1;
    if (out->cap < need) {
        char *nb = realloc(out->s, need);
        if (!nb) return ds4_error_set(err, "out of memory for a snapshot of %zu bytes", need);
        out->s = nb;
        out->cap = need;
    }
    sb_append(out, (const char *)h, sizeof h);
    return save_blocks(st, out, need, err);
}

int fwd_stage_save(void *p, strbuf *out, ds4_error *err)
{
    fwd_state *st = p;
    const ds4_hparams *hp = st->f->hp;
    uint64_t len = block_offset(hp, st->ct, st->n, st->l1) - block_offset(hp, st->ct, st->n, st->l0);
    return save_blocks(st, out, out->len + (size_t)len + 1, err);
}

typedef struct {
    const unsigned char *p;
    size_t left;
    ds4_error err;
} reader;

/* Writes rows [lo, hi) from the payload into a ring, converting cache
 * elements from the payload's type when it differs. */
static int write_ring(const xbuf_backend *be, ds4_buf *b, int64_t ring, int64_t dim, ds4_cache_type from, ds4_cache_type to,
                      int64_t lo, int64_t hi, reader *r)
{
    size_t fe = fwd_cache_elem(from), te = fwd_cache_elem(to);
    size_t in_row = (size_t)dim * fe, out_row = (size_t)dim * te;
    void *tmp = NULL;
    if (from != to && !(tmp = malloc(out_row))) return -1;
    for (int64_t pos = lo; pos < hi; pos++) {
        const unsigned char *src = r->p;
        int rc;
        if (from == to) {
            rc = be->ops->write(be->ctx, b, (size_t)(pos % ring) * out_row, src, in_row);
        } else {
            for (int64_t i = 0; i < dim; i++) {
                if (from == DS4_CACHE_F16) {
                    uint16_t hv;
                    memcpy(&hv, src + 2 * i, 2);
                    ((float *)tmp)[i] = quant_f16_to_f32(hv);
                } else {
                    float fv;
                    memcpy(&fv, src + 4 * i, 4);
                    ((uint16_t *)tmp)[i] = quant_f32_to_f16(fv);
                }
            }
            rc = be->ops->write(be->ctx, b, (size_t)(pos % ring) * out_row, tmp, out_row);
        }
        r->p += in_row;
        r->left -= in_row;
        if (rc) {
            free(tmp);
            return -1;
        }
    }
    free(tmp);
    return 0;
}

/* Writes the state's layers from the blocks at r (cache rows of type
 * `from`); the state then holds n tokens. */
static int load_blocks(fwd_state *st, reader *r, ds4_cache_type from, int64_t nn)
{
    fwd_engine *f = st->f;
    const ds4_hparams *hp = f->hp;
    const int64_t raw_lo = nn - hp->n_swa < 0 ? 0 : nn - hp->n_swa;
    const int64_t hd = hp->head_dim, id = hp->indexer_head_dim;
    int rc = 0;
    pthread_mutex_lock(&f->mu);
    const xbuf_backend *be = &f->be.be[0];
    for (int l = st->l0; l < st->l1 && rc == 0; l++) {
        fwd_layer *L = &st->L[l];
        int R = hp->compress_ratio[l], bk = st->place[l].attn;
        be = &f->be.be[bk];
        rc |= write_ring(be, L->raw.on[bk], st->raw_rows, hd, from, st->ct, raw_lo, nn, r);
        if (!R) continue;
        int64_t C = ds4_compress_lanes(R), lo = front_lo(nn, R);
        rc |= write_ring(be, L->comp.on[bk], nn / R + 1, hd, from, st->ct, 0, nn / R, r);
        /* frontier rows are f32 in both: a same-type copy of 2·W floats */
        rc |= write_ring(be, L->cfront.on[bk], L->cfront_rows, 2 * C * hd, DS4_CACHE_F32, DS4_CACHE_F32, lo, nn, r);
        if (R == 4) {
            rc |= write_ring(be, L->icomp.on[bk], nn / R + 1, id, from, st->ct, 0, nn / R, r);
            rc |= write_ring(be, L->ifront.on[bk], L->ifront_rows, 4 * id, DS4_CACHE_F32, DS4_CACHE_F32, lo, nn, r);
        }
    }
    pthread_mutex_unlock(&f->mu);
    if (rc) return ops_error(be, &r->err, "cannot write the session state");
    st->n = st->hi = st->loaded = nn;
    st->has_last = false;
    return 0;
}

int fwd_backend_load(void *p, const void *payload, size_t len, size_t n_tokens, ds4_error *err)
{
    fwd_state *st = p;
    fwd_engine *f = st->f;
    const ds4_hparams *hp = f->hp;
    const unsigned char *h = payload;
    if (len < KVSTATE_HEADER || memcmp(h, KVSTATE_MAGIC, 8) != 0)
        return ds4_error_set(err, "snapshot payload is not a DS4 session state");
    uint32_t ctype = le_get_u32(h + 8);
    uint64_t n = (uint64_t)le_get_u32(h + 32) | (uint64_t)le_get_u32(h + 36) << 32;
    if (ctype > 1 || le_get_u32(h + 12) != (uint32_t)hp->n_layer || le_get_u32(h + 16) != (uint32_t)hp->head_dim ||
        le_get_u32(h + 20) != (uint32_t)hp->indexer_head_dim || le_get_u32(h + 24) != (uint32_t)hp->n_swa)
        return ds4_error_set(err, "snapshot state has another shape (%u layers, rows of %u) than this model (%d, %d)",
                             le_get_u32(h + 12), le_get_u32(h + 16), hp->n_layer, hp->head_dim);
    if (n != n_tokens) return ds4_error_set(err, "snapshot state holds %llu tokens, its header says %zu", (unsigned long long)n, n_tokens);
    if (n > (uint64_t)st->n_ctx) return ds4_error_set(err, "snapshot holds %llu tokens, more than the context of %d", (unsigned long long)n, st->n_ctx);
    ds4_cache_type from = ctype ? DS4_CACHE_F16 : DS4_CACHE_F32;
    if (payload_bytes(hp, from, (int64_t)n) != len)
        return ds4_error_set(err, "snapshot state is %zu bytes, expected %llu for %llu tokens", len,
                             (unsigned long long)payload_bytes(hp, from, (int64_t)n), (unsigned long long)n);
    uint64_t at = block_offset(hp, from, (int64_t)n, st->l0);
    reader r = { h + at, len - at, { "" } };
    if (load_blocks(st, &r, from, (int64_t)n) != 0) return ds4_error_set(err, "%s", r.err.msg);
    return 0;
}

int fwd_stage_load(void *p, const void *blocks, size_t len, size_t n_tokens, bool from_f16, ds4_error *err)
{
    fwd_state *st = p;
    const ds4_hparams *hp = st->f->hp;
    ds4_cache_type from = from_f16 ? DS4_CACHE_F16 : DS4_CACHE_F32;
    int64_t n = (int64_t)n_tokens;
    if (n > st->n_ctx)
        return ds4_error_set(err, "snapshot holds %zu tokens, more than the context of %d", n_tokens, st->n_ctx);
    uint64_t want = block_offset(hp, from, n, st->l1) - block_offset(hp, from, n, st->l0);
    if (want != len)
        return ds4_error_set(err, "the state of layers %d-%d is %zu bytes, expected %llu for %zu tokens", st->l0,
                             st->l1 - 1, len, (unsigned long long)want, n_tokens);
    reader r = { blocks, len, { "" } };
    if (load_blocks(st, &r, from, (int64_t)n) != 0) return ds4_error_set(err, "%s", r.err.msg);
    return 0;
}
