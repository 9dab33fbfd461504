/* ds4.h — the engine's public API.
 *
 * The folders above the engine (cli/, serve/, agent/, dsml/, sessions/,
 * ui/, tools/) talk to the model through this header only; the backends
 * (cpu/, opencl/) and the MPI layer split (mpi/) plug in below it through
 * engine/backend.h and engine/ops.h, and tests and bench/ may look inside.
 * build-aux/arrows.sh checks this on every `make test` and lists the few
 * includes that still break it. Here: open a DS4 GGUF on a backend (or
 * only plan its placement), describe the file, list the backends' devices,
 * read device lists and shares the one way, tokenize and render chat
 * transcripts, keep a session whose KV state equals a token prefix, read
 * logits, sample, and save/restore session snapshots. No tensor, quant
 * block or kernel is visible here.
 *
 * Conventions: functions that can fail take a `ds4_error *` (may be NULL)
 * and return NULL / -1 / DS4_ERROR on failure with a human-readable message
 * in err->msg. Nothing here prints to stdout/stderr. One session must be
 * driven by one thread at a time; distinct sessions and the read-only
 * engine/tokenizer may be shared across threads.
 */
#ifndef DS4_H
#define DS4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#ifndef DS4CL_VERSION
#define DS4CL_VERSION "0.0.0"
#endif

/* ---- errors and token vectors ----------------------------------------- */

/* ds4_error and ds4_error_set: the error convention of base/base.h. */

typedef struct {
    int32_t *ids;
    size_t n, cap;
} ds4_tokens;

void ds4_tokens_push(ds4_tokens *t, int32_t id);
void ds4_tokens_append(ds4_tokens *t, const int32_t *ids, size_t n);
void ds4_tokens_truncate(ds4_tokens *t, size_t n);
void ds4_tokens_free(ds4_tokens *t);

/* ---- engine ------------------------------------------------------------ */

typedef enum {
    DS4_BACKEND_CPU = 0,
    DS4_BACKEND_OPENCL,
    DS4_BACKEND_SCRIPT, /* test backend: replies scripted in a JSON Lines file */
} ds4_backend;

/* Rounding simulations the model was trained with (doc/model.md §2.5).
 * FULL is the model's release numerics; the others exist for verification. */
typedef enum {
    DS4_QSIM_FULL = 0, /* fp8 KV + FP4 indexer + f16 cache rows */
    DS4_QSIM_F16KV,    /* only f16 rounding of cached rows */
    DS4_QSIM_NONE,     /* everything f32 */
} ds4_quant_sim;

typedef struct {
    const char *model_path;
    ds4_backend backend;
    const char *script_path; /* DS4_BACKEND_SCRIPT only */
    const char *device;      /* OpenCL device: index or name substring; NULL = $DS4CL_DEVICE or first GPU */
    int threads;             /* CPU worker threads; 0 = one per core */
    ds4_quant_sim quant_sim;
    /* Open to plan only (ds4cl --model-info): the backend picks its device
     * and sizes sessions, but the weights get no device memory and no
     * session can be opened. */
    bool plan_only;
    /* Placement on an accelerator (OpenCL) that may not hold the whole
     * model (ds4_placement below). host_expert_layers: 0 places
     * automatically; N > 0 keeps the first N layers' routed experts in
     * host memory, computed by the CPU (N ≥ n_layer: every layer's);
     * DS4_EXPERTS_ON_DEVICE keeps them all on the device. plan_ctx: the
     * context the device must hold a session of beside its weights (0:
     * DS4_DEFAULT_PLAN_CTX). device_memory: the device's memory in bytes
     * (0: what the device reports); when set, the weights are copied to
     * the device even where it could read host memory, so the budget is
     * real. */
    int host_expert_layers;
    int plan_ctx;
    uint64_t device_memory;
    /* Several OpenCL devices (device "0,1", up to DS4_MAX_DEVICES): split
     * holds the share of the layers each takes, in the order named ("3,1");
     * NULL or "" splits in proportion to each device's memory. */
    const char *split;
    /* Only layers [layer_first, layer_end) (one stage of a model split over
     * processes, mpi/): the placement and the weights a device receives
     * cover those layers, and the embedding and the output head when the
     * range starts at layer 0 (that stage begins and ends each pass).
     * 0, 0: the whole model. */
    int layer_first, layer_end;
    /* Prefill chunks of at least this many tokens compute the routed
     * experts kept in host memory on the device instead, copying each
     * such layer's expert weights there for the layer (0: never). The
     * placement then keeps room for one layer's experts on each device
     * that has host layers. */
    int stream_experts;
    /* Bytes of host memory for a cache of routed experts read from the
     * model file on demand (engine/expert_cache.h) instead of through the
     * mapping, for machines whose memory is smaller than the file; 0:
     * none. CPU backend, and the experts a placement keeps on the host. */
    uint64_t expert_cache;
    /* With an expert cache: a file that keeps the experts' popularity
     * between runs (engine/expert_warm.h). Read at open, when it is this
     * model's, to preload the most popular experts (load_progress reports
     * it); written at close. NULL: none. */
    const char *expert_stats;
    /* Optional load progress (0..1) with a short label; may be NULL. */
    void (*load_progress)(void *ud, double fraction, const char *what);
    void *load_ud;
} ds4_engine_options;

