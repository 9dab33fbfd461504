/* memplan.h — will the model and a context of N tokens fit, and what is
 * the largest context that does?
 *
 * The planner proper is pure arithmetic over numbers: resident weights,
 * fixed overhead, a function giving the context-dependent bytes (KV,
 * compressed rows, frontiers, scratch) for n_ctx, and the memory of the
 * pool they all live in (host RAM for the CPU backend, device memory for
 * OpenCL). A headroom policy keeps a reserve free and calls a plan "tight"
 * when it uses more than a share of the rest:
 *
 *   reserve     = ds4_memory_reserve(available)  (1/16, at most 1 GiB: the
 *                 engine's one rule, which its device placement keeps too)
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
 * device memory, in bytes or with a K/M/G/T suffix) and glue that plans a
 * session on an opened engine and prints the verdict.
 */
#ifndef DS4CL_MEMPLAN_H
#define DS4CL_MEMPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

/* The model's limit when its file does not say (DeepSeek V4 Flash's), and
 * the most --ctx takes. */
#define MEMPLAN_MAX_CTX 1048576

typedef struct {
    uint64_t reserve_bytes;  /* bytes always left free; 0: ds4_memory_reserve of the pool */
    double comfort_fraction; /* share of usable memory a comfortable plan stays under */
    int granularity;         /* auto contexts are multiples of this */
    int min_ctx;             /* smallest context worth running */
    int tight_ctx;           /* auto's pick when no context is comfortable (if it fits) */
} memplan_policy;

/* The engine's reserve, comfortable under 90 % of the rest, contexts in
 * steps of 1024 from 4096; 32768 tokens when nothing is comfortable. */
memplan_policy memplan_default_policy(void);

/* Context-dependent bytes for n_ctx tokens; must not decrease with n_ctx. */
typedef uint64_t (*memplan_ctx_bytes_fn)(void *ud, int n_ctx);

typedef struct {
    uint64_t weights_bytes;     /* resident weights in this pool */
    uint64_t fixed_bytes;       /* other context-independent needs */
    memplan_ctx_bytes_fn ctx_bytes;
    void *ctx_ud;
    uint64_t available_bytes;   /* memory of the pool */
    int max_ctx;                /* the model's limit; 0 = MEMPLAN_MAX_CTX */
    int least_ctx;              /* the least the caller can use (0: the policy's min_ctx); for memplan_explain */
} memplan_input;

/* The simplest ctx_bytes: fixed + per_token × n_ctx (ud is a memplan_linear *). */
typedef struct {
    uint64_t fixed, per_token;
} memplan_linear;
uint64_t memplan_linear_bytes(void *ud, int n_ctx);

typedef enum {
    MEMPLAN_FITS = 0,  /* within the comfortable share */
    MEMPLAN_TIGHT,     /* fits, but leaves little room: warn */
    MEMPLAN_TOO_BIG,   /* does not fit: refuse */
} memplan_verdict;

typedef struct {
    memplan_verdict verdict;
    int n_ctx;                  /* the context planned (0: none fits) */
    uint64_t ctx_bytes;         /* ctx_bytes(n_ctx) */
    uint64_t need_bytes;        /* weights + fixed + ctx_bytes */
    uint64_t reserve_bytes;
    uint64_t usable_bytes;
    uint64_t comfortable_bytes;
    int largest_fit;            /* largest context within usable; 0 = none */
    int largest_comfortable;    /* largest within comfortable; 0 = none */
} memplan_result;

/* Plans exactly n_ctx tokens (n_ctx above the model's limit: TOO_BIG). */
void memplan_check(const memplan_input *in, const memplan_policy *pol, int n_ctx, memplan_result *out);

/* Plans the largest comfortable context not above cap (0 = the model's
 * limit): see the header comment. */
void memplan_auto(const memplan_input *in, const memplan_policy *pol, int cap, memplan_result *out);

/* Largest n_ctx in [lo, hi] with weights + fixed + ctx_bytes(n) ≤ budget,
 * a multiple of step unless it is hi itself; 0 when lo does not fit. */
int memplan_largest_ctx(const memplan_input *in, uint64_t budget, int lo, int hi, int step);

/* ---- memory detection ------------------------------------------------- */

