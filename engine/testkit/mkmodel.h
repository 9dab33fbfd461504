/* mkmodel.h — DS4-layout GGUF fixtures with random weights.
 *
 * Writes the metadata keys, tensor names, shapes and types of the published
 * DS4 files (doc/model.md §12.1) at any consistent shape, with weights drawn
 * from a seeded generator and scaled like the golden tiny model: dense
 * projections N(0, c²/in) with c ≈ 1–2.5 per role, norm weights near 1,
 * small HC mixers, a few gate/up rows large enough to reach the SwiGLU
 * clamp. Large expert tensors are written as random quant blocks with
 * scales chosen for the same RMS, never built in f32, and everything is
 * streamed, so a flash-width file of several GB takes seconds.
 *
 * Vocabulary: a byte-level tiny vocabulary (256 GPT-2 byte tokens, a few
 * merges, the seven DS4 specials), or a Hugging Face tokenizer.json laid
 * out as the V4 vocabulary (ids 0..127999 from it, the V4 specials at their
 * V4 ids, unique placeholders up to 129280).
 */
#ifndef DS4CL_MKMODEL_H
#define DS4CL_MKMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

#define MK_MAX_LAYERS 256

typedef enum {
    MK_VOCAB_TINY = 0, /* byte-level, 311 tokens */
    MK_VOCAB_JSON,     /* vocab_path: a tokenizer.json, V4 layout */
} mk_vocab_kind;

typedef struct {
    int n_layer, n_embd, n_head, head_dim, n_rot;
    int q_lora, o_lora, n_out_group;
    int n_expert, n_expert_used, n_ff_exp;
    int n_hash_layer, n_swa;
    int n_indexer_head, indexer_head_dim, indexer_top_k;
    int n_hc, hc_sinkhorn_iters;
    int ratios[MK_MAX_LAYERS]; /* compress ratio per layer */
    /* routed expert types (gate and up share one in valid files) */
    uint32_t gate_type, up_type, down_type;
    uint64_t seed;
    /* Router skew (0: none): each layer ranks its experts at random and
     * prefers the first, a token-routed layer drawing its k experts with
     * Zipf weights (1 + rank)^−skew, a scored layer biasing expert scores
     * by −skew/2 · ln(1 + rank): routing like real models', where a few
     * experts take much of the traffic. */
    double router_skew;
    mk_vocab_kind vocab;
    const char *vocab_path;
    const char *name;          /* general.name */
    /* Test hooks: leave one tensor out, or give one tensor another type. */
    const char *omit_tensor;
    const char *retype_tensor;
    uint32_t retype_to;
    /* Layout: the routed experts after every other tensor (so that cutting
     * the file's end takes experts only). */
    bool experts_last;
} mk_spec;

/* The golden tiny shape: 6 layers (ratios 0,0,4,128,4,128), 256 wide,
 * 8 heads × 512, 16 experts × 256, q2 experts, tiny vocabulary. */
void mk_spec_tiny(mk_spec *s);
/* DeepSeek V4 Flash widths with n_layer layers and Flash's ratio schedule
 * (0, 0, then 4 on even and 128 on odd layers), q2 experts, V4 vocabulary
 * from vocab_path. */
void mk_spec_flash_width(mk_spec *s, int n_layer);
/* Flash's widths cut down for tests that run the whole model: 3 layers of
 * ratios 0, 4, 128, 16 routed experts, one hash-routed layer, indexer
 * top-16 (so that it ranks within a few hundred tokens), the tiny
 * vocabulary, seed 2 (~800 MB). */
void mk_spec_flash_width_small(mk_spec *s);
/* Flash's ratio schedule for layers [0, n_layer). */
void mk_ratio_schedule(mk_spec *s);
/* "q2" (IQ2_XXS gate/up, Q2_K down) or "q4" (Q4_K); -1 when unknown. */
int mk_set_quant(mk_spec *s, const char *q);

/* Checks that the shape can be written (block multiples, ranges). */
int mk_validate(const mk_spec *s, ds4_error *err);

/* Optional progress: fraction of tensor bytes written. */
typedef void (*mk_progress_fn)(void *ud, double fraction);

int mk_write_file(const mk_spec *s, const char *path, mk_progress_fn progress, void *ud, ds4_error *err);
/* The same into a malloc'd buffer (small shapes: tests, fuzz seeds). */
int mk_write_memory(const mk_spec *s, void **buf, size_t *len, ds4_error *err);

/* ---- vocabulary (mkmodel_vocab.c) ------------------------------------------- */

typedef struct {
    char **tokens; /* n strings (NUL-terminated; tokens never contain NUL) */
    size_t *lens;
    int32_t *types; /* llama.cpp token types: 1 normal, 3 control, 4 user, 5 unused */
    size_t n;
    char **merges;
    size_t n_merges;
    int32_t bos, eos;
} mk_vocab;

int mk_vocab_tiny(mk_vocab *v, ds4_error *err);
int mk_vocab_from_json(mk_vocab *v, const char *path, ds4_error *err);
void mk_vocab_free(mk_vocab *v);

#endif
