/* attn.cl — the attention core (doc/model.md §6.6): for each token and
 * head, a sink-aware softmax over the raw window rows (oldest first) and
 * the compressed rows (all visible ones, or a selection list), values =
 * the same rows (one shared K=V head).
 *
 * Work split: a work-item takes one token, ATTN_HG heads and one block of
 * the token's row list (raw rows, then compressed rows), so each row chunk
 * it loads serves ATTN_HG heads. Within its block it runs an online
 * softmax over sub-blocks of ATTN_SB rows: the scores of a sub-block,
 * then a rescale of the running sum if the maximum grew, then the
 * weighted rows added in order. Block 0 starts from the sink (maximum =
 * sink, denominator = 1), so with one block per token the result is
 * scaled by 1/denominator once at the end, as the reference does; with
 * several blocks each leaves (max, sum, unscaled partial) and
 * attn_combine merges them in block order.
 *
 * That is the CPU-device shape (attn_part_*). GPUs get attn_wg_*: a
 * work-group of L lanes per (block, head, token), lanes striding the dims,
 * sub-blocks of L rows whose scores are reduced through local memory; the
 * same online softmax and the same block partials. */

#define ATTN_HG 8
#define ATTN_SB 32

inline float hsum16(float16 v) { return hsum8(v.lo + v.hi); }

inline float hmax16(float16 v)
{
    float8 a = fmax(v.lo, v.hi);
    float4 b = fmax(a.lo, a.hi);
    float2 c = fmax(b.lo, b.hi);
    return fmax(c.x, c.y);
}

/* The work-item's steps, for one cache element type:
 * scores two rows at a time (each query chunk loaded once for both), the
 * sub-block's exponentials as one 16-lane vector per head (unused lanes
 * hold −∞ and weigh 0), then the weighted rows added 16 dims at a time
 * with all ATTN_HG heads' sums in registers. hd is a multiple of 16. */
