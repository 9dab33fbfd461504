/* ds4.h — the engine's public API.
 *
 * The folders above the engine (cli/, serve/, agent/, dsml/, sessions/,
 * ui/, tools/) talk to the model through this header only; the backends
 * (cpu/, opencl/) and the MPI layer split (mpi/) plug in below it through
 * engine/backend.h and engine/ops.h, and tests and bench/ may look inside.
 * build-aux/arrows.sh checks this on every `make test`, includes and
 * calls alike. Here: open a DS4 GGUF on a backend (or
 * only plan its placement), plan memory (the context that fits, the
 * expert cache), describe the file, list the backends' devices,
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

/* ---- a job of several processes ------------------------------------------
 * One model split by layers over the ranks of an MPI job (`make MPI=1`,
 * `mpirun -np N ds4cl …`; doc/mpi.md). The job joins the engine as its
 * hook (backend.h); in a build without one, or a process not started by
 * a launcher, the job is this process alone: rank 0 of 1, nothing to
 * plan or attach. Rank 0 is the program itself; every other rank serves
 * rank 0's commands instead of running the program. */

/* Joins the job when the process was launched as part of one; returns
 * this process's rank (0 also when not launched so), or -1 after saying
 * why on stderr. Call first thing in main: it may take arguments of the
 * launcher's own out of argc/argv. */
int ds4_job_start(int *argc, char ***argv);

/* Ranks in the job (1 without one). */
int ds4_job_ranks(void);

/* Ranks above 0: open the model rank 0 names and serve its commands until
 * it says quit. Returns the exit status. */
int ds4_job_serve(void);

/* Rank 0, before opening the engine that runs: gives each other rank its
 * range of layers, chosen from their memory, with e an engine of the same
 * model and options opened to plan only. *layer_end gets rank 0's own
 * range's end (its range starts at layer 0; 0 when the job has one rank):
 * open the engine that runs with that range. 0, or -1 with err. */
int ds4_job_plan(const ds4_engine *e, int *layer_end, ds4_error *err);

/* Rank 0: spreads the layers of e (before any session is opened) over the
 * job's ranks, as ds4_job_plan chose. 0 when done or when the job has one
 * rank; -1 with err (a rank refused: its reason is in err). */
int ds4_job_attach(ds4_engine *e, ds4_error *err);

/* "layers 0-1 on rank 0 (host), 2-3 on rank 1 (host)": the split after
 * ds4_job_attach, "" before or without one. */
const char *ds4_job_split_text(void);

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

/* Bytes a session of n_ctx tokens needs on this engine's backend (KV,
 * compressed rows, scratch), for memory planning before opening it. */
uint64_t ds4_session_bytes_estimate(const ds4_engine *e, int n_ctx);

/* ---- memory planning (engine/memory.c, engine/memory_detect.c) ----------- */

/* Will the model and a context of N tokens fit, and what is the largest
 * context that does? Pure arithmetic over numbers: resident weights, fixed
 * overhead, a function giving the context-dependent bytes (KV, compressed
 * rows, frontiers, scratch) for n_ctx, and the memory of the pool they all
 * live in (host RAM for the CPU backend, device memory for OpenCL). A
 * headroom policy keeps a reserve free and calls a plan "tight" when it
 * uses more than a share of the rest:
 *
 *   reserve     = ds4_memory_reserve(available)
 *   usable      = available − reserve        (a plan must fit in this)
 *   comfortable = comfort_fraction × usable  (beyond this: a warning)
 *
 * `--ctx auto` picks the largest comfortable context, a multiple of
 * `granularity`, never above the model's limit; when even the smallest
 * context is not comfortable it takes tight_ctx (or the largest that
 * fits, if smaller), with a warning — no point in filling the last bytes
 * of a machine that is already short; when nothing fits it refuses.
 *
 * Around it: detection of the memory available (MemAvailable from
 * /proc/meminfo, lowered by a cgroup v2/v1 memory limit; the environment
 * variables DS4CL_MEM_AVAILABLE and DS4CL_DEVICE_MEM override host and
 * device memory, in bytes or with a K/M/G/T suffix), and the plan of a
 * session on an opened engine with its account in words. */

