/* test_opencl_attn.c — the compressed-attention and routing ops of the
 * OpenCL backend against the CPU ops on random inputs (tests/opencl_util.h):
 * compressor pooling with its frontier ring, indexer scores and top-k,
 * attention over raw and compressed rows, router. Both kernel shapes run on
 * any device. Skips where no OpenCL device exists. */
#include <stdlib.h>
#include <string.h>

#include "engine/quant.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

static const clo_kernel_shape shapes[] = { CLO_SHAPE_CPU, CLO_SHAPE_GPU };

static oclt *open_shape(const mk_spec *spec, clo_kernel_shape shape)
{
    clo_options o = { .shape = shape };
    return oclt_open_with(spec, &o);
}

static float *rand_floats(oclt *f, size_t n, float lo, float hi)
{
    float *v = test_alloc(n * 4);
    for (size_t i = 0; i < n; i++) v[i] = oclt_randf(f, lo, hi);
    return v;
}

/* n rows of dim values as cache elements of type ct. */
static oclt_buf cache_rows(oclt *f, const float *v, int64_t n, int dim, ds4_cache_type ct)
{
    size_t count = (size_t)n * (size_t)dim;
    if (ct == DS4_CACHE_F32) return oclt_bytes(f, v, count * 4);
    uint16_t *h = test_alloc(count * 2 + 2);
    for (size_t i = 0; i < count; i++) h[i] = quant_f32_to_f16(v[i]);
    return oclt_bytes(f, h, count * 2);
}

/* ---- compress ------------------------------------------------------------------------------ */

/* One compressor fed chunk after chunk from position 0: after each, the
 * emitted rows (tight) and the whole frontier ring (bits) against the CPU.
 * Chunks with nothing to emit pass no pooled buffer. */
static void compress_run(oclt *f, const ds4_tensor *ape, int R, int lanes, int d, const int *chunks, int n_chunks)
{
    const int W = lanes * d;
    int Tmax = 0;
    for (int i = 0; i < n_chunks; i++) Tmax = chunks[i] > Tmax ? chunks[i] : Tmax;
    const int64_t front_rows = (int64_t)lanes * R + Tmax + 3; /* not a multiple of R */
    oclt_buf front = oclt_zeros(f, (size_t)front_rows * 2 * (size_t)W * 4);
    oclt_buf pooled = oclt_zeros(f, (size_t)(Tmax / R + 2) * (size_t)d * 4);
    int64_t pos = 0;
    for (int i = 0; i < n_chunks; i++) {
        const int T = chunks[i];
        oclt_buf a = oclt_floats(f, (size_t)T * (size_t)W, -2, 2), b = oclt_floats(f, (size_t)T * (size_t)W, -4, 4);
        int64_t n_emit = (pos + T) / R - pos / R;
        OCLT_BOTH(f, OPS->compress(CTX, BUF(a), BUF(b), ape, BUF(front), front_rows, R, lanes, d, pos, T,
                                   n_emit ? BUF(pooled) : NULL));
        if (n_emit) OCLT_CLOSE(f, pooled, (size_t)n_emit * (size_t)d, (size_t)d, 2e-6);
        OCLT_SAME(f, front, front.bytes);
        pos += T;
    }
}

TEST(opencl_attn, compress_ratio_4_two_lanes)
{
    oclt *f = oclt_open(NULL);
    const ds4_layer *L = &f->m->layers[2];
    CHECK_EQ_INT(L->ratio, 4);
    /* decode steps, then chunks that start and end inside windows and span several */
    const int chunks[] = { 1, 1, 1, 1, 1, 3, 5, 8, 2, 7, 1, 16, 9, 1, 1 };
    const int n = (int)(sizeof chunks / sizeof chunks[0]);
    compress_run(f, &L->comp_ape, 4, 2, f->hp->head_dim, chunks, n);
    compress_run(f, &L->idx_comp_ape, 4, 2, f->hp->indexer_head_dim, chunks, n);
    /* ape rows of the other dense types */
    const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_BF16, GGML_TYPE_Q8_0 };
    for (size_t i = 0; i < 3; i++) {
        const ds4_tensor *ape = oclt_tensor(f, types[i], 2 * 64, 4, 1, 1.0f);
        compress_run(f, ape, 4, 2, 64, chunks, n);
    }
    oclt_close(f);
}