#define ATTN_PART(NAME, ELEM, LOAD16)                                                                                \
    __kernel void NAME(const __global float *q, ulong q_off, const __global ELEM *raw, ulong raw_off, long raw_rows, \
                       const __global ELEM *comp, ulong comp_off, long comp_rows, int R, const __global int *sel,    \
                       ulong sel_off, int sel_stride, int has_sel, const __global float *sinks, ulong sinks_off,     \
                       int H, int hd, int n_swa, float scale, long pos0, int T, long rb, int nb,                     \
                       __global float *acc_buf, ulong acc_off, __global float *mz)                                   \
    {                                                                                                                \
        int b = get_global_id(0), g = get_global_id(1), t = get_global_id(2);                                        \
        int h0 = g * ATTN_HG;                                                                                        \
        if (b >= nb || h0 >= H || t >= T) return;                                                                    \
        int nh = H - h0 < ATTN_HG ? H - h0 : ATTN_HG;                                                                \
        long p = pos0 + t, lo = p - n_swa + 1 > 0 ? p - n_swa + 1 : 0;                                               \
        long n_raw = p - lo + 1, n_comp = R == 0 ? 0 : has_sel ? sel_stride : (p + 1) / R;                           \
        long i0 = (long)b * rb, i1 = i0 + rb < n_raw + n_comp ? i0 + rb : n_raw + n_comp;                            \
        /* heads of this work-item: ATTN_HG slots, the ones past H repeat the last head and are never stored */     \
        ulong hs = (ulong)nb * hd;                                                                                   \
        __global float *acc = acc_buf + acc_off + (((ulong)t * H + h0) * nb + b) * hd;                               \
        const __global float *qh[ATTN_HG];                                                                           \
        float m[ATTN_HG], z[ATTN_HG];                                                                                \
        for (int hh = 0; hh < ATTN_HG; hh++) {                                                                       \
            int h = hh < nh ? hh : nh - 1;                                                                           \
            qh[hh] = q + q_off + ((ulong)t * H + h0 + h) * hd;                                                       \
            m[hh] = b == 0 ? sinks[sinks_off + h0 + h] : -INFINITY;                                                  \
            z[hh] = b == 0 ? 1.0f : 0.0f;                                                                            \
        }                                                                                                            \
        for (int hh = 0; hh < nh; hh++)                                                                              \
            for (int i = 0; i < hd; i += 16) vstore16((float16)0.0f, 0, acc + hh * hs + i);                          \
        const __global int *st = sel + sel_off + (ulong)t * sel_stride;                                              \
        for (long s0 = i0; s0 < i1;) {                                                                               \
            const __global ELEM *rp[ATTN_SB];                                                                        \
            int nr = 0;                                                                                              \
            for (; s0 < i1 && nr < ATTN_SB; s0++) {                                                                  \
                if (s0 < n_raw) {                                                                                    \
                    rp[nr++] = raw + raw_off + (ulong)((lo + s0) % raw_rows) * hd;                                   \
                } else {                                                                                             \
                    long c = has_sel ? (long)st[s0 - n_raw] : s0 - n_raw;                                            \
                    if (c >= 0 && c < comp_rows) rp[nr++] = comp + comp_off + (ulong)c * hd;                         \
                }                                                                                                    \
            }                                                                                                        \
            if (nr == 0) continue;                                                                                   \
            float w[ATTN_HG][ATTN_SB];                                                                               \
            for (int hh = 0; hh < ATTN_HG; hh++)                                                                     \
                for (int r = nr; r < ATTN_SB; r++) w[hh][r] = -INFINITY;                                             \
            for (int r = 0; r < nr; r += 2) {                                                                        \
                const __global ELEM *k0 = rp[r], *k1 = rp[r + 1 < nr ? r + 1 : r];                                   \
                float16 a0[ATTN_HG], a1[ATTN_HG];                                                                    \
                for (int hh = 0; hh < ATTN_HG; hh++) a0[hh] = a1[hh] = 0.0f;                                         \
                for (int i = 0; i < hd; i += 16) {                                                                   \
                    float16 kv0 = LOAD16(k0, i), kv1 = LOAD16(k1, i);                                                \
                    for (int hh = 0; hh < ATTN_HG; hh++) {                                                           \
                        float16 qv = vload16(0, qh[hh] + i);                                                         \
                        a0[hh] = fma(qv, kv0, a0[hh]);                                                               \
                        a1[hh] = fma(qv, kv1, a1[hh]);                                                               \
                    }                                                                                                \
                }                                                                                                    \
                for (int hh = 0; hh < ATTN_HG; hh++) {                                                               \
                    w[hh][r] = hsum16(a0[hh]) * scale;                                                               \
                    if (r + 1 < nr) w[hh][r + 1] = hsum16(a1[hh]) * scale;                                           \
                }                                                                                                    \
            }                                                                                                        \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                float mx = m[hh];                                                                                    \
                for (int v = 0; v < nr; v += 16) mx = fmax(mx, hmax16(vload16(0, w[hh] + v)));                      \
                if (mx > m[hh]) {                                                                                    \
                    float f = exp(m[hh] - mx);                                                                       \
                    z[hh] *= f;                                                                                      \
                    __global float *ah = acc + hh * hs;                                                              \
                    for (int i = 0; i < hd; i += 16) vstore16(vload16(0, ah + i) * f, 0, ah + i);                    \
                    m[hh] = mx;                                                                                      \
                }                                                                                                    \
                for (int v = 0; v < nr; v += 16) {                                                                   \
                    float16 e = exp(vload16(0, w[hh] + v) - m[hh]);                                                  \
                    z[hh] += hsum16(e);                                                                              \
                    vstore16(e, 0, w[hh] + v);                                                                       \
                }                                                                                                    \
            }                                                                                                        \
            for (int i = 0; i < hd; i += 16) {                                                                       \
                float16 o[ATTN_HG];                                                                                  \
                for (int hh = 0; hh < ATTN_HG; hh++) o[hh] = vload16(0, acc + (hh < nh ? hh : 0) * hs + i);          \
                for (int r = 0; r < nr; r++) {                                                                       \
                    float16 kv = LOAD16(rp[r], i);                                                                   \
                    for (int hh = 0; hh < ATTN_HG; hh++) o[hh] = fma((float16)w[hh][r], kv, o[hh]);                  \
                }                                                                                                    \
                for (int hh = 0; hh < ATTN_HG; hh++)                                                                 \
                    if (hh < nh) vstore16(o[hh], 0, acc + hh * hs + i);                                              \
            }                                                                                                        \
        }                                                                                                            \
        if (nb == 1) {                                                                                               \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                float inv = 1.0f / z[hh];                                                                            \
                __global float *ah = acc + hh * hs;                                                                  \
                for (int i = 0; i < hd; i += 16) vstore16(vload16(0, ah + i) * inv, 0, ah + i);                      \
            }                                                                                                        \
        } else {                                                                                                     \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                __global float *e = mz + (((ulong)t * H + h0 + hh) * nb + b) * 2;                                    \
                e[0] = m[hh];                                                                                        \
                e[1] = z[hh];                                                                                        \
            }                                                                                                        \
        }                                                                                                            \
    }

