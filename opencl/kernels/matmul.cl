/* matmul.cl — products with weight matrices: the dense matmul (any
 * format, decode and prefill, grouped rows) and the mixture of experts
 * (fused decode kernels, expert-sorted prefill tiles, slot-order sum).
 *
 * Numerics. Every kernel dequantizes with the f32 operations of
 * engine/quant.c, 16 elements at a time. The CPU-shaped kernels all sum a
 * (row, token) product the same way (see "the products" below), so it has
 * the same bits whichever kernel or tile computed it: decode and prefill
 * agree, and so do the fused and the sorted MoE paths. The GPU-shaped
 * kernels stride lanes over the chunks and reduce in local memory (another
 * summation order of the same f32 products).
 *
 * Shapes. CPU devices (PoCL): decode runs a work-item per four rows a
 * quarter of the matrix apart (see rows_dot); prefill runs a work-item per
 * tile of MM_RB rows × MM_TB tokens, whose dequantized weights and x
 * values are reused from registers; for the expert formats a work-item
 * dequantizes its rows once into private memory and runs every token
 * block over them, a stretch of the rows at a time (deq_first,
 * deq_tiles). GPUs run the decode products as a
 * work-group per row with a local reduction, and the prefill tiles as
 * above. The host (cl_matmul.c) mirrors the constants. bench/README.md
 * records what was measured on the way.
 *
 * Parts. Built whole, or in parts (cl_runtime.h): "matmul:mm_<type>" the
 * dense products of one weight type, "matmul:moe_<type>" the experts' of
 * one type, "matmul:aux" the rest; the backend builds the parts of the
 * types its model holds.
 */

/* The helpers must melt into each kernel (the type, the tile shape and the
 * accumulator arrays become constants and registers); PoCL's compiler
 * would otherwise call them. */
#if defined(__clang__)
#define INL inline __attribute__((always_inline))
#else
#define INL inline
#endif

#define MM_RB 4     /* rows per work-item, prefill tiles */
#define MM_TB 6     /* tokens per work-item, prefill tiles */
#define MOE_GU_RB 2 /* expert tiles: gate rows and as many up rows per work-item */
#define MOE_DN_RB 4 /* expert tiles: down rows per work-item */
#define MOE_TB 6    /* expert tiles: (token, slot) pairs per work-item */
#define MAX_RB 6
#define MAX_TB 6
#define DEQ_MAX 4096 /* longest rows dequantized once per tile (CPU devices) */
#define DEQ_BUF 1000 /* tile_dot's "type" for rows already dequantized */
#define DT_BLOCKS 4  /* token blocks per deq_tiles call */
#define DT_KB 32      /* chunks of 32 weights per deq_tiles walk */
/* tokens of a tile's outputs (GPUs never take several blocks at once, and
 * keep their private arrays small) */
#if CLRT_CPU
#define OUT_TB (DT_BLOCKS * MAX_TB)
#else
#define OUT_TB MAX_TB
#endif
#define TILE_Q8_MAX 16384

/* ---- IQ2_XXS tables: the engine's quant_iq2xxs_grid and quant_ksigns_iq2xs
 * in the forms the kernels use (a test compares them) --------------------- */

/* The IQ2_XXS tables, as kernel arguments every product kernel takes
 * first (uploaded by the host from the engine's tables, cl_matmul.c):
 * iq2g, the grid as floats (row i: its 8 magnitudes), and iq2s, the
 * signs as float sign bits (entry s, lane j: 0x80000000 where bit j of
 * ksigns[s] is set). Not program-scope __constant data: a driver may
 * reach that through a hidden argument read where the data is used, and
 * Mesa's llvmpipe read it inside the kernels' loops "as uniform, results
 * may be incorrect"; an argument is read at the kernel's entry. (A struct
 * of the two crashes rusticl's compiler.) */
#define IQ2_TABS __constant float *iq2g, __constant uint *iq2s

/* IEEE halves (bits h) as floats, exactly: the magnitude shifted into
 * place and rescaled by 2^112 covers normal and subnormal values; Inf and
 * NaN are rebuilt. Fewer operations than PoCL's vload_half, and four at
 * once for the four rows of a decode work-item. */
INL float4 half4_bits(uint4 h)
{
    uint4 m = (h & 0x7fffu) << 13;
    uint4 f = as_uint4(as_float4(m) * 0x1p112f);
    uint4 b = select(f, m | 0x7f800000u, (h & 0x7c00u) == 0x7c00u);
    return as_float4(b | (h & 0x8000u) << 16);
}

INL float ld_half(const __global uchar *p) { return half4_bits((uint4)(*(const __global ushort *)p)).x; }

/* ---- dequantization -----------------------------------------------------------
 * Half h (0 or 1) of chunk c of a row: elements 32c + 16h … 32c + 16h + 15,
 * each computed with the f32 operations of engine/quant.c.
 *
 * The scales come from the caller, which reads them once: `d` is the Q8_0
 * block scale of chunk c (q8_scales: four rows at once); `sc` the
 * super-block's table (sb_scales: Q2_K d·(s & 15) then dmin·(s >> 4) for
 * its 16 sub-blocks, Q4_K d·scale then dmin·min for its 8, IQ2_XXS d). */

INL float16 deq16_f32(const __global uchar *row, int c, int h)
{
    return vload16(2 * c + h, (const __global float *)row);
}

INL float16 deq16_f16(const __global uchar *row, int c, int h)
{
    return vload_half16(2 * c + h, (const __global half *)row);
}

INL float16 deq16_bf16(const __global uchar *row, int c, int h)
{
    return as_float16(convert_uint16(vload16(2 * c + h, (const __global ushort *)row)) << 16);
}

/* d·q */
INL float16 deq16_q8_0(const __global uchar *row, int c, int h, float d)
{
    return convert_float16(vload16(h, (const __global char *)(row + Q8_0_BYTES * c + 2))) * d;
}

/* Q2_K (84 bytes: scales[16], qs[64], d, dmin): element e of the block is
 * bits 2s of qs[32k + l] (k = e/128, s = e%128/32, l = e%32), times
 * d·(sc & 15) minus dmin·(sc >> 4), sc = scales[e/16]. */
INL float16 deq16_q2_k(const __global uchar *row, int c, int h, const float *sc)
{
    const __global uchar *blk = row + 84 * (c >> 3);
    int j = c & 7;
    float16 q = convert_float16((vload16(h, blk + 16 + 32 * (j >> 2)) >> (uchar)(2 * (j & 3))) & (uchar)3);
    return sc[2 * j + h] * q - sc[16 + 2 * j + h];
}