TEST(opencl_attn, compress_ratio_128_one_lane)
{
    oclt *f = oclt_open(NULL);
    const ds4_layer *L = &f->m->layers[3];
    CHECK_EQ_INT(L->ratio, 128);
    /* a window finished by decode steps, by a chunk ending on its last token,
     * and chunks longer than a window (two rows in one chunk) */
    const int chunks[] = { 1, 100, 26, 1, 130, 3, 129, 1, 250 };
    compress_run(f, &L->comp_ape, 128, 1, f->hp->head_dim, chunks, (int)(sizeof chunks / sizeof chunks[0]));
    oclt_close(f);
}

TEST(opencl_attn, compress_rejects_bad_shapes)
{
    oclt *f = oclt_open(NULL);
    const ds4_layer *L = &f->m->layers[2];
    const int d = f->hp->head_dim, W = 2 * d;
    oclt_buf a = oclt_floats(f, (size_t)4 * W, -1, 1), front = oclt_zeros(f, (size_t)12 * 2 * W * 4);
    OCLT_CL_FAILS(f, OPS->compress(CTX, BUF(a), BUF(a), &L->comp_ape, BUF(front), 11, 4, 2, d, 0, 4, NULL),
                  "frontier of 11 rows");
    OCLT_CL_FAILS(f, OPS->compress(CTX, BUF(a), BUF(a), &L->comp_ape, BUF(front), 12, 4, 2, d, 0, 4, NULL),
                  "missing buffer");
    OCLT_CL_FAILS(f, OPS->compress(CTX, BUF(a), BUF(a), &L->comp_ape, BUF(front), 12, 4, 1, d, 0, 4, NULL),
                  "does not match");
    oclt_close(f);
}

/* ---- indexer -------------------------------------------------------------------------------- */

/* The indexer for tokens pos0 … pos0+T−1 over `rows` (R = 4 numbering);
 * selections must equal the CPU's exactly. */
static void check_indexer(oclt *f, oclt_buf q, oclt_buf w, oclt_buf rows, ds4_cache_type ct, int64_t pos0, int T)
{
    const int k = f->hp->indexer_top_k;
    oclt_buf sel = oclt_zeros(f, (size_t)T * (size_t)k * 4);
    OCLT_BOTH(f, OPS->indexer(CTX, BUF(q), BUF(w), BUF(rows), ct, 4, pos0, T, BUF(sel)));
    OCLT_SAME(f, sel, sel.bytes);
}

static void indexer_cases(const mk_spec *spec, clo_kernel_shape shape)
{
    oclt *f = open_shape(spec, shape);
    const int nh = f->hp->n_indexer_head, hd = f->hp->indexer_head_dim, k = f->hp->indexer_top_k;
    /* positions where every token ranks, where only the later tokens of a
     * chunk do, and decode steps with few and with many rows per kept one */
    const struct {
        int64_t pos0;
        int T;
    } at[] = { { 0, 4 * k + 40 }, { 4 * (int64_t)k - 9, 17 }, { 4 * (int64_t)k + 100, 1 }, { 40 * (int64_t)k + 7, 1 },
               { 12 * (int64_t)k, 9 } };
    for (int ct = 0; ct < 2; ct++)
        for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
            int64_t pos0 = at[i].pos0;
            int T = at[i].T;
            int64_t n = (pos0 + T) / 4;
            oclt_buf q = oclt_floats(f, (size_t)T * (size_t)nh * (size_t)hd, -1, 1);
            oclt_buf w = oclt_floats(f, (size_t)T * (size_t)nh, -1, 1);
            oclt_buf rows = cache_rows(f, rand_floats(f, (size_t)n * (size_t)hd, -1, 1), n, hd, (ds4_cache_type)ct);
            check_indexer(f, q, w, rows, (ds4_cache_type)ct, pos0, T);
        }
    /* ties: rows repeating three patterns, so scores repeat across the
     * cut; positive head weights, and all-zero weights (every score 0) */
    int64_t pos0 = 20 * (int64_t)k, n = pos0 / 4 + 2;
    const int T = 5;
    float *base = rand_floats(f, (size_t)3 * hd, -1, 1), *v = test_alloc((size_t)n * (size_t)hd * 4);
    for (int64_t c = 0; c < n; c++) memcpy(v + c * hd, base + (c * 7 % 3) * hd, (size_t)hd * 4);
    oclt_buf q = oclt_floats(f, (size_t)T * (size_t)nh * (size_t)hd, -1, 1);
    oclt_buf w = oclt_floats(f, (size_t)T * (size_t)nh, 0.1f, 1);
    for (int ct = 0; ct < 2; ct++) {
        oclt_buf rows = cache_rows(f, v, n, hd, (ds4_cache_type)ct);
        check_indexer(f, q, w, rows, (ds4_cache_type)ct, pos0, T);
        oclt_buf zero = oclt_zeros(f, (size_t)T * (size_t)nh * 4);
        check_indexer(f, q, zero, rows, (ds4_cache_type)ct, pos0, T);
        int32_t *sel = test_alloc((size_t)T * (size_t)k * 4);
        oclt_buf out = oclt_zeros(f, (size_t)T * (size_t)k * 4);
        OCLT_BOTH(f, OPS->indexer(CTX, BUF(q), BUF(zero), BUF(rows), (ds4_cache_type)ct, 4, pos0, T, BUF(out)));
        memcpy(sel, oclt_read(f, out, OCLT_CL), (size_t)T * (size_t)k * 4);
        for (int i = 0; i < k; i++) CHECK_EQ_INT(sel[i], i); /* all equal: the lowest rows */
    }
    oclt_close(f);
}

