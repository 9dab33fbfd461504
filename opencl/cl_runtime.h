/* cl_runtime.h — the OpenCL runtime under the OpenCL backend: device
 * discovery and selection, one context with an in-order queue, kernel
 * programs built from the embedded sources with an on-disk binary cache,
 * kernel lookup by name, and a small launch helper.
 *
 * ---- Devices --------------------------------------------------------------
 * clrt_devices() lists every device of every platform in ICD enumeration
 * order; the position in that list is the device index of `--device N` and
 * $DS4CL_DEVICE. clrt_pick() applies the selection rule of engine/ds4.h: a
 * number is an index, other text a case-insensitive substring of the device
 * name, NULL or "" means $DS4CL_DEVICE, else the first GPU, else the first
 * device. This is the one implementation of that rule (the memory planner
 * and `ds4cl --list-devices` use it too).
 *
 * ---- Programs and kernels -------------------------------------------------
 * Every opencl/kernels/NAME.cl except common.cl is one program, "NAME". It
 * is compiled as common.cl followed by NAME.cl, so the helpers of common.cl
 * (quant block access, f16 loads, FP_CONTRACT off) are visible in every
 * program. Build options: -DCLRT_CPU=1 on CPU devices (else 0; see
 * clrt_set_cpu_loops), and
 * -cl-fp32-correctly-rounded-divide-sqrt where the device supports it, so
 * that divisions and square roots round like the host's. Never fast-math:
 * the kernels must reproduce the CPU backend's f32 arithmetic.
 *
 * A program may also be built in parts: "NAME:PART" is NAME.cl compiled
 * with CLRT_PART and CLRT_PART_<PART> defined, which the file uses to keep
 * only that part's kernels. Compilers spend time per kernel (rusticl took
 * minutes over all of matmul.cl), so a backend builds the parts it needs.
 * A part is its own program: its own build, log and cache entry.
 *
 * An op file gets a kernel by program and kernel name; the program is built
 * on first use and kept, with its kernels, for the runtime's lifetime:
 *
 *     cl_kernel k = clrt_kernel(rt, "basic", "add_f32");
 *     if (!k) return -1;                       // message in clrt_error(rt)
 *     clrt_call call = clrt_begin(rt, k);
 *     clrt_arg_mem(&call, a);  clrt_arg_long(&call, n);  ...
 *     size_t global = n;
 *     return clrt_enqueue(&call, 1, &global, NULL);
 *
 * A kernel object is shared by every caller of that name: set its
 * arguments and enqueue it with nothing in between (a runtime is used by
 * one thread at a time). Adding kernels therefore only means adding a .cl
 * file (and calling clrt_kernel with its base name).
 *
 * ---- Binary cache ---------------------------------------------------------
 * Built programs are stored under <cache>/ds4cl/cl/<key>.bin with <cache> =
 * $XDG_CACHE_HOME or ~/.cache (or clrt_options.cache_dir), the key being the
 * SHA-256 of the device name, vendor, driver version, platform version,
 * build options and the full source. Files are written atomically (temp +
 * rename) and carry a checksum; an entry that is unreadable, corrupt, or
 * that the driver refuses is ignored, rebuilt from source and replaced.
 *
 * ---- Queue discipline ------------------------------------------------------
 * All work goes to one in-order queue and nothing here waits for it, except
 * clrt_finish() and blocking reads, which only the memory ops use.
 */
#ifndef DS4CL_CL_RUNTIME_H
#define DS4CL_CL_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <CL/cl.h>

#include "base/base.h"

/* ---- devices --------------------------------------------------------------- */

typedef struct {
    int index;                 /* over all platforms' devices */
    cl_platform_id platform;
    cl_device_id id;
    char platform_name[128];
    char platform_version[128];
    char name[128];
    char vendor[128];
    char driver[64];           /* CL_DRIVER_VERSION */
    char c_version[64];        /* CL_DEVICE_OPENCL_C_VERSION, e.g. "OpenCL C 1.2 pocl" */
    cl_device_type type;
    uint64_t global_mem;       /* CL_DEVICE_GLOBAL_MEM_SIZE */
    uint64_t max_alloc;        /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    uint32_t base_align;       /* CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes */
    uint32_t compute_units;
    size_t max_wg;             /* CL_DEVICE_MAX_WORK_GROUP_SIZE (or the override below) */
    uint64_t local_mem;        /* CL_DEVICE_LOCAL_MEM_SIZE (or the override below) */
    bool unified;              /* shares host memory (host-unified, or a CPU device) */
    /* Optional features, as the device reports them. The kernels need
     * none of them (OpenCL C 1.2 core only: half as storage, no
     * subgroups, no integer dot products); they are shown so that a
     * report from a user's machine says what a faster path could use. */
    bool fp16;                 /* cl_khr_fp16: half arithmetic */
    bool subgroups;            /* cl_khr_subgroups or cl_intel_subgroups */
    bool int_dot;              /* cl_khr_integer_dot_product */
} clrt_device;