#define DS4_EXPERTS_ON_DEVICE (-1)
#define DS4_DEFAULT_PLAN_CTX 65536

typedef struct ds4_engine ds4_engine;

ds4_engine *ds4_engine_open(const ds4_engine_options *opt, ds4_error *err);
void ds4_engine_close(ds4_engine *e);

/* The one plan-only entry point's second step: e (opened with plan_only,
 * or opened before) becomes the engine opt describes, without reading the
 * model file again. Only opt's plan_only, plan_ctx, layer_first,
 * layer_end, load_progress and load_ud are taken (the rest stays what e
 * was opened with): the backend and its placement are opened anew for
 * them, the file, its tokenizer and the weights binding are kept. The
 * caller plans on the plan-only engine (the context, the ranks' layer
 * ranges), then opens it to run. 0, or -1 with err; e then has no
 * backend, and only ds4_engine_close is valid. Not while a session is
 * open or a hook is in place. */
int ds4_engine_reopen(ds4_engine *e, const ds4_engine_options *opt, ds4_error *err);

typedef struct {
    int n_vocab, n_layer, n_embd, n_head, head_dim;
    int n_expert, n_expert_used;
    int n_ctx_train;               /* 0 when the file does not say */
    char name[128];                /* general.name or file base name */
    uint64_t identity;             /* hash of shape + tensor table; snapshots carry it */
    uint64_t weights_bytes;        /* bytes of tensor data */
    uint64_t expert_bytes;         /* … of which routed experts */
    uint64_t expert_cache_bytes;   /* the expert cache's budget (0: the experts are mapped) */
    const char *backend_name;      /* "cpu", "opencl", "script" */
    char device_name[128];         /* e.g. "cpu (2 threads)" or the OpenCL device */
} ds4_model_info;

void ds4_engine_info(const ds4_engine *e, ds4_model_info *out);

/* Where the parts of the model live on an engine whose backend computes on
 * an accelerator (OpenCL): every layer's dense part (attention,
 * compressors, indexer, router, shared expert, norms, hyper-connections)
 * and the output head on the device; the routed experts of the first
 * host_expert_layers layers in host memory, computed by the CPU backend,
 * the others on the device; the embedding table in host memory whenever
 * any experts are (one row per token is all a step reads of it). The
 * device may use its memory less a reserve (1/16 of it, at most 1 GiB)
 * for its weights and a session of n_ctx tokens (ds4_memory_reserve). */
#define DS4_MAX_DEVICES 4

/* One device's share: a contiguous range of layers (their dense parts and
 * the routed experts not kept on the host) and its bytes. */
typedef struct {
    char name[128];
    int first_layer, n_layers;
    int host_expert_layers;       /* the first this many of its layers keep their experts on the host */
    bool shares_host_memory, fits;
    bool head;                    /* it computes the output head (the last range) */
    uint64_t memory, budget, weights, session, token_bytes;
    uint64_t stream_bytes;        /* room kept for one host layer's experts (stream_experts) */
} ds4_placement_device;

