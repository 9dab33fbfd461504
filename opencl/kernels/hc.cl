/* hc.cl — hyper-connections (doc/model.md §5): the per-token RMS scale of
 * the n_hc streams, the mixer product, the coefficients (sigmoids and the
 * Sinkhorn-normalised comb matrix, in the CPU backend's order), the
 * collapse to one stream and the expansion back. */

/* One work-group per token: r[t] = 1/sqrt(mean(S[t]²) + eps). */
__kernel void hc_rms(const __global float *S, ulong S_off, int n, float eps, __global float *r, __local float *part)
{
    size_t t = get_group_id(0);
    int lid = get_local_id(0), L = get_local_size(0);
    S += S_off + t * n;
    float ss = 0.0f;
    for (int i = lid; i < n; i += L) ss += S[i] * S[i];
    part[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lid < h) part[lid] += part[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) r[t] = 1.0f / sqrt(part[0] / (float)n + eps);
}

/* CPU devices: one work-item per token. */
__kernel void hc_rms_rows(const __global float *S, ulong S_off, int n, float eps, __global float *r, int T)
{
    int t = get_global_id(0);
    if (t >= T) return;
    r[t] = 1.0f / sqrt(sumsq_row(S + S_off + (ulong)t * n, n) / (float)n + eps);
}

/* CPU devices: one work-item per (mixer row j, four tokens), the row read
 * once for the four, eight lanes at a time; one kernel per weight type. A
 * last group of fewer tokens goes one token at a time. */
#define HC_MIX_ROWS(NAME, LOAD8)                                                                                   \
    __kernel void NAME(const __global uchar *fn, ulong fn_off, int type, ulong row_bytes, const __global float *S, \
                       ulong S_off, int n, const __global float *r, __global float *mix, int n_mix, int T)        \
    {                                                                                                              \
        int j = get_global_id(0), t0 = get_global_id(1) * 4;                                                      \
        if (j >= n_mix || t0 >= T) return;                                                                         \
        const __global uchar *row = fn + fn_off + (ulong)j * row_bytes;                                            \
        const int n8 = n & ~7;                                                                                     \
        S += S_off;                                                                                                \
        if (T - t0 >= 4) {                                                                                         \
            const __global float *s0 = S + (ulong)t0 * n, *s1 = s0 + n, *s2 = s1 + n, *s3 = s2 + n;               \
            float r0 = r[t0], r1 = r[t0 + 1], r2 = r[t0 + 2], r3 = r[t0 + 3];                                      \
            float8 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;                                                     \
            for (int i = 0; i < n8; i += 8) {                                                                      \
                float8 w = LOAD8(row, i);                                                                          \
                a0 += w * (vload8(0, s0 + i) * r0);                                                                \
                a1 += w * (vload8(0, s1 + i) * r1);                                                                \
                a2 += w * (vload8(0, s2 + i) * r2);                                                                \
                a3 += w * (vload8(0, s3 + i) * r3);                                                                \
            }                                                                                                      \
            float m0 = hsum8(a0), m1 = hsum8(a1), m2 = hsum8(a2), m3 = hsum8(a3);                                  \
            for (int i = n8; i < n; i++) {                                                                         \
                float w = dense_elem(type, row, i);                                                                \
                m0 += w * (s0[i] * r0);                                                                            \
                m1 += w * (s1[i] * r1);                                                                            \
                m2 += w * (s2[i] * r2);                                                                            \
                m3 += w * (s3[i] * r3);                                                                            \
            }                                                                                                      \
            mix[(ulong)t0 * n_mix + j] = m0;                                                                       \
            mix[(ulong)(t0 + 1) * n_mix + j] = m1;                                                                 \
            mix[(ulong)(t0 + 2) * n_mix + j] = m2;                                                                 \
            mix[(ulong)(t0 + 3) * n_mix + j] = m3;                                                                 \
            return;                                                                                                \
        }                                                                                                          \
        for (int t = t0; t < T; t++) {                                                                             \
            const __global float *s0 = S + (ulong)t * n;                                                           \
            float r0 = r[t];                                                                                       \
            float8 a0 = 0.0f;                                                                                      \
            for (int i = 0; i < n8; i += 8) a0 += LOAD8(row, i) * (vload8(0, s0 + i) * r0);                        \
            float m0 = hsum8(a0);                                                                                  \
            for (int i = n8; i < n; i++) m0 += dense_elem(type, row, i) * (s0[i] * r0);                            \
            mix[(ulong)t * n_mix + j] = m0;                                                                        \
        }                                                                                                          \
    }

HC_MIX_ROWS(hc_mix_rows_f32, load8_f32)
HC_MIX_ROWS(hc_mix_rows_f16, load8_f16)
HC_MIX_ROWS(hc_mix_rows_bf16, load8_bf16)
HC_MIX_ROWS(hc_mix_rows_q8_0, load8_q8_0)

/* GPUs: one work-group per (mixer row j, token t): mix[t][j] = fn[j]·(S[t]·r[t]). */
__kernel void hc_mix(const __global uchar *fn, ulong fn_off, int type, ulong row_bytes, const __global float *S,
                     ulong S_off, int n, const __global float *r, __global float *mix, int n_mix,
                     __local float *part)
{
    int j = get_group_id(0), t = get_group_id(1);
    int lid = get_local_id(0), L = get_local_size(0);
    const __global uchar *row = fn + fn_off + (ulong)j * row_bytes;
    S += S_off + (ulong)t * n;
    float rt = r[t], acc = 0.0f;
    for (int i = lid; i < n; i += L) acc += dense_elem(type, row, i) * (S[i] * rt);
    part[lid] = acc;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lid < h) part[lid] += part[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) mix[(ulong)t * n_mix + j] = part[0];
}