/* The memory kept free of a pool of `memory` bytes, a device's or the
 * host's: 1/16 of it, at most 1 GiB. The one reserve rule: the placement's
 * device budgets and the memory planner's host budget both leave it (the
 * planner warns besides when a plan takes more than 90 % of the rest). */
uint64_t ds4_memory_reserve(uint64_t memory);

/* The model's limit when its file does not say (DeepSeek V4 Flash's), and
 * the most --ctx takes. */
#define DS4_MAX_CTX 1048576

typedef struct {
    uint64_t reserve_bytes;  /* bytes always left free; 0: ds4_memory_reserve of the pool */
    double comfort_fraction; /* share of usable memory a comfortable plan stays under */
    int granularity;         /* auto contexts are multiples of this */
    int min_ctx;             /* smallest context worth running */
    int tight_ctx;           /* auto's pick when no context is comfortable (if it fits) */
} ds4_memory_policy;

/* The engine's reserve, comfortable under 90 % of the rest, contexts in
 * steps of 1024 from 4096; 32768 tokens when nothing is comfortable. */
ds4_memory_policy ds4_memory_default_policy(void);

/* Context-dependent bytes for n_ctx tokens; must not decrease with n_ctx. */
typedef uint64_t (*ds4_memory_ctx_bytes_fn)(void *ud, int n_ctx);

typedef struct {
    uint64_t weights_bytes;     /* resident weights in this pool */
    uint64_t fixed_bytes;       /* other context-independent needs */
    ds4_memory_ctx_bytes_fn ctx_bytes;
    void *ctx_ud;
    uint64_t available_bytes;   /* memory of the pool */
    int max_ctx;                /* the model's limit; 0 = DS4_MAX_CTX */
    int least_ctx;              /* the least the caller can use (0: the policy's min_ctx); for ds4_memory_explain */
} ds4_memory_input;

/* The simplest ctx_bytes: fixed + per_token × n_ctx (ud is a ds4_memory_linear *). */
typedef struct {
    uint64_t fixed, per_token;
} ds4_memory_linear;
uint64_t ds4_memory_linear_bytes(void *ud, int n_ctx);

typedef enum {
    DS4_MEMORY_FITS = 0,  /* within the comfortable share */
    DS4_MEMORY_TIGHT,     /* fits, but leaves little room: warn */
    DS4_MEMORY_TOO_BIG,   /* does not fit: refuse */
} ds4_memory_verdict;

typedef struct {
    ds4_memory_verdict verdict;
    int n_ctx;                  /* the context planned (0: none fits) */
    uint64_t ctx_bytes;         /* ctx_bytes(n_ctx) */
    uint64_t need_bytes;        /* weights + fixed + ctx_bytes */
    uint64_t reserve_bytes;
    uint64_t usable_bytes;
    uint64_t comfortable_bytes;
    int largest_fit;            /* largest context within usable; 0 = none */
    int largest_comfortable;    /* largest within comfortable; 0 = none */
} ds4_memory_result;

/* Plans exactly n_ctx tokens (n_ctx above the model's limit: TOO_BIG). */
void ds4_memory_check(const ds4_memory_input *in, const ds4_memory_policy *pol, int n_ctx, ds4_memory_result *out);

/* Plans the largest comfortable context not above cap (0 = the model's
 * limit): see above. */
void ds4_memory_auto(const ds4_memory_input *in, const ds4_memory_policy *pol, int cap, ds4_memory_result *out);

/* Largest n_ctx in [lo, hi] with weights + fixed + ctx_bytes(n) ≤ budget,
 * a multiple of step unless it is hi itself; 0 when lo does not fit. */
