/* attn.cl — the attention core (ds4-forward §7.8): for each token and
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
 * attn_combine merges them in block order. */

#define ATTN_HG 8
#define ATTN_SB 16

#define ATTN_PART(NAME, ELEM, LOAD8)                                                                                 \
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
            for (int i = 0; i < hd; i += 8) vstore8((float8)0.0f, 0, acc + hh * hs + i);                             \
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
            for (int r = 0; r < nr; r++) {                                                                           \
                float8 a[ATTN_HG];                                                                                   \
                for (int hh = 0; hh < ATTN_HG; hh++) a[hh] = 0.0f;                                                   \
                for (int i = 0; i < hd; i += 8) {                                                                    \
                    float8 kv = LOAD8(rp[r], i);                                                                     \
                    for (int hh = 0; hh < ATTN_HG; hh++) a[hh] = fma(vload8(0, qh[hh] + i), kv, a[hh]);              \
                }                                                                                                    \
                for (int hh = 0; hh < ATTN_HG; hh++) w[hh][r] = hsum8(a[hh]) * scale;                                \
            }                                                                                                        \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                float mx = m[hh];                                                                                    \
                for (int r = 0; r < nr; r++) mx = fmax(mx, w[hh][r]);                                                \
                if (mx > m[hh]) {                                                                                    \
                    float f = exp(m[hh] - mx);                                                                       \
                    z[hh] *= f;                                                                                      \
                    __global float *ah = acc + hh * hs;                                                              \
                    for (int i = 0; i < hd; i += 8) vstore8(vload8(0, ah + i) * f, 0, ah + i);                       \
                    m[hh] = mx;                                                                                      \
                }                                                                                                    \
                for (int r = 0; r < nr; r++) {                                                                       \
                    float e = exp(w[hh][r] - m[hh]);                                                                 \
                    w[hh][r] = e;                                                                                    \
                    z[hh] += e;                                                                                      \
                }                                                                                                    \
            }                                                                                                        \
            for (int i = 0; i < hd; i += 8) {                                                                        \
                float8 o[ATTN_HG];                                                                                   \
                for (int hh = 0; hh < ATTN_HG; hh++) o[hh] = vload8(0, acc + (hh < nh ? hh : 0) * hs + i);           \
                for (int r = 0; r < nr; r++) {                                                                       \
                    float8 kv = LOAD8(rp[r], i);                                                                     \
                    for (int hh = 0; hh < ATTN_HG; hh++) o[hh] += w[hh][r] * kv;                                     \
                }                                                                                                    \
                for (int hh = 0; hh < ATTN_HG; hh++)                                                                 \
                    if (hh < nh) vstore8(o[hh], 0, acc + hh * hs + i);                                               \
            }                                                                                                        \
        }                                                                                                            \
        if (nb == 1) {                                                                                               \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                float inv = 1.0f / z[hh];                                                                            \
                __global float *ah = acc + hh * hs;                                                                  \
                for (int i = 0; i < hd; i += 8) vstore8(vload8(0, ah + i) * inv, 0, ah + i);                         \
            }                                                                                                        \
        } else {                                                                                                     \
            for (int hh = 0; hh < nh; hh++) {                                                                        \
                __global float *e = mz + (((ulong)t * H + h0 + hh) * nb + b) * 2;                                    \
                e[0] = m[hh];                                                                                        \
                e[1] = z[hh];                                                                                        \
            }                                                                                                        \
        }                                                                                                            \
    }

#define LOAD8_F32(p, i) vload8(0, (p) + (i))
#define LOAD8_F16(p, i) vload_half8(0, (p) + (i))
ATTN_PART(attn_part_f32, float, LOAD8_F32)
ATTN_PART(attn_part_f16, half, LOAD8_F16)

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
