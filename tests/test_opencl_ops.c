/* test_opencl_ops.c — each simple OpenCL op against the CPU op on random
 * inputs (tests/opencl_util.h): embedding, elementwise ops, norms, argmax,
 * hyper-connections, RoPE, rounding simulations and cache stores. Skips
 * where no OpenCL device exists. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/numerics.h"
#include "engine/quant.h"
#include "tests/opencl_util.h"
#include "tests/test.h"

/* ---- embedding ---------------------------------------------------------------------- */

TEST(opencl_ops, embed_every_table_type)
{
    oclt *f = oclt_open(NULL);
    const int T = 7, D = f->hp->n_embd, V = f->hp->n_vocab;
    int32_t ids[7] = { 0, V - 1, 17, 17, 200, 3, 99 };
    oclt_buf tok = oclt_ints(f, ids, T);
    oclt_buf S = oclt_zeros(f, (size_t)T * (size_t)f->hp->hc_dim * 4);
    /* the fixture's table (F16), then every other dense type */
    OCLT_BOTH(f, OPS->embed(CTX, &f->m->token_embd, BUF(tok), T, BUF(S)));
    OCLT_SAME(f, S, S.bytes);
    const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_BF16, GGML_TYPE_Q8_0 };
    for (size_t i = 0; i < 3; i++) {
        const ds4_tensor *tab = oclt_tensor(f, types[i], D, V, 1, 0.5f);
        OCLT_BOTH(f, OPS->embed(CTX, tab, BUF(tok), 1, BUF(S)));      /* decode */
        OCLT_SAME(f, S, S.bytes);
        OCLT_BOTH(f, OPS->embed(CTX, tab, BUF(tok), T, BUF(S)));
        OCLT_SAME(f, S, S.bytes);
    }
    OCLT_CL_FAILS(f, OPS->embed(CTX, &f->m->token_embd, BUF(tok), T + 1, BUF(S)), "outside a buffer");
    oclt_close(f);
}

/* ---- elementwise -------------------------------------------------------------------- */

TEST(opencl_ops, add_exact_and_in_place)
{
    oclt *f = oclt_open(NULL);
    const int64_t sizes[] = { 1, 255, 4096, 100003 };
    for (size_t i = 0; i < 4; i++) {
        int64_t n = sizes[i];
        oclt_buf a = oclt_floats(f, (size_t)n, -3, 3), b = oclt_floats(f, (size_t)n, -3, 3);
        oclt_buf y = oclt_zeros(f, (size_t)n * 4);
        OCLT_BOTH(f, OPS->add(CTX, BUF(a), BUF(b), n, BUF(y)));
        OCLT_SAME(f, y, y.bytes);
        OCLT_BOTH(f, OPS->add(CTX, BUF(a), BUF(b), n, BUF(a))); /* y aliases a */
        OCLT_SAME(f, a, a.bytes);
    }
    oclt_close(f);
}

TEST(opencl_ops, swiglu_with_and_without_clamp)
{
    oclt *f = oclt_open(NULL);
    const int shapes[][2] = { { 1, 256 }, { 5, 300 }, { 64, 512 } };
    const float clamps[] = { 0.0f, 1e-7f, 2.5f, 10.0f };
    for (size_t s = 0; s < 3; s++)
        for (size_t c = 0; c < 4; c++) {
            int T = shapes[s][0], n = shapes[s][1];
            oclt_buf g = oclt_floats(f, (size_t)T * (size_t)n, -12, 12), u = oclt_floats(f, (size_t)T * (size_t)n, -12, 12);
            oclt_buf mid = oclt_zeros(f, (size_t)T * (size_t)n * 4);
            OCLT_BOTH(f, OPS->swiglu(CTX, BUF(g), BUF(u), T, n, clamps[c], BUF(mid)));
            OCLT_CLOSE(f, mid, (size_t)T * (size_t)n, (size_t)n, 1e-6);
        }
    oclt_close(f);
}

/* ---- norms and argmax ---------------------------------------------------------------- */

/* Ops with CPU- and GPU-shaped kernels run each shape on any device. */
static const clo_kernel_shape shapes[] = { CLO_SHAPE_CPU, CLO_SHAPE_GPU };

