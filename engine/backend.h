/* backend.h — what a compute backend (CPU, OpenCL, the scripted test
 * engine) provides to the common engine/session layer.
 *
 * The common layer (engine.c, session.c) owns everything that is the same
 * for every backend: opening the GGUF, the tokenizer and the model binding,
 * the token prefix of a session, longest-common-prefix reuse, logits
 * bookkeeping, and the snapshot container (header, tokens, logits,
 * checksum). A backend owns the per-token computation and the KV state it
 * needs, and serializes that state as an opaque payload.
 */
#ifndef DS4CL_BACKEND_H
#define DS4CL_BACKEND_H

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/gguf.h"
#include "engine/model.h"

typedef struct ds4_backend_ops ds4_backend_ops;
struct ds4_ops;

/* A backend's session members: its per-session state and what the common
 * layer (session.c) asks of it. The engine calls them through e->sess,
 * the backend's own unless an engine hook (engine_hook_sessions) wraps
 * them. */
typedef struct {
    void *(*state_new)(ds4_engine *e, int n_ctx, ds4_error *err);
    void (*state_free)(void *st);

    /* Evaluates tokens[pos .. pos+n) on a state that holds exactly
     * tokens[0 .. pos); `tokens` is the whole prefix. Writes the logits after
     * the last evaluated token into `logits` (n_vocab floats). Calls
     * cb->progress(done, n, …) as work completes and polls cb->cancel at
     * every chunk and token boundary. Returns how many tokens were
     * evaluated (fewer than n only when cancelled; the state then holds
     * exactly tokens[0 .. pos+returned)), or -1 on error (state undefined:
     * the caller resets it). */
    long (*eval)(void *st, const int32_t *tokens, size_t pos, size_t n,
                 float *logits, const ds4_callbacks *cb, ds4_error *err);

    /* One decode step of n states together (ds4_sessions_eval): evaluates
     * tokens[i][pos[i]] on state i, which holds tokens[i][0 .. pos[i]),
     * writing its logits into logits[i]. Returns n when done; 0 when
     * cancelled (every state unchanged); -1 on error (the states
     * undefined: the caller resets them); -2 when it cannot step these
     * states together (nothing done: the caller evaluates them one by
     * one). May be NULL (one by one). */
    int (*eval_batch)(void *const *st, const int32_t *const *tokens, const size_t *pos, int n,
                      float *const *logits, const ds4_callbacks *cb, ds4_error *err);

    /* Shrinks the state to its first n tokens. Returns -1 when it cannot,
     * and the caller resets and recomputes from the start. May be NULL. */
    int (*rewind)(void *st, size_t n);
    void (*reset)(void *st);
    uint64_t (*kv_bytes)(void *st);

    /* Appends the state's payload for a snapshot, and restores one. The
     * payload must not depend on the backend that wrote it when two
     * backends compute the same model (CPU and OpenCL share a format). */
    int (*save)(void *st, strbuf *out, ds4_error *err);
    int (*load)(void *st, const void *payload, size_t len, size_t n_tokens, ds4_error *err);
} ds4_session_ops;

/* What a backend that computes on devices (OpenCL) answers about them.
 * The engine plans and places the model over the devices a device list
 * names (engine/place.c: which layer range, which parts on which device,
 * which in host memory for the host backend) and tells each device what
 * to hold; the backend allocates what it is told and never sees the
 * plan. ctx is one device's ops context. */
typedef struct {
    const char *family;       /* names several devices together: "OpenCL" */
    int prefill_chunk;        /* the forward pass's chunk on these devices */
    /* Opens the device `piece` names (one piece of a device list, as
     * engine_device_pieces gives them; NULL: the backend's default) as an
     * ops context over e's model that holds no weights yet. */
    int (*open)(ds4_engine *e, const char *piece, const struct ds4_ops **ops, void **ctx, ds4_error *err);
    void (*free)(void *ctx);
    /* The device's index, kind, name, memory and largest buffer;
     * shares_host_memory: the weights it is given stay in host memory
     * that it reads in place (under the engine's options). */
    void (*describe)(void *ctx, ds4_device *out);
    /* Device bytes of the context's own scratch for chunks of up to T
     * tokens in a session of n_ctx (experts: routed experts run here). */
    uint64_t (*scratch_bytes)(void *ctx, int T, int n_ctx, bool experts);
    /* Gives the tensors t[0 … n) device memory: the device's share of
     * the placement, with e's load progress. */
    int (*hold)(const ds4_engine *e, void *ctx, const ds4_tensor *const *t, size_t n, ds4_error *err);
} ds4_device_ops;

struct ds4_engine {
    ds4_engine_options opt;   /* strings point into the copies below */
    char *model_path;
    char *script_path;
    char *device;
    char *split;
    char *expert_stats;
    gguf_file *gguf;
    ds4_tokenizer *tok;
    ds4_model *model;         /* NULL for backends that need no weights */
    uint64_t identity;        /* gguf_identity() */
    int n_vocab;
    const ds4_backend_ops *backend; /* the registry's entry for opt.backend */
    const ds4_session_ops *sess;    /* the session members in force (engine_hook_sessions) */
    _Atomic int n_sessions;         /* open sessions: a hook comes before the first */
    void *impl;               /* backend's engine-level state */
    bool placed;              /* the backend made a placement plan (ds4_engine_placement) */
    ds4_placement place;
};

