/* attn_comp.cl — the compressor (doc/model.md §6.4): gated softmax pooling
 * of each window that ends inside a chunk, and the frontier ring that
 * keeps every token's candidates for windows finished by a later chunk.
 *
 * Ring slot (p mod front_rows) holds token p's values a (W floats) then
 * its scores b + ape[p mod R] (W floats), W = lanes·d. */

typedef struct {
    const __global float *a, *b;      /* the chunk: [T][W] */
    const __global uchar *ape;        /* [R] rows of a dense type */
    const __global float *front;      /* the ring */
    int ape_type;
    ulong ape_row_bytes;
    long pos0, front_rows;
    int R, W;
} comp_src;

/* Score of candidate element j of token p: from the chunk (plus its ape
 * row, as the CPU backend adds it) or from the ring (ape already in). */
inline float comp_score(const comp_src *s, long p, int j)
{
    if (p >= s->pos0)
        return s->b[(p - s->pos0) * s->W + j] + dense_elem(s->ape_type, s->ape + (ulong)(p % s->R) * s->ape_row_bytes, j);
    return s->front[(p % s->front_rows) * 2 * s->W + s->W + j];
}

inline float comp_value(const comp_src *s, long p, int j)
{
    if (p >= s->pos0) return s->a[(p - s->pos0) * s->W + j];
    return s->front[(p % s->front_rows) * 2 * s->W + j];
}

/* One work-item per (dim i, emitted window): pooled[i] = Σ softmax(score)·
 * value over the window's candidates. Two lanes: the previous window's
 * tokens with lane A (dims [0, d)) and this window's with lane B (dims
 * [d, 2d)), interleaved token by token as the CPU backend sums them. */
__kernel void comp_pool(const __global float *a, ulong a_off, const __global float *b, ulong b_off,
                        const __global uchar *ape, ulong ape_off, int ape_type, ulong ape_row_bytes,
                        const __global float *front, ulong front_off, long front_rows, int R, int lanes, int d,
                        long pos0, long w_first, int n_emit, __global float *pooled, ulong pooled_off)
{
    int i = get_global_id(0), wi = get_global_id(1);
    if (i >= d || wi >= n_emit) return;
    comp_src s = { a + a_off, b + b_off, ape + ape_off, front + front_off, ape_type, ape_row_bytes,
                   pos0, front_rows, R, lanes * d };
    long w = w_first + wi;
    long tok[2];
    int off[2], ns = 0;
    if (lanes == 2 && w > 0) {
        tok[ns] = (w - 1) * R;
        off[ns++] = 0;
    }
    tok[ns] = w * R;
    off[ns++] = lanes == 2 ? d : 0;
    float mx = -INFINITY;
    for (int r = 0; r < R; r++)
        for (int q = 0; q < ns; q++) mx = fmax(mx, comp_score(&s, tok[q] + r, off[q] + i));
    float num = 0.0f, den = 0.0f;
    for (int r = 0; r < R; r++) {
        if (ns == 2) {
            float e0 = exp(comp_score(&s, tok[0] + r, off[0] + i) - mx);
            float e1 = exp(comp_score(&s, tok[1] + r, off[1] + i) - mx);
            den += e0 + e1;
            num += e0 * comp_value(&s, tok[0] + r, off[0] + i);
            num += e1 * comp_value(&s, tok[1] + r, off[1] + i);
        } else {
            float e0 = exp(comp_score(&s, tok[0] + r, off[0] + i) - mx);
            den += e0;
            num += e0 * comp_value(&s, tok[0] + r, off[0] + i);
        }
    }
    pooled[pooled_off + (ulong)wi * d + i] = den > 0.0f ? num / den : 0.0f;
}

/* One work-item per (element j, token t): the chunk's candidates into the
 * ring, after the pooling that may still read the slots they replace. */
__kernel void comp_store(const __global float *a, ulong a_off, const __global float *b, ulong b_off,
                         const __global uchar *ape, ulong ape_off, int ape_type, ulong ape_row_bytes,
                         __global float *front, ulong front_off, long front_rows, int R, int W, long pos0, int T)
{
    int j = get_global_id(0), t = get_global_id(1);
    if (j >= W || t >= T) return;
    long p = pos0 + t;
    __global float *slot = front + front_off + (p % front_rows) * 2 * W;
    slot[j] = a[a_off + (ulong)t * W + j];
    slot[W + j] = b[b_off + (ulong)t * W + j] + dense_elem(ape_type, ape + ape_off + (ulong)(p % R) * ape_row_bytes, j);
}