/* Q4_K (144 bytes: d, dmin, scales[12], qs[128]): sub-block j's nibbles
 * are the low (j even) or high (j odd) halves of qs[32(j/2) …]. */
INL float16 deq16_q4_k(const __global uchar *row, int c, int h, const float *sc)
{
    int j = c & 7;
    uchar16 q = vload16(h, row + 144 * (c >> 3) + 16 + 32 * (j >> 1));
    q = j & 1 ? q >> (uchar)4 : q & (uchar)15;
    return sc[j] * convert_float16(q) - sc[8 + j];
}

/* IQ2_XXS (66 bytes: d, then 8 groups of 8 bytes): group g holds four grid
 * indices and a 32-bit word of four 7-bit sign indices and a 4-bit scale;
 * an element is db·grid, negated where its sign bit is set. */
INL float16 iq2_half(IQ2_TABS, const __global uchar *q, uint w, float db, int h)
{
    uint s0 = (w >> (14 * h)) & 127, s1 = (w >> (14 * h + 7)) & 127;
    float16 g = (float16)(vload8(q[2 * h], iq2g), vload8(q[2 * h + 1], iq2g));
    uint16 sb = (uint16)(vload8(s0, iq2s), vload8(s1, iq2s));
    return as_float16(as_uint16(db * g) ^ sb);
}

INL uint iq2_word(const __global uchar *q)
{
    ushort2 v = vload2(0, (const __global ushort *)(q + 4));
    return (uint)v.x | (uint)v.y << 16;
}

INL float iq2_scale(uint w, float d) { return d * (0.5f + (float)(w >> 28)) * 0.25f; }

INL float16 deq16_iq2_xxs(IQ2_TABS, const __global uchar *row, int c, int h, const float *sc)
{
    const __global uchar *q = row + 66 * (c >> 3) + 2 + 8 * (c & 7);
    uint w = iq2_word(q);
    return iq2_half(iq2g, iq2s, q, w, iq2_scale(w, sc[0]), h);
}

/* The super-block scale table of block b (see above); 32 floats. */
INL void sb_scales(const int type, const __global uchar *row, int b, float *sc)
{
    if (type == GGML_Q2_K) {
        const __global uchar *blk = row + 84 * b;
        uchar16 s = vload16(0, blk);
        vstore16(ld_half(blk + 80) * convert_float16(s & (uchar)15), 0, sc);
        vstore16(ld_half(blk + 82) * convert_float16(s >> (uchar)4), 1, sc);
    } else if (type == GGML_Q4_K) {
        const __global uchar *blk = row + 144 * b;
        uchar4 s0 = vload4(1, blk), s1 = vload4(2, blk), s2 = vload4(3, blk);
        uchar8 scale = (uchar8)(s0 & (uchar)63, (s2 & (uchar)15) | ((s0 >> (uchar)6) << (uchar)4));
        uchar8 min = (uchar8)(s1 & (uchar)63, (s2 >> (uchar)4) | ((s1 >> (uchar)6) << (uchar)4));
        vstore8(ld_half(blk) * convert_float8(scale), 0, sc);
        vstore8(ld_half(blk + 2) * convert_float8(min), 1, sc);
    } else if (type == GGML_IQ2_XXS) {
        sc[0] = ld_half(row + 66 * b);
    }
}

/* Q8_0 block scales of chunk c in RB ≤ 8 rows (lane r: row r). */
#define Q8_H(r) (RB > r ? (uint) * (const __global ushort *)(w[r] + at) : 0u)
INL float8 q8_scales(const __global uchar *const *w, const int RB, int c)
{
    const ulong at = (ulong)Q8_0_BYTES * c;
    uint4 lo = (uint4)(Q8_H(0), Q8_H(1), Q8_H(2), Q8_H(3));
    if (RB <= 4) return (float8)(half4_bits(lo), (float4)0.0f);
    return (float8)(half4_bits(lo), half4_bits((uint4)(Q8_H(4), Q8_H(5), Q8_H(6), Q8_H(7))));
}

/* Of a row of `type` (a constant in every kernel below, so the switch
 * folds away); d and sc as above. */
INL float16 deq16(IQ2_TABS, const int type, const __global uchar *row, int c, int h, float d, const float *sc)
{
    switch (type) {
    case GGML_F32: return deq16_f32(row, c, h);
    case GGML_F16: return deq16_f16(row, c, h);
    case GGML_BF16: return deq16_bf16(row, c, h);
    case GGML_Q8_0: return deq16_q8_0(row, c, h, d);
    case GGML_Q2_K: return deq16_q2_k(row, c, h, sc);
    case GGML_Q4_K: return deq16_q4_k(row, c, h, sc);
    case GGML_IQ2_XXS: return deq16_iq2_xxs(iq2g, iq2s, row, c, h, sc);
    }
    return 0.0f;
}

/* Both halves of a chunk, sharing what they can. */
INL void deq32(IQ2_TABS, const int type, const __global uchar *row, int c, float d, const float *sc, float16 *a, float16 *b)
{
    if (type == GGML_IQ2_XXS) {
        const __global uchar *q = row + 66 * (c >> 3) + 2 + 8 * (c & 7);
        uint w = iq2_word(q);
        float db = iq2_scale(w, sc[0]);
        *a = iq2_half(iq2g, iq2s, q, w, db, 0);
        *b = iq2_half(iq2g, iq2s, q, w, db, 1);
        return;
    }
    *a = deq16(iq2g, iq2s, type, row, c, 0, d, sc);
    *b = deq16(iq2g, iq2s, type, row, c, 1, d, sc);
}

INL float hsum16(float16 v) { return hsum8(v.lo + v.hi); }

/* Elements past the last whole chunk (plain float types only: every block
 * format has whole chunks). */
INL float dot_tail(const int type, const __global uchar *row, const __global float *x, int n)
{
    float s = 0.0f;
    for (int i = n & ~31; i < n; i++) s += dense_elem(type, row, i) * x[i];
    return s;
}

/* ---- the products ----------------------------------------------------------------
 * Every CPU-shaped kernel computes w·x as hsum16(A) + hsum16(B) (+ the
 * tail), A and B being the lane-wise fma chains over the chunks in order,
 * A over their first halves, B over their second halves.
 *
 * rows_dot: RB ≤ 4 rows against one token, the A and B chains of every
 * row side by side (independent chains keep the FMA unit busy; x is read
 * once for all rows). Decode passes rows a quarter of the matrix apart:
 * each work-item then reads four long sequential streams, which PoCL's
 * CPUs stream far better than neighbouring rows, and x (16-48 KiB for
 * Flash) is read a quarter as often. */
