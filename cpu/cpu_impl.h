/* cpu_impl.h — what the CPU backend's op files share: the context, the
 * buffer struct and the scratch helpers. */
#ifndef DS4CL_CPU_IMPL_H
#define DS4CL_CPU_IMPL_H

#include <math.h>
#include <stdbool.h>

#include "cpu/cpu_kernels.h"
#include "engine/expert_cache.h"
#include "engine/ops.h"
#include "cpu/threadpool.h"

struct ds4_buf {
    uint8_t *p;
    size_t n;
    bool is_view;
};

/* Scratch slots: each op uses distinct slots for areas that are live at
 * the same time. */
enum { CPU_SCR_A, CPU_SCR_B, CPU_SCR_C, CPU_SCR_PTRS, CPU_SCR_INTS, CPU_SCR_SLOTS };

typedef struct {
    const ds4_model *m;
    const ds4_hparams *hp;
    threadpool *tp;
    int nt;
    float **tscr;    /* per-thread scratch, tscr_n floats each */
    size_t tscr_n;
    float *scr[CPU_SCR_SLOTS];
    size_t scr_n[CPU_SCR_SLOTS];
    bool q8k_experts; /* routed experts through qk.h's integer products */
    expert_cache *ec;      /* routed experts read through it (owned); NULL: the mapping */
    expert_rows *ec_rows;  /* [n_expert]: where a MoE call's experts are in the cache */
    bool *ec_hit;    /* [n_expert] */
    char err[256];
} cpu_ctx;

int cpu_fail(cpu_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 when [off, off+n) lies inside b; else -1, recorded. */
int cpu_range_ok(cpu_ctx *c, ds4_buf *b, size_t off, size_t n);
/* σ(z) in the two-sided form (no overflow for large |z|), and z·σ(z). */
static inline float cpu_sigmoid_stable(float z)
{
    if (z >= 0.0f) return 1.0f / (1.0f + expf(-z));
    float e = expf(z);
    return e / (1.0f + e);
}

static inline float cpu_silu(float z) { return z * cpu_sigmoid_stable(z); }
/* A scratch slot of at least `floats` floats (contents not kept); NULL when
 * out of memory. */
float *cpu_scratch(cpu_ctx *c, int slot, size_t floats);
/* Grows every thread's scratch to `floats`; -1 (recorded) on failure. */
int cpu_thread_scratch(cpu_ctx *c, size_t floats);
/* Rows per task when `rows` rows are split into about per_thread tasks
 * per thread (a multiple of the 4-row tile). */
int64_t cpu_row_block(cpu_ctx *c, int64_t rows, int per_thread);
cpu_weight cpu_weight_of(const ds4_tensor *t, int64_t expert);
int cpu_matmul_ptrs(cpu_ctx *c, const ds4_tensor *W, int T, int n_groups, const float **x, float **y);

/* The routed experts (cpu_moe.c), and the Q8_K activation scratch it
 * uses for T tokens (floats). */
int cpu_moe(void *ctx, const ds4_tensor *gate, const ds4_tensor *up, const ds4_tensor *down, ds4_buf *x, ds4_buf *sel,
            ds4_buf *w, int T, float clamp, ds4_buf *y);
size_t cpu_moe_act_floats(int64_t T, int64_t k, int64_t D, int64_t F);

int cpu_compress(void *ctx, ds4_buf *a, ds4_buf *b, const ds4_tensor *ape, ds4_buf *front, int64_t front_rows, int R,
                 int lanes, int d, int64_t pos0, int T, ds4_buf *pooled);
int cpu_indexer(void *ctx, ds4_buf *q, ds4_buf *weights, ds4_buf *rows, ds4_cache_type ct, int R, int64_t pos0, int T,
                ds4_buf *sel);
int cpu_attention(void *ctx, ds4_buf *q, ds4_buf *raw, ds4_cache_type ct, int64_t raw_rows, ds4_buf *comp, int R,
                  ds4_buf *sel, int sel_stride, const ds4_tensor *sinks, int64_t pos0, int T, ds4_buf *o);

#endif
