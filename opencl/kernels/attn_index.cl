/* attn_index.cl — the lightning indexer (doc/model.md §6.5): scores of the
 * visible indexer rows for each token, then the top-k rows per token by a
 * radix select over order-preserving keys and a compaction in row order.
 * Work is O(rows) per token whatever k is. */

inline float hsum16(float16 v) { return hsum8(v.lo + v.hi); }

/* An unsigned key with the order of the float (zeros of both signs equal). */
inline uint order_key(float f)
{
    if (f == 0.0f) f = 0.0f;
    uint u = as_uint(f);
    return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/* Heads in vector lanes: the queries transposed to [T][hd][nhp] and the
 * scaled head weights to [T][nhp], nhp = n_indexer_head rounded up to
 * IDX_HEADS with zeros (a zero head adds exactly nothing). One work-item
 * per (head, dim, token). */
#define IDX_HEADS 64

__kernel void idx_transpose(const __global float *q, ulong q_off, const __global float *wts, ulong w_off, int nh,
                            int hd, int nhp, float scale, int T, __global float *qT, __global float *ws, ulong ws_off)
{
    ws += ws_off;
    int h = get_global_id(0), d = get_global_id(1), t = get_global_id(2);
    if (h >= nhp || d >= hd || t >= T) return;
    qT[((ulong)t * hd + d) * nhp + h] = h < nh ? q[q_off + ((ulong)t * nh + h) * hd + d] : 0.0f;
    if (d == 0) ws[(ulong)t * nhp + h] = h < nh ? wts[w_off + (ulong)t * nh + h] * scale : 0.0f;
}

#define IDX_ROWS 4

/* CPU shape: one work-item per (IDX_ROWS rows, token), only for tokens that see more
 * rows than they keep: score[c] = Σ_h ws[h]·max(0, q_h·K[c]). The dot
 * products of IDX_HEADS heads run in four 16-lane accumulators per row,
 * one multiply-add per dim in dim order; the weighted sum is a
 * multiply-add per 16 heads, then one horizontal sum — the order of the
 * CPU backend's vector path, so on such hosts the scores agree to the bit.
 * Out: keys [T][max_vis]. */
#define IDX_SCORES(NAME, ELEM, LOAD1)                                                                                \
    __kernel void NAME(const __global float *qT, const __global float *ws, ulong ws_off, const __global ELEM *rows, \
                       ulong rows_off, int nhp, int hd, int R, long pos0, int T, int k, long max_vis,                \
                       __global uint *keys)                                                                          \
    {                                                                                                                \
        long c0 = (long)get_global_id(0) * IDX_ROWS;                                                                 \
        int t = get_global_id(1);                                                                                    \
        if (t >= T) return;                                                                                          \
        long nv = (pos0 + t + 1) / R;                                                                                \
        if (nv <= k || c0 >= nv) return;                                                                             \
        int nr = nv - c0 < IDX_ROWS ? (int)(nv - c0) : IDX_ROWS;                                                     \
        const __global ELEM *rp[IDX_ROWS];                                                                           \
        for (int r = 0; r < IDX_ROWS; r++) rp[r] = rows + rows_off + (ulong)(c0 + (r < nr ? r : 0)) * hd;            \
        qT += (ulong)t * hd * nhp;                                                                                   \
        ws += ws_off + (ulong)t * nhp;                                                                               \
        float16 s[IDX_ROWS];                                                                                         \
        for (int r = 0; r < IDX_ROWS; r++) s[r] = 0.0f;                                                              \
        for (int h0 = 0; h0 < nhp; h0 += IDX_HEADS) {                                                                \
            float16 a[IDX_ROWS][4];                                                                                  \
            for (int r = 0; r < IDX_ROWS; r++)                                                                       \
                for (int v = 0; v < 4; v++) a[r][v] = 0.0f;                                                          \
            for (int d = 0; d < hd; d++) {                                                                           \
                const __global float *qd = qT + (ulong)d * nhp + h0;                                                 \
                float16 q0 = vload16(0, qd), q1 = vload16(1, qd), q2 = vload16(2, qd), q3 = vload16(3, qd);          \
                for (int r = 0; r < IDX_ROWS; r++) {                                                                 \
                    float k1 = LOAD1(rp[r], d); /* (float16)vload_half(…) crashes clang 15 */                        \
                    float16 kd = (float16)(k1);                                                                      \
                    a[r][0] = fma(q0, kd, a[r][0]);                                                                  \
                    a[r][1] = fma(q1, kd, a[r][1]);                                                                  \
                    a[r][2] = fma(q2, kd, a[r][2]);                                                                  \
                    a[r][3] = fma(q3, kd, a[r][3]);                                                                  \
                }                                                                                                    \
            }                                                                                                        \
            for (int v = 0; v < 4; v++) {                                                                            \
                float16 wv = vload16(v, ws + h0);                                                                    \
                for (int r = 0; r < IDX_ROWS; r++) s[r] = fma(fmax(a[r][v], 0.0f), wv, s[r]);                        \
            }                                                                                                        \
        }                                                                                                            \
        __global uint *out = keys + (ulong)t * max_vis + c0;                                                         \
        for (int r = 0; r < nr; r++) out[r] = order_key(hsum16(s[r]));                                               \
    }

#define LOAD1_F32(p, i) (p)[i]
#define LOAD1_F16(p, i) vload_half((i), (p))
IDX_SCORES(idx_scores_f32, float, LOAD1_F32)
IDX_SCORES(idx_scores_f16, half, LOAD1_F16)

/* GPU shape: one work-item per (row, token), every head in turn. The
 * same operations in the same order as the lanes above (head 16v + j
 * accumulates into lane j), so both shapes give the same scores. */
#define IDX_SCORES_WI(NAME, ELEM, LOAD1)                                                                             \
    __kernel void NAME(const __global float *qT, const __global float *ws, ulong ws_off, const __global ELEM *rows, \
                       ulong rows_off, int nhp, int hd, int R, long pos0, int T, int k, long max_vis,                \
                       __global uint *keys)                                                                          \
    {                                                                                                                \
        long c = get_global_id(0);                                                                                   \
        int t = get_global_id(1);                                                                                    \
        if (t >= T) return;                                                                                          \
        long nv = (pos0 + t + 1) / R;                                                                                \
        if (nv <= k || c >= nv) return;                                                                              \
        const __global ELEM *kr = rows + rows_off + (ulong)c * hd;                                                   \
        qT += (ulong)t * hd * nhp;                                                                                   \
        ws += ws_off + (ulong)t * nhp;                                                                               \
        float sl[16];                                                                                                \
        for (int j = 0; j < 16; j++) sl[j] = 0.0f;                                                                   \
        for (int v = 0; v < nhp / 16; v++)                                                                           \
            for (int j = 0; j < 16; j++) {                                                                           \
                int h = 16 * v + j;                                                                                  \
                float dot = 0.0f;                                                                                    \
                for (int d = 0; d < hd; d++) dot = fma(qT[(ulong)d * nhp + h], LOAD1(kr, d), dot);                   \
                sl[j] = fma(fmax(dot, 0.0f), ws[h], sl[j]);                                                          \
            }                                                                                                        \
        keys[(ulong)t * max_vis + c] = order_key(hsum16(vload16(0, sl)));                                            \
    }

IDX_SCORES_WI(idx_scores_wi_f32, float, LOAD1_F32)
IDX_SCORES_WI(idx_scores_wi_f16, half, LOAD1_F16)

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
