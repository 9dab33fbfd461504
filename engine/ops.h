/* ops.h — the DS4 forward pass as a schedule of operations over device
 * buffers: the contract between the schedule (engine/forward.c, written
 * once) and each compute backend (CPU: cpu/; OpenCL: opencl/).
 *
 * The schedule owns the order of operations, every buffer (activations,
 * KV caches, compressor frontiers) and their layouts; a backend owns the
 * memory behind a ds4_buf and the arithmetic of each operation. The model's
 * math: doc/model.md (§ numbers below refer to it).
 *
 * ---- Design rules -------------------------------------------------------
 *
 * - Nothing inside a chunk goes through the host. Router choices, indexer
 *   top-k and expert weights are produced into device buffers and consumed
 *   by the next operation; the schedule reads back only the logits of a
 *   chunk's last token (and, when a trace hook is set, intermediates).
 *   Operations may be queued asynchronously; read() waits for all work
 *   queued before it.
 * - Every operation works on T tokens at consecutive positions pos0 …
 *   pos0+T−1 (a prefill chunk, or T = 1 for decode), row-major [T][…].
 *   All counts the schedule needs (rows emitted by a compressor in this
 *   chunk, whether the indexer must rank) follow from pos0 and T, so no
 *   size is data dependent.
 * - A batched decode step (ds4_sessions_eval) holds one row for each of
 *   several sequences: the ops without a position or session state
 *   (embed, hc_*, rmsnorm, matmul, swiglu, add, sim, router, moe) get all
 *   rows at once, whatever sequence each row belongs to; the others
 *   (rope, store_rows, compress, indexer, attention) get one sequence's
 *   rows at a time, through views (view) at that sequence's row of the
 *   step's buffers, so every op must accept a view at any row offset.
 * - Activations are f32. Index buffers (token ids, expert ids, selected
 *   rows) are int32. Cached KV rows are f32 or f16 (ds4_cache_type), chosen
 *   per session by the numerics (f16 when the cache rounding simulation is
 *   on: the stored values are then exactly representable).
 * - Weights are ds4_tensor views of the bound model (engine/model.h); the
 *   pointers stay valid for the engine's lifetime, so a backend may key
 *   device copies made at open time by tensor pointer or data pointer.
 *   Weight types are those model.h accepts; every op must handle all of
 *   them for the tensors it takes.
 * - Results must depend only on the inputs, not on T, pos0 or the thread
 *   count: a token computed inside a chunk of 256 and alone must give the
 *   same bits, if the backend can (the CPU backend does); at least they
 *   must agree to f32 rounding (ordering) differences.
 * - One pass may run on several backends (the placement, engine/forward.h):
 *   each buffer then has a copy on every backend that uses it and the
 *   schedule hands the current bytes over before an op reads them
 *   (engine/xbuf.h). An op only ever sees buffers of its own backend.
 * - Each op returns 0, or -1 after recording a message the backend hands
 *   back through last_error(). After an error the schedule abandons the
 *   chunk; the session state is then reset by the caller.
 * - The contract is checked end to end: tests/test_golden_opencl.c runs
 *   the golden comparisons and CPU-snapshot resumption on the OpenCL
 *   backend (ds4_backend_opencl built on forward.h), and the CPU backend's
 *   ops are the reference for any single op.
 *
 * ---- Model constants -----------------------------------------------------
 *
 * A backend context (`void *ctx`) is made for one bound model; ops read
 * the hyper-parameters they name below (ds4_hparams, engine/model.h) from
 * it: n_embd D, n_hc, hc_eps, hc_sinkhorn_iters, rms_eps, head_dim,
 * n_head H, n_swa, n_nope, n_expert, n_expert_used k, expert_weights_scale,
 * expert_weights_norm, n_indexer_head, indexer_head_dim, indexer_top_k.
 *
 * ---- Session state layouts (owned by the schedule, read by ops) ----------
 *
 * raw ring (every layer): raw_rows × head_dim cache elements; the row of
 *   position p lives in slot p mod raw_rows. raw_rows ≥ n_swa + T − 1
 *   so a whole chunk can be stored before attention reads it.
 * compressed rows (R ≠ 0) and indexer rows (R = 4): row c (window c) at
 *   slot c, row width head_dim / indexer_head_dim, cache elements.
 * compressor frontier: front_rows slots of 2·W f32 (W = lanes·d): slot
 *   p mod front_rows holds token p's candidate values a (W floats) then
 *   its scores b + ape[p mod R] (W floats). front_rows ≥ lanes·R + T
 *   so every token a chunk's windows pool over is either in the chunk or
 *   still in the ring.
 */