typedef struct {
    int n_layer;
    int n_ctx;                    /* the context planned for */
    int host_expert_layers;       /* 0 … n_layer */
    bool embed_on_host;
    bool shares_host_memory;      /* the device reads the mapped file in place: no budget */
    bool fits;                    /* within the budget at n_ctx */
    int largest_ctx;              /* the largest context this placement holds (0: none) */
    int largest_ctx_all_host;     /* the same with every layer's experts on the host */
    uint64_t device_memory;       /* the device's memory, or ds4_engine_options.device_memory */
    uint64_t device_budget;       /* device_memory less the reserve */
    uint64_t device_weights;      /* weight bytes on the device */
    uint64_t device_session;      /* a session of n_ctx tokens and the device's scratch */
    uint64_t host_weights;        /* weight bytes computed from host memory */
    uint64_t token_device_bytes;  /* weight bytes a decoded token reads from device memory */
    uint64_t token_host_bytes;    /* … and from host memory */
    int stream_experts;           /* the option in force: 0, or the smallest chunk streamed */
    uint64_t stream_bytes;        /* room kept on the devices for streamed experts */
    char device_name[128];
    char refusal[512];            /* why it does not fit, in numbers; "" when it fits */
    /* Several devices (ds4_engine_options.device "0,1"): each holds a
     * range of layers; the fields above are then sums (largest_ctx the
     * smallest, fits all of them, host_expert_layers the total). */
    int n_devices;
    ds4_placement_device dev[DS4_MAX_DEVICES];
} ds4_placement;

/* The placement of e into out: 0, or -1 when e's backend places nothing
 * (the CPU and script backends compute everything from host memory). */
int ds4_engine_placement(const ds4_engine *e, ds4_placement *out);

/* ---- backends and their devices ------------------------------------------ */

/* The backends of this build, in ds4_backend order; n is set to how many. */
const ds4_backend *ds4_backends(int *n);
const char *ds4_backend_name(ds4_backend b); /* "cpu", "opencl", "script" */

typedef enum {
    DS4_DEVICE_CPU = 0,
    DS4_DEVICE_GPU,
    DS4_DEVICE_ACCELERATOR,
    DS4_DEVICE_OTHER,
} ds4_device_kind;

const char *ds4_device_kind_name(ds4_device_kind k); /* "CPU", "GPU", "accelerator", "other" */

typedef struct {
    int index;                 /* what --device INDEX names */
    ds4_device_kind kind;
    char name[128];
    char platform[128];        /* the driver stack (OpenCL platform), "" for the host */
    char platform_version[128];
    char vendor[128];
    char driver[64];
    char version[64];          /* the language the device compiles (e.g. "OpenCL C 1.2"), "" for the host */
    uint32_t compute_units;
    uint64_t memory;           /* bytes of memory the device computes from */
    uint64_t max_alloc;        /* the largest single buffer */
    bool shares_host_memory;   /* zero-copy access to host memory (integrated GPU, CPU device) */
    char limits[192];          /* what the backend respects and could use there, in words
                                  ("work-groups ≤ 1024, local memory 48 KiB, fp16 yes, …"); "" for the host */
} ds4_device;

/* The devices of backend b into a malloc'd array (*n entries), and in
 * *selected the index into it of the device `want` picks (ds4_engine_
 * options.device rule; NULL = $DS4CL_DEVICE, else the backend's default).
 * Returns 0; *selected is -1 with the reason in err when `want` matches
 * none. -1 with err when the backend has no devices to list (no OpenCL
 * platform, a backend without devices). */
int ds4_backend_devices(ds4_backend b, const char *want, ds4_device **out, int *n, int *selected, ds4_error *err);

/* ---- device lists, shares and layer ranges ------------------------------- */

/* The one reading of each placement argument, for every front end (the
 * command line, preflight, the MPI split) and the engine itself. */
#define DS4_DEVICE_PIECE_MAX 128

/* The pieces of a device list: "0,1" names two devices, "1" or "gfx" one
 * (an index or a name substring, ds4_engine_options.device). Returns how
 * many pieces (0 for NULL or ""), or -1 with err (src names the flag or
 * variable: "--device") for an empty or overlong piece or more than
 * DS4_MAX_DEVICES. */
