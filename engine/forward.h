/* forward.h — the DS4 forward pass written once over ds4_ops, and the
 * session state it keeps: what a compute backend plugs into
 * ds4_backend_ops (engine/backend.h).
 *
 * A backend's open() creates its ops context, then fwd_open() with it,
 * and stores the result in e->impl; its ds4_backend_ops then uses the
 * fwd_backend_* functions below for everything per session. The CPU
 * backend (cpu/backend_cpu.c) is the example. A backend with devices
 * (ds4_device_ops) leaves the opening to the engine, which places the
 * model over its devices (engine/place.c).
 *
 * Evaluation: tokens are computed in chunks of up to `chunk` tokens,
 * layer-major inside a chunk; decode is a chunk of one. The logits of a
 * chunk's last token are the only data read back. The result does not
 * depend on the chunking (tests hold the CPU backend to identical bits).
 * A batched decode step (fwd_backend_eval_batch) is the same schedule
 * over one row of each of several sessions, in the first session's
 * activation buffers; each row's logits are those of its session alone
 * (identical bits on the CPU backend).
 *
 * Cancellation: cb->cancel is polled before every chunk and between the
 * layers of a chunk; a chunk cancelled part-way is dropped (the state still
 * holds exactly the tokens before it, and the logits after the last
 * completed chunk are produced).
 *
 * Rewind: the rings keep `margin` tokens beyond what the model needs
 * (margin ≥ chunk), so shrinking a session by up to about that many tokens
 * is free: raw windows, compressor frontiers and compressed-row counts are
 * all still there. Larger rewinds return -1 and the common layer
 * recomputes from the start. So do rewinds below the point a snapshot was
 * loaded at: a load writes only the window and the frontier the next token
 * needs, not the margin below them.
 *
 * Snapshots: the payload is the canonical layout of engine/kvstate.h,
 * the same for every backend.
 */
#ifndef DS4CL_FORWARD_H
#define DS4CL_FORWARD_H

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/xbuf.h"

typedef struct fwd_engine fwd_engine;

typedef struct {
    int chunk;          /* prefill chunk tokens (≥ 1) */
    int rewind_margin;  /* tokens of cheap rewind kept beyond the chunk (0 = default) */
} fwd_config;

#define FWD_DEFAULT_CHUNK 256
#define FWD_DEFAULT_REWIND 256

/* ops/ctx stay owned by the caller (free ctx after fwd_close). */
fwd_engine *fwd_open(const ds4_model *m, const ds4_ops *ops, void *ctx, ds4_quant_sim qsim, const fwd_config *cfg,
                     ds4_error *err);
void fwd_close(fwd_engine *f);

/* The forward engine of an engine opened on a forward-based backend, else
 * NULL. */
fwd_engine *fwd_of(const ds4_engine *e);
void *fwd_ops_ctx(const fwd_engine *f);
/* Changes the chunk size of sessions created afterwards (tests, bench). */
void fwd_set_chunk(fwd_engine *f, int chunk);
int fwd_chunk(const fwd_engine *f);

/* Bytes of the buffers a session of n_ctx tokens allocates through the
 * ops (state and activations, on every backend of the placement);
 * backends add their own scratch. */
uint64_t fwd_session_buffers_bytes(const fwd_engine *f, int n_ctx);

/* ---- several backends in one forward pass --------------------------------
 * A forward engine starts with the backend it was opened with (index 0);
 * fwd_add_backend adds more (up to XBUF_MAX_BACKENDS) over the same bound
 * model. A placement says which backend runs each part of the pass; the
 * schedule hands buffers over where consecutive parts run on different
 * backends (engine/xbuf.h). A layer's session state (KV rings, compressed
 * rows, frontiers) lives on the backend of its attention. Sessions
 * created afterwards follow the placement in force when they were made;
 * the default places everything on backend 0. */
typedef struct {
    uint8_t attn;    /* hyper-connection, norms, attention, compressors, indexer; the layer's state */
    uint8_t ffn;     /* hyper-connection, norm, router, shared expert, the sum */
    uint8_t experts; /* the routed experts (the moe op) */
} fwd_layer_place;

typedef struct {
    uint8_t embed, head;          /* the embedding lookup; the output head */
    const fwd_layer_place *layer; /* n_layer entries (copied by fwd_set_placement) */
} fwd_placement;

