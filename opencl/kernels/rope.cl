/* rope.cl — RoPE/YaRN rotations, the fp8/FP4 rounding simulations and the
 * Walsh–Hadamard rotation (doc/model.md §2), and stores of rows into the
 * f32 or f16 caches. The angle arithmetic is the one ds4_ops.rope spells
 * out, operation for operation. */

/* One work-item per (pair k, row r): the angle of pair k at the row's
 * position, then that pair of every head. te is advanced by k sequential
 * multiplications, as the reference does, so angles agree to the bit. */
__kernel void rope_f32(__global float *x, ulong x_off, int n_heads, int dim, int n_rot, long pos0, int pos_step,
                       int n_rows, float theta_scale, float freq_scale, float ext_factor, float attn_factor,
                       float corr_lo, float corr_hi, float ext_mscale, int inverse)
{
    int k = get_global_id(0), r = get_global_id(1);
    if (k >= n_rot / 2 || r >= n_rows) return;
    float te = (float)(pos0 + (long)r * pos_step);
    for (int i = 0; i < k; i++) te *= theta_scale;
    float ti = freq_scale * te, th = ti, m = attn_factor;
    if (ext_factor != 0.0f) {
        float y = ((float)k - corr_lo) / fmax(0.001f, corr_hi - corr_lo);
        float mix = (1.0f - fmin(1.0f, fmax(0.0f, y))) * ext_factor;
        th = ti * (1.0f - mix) + te * mix;
        m *= ext_mscale;
    }
    float cs = cos(th) * m;
    float sn = (inverse ? -1.0f : 1.0f) * sin(th) * m;
    __global float *p = x + x_off + (ulong)r * n_heads * dim + (dim - n_rot) + 2 * k;
    for (int h = 0; h < n_heads; h++, p += dim) {
        float a = p[0], b = p[1];
        p[0] = a * cs - b * sn;
        p[1] = a * sn + b * cs;
    }
}

/* ---- rounding simulations (engine/numerics.c) ---- */

inline float fp8_e4m3_round(float v)
{
    float a = fabs(v);
    if (a == 0.0f || isnan(a)) return v;
    float q;
    if (a < 0x1p-6f) {
        q = rint(a * 0x1p9f) * 0x1p-9f;
    } else {
        int e;
        frexp(a, &e);
        float step = ldexp(1.0f, e - 4);
        q = rint(a / step) * step;
        if (q > 448.0f) q = 448.0f;
    }
    return v < 0.0f ? -q : q;
}

inline float fp4_e2m1_round(float v)
{
    float a = fabs(v), q;
    if (a <= 0.25f) q = 0.0f;
    else if (a < 0.75f) q = 0.5f;
    else if (a <= 1.25f) q = 1.0f;
    else if (a < 1.75f) q = 1.5f;
    else if (a <= 2.5f) q = 2.0f;
    else if (a < 3.5f) q = 3.0f;
    else if (a <= 5.0f) q = 4.0f;
    else q = 6.0f;
    return v < 0.0f ? -q : q;
}

/* exp2(ceil(log2(r))) as the host computes it (engine/numerics.c, a
 * correctly rounded log2f), from the float's bits: the library's log2
 * reads lookup tables that a driver may reach through a hidden kernel
 * argument, read inside control flow (Mesa's llvmpipe warns then).
 * r = f·2^e: r itself when f = 1; else log2 r = e + log2 f rounds to e
 * when log2 f is below half a unit in the last place of e (of the finer
 * binade just above a negative power of two), so 2^e; else 2^(e+1).
 * Checked equal to the host's on every 7th positive float. */
inline float pow2_at_least(float r)
{
    int adj = 0;
    if (r < 1.17549435e-38f) { /* subnormal: scale into the normal range */
        r *= 16777216.0f;
        adj = -24;
    }
    uint b = as_uint(r), man = b & 0x7fffffu;
    int e = (int)(b >> 23) - 127 + adj;
    if (man) {
        int ae = abs(e), keep = 0;
        if (ae > 0) {
            int hb = 31 - (int)clz((uint)ae);
            if (e < 0 && (ae & (ae - 1)) == 0) hb -= 1;
            float half_ulp = as_float((uint)(hb - 24 + 127) << 23);
            keep = (float)man * 1.1920929e-7f * 1.44269504f < half_ulp;
        }
        if (!keep) e += 1;
    }
    return e >= -126 ? as_float((uint)(e + 127) << 23) : as_float(1u << (e + 149));
}

