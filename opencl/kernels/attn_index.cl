/* attn_index.cl — the lightning indexer (ds4-forward §7.7): scores of the
 * visible indexer rows for each token, then the top-k rows per token by a
 * radix select over order-preserving keys and a compaction in row order.
 * Work is O(rows) per token whatever k is. */

/* An unsigned key with the order of the float (zeros of both signs equal). */
inline uint order_key(float f)
{
    if (f == 0.0f) f = 0.0f;
    uint u = as_uint(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

#define IDX_ROWS 8

/* One work-item per (IDX_ROWS rows, token), only for tokens that see more
 * rows than they keep: score[c] = Σ_h w[h]·scale·max(0, q_h·K[c]), each
 * query chunk loaded once for the rows, one horizontal sum per (row,
 * head). Out: keys [T][max_vis]. */
#define IDX_SCORES(NAME, ELEM, LOAD8)                                                                                \
    __kernel void NAME(const __global float *q, ulong q_off, const __global float *wts, ulong w_off,                \
                       const __global ELEM *rows, ulong rows_off, int nh, int hd, float scale, int R, long pos0,     \
                       int T, int k, long max_vis, __global uint *keys)                                              \
    {                                                                                                                \
        long c0 = (long)get_global_id(0) * IDX_ROWS;                                                                 \
        int t = get_global_id(1);                                                                                    \
        if (t >= T) return;                                                                                          \
        long nv = (pos0 + t + 1) / R;                                                                                \
        if (nv <= k || c0 >= nv) return;                                                                             \
        int nr = nv - c0 < IDX_ROWS ? (int)(nv - c0) : IDX_ROWS;                                                     \
        const __global ELEM *rp[IDX_ROWS];                                                                           \
        for (int r = 0; r < IDX_ROWS; r++) rp[r] = rows + rows_off + (ulong)(c0 + (r < nr ? r : 0)) * hd;            \
        q += q_off + (ulong)t * nh * hd;                                                                             \
        wts += w_off + (ulong)t * nh;                                                                                \
        float s[IDX_ROWS];                                                                                           \
        for (int r = 0; r < IDX_ROWS; r++) s[r] = 0.0f;                                                              \
        for (int h = 0; h < nh; h++) {                                                                               \
            const __global float *qh = q + (ulong)h * hd;                                                            \
            float8 acc[IDX_ROWS];                                                                                    \
            for (int r = 0; r < IDX_ROWS; r++) acc[r] = 0.0f;                                                        \
            for (int i = 0; i < hd; i += 8) {                                                                        \
                float8 qv = vload8(0, qh + i);                                                                       \
                for (int r = 0; r < IDX_ROWS; r++) acc[r] = fma(qv, LOAD8(rp[r], i), acc[r]);                        \
            }                                                                                                        \
            float ws = wts[h] * scale;                                                                               \
            for (int r = 0; r < IDX_ROWS; r++) s[r] += fmax(hsum8(acc[r]), 0.0f) * ws;                               \
        }                                                                                                            \
        __global uint *out = keys + (ulong)t * max_vis + c0;                                                         \
        for (int r = 0; r < nr; r++) out[r] = order_key(s[r]);                                                       \
    }

#define LOAD8_F32(p, i) vload8(0, (p) + (i))
#define LOAD8_F16(p, i) vload_half8(0, (p) + (i))
IDX_SCORES(idx_scores_f32, float, LOAD8_F32)
IDX_SCORES(idx_scores_f16, half, LOAD8_F16)

/* One radix pass over the rows of the current prefix: the histogram of
 * the 8 bits at `shift`, then the bin holding the need-th best key. Every
 * barrier of idx_topk sits at the top level of the kernel (not in a loop
 * or branch), which all OpenCL compilers handle. */
#define IDX_RADIX_PASS(shift)                                                                                        \
    for (int i = lid; i < 256; i += L) hist[i] = 0;                                                                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
    for (long c = lid; c < n_rank; c += L) {                                                                         \
        uint key = keys[c];                                                                                          \
        if ((key & mask) == prefix) atomic_inc(&hist[(key >> (shift)) & 255u]);                                      \
    }                                                                                                                \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
    if (lid == 0) {                                                                                                  \
        uint above = 0;                                                                                              \
        int bin = 255;                                                                                               \
        for (; bin > 0; bin--) {                                                                                     \
            if (above + hist[bin] >= need) break;                                                                    \
            above += hist[bin];                                                                                      \
        }                                                                                                            \
        st[0] = prefix | ((uint)bin << (shift));                                                                     \
        st[1] = need - above;                                                                                        \
    }                                                                                                                \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                                    \
    prefix = st[0];                                                                                                  \
    need = st[1];                                                                                                    \
    mask |= 255u << (shift);                                                                                         \
    barrier(CLK_LOCAL_MEM_FENCE);

/* One work-group per token. Tokens that see at most k rows take rows
 * 0 … n_vis−1 and −1 after them. Otherwise four 8-bit radix passes find
 * the key of the k-th best row and how many rows with exactly that key
 * are kept (the lowest ones: ties go to the lower row); then each
 * work-item takes a contiguous run of rows, and prefix counts over the
 * runs place every kept row, so the list comes out in increasing row
 * order. With one work-item per group (CPU devices) this is a plain
 * sequential select. Local memory: hist [256], cnt [2·L], st [2]. */
__kernel void idx_topk(const __global uint *keys, long max_vis, int R, long pos0, int k, __global int *sel,
                       ulong sel_off, __local uint *hist, __local uint *cnt, __local uint *st)
{
    int t = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    long nv = (pos0 + t + 1) / R;
    __global int *out = sel + sel_off + (ulong)t * k;
    /* tokens that do not rank go through the passes over no rows */
    long n_rank = nv > k ? nv : 0;
    keys += (ulong)t * max_vis;
    uint prefix = 0, mask = 0, need = (uint)k;
    IDX_RADIX_PASS(24)
    IDX_RADIX_PASS(16)
    IDX_RADIX_PASS(8)
    IDX_RADIX_PASS(0)
    long per = (n_rank + L - 1) / L, c0 = lid * per, c1 = c0 + per < n_rank ? c0 + per : n_rank;
    uint gt = 0, eq = 0;
    for (long c = c0; c < c1; c++) {
        uint key = keys[c];
        gt += key > prefix;
        eq += key == prefix;
    }
    cnt[lid] = gt;
    cnt[L + lid] = eq;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0) {
        uint g = 0, e = 0;
        for (int i = 0; i < L; i++) {
            uint gi = cnt[i], ei = cnt[L + i];
            cnt[i] = g;
            cnt[L + i] = e;
            g += gi;
            e += ei;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!n_rank) {
        for (int i = lid; i < k; i += L) out[i] = i < nv ? i : -1;
        return;
    }
    uint g = cnt[lid], e = cnt[L + lid];
    for (long c = c0; c < c1; c++) {
        uint key = keys[c];
        if (key > prefix) {
            out[g + (e < need ? e : need)] = (int)c;
            g++;
        } else if (key == prefix) {
            if (e < need) out[g + e] = (int)c;
            e++;
        }
    }
}