/* Adds a backend (before sessions are opened); returns its index, or -1
 * with err. ctx belongs to the engine from here on (free_ctx at
 * fwd_close, or now on failure). */
int fwd_add_backend(fwd_engine *f, const ds4_ops *ops, void *ctx, void (*free_ctx)(void *), ds4_error *err);
int fwd_n_backends(const fwd_engine *f);
/* The ops context of backend b (NULL when there is none). */
void *fwd_backend_ctx(const fwd_engine *f, int b);
/* Says that backend b computes on the host's own cores (an OpenCL CPU
 * device): routed experts placed on another backend then run after its
 * shared expert instead of beside it, which would only contend for the
 * same cores. */
void fwd_set_on_host_cores(fwd_engine *f, int b, bool on);
/* Chunks of at least min_tokens tokens (0: none) compute the routed
 * experts of a layer whose experts live on another backend on the layer's
 * FFN backend instead, its weights lent there (ds4_ops.lend) for the
 * layer: a prefill streams host-placed experts through the device. */
void fwd_set_stream(fwd_engine *f, int min_tokens);
/* Validates and copies p. 0, or -1 with err (a backend index out of range). */
int fwd_set_placement(fwd_engine *f, const fwd_placement *p, ds4_error *err);

/* Hand-overs between backends since the engine opened: how many moved
 * bytes, how many bytes, the wall time moving them took, and the wall
 * time spent before that waiting for the source backend's queued work;
 * and the wall time of the routed experts computed on another backend
 * than their layer's FFN (the host's share of a hybrid step; the FFN's
 * backend may run its shared expert meanwhile). */
typedef struct {
    uint64_t count, bytes;
    double ms, wait_ms;
    double experts_ms;  /* includes the streamed layers' experts */
    uint64_t streamed;  /* layers whose experts were streamed (fwd_set_stream) */
} fwd_handover_stats;
void fwd_get_handover_stats(fwd_engine *f, fwd_handover_stats *out);

/* Bytes of the buffers a session of n_ctx tokens allocates on backend b
 * under the current placement. */
uint64_t fwd_session_buffers_bytes_on(const fwd_engine *f, int n_ctx, int b);

/* ---- tracing (tests and debugging) -------------------------------------
 * When set, evaluation reads intermediates back and reports them per
 * token: name (the golden trace names: embd, attn_cur,
 * attn_norm, qr_norm, q_roped, kv_cache_row, comp_kv_row, index_comp_row,
 * heads_unroped, attn_out, after_attn_hc, ffn_cur, ffn_norm, ffn_moe,
 * ffn_shared, out_hc, output_embd, output_norm, logits; and the decisions
 * "experts" (int32 [k]), "expert_weights" (f32 [k]), "indexer_selected"
 * (int32 [top_k], −1 padded; reported only where the indexer ranked)),
 * layer (−1 for model-level values), the token position, and the data.
 * Compressed rows are reported at the position that emitted them. Slows
 * evaluation down; the hook runs on the evaluating thread. */
typedef void (*fwd_trace_fn)(void *ud, const char *name, int layer, int64_t pos, const void *data, size_t bytes);
void fwd_set_trace(fwd_engine *f, fwd_trace_fn fn, void *ud);

/* ---- stages: one layer range of a split model -----------------------------
 * A layer split over processes (mpi/) runs one forward engine per process,
 * each restricted to a contiguous range of layers. Sessions created after
 * fwd_set_layers keep state (and snapshot blocks) for those layers only.
 * The hyper-connection streams between stages are n_hc × n_embd f32 per
 * token (hc_dim floats), token-major.
 *
 * The first stage (l0 = 0) is a normal engine with a next hook: after its
 * last layer it hands the chunk's streams to the hook, which returns the
 * last token's streams after the model's last layer; the head then runs
 * as usual. Later stages evaluate with fwd_stage_eval. */
int fwd_set_layers(fwd_engine *f, int l0, int l1, ds4_error *err);

/* tok, S: the tokens pos0 … pos0+T−1 and their streams after this
 * engine's last layer (T × hc_dim floats); writes into last the streams of token pos0+T−1 after
 * the model's last layer. st is the session state being evaluated. 0, or
 * -1 with err (the evaluation fails). */