#ifndef DS4CL_OPS_H
#define DS4CL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

typedef struct ds4_buf ds4_buf; /* backend memory; opaque to the schedule */

typedef enum {
    DS4_CACHE_F32 = 0,
    DS4_CACHE_F16 = 1, /* IEEE half, round to nearest even on store */
} ds4_cache_type;

/* In-place rounding simulations and rotations of rows (§2.2, §2.3). */
typedef enum {
    DS4_SIM_FP8_NOPE = 0, /* e4m3 round trip of dims [0, n_nope) in blocks of 64 */
    DS4_SIM_HADAMARD,     /* Walsh–Hadamard transform (Sylvester order) · dim^-1/2 */
    DS4_SIM_HADAMARD_FP4, /* the same, then e2m1 round trip in blocks of 32 */
} ds4_sim;

/* One hyper-connection site: fn [n_hc·D → 2·n_hc + n_hc²], scale [3],
 * base [2·n_hc + n_hc²] (per layer: attention and FFN; and the output head,
 * whose fn has n_hc rows, scale [1], base [n_hc]). */
typedef struct {
    const ds4_tensor *fn, *scale, *base;
} ds4_hc_site;

/* RoPE of one layer kind (ratio 0, or compressed with YaRN), in the f32
 * terms of the reference (see rope below); made by the schedule from the
 * hyper-parameters with rope_params() (engine/numerics.h). */
typedef struct {
    int n_rot;
    float theta_scale; /* powf(freq_base, −2/n_rot) */
    float freq_scale, ext_factor, attn_factor, corr_lo, corr_hi;
} ds4_rope;