int ds4_parse_devices(const char *list, const char *src, char (*pieces)[DS4_DEVICE_PIECE_MAX], ds4_error *err);

/* Relative shares "3,1": exactly n positive numbers separated by commas,
 * into out. -1 with err otherwise; what names the argument in the message
 * ("--split 3", "DS4CL_MPI_SPLIT=3"), unit what each share is for
 * ("device", "rank"). */
int ds4_parse_shares(const char *s, int n, double *out, const char *what, const char *unit, ds4_error *err);

/* Splits n_layer layers into n contiguous ranges in proportion to the
 * shares w[0..n), each range at least one layer: part k gets [bound[k],
 * bound[k+1]) (bound has n + 1 entries). -1 with err (unit names the
 * parts: "rank", "device") when there are more parts than layers or a
 * share is not positive. */
int ds4_split_layers(int n_layer, int n, const double *w, const char *unit, int *bound, ds4_error *err);

/* How the CPU backend multiplies the routed experts under numerics mode q
 * (8-bit activations under the release numerics unless DS4CL_EXPERTS=f32;
 * exact f32 under the others): a line naming the arithmetic and, for 8-bit
 * activations, the SIMD level of their kernels. *note, when not NULL, gets
 * why DS4CL_EXPERTS or a SIMD level asked for (DS4CL_SIMD) is not
 * followed, or "". */
const char *ds4_cpu_experts_mode(ds4_quant_sim q, const char **note);

/* What e's model file holds, as lines of text (--model-info): the file
 * (size, GGUF version, tensors, metadata keys, alignment), name, identity,
 * shape (layers and their compression ratios, widths, attention,
 * indexer, experts and their quant types, routing, hyper-connections,
 * RoPE) and tensor bytes by quant type. Appended to out; -1 with err when
 * e's backend binds no model (the script engine). */
int ds4_engine_describe_model(const ds4_engine *e, strbuf *out, ds4_error *err);
/* Bytes of a session's state at n_ctx tokens as the model counts them (f32
 * raw windows, compressed and indexer rows, compressor frontiers,
 * logits), whatever the backend; 0 without a model. */
uint64_t ds4_model_context_bytes(const ds4_engine *e, int n_ctx);
/* How many of e's tensors are larger than max_alloc bytes (a device
 * splits those over several buffers). */
int ds4_engine_tensors_over(const ds4_engine *e, uint64_t max_alloc);

/* The memory kept free of a pool of `memory` bytes, a device's or the
 * host's: 1/16 of it, at most 1 GiB. The one reserve rule: the placement's
 * device budgets and the memory planner's host budget both leave it (the
 * planner warns besides when a plan takes more than 90 % of the rest). */
uint64_t ds4_memory_reserve(uint64_t memory);

/* Bytes a session of n_ctx tokens needs on this engine's backend (KV,
 * compressed rows, scratch), for memory planning before opening it. */
uint64_t ds4_session_bytes_estimate(const ds4_engine *e, int n_ctx);

/* ---- tokenizer --------------------------------------------------------- */

typedef enum {
    DS4_TOK_BOS = 0,
    DS4_TOK_EOS,
    DS4_TOK_USER,
    DS4_TOK_ASSISTANT,
    DS4_TOK_THINK,     /* <think> */
    DS4_TOK_THINK_END, /* </think> */
    DS4_TOK_DSML,      /* ｜DSML｜ */
    DS4_TOK__COUNT
} ds4_special;

typedef struct ds4_tokenizer ds4_tokenizer;

const ds4_tokenizer *ds4_engine_tokenizer(const ds4_engine *e);

/* A tokenizer on its own, read from a GGUF's tokenizer.ggml.* metadata
 * (no model binding; used by tools that only need token ids). */
ds4_tokenizer *ds4_tokenizer_open(const char *gguf_path, ds4_error *err);
void ds4_tokenizer_free(ds4_tokenizer *t);

int ds4_vocab_size(const ds4_tokenizer *t);
int32_t ds4_token_special(const ds4_tokenizer *t, ds4_special which);