#define LOAD16_F32(p, i) vload16(0, (p) + (i))
#define LOAD16_F16(p, i) vload_half16(0, (p) + (i))
ATTN_PART(attn_part_f32, float, LOAD16_F32)
ATTN_PART(attn_part_f16, half, LOAD16_F16)

/* Row s of token t's list (raw rows, then compressed rows): its address,
 * or NULL for a selection entry that names no row. */
#define ATTN_ROW(ELEM, s)                                                                                            \
    ((s) < n_raw ? raw + raw_off + (ulong)((lo + (s)) % raw_rows) * hd                                              \
                 : attn_comp_row_##ELEM(comp + comp_off, comp_rows, has_sel ? (long)st[(s) - n_raw] : (s) - n_raw, hd))

inline const __global float *attn_comp_row_float(const __global float *comp, long comp_rows, long c, int hd)
{
    return c >= 0 && c < comp_rows ? comp + (ulong)c * hd : 0;
}

inline const __global half *attn_comp_row_half(const __global half *comp, long comp_rows, long c, int hd)
{
    return c >= 0 && c < comp_rows ? comp + (ulong)c * hd : 0;
}

/* GPU shape. Per sub-block of L rows: each lane's partial dot products
 * over its dims for every row (into part [L][L]), lane r sums row r's, all
 * lanes take the new maximum, lane r its row's weight, then each lane
 * adds the weighted rows into its dims of the block's sums (kept in acc,
 * rescaled when the maximum grows). No early return: every barrier is
 * reached by the whole group (PoCL needs that). Local memory: part [L·L],
 * wl [L]. */
#define ATTN_WG(NAME, ELEM, LOAD1)                                                                                   \
    __kernel void NAME(const __global float *q, ulong q_off, const __global ELEM *raw, ulong raw_off, long raw_rows, \
                       const __global ELEM *comp, ulong comp_off, long comp_rows, int R, const __global int *sel,    \
                       ulong sel_off, int sel_stride, int has_sel, const __global float *sinks, ulong sinks_off,     \
                       int H, int hd, int n_swa, float scale, long pos0, int T, long rb, int nb,                     \
                       __global float *acc_buf, ulong acc_off, __global float *mz, __local float *part,              \
                       __local float *wl)                                                                            \
    {                                                                                                                \
        int b = get_group_id(0), h = get_group_id(1), t = get_group_id(2);                                           \
        int lid = get_local_id(0), L = get_local_size(0);                                                            \
        long p = pos0 + t, lo = p - n_swa + 1 > 0 ? p - n_swa + 1 : 0;                                               \
        long n_raw = p - lo + 1, n_comp = R == 0 ? 0 : has_sel ? sel_stride : (p + 1) / R;                           \
        long i0 = (long)b * rb, i1 = i0 + rb < n_raw + n_comp ? i0 + rb : n_raw + n_comp;                            \
        const __global float *qh = q + q_off + ((ulong)t * H + h) * hd;                                              \
        __global float *acc = acc_buf + acc_off + (((ulong)t * H + h) * nb + b) * hd;                                \
        const __global int *st = sel + sel_off + (ulong)t * sel_stride;                                              \
        float m = b == 0 ? sinks[sinks_off + h] : -INFINITY, z = b == 0 ? 1.0f : 0.0f;                              \
        for (int d = lid; d < hd; d += L) acc[d] = 0.0f;                                                             \
        for (long s0 = i0; s0 < i1; s0 += L) {                                                                       \
            int nr = i1 - s0 < L ? (int)(i1 - s0) : L;                                                               \
            for (int r = 0; r < nr; r++) {                                                                           \
                const __global ELEM *kr = ATTN_ROW(ELEM, s0 + r);                                                    \
                float dot = 0.0f;                                                                                    \
                if (kr)                                                                                              \
                    for (int d = lid; d < hd; d += L) dot = fma(qh[d], LOAD1(kr, d), dot);                           \
                part[r * L + lid] = dot;                                                                             \
            }                                                                                                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                            \
            if (lid < nr) {                                                                                          \
                float dot = 0.0f;                                                                                    \
                for (int j = 0; j < L; j++) dot += part[lid * L + j];                                                \
                wl[lid] = ATTN_ROW(ELEM, s0 + lid) ? dot * scale : -INFINITY;                                        \
            }                                                                                                        \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                            \
            float mx = m;                                                                                            \
            for (int r = 0; r < nr; r++) mx = fmax(mx, wl[r]);                                                       \
            float f = mx > m ? exp(m - mx) : 1.0f;                                                                   \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                            \
            if (lid < nr) wl[lid] = wl[lid] > -INFINITY ? exp(wl[lid] - mx) : 0.0f;                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                            \
            z *= f;                                                                                                  \
            for (int r = 0; r < nr; r++) z += wl[r];                                                                 \
            for (int d = lid; d < hd; d += L) {                                                                      \
                float o = acc[d] * f;                                                                                \
                for (int r = 0; r < nr; r++) {                                                                       \
                    const __global ELEM *kr = ATTN_ROW(ELEM, s0 + r);                                                \
                    if (kr) o = fma(wl[r], LOAD1(kr, d), o);                                                         \
                }                                                                                                    \
                acc[d] = o;                                                                                          \
            }                                                                                                        \
            m = mx;                                                                                                  \
            barrier(CLK_LOCAL_MEM_FENCE);                                                                            \
        }                                                                                                            \
        if (nb == 1) {                                                                                               \
            float inv = 1.0f / z;                                                                                    \
            for (int d = lid; d < hd; d += L) acc[d] *= inv;                                                         \
        } else if (lid == 0) {                                                                                       \
            __global float *e = mz + (((ulong)t * H + h) * nb + b) * 2;                                              \
            e[0] = m;                                                                                                \
            e[1] = z;                                                                                                \
        }                                                                                                            \
    }

#define LOAD1_F32(p, i) (p)[i]
#define LOAD1_F16(p, i) vload_half((i), (p))
ATTN_WG(attn_wg_f32, float, LOAD1_F32)
ATTN_WG(attn_wg_f16, half, LOAD1_F16)

/* One work-item per (head, token) when a token's rows were split over nb
 * blocks: the common maximum, the denominator summed in block order, the
 * partials rescaled and summed in block order, one scale at the end. */
__kernel void attn_combine(const __global float *part, const __global float *mz, int H, int hd, int nb, int T,
                           __global float *o, ulong o_off)
{
    int h = get_global_id(0), t = get_global_id(1);
    if (h >= H || t >= T) return;
    const __global float *e = mz + ((ulong)t * H + h) * nb * 2;
    const __global float *ph = part + ((ulong)t * H + h) * nb * hd;
    __global float *oh = o + o_off + ((ulong)t * H + h) * hd;
    float mx = -INFINITY;
    for (int b = 0; b < nb; b++) mx = fmax(mx, e[2 * b]);
    float z = 0.0f;
    for (int b = 0; b < nb; b++)
        if (e[2 * b + 1] > 0.0f) z += e[2 * b + 1] * exp(e[2 * b] - mx);
    for (int i = 0; i < hd; i += 8) vstore8((float8)0.0f, 0, oh + i);
    for (int b = 0; b < nb; b++) {
        if (!(e[2 * b + 1] > 0.0f)) continue;
        float f = exp(e[2 * b] - mx);
        for (int i = 0; i < hd; i += 8) vstore8(vload8(0, oh + i) + f * vload8(0, ph + (ulong)b * hd + i), 0, oh + i);
    }
    float inv = 1.0f / z;
    for (int i = 0; i < hd; i += 8) vstore8(vload8(0, oh + i) * inv, 0, oh + i);
}
