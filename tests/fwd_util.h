/* fwd_util.h — what the forward-pass tests share: golden sets, engines on
 * the golden model, teacher-forced runs with routing traces, and the
 * per-position comparison statistics of the golden READMEs. */
#ifndef DS4CL_TESTS_FWD_UTIL_H
#define DS4CL_TESTS_FWD_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

typedef struct {
    ds4_tokens prompt, fed, greedy; /* case.json */
    ds4_tokens all;                 /* prompt + fed */
    int n_vocab;
    float *ref;       /* reference rows [n_rows][n_vocab] */
    size_t n_rows;
    void *routing;    /* json_object * of routing.json, or NULL */
} golden_set;

/* Loads golden/<set>/case.json and the reference rows of golden/<set>/<rows>
 * (e.g. "prefix_logits.f32"); with routing, routing.json too. Skips the
 * test when the golden data is absent. */
void golden_load(golden_set *g, const char *set, const char *rows, bool routing);

void golden_free(golden_set *g);

/* The golden model path (skips when absent). */
const char *golden_model(void);

/* An engine on the golden model (fails the test on error). */
ds4_engine *fwd_test_engine(ds4_quant_sim qs, int threads);
/* Skips the test unless backend b is in the build and can run here (for
 * OpenCL: a device exists). Call it before allocating anything. */
void fwd_require_backend(ds4_backend b);
/* Skips the test unless two OpenCL devices exist (PoCL gives two with
 * POCL_DEVICES="pthread pthread", set here unless already set). */
void fwd_require_two_opencl_devices(void);
/* The same on another backend; skips as fwd_require_backend, and fails
 * when the backend exists here but does not open. */
ds4_engine *fwd_test_engine_on(ds4_backend b, ds4_quant_sim qs, int threads);
/* The same with the routed experts of the first host_expert_layers layers
 * in host memory (ds4_engine_options; 0 = automatic). */
ds4_engine *fwd_test_engine_placed(ds4_backend b, ds4_quant_sim qs, int threads, int host_expert_layers);

/* Decisions recorded by a traced run: experts [n_pos][n_layer][k] (sorted
 * ascending), indexer selections [n_pos][n_layer][top_k] (sorted, −1
 * padded; has_sel marks where the indexer ranked). */
typedef struct {
    int n_pos, n_layer, k, top_k;
    int32_t *experts;
    int32_t *sel;
    bool *has_sel;
} fwd_routing;

/* Feeds ids one at a time (teacher forcing), writing the logits after each
 * into out [n][n_vocab]. With routing non-NULL, records the decisions. */
void fwd_teacher_force(ds4_engine *e, const ds4_tokens *ids, float *out, fwd_routing *routing);

/* Checks a traced run of the whole set (g loaded with routing) against
 * routing.json: the expert set at every (position, layer) and the
 * indexer's selection wherever the reference had more compressed rows than
 * it keeps (and no ranking where it had fewer). */
void fwd_check_routing(const golden_set *g, const fwd_routing *r);

typedef struct {
    double max, median, p90;
    int argmax_equal, argmax_exempt_misses, n;
    int worst_pos;
} fwd_stats;

/* rel(p) = max|Δ|/max|ref| per row; argmax agreement counted over rows,
 * misses at rows whose reference top1−top2 gap is below near_tie·max|ref|
 * counted separately. */
void fwd_compare(const float *mine, const float *ref, size_t rows, int n_vocab, double near_tie, fwd_stats *st);

/* The statistical tiers against golden A-f32 (release numerics, f32
 * activations; ../shared/golden/README.md), teacher-forced over every
 * position; each fails the calling test with `what` and the figure missed.
 * Release tier (f32 activations): median rel <= 0.05, p90 <= 0.15, argmax
 * agreement >= 90 %. 8-bit activation tier (activations quantized to 8
 * bits before integer dots, the default CPU expert arithmetic): median
 * <= 0.11, p90 <= 0.22, argmax >= 78 %, a bound the reference engine's own
 * 8-bit numerics (golden A: 0.141 / 0.294 / 70.8 % against A-f32) miss and
 * exact f32 products (0.012 / 0.053 / 95 %) meet with room. */
void fwd_check_release_tier(const fwd_stats *st, const char *what);
void fwd_check_8bit_tier(const fwd_stats *st, const char *what);

int32_t fwd_argmax(const float *v, int n);

/* A sequence of n pseudo-random token ids below n_vocab (deterministic). */
void fwd_random_ids(ds4_tokens *out, size_t n, int n_vocab, uint32_t seed);

/* Logits after syncing ids into a fresh session of n_ctx (chunk 0 = the
 * engine's default) into out [n_vocab]. */
void fwd_logits_after(ds4_engine *e, int n_ctx, int chunk, const int32_t *ids, size_t n, float *out);

#endif
