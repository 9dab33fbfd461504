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

struct ds4_engine {
    ds4_engine_options opt;   /* strings point into the copies below */
    char *model_path;
    char *script_path;
    char *device;
    char *split;
    gguf_file *gguf;
    ds4_tokenizer *tok;
    ds4_model *model;         /* NULL for backends that need no weights */
    uint64_t identity;        /* gguf_identity() */
    int n_vocab;
    const ds4_backend_ops *ops;
    void *impl;               /* backend's engine-level state */
    bool placed;              /* the backend made a placement plan (ds4_engine_placement) */
    ds4_placement place;
};

struct ds4_backend_ops {
    const char *name;
    bool needs_model;         /* bind the weights before open() */

    int (*open)(ds4_engine *e, ds4_error *err); /* sets e->impl */
    void (*close)(ds4_engine *e);
    /* Optional: the devices this backend can run on, and in *selected the
     * one `piece` names (one piece of a device list, already resolved by
     * engine_device_pieces: NULL is the backend's default; src names where
     * it came from for messages), -1 with err when it names none. */
    int (*devices)(const char *piece, const char *src, ds4_device **out, int *n, int *selected, ds4_error *err);
    /* Optional: backend/device names into info. */
    void (*describe)(const ds4_engine *e, ds4_model_info *info);
    uint64_t (*session_bytes)(const ds4_engine *e, int n_ctx);
    /* Optional: a new ops context of this backend over e's model, for
     * another backend's forward pass to run parts of the model on (the CPU
     * backend computes routed experts kept in host memory). */
    int (*ops_new)(const ds4_engine *e, const struct ds4_ops **ops, void **ctx, void (**free_ctx)(void *),
                   ds4_error *err);

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
};

/* The device list a backend is asked for: want ("0,1", one device, or
 * NULL/"" for $DS4CL_DEVICE) split into pieces (ds4_parse_devices), *src
 * naming where it came from ("--device", "DS4CL_DEVICE"). Returns how many
 * pieces (0: the backend's default device), or -1 with err. */
int engine_device_pieces(const char *want, char (*pieces)[DS4_DEVICE_PIECE_MAX], const char **src, ds4_error *err);

/* The backends (cpu/, opencl/, engine/testkit/). */
extern const ds4_backend_ops ds4_backend_cpu;
extern const ds4_backend_ops ds4_backend_opencl;
extern const ds4_backend_ops ds4_backend_script;

#endif