TEST(opencl_attn, indexer_top_k_exact)
{
    for (size_t i = 0; i < 2; i++) indexer_cases(NULL, shapes[i]);
}

TEST(opencl_attn, indexer_top_512_many_rows)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_layer = 3;
    s.n_indexer_head = 16;
    s.indexer_top_k = 512;
    for (size_t i = 0; i < 2; i++) indexer_cases(&s, shapes[i]);
}

/* ---- attention ------------------------------------------------------------------------------ */

typedef struct {
    int R;
    int64_t pos0;
    int T;
    int64_t raw_rows; /* 0: the least the chunk needs */
    bool sel;
} attn_case;

static void check_attention(oclt *f, const attn_case *ac, ds4_cache_type ct, const ds4_tensor *sinks)
{
    const ds4_hparams *hp = f->hp;
    const int H = hp->n_head, hd = hp->head_dim, k = hp->indexer_top_k, T = ac->T;
    int64_t raw_rows = ac->raw_rows ? ac->raw_rows : hp->n_swa + T - 1;
    int64_t n_comp = ac->R ? (ac->pos0 + T) / ac->R : 0;
    /* every slot holds a row, written or stale: only the window's are read */
    oclt_buf raw = cache_rows(f, rand_floats(f, (size_t)raw_rows * (size_t)hd, -1, 1), raw_rows, hd, ct);
    int64_t comp_n = n_comp > 0 ? n_comp : 1;
    oclt_buf comp = cache_rows(f, rand_floats(f, (size_t)comp_n * (size_t)hd, -1, 1), comp_n, hd, ct);
    oclt_buf q = oclt_floats(f, (size_t)T * (size_t)H * (size_t)hd, -6, 6);
    oclt_buf o = oclt_zeros(f, (size_t)T * (size_t)H * (size_t)hd * 4);
    oclt_buf sel = { { NULL, NULL }, 0 };
    if (ac->sel) {
        /* visible rows in increasing order, some dropped: −1 in the middle
         * (the schedule pads at the end; any −1 means "unused") and at the end */
        int32_t *s = test_alloc((size_t)T * (size_t)k * 4);
        for (int t = 0; t < T; t++) {
            int64_t nv = (ac->pos0 + t + 1) / ac->R;
            int n = 0;
            for (int64_t c = 0; c < nv && n < k; c++)
                if (oclt_randi(f, 3)) s[t * k + n++] = (int32_t)c;
                else if (oclt_randi(f, 2)) s[t * k + n++] = -1;
            while (n < k) s[t * k + n++] = -1;
        }
        sel = oclt_ints(f, s, (size_t)T * (size_t)k);
    }
    OCLT_BOTH(f, OPS->attention(CTX, BUF(q), BUF(raw), ct, raw_rows, ac->R ? BUF(comp) : NULL, ac->R,
                                ac->sel ? BUF(sel) : NULL, k, sinks, ac->pos0, T, BUF(o)));
    /* scores differ by the dot products' summation order (a few ulps of
     * values up to ~10), which the exponentials carry into the weights */
    OCLT_CLOSE(f, o, (size_t)T * (size_t)H * (size_t)hd, (size_t)hd, 1e-5);
}

