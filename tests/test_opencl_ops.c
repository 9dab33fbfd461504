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

TEST(opencl_ops, rmsnorm_weighted_unweighted_in_place)
{
    oclt *f = oclt_open(NULL);
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