int ds4_memory_largest_ctx(const ds4_memory_input *in, uint64_t budget, int lo, int hi, int step);

/* Human text of a plan, one or more lines (no trailing newline), e.g. the
 * refusal with the numbers and the largest context that fits. what is the
 * pool ("memory", "device memory"), source where its size came from. */
void ds4_memory_explain(const ds4_memory_result *r, const ds4_memory_input *in, int requested, const char *what,
                        const char *source, char *buf, size_t n);

/* Value of KEY ("MemAvailable") in /proc/meminfo text, in bytes; -1 when absent. */
int ds4_memory_parse_meminfo(const char *text, const char *key, uint64_t *out);

/* Memory still available under the cgroup limits along the process's
 * cgroup path (v2 unified: memory.max − memory.current + inactive file
 * cache, the smallest over the path's levels; v1: memory.limit_in_bytes −
 * memory.usage_in_bytes). sysfs_root is normally "/sys/fs/cgroup",
 * proc_cgroup the text of /proc/self/cgroup. Returns 0 and the bytes, or
 * -1 when no limit applies. */
int ds4_memory_cgroup_available(const char *sysfs_root, const char *proc_cgroup, uint64_t *out);

/* Host memory available to this process: $DS4CL_MEM_AVAILABLE, else
 * MemAvailable lowered by any cgroup limit (a variable that is not a size
 * is passed over here: ds4_memory_env_check refuses it before a command
 * starts). source names where the number came from. -1 when nothing
 * could be read. */
int ds4_memory_host_available(uint64_t *bytes, char *source, size_t source_n);

/* -1 with err naming the variable when DS4CL_MEM_AVAILABLE or
 * DS4CL_DEVICE_MEM is set to something that is not a size (or 0): a
 * setting that is ignored would plan with memory the user said is not
 * there. 0 when both are unset or sizes. */
int ds4_memory_env_check(ds4_error *err);

/* $DS4CL_DEVICE_MEM, or 0 when unset (or not a size: ds4_memory_env_check
 * refuses that before a command starts). */
uint64_t ds4_memory_device_override(void);

typedef struct {
    char name[128];
    uint64_t global_mem; /* CL_DEVICE_GLOBAL_MEM_SIZE (total, not free) */
    bool unified;        /* shares host memory (integrated GPU, CPU device) */
} ds4_memory_device;

/* The OpenCL device the engine picks for `device` (ds4_engine_options.
 * device rule): 0, or -1 when none matches or it reports no memory. */
int ds4_memory_opencl_device(const char *device, ds4_memory_device *out);

/* Before loading: do the weights (≈ the file size) fit in host memory at
 * all? Every backend maps them from the file, so host memory it is, also
 * for OpenCL. -1 with the refusal in err (its numbers and what to do) when
 * they cannot; 0 otherwise (also when the memory is unknown, or the file
 * cannot be read: the loader reports that). */
int ds4_memory_precheck_file(const char *model_path, ds4_backend backend, ds4_error *err);

/* Decides the context of a session on e. The pool: host memory holding
 * the weights and the session (CPU, and OpenCL devices with unified
 * memory); the device memory of a discrete OpenCL device (selected by
 * `device` as ds4_memory_opencl_device does, or $DS4CL_DEVICE_MEM) holding
 * the session. requested > 0 is checked exactly (refused with the largest
 * context that fits when too big; a warning when tight), -1 is --ctx
 * auto, 0 takes default_ctx or, when that is not comfortable, the largest
 * comfortable context below it. least > 0 is the least context the caller
 * can use (the agent's system prompt): auto and the default never pick
 * less, and a refusal never suggests less. Returns 0 with *n_ctx set and
 * in why (may be NULL) the account of the context chosen (--ctx auto, a
 * reduced default, a tight fit: "warning: …"), "" when there is nothing to
 * say; else the refusal in err (its last line the hint about the override
 * variables when memory is the matter) and -2 when a requested context is
 * refused that a smaller one would avoid (beyond the model's limit, or
 * more than the memory holds while a context of at least `least` fits),
 * else -1. */