/* Limits that vary between devices and that the launches respect: the
 * work-group size (per device, and per kernel: CL_KERNEL_WORK_GROUP_SIZE
 * is lower than the device's for kernels that use many registers on some
 * GPUs) and the local memory per work-group. $DS4CL_CL_MAX_WG and
 * $DS4CL_CL_LOCAL_MEM (bytes) lower them below what the device reports,
 * so that the small-device paths run and are tested on any device. */

/* "work-groups ≤ 4096, local memory 4 MiB, fp16 no, subgroups no,
 * integer dot products no" into buf. */
void clrt_describe_limits(const clrt_device *d, char *buf, size_t n);

/* All devices into a malloc'd array (*n entries). Returns 0, or -1 with a
 * message in err (no platform / ICD installed, or no device at all). */
int clrt_devices(clrt_device **out, int *n, ds4_error *err);

/* Index into devs of the device `want` selects (rule above), or -1 with a
 * message in err. want is one device: a list ("0,1") is split by the
 * engine (ds4_parse_devices), which picks each of its pieces. */
int clrt_pick(const clrt_device *devs, int n, const char *want, ds4_error *err);
/* The same for a piece already resolved: NULL or "" is the default (the
 * first GPU), $DS4CL_DEVICE is not read; src names the piece's origin in
 * messages ("--device", "DS4CL_DEVICE"). */
int clrt_pick_piece(const clrt_device *devs, int n, const char *want, const char *src, ds4_error *err);

/* "GPU", "CPU", "accelerator", … */
const char *clrt_type_name(cl_device_type t);

/* Name of an OpenCL error code ("CL_OUT_OF_RESOURCES"), or "error N". */
const char *clrt_strerror(cl_int code);

/* ---- runtime ----------------------------------------------------------------- */

typedef struct clrt clrt;

struct embedded_file;

typedef struct {
    const char *device;    /* selection (rule above) */
    const char *cache_dir; /* program cache root instead of the XDG cache
                              dir ("<dir>/ds4cl/cl"); "" disables the cache */
    const struct embedded_file *sources; /* programs (res/embedded.h);
                                            NULL = the built-in clrt_sources */
} clrt_options;

/* A context and queue on the selected device; NULL with a message in err. */
clrt *clrt_open(const clrt_options *o, ds4_error *err);
/* CLRT_CPU for the programs built from now on: 1 lets kernels pick loops
 * shaped for CPUs. Set it to the kernel shape the host chose, so that the
 * GPU-shaped build also runs (and is tested) on a CPU device. -1 once a
 * program is built. */
int clrt_set_cpu_loops(clrt *rt, bool cpu_loops);
void clrt_close(clrt *rt);

const clrt_device *clrt_dev(const clrt *rt);
cl_context clrt_context(const clrt *rt);
cl_command_queue clrt_queue(const clrt *rt);