/* One work-item per token: pre (into pre[t]), and for hc_pre (head == 0)
 * post and comb, the comb matrix normalised in place: a row softmax plus
 * eps, then iters rounds of row (from the second round on) and column
 * normalisation, each as a multiplication by an f32 inverse. */
__kernel void hc_coef(const __global float *mix, int n_mix, const __global float *scale, ulong scale_off,
                      const __global float *base, ulong base_off, int nh, float hc_eps, int iters, int head,
                      __global float *pre, __global float *post, ulong post_off, __global float *comb, ulong comb_off,
                      int T)
{
    int t = get_global_id(0);
    if (t >= T) return;
    mix += (ulong)t * n_mix;
    scale += scale_off;
    base += base_off;
    pre += (ulong)t * nh;
    for (int i = 0; i < nh; i++) {
        float z = mix[i] * scale[0] + base[i];
        pre[i] = (head ? sigmoid_stable(z) : sigmoid_plain(z)) + hc_eps;
    }
    if (head) return;
    post += post_off + (ulong)t * nh;
    __global float *M = comb + comb_off + (ulong)t * nh * nh;
    for (int i = 0; i < nh; i++) post[i] = 2.0f / (1.0f + exp(-(mix[nh + i] * scale[1] + base[nh + i])));
    for (int q = 0; q < nh * nh; q++) M[q] = mix[2 * nh + q] * scale[2] + base[2 * nh + q];
    for (int j = 0; j < nh; j++) {
        __global float *row = M + j * nh;
        float mx = row[0], sum = 0.0f;
        for (int k = 1; k < nh; k++) mx = fmax(mx, row[k]);
        for (int k = 0; k < nh; k++) {
            row[k] = exp(row[k] - mx);
            sum += row[k];
        }
        float inv = 1.0f / sum;
        for (int k = 0; k < nh; k++) row[k] = row[k] * inv + hc_eps;
    }
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int j = 0; j < nh; j++) {
                float sum = 0.0f;
                for (int k = 0; k < nh; k++) sum += M[j * nh + k];
                float inv = 1.0f / (sum + hc_eps);
                for (int k = 0; k < nh; k++) M[j * nh + k] *= inv;
            }
        for (int k = 0; k < nh; k++) {
            float sum = 0.0f;
            for (int j = 0; j < nh; j++) sum += M[j * nh + k];
            float inv = 1.0f / (sum + hc_eps);
            for (int j = 0; j < nh; j++) M[j * nh + k] *= inv;
        }
    }
}

/* x[t][d] = Σ_i pre[t][i]·S[t][i][d], streams in order. */
__kernel void hc_collapse(const __global float *S, ulong S_off, const __global float *pre, __global float *x,
                          ulong x_off, int nh, int D, int T)
{
    int d = get_global_id(0), t = get_global_id(1);
    if (d >= D || t >= T) return;
    S += S_off + (ulong)t * nh * D + d;
    pre += (ulong)t * nh;
    float acc = 0.0f;
    for (int i = 0; i < nh; i++) acc += pre[i] * S[(ulong)i * D];
    x[x_off + (ulong)t * D + d] = acc;
}

/* CPU devices: the same eight dims per work-item (D a multiple of 8). */
__kernel void hc_expand8(const __global float *S, ulong S_off, const __global float *F, ulong F_off,
                         const __global float *post, ulong post_off, const __global float *comb, ulong comb_off,
                         __global float *out, ulong out_off, int nh, int D, int T)
{
    int d = get_global_id(0) * 8, k = get_global_id(1), t = get_global_id(2);
    if (d >= D || k >= nh || t >= T) return;
    S += S_off + (ulong)t * nh * D + d;
    comb += comb_off + (ulong)t * nh * nh + k;
    float8 acc = post[post_off + (ulong)t * nh + k] * vload8(0, F + F_off + (ulong)t * D + d);
    for (int s = 0; s < nh; s++) acc += comb[s * nh] * vload8(0, S + (ulong)s * D);
    vstore8(acc, 0, out + out_off + ((ulong)t * nh + k) * D + d);
}

/* S_out[t][k][d] = post[t][k]·F[t][d] + Σ_j comb[t][j][k]·S_in[t][j][d]. */
__kernel void hc_expand(const __global float *S, ulong S_off, const __global float *F, ulong F_off,
                        const __global float *post, ulong post_off, const __global float *comb, ulong comb_off,
                        __global float *out, ulong out_off, int nh, int D, int T)
{
    int d = get_global_id(0), k = get_global_id(1), t = get_global_id(2);
    if (d >= D || k >= nh || t >= T) return;
    S += S_off + (ulong)t * nh * D + d;
    comb += comb_off + (ulong)t * nh * nh + k;
    float acc = post[post_off + (ulong)t * nh + k] * F[F_off + (ulong)t * D + d];
    for (int s = 0; s < nh; s++) acc += comb[s * nh] * S[(ulong)s * D];
    out[out_off + ((ulong)t * nh + k) * D + d] = acc;
}
