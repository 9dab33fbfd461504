/* router.cl — expert selection (doc/model.md §7.1): sqrt-softplus
 * probabilities, the k experts of highest probability + bias (or the hash
 * table's row for the token) and their weights, in the CPU backend's
 * order of operations. */

/* log(u) for u ≥ 1, without the library's log: libclc's log and log1p
 * read lookup tables, which a driver may reach through a hidden kernel
 * argument read where they are used, here inside the expert loop (Mesa's
 * llvmpipe then warns that it treats that read as uniform). u = m·2^e
 * with m in [√½, √2), log m = 2·atanh(s), s = (m − 1)/(m + 1), |s| ≤
 * 0.172: the series to s¹¹ is exact to f32's precision. */
inline float log_ge1(float u)
{
    int bits = as_int(u), e = ((bits >> 23) & 255) - 127;
    float m = as_float((bits & 0x007fffff) | 0x3f800000);
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = s2 * (1.0f / 3.0f + s2 * (1.0f / 5.0f + s2 * (1.0f / 7.0f + s2 * (1.0f / 9.0f + s2 * (1.0f / 11.0f)))));
    /* ln 2 in two parts, so that e·ln 2 keeps f32's precision up to e = 29 */
    return (float)e * 0.693145751953125f + ((float)e * 1.428606820e-06f + (2.0f * s + 2.0f * s * p));
}

/* log(1 + x) for x > 0: log(1 + x) rounded, rescaled by x / ((1 + x) − 1)
 * to undo the rounding of 1 + x (Goldberg's identity). */
inline float log1p_pos(float x)
{
    float u = 1.0f + x;
    return u == 1.0f ? x : log_ge1(u) * (x / (u - 1.0f));
}

/* sqrt(softplus(z)), with the CPU backend's cut-offs. */
inline float router_prob(float z)
{
    float sp = z > 20.0f ? z : z < -20.0f ? exp(z) : log1p_pos(exp(z));
    return sqrt(sp);
}

/* One work-item per token: k is small (6 at Flash) and the experts few
 * (256), so an insertion top-k over the experts is a few hundred
 * comparisons. The kept scores live in the token's weight slots until the
 * weights replace them, so any k works without private arrays. An equal
 * score never displaces a kept one: ties go to the lower expert id. A token
 * id outside the hash table (which the schedule never passes) routes by
 * score, so the ids handed on are always valid experts. */
__kernel void router_topk(const __global float *logits, ulong lg_off, const __global float *bias, ulong bias_off,
                          int has_bias, const __global int *tid2eid, ulong tid_off, int has_tid, int n_tid,
                          const __global int *tokens, ulong tok_off, __global int *sel, ulong sel_off,
                          __global float *wt, ulong wt_off, int E, int k, int norm, float wscale, int T)
{
    int t = get_global_id(0);
    if (t >= T) return;
    const __global float *lg = logits + lg_off + (ulong)t * E;
    __global int *s = sel + sel_off + (ulong)t * k;
    __global float *w = wt + wt_off + (ulong)t * k;
    int tok = has_tid ? tokens[tok_off + t] : -1;
    if (has_tid && tok >= 0 && tok < n_tid) {
        const __global int *row = tid2eid + tid_off + (ulong)tok * k;
        for (int i = 0; i < k; i++) s[i] = row[i];
    } else {
        int n = 0;
        for (int e = 0; e < E; e++) {
            float sc = router_prob(lg[e]) + (has_bias ? bias[bias_off + e] : 0.0f);
            if (n == k && !(sc > w[k - 1])) continue;
            int p = n < k ? n++ : k - 1;
            while (p > 0 && sc > w[p - 1]) {
                s[p] = s[p - 1];
                w[p] = w[p - 1];
                p--;
            }
            s[p] = e;
            w[p] = sc;
        }
    }
    float sum = 0.0f;
    for (int i = 0; i < k; i++) {
        int e = s[i];
        sum += e >= 0 && e < E ? router_prob(lg[e]) : 0.0f;
    }
    float den = norm ? fmax(sum, 6.103515625e-5f) : 1.0f;
    for (int i = 0; i < k; i++) {
        int e = s[i];
        float pr = e >= 0 && e < E ? router_prob(lg[e]) : 0.0f;
        w[i] = pr / den * wscale;
    }
}
