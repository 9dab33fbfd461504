/* plan.h — the placement plan: which parts of the model an accelerator
 * holds and which stay in host memory for the CPU (ds4_placement in
 * engine/ds4.h says what the plan promises the user).
 *
 * The model splits into parts that the forward pass places one by one
 * (engine/forward.h): the embedding, the output head, and per layer the
 * attention side, the FFN's dense side and the routed experts. Only the
 * routed experts are big enough to be worth moving (about 97 % of the
 * published model's bytes) and cheap enough to compute away from the
 * device (6 of 256 are read per token): so the plan is one number per
 * device, how many layers of its range, from the first, keep their
 * experts in host memory. The first layers rather than the last, as other
 * engines' users are used to (--n-cpu-moe N means the first N layers of
 * the model whatever the devices).
 *
 * Several devices split the layers into contiguous ranges, in proportion
 * to their memory or to given shares; the embedding lives on the first
 * device (or the host), the output head on the last.
 *
 * The engine applies the plan (engine/place.c) over the devices a
 * backend's device table opens; the backend never sees it.
 *
 * The arithmetic is pure: the device's memory, the reserve, the weight
 * bytes of each part and the session's bytes at a context (a function,
 * since the backend knows its buffers) give the smallest number of host
 * layers that fits, and the largest context each choice holds. */
#ifndef DS4CL_PLAN_H
#define DS4CL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "engine/forward.h"
#include "engine/model.h"

typedef enum { PLAN_EMBED, PLAN_HEAD, PLAN_ATTN, PLAN_FFN, PLAN_EXPERTS } plan_part;

/* Calls fn for every present weight tensor a part reads (layer is ignored
 * for the embedding and the head). */
typedef void (*plan_tensor_fn)(void *ud, const ds4_tensor *t);
void plan_part_tensors(const ds4_model *m, plan_part part, int layer, plan_tensor_fn fn, void *ud);
uint64_t plan_part_bytes(const ds4_model *m, plan_part part, int layer);

/* Device d's bytes of a session of n_ctx tokens with the backend's
 * scratch, under the split in force (the layers of its range hold their
 * state there); experts says whether any routed experts run on it (their
 * scratch). Must not decrease with n_ctx. */
typedef uint64_t (*plan_session_fn)(void *ud, int dev, int n_ctx, bool experts);

typedef struct {
    int n_devices;                              /* 1 … DS4_MAX_DEVICES */
    uint64_t memory[DS4_MAX_DEVICES];           /* each device's memory (0: unknown, no budget) */
    bool shares_host_memory[DS4_MAX_DEVICES];   /* zero-copy device: weights stay in host memory */
    double split[DS4_MAX_DEVICES];              /* shares of the layers; all 0: by budget */
    int n_ctx;                /* the session the devices must hold */
    int max_ctx;              /* the longest context worth planning for (0: 1 Mi tokens) */
    int host_expert_layers;   /* the request (ds4_engine_options) */
    int layer_first, layer_end; /* the layers planned (a stage); 0, 0: all */
    int stream_experts;       /* ds4_engine_options.stream_experts: keep room for one host layer's experts */
    plan_session_fn session_bytes;
    void *ud;
} plan_input;

/* Step 1: each device's range of layers (out->n_devices, out->dev[d]
 * first_layer, n_layers, head; ds4_split_layers over in->split, or each
 * device's budget). -1 with err when there are more devices than layers. */
int plan_split(const ds4_model *m, const plan_input *in, ds4_placement *out, ds4_error *err);

/* Step 2, once the caller's forward pass runs each range on its device
 * (for session_bytes): how many layers of each range keep their experts
 * on the host, the bytes, and whether it fits. Device names in out->dev[]
 * are kept. 0 when the plan fits; -1 when it does not, with err (and
 * out->refusal) saying so in numbers: what the device needs and has, the
 * largest context that fits, or the number of host layers that would. */
int plan_make(const ds4_model *m, const plan_input *in, ds4_placement *out, ds4_error *err);

/* The forward engine's placement for plan p: device d's parts on backend
 * dev[d], parts in host memory on backend host. lp has n_layer entries
 * and must outlive fp (fwd_set_placement copies it). */
void plan_to_fwd(const ds4_placement *p, const uint8_t *dev, uint8_t host, fwd_layer_place *lp, fwd_placement *fp);

#endif