typedef int (*fwd_next_fn)(void *ud, void *st, const int32_t *tok, const float *S, int64_t pos0, int T, float *last,
                           ds4_error *err);
void fwd_set_next(fwd_engine *f, fwd_next_fn fn, void *ud);

/* Runs this engine's layers for tokens tok = pos0 … pos0+T−1 (T ≤ the
 * chunk, pos0 = the tokens the state holds; hash-routed layers read the
 * ids) from the streams S, writing the
 * streams after its last layer to out: all T rows, or with last_only the
 * last token's. cb->cancel is polled between layers. Returns T, 0 when
 * cancelled (state unchanged), -1 on error. */
long fwd_stage_eval(void *st, const int32_t *tok, const float *S, int64_t pos0, int T, float *out, bool last_only,
                    const ds4_callbacks *cb, ds4_error *err);

/* The layer blocks of this state's range in the canonical snapshot layout
 * (engine/kvstate.h) without the header, and their restore from blocks
 * whose cache rows are f16 (from_f16) or f32. Concatenating the header of
 * the first stage's fwd_backend_save with every stage's blocks, in layer
 * order, gives the whole model's payload. */
int fwd_stage_save(void *st, strbuf *out, ds4_error *err);
int fwd_stage_load(void *st, const void *blocks, size_t len, size_t n_tokens, bool from_f16, ds4_error *err);

/* Where layer l's block starts in a whole-model payload of n_tokens whose
 * cache rows are f16 or f32 (l = n_layer: its length). */
uint64_t fwd_payload_offset(const fwd_engine *f, bool f16, int64_t n_tokens, int l);

/* ---- ds4_backend_ops members for forward-based backends ----------------- */

/* open()/close() of a forward-based backend: a forward engine over ops and
 * the backend's ops context ctx, stored in e->impl. ctx belongs to the
 * forward engine from here on, freed with free_ctx on failure and at
 * fwd_backend_close. */
int fwd_backend_open(ds4_engine *e, const ds4_ops *ops, void *ctx, void (*free_ctx)(void *), ds4_error *err);
void fwd_backend_close(ds4_engine *e, void (*free_ctx)(void *));

void *fwd_backend_state_new(ds4_engine *e, int n_ctx, ds4_error *err);
void fwd_backend_state_free(void *st);
long fwd_backend_eval(void *st, const int32_t *tokens, size_t pos, size_t n, float *logits, const ds4_callbacks *cb,
                      ds4_error *err);
/* The eval_batch member (engine/backend.h): the n decode rows go through
 * the layers as one step (dense products, router and routed experts over
 * all rows; RoPE, cache stores, compressors, indexer and attention per
 * state at its own position). It steps them one by one (-2) when they
 * belong to different engines or placements, when a trace hook or a next
 * stage is set, or when n exceeds the first state's chunk. A step is not
 * split: cancellation is polled before it and between its layers, and a
 * cancelled step leaves every state as it was. */
int fwd_backend_eval_batch(void *const *st, const int32_t *const *tokens, const size_t *pos, int n,
                           float *const *logits, const ds4_callbacks *cb, ds4_error *err);
/* Steps of several states that fwd_backend_eval_batch computed together
 * since the engine opened. */
uint64_t fwd_batched_steps(const fwd_engine *f);
int fwd_backend_rewind(void *st, size_t n);
void fwd_backend_reset(void *st);
uint64_t fwd_backend_kv_bytes(void *st);
int fwd_backend_save(void *st, strbuf *out, ds4_error *err);
int fwd_backend_load(void *st, const void *payload, size_t len, size_t n_tokens, ds4_error *err);

/* The session members of a forward-based backend's ds4_backend_ops: every
 * such backend keeps its sessions in the schedule's state. */
#define FWD_BACKEND_SESSION_OPS                                                                                      \
    .session = { .state_new = fwd_backend_state_new, .state_free = fwd_backend_state_free, .eval = fwd_backend_eval, \
                 .eval_batch = fwd_backend_eval_batch,                                                             \
                 .rewind = fwd_backend_rewind, .reset = fwd_backend_reset, .kv_bytes = fwd_backend_kv_bytes,         \
                 .save = fwd_backend_save, .load = fwd_backend_load }

#endif