/* Untrusted text (user input, files, tool output, web pages): BPE only,
 * special-token strings are never recognised. Appends to out. */
int ds4_tokenize(const ds4_tokenizer *t, const char *text, size_t len, ds4_tokens *out);

/* Trusted template text (our own prompts, DSML markup we render): the seven
 * special strings become their special ids. Appends to out. */
int ds4_tokenize_trusted(const ds4_tokenizer *t, const char *text, size_t len, ds4_tokens *out);

/* The raw bytes a token stands for (specials: their literal text). */
const char *ds4_token_bytes(const ds4_tokenizer *t, int32_t id, size_t *len);

/* Streaming detokenizer: holds back an incomplete UTF-8 sequence until the
 * token that completes it arrives. */
typedef struct {
    char pending[8];
    int npending;
} ds4_detok;

#define DS4_DETOK_MAX 1024 /* out buffer size that always suffices for one token */
size_t ds4_detok_feed(ds4_detok *d, const ds4_tokenizer *t, int32_t id, char *out);
size_t ds4_detok_flush(ds4_detok *d, char *out); /* emits held bytes as-is */

/* ---- chat rendering (appends tokens; message text is untrusted) --------- */

typedef enum {
    DS4_THINK_NONE = 0, /* assistant turns open with </think> */
    DS4_THINK_HIGH,     /* assistant turns open with <think> */
    DS4_THINK_MAX,      /* HIGH + the Think Max prefix after BOS */
} ds4_think;

/* MAX needs a context of at least 393216 tokens; below it, HIGH. */
ds4_think ds4_think_for_context(ds4_think wanted, int n_ctx);

void ds4_chat_begin(const ds4_tokenizer *t, ds4_tokens *out, ds4_think mode); /* BOS [+ MAX prefix] */
void ds4_chat_system(const ds4_tokenizer *t, ds4_tokens *out, const char *text, bool trusted);
void ds4_chat_user(const ds4_tokenizer *t, ds4_tokens *out, const char *text);
void ds4_chat_tool_result(const ds4_tokenizer *t, ds4_tokens *out, const char *text);
void ds4_chat_assistant_prefix(const ds4_tokenizer *t, ds4_tokens *out, ds4_think mode);
void ds4_chat_assistant_end(const ds4_tokenizer *t, ds4_tokens *out); /* EOS */

/* The tool-instruction block of the system prompt (trusted text) for the
 * given tool schemas (one JSON object each). Returns a malloc'd string. */
char *ds4_chat_tools_block(const char *const *schemas_json, size_t n);

/* ---- sessions ----------------------------------------------------------- */

typedef enum {
    DS4_OK = 0,
    DS4_ERROR = -1,
    DS4_INTERRUPTED = 1, /* cancel callback said stop; state valid up to n_tokens */
} ds4_status;

typedef struct {
    /* Progress of a sync: tokens computed so far out of those to compute. */
    void (*progress)(void *ud, int done, int total, double tokens_per_s);
    /* Polled at every chunk and token boundary and between the layers of
     * a prefill chunk, once the work before it is done (a backend that
     * queues work waits for it first); true stops the work. */
    bool (*cancel)(void *ud);
    void *ud;
} ds4_callbacks;

typedef struct ds4_session ds4_session;

ds4_session *ds4_session_open(ds4_engine *e, int n_ctx, ds4_error *err);
void ds4_session_close(ds4_session *s);

/* Makes the session's state equal the given token prefix: keeps the longest
 * common prefix, rolls back or recomputes what differs, prefills the rest in
 * chunks. On DS4_INTERRUPTED the session holds a valid prefix of ids (see
 * ds4_session_n_tokens). cb may be NULL. */
ds4_status ds4_session_sync(ds4_session *s, const int32_t *ids, size_t n,
                            const ds4_callbacks *cb, ds4_error *err);
/* The same, going on from the snapshot base (ds4_session_snapshot) when
 * the tokens it holds begin ids, are fewer than n, and are more than the
 * session shares with ids (an empty session included: a cached prompt),
 * or when the state cannot be rolled back to the common prefix (an engine
 * rewinds only a short way cheaply, and a restored state not below the
 * point it was restored at) rather than from nothing. A base that
 * does not load, fit or match is ignored. base may be NULL. */