typedef struct ds4_ops {
    const char *name;

    /* Message of the last failure (valid until the next op). */
    const char *(*last_error)(void *ctx);

    /* ---- memory ---------------------------------------------------------
     * alloc: zero-filled, NULL when out of memory. view: a sub-range of a
     * buffer usable wherever a buffer is (no copy; released separately, not
     * after its base). write/read/copy are byte ranges; read waits for all
     * queued work. */
    ds4_buf *(*alloc)(void *ctx, size_t bytes);
    ds4_buf *(*view)(void *ctx, ds4_buf *base, size_t offset, size_t bytes);
    void (*release)(void *ctx, ds4_buf *b);
    int (*write)(void *ctx, ds4_buf *dst, size_t offset, const void *src, size_t bytes);
    int (*read)(void *ctx, ds4_buf *src, size_t offset, void *dst, size_t bytes);
    int (*copy)(void *ctx, ds4_buf *dst, size_t dst_offset, ds4_buf *src, size_t src_offset, size_t bytes);
    /* Waits until all queued work is done. NULL on a backend whose ops
     * finish before they return. */
    int (*finish)(void *ctx);
    /* The bytes of b when the backend keeps them in host memory that the
     * caller may read and write directly once finish() returned (the CPU
     * backend); NULL otherwise, or when the member is NULL. Hand-overs
     * between backends (engine/xbuf.h) use it to skip a staging copy. */
    void *(*host)(void *ctx, ds4_buf *b);

    /* ---- embedding and hyper-connections (§4, §5, §8) ---------------------
     *
     * embed: S[t][i][·] = f32(table row tokens[t]) for each of the n_hc
     * streams i. tokens: int32 [T]; S: [T][n_hc][D].
     *
     * hc_pre: per token, r = 1/sqrt(mean(S²) + rms_eps) over all n_hc·D
     * values; mix = fn·(S·r); pre[i] = σ(mix[i]·scale[0] + base[i]) +
     * hc_eps; post[i] = 2σ(mix[n_hc+i]·scale[1] + base[n_hc+i]); comb =
     * Sinkhorn(mix[2n_hc …]·scale[2] + base[2n_hc …]) with hc_sinkhorn_iters
     * column normalisations (§5); x = Σ_i pre[i]·S[i].
     * Out: x [T][D], post [T][n_hc], comb [T][n_hc][n_hc] with comb[j][k] =
     * weight of source stream j in destination stream k.
     *
     * hc_post: S_out[t][k] = post[t][k]·F[t] + Σ_j comb[t][j][k]·S_in[t][j].
     * S_out must not alias S_in.
     *
     * hc_head (output collapse): a[i] = σ(mix[i]·scale[0] + base[i]) +
     * hc_eps with mix = fn·(S·r) as in hc_pre; y = Σ_i a[i]·S[i]; y [T][D]. */
    int (*embed)(void *ctx, const ds4_tensor *table, ds4_buf *tokens, int T, ds4_buf *S);
    int (*hc_pre)(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *x, ds4_buf *post,
                  ds4_buf *comb);
    int (*hc_post)(void *ctx, ds4_buf *S_in, ds4_buf *F, ds4_buf *post, ds4_buf *comb, int T,
                   ds4_buf *S_out);
    int (*hc_head)(void *ctx, const ds4_hc_site *w, ds4_buf *S, int T, ds4_buf *y);

    /* ---- dense math --------------------------------------------------------
     *
     * rmsnorm: n_rows rows of n: y = x·w/sqrt(mean(x²) + rms_eps) (Σx² may
     * be accumulated in double); w: F32 tensor of n, or NULL for no
     * weight. x == y allowed.
     *
     * matmul: y[t] = W·x[t] for t < T with W [in, out] (out rows of in).
     * With n_groups > 1 the rows split into n_groups equal blocks and block
     * g reads x[t][g·in … (g+1)·in): x is [T][n_groups·in], y [T][out]
     * (the grouped attention output projection, §6.7). Exactly
     * dequant(W)·x in f32: activations are never quantized.
     *
     * swiglu: mid = silu(min(g, clamp)) · max(−clamp, min(u, clamp)) over
     * [T][n]; clamp ≤ 1e-6 disables both clamps.
     *
     * add: y = a + b over n floats (y may alias a or b). */
    int (*rmsnorm)(void *ctx, ds4_buf *x, const ds4_tensor *w, int64_t n_rows, int n, ds4_buf *y);
    int (*matmul)(void *ctx, const ds4_tensor *W, ds4_buf *x, int T, int n_groups, ds4_buf *y);
    int (*swiglu)(void *ctx, ds4_buf *g, ds4_buf *u, int T, int n, float clamp, ds4_buf *mid);
    int (*add)(void *ctx, ds4_buf *a, ds4_buf *b, int64_t n, ds4_buf *y);

    /* ---- positions and rounding --------------------------------------------
     *
     * rope: x is [n_rows][n_heads][dim]; the last n_rot dims of every head
 * are rotated in adjacent pairs (§2.1), row r at position p = pos0 +
 * r·pos_step, with exactly this f32 arithmetic (the reference's, so that
 * angles agree to the bit): te = (float)p; for pair k = 0, 1, …: ti =
 * freq_scale·te; θ = ti; m = attn_factor; if ext_factor ≠ 0 { y = ((float)k
 * − corr_lo)/fmaxf(0.001, corr_hi − corr_lo); mix = (1 − fminf(1, fmaxf(0,
 * y)))·ext_factor; θ = ti·(1 − mix) + te·mix; m ·= 1 + 0.1·logf(1/freq_scale)
 * }; c = cosf(θ)·m; s = ±sinf(θ)·m (− for inverse); (x0, x1) ← (x0·c − x1·s,
 * x0·s + x1·c); te ·= theta_scale. In place.
 *
 * sim: in-place rounding simulation / rotation of n_rows rows of dim
     * (see ds4_sim; FP8_NOPE touches dims [0, n_nope) only).
     *
     * store_rows: converts n_rows f32 rows of dim from src into dst (cache
     * elements of type ct) at slots (row0 + i) mod ring_rows, or row0 + i
     * when ring_rows is 0. */
    int (*rope)(void *ctx, ds4_buf *x, int64_t n_rows, int n_heads, int dim, const ds4_rope *rope, int64_t pos0,
                int pos_step, int inverse);
    int (*sim)(void *ctx, ds4_buf *x, int64_t n_rows, int dim, ds4_sim kind);
    int (*store_rows)(void *ctx, ds4_buf *src, int64_t n_rows, int dim, ds4_buf *dst, ds4_cache_type ct,
                      int64_t row0, int64_t ring_rows);

    /* ---- compressed attention (§6.4–6.6) -----------------------------------
     *
     * compress: one compressor over tokens pos0 … pos0+T−1 of a layer with
     * ratio R and lanes C (2 when R = 4), row width d, W = C·d.
     * a, b: [T][W] (Wkv·xn, Wgate·xn); ape: [R][W] (row p mod R is added to
     * b). For each window w that ends inside the chunk ((p+1) mod R = 0),
     * pooled[i] = Σ softmax(score)·value over the candidates of dim i:
     * C = 1: tokens wR … wR+R−1, (a[i], b[i]); C = 2: tokens (w−1)R … wR−1
     * with (a[i], b[i]) (none when w = 0) and tokens wR … wR+R−1 with
     * (a[d+i], b[d+i]). Candidates before pos0 come from the frontier ring
     * (layout above). Afterwards the chunk's tokens are written into the
     * ring. Out: pooled [n_emit][d], n_emit = ⌊(pos0+T)/R⌋ − ⌊pos0/R⌋ rows in
     * window order (norm, RoPE at w·R, rounding and storing are separate
     * ops). pooled may be NULL when n_emit = 0.
     *
     * indexer: for each token t at p = pos0 + t, over the n_vis = ⌊(p+1)/4⌋
     * (generally ⌊(p+1)/R⌋) visible indexer rows K[c] (cache type ct):
     * score[c] = Σ_h weights[t][h]·scale·max(0, q[t][h]·K[c]) with
     * scale = (indexer_head_dim·n_indexer_head)^-1/2, h < n_indexer_head;
     * sel[t] = the indexer_top_k rows of highest score (ties: lower row
     * index first), listed in increasing row order; when n_vis ≤ top_k,
     * rows 0 … n_vis−1; unused entries −1. q: [T][n_indexer_head]
     * [indexer_head_dim], already rotated (RoPE, Hadamard, rounding) by
     * the schedule; weights: [T][n_indexer_head], proj·xn as computed;
     * sel: int32 [T][indexer_top_k]. The schedule calls it only when some
     * token of the chunk sees more than top_k rows (otherwise attention
     * gets sel = NULL, which means the same rows).
     *
     * attention: for each token t at p = pos0 + t and head h < H: rows =
     * the raw ring rows of positions max(0, p−n_swa+1) … p, plus compressed
     * rows: none when R = 0; with sel (int32 [T][sel_stride], −1 = unused)
     * the listed rows; else all c < ⌊(p+1)/R⌋. s_r = q_h·k_r/sqrt(head_dim);
     * o_h = Σ_r e^{s_r−m}·k_r / (e^{sink_h−m} + Σ_r e^{s_r−m}), m = max(sink_h,
     * max s_r) (§6.6). q, o: [T][H][head_dim]; sinks: F32 [H]. The
     * reference accumulates Σ e^{s_r−m}·k_r over raw rows (oldest first),
     * then compressed rows (increasing index), and scales by 1/denominator
     * once at the end; the CPU backend does the same. */
    int (*compress)(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front,
                    int64_t front_rows, int R, int lanes, int d, int64_t pos0, int T, ds4_buf *pooled);
    int (*indexer)(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R,
                   int64_t pos0, int T, ds4_buf *sel);
    int (*attention)(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows,
                     ds4_buf *comp, int R, ds4_buf *sel, int sel_stride, const ds4_tensor *sinks,
                     int64_t pos0, int T, ds4_buf *o);

    /* ---- mixture of experts (§7) ---------------------------------------------
     *
     * router: prob = sqrt(softplus(logits)) over [T][n_expert]. Selection:
     * with tid2eid (hash layers) the k ids of row tokens[t], in stored
     * order; else the k largest prob + bias (bias: F32 [n_expert], may be
     * NULL), ties to the lower id, in decreasing order. weights[t][i] =
     * prob[sel_i] / max(Σ prob[sel], 2^-14) · expert_weights_scale (no
     * division when expert_weights_norm is false). Out: sel int32 [T][k],
     * weights f32 [T][k].
     *
     * moe: y[t] = Σ_{i<k, in slot order} down_e · (silu(min(gate_e·x, c)) ·
     * clamp(up_e·x, ±c) · weights[t][i]) with e = sel[t][i], c = clamp
     * (≤ 1e-6: none); x, y: [T][D]. Expert e of a [in, out, n_expert]
     * tensor is the matrix at byte offset e·out·row_bytes. */
    int (*router)(void *ctx, ds4_buf *logits, const ds4_tensor *bias, const ds4_tensor *tid2eid,
                  ds4_buf *tokens, int T, ds4_buf *sel, ds4_buf *weights);
    int (*moe)(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down,
               ds4_buf *x, ds4_buf *sel, ds4_buf *weights, int T, float clamp, ds4_buf *y);

    /* argmax over n floats (ties: lower index) into out[0] (int32): lets a
     * device-side greedy loop avoid reading the logits. */
    int (*argmax)(void *ctx, ds4_buf *x, int64_t n, ds4_buf *out);

    /* Optional (NULL: a backend that reads only the weights it holds):
     * makes the n tensors readable by the ops that follow until the next
     * call (n = 0 ends the loan): weights placed elsewhere that a large
     * chunk is better computed with here (routed experts kept in host
     * memory, streamed through a device for a prefill chunk). */
    int (*lend)(void *ctx, const ds4_tensor *const *ts, int n);
} ds4_ops;

#endif
