/* bench.cl — probes for ds4cl-bench --cl-bench: a streaming read, an f32
 * FMA loop and an empty kernel, the roofs that the matmul and moe kernels
 * are measured against in the same run; and an IQ2_XXS product in integer
 * arithmetic, set beside the engine's f32 one. */

/* CPU devices: each work-item sums its own contiguous slice of n16 float16
 * (the way the CPU-shaped kernels stream rows). */
__kernel void read_slices(const __global float16 *p, ulong n16, __global float *out)
{
    size_t i = get_global_id(0);
    const __global float16 *q = p + i * n16;
    float16 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    for (ulong j = 0; j + 4 <= n16; j += 4) {
        a0 += q[j];
        a1 += q[j + 1];
        a2 += q[j + 2];
        a3 += q[j + 3];
    }
    float16 a = (a0 + a1) + (a2 + a3);
    out[i] = hsum8(a.lo + a.hi);
}

/* GPUs: neighbouring work-items read neighbouring float16 (grid stride). */
__kernel void read_strided(const __global float16 *p, ulong n16, __global float *out)
{
    size_t i = get_global_id(0), G = get_global_size(0);
    float16 a = 0.0f;
    for (ulong j = i; j < n16; j += G) a += p[j];
    out[i] = hsum8(a.lo + a.hi);
}

/* iters rounds of 8 independent float16 FMA chains per work-item:
 * 256 flops a round. */
__kernel void fma_peak(__global float *out, int iters, float a, float b)
{
    float s = (float)get_global_id(0) * 1e-9f;
    float16 x0 = s, x1 = s + 1e-3f, x2 = s + 2e-3f, x3 = s + 3e-3f;
    float16 x4 = s + 4e-3f, x5 = s + 5e-3f, x6 = s + 6e-3f, x7 = s + 7e-3f;
    for (int i = 0; i < iters; i++) {
        x0 = fma(x0, a, b);
        x1 = fma(x1, a, b);
        x2 = fma(x2, a, b);
        x3 = fma(x3, a, b);
        x4 = fma(x4, a, b);
        x5 = fma(x5, a, b);
        x6 = fma(x6, a, b);
        x7 = fma(x7, a, b);
    }
    float16 t = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    out[get_global_id(0)] = hsum8(t.lo + t.hi);
}

__kernel void empty(__global float *out) { (void)out; }

/* IQ2_XXS decode with 8-bit activations (ds4's integer arithmetic), a
 * probe of what that numerics would buy on this device; the engine does
 * not use it. A work-item takes four rows a quarter of the matrix apart
 * (as the decode kernels do) against x quantized in blocks of 256 (xq: the
 * int8 values widened to int16, xd: the block scales). sgrid holds the 8
 * signed grid values of every (sign index << 8 | grid index) pair, so a
 * group of 8 weights is one lookup. Per 32 weights the integer products
 * are summed and scaled by 2s + 1; per 256, converted and multiplied by
 * d·xd/8. iq2_lookup_rows leaves the signs and scales out: not a
 * product any more, a bound on what the lookups alone allow. */

/* 32 int8 grid values (g4) × 32 int16 activations, summed in pairs:
 * written portably, it ran on PoCL as fast as with the AVX-512 vpmaddwd
 * builtin */
inline int16 probe_dot32(ulong4 g4, const __global short *x)
{
    int16 lo = convert_int16(as_char16(g4.lo)) * convert_int16(vload16(0, x));
    int16 hi = convert_int16(as_char16(g4.hi)) * convert_int16(vload16(1, x));
    return lo + hi;
}

inline uint probe_word(const __global uchar *g)
{
    ushort2 v = vload2(0, (const __global ushort *)(g + 4));
    return (uint)v.x | (uint)v.y << 16;
}

/* the four rows written out: PoCL keeps arrays of accumulators in memory */
#define PROBE_ROW(r, LOOKUPS)                                                                                 \
    {                                                                                                         \
        const __global uchar *g = w##r + 66 * b + 2 + 8 * j;                                                  \
        uint s = probe_word(g), m = LOOKUPS ? 0u : 127u;                                                      \
        ulong4 g4 = (ulong4)(sgrid[g[0] | (s & m) << 8], sgrid[g[1] | (s >> 7 & m) << 8],                     \
                             sgrid[g[2] | (s >> 14 & m) << 8], sgrid[g[3] | (s >> 21 & m) << 8]);             \
        int16 p = probe_dot32(g4, x);                                                                         \
        acc##r += LOOKUPS ? p : p * (int)(2 * (s >> 28) + 1);                                                 \
    }
#define PROBE_SCALE(r) \
    f##r = fma(convert_float16(acc##r), (float16)(vload_half(0, (const __global half *)(w##r + 66 * b)) * xd[b] * 0.125f), f##r);

#define PROBE_KERNEL(NAME, LOOKUPS)                                                                              \
    __kernel void NAME(const __global uchar *W, ulong W_off, ulong row_bytes, int rows, int n,                   \
                       const __global short *xq, const __global float *xd, const __global ulong *sgrid,          \
                       __global float *y)                                                                        \
    {                                                                                                            \
        const int q = rows / 4, i = get_global_id(0);                                                            \
        if (i >= q) return;                                                                                      \
        const __global uchar *w0 = W + W_off + (ulong)i * row_bytes, *w1 = w0 + (ulong)q * row_bytes;            \
        const __global uchar *w2 = w1 + (ulong)q * row_bytes, *w3 = w2 + (ulong)q * row_bytes;                   \
        float16 f0 = 0.0f, f1 = 0.0f, f2 = 0.0f, f3 = 0.0f;                                                      \
        for (int b = 0; b < n / 256; b++) {                                                                      \
            int16 acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;                                                        \
            for (int j = 0; j < 8; j++) {                                                                        \
                const __global short *x = xq + 256 * b + 32 * j;                                                 \
                PROBE_ROW(0, LOOKUPS) PROBE_ROW(1, LOOKUPS) PROBE_ROW(2, LOOKUPS) PROBE_ROW(3, LOOKUPS)          \
            }                                                                                                    \
            PROBE_SCALE(0) PROBE_SCALE(1) PROBE_SCALE(2) PROBE_SCALE(3)                                          \
        }                                                                                                        \
        y[i] = hsum8(f0.lo + f0.hi);                                                                             \
        y[i + q] = hsum8(f1.lo + f1.hi);                                                                         \
        y[i + 2 * q] = hsum8(f2.lo + f2.hi);                                                                     \
        y[i + 3 * q] = hsum8(f3.lo + f3.hi);                                                                     \
    }

PROBE_KERNEL(iq2_int8_rows, 0)
PROBE_KERNEL(iq2_lookup_rows, 1)