/* Value of KEY ("MemAvailable") in /proc/meminfo text, in bytes; -1 when absent. */
int memplan_parse_meminfo(const char *text, const char *key, uint64_t *out);

/* Memory still available under the cgroup limits along the process's
 * cgroup path (v2 unified: memory.max − memory.current + inactive file
 * cache, the smallest over the path's levels; v1: memory.limit_in_bytes −
 * memory.usage_in_bytes). sysfs_root is normally "/sys/fs/cgroup",
 * proc_cgroup the text of /proc/self/cgroup. Returns 0 and the bytes, or
 * -1 when no limit applies. */
int memplan_cgroup_available(const char *sysfs_root, const char *proc_cgroup, uint64_t *out);

/* Host memory available to this process: $DS4CL_MEM_AVAILABLE, else
 * MemAvailable lowered by any cgroup limit. source names where the number
 * came from. -1 when nothing could be read. */
int memplan_host_available(uint64_t *bytes, char *source, size_t source_n);

/* -1 with err naming the variable when DS4CL_MEM_AVAILABLE or
 * DS4CL_DEVICE_MEM is set to something that is not a size (or 0): a
 * setting that is ignored would plan with memory the user said is not
 * there. 0 when both are unset or sizes. */
int memplan_env_check(ds4_error *err);

/* $DS4CL_DEVICE_MEM, or 0 when unset (or not a size: memplan_env_check
 * refuses that before a command starts). */
uint64_t memplan_device_memory_override(void);

typedef struct {
    char name[128];
    uint64_t global_mem; /* CL_DEVICE_GLOBAL_MEM_SIZE (total, not free) */
    bool unified;        /* shares host memory (integrated GPU, CPU device) */
} memplan_device;

/* The OpenCL device the engine picks for `device` (engine/ds4.h rule): a
 * number is an index over all platforms' devices in enumeration order,
 * other text a case-insensitive name substring; NULL means $DS4CL_DEVICE,
 * else the first GPU, else the first device. 0, or -1 when none matches. */
int memplan_opencl_device(const char *device, memplan_device *out);

/* ---- planning a real session ------------------------------------------ */

/* Human text of a plan, one or more lines (no trailing newline), e.g. the
 * refusal with the numbers and the largest context that fits. what is the
 * pool ("memory", "device memory"), source where its size came from. */
void memplan_explain(const memplan_result *r, const memplan_input *in, int requested,
                     const char *what, const char *source, char *buf, size_t n);

/* Before loading: do the weights (≈ the file size) fit in host memory at
 * all? Every backend maps them from the file, so host memory it is, also
 * for OpenCL. Prints the refusal on stderr and returns -1 when they
 * cannot; 0 otherwise (also when the memory is unknown). */
int memplan_precheck_file(const char *model_path, ds4_backend backend);

/* Decides the context of a session on e. The pool: host memory holding
 * the weights and the session (CPU, and OpenCL devices with unified
 * memory); the device memory of a discrete OpenCL device (selected by
 * `device` as memplan_opencl_device does, or $DS4CL_DEVICE_MEM) holding
 * the session. requested > 0 is checked exactly
 * (refused with the largest context that fits when too big; a warning when
 * tight), -1 is --ctx auto, 0 takes default_ctx or, when that is not
 * comfortable, the largest comfortable context below it. least > 0 is the
 * least context the caller can use (the agent's system prompt): auto and
 * the default never pick less, and a refusal never suggests less. Prints
 * warnings on stderr; returns 0 with *n_ctx set, else the refusal in err
 * (not printed; its last line the hint about the override variables when
 * memory is the matter) and -2 when a requested context is refused that
 * a smaller one would avoid (beyond the model's limit, or more than the
 * memory holds while a context of at least `least` fits), else -1. */
int memplan_session_ctx(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                        int default_ctx, int least, int *n_ctx, ds4_error *err);

/* The same, with the account of the context chosen (--ctx auto, a reduced
 * default, a tight fit: what memplan_session_ctx prints) written to why
 * instead of stderr; why is "" when there is nothing to say. */
int memplan_session_ctx_why(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                            int default_ctx, int least, int *n_ctx, char *why, size_t whylen, ds4_error *err);

#endif