static void attention_cases(clo_kernel_shape shape)
{
    oclt *f = open_shape(NULL, shape);
    const ds4_hparams *hp = f->hp;
    const int64_t w = hp->n_swa;
    const attn_case cases[] = {
        { 0, 0, 1, 0, false },             /* one row */
        { 0, 5, 1, 0, false },             /* window not yet full */
        { 0, 37, 20, 0, false },           /* a chunk over a wrapped ring */
        { 0, 1000, 1, w, false },          /* decode, ring of exactly the window */
        { 128, 300, 30, 0, false },        /* ratio 128 */
        { 128, 130 * 128, 1, 0, false },   /* ratio 128, many rows at decode */
        { 4, 0, 24, 0, false },            /* ratio 4 from the start */
        { 4, 1000, 1, 0, false },          /* decode over 250 rows: split into blocks */
        { 4, 8000, 3, 40, false },         /* 2000 rows, larger ring */
        { 4, 200, 6, 0, true },            /* a selection with unused entries */
        { 4, 3, 2, 0, true },              /* a selection of nothing at first */
    };
    /* the fixture's sinks, and sinks that dominate */
    const ds4_tensor *big = oclt_tensor(f, GGML_TYPE_F32, hp->n_head, 1, 1, 6.0f);
    for (int ct = 0; ct < 2; ct++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            check_attention(f, &cases[i], (ds4_cache_type)ct, &f->m->layers[2].attn_sinks);
            if (i % 3 == 0) check_attention(f, &cases[i], (ds4_cache_type)ct, big);
        }
    oclt_buf q = oclt_floats(f, (size_t)2 * hp->n_head * hp->head_dim, -1, 1);
    oclt_buf raw = oclt_zeros(f, (size_t)w * hp->head_dim * 4);
    OCLT_CL_FAILS(f, OPS->attention(CTX, BUF(q), BUF(raw), DS4_CACHE_F32, w, NULL, 0, NULL, 0,
                                    &f->m->layers[0].attn_sinks, 100, 2, BUF(q)),
                  "raw ring");
    oclt_close(f);
}

TEST(opencl_attn, attention_raw_compressed_selected)
{
    for (size_t i = 0; i < 2; i++) attention_cases(shapes[i]);
}

/* ---- the ops together ------------------------------------------------------------------- */

/* A ratio-4 layer's attention state driven chunk by chunk as the schedule
 * drives it: raw rows into the ring, both compressors' rows into their
 * caches (f16), the indexer once rows outnumber top_k, attention through
 * its selection. Each backend keeps its own state (raw ring, frontier
 * rings); the selections must match exactly and the outputs closely at
 * every step. */