static oclt *open_shape(const mk_spec *spec, clo_kernel_shape shape)
{
    clo_options o = { .shape = shape };
    return oclt_open_with(spec, &o);
}

static void rmsnorm_cases(clo_kernel_shape shape)
{
    oclt *f = open_shape(NULL, shape);
    const ds4_layer *L = &f->m->layers[1];
    struct {
        const ds4_tensor *w;
        int n;
        int64_t rows;
    } cases[] = {
        { &L->attn_norm, f->hp->n_embd, 1 },
        { &L->attn_norm, f->hp->n_embd, 37 },
        { &L->attn_q_a_norm, f->hp->q_lora, 5 },
        { NULL, f->hp->head_dim, (int64_t)3 * f->hp->n_head },
        { NULL, 77, 2 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = (size_t)cases[i].rows * (size_t)cases[i].n;
        oclt_buf x = oclt_floats(f, n, -4, 4), y = oclt_zeros(f, n * 4);
        OCLT_BOTH(f, OPS->rmsnorm(CTX, BUF(x), cases[i].w, cases[i].rows, cases[i].n, BUF(y)));
        OCLT_CLOSE(f, y, n, (size_t)cases[i].n, 2e-6);
        OCLT_BOTH(f, OPS->rmsnorm(CTX, BUF(x), cases[i].w, cases[i].rows, cases[i].n, BUF(x)));
        OCLT_CLOSE(f, x, n, (size_t)cases[i].n, 2e-6);
    }
    OCLT_CL_FAILS(f, OPS->rmsnorm(CTX, NULL, &L->attn_norm, 1, 5, NULL), "rmsnorm");
    oclt_close(f);
}

TEST(opencl_ops, rmsnorm_weighted_unweighted_in_place)
{
    for (size_t i = 0; i < 2; i++) rmsnorm_cases(shapes[i]);
}

TEST(opencl_ops, argmax_first_of_equal_maxima)
{
    oclt *f = oclt_open(NULL);
    const int64_t sizes[] = { 1, 2, 311, 129280 };
    oclt_buf out = oclt_zeros(f, 4);
    for (size_t i = 0; i < 4; i++) {
        int64_t n = sizes[i];
        float *v = test_alloc((size_t)n * 4);
        for (int64_t j = 0; j < n; j++) v[j] = oclt_randf(f, -50, 50);
        oclt_buf x = oclt_bytes(f, v, (size_t)n * 4);
        OCLT_BOTH(f, OPS->argmax(CTX, BUF(x), n, BUF(out)));
        OCLT_SAME(f, out, 4);
        /* ties: the lower index wins, wherever the maxima sit */
        if (n > 2) {
            v[n / 3] = v[n - 1] = v[n / 2] = 60.0f;
            oclt_write(f, x, 0, v, (size_t)n * 4);
            OCLT_BOTH(f, OPS->argmax(CTX, BUF(x), n, BUF(out)));
            OCLT_SAME(f, out, 4);
            CHECK_EQ_INT(*(int32_t *)oclt_read(f, out, OCLT_CL), n / 3);
        }
    }
    oclt_close(f);
}

/* ---- hyper-connections ----------------------------------------------------------------- */

/* hc_pre at a layer site and with mixers of every dense type; x, post and
 * comb (after Sinkhorn) against the CPU. */
static void check_hc_pre(oclt *f, const ds4_hc_site *site, int T)
{
    const ds4_hparams *hp = f->hp;
    oclt_buf S = oclt_floats(f, (size_t)T * (size_t)hp->hc_dim, -2, 2);
    oclt_buf x = oclt_zeros(f, (size_t)T * (size_t)hp->n_embd * 4);
    oclt_buf post = oclt_zeros(f, (size_t)T * (size_t)hp->n_hc * 4);
    oclt_buf comb = oclt_zeros(f, (size_t)T * (size_t)hp->n_hc * (size_t)hp->n_hc * 4);
    OCLT_BOTH(f, OPS->hc_pre(CTX, site, BUF(S), T, BUF(x), BUF(post), BUF(comb)));
    OCLT_CLOSE(f, x, (size_t)T * (size_t)hp->n_embd, (size_t)hp->n_embd, 1e-5);
    OCLT_CLOSE(f, post, (size_t)T * (size_t)hp->n_hc, (size_t)hp->n_hc, 1e-5);
    OCLT_CLOSE(f, comb, (size_t)T * (size_t)hp->n_hc * (size_t)hp->n_hc, (size_t)hp->n_hc * (size_t)hp->n_hc, 1e-5);
}

static void check_hc_head(oclt *f, const ds4_hc_site *site, int T)
{
    const ds4_hparams *hp = f->hp;
    oclt_buf S = oclt_floats(f, (size_t)T * (size_t)hp->hc_dim, -2, 2);
    oclt_buf y = oclt_zeros(f, (size_t)T * (size_t)hp->n_embd * 4);
    OCLT_BOTH(f, OPS->hc_head(CTX, site, BUF(S), T, BUF(y)));
    OCLT_CLOSE(f, y, (size_t)T * (size_t)hp->n_embd, (size_t)hp->n_embd, 1e-5);
}

static void hc_pre_and_head_cases(const mk_spec *spec, clo_kernel_shape shape)
{
    oclt *f = open_shape(spec, shape);
    const ds4_hparams *hp = f->hp;
    const ds4_layer *L = &f->m->layers[2];
    ds4_hc_site attn = { &L->hc_attn_fn, &L->hc_attn_scale, &L->hc_attn_base };
    ds4_hc_site ffn = { &L->hc_ffn_fn, &L->hc_ffn_scale, &L->hc_ffn_base };
    ds4_hc_site out = { &f->m->output_hc_fn, &f->m->output_hc_scale, &f->m->output_hc_base };
    for (int T = 1; T <= 19; T += 18) {
        check_hc_pre(f, &attn, T);
        check_hc_pre(f, &ffn, T);
        check_hc_head(f, &out, T);
    }
    const uint32_t types[] = { GGML_TYPE_F32, GGML_TYPE_BF16, GGML_TYPE_Q8_0 };
    for (size_t i = 0; i < 3; i++) {
        ds4_hc_site s = attn, h = out;
        s.fn = oclt_tensor(f, types[i], hp->hc_dim, hp->mix_hc, 1, 0.02f);
        h.fn = oclt_tensor(f, types[i], hp->hc_dim, hp->n_hc, 1, 0.02f);
        check_hc_pre(f, &s, 3);
        check_hc_head(f, &h, 3);
    }
    oclt_close(f);
}

TEST(opencl_ops, hc_pre_and_head_match_the_cpu)
{
    for (size_t i = 0; i < 2; i++) hc_pre_and_head_cases(NULL, shapes[i]);
}

TEST(opencl_ops, hc_pre_and_head_other_stream_counts)
{
    mk_spec s;
    mk_spec_tiny(&s);
    s.n_hc = 2;
    s.hc_sinkhorn_iters = 3;
    hc_pre_and_head_cases(&s, CLO_SHAPE_CPU);
    mk_spec_tiny(&s);
    s.n_hc = 7;
    hc_pre_and_head_cases(&s, CLO_SHAPE_GPU);
}

static void hc_post_cases(clo_kernel_shape shape)
{
    oclt *f = open_shape(NULL, shape);
    const ds4_hparams *hp = f->hp;
    for (int T = 1; T <= 33; T += 32) {
        size_t hs = (size_t)T * (size_t)hp->hc_dim;
        oclt_buf S = oclt_floats(f, hs, -2, 2), out = oclt_zeros(f, hs * 4);
        oclt_buf F = oclt_floats(f, (size_t)T * (size_t)hp->n_embd, -3, 3);
        oclt_buf post = oclt_floats(f, (size_t)T * (size_t)hp->n_hc, 0, 2);
        oclt_buf comb = oclt_floats(f, (size_t)T * (size_t)hp->n_hc * (size_t)hp->n_hc, 0, 1);
        OCLT_BOTH(f, OPS->hc_post(CTX, BUF(S), BUF(F), BUF(post), BUF(comb), T, BUF(out)));
        OCLT_SAME(f, out, out.bytes);
        OCLT_CL_FAILS(f, OPS->hc_post(CTX, BUF(S), BUF(F), BUF(post), BUF(comb), T, BUF(S)), "aliases");
    }
    oclt_close(f);
}

TEST(opencl_ops, hc_post_exact)
{
    for (size_t i = 0; i < 2; i++) hc_post_cases(shapes[i]);
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

static void check_rope(oclt *f, const ds4_rope *rp, int64_t rows, int heads, int dim, int64_t pos0, int step)
{
    size_t n = (size_t)rows * (size_t)heads * (size_t)dim;
    oclt_buf x = oclt_floats(f, n, -3, 3);
    for (int inverse = 0; inverse < 2; inverse++) {
        OCLT_BOTH(f, OPS->rope(CTX, BUF(x), rows, heads, dim, rp, pos0, step, inverse));
        /* the angles agree to the bit; cos/sin may differ in the last place */
        OCLT_CLOSE(f, x, n, (size_t)dim, 1e-6);
    }
}

TEST(opencl_ops, rope_plain_yarn_inverse_positions)
{
    oclt *f = oclt_open(NULL);
    const ds4_hparams *hp = f->hp;
    ds4_rope plain, comp;
    rope_params(hp, 0, &plain);
    rope_params(hp, 1, &comp);
    CHECK_MSG(comp.ext_factor != 0.0f, "the fixture's compressed layers should use YaRN");
    const int64_t pos0s[] = { 0, 5, 1000, 70001, (int64_t)1 << 20 };
    for (size_t i = 0; i < sizeof pos0s / sizeof pos0s[0]; i++) {
        check_rope(f, &plain, 1, hp->n_head, hp->head_dim, pos0s[i], 1);           /* decode q */
        check_rope(f, &comp, 1, 1, hp->head_dim, pos0s[i], 1);                     /* one kv row */
        check_rope(f, &plain, 13, hp->n_head, hp->head_dim, pos0s[i], 1);          /* a chunk */
        check_rope(f, &comp, 6, 1, hp->head_dim, pos0s[i] / 4 * 4, 4);             /* compressed rows */
        check_rope(f, &comp, 3, hp->n_indexer_head, hp->indexer_head_dim, pos0s[i], 1);
    }
    /* every pair rotated (n_rot = dim), and a rotation of 2 dims */
    ds4_rope all = comp;
    all.n_rot = 128;
    check_rope(f, &all, 4, 2, 128, 333, 128);
    all.n_rot = 2;
    check_rope(f, &all, 4, 2, 128, 333, 1);
    OCLT_CL_FAILS(f, OPS->rope(CTX, NULL, 1, 1, 64, &plain, 0, 1, 0), "rope");
    oclt_close(f);
}

/* ---- rounding simulations ------------------------------------------------------------------ */

/* Values over many magnitudes (down to fp8 subnormals, up to clamping),
 * exact zeros and ties. */
static oclt_buf wide_values(oclt *f, size_t n)
{
    float *v = test_alloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        float m = powf(10.0f, oclt_randf(f, -7, 3));
        v[i] = oclt_randf(f, -1, 1) * m;
        if (i % 97 == 5) v[i] = 0.0f;
        if (i % 89 == 7) v[i] = 0.5f; /* ties on the grids */
    }
    /* one block that is all tiny (the scale floor) */
    for (size_t i = 0; i < 64 && i < n; i++) v[i] *= 1e-9f;
    /* a block scaled by exactly 1 (max 448) holding e4m3 midpoints, which
     * round to the even code */
    static const float ties[] = { 448.0f, 1.0625f, -1.1875f, 17.0f, 3.0f * 0x1p-10f, 0.001953125f * 1.5f, 240.0f - 8.0f };
    for (size_t i = 0; i < sizeof ties / sizeof ties[0] && 64 + i < n; i++) v[64 + i] = ties[i];
    return oclt_bytes(f, v, n * 4);
}

/* Rows c·e_0: the Hadamard transform spreads them into entries of equal
 * magnitude c/sqrt(dim), here chosen on the e2m1 midpoints 3.5 and 5. */
static void fp4_tie_rows(oclt *f, oclt_buf x, int dim, int64_t rows)
{
    float *v = test_alloc((size_t)rows * (size_t)dim * 4);
    for (int64_t r = 0; r < rows; r++) v[r * dim] = (r % 2 ? 5.0f : 3.5f) * sqrtf((float)dim) * (float)(1 << (r % 5));
    oclt_write(f, x, 0, v, (size_t)rows * (size_t)dim * 4);
}

TEST(opencl_ops, sim_every_kind_matches_bits)
{
    oclt *f = oclt_open(NULL);
    const ds4_hparams *hp = f->hp;
    const struct {
        ds4_sim kind;
        int dim;
        int64_t rows;
    } cases[] = {
        { DS4_SIM_FP8_NOPE, hp->head_dim, 1 },        { DS4_SIM_FP8_NOPE, hp->head_dim, 29 },
        { DS4_SIM_HADAMARD, hp->indexer_head_dim, 1 }, { DS4_SIM_HADAMARD, hp->indexer_head_dim, 40 },
        { DS4_SIM_HADAMARD, hp->head_dim, 3 },        { DS4_SIM_HADAMARD_FP4, hp->indexer_head_dim, 1 },
        { DS4_SIM_HADAMARD_FP4, hp->indexer_head_dim, 40 }, { DS4_SIM_HADAMARD_FP4, 16, 5 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = (size_t)cases[i].rows * (size_t)cases[i].dim;
        oclt_buf x = wide_values(f, n);
        OCLT_BOTH(f, OPS->sim(CTX, BUF(x), cases[i].rows, cases[i].dim, cases[i].kind));
        OCLT_SAME(f, x, x.bytes);
        if (cases[i].kind == DS4_SIM_HADAMARD_FP4) {
            fp4_tie_rows(f, x, cases[i].dim, cases[i].rows);
            OCLT_BOTH(f, OPS->sim(CTX, BUF(x), cases[i].rows, cases[i].dim, cases[i].kind));
            OCLT_SAME(f, x, x.bytes);
            float *got = oclt_read(f, x, OCLT_CL);
            CHECK_MSG(fabsf(got[0]) == 4.0f || fabsf(got[0]) == 8.0f || fabsf(got[0]) == 16.0f ||
                          fabsf(got[0]) == 32.0f || fabsf(got[0]) == 64.0f,
                      "3.5 is a tie between 3 and 4 and goes to the even code 4 (got %g)", got[0]);
        }
    }
    oclt_buf x = oclt_floats(f, 96, -1, 1);
    OCLT_CL_FAILS(f, OPS->sim(CTX, BUF(x), 1, 96, DS4_SIM_HADAMARD), "not a power of two");
    OCLT_CL_FAILS(f, OPS->sim(CTX, BUF(x), 1, 96, DS4_SIM_FP8_NOPE), "fp8 simulation of 448 dims");
    oclt_close(f);
}

/* ---- cache stores -------------------------------------------------------------------------- */

TEST(opencl_ops, store_rows_both_cache_types_ring_and_linear)
{
    oclt *f = oclt_open(NULL);
    const int dim = f->hp->head_dim;
    const struct {
        int64_t n_rows, row0, ring;
    } cases[] = {
        { 1, 0, 20 }, { 1, 19, 20 }, { 7, 17, 20 }, { 20, 45, 20 }, /* wraps; a whole ring */
        { 1, 0, 0 },  { 9, 11, 0 },                                  /* linear slots */
    };
    for (int ct = 0; ct < 2; ct++) {
        size_t es = ct == DS4_CACHE_F16 ? 2 : 4;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            size_t slots = cases[i].ring ? (size_t)cases[i].ring : (size_t)(cases[i].row0 + cases[i].n_rows);
            /* untouched slots keep their (random) bytes */
            oclt_buf dst = oclt_floats(f, slots * (size_t)dim * es / 4, -9, 9);
            oclt_buf src = oclt_floats(f, (size_t)cases[i].n_rows * (size_t)dim, -70000, 70000);
            OCLT_BOTH(f, OPS->store_rows(CTX, BUF(src), cases[i].n_rows, dim, BUF(dst), (ds4_cache_type)ct,
                                         cases[i].row0, cases[i].ring));
            OCLT_SAME(f, dst, dst.bytes);
        }
        oclt_buf small = oclt_zeros(f, 3 * (size_t)dim * es), src = oclt_floats(f, (size_t)dim * 2, -1, 1);
        OCLT_CL_FAILS(f, OPS->store_rows(CTX, BUF(src), 2, dim, BUF(small), (ds4_cache_type)ct, 2, 0), "outside");
    }
    oclt_close(f);
}