#define ROW_SC(r) \
    if (RB > r) sb_scales(type, w[r], s >> 3, sc##r);
#define ROW_D(r) (r == 0 ? d8.s0 : r == 1 ? d8.s1 : r == 2 ? d8.s2 : r == 3 ? d8.s3 : r == 4 ? d8.s4 : d8.s5)
#define RD_ROW(r)                                        \
    if (RB > r) {                                        \
        float16 wa, wb;                                  \
        deq32(iq2g, iq2s, type, w[r], c, ROW_D(r), sc##r, &wa, &wb); \
        a##r = fma(wa, xa, a##r);                        \
        b##r = fma(wb, xb, b##r);                        \
    }
#define RD_OUT(r)                                                         \
    if (RB > r) {                                                         \
        out[r] = hsum16(a##r) + hsum16(b##r);                             \
        if (n & 31) out[r] += dot_tail(type, w[r], x, n);                 \
    }

INL void rows_dot(IQ2_TABS, const int type, const int RB, const __global uchar *const *w, const __global float *x, int n,
                  float *out)
{
    float16 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, b0 = 0.0f, b1 = 0.0f, b2 = 0.0f, b3 = 0.0f;
    float sc0[32], sc1[32], sc2[32], sc3[32];
    const int nc = n >> 5;
    for (int s = 0; s < nc; s += 8) {
        ROW_SC(0) ROW_SC(1) ROW_SC(2) ROW_SC(3)
        for (int c = s; c < min(s + 8, nc); c++) {
            float16 xa = vload16(0, x + 32 * c), xb = vload16(1, x + 32 * c);
            float8 d8 = type == GGML_Q8_0 ? q8_scales(w, RB, c) : 0.0f;
            RD_ROW(0) RD_ROW(1) RD_ROW(2) RD_ROW(3)
        }
    }
    RD_OUT(0) RD_OUT(1) RD_OUT(2) RD_OUT(3)
}

/* tile_dot: RB ≤ 6 rows × TB ≤ 6 tokens, the same numbers as rows_dot: a
 * pass for the A chains, then one for the B chains, each holding RB·TB
 * accumulators in registers while every dequantized half is reused TB
 * times and every x half RB times (prefill is compute-bound). Written out
 * by hand: PoCL leaves loops over accumulators rolled, in memory. */
#define TILE_FMA(r, t)                                             \
    if (TB > t) acc##r##t = fma(wv, xv##t, acc##r##t);
#define TILE_ROW(r)                                                \
    if (RB > r) {                                                  \
        float16 wv = type == DEQ_BUF ? vload16(2 * c + HALF, wbuf + r * n) \
                                     : deq16(iq2g, iq2s, type, w[r], c, HALF, ROW_D(r), sc##r); \
        TILE_FMA(r, 0) TILE_FMA(r, 1) TILE_FMA(r, 2) TILE_FMA(r, 3) TILE_FMA(r, 4) TILE_FMA(r, 5) \
    }
#define TILE_X(t)                                                  \
    if (TB > t) xv##t = vload16(2 * c + HALF, x[t]);
#define TILE_SUM(r, t)                                             \
    if (RB > r && TB > t) {                                        \
        out[r][t] = HALF ? out[r][t] + hsum16(acc##r##t) : hsum16(acc##r##t); \
        acc##r##t = 0.0f;                                          \
    }
#define TILE_PASS                                                                              \
    for (int s = 0; s < nc; s += 8) {                                                          \
        ROW_SC(0) ROW_SC(1) ROW_SC(2) ROW_SC(3) ROW_SC(4) ROW_SC(5)                            \
        for (int c = s; c < min(s + 8, nc); c++) {                                             \
            float16 xv0, xv1, xv2, xv3, xv4, xv5;                                              \
            float8 d8 = TILE_D8;                                                               \
            TILE_X(0) TILE_X(1) TILE_X(2) TILE_X(3) TILE_X(4) TILE_X(5)                        \
            TILE_ROW(0) TILE_ROW(1) TILE_ROW(2) TILE_ROW(3) TILE_ROW(4) TILE_ROW(5)            \
        }                                                                                      \
    }                                                                                          \
    TILE_SUM(0, 0) TILE_SUM(0, 1) TILE_SUM(0, 2) TILE_SUM(0, 3) TILE_SUM(0, 4) TILE_SUM(0, 5) \
    TILE_SUM(1, 0) TILE_SUM(1, 1) TILE_SUM(1, 2) TILE_SUM(1, 3) TILE_SUM(1, 4) TILE_SUM(1, 5) \
    TILE_SUM(2, 0) TILE_SUM(2, 1) TILE_SUM(2, 2) TILE_SUM(2, 3) TILE_SUM(2, 4) TILE_SUM(2, 5) \
    TILE_SUM(3, 0) TILE_SUM(3, 1) TILE_SUM(3, 2) TILE_SUM(3, 3) TILE_SUM(3, 4) TILE_SUM(3, 5) \
    TILE_SUM(4, 0) TILE_SUM(4, 1) TILE_SUM(4, 2) TILE_SUM(4, 3) TILE_SUM(4, 4) TILE_SUM(4, 5) \
    TILE_SUM(5, 0) TILE_SUM(5, 1) TILE_SUM(5, 2) TILE_SUM(5, 3) TILE_SUM(5, 4) TILE_SUM(5, 5)

INL void tile_dot(IQ2_TABS, const int type, const int RB, const int TB, const __global uchar *const *w,
                  const __global float *const *x, int n, float out[MAX_RB][OUT_TB], const float *wbuf)
{
    float16 acc00 = 0.0f, acc01 = 0.0f, acc02 = 0.0f, acc03 = 0.0f, acc04 = 0.0f, acc05 = 0.0f;
    float16 acc10 = 0.0f, acc11 = 0.0f, acc12 = 0.0f, acc13 = 0.0f, acc14 = 0.0f, acc15 = 0.0f;
    float16 acc20 = 0.0f, acc21 = 0.0f, acc22 = 0.0f, acc23 = 0.0f, acc24 = 0.0f, acc25 = 0.0f;
    float16 acc30 = 0.0f, acc31 = 0.0f, acc32 = 0.0f, acc33 = 0.0f, acc34 = 0.0f, acc35 = 0.0f;
    float16 acc40 = 0.0f, acc41 = 0.0f, acc42 = 0.0f, acc43 = 0.0f, acc44 = 0.0f, acc45 = 0.0f;
    float16 acc50 = 0.0f, acc51 = 0.0f, acc52 = 0.0f, acc53 = 0.0f, acc54 = 0.0f, acc55 = 0.0f;
    float sc0[32], sc1[32], sc2[32], sc3[32], sc4[32], sc5[32];
    const int nc = n >> 5;
#if CLRT_CPU
    /* the Q8_0 scales of the first pass, for the second (CPU private
     * memory is plain memory; rows of up to TILE_Q8_MAX elements) */
    float8 d8s[TILE_Q8_MAX / 32];
    const bool keep = type == GGML_Q8_0 && nc <= TILE_Q8_MAX / 32;
#define TILE_D8 (type != GGML_Q8_0 ? 0.0f : HALF && keep ? d8s[c] : (d8s[c & (TILE_Q8_MAX / 32 - 1)] = q8_scales(w, RB, c)))
#else
#define TILE_D8 (type == GGML_Q8_0 ? q8_scales(w, RB, c) : 0.0f)
#endif
#define HALF 0
    TILE_PASS
#undef HALF
#define HALF 1
    TILE_PASS
#undef HALF
#undef TILE_D8
    for (int r = 0; r < RB; r++)
        for (int t = 0; t < TB; t++)
            if (type != DEQ_BUF && (n & 31)) out[r][t] += dot_tail(type, w[r], x[t], n);
}

/* Expert formats cost far more to dequantize than to multiply: on CPU
 * devices a prefill tile dequantizes its rows once into private memory
 * (the same values deq32 gives every other kernel) and runs all of its
 * tokens over them (deq_tiles), the products summed as in tile_dot. */
#if CLRT_CPU
#define DEQ_DECL(type, RB, w, n)                      \
    float deq_buf[4 * DEQ_MAX];                       \
    const bool deq_pre = RB <= 4 && deq_first(type, n); \
    if (deq_pre) deq_rows(iq2g, iq2s, type, RB, w, n, deq_buf);
#else
#define DEQ_DECL(type, RB, w, n) \
    const bool deq_pre = false;  \
    float *deq_buf = 0;
#endif
/* nb token blocks (x[b·TB + t]) over the dequantized rows, or one over
 * the weights themselves */
#define DEQ_TILES(type, RB, TB, nb, w, xt, n, out)           \
    if (deq_pre) deq_tiles(RB, TB, nb, xt, n, deq_buf, out); \
    else tile_dot(iq2g, iq2s, type, RB, TB, w, xt, n, out, deq_buf);
/* token blocks a deq_tiles call takes (one otherwise) */
#define DEQ_STEP(TB) (deq_pre ? DT_BLOCKS * (TB) : (TB))

/* deq_tiles: RB ≤ 4 dequantized rows × nb ≤ DT_BLOCKS blocks of TB
 * tokens. tile_dot over the 64 KiB of rows would stream them from L2 once
 * per block, beside the block's x: together more than L2 feeds the FMA
 * units. Here each pass walks the rows DT_KB chunks at a time, running
 * every block over those chunks while they sit in L1; a block's
 * accumulators wait in private memory (L1) between the walks. Every
 * lane's fma chain still runs over the chunks in order from zero, so the
 * sums have tile_dot's bits. */
#define DT_ACC(r, t) \
    if (RB > r && TB > t) acc##r##t = k0 ? keep[b][r * MAX_TB + t] : 0.0f;
#define DT_KEEP(r, t) \
    if (RB > r && TB > t) keep[b][r * MAX_TB + t] = acc##r##t;
#define DT_X(t) \
    if (TB > t) xv##t = vload16(2 * c + HALF, x[b * TB + t]);
#define DT_ROW(r)                                                                           \
    if (RB > r) {                                                                           \
        float16 wv = vload16(2 * c + HALF, wbuf + r * n);                                   \
        TILE_FMA(r, 0) TILE_FMA(r, 1) TILE_FMA(r, 2) TILE_FMA(r, 3) TILE_FMA(r, 4) TILE_FMA(r, 5) \
    }
#define DT_OUT(r, t)                                                                    \
    if (RB > r && TB > t) {                                                             \
        float h = hsum16(keep[b][r * MAX_TB + t]);                                      \
        out[r][b * TB + t] = HALF ? out[r][b * TB + t] + h : h;                         \
    }
#define DT_ALL(M, r) M(r, 0) M(r, 1) M(r, 2) M(r, 3) M(r, 4) M(r, 5)
#define DT_EACH(M) DT_ALL(M, 0) DT_ALL(M, 1) DT_ALL(M, 2) DT_ALL(M, 3)
#define DT_PASS                                                                  \
    for (int k0 = 0; k0 < nc; k0 += DT_KB) {                                     \
        const int k1 = min(k0 + DT_KB, nc);                                      \
        for (int b = 0; b < nb; b++) {                                           \
            DT_EACH(DT_ACC)                                                      \
            for (int c = k0; c < k1; c++) {                                      \
                float16 xv0, xv1, xv2, xv3, xv4, xv5;                            \
                DT_X(0) DT_X(1) DT_X(2) DT_X(3) DT_X(4) DT_X(5)                  \
                DT_ROW(0) DT_ROW(1) DT_ROW(2) DT_ROW(3)                          \
            }                                                                    \
            DT_EACH(DT_KEEP)                                                     \
        }                                                                        \
    }                                                                            \
    for (int b = 0; b < nb; b++) {                                               \
        DT_EACH(DT_OUT)                                                          \
    }

INL void deq_tiles(const int RB, const int TB, int nb, const __global float *const *x, int n, const float *wbuf,
                   float out[MAX_RB][OUT_TB])
{
    float16 acc00, acc01, acc02, acc03, acc04, acc05, acc10, acc11, acc12, acc13, acc14, acc15;
    float16 acc20, acc21, acc22, acc23, acc24, acc25, acc30, acc31, acc32, acc33, acc34, acc35;
    float16 keep[DT_BLOCKS][4 * MAX_TB];
    const int nc = n >> 5;
#define HALF 0
    DT_PASS
#undef HALF
#define HALF 1
    DT_PASS
#undef HALF
}

INL bool deq_first(const int type, int n)
{
    return CLRT_CPU && (type == GGML_IQ2_XXS || type == GGML_Q2_K || type == GGML_Q4_K) && n <= DEQ_MAX;
}

INL void deq_rows(IQ2_TABS, const int type, const int RB, const __global uchar *const *w, int n, float *buf)
{
    const int nc = n >> 5;
    for (int r = 0; r < RB; r++) {
        float sc[32];
        for (int c = 0; c < nc; c++) {
            if ((c & 7) == 0) sb_scales(type, w[r], c >> 3, sc);
            float16 a, b;
            deq32(iq2g, iq2s, type, w[r], c, 0.0f, sc, &a, &b);
            vstore16(a, 2 * c, buf + r * n);
            vstore16(b, 2 * c + 1, buf + r * n);
        }
    }
}

/* GPU shape: this lane's share (chunks lane, lane + L, …) of w·x. */
INL float lane_dot(IQ2_TABS, const int type, const __global uchar *w, const __global float *x, int n, int lane, int L)
{
    float16 acc = 0.0f;
    const int nc = n >> 5;
    for (int c = lane; c < nc; c += L) {
        float sc[32];
        sb_scales(type, w, c >> 3, sc);
        float d = type == GGML_Q8_0 ? ld_half(w + Q8_0_BYTES * c) : 0.0f;
        acc = fma(deq16(iq2g, iq2s, type, w, c, 0, d, sc), vload16(0, x + 32 * c), acc);
        acc = fma(deq16(iq2g, iq2s, type, w, c, 1, d, sc), vload16(1, x + 32 * c), acc);
    }
    float s = hsum16(acc);
    if (lane == 0 && (n & 31)) s += dot_tail(type, w, x, n);
    return s;
}

/* The sum of v over the work-group, in every lane. */
INL float group_sum(float v, __local float *part)
{
    int lid = get_local_id(0), L = get_local_size(0);
    part[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lid < h) part[lid] += part[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float s = part[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return s;
}

/* ---- dense matmul ------------------------------------------------------------
 * W holds rows [p_lo, p_hi) of the matrix (one device piece; W points at
 * row p_lo); rows split into groups of rpg, group g reading x[t][g·n …).
 * x token stride xs, y token stride ys.
 *
 * mm_rows (decode): work-item (row of the group, 1, group g_lo + k), one
 * token after another. mm_tile (prefill): work-item (row block, token
 * block, group); rows outside the group or the piece are computed on a
 * clamped copy and not stored. */
#define MM_ARGS                                                                                                    \
    const __global uchar *W, ulong W_off, ulong row_bytes, int n, int p_lo, int p_hi, int rpg, int g_lo, int n_g, \
        const __global float *x, ulong x_off, ulong xs, __global float *y, ulong y_off, ulong ys, int T

/* CPU devices run work-groups one after another in the order of their
 * linear id, row blocks fastest. Walked that way every token block streams
 * the whole matrix again, from memory once the matrix outgrows the last
 * level cache (attn_q_b, attn_output_b: 36 MB). So the ids are renumbered
 * into panels of work-groups whose rows fit in a core's L2 with room for
 * the x tile, each panel running all of its token blocks before the next:
 * the weights come from memory once and from L2 after that. Which
 * work-item computes a tile changes nothing in its arithmetic. */
#define TILE_PANEL_BYTES (384 * 1024)
INL void tile_ids(const int RB, ulong row_bytes, int gid0, int gid1, int *rb, int *tb)
{
    const int NGX = get_num_groups(0), NGY = get_num_groups(1), LX = get_local_size(0);
    if (!CLRT_CPU || NGY == 1) {
        *rb = gid0;
        *tb = gid1;
        return;
    }
    const int pg = clamp((int)(TILE_PANEL_BYTES / ((ulong)LX * RB * row_bytes)), 1, NGX);
    const int L = get_group_id(0) + get_group_id(1) * NGX;
    const int base = L / (pg * NGY) * pg, w = min(pg, NGX - base), within = L - base * NGY;
    *rb = (base + within % w) * LX + get_local_id(0);
    *tb = within / w;
}

INL void mm_tile(IQ2_TABS, const int type, const int RB, const int TB, const __global uchar *W, ulong row_bytes, int n,
                    int p_lo, int p_hi, int rpg, int g_lo, int n_g, const __global float *x, ulong xs,
                    __global float *y, ulong ys, int T)
{
    /* the global ids before any branch: a driver may compute them from a
     * hidden argument (the global offset), read where they are first
     * asked for (see IQ2_TABS) */
    const int gid0 = get_global_id(0), gid1 = get_global_id(1), gid2 = get_global_id(2);
    if (gid2 >= n_g) return;
    int g = g_lo + gid2;
    int lo = max(g * rpg, p_lo), hi = min(g * rpg + rpg, p_hi);
    int rbi, tbi;
    tile_ids(RB, row_bytes, gid0, gid1, &rbi, &tbi);
    int r0 = g * rpg + rbi * RB;
    if (r0 >= hi || r0 + RB <= lo || tbi * TB >= T) return;
    const __global uchar *w[MAX_RB];
    const __global float *xt[OUT_TB];
    for (int r = 0; r < RB; r++) w[r] = W + (ulong)(clamp(r0 + r, lo, hi - 1) - p_lo) * row_bytes;
    DEQ_DECL(type, RB, w, n)
    /* DEQ_STEP tokens at t0, t0 + the grid's width, …: the host gives the
     * expert formats one column of such steps on CPU devices */
    for (int t0 = tbi * DEQ_STEP(TB); t0 < T; t0 += (int)get_global_size(1) * DEQ_STEP(TB)) {
        const int nb = min(DEQ_STEP(TB), T - t0 + TB - 1) / TB;
        for (int t = 0; t < nb * TB; t++) xt[t] = x + (ulong)min(t0 + t, T - 1) * xs + (ulong)g * n;
        float out[MAX_RB][OUT_TB];
        DEQ_TILES(type, RB, TB, nb, w, xt, n, out)
        for (int r = 0; r < RB; r++) {
            int rr = r0 + r;
            if (rr < lo || rr >= hi) continue;
            for (int t = 0; t < nb * TB && t0 + t < T; t++) y[(ulong)(t0 + t) * ys + rr] = out[r][t];
        }
    }
}

INL void mm_rows(IQ2_TABS, const int type, const __global uchar *W, ulong row_bytes, int n, int p_lo, int p_hi, int rpg,
                 int g_lo, int n_g, const __global float *x, ulong xs, __global float *y, ulong ys, int T)
{
    const int S = (rpg + 3) / 4, i = get_global_id(0), g = g_lo + (int)get_global_id(2);
    if ((int)get_global_id(2) >= n_g || i >= S) return;
    const int lo = max(g * rpg, p_lo), hi = min(g * rpg + rpg, p_hi);
    int r[4];
    bool any = false;
    const __global uchar *w[4];
    for (int k = 0; k < 4; k++) {
        r[k] = i + k * S < rpg ? g * rpg + i + k * S : -1;
        if (r[k] < lo || r[k] >= hi) r[k] = -1;
        any |= r[k] >= 0;
        w[k] = W + (ulong)(clamp(r[k], lo, hi - 1) - p_lo) * row_bytes;
    }
    if (!any) return;
    for (int t = 0; t < T; t++) {
        float o[4];
        rows_dot(iq2g, iq2s, type, 4, w, x + (ulong)t * xs + (ulong)g * n, n, o);
        for (int k = 0; k < 4; k++)
            if (r[k] >= 0) y[(ulong)t * ys + r[k]] = o[k];
    }
}

/* GPU decode: a work-group per row (p_lo + group id), every token. */
INL void mv_wg(IQ2_TABS, const int type, const __global uchar *W, ulong row_bytes, int n, int p_lo, int p_hi, int rpg,
                  const __global float *x, ulong xs, __global float *y, ulong ys, int T, __local float *part)
{
    int r = p_lo + (int)get_group_id(0);
    if (r >= p_hi) return;
    int g = r / rpg, lane = get_local_id(0), L = get_local_size(0);
    const __global uchar *w = W + (ulong)(r - p_lo) * row_bytes;
    for (int t = 0; t < T; t++) {
        float s = group_sum(lane_dot(iq2g, iq2s, type, w, x + (ulong)t * xs + (ulong)g * n, n, lane, L), part);
        if (lane == 0) y[(ulong)t * ys + r] = s;
    }
}

#define MV_ARGS                                                                                       \
    const __global uchar *W, ulong W_off, ulong row_bytes, int n, int p_lo, int p_hi, int rpg,        \
        const __global float *x, ulong x_off, ulong xs, __global float *y, ulong y_off, ulong ys, int T, \
        __local float *part

#define MM_KERNELS(SFX, TYPE)                                                                                        \
    __kernel void mm_dec_##SFX(IQ2_TABS, MM_ARGS)                                                                    \
    {                                                                                                                \
        mm_rows(iq2g, iq2s, TYPE, W + W_off, row_bytes, n, p_lo, p_hi, rpg, g_lo, n_g, x + x_off, xs, y + y_off,     \
                ys, T);                                                                                              \
    }                                                                                                                \
    __kernel void mm_tile_##SFX(IQ2_TABS, MM_ARGS)                                                                   \
    {                                                                                                                \
        mm_tile(iq2g, iq2s, TYPE, MM_RB, MM_TB, W + W_off, row_bytes, n, p_lo, p_hi, rpg, g_lo, n_g, x + x_off,      \
                xs, y + y_off, ys, T);                                                                               \
    }                                                                                                                \
    __kernel void mv_wg_##SFX(IQ2_TABS, MV_ARGS)                                                                     \
    {                                                                                                                \
        mv_wg(iq2g, iq2s, TYPE, W + W_off, row_bytes, n, p_lo, p_hi, rpg, x + x_off, xs, y + y_off, ys, T, part);    \
    }

#if !defined(CLRT_PART) || defined(CLRT_PART_mm_f32)
MM_KERNELS(f32, GGML_F32)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_f16)
MM_KERNELS(f16, GGML_F16)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_bf16)
MM_KERNELS(bf16, GGML_BF16)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_q8_0)
MM_KERNELS(q8_0, GGML_Q8_0)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_q2_k)
MM_KERNELS(q2_k, GGML_Q2_K)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_q4_k)
MM_KERNELS(q4_k, GGML_Q4_K)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_mm_iq2_xxs)
MM_KERNELS(iq2_xxs, GGML_IQ2_XXS)
#endif

/* ---- mixture of experts ----------------------------------------------------------
 * Pairs p = t·k + i (token t, slot i); sel[p] the expert, wt[p] its weight.
 * gate/up [D, F, E], down [F, D, E]; expert e at e·rows·row_bytes. A
 * kernel gets the experts [e_lo, e_hi) of one device piece (the pointers
 * at expert e_lo); ids outside it are another launch's (or, outside
 * [0, E), nobody's: such a slot adds nothing). */

INL float swiglu_w(float g, float u, float clamp, float w)
{
    if (clamp > 1e-6f) {
        g = g > clamp ? clamp : g;
        u = u > clamp ? clamp : u < -clamp ? -clamp : u;
    }
    return g * sigmoid_stable(g) * u * w;
}

#define MOE_GU_ARGS                                                                                          \
    const __global uchar *G, ulong G_off, const __global uchar *U, ulong U_off, ulong row_bytes, int D, int F, \
        int e_lo, int e_hi, const __global float *x, ulong x_off, const __global int *sel, ulong sel_off,    \
        const __global float *wt, ulong wt_off, int k, float clamp, __global float *mid

#define MOE_DOWN_ARGS                                                                                           \
    const __global uchar *Wd, ulong Wd_off, ulong row_bytes, int F, int D, int e_lo, int e_hi,                  \
        const __global float *mid, const __global int *sel, ulong sel_off, int k, __global float *y, ulong y_off

/* Decode: work-item (i, pair p): rows i and i + S (S = ⌈F/2⌉) of gate
 * and up, so four streams; mid[p][r] (zero for an id outside [e_lo,
 * e_hi)). */
INL void moe_gu_dec(IQ2_TABS, const int type, MOE_GU_ARGS, int P)
{
    const int S = (F + 1) / 2, i = get_global_id(0), p = get_global_id(1);
    if (i >= S || p >= P) return;
    const int r1 = i + S < F ? i + S : -1;
    int e = sel[sel_off + p];
    __global float *m = mid + (ulong)p * F;
    if (e < e_lo || e >= e_hi) {
        m[i] = 0.0f;
        if (r1 >= 0) m[r1] = 0.0f;
        return;
    }
    ulong e0 = (ulong)(e - e_lo) * F;
    const __global uchar *w[4] = { G + G_off + (e0 + i) * row_bytes, G + G_off + (e0 + max(r1, i)) * row_bytes,
                                   U + U_off + (e0 + i) * row_bytes, U + U_off + (e0 + max(r1, i)) * row_bytes };
    float o[4], wv = wt[wt_off + p];
    rows_dot(iq2g, iq2s, type, 4, w, x + x_off + (ulong)(p / k) * D, D, o);
    m[i] = swiglu_w(o[0], o[2], clamp, wv);
    if (r1 >= 0) m[r1] = swiglu_w(o[1], o[3], clamp, wv);
}

/* Decode: work-item (i, token t), rows i + j·S (S = ⌈D/4⌉): y[t][r] = Σ
 * over the slots in order of down_e[r]·mid[t·k + slot]. */
INL void moe_down_dec(IQ2_TABS, const int type, MOE_DOWN_ARGS, int T)
{
    const int S = (D + 3) / 4, i = get_global_id(0), t = get_global_id(1);
    if (i >= S || t >= T) return;
    float sum[4];
    for (int slot = 0; slot < k; slot++) {
        int p = t * k + slot, e = sel[sel_off + p];
        /* No branch on the expert around the product: a slot outside this
         * launch's range gets rows clamped into it and a length of zero
         * (o stays 0). Mesa's llvmpipe compiled the product inside such a
         * branch with a hidden argument read there as if every work-item
         * agreed ("results may be incorrect"), for the formats whose
         * super-block scales sit in private arrays (Q2_K, Q4_K). */
        const int ec = clamp(e, e_lo, e_hi - 1);
        const __global uchar *w[4];
        for (int j = 0; j < 4; j++)
            w[j] = Wd + Wd_off + ((ulong)(ec - e_lo) * D + (ulong)min(i + j * S, D - 1)) * row_bytes;
        const __global float *xm = mid + (ulong)p * F;
        const int n = F;
        float o[4];
        rows_dot(iq2g, iq2s, type, 4, w, xm, e >= e_lo && e < e_hi ? n : 0, o);
        for (int j = 0; j < 4; j++) sum[j] = slot == 0 ? o[j] : sum[j] + o[j];
    }
    for (int j = 0; j < 4; j++)
        if (i + j * S < D) y[y_off + (ulong)t * D + i + j * S] = sum[j];
}

/* GPU decode: a work-group per (row, pair). */
INL void moe_gu_wg(IQ2_TABS, const int type, MOE_GU_ARGS, __local float *part)
{
    int r = get_group_id(0), p = get_group_id(1), lane = get_local_id(0), L = get_local_size(0);
    int e = sel[sel_off + p];
    if (e < e_lo || e >= e_hi) {
        if (lane == 0) mid[(ulong)p * F + r] = 0.0f;
        return;
    }
    ulong at = ((ulong)(e - e_lo) * F + r) * row_bytes;
    const __global float *xt = x + x_off + (ulong)(p / k) * D;
    float g = group_sum(lane_dot(iq2g, iq2s, type, G + G_off + at, xt, D, lane, L), part);
    float u = group_sum(lane_dot(iq2g, iq2s, type, U + U_off + at, xt, D, lane, L), part);
    if (lane == 0) mid[(ulong)p * F + r] = swiglu_w(g, u, clamp, wt[wt_off + p]);
}

/* GPU decode: a work-group per (row, token), slots in order. */
INL void moe_down_wg(IQ2_TABS, const int type, MOE_DOWN_ARGS, __local float *part)
{
    int r = get_group_id(0), t = get_group_id(1), lane = get_local_id(0), L = get_local_size(0);
    float sum = 0.0f;
    for (int i = 0; i < k; i++) {
        int p = t * k + i, e = sel[sel_off + p];
        float v = 0.0f;
        if (e >= e_lo && e < e_hi)
            v = group_sum(lane_dot(iq2g, iq2s, type, Wd + Wd_off + ((ulong)(e - e_lo) * D + r) * row_bytes, mid + (ulong)p * F, F,
                                   lane, L),
                          part);
        sum = i == 0 ? v : sum + v;
    }
    if (lane == 0) y[y_off + (ulong)t * D + r] = sum;
}

/* Prefill, after moe_sort: work-item (row block, tile). A tile is up to
 * MOE_TB pairs of one expert, at sorted positions q0 … q0+n−1; mid rows
 * are kept in sorted order, the down outputs ys by pair. */
#define MOE_TILE_ARGS const __global int *ws, int P, int E

INL int ws_tiles(const __global int *ws) { return ws[0]; }
INL const __global int *ws_order(const __global int *ws, int E) { return ws + 1 + E; }
INL const __global int *ws_tile(const __global int *ws, int E, int P, int i) { return ws + 1 + E + P + 3 * i; }

/* Gate rows r0 … r0+MOE_GU_RB−1 (clamped to F) and as many up rows in one
 * tile, every x load serving both; the tile's pairs MOE_TB at a time;
 * mid[sorted position][r] = SwiGLU(gate, up)·weight. */
INL void moe_gu_tile(IQ2_TABS, const int type, MOE_GU_ARGS, MOE_TILE_ARGS)
{
    const int RB = MOE_GU_RB;
    int r0 = (int)get_global_id(0) * RB, ti = get_global_id(1);
    if (r0 >= F || ti >= ws_tiles(ws)) return;
    const __global int *tile = ws_tile(ws, E, P, ti), *order = ws_order(ws, E);
    int e = tile[0], q0 = tile[1], nt = tile[2];
    if (e < e_lo || e >= e_hi) return;
    ulong eoff = (ulong)(e - e_lo) * F * row_bytes;
    const __global uchar *w[MAX_RB];
    for (int r = 0; r < RB; r++) {
        ulong at = eoff + (ulong)min(r0 + r, F - 1) * row_bytes;
        w[r] = G + G_off + at;
        w[RB + r] = U + U_off + at;
    }
    DEQ_DECL(type, 2 * RB, w, D)
    for (int u = 0; u < nt; u += DEQ_STEP(MOE_TB)) {
        const int m = min(DEQ_STEP(MOE_TB), nt - u), nb = (m + MOE_TB - 1) / MOE_TB;
        const __global float *xt[OUT_TB];
        float wv[OUT_TB];
        int mrow[OUT_TB];
        for (int t = 0; t < nb * MOE_TB; t++) {
            int q = q0 + u + min(t, m - 1), p = order[q];
            xt[t] = x + x_off + (ulong)(p / k) * D;
            wv[t] = wt[wt_off + p];
            mrow[t] = q;
        }
        float o[MAX_RB][OUT_TB];
        DEQ_TILES(type, 2 * RB, MOE_TB, nb, w, xt, D, o)
        for (int r = 0; r < RB && r0 + r < F; r++)
            for (int t = 0; t < m; t++) mid[(ulong)mrow[t] * F + r0 + r] = swiglu_w(o[r][t], o[RB + r][t], clamp, wv[t]);
    }
}

INL void moe_down_tile(IQ2_TABS, const int type, MOE_DOWN_ARGS, MOE_TILE_ARGS)
{
    int r0 = (int)get_global_id(0) * MOE_DN_RB, ti = get_global_id(1);
    if (r0 >= D || ti >= ws_tiles(ws)) return;
    const __global int *tile = ws_tile(ws, E, P, ti), *order = ws_order(ws, E);
    int e = tile[0], q0 = tile[1], nt = tile[2];
    if (e < e_lo || e >= e_hi) return;
    const __global uchar *w[MAX_RB];
    for (int r = 0; r < MOE_DN_RB; r++)
        w[r] = Wd + Wd_off + ((ulong)(e - e_lo) * D + (ulong)min(r0 + r, D - 1)) * row_bytes;
    DEQ_DECL(type, MOE_DN_RB, w, F)
    for (int u = 0; u < nt; u += DEQ_STEP(MOE_TB)) {
        const int m = min(DEQ_STEP(MOE_TB), nt - u), nb = (m + MOE_TB - 1) / MOE_TB;
        const __global float *xm[OUT_TB];
        for (int t = 0; t < nb * MOE_TB; t++) xm[t] = mid + (ulong)(q0 + u + min(t, m - 1)) * F;
        float out[MAX_RB][OUT_TB];
        DEQ_TILES(type, MOE_DN_RB, MOE_TB, nb, w, xm, F, out)
        for (int t = 0; t < m; t++) {
            __global float *ys = y + y_off + (ulong)order[q0 + u + t] * D;
            for (int r = 0; r < MOE_DN_RB && r0 + r < D; r++) ys[r0 + r] = out[r][t];
        }
    }
}

#define MOE_KERNELS(SFX, TYPE)                                                                                       \
    __kernel void moe_gu_dec_##SFX(IQ2_TABS, MOE_GU_ARGS, int P)                                                     \
    {                                                                                                                \
        moe_gu_dec(iq2g, iq2s, TYPE, G, G_off, U, U_off, row_bytes, D, F, e_lo, e_hi, x, x_off, sel, sel_off, wt,    \
                   wt_off, k, clamp, mid, P);                                                                        \
    }                                                                                                                \
    __kernel void moe_down_dec_##SFX(IQ2_TABS, MOE_DOWN_ARGS, int T)                                                 \
    {                                                                                                                \
        moe_down_dec(iq2g, iq2s, TYPE, Wd, Wd_off, row_bytes, F, D, e_lo, e_hi, mid, sel, sel_off, k, y, y_off, T);  \
    }                                                                                                                \
    __kernel void moe_gu_wg_##SFX(IQ2_TABS, MOE_GU_ARGS, __local float *part)                                        \
    {                                                                                                                \
        moe_gu_wg(iq2g, iq2s, TYPE, G, G_off, U, U_off, row_bytes, D, F, e_lo, e_hi, x, x_off, sel, sel_off, wt,     \
                  wt_off, k, clamp, mid, part);                                                                      \
    }                                                                                                                \
    __kernel void moe_down_wg_##SFX(IQ2_TABS, MOE_DOWN_ARGS, __local float *part)                                    \
    {                                                                                                                \
        moe_down_wg(iq2g, iq2s, TYPE, Wd, Wd_off, row_bytes, F, D, e_lo, e_hi, mid, sel, sel_off, k, y, y_off,       \
                    part);                                                                                           \
    }                                                                                                                \
    __kernel void moe_gu_tile_##SFX(IQ2_TABS, MOE_GU_ARGS, MOE_TILE_ARGS)                                            \
    {                                                                                                                \
        moe_gu_tile(iq2g, iq2s, TYPE, G, G_off, U, U_off, row_bytes, D, F, e_lo, e_hi, x, x_off, sel, sel_off, wt,   \
                    wt_off, k, clamp, mid, ws, P, E);                                                                \
    }                                                                                                                \
    __kernel void moe_down_tile_##SFX(IQ2_TABS, MOE_DOWN_ARGS, MOE_TILE_ARGS)                                        \
    {                                                                                                                \
        moe_down_tile(iq2g, iq2s, TYPE, Wd, Wd_off, row_bytes, F, D, e_lo, e_hi, mid, sel, sel_off, k, y, y_off,     \
                      ws, P, E);                                                                                     \
    }

#if !defined(CLRT_PART) || defined(CLRT_PART_moe_q2_k)
MOE_KERNELS(q2_k, GGML_Q2_K)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_moe_q4_k)
MOE_KERNELS(q4_k, GGML_Q4_K)
#endif
#if !defined(CLRT_PART) || defined(CLRT_PART_moe_iq2_xxs)
MOE_KERNELS(iq2_xxs, GGML_IQ2_XXS)
#endif