TEST(opencl_attn, ratio_4_layer_over_chunks)
{
    oclt *f = oclt_open(NULL);
    const ds4_hparams *hp = f->hp;
    const ds4_layer *L = &f->m->layers[2];
    const int H = hp->n_head, hd = hp->head_dim, id = hp->indexer_head_dim, nih = hp->n_indexer_head;
    const int k = hp->indexer_top_k, R = 4;
    const ds4_cache_type ct = DS4_CACHE_F16;
    const int chunks[] = { 1, 1, 5, 12, 3, 20, 1, 1, 30, 2, 1, 7 };
    const int n_chunks = (int)(sizeof chunks / sizeof chunks[0]), Tmax = 30;
    int64_t total = 0;
    for (int i = 0; i < n_chunks; i++) total += chunks[i];
    const int64_t raw_rows = hp->n_swa + Tmax - 1, front_rows = 2 * R + Tmax;
    oclt_buf raw = oclt_zeros(f, (size_t)raw_rows * (size_t)hd * 2);
    oclt_buf comp = oclt_zeros(f, (size_t)(total / R) * (size_t)hd * 2);
    oclt_buf icomp = oclt_zeros(f, (size_t)(total / R) * (size_t)id * 2);
    oclt_buf cfront = oclt_zeros(f, (size_t)front_rows * 4 * (size_t)hd * 4);
    oclt_buf ifront = oclt_zeros(f, (size_t)front_rows * 4 * (size_t)id * 4);
    oclt_buf pooled = oclt_zeros(f, (size_t)(Tmax / R + 1) * (size_t)hd * 4);
    oclt_buf ipooled = oclt_zeros(f, (size_t)(Tmax / R + 1) * (size_t)id * 4);
    oclt_buf isel = oclt_zeros(f, (size_t)Tmax * (size_t)k * 4);
    oclt_buf o = oclt_zeros(f, (size_t)Tmax * (size_t)H * (size_t)hd * 4);
    int64_t pos0 = 0;
    bool ranked = false;
    for (int i = 0; i < n_chunks; i++) {
        const int T = chunks[i];
        const int64_t w0 = pos0 / R, n_emit = (pos0 + T) / R - w0;
        oclt_buf kv = oclt_floats(f, (size_t)T * (size_t)hd, -1, 1);
        OCLT_BOTH(f, OPS->store_rows(CTX, BUF(kv), T, hd, BUF(raw), ct, pos0, raw_rows));
        oclt_buf ca = oclt_floats(f, (size_t)T * 2 * (size_t)hd, -1, 1), cb = oclt_floats(f, (size_t)T * 2 * (size_t)hd, -3, 3);
        OCLT_BOTH(f, OPS->compress(CTX, BUF(ca), BUF(cb), &L->comp_ape, BUF(cfront), front_rows, R, 2, hd, pos0, T,
                                   BUF(pooled)));
        oclt_buf ia = oclt_floats(f, (size_t)T * 2 * (size_t)id, -1, 1), ib = oclt_floats(f, (size_t)T * 2 * (size_t)id, -3, 3);
        OCLT_BOTH(f, OPS->compress(CTX, BUF(ia), BUF(ib), &L->idx_comp_ape, BUF(ifront), front_rows, R, 2, id, pos0, T,
                                   BUF(ipooled)));
        if (n_emit > 0) {
            OCLT_CLOSE(f, pooled, (size_t)n_emit * (size_t)hd, (size_t)hd, 2e-6);
            OCLT_CLOSE(f, ipooled, (size_t)n_emit * (size_t)id, (size_t)id, 2e-6);
            OCLT_BOTH(f, OPS->store_rows(CTX, BUF(pooled), n_emit, hd, BUF(comp), ct, w0, 0));
            OCLT_BOTH(f, OPS->store_rows(CTX, BUF(ipooled), n_emit, id, BUF(icomp), ct, w0, 0));
            /* an f16 rounding may fall either side for values a few ulps
             * apart: both continue from the CPU's rows, so each step is
             * compared on equal inputs */
            oclt_write(f, comp, 0, oclt_read(f, comp, OCLT_CPU), comp.bytes);
            oclt_write(f, icomp, 0, oclt_read(f, icomp, OCLT_CPU), icomp.bytes);
        }
        bool rank = (pos0 + T) / R > k;
        if (rank) {
            oclt_buf qI = oclt_floats(f, (size_t)T * (size_t)nih * (size_t)id, -1, 1);
            oclt_buf iw = oclt_floats(f, (size_t)T * (size_t)nih, -1, 1);
            OCLT_BOTH(f, OPS->indexer(CTX, BUF(qI), BUF(iw), BUF(icomp), ct, R, pos0, T, BUF(isel)));
            OCLT_SAME(f, isel, (size_t)T * (size_t)k * 4);
            ranked = true;
        }
        oclt_buf q = oclt_floats(f, (size_t)T * (size_t)H * (size_t)hd, -4, 4);
        OCLT_BOTH(f, OPS->attention(CTX, BUF(q), BUF(raw), ct, raw_rows, BUF(comp), R, rank ? BUF(isel) : NULL, k,
                                    &L->attn_sinks, pos0, T, BUF(o)));
        OCLT_CLOSE(f, o, (size_t)T * (size_t)H * (size_t)hd, (size_t)hd, 1e-5);
        pos0 += T;
    }
    CHECK_MSG(ranked, "the run should reach the indexer");
    OCLT_SAME(f, raw, raw.bytes);
    OCLT_SAME(f, cfront, cfront.bytes);
    OCLT_SAME(f, ifront, ifront.bytes);
    oclt_close(f);
}

/* ---- router --------------------------------------------------------------------------------- */