inline float pow2_scale(float amax, float fmax_) { return pow2_at_least(amax / fmax_); }

/* One block's round trip through a small float format: the scale is the
 * power of two that brings the block's largest magnitude (at least
 * amax_min) within ±fmax_, then each value is clamped and rounded to the
 * format (fp4: e2m1, else e4m3) and scaled back. */
inline void block_round_trip(__global float *p, int m, float amax_min, float fmax_, bool fp4)
{
    float amax = 0.0f;
    for (int i = 0; i < m; i++) amax = fmax(amax, fabs(p[i]));
    if (amax < amax_min) amax = amax_min;
    float s = pow2_scale(amax, fmax_);
    for (int i = 0; i < m; i++) {
        float v = p[i] / s;
        v = v > fmax_ ? fmax_ : v < -fmax_ ? -fmax_ : v;
        p[i] = (fp4 ? fp4_e2m1_round(v) : fp8_e4m3_round(v)) * s;
    }
}

/* One work-item per (block of 64, row): e4m3 round trip of dims [0, n). */
__kernel void sim_fp8(__global float *x, ulong x_off, int dim, int n, int n_rows)
{
    int blk = get_global_id(0), r = get_global_id(1);
    int b0 = blk * 64;
    if (b0 >= n || r >= n_rows) return;
    block_round_trip(x + x_off + (ulong)r * dim + b0, n - b0 < 64 ? n - b0 : 64, 1e-4f, 448.0f, false);
}

/* One work-item per row: the Walsh–Hadamard butterflies in place (dim a
 * power of two), then the scale. */
__kernel void sim_hadamard(__global float *x, ulong x_off, int dim, float scale, int n_rows)
{
    int r = get_global_id(0);
    if (r >= n_rows) return;
    __global float *p = x + x_off + (ulong)r * dim;
    for (int h = 1; h < dim; h <<= 1)
        for (int i = 0; i < dim; i += h << 1)
            for (int j = i; j < i + h; j++) {
                float a = p[j], b = p[j + h];
                p[j] = a + b;
                p[j + h] = a - b;
            }
    for (int i = 0; i < dim; i++) p[i] *= scale;
}

/* One work-item per (block of 32, row): the e2m1 round trip after the
 * rotation, a work-item per block as for fp8 (the blocks are
 * independent, and the rotation's kernel stays a plain loop). */
__kernel void sim_fp4(__global float *x, ulong x_off, int dim, int n_rows)
{
    int blk = get_global_id(0), r = get_global_id(1);
    int b0 = blk * 32;
    if (b0 >= dim || r >= n_rows) return;
    block_round_trip(x + x_off + (ulong)r * dim + b0, dim - b0 < 32 ? dim - b0 : 32, 7.052966104933725e-38f, 6.0f,
                     true);
}

/* ---- cache stores ---- */

/* One work-item per (element d, row i): row i goes to slot
 * (row0 + i) mod ring (ring > 0) or row0 + i; f16 rounds to nearest even. */
__kernel void store_rows(const __global float *src, ulong src_off, int dim, int n_rows, __global uchar *dst,
                         ulong dst_off, int f16, long row0, long ring)
{
    int d = get_global_id(0), i = get_global_id(1);
    if (d >= dim || i >= n_rows) return;
    long slot = ring > 0 ? (row0 + i) % ring : row0 + i;
    float v = src[src_off + (ulong)i * dim + d];
    ulong at = (ulong)slot * dim + d;
    if (f16) vstore_half_rte(v, at, (__global half *)(dst + dst_off));
    else ((__global float *)(dst + dst_off))[at] = v;
}
