/* basic.cl — embedding rows, elementwise ops, RMSNorm, argmax. */

/* One work-item per (element d, token t): S[t][i][d] = table[id][d] for each
 * stream i, for the ids inside this piece of the table [r0, r1). Ids outside
 * the whole table give zeros (written by the piece that starts at row 0). */
__kernel void embed_rows(const __global uchar *table, ulong table_off, int type, ulong row_bytes, int r0, int r1,
                         int n_rows, const __global int *tokens, ulong tokens_off, __global float *S, ulong S_off,
                         int n_hc, int D, int T)
{
    int d = get_global_id(0), t = get_global_id(1);
    if (d >= D || t >= T) return;
    table += table_off;
    tokens += tokens_off;
    S += S_off;
    int id = tokens[t];
    float v;
    if (id >= r0 && id < r1) v = dense_elem(type, table + (ulong)(id - r0) * row_bytes, d);
    else if (r0 == 0 && (id < 0 || id >= n_rows)) v = 0.0f;
    else return;
    __global float *s = S + (ulong)t * n_hc * D + d;
    for (int i = 0; i < n_hc; i++) s[(ulong)i * D] = v;
}

__kernel void add_f32(const __global float *a, ulong a_off, const __global float *b, ulong b_off, __global float *y,
                      ulong y_off, ulong n)
{
    size_t i = get_global_id(0);
    if (i >= n) return;
    y[y_off + i] = a[a_off + i] + b[b_off + i];
}

__kernel void swiglu_f32(const __global float *g, ulong g_off, const __global float *u, ulong u_off,
                         __global float *mid, ulong mid_off, ulong n, float clamp)
{
    size_t i = get_global_id(0);
    if (i >= n) return;
    float gv = g[g_off + i], uv = u[u_off + i];
    if (clamp > 1e-6f) {
        gv = gv > clamp ? clamp : gv;
        uv = uv > clamp ? clamp : uv < -clamp ? -clamp : uv;
    }
    mid[mid_off + i] = gv * sigmoid_stable(gv) * uv;
}

/* CPU devices: one work-item per row, vector loops. */
__kernel void rmsnorm_rows(const __global float *x, ulong x_off, const __global float *w, ulong w_off, int has_w,
                           __global float *y, ulong y_off, int n, float eps, int n_rows)
{
    size_t r = get_global_id(0);
    if (r >= (size_t)n_rows) return;
    x += x_off + r * n;
    y += y_off + r * n;
    w += w_off;
    float s = 1.0f / sqrt(sumsq_row(x, n) / (float)n + eps);
    if (has_w)
        for (int i = 0; i < n; i++) y[i] = x[i] * s * w[i];
    else
        for (int i = 0; i < n; i++) y[i] = x[i] * s;
}

/* GPUs: one work-group per row: Σx² over the group, then y = x·s·w. */
__kernel void rmsnorm_f32(const __global float *x, ulong x_off, const __global float *w, ulong w_off, int has_w,
                          __global float *y, ulong y_off, int n, float eps, __local float *part)
{
    size_t r = get_group_id(0);
    int lid = get_local_id(0), L = get_local_size(0);
    x += x_off + r * n;
    y += y_off + r * n;
    w += w_off;
    float ss = 0.0f;
    for (int i = lid; i < n; i += L) ss += x[i] * x[i];
    part[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lid < h) part[lid] += part[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float s = 1.0f / sqrt(part[0] / (float)n + eps);
    if (has_w)
        for (int i = lid; i < n; i += L) y[i] = x[i] * s * w[i];
    else
        for (int i = lid; i < n; i += L) y[i] = x[i] * s;
}

/* One work-group: each item keeps the first maximum of its stride, then a
 * tree picks the larger value, the lower index on ties. */
__kernel void argmax_f32(const __global float *x, ulong x_off, ulong n, __global int *out, ulong out_off,
                         __local float *bv, __local int *bi)
{
    int lid = get_local_id(0), L = get_local_size(0);
    x += x_off;
    float best = -INFINITY;
    int at = -1;
    for (ulong i = lid; i < n; i += L)
        if (at < 0 || x[i] > best) {
            best = x[i];
            at = (int)i;
        }
    bv[lid] = best;
    bi[lid] = at;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = L / 2; h > 0; h >>= 1) {
        if (lid < h) {
            int j = bi[lid + h];
            if (j >= 0 && (bi[lid] < 0 || bv[lid + h] > bv[lid] || (bv[lid + h] == bv[lid] && j < bi[lid]))) {
                bv[lid] = bv[lid + h];
                bi[lid] = j;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[out_off] = bi[0];
}
