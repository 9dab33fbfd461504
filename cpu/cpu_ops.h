/* cpu_ops.h — the CPU implementation of ds4_ops (engine/ops.h): buffers
 * are host memory, every operation is a parallel loop on a thread pool
 * with a static split, so results are deterministic for any thread count.
 */
#ifndef DS4CL_CPU_OPS_H
#define DS4CL_CPU_OPS_H

#include "engine/expert_cache.h"
#include "engine/ops.h"

extern const ds4_ops cpu_ops;

/* A context for one bound model; threads ≤ 0 means one per online CPU.
 * NULL (with err) on failure. */
void *cpu_ops_new(const ds4_model *m, int threads, ds4_error *err);
void cpu_ops_free(void *ctx);
int cpu_ops_threads(void *ctx);
/* Routes the MoE's expert rows through ec (which the context then owns
 * and closes) instead of the mapping. On failure ec is closed. */
int cpu_ops_set_expert_cache(void *ctx, expert_cache *ec, ds4_error *err);
expert_cache *cpu_ops_expert_cache(void *ctx); /* NULL when none */
/* How the routed experts are multiplied. With Q8K, each token's (or
 * expert pair's) activations are quantized per 256 to 8 bits (Q8_K, as
 * ds4's own CPU path does) and IQ2_XXS / Q2_K expert rows use the integer
 * kernels of cpu/qk.h; other formats stay f32. F32 is exact f32 products.
 * cpu_expert_arith_for gives the engine's choice for a numerics mode: Q8K
 * under the release numerics (DS4_QSIM_FULL) unless DS4CL_EXPERTS=f32
 * asks for exact products; always F32 under the diagnostic numerics
 * (their f32 references are matched to 1e-3 or better). On the golden
 * model Q8K lands at median 0.1 relative from the f32 release-numerics
 * logits, closer than the reference engine's own 8-bit arithmetic. */
typedef enum { CPU_EXPERTS_F32, CPU_EXPERTS_Q8K } cpu_expert_arith;
cpu_expert_arith cpu_expert_arith_for(ds4_quant_sim qsim);
/* Why DS4CL_EXPERTS was not followed ("" when it was, or is unset). */
const char *cpu_expert_arith_error(void);
void cpu_ops_set_expert_arith(void *ctx, cpu_expert_arith a);
/* A line naming the arithmetic and the kernels' SIMD level. */
const char *cpu_expert_arith_name(cpu_expert_arith a);
/* Host bytes currently held by the context's scratch areas. */
uint64_t cpu_ops_scratch_bytes(void *ctx);
/* What the scratch grows to at most for chunks of T tokens in a context
 * of n_ctx tokens with `threads` threads (memory planning). */
uint64_t cpu_ops_scratch_estimate(const ds4_model *m, int T, int n_ctx, int threads);

#endif
