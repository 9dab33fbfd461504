/* common.cl — prepended to every program (see opencl/cl_runtime.h).
 *
 * OpenCL C 1.2 without extensions: half is a storage type only (vload_half
 * / vstore_half_rte), no subgroups, no fp64. Contraction of a*b+c into fma
 * is off so that kernels reproduce the CPU backend's f32 arithmetic
 * operation by operation where they follow its order.
 *
 * Buffers arrive as (pointer, element offset) pairs: see cl_ops_impl.h.
 * CLRT_CPU is 1 where the host runs the CPU-shaped kernels (by default on
 * CPU devices): kernels may then pick loops shaped for CPUs.
 */
#pragma OPENCL FP_CONTRACT OFF
/* A CPU driver's clang (PoCL's) on a host without AVX-512 warns that
 * float16 arguments would pass differently from code built with it: an
 * ABI between separately compiled objects, which one program never
 * crosses. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif

/* ggml type ids (engine/quant.h) */
#define GGML_F32 0
#define GGML_F16 1
#define GGML_Q8_0 8
#define GGML_Q2_K 10
#define GGML_Q4_K 12
#define GGML_IQ2_XXS 16
#define GGML_BF16 30

#define QK8_0 32
#define Q8_0_BYTES 34
#define QK_K 256

inline float ld_f16(const __global uchar *p, size_t i) { return vload_half(i, (const __global half *)p); }

inline float ld_bf16(const __global uchar *p, size_t i)
{
    return as_float((uint)((const __global ushort *)p)[i] << 16);
}

/* Element i of a row of a dense type (F32, F16, BF16, Q8_0). Plain and
 * scalar: for small products (hyper-connection mixers, embedding rows),
 * not for the big matrix kernels. */
inline float dense_elem(int type, const __global uchar *row, size_t i)
{
    switch (type) {
    case GGML_F32: return ((const __global float *)row)[i];
    case GGML_F16: return ld_f16(row, i);
    case GGML_BF16: return ld_bf16(row, i);
    case GGML_Q8_0: {
        const __global uchar *blk = row + (i / QK8_0) * Q8_0_BYTES;
        return ld_f16(blk, 0) * (float)((const __global char *)blk)[2 + i % QK8_0];
    }
    }
    return 0.0f;
}

/* 8 consecutive elements i … i+7 of a row (i a multiple of 8) as floats. */
inline float8 load8_f32(const __global uchar *row, int i) { return vload8(0, (const __global float *)row + i); }
inline float8 load8_f16(const __global uchar *row, int i) { return vload_half8(0, (const __global half *)row + i); }
inline float8 load8_bf16(const __global uchar *row, int i)
{
    return as_float8(convert_uint8(vload8(0, (const __global ushort *)row + i)) << 16);
}
inline float8 load8_q8_0(const __global uchar *row, int i)
{
    const __global uchar *blk = row + (i / QK8_0) * Q8_0_BYTES;
    return ld_f16(blk, 0) * convert_float8(vload8(0, (const __global char *)blk + 2 + i % QK8_0));
}

inline float hsum8(float8 v)
{
    float4 a = v.lo + v.hi;
    float2 b = a.lo + a.hi;
    return b.x + b.y;
}

/* Σ x² of a row, eight lanes then one horizontal sum. */
inline float sumsq_row(const __global float *x, int n)
{
    float8 acc = 0.0f;
    int n8 = n & ~7;
    for (int i = 0; i < n8; i += 8) {
        float8 v = vload8(0, x + i);
        acc += v * v;
    }
    float ss = hsum8(acc);
    for (int i = n8; i < n; i++) ss += x[i] * x[i];
    return ss;
}

/* The CPU backend's logistic functions: the plain one and the form that
 * never overflows exp. */
inline float sigmoid_plain(float z) { return 1.0f / (1.0f + exp(-z)); }

inline float sigmoid_stable(float z)
{
    if (z >= 0.0f) return 1.0f / (1.0f + exp(-z));
    float e = exp(z);
    return e / (1.0f + e);
}