struct ds4_backend_ops {
    ds4_backend id;
    const char *name;
    bool needs_model;         /* bind the weights before open() */

    /* A backend computes either on devices the engine places the model
     * over (device set: open and close are the engine's, place.c), or on
     * its own (open sets e->impl, close frees it). */
    const ds4_device_ops *device;
    /* Optional: refuses options this backend cannot open with, before
     * the model file is read. */
    int (*check)(const ds4_engine_options *opt, ds4_error *err);
    int (*open)(ds4_engine *e, ds4_error *err);
    void (*close)(ds4_engine *e);
    /* Optional: the devices this backend can run on, and in *selected the
     * one `piece` names (one piece of a device list, already resolved by
     * engine_device_pieces: NULL is the backend's default; src names where
     * it came from for messages), -1 with err when it names none. */
    int (*devices)(const char *piece, const char *src, ds4_device **out, int *n, int *selected, ds4_error *err);
    /* Optional: backend/device names into info. */
    void (*describe)(const ds4_engine *e, ds4_model_info *info);
    /* A backend without devices: what a session takes (the engine answers
     * for one with devices, from its placement). */
    uint64_t (*session_bytes)(const ds4_engine *e, int n_ctx);
    /* Optional: a new ops context of this backend over e's model, for
     * another backend's forward pass to run parts of the model on. The
     * registry's host backend (engine_host_backend) computes the parts a
     * placement keeps in host memory. */
    int (*ops_new)(const ds4_engine *e, const struct ds4_ops **ops, void **ctx, void (**free_ctx)(void *),
                   ds4_error *err);
    /* Optional: the expert cache its routed experts go through, or NULL
     * (engine/expert_cache.h). */
    const struct expert_cache *(*expert_cache)(const ds4_engine *e);

    ds4_session_ops session;
};

/* The device list a backend is asked for: want ("0,1", one device, or
 * NULL/"" for $DS4CL_DEVICE) split into pieces (ds4_parse_devices), *src
 * naming where it came from ("--device", "DS4CL_DEVICE"). Returns how many
 * pieces (0: the backend's default device), or -1 with err. */
int engine_device_pieces(const char *want, char (*pieces)[DS4_DEVICE_PIECE_MAX], const char **src, ds4_error *err);

/* ---- the registry -----------------------------------------------------------
 * The engine names no backend: each backend (cpu/, opencl/, the script
 * engine of engine/testkit/) hands its table to ds4_backend_register
 * itself, from a constructor that DS4_BACKEND_REGISTER writes in its own
 * file. That needs nothing but the linker: every program and the tests
 * link the library as plain object files (Makefile), and the constructor
 * of each linked object runs before main, although nothing calls it by
 * name. (A constructor in an archive member that nothing references
 * would be dropped: the library must not become a static archive without
 * a list of its backends at link level instead.) The constructors run in
 * link order; the registry keeps its tables sorted by id, so that every
 * lookup (ds4_backends, engine_host_backend) answers in ds4_backend order
 * whatever that order is. Registration ends before main: the registry is
 * read, never written, once threads exist. */

/* Adds a backend's table. Two tables with one id, or more backends than
 * the registry holds, are a fault of the build: the process says so and
 * aborts. */
void ds4_backend_register(const ds4_backend_ops *ops);

/* In a backend's file, at file scope: registers its table `ops` (a
 * ds4_backend_ops object) before main. */
#define DS4_BACKEND_REGISTER(ops)                                                                  \
    __attribute__((constructor)) static void ops##_register(void) { ds4_backend_register(&(ops)); }

/* The registry's entry for b, NULL when this build has none. */
const ds4_backend_ops *engine_backend(ds4_backend b);
/* The backend that computes from host memory the parts a placement keeps
 * there (the first by id with ops_new), or NULL. */
const ds4_backend_ops *engine_host_backend(void);

/* ---- the job hook -------------------------------------------------------------
 * A job of several processes (mpi/, in a `make MPI=1` build: one model
 * split by layers over the ranks of an MPI job) joins the engine the way
 * a backend does: it hands its table to ds4_job_register from a
 * constructor (DS4_JOB_REGISTER), and the front ends reach it through
 * engine/ds4.h (ds4_job_start, …), which answers for a job of one process
 * when no hook registered. Each member is what ds4.h's function of the
 * same name promises. */
typedef struct {
    int (*start)(int *argc, char ***argv);
    int (*ranks)(void);
    int (*serve)(void);
    int (*plan)(const ds4_engine *e, int *layer_end, ds4_error *err);
    int (*attach)(ds4_engine *e, ds4_error *err);
    const char *(*split_text)(void);
} ds4_job_ops;

/* Installs the job hook; a second one is a fault of the build (the
 * process says so and aborts). */
void ds4_job_register(const ds4_job_ops *job);

#define DS4_JOB_REGISTER(job)                                                                      \
    __attribute__((constructor)) static void job##_register(void) { ds4_job_register(&(job)); }

/* A session hook (the job's rank 0 mirrors sessions on every rank): from
 * now on e's sessions go through hook, whose members call on to the
 * backend's own, given in *base. 0, or -1 with err when a session is open
 * or another hook is in place. */
int engine_hook_sessions(ds4_engine *e, const ds4_session_ops *hook, const ds4_session_ops **base, ds4_error *err);

#endif