int ds4_memory_session_ctx(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                           int default_ctx, int least, int *n_ctx, char *why, size_t whylen, ds4_error *err);

/* ---- the expert cache's set-up (engine/expert_setup.c) ------------------- */

/* Whether the CPU backend reads the routed experts from the model file
 * through an expert cache (ds4_engine_options.expert_cache), and with what
 * budget, decided before the weights are read: a budget asked for streams
 * through a cache of that size whatever the memory; the automatic choice
 * streams when the file and the smallest session do not fit in the usable
 * host memory (ds4_memory_host_available less its reserve), with a budget
 * of a share of what the non-routed weights leave. Other backends never
 * stream (OpenCL keeps its own placement). */

/* A model's routed experts as the cache sees them. */
typedef struct {
    uint64_t weights_bytes;  /* tensor bytes of the file */
    uint64_t expert_bytes;   /* the routed experts among them */
    uint64_t resident_bytes; /* the rest: kept in memory */
    uint64_t slot_bytes;     /* one cache slot */
    uint64_t n_experts;      /* layers × routed experts */
    int min_slots;           /* experts per token (a layer's request) */
    uint64_t token_bytes;    /* routed expert bytes one decoded token reads */
} ds4_expert_shape;

typedef struct {
    bool streaming;         /* the experts go through a cache */
    uint64_t cache_bytes;   /* its budget (whole slots) */
    uint64_t slots;
    char refusal[512];      /* why no plan works, in numbers; "" otherwise */
} ds4_expert_plan;

typedef struct {
    const char *model_path;
    ds4_backend backend;
    int threads;
    ds4_quant_sim quant_sim;
    int least_ctx;   /* the context a session must hold beside the cache */
    int want_ctx;    /* the context the automatic budget leaves room for where it can */
    uint64_t budget; /* a cache of this many bytes asked for; 0: automatic */
} ds4_expert_setup_request;

typedef struct {
    ds4_expert_shape shape;
    ds4_expert_plan plan;
    uint64_t available;    /* the host memory detected (0: unknown) */
    uint64_t usable;       /* the memory planned with (0: unknown, nothing planned;
                              unbounded when unknown and a budget was asked for) */
    uint64_t session;      /* a session of least_ctx tokens */
    uint64_t session_want; /* a session of want_ctx tokens */
    char source[160];      /* where the memory figure came from */
} ds4_expert_setup;

/* Plans rq on an engine opened to plan only (nothing is read of the file
 * but its header): 0 with out->plan (streaming or not; not when the memory
 * is unknown and no budget was asked for), or -1 with the refusal in err,
 * in numbers: no expert cache fits beside the other weights and the
 * session, or (a file that does not bind, whose problem the loader then
 * reports) the weights do not fit at all (ds4_memory_precheck_file). */
int ds4_expert_setup_plan(const ds4_expert_setup_request *rq, ds4_expert_setup *out, ds4_error *err);

/* Bytes read from the file per decoded token at a cache hit rate. */
uint64_t ds4_expert_disk_bytes(const ds4_expert_shape *s, double hit_rate);

/* The hit rate of a cache of `slots` under uniform routing (the worst
 * case): the share of the experts it holds. */
double ds4_expert_uniform_hit_rate(const ds4_expert_shape *s, uint64_t slots);

/* The hit rate a cache of `slots` experts would have had on the routing
 * the popularity file at path recorded (ds4_engine_options.expert_stats):
 * the share of the requests that went to its `slots` most popular
 * experts. 0 with *rate, or -1 when the file is absent or not this
 * model's (identity, n_layer, n_expert). */
int ds4_expert_stats_hit_rate(const char *path, uint64_t identity, int n_layer, int n_expert, uint64_t slots,
                              double *rate);

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
