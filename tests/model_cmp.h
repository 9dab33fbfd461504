/* model_cmp.h — two engines on the same generated model run the same
 * tokens, traced, and compared: what the whole-model tests of the OpenCL
 * backend and of mixed-backend forward passes share.
 *
 * A plan feeds ids[0, prefill) in syncs of `chunk` tokens (one evaluation
 * chunk each), then one token at a time. Each run records the logits after
 * every chunk and every decode step, the last layer's residual streams at
 * every position (what the output head reads), the experts and indexer
 * selections at every (position, layer), and a snapshot after the
 * prefill. */
#ifndef DS4CL_TESTS_MODEL_CMP_H
#define DS4CL_TESTS_MODEL_CMP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/backend.h"
#include "engine/testkit/mkmodel.h"

typedef struct {
    int n_pos, n_layer, k, top_k, hc_dim;
    float *hidden;    /* [n_pos][hc_dim]: out_hc of the last layer */
    bool *has_hidden;
    int32_t *experts; /* [n_pos][n_layer][k], as reported */
    bool *has_experts;
    int32_t *sel;     /* [n_pos][n_layer][top_k] */
    bool *has_sel;
    int *comp_rows;   /* [n_layer]: compressed rows emitted */
} mc_record;

typedef struct {
    const ds4_tokens *ids;
    int prefill, chunk;
} mc_plan;

typedef struct {
    mc_record rec;
    float *chunk_logits;  /* [n_chunks][V]: after each prefill chunk */
    float *step_logits;   /* [n - prefill][V]: after each decode step */
    void *snap;           /* the session after the prefill */
    size_t snap_len;
} mc_outcome;

int mc_n_chunks(const mc_plan *p);

/* Runs the plan on e (an OpenCL-only engine's device memory is checked
 * against its estimate). */
void mc_run(ds4_engine *e, const mc_plan *p, mc_outcome *out);
void mc_outcome_free(mc_outcome *o);

/* Worst rel = max|Δ|/max|ref| over rows of n floats; worst_row gets its row. */
double mc_worst_rel(const float *got, const float *ref, int rows, int n, int *worst_row);
/* Largest |Δ| over n floats. */
double mc_max_abs(const float *got, const float *ref, size_t n);

typedef struct {
    double rel_chunk, rel_step, rel_hidden; /* worst rel of each */
    double abs_logits;                      /* largest |Δlogit| of chunks and steps */
    int ranked;                             /* indexer selections compared */
} mc_diff;

/* Checks got against ref within rel tol (logits and streams), identical
 * expert sets and indexer selections everywhere, identical compressed row
 * counts, and that the fixture exercised what it must (every ratio-4
 * layer ranks in decode, ratio-128 rows were emitted). */
void mc_check_agree(const ds4_hparams *hp, const mc_plan *p, const mc_outcome *ref, const mc_outcome *got, double tol,
                    mc_diff *d);

/* A snapshot taken elsewhere resumes on e: the next `steps` tokens'
 * logits agree with ref_steps within rel tol. */
void mc_resume_on(ds4_engine *e, const mc_plan *p, const mc_outcome *from, const float *ref_steps, int steps,
                  double tol, const char *what);

/* The second fixture shape the cross-backend tests share: wider embedding,
 * fewer and narrower heads, two output groups, two streams, Q4_K experts,
 * one hash-routed layer, compression ratios 4/128/0/4; seed 5. */
void mc_spec_other_shape(mk_spec *s);

#endif
