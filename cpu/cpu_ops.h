/* cpu_ops.h — the CPU implementation of ds4_ops (engine/ops.h): buffers
 * are host memory, every operation is a parallel loop on a thread pool
 * with a static split, so results are deterministic for any thread count.
 */
#ifndef DS4CL_CPU_OPS_H
#define DS4CL_CPU_OPS_H

#include "engine/ops.h"

extern const ds4_ops cpu_ops;

/* A context for one bound model; threads ≤ 0 means one per online CPU.
 * NULL (with err) on failure. */
void *cpu_ops_new(const ds4_model *m, int threads, ds4_error *err);
void cpu_ops_free(void *ctx);
int cpu_ops_threads(void *ctx);
/* Host bytes currently held by the context's scratch areas. */
uint64_t cpu_ops_scratch_bytes(void *ctx);
/* What the scratch grows to at most for chunks of T tokens in a context
 * of n_ctx tokens with `threads` threads (memory planning). */
uint64_t cpu_ops_scratch_estimate(const ds4_model *m, int T, int n_ctx, int threads);

#endif