/* Message of the last failure of anything using this runtime. */
const char *clrt_error(const clrt *rt);
/* Records a message (returns -1, so `return clrt_fail(rt, …);` works). */
int clrt_fail(clrt *rt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records "what: CL_ERROR_NAME" for a failed call; returns -1. */
int clrt_fail_cl(clrt *rt, cl_int code, const char *what);

/* The kernel `kernel` of program `program` (built on first use, see above);
 * NULL with the message (and build log) recorded. */
cl_kernel clrt_kernel(clrt *rt, const char *program, const char *kernel);

/* The largest work-group kernel k may be launched with on this device:
 * the device limit, lowered by the kernel's own (CL_KERNEL_WORK_GROUP_SIZE)
 * and by $DS4CL_CL_MAX_WG. */
size_t clrt_kernel_max_group(clrt *rt, cl_kernel k);

/* Builds (or loads from the cache) program `program` now rather than at
 * its first kernel's use; 0, or -1 with the message (and build log)
 * recorded. */
int clrt_build(clrt *rt, const char *program);

/* What the compiler said while building `program` from source in this
 * runtime ("" when nothing, or when it came from the binary cache); NULL
 * when the program is not built. Warnings do not fail a build; the tests
 * require there are none. */
const char *clrt_build_log(const clrt *rt, const char *program);

/* The kernels of program `program` (built or loaded first), separated by
 * ';', into buf; 0, or -1 recorded. */
int clrt_kernel_names(clrt *rt, const char *program, char *buf, size_t n);

/* Statistics since open: programs loaded from the cache, built from
 * source, cache entries found corrupt or refused, kernel launches and
 * host waits. */
typedef struct {
    int cache_hits, builds, cache_rejects;
    uint64_t launches; /* kernels enqueued */
    size_t max_group;  /* the largest work-group launched (work-items) */
    size_t max_local;  /* the most local memory one launch asked for (bytes) */
    uint64_t waits;    /* times the host waited for the device (clrt_finish, clrt_count_wait) */
} clrt_stats;
clrt_stats clrt_get_stats(const clrt *rt);

/* Test hook: kernel launches from the launch-th (counted in clrt_stats)
 * on fail with CL_OUT_OF_RESOURCES; −1 turns it off. The environment
 * variable DS4CL_FAULT_CL_LAUNCH sets it for every runtime a process
 * opens. */
void clrt_fault_from(clrt *rt, int64_t launch);
/* The cache file a program would use (for tests); "" when caching is off. */
const char *clrt_cache_path(clrt *rt, const char *program, char *buf, size_t n);

/* ---- launches ----------------------------------------------------------------- */

/* Argument setter: arguments are numbered in call order, the first error
 * is kept and reported by clrt_enqueue. */
typedef struct {
    clrt *rt;
    cl_kernel k;
    cl_uint n;
    cl_int err;
    cl_uint err_arg;
    size_t local_bytes; /* local memory the arguments ask for */
} clrt_call;

clrt_call clrt_begin(clrt *rt, cl_kernel k);
void clrt_arg(clrt_call *c, size_t size, const void *value);
static inline void clrt_arg_mem(clrt_call *c, cl_mem m) { clrt_arg(c, sizeof m, &m); }
static inline void clrt_arg_int(clrt_call *c, cl_int v) { clrt_arg(c, sizeof v, &v); }
static inline void clrt_arg_uint(clrt_call *c, cl_uint v) { clrt_arg(c, sizeof v, &v); }
static inline void clrt_arg_long(clrt_call *c, cl_long v) { clrt_arg(c, sizeof v, &v); }
static inline void clrt_arg_ulong(clrt_call *c, cl_ulong v) { clrt_arg(c, sizeof v, &v); }
static inline void clrt_arg_float(clrt_call *c, cl_float v) { clrt_arg(c, sizeof v, &v); }
/* Local memory of `bytes` (a __local pointer argument). */
static inline void clrt_arg_local(clrt_call *c, size_t bytes) { clrt_arg(c, bytes, NULL); }

/* Enqueues the kernel over `global` work-items (dims ≤ 3). With `local`,
 * each global size is rounded up to a multiple of it (kernels check their
 * bounds); with NULL the implementation picks the work-group size. A zero
 * global size enqueues nothing. A work-group above the kernel's limit, or
 * local memory above the device's, is refused here with a message naming
 * the kernel and both numbers (a driver would only say
 * CL_INVALID_WORK_GROUP_SIZE or CL_OUT_OF_RESOURCES). Returns 0, or -1
 * recorded. Never waits. */
int clrt_enqueue(clrt_call *c, cl_uint dims, const size_t *global, const size_t *local);

/* ---- profiling ----------------------------------------------------------------- */

/* Turns device-side timing of launches on or off (waits for the queue and
 * replaces it by one with or without CL_QUEUE_PROFILING_ENABLE). While on,
 * every launch keeps an event until clrt_profile_take; off, launches cost
 * nothing extra. 0, or -1 recorded. */
int clrt_profile(clrt *rt, bool on);

/* Launches since profiling was turned on or last taken, summed per kernel
 * and global size: waits for the queue, then gives a malloc'd array (*n
 * rows, longest total first; the caller frees it) and forgets the
 * launches. 0, or -1 recorded. */
typedef struct {
    char key[96];     /* "kernel [global sizes]" */
    char kernel[64];  /* the kernel's name */
    uint64_t count;   /* launches */
    double ms;        /* device time, CL_PROFILING_COMMAND_START to END, summed */
} clrt_prof_row;
int clrt_profile_take(clrt *rt, clrt_prof_row **out, int *n);

/* Waits for everything queued; -1 recorded on failure. */
int clrt_finish(clrt *rt);
/* Counts a wait made some other way (a blocking transfer). */
void clrt_count_wait(clrt *rt);

#endif
