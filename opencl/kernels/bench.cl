/* bench.cl — probes for ds4cl-bench --cl-bench: a streaming read, an f32
 * FMA loop and an empty kernel, the roofs that the matmul and moe kernels
 * are measured against in the same run. */

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