/* One work-item: groups the P pairs by expert (stable, so pairs keep their
 * order within an expert) and cuts each expert's run into tiles of at most
 * tb pairs. ws = [n_tiles, cursor[E], order[P], tiles[3·max]]; ids
 * outside [0, E) are left out. The work is O(P + E), a few µs. */
#if !defined(CLRT_PART) || defined(CLRT_PART_aux)
__kernel void moe_sort(const __global int *sel, ulong sel_off, int P, int E, int tb, __global int *ws)
{
    if (get_global_id(0) != 0) return;
    sel += sel_off;
    __global int *cur = ws + 1, *order = ws + 1 + E, *tiles = ws + 1 + E + P;
    for (int e = 0; e < E; e++) cur[e] = 0;
    for (int p = 0; p < P; p++) {
        int e = sel[p];
        if (e >= 0 && e < E) cur[e]++;
    }
    int at = 0, nt = 0;
    for (int e = 0; e < E; e++) {
        int n = cur[e];
        for (int q = 0; q < n; q += tb) {
            tiles[3 * nt] = e;
            tiles[3 * nt + 1] = at + q;
            tiles[3 * nt + 2] = min(tb, n - q);
            nt++;
        }
        cur[e] = at;
        at += n;
    }
    for (int p = 0; p < P; p++) {
        int e = sel[p];
        if (e >= 0 && e < E) order[cur[e]++] = p;
    }
    ws[0] = nt;
}
#endif

/* y[t][d] = Σ over slots in order of ys[t·k + i][d] (a slot with an id
 * outside [0, E) adds nothing). */
#if !defined(CLRT_PART) || defined(CLRT_PART_aux)
__kernel void moe_sum(const __global float *ys, const __global int *sel, ulong sel_off, int k, int E, int D, int T,
                      __global float *y, ulong y_off)
{
    int d = get_global_id(0), t = get_global_id(1);
    if (d >= D || t >= T) return;
    float sum = 0.0f;
    for (int i = 0; i < k; i++) {
        int p = t * k + i, e = sel[sel_off + p];
        float v = e >= 0 && e < E ? ys[(ulong)p * D + d] : 0.0f;
        sum = i == 0 ? v : sum + v;
    }
    y[y_off + (ulong)t * D + d] = sum;
}
#endif