ds4_status ds4_session_sync_from(ds4_session *s, const int32_t *ids, size_t n, const void *base, size_t base_len,
                                 const ds4_callbacks *cb, ds4_error *err);

/* Appends one token (decode step). */
ds4_status ds4_session_eval(ds4_session *s, int32_t id, const ds4_callbacks *cb, ds4_error *err);

/* One decode step of n sessions of the same engine: appends ids[i] to
 * session s[i], each at its own position with its own state, computed as
 * one forward step where the backend can (the weights are read once for
 * all rows; each routed expert once for the rows that chose it).
 * Afterwards every session is as after ds4_session_eval(s[i], ids[i]):
 * the same tokens, state and logits (on the CPU backend the same bits;
 * on other backends within f32 rounding-order differences).
 *
 * All or nothing: on DS4_INTERRUPTED (cb->cancel, polled before the step
 * and between its layers) every session holds exactly what it held
 * before, logits included. DS4_ERROR before the step (no sessions, a
 * session twice, sessions of different engines, a full context, a token
 * outside the vocabulary) changes nothing; an evaluation that fails may
 * leave sessions of the step reset to empty, as a failed
 * ds4_session_eval does (a sync then recomputes them).
 *
 * A backend that cannot step several sessions at once (the script engine,
 * a layer split over processes, an engine with a trace hook, more
 * sessions than its prefill chunk) evaluates them one after another with
 * the same outcome. Prefill stays per session (ds4_session_sync). */
ds4_status ds4_sessions_eval(ds4_session *const *s, const int32_t *ids, int n, const ds4_callbacks *cb,
                             ds4_error *err);

/* Logits (n_vocab floats) after the last evaluated token; NULL when empty. */
const float *ds4_session_logits(const ds4_session *s);

size_t ds4_session_n_tokens(const ds4_session *s);
const int32_t *ds4_session_tokens(const ds4_session *s);
int ds4_session_n_ctx(const ds4_session *s);
/* Tokens actually computed (not reused from the cache) by the last sync. */
size_t ds4_session_last_prefilled(const ds4_session *s);
uint64_t ds4_session_kv_bytes(const ds4_session *s);

/* Snapshots: the whole state (tokens, raw windows, compressed rows,
 * compressor/indexer frontiers, last logits) behind a header with magic,
 * version, model identity, shape and context size. Loading a snapshot of
 * another model/shape, or a damaged one, fails with a clear message and
 * leaves the session unchanged. Saving to a path is atomic. */
int ds4_session_save(const ds4_session *s, const char *path, ds4_error *err);
int ds4_session_load(ds4_session *s, const char *path, ds4_error *err);
int ds4_session_snapshot(const ds4_session *s, void **buf, size_t *len, ds4_error *err);
int ds4_session_restore(ds4_session *s, const void *buf, size_t len, ds4_error *err);
/* The tokens a snapshot holds, read from its header (checked) and token
 * array alone, without an engine: appended to out. -1 when buf is not a
 * snapshot or ends before its tokens do. The rest (model, payload, body
 * checksum) is checked only by a restore. */
int ds4_snapshot_tokens(const void *buf, size_t len, ds4_tokens *out);

/* ---- sampling ----------------------------------------------------------- */

typedef struct {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    float min_p;       /* 0 = off */
    uint64_t seed;
} ds4_sampling;

typedef struct ds4_sampler ds4_sampler;

ds4_sampler *ds4_sampler_new(const ds4_sampling *params);
void ds4_sampler_free(ds4_sampler *s);

/* Per-token hook: gets a writable copy of the logits (set entries to
 * -INFINITY to forbid tokens) and may force a greedy choice. */
typedef void (*ds4_sample_hook)(void *ud, float *logits, int n_vocab, bool *greedy);

/* Picks a token. Ties in greedy mode go to the lower id. Returns -1 when
 * every token is masked. */
int32_t ds4_sample(ds4_sampler *s, const float *logits, int n_vocab,
                   ds4_sample_hook hook, void *ud);

#endif