static void check_router(oclt *f, const float *logits, int T, const ds4_tensor *bias, const ds4_tensor *tid2eid,
                         oclt_buf tokens)
{
    const int E = f->hp->n_expert, k = f->hp->n_expert_used;
    oclt_buf lg = oclt_bytes(f, logits, (size_t)T * (size_t)E * 4);
    oclt_buf sel = oclt_zeros(f, (size_t)T * (size_t)k * 4), w = oclt_zeros(f, (size_t)T * (size_t)k * 4);
    OCLT_BOTH(f, OPS->router(CTX, BUF(lg), bias, tid2eid, tid2eid ? BUF(tokens) : NULL, T, BUF(sel), BUF(w)));
    OCLT_SAME(f, sel, sel.bytes);
    OCLT_CLOSE(f, w, (size_t)T * (size_t)k, (size_t)k, 1e-6);
}

static void router_cases(oclt *f)
{
    const int E = f->hp->n_expert, T = 37;
    const ds4_layer *hash = &f->m->layers[0], *plain = &f->m->layers[4];
    CHECK(hash->hash && !plain->hash);
    int32_t ids[37];
    for (int t = 0; t < T; t++) ids[t] = (int32_t)oclt_randi(f, (uint32_t)f->hp->n_vocab);
    oclt_buf tokens = oclt_ints(f, ids, T);
    /* logits across the softplus branches (below −20, above 20, between) */
    float *lg = rand_floats(f, (size_t)T * (size_t)E, -30, 30);
    for (int Tn = 1; Tn <= T; Tn += T - 1) {
        check_router(f, lg, Tn, &plain->exp_probs_b, NULL, tokens);
        check_router(f, lg, Tn, NULL, NULL, tokens);
        check_router(f, lg, Tn, NULL, &hash->tid2eid, tokens);
    }
    /* ties: equal logits everywhere (the lowest ids win), and equal pairs
     * at the top */
    float *tie = test_alloc((size_t)T * (size_t)E * 4);
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) tie[t * E + e] = t % 2 ? 1.5f : (float)((e * 5 + t) % 4);
    check_router(f, tie, T, NULL, NULL, tokens);
    check_router(f, tie, T, &plain->exp_probs_b, NULL, tokens);
}

TEST(opencl_attn, router_bias_hash_ties_and_norm)
{
    oclt *f = oclt_open(NULL);
    router_cases(f);
    f->m->hp.expert_weights_norm = !f->m->hp.expert_weights_norm;
    router_cases(f);
    oclt_close(f);
}

/* ---- the benchmark mode ------------------------------------------------------------------- */

/* ds4cl-bench --attn-bench prints one CSV row per case and backend, with
 * the row counts the schedule would use at each context. */
TEST(opencl_attn, attn_bench_csv)
{
    oclt_require_device();
    char *out = NULL;
    int rc = test_runf(&out, "%s/ds4cl-bench --attn-bench --backend both --rows 300 --ctx 4096 --reps 1 2>&1",
                       test_bindir());
    CHECK_MSG(rc == 0, "ds4cl-bench failed: %s", out);
    CHECK_CONTAINS(out, "case,backend,cache,rows,ms,cpu_ms,rows_gbps,gflops\n");
    /* the window (128) plus: 300 rows; the indexer's 512; 4096/128; the indexer over 4096/4 */
    const char *want[] = { "attention rows=300,%s,f16,428,",        "attention ctx=4096 ratio 4,%s,f16,640,",
                           "attention ctx=4096 ratio 128,%s,f16,160,", "indexer ctx=4096,%s,f16,1024," };
    const char *backends[] = { "cpu", "opencl" };
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 4; i++) {
            const char *line = strstr(out, test_printf(want[i], backends[b]));
            CHECK_MSG(line != NULL, "no row \"%s\" in:\n%s", test_printf(want[i], backends[b]), out);
            double ms = atof(strchr(line + strlen(test_printf(want[i], backends[b])) - 1, ',') + 1);
            CHECK_MSG(ms > 0, "row \"%.60s\" has no time", line);
        }
    rc = test_runf(&out, "%s/ds4cl-bench --attn-bench --rows 12x 2>&1", test_bindir());
    CHECK_EQ_INT(rc, 2);
    CHECK_CONTAINS(out, "usage: ds4cl-bench --attn-bench");
}
