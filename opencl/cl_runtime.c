/* cl_runtime.c — devices, context, programs with their binary cache,
 * kernels and launches (see cl_runtime.h). */
#include "opencl/cl_runtime.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "base/base.h"
#include "res/embedded.h"

#ifndef CL_PLATFORM_NOT_FOUND_KHR
#define CL_PLATFORM_NOT_FOUND_KHR -1001
#endif

#define MAX_PLATFORMS 32
#define MAX_DEVICES 64

/* ---- error names ------------------------------------------------------------ */

const char *clrt_strerror(cl_int code)
{
    switch (code) {
#define E(x) \
    case x: return #x;
        E(CL_SUCCESS) E(CL_DEVICE_NOT_FOUND) E(CL_DEVICE_NOT_AVAILABLE) E(CL_COMPILER_NOT_AVAILABLE)
        E(CL_MEM_OBJECT_ALLOCATION_FAILURE) E(CL_OUT_OF_RESOURCES) E(CL_OUT_OF_HOST_MEMORY)
        E(CL_PROFILING_INFO_NOT_AVAILABLE) E(CL_MEM_COPY_OVERLAP) E(CL_IMAGE_FORMAT_MISMATCH)
        E(CL_IMAGE_FORMAT_NOT_SUPPORTED) E(CL_BUILD_PROGRAM_FAILURE) E(CL_MAP_FAILURE)
        E(CL_MISALIGNED_SUB_BUFFER_OFFSET) E(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
        E(CL_COMPILE_PROGRAM_FAILURE) E(CL_LINKER_NOT_AVAILABLE) E(CL_LINK_PROGRAM_FAILURE)
        E(CL_DEVICE_PARTITION_FAILED) E(CL_KERNEL_ARG_INFO_NOT_AVAILABLE) E(CL_INVALID_VALUE)
        E(CL_INVALID_DEVICE_TYPE) E(CL_INVALID_PLATFORM) E(CL_INVALID_DEVICE) E(CL_INVALID_CONTEXT)
        E(CL_INVALID_QUEUE_PROPERTIES) E(CL_INVALID_COMMAND_QUEUE) E(CL_INVALID_HOST_PTR)
        E(CL_INVALID_MEM_OBJECT) E(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR) E(CL_INVALID_IMAGE_SIZE)
        E(CL_INVALID_SAMPLER) E(CL_INVALID_BINARY) E(CL_INVALID_BUILD_OPTIONS) E(CL_INVALID_PROGRAM)
        E(CL_INVALID_PROGRAM_EXECUTABLE) E(CL_INVALID_KERNEL_NAME) E(CL_INVALID_KERNEL_DEFINITION)
        E(CL_INVALID_KERNEL) E(CL_INVALID_ARG_INDEX) E(CL_INVALID_ARG_VALUE) E(CL_INVALID_ARG_SIZE)
        E(CL_INVALID_KERNEL_ARGS) E(CL_INVALID_WORK_DIMENSION) E(CL_INVALID_WORK_GROUP_SIZE)
        E(CL_INVALID_WORK_ITEM_SIZE) E(CL_INVALID_GLOBAL_OFFSET) E(CL_INVALID_EVENT_WAIT_LIST)
        E(CL_INVALID_EVENT) E(CL_INVALID_OPERATION) E(CL_INVALID_GL_OBJECT) E(CL_INVALID_BUFFER_SIZE)
        E(CL_INVALID_MIP_LEVEL) E(CL_INVALID_GLOBAL_WORK_SIZE) E(CL_INVALID_PROPERTY)
        E(CL_INVALID_IMAGE_DESCRIPTOR) E(CL_INVALID_COMPILER_OPTIONS) E(CL_INVALID_LINKER_OPTIONS)
        E(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef E
    case CL_PLATFORM_NOT_FOUND_KHR: return "CL_PLATFORM_NOT_FOUND_KHR";
    }
    static _Thread_local char buf[32];
    snprintf(buf, sizeof buf, "error %d", (int)code);
    return buf;
}

const char *clrt_type_name(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU) return "GPU";
    if (t & CL_DEVICE_TYPE_CPU) return "CPU";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    if (t & CL_DEVICE_TYPE_CUSTOM) return "custom";
    return "other";
}

/* ---- devices ---------------------------------------------------------------- */

static void info_str(cl_device_id d, cl_device_info what, char *buf, size_t n)
{
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, n, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[n - 1] = 0;
    /* some drivers pad names with spaces */
    size_t l = strlen(buf);
    while (l && isspace((unsigned char)buf[l - 1])) buf[--l] = 0;
}

/* Whether the device's extension list names `ext` as a whole word. */
static bool has_extension(cl_device_id d, const char *ext)
{
    size_t len = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &len) != CL_SUCCESS || len == 0) return false;
    char *all = malloc(len + 1);
    if (!all) return false;
    bool found = false;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, len, all, NULL) == CL_SUCCESS) {
        all[len] = 0;
        size_t el = strlen(ext);
        for (const char *p = all; (p = strstr(p, ext)) != NULL; p += el)
            if ((p == all || p[-1] == ' ') && (p[el] == 0 || p[el] == ' ')) found = true;
    }
    free(all);
    return found;
}

/* An override may only lower a limit: a device cannot be made to accept
 * more than it reports. */
static void lower_limit_from_env(const char *name, size_t *limit)
{
    const char *v = getenv(name);
    if (!v || !*v) return;
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (*end || x == 0) return;
    if ((size_t)x < *limit) *limit = (size_t)x;
}

static void fill_device(clrt_device *o, cl_platform_id p, cl_device_id d, int index)
{
    memset(o, 0, sizeof *o);
    o->index = index;
    o->platform = p;
    o->id = d;
    clGetPlatformInfo(p, CL_PLATFORM_NAME, sizeof o->platform_name, o->platform_name, NULL);
    clGetPlatformInfo(p, CL_PLATFORM_VERSION, sizeof o->platform_version, o->platform_version, NULL);
    o->platform_name[sizeof o->platform_name - 1] = 0;
    o->platform_version[sizeof o->platform_version - 1] = 0;
    info_str(d, CL_DEVICE_NAME, o->name, sizeof o->name);
    info_str(d, CL_DEVICE_VENDOR, o->vendor, sizeof o->vendor);
    info_str(d, CL_DRIVER_VERSION, o->driver, sizeof o->driver);
    info_str(d, CL_DEVICE_OPENCL_C_VERSION, o->c_version, sizeof o->c_version);
    cl_ulong u = 0;
    cl_uint v = 0;
    cl_bool b = CL_FALSE;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof o->type, &o->type, NULL);
    if (clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof u, &u, NULL) == CL_SUCCESS) o->global_mem = u;
    u = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof u, &u, NULL) == CL_SUCCESS) o->max_alloc = u;
    if (clGetDeviceInfo(d, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof v, &v, NULL) == CL_SUCCESS) o->base_align = v / 8;
    if (o->base_align < 4) o->base_align = 4;
    v = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof v, &v, NULL) == CL_SUCCESS) o->compute_units = v;
    size_t wg = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) == CL_SUCCESS) o->max_wg = wg;
    u = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_LOCAL_MEM_SIZE, sizeof u, &u, NULL) == CL_SUCCESS) o->local_mem = u;
    lower_limit_from_env("DS4CL_CL_MAX_WG", &o->max_wg);
    size_t lm = (size_t)o->local_mem;
    lower_limit_from_env("DS4CL_CL_LOCAL_MEM", &lm);
    o->local_mem = lm;
    if (o->max_wg < 1) o->max_wg = 1;
    clGetDeviceInfo(d, CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof b, &b, NULL);
    o->unified = b == CL_TRUE || (o->type & CL_DEVICE_TYPE_CPU);
    o->fp16 = has_extension(d, "cl_khr_fp16");
    o->subgroups = has_extension(d, "cl_khr_subgroups") || has_extension(d, "cl_intel_subgroups");
    o->int_dot = has_extension(d, "cl_khr_integer_dot_product");
}

void clrt_describe_limits(const clrt_device *d, char *buf, size_t n)
{
    char lm[32];
    snprintf(buf, n, "work-groups ≤ %zu, local memory %s, fp16 %s, subgroups %s, integer dot products %s", d->max_wg,
             format_bytes(lm, sizeof lm, d->local_mem), d->fp16 ? "yes" : "no", d->subgroups ? "yes" : "no",
             d->int_dot ? "yes" : "no");
}

static int no_platform(ds4_error *err, cl_int rc)
{
    ds4_error_set(err,
             "no OpenCL platform found (%s): no OpenCL driver (ICD) is installed or visible. "
             "Install one (e.g. the Debian package pocl-opencl-icd, or your GPU vendor's OpenCL "
             "driver), or use --backend cpu",
             clrt_strerror(rc));
    return -1;
}

int clrt_devices(clrt_device **out, int *n, ds4_error *err)
{
    *out = NULL;
    *n = 0;
    cl_uint np = 0;
    cl_int rc = clGetPlatformIDs(0, NULL, &np);
    if (rc != CL_SUCCESS || np == 0) return no_platform(err, rc == CL_SUCCESS ? CL_PLATFORM_NOT_FOUND_KHR : rc);
    cl_platform_id plats[MAX_PLATFORMS];
    if (np > MAX_PLATFORMS) np = MAX_PLATFORMS;
    rc = clGetPlatformIDs(np, plats, NULL);
    if (rc != CL_SUCCESS) return no_platform(err, rc);
    clrt_device *devs = calloc((size_t)np * MAX_DEVICES, sizeof *devs);
    if (!devs) {
        ds4_error_set(err, "out of memory");
        return -1;
    }
    int count = 0;
    for (cl_uint p = 0; p < np; p++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0) continue;
        cl_device_id ids[MAX_DEVICES];
        if (nd > MAX_DEVICES) nd = MAX_DEVICES;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, nd, ids, NULL) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd; d++, count++) fill_device(&devs[count], plats[p], ids[d], count);
    }
    if (count == 0) {
        free(devs);
        ds4_error_set(err, "OpenCL is installed (%u platform%s) but offers no device", np, np == 1 ? "" : "s");
        return -1;
    }
    *out = devs;
    *n = count;
    return 0;
}

int clrt_pick(const clrt_device *devs, int n, const char *want, ds4_error *err)
{
    if (!want || !*want) return clrt_pick_piece(devs, n, getenv("DS4CL_DEVICE"), "DS4CL_DEVICE", err);
    return clrt_pick_piece(devs, n, want, "--device", err);
}

int clrt_pick_piece(const clrt_device *devs, int n, const char *want, const char *src, ds4_error *err)
{
    if (!want || !*want) {
        for (int i = 0; i < n; i++)
            if (devs[i].type & CL_DEVICE_TYPE_GPU) return i;
        if (n > 0) return 0;
        ds4_error_set(err, "no OpenCL device");
        return -1;
    }
    char *end = NULL;
    long idx = strtol(want, &end, 10);
    if (end != want && *end == 0) {
        if (idx >= 0 && idx < n) return (int)idx;
        ds4_error_set(err, "%s=%s: no OpenCL device has index %ld (there %s %d; see ds4cl --list-devices)", src,
                 want, idx, n == 1 ? "is" : "are", n);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (strcasestr(devs[i].name, want)) return i;
    ds4_error_set(err, "%s=%s: no OpenCL device name contains \"%s\" (see ds4cl --list-devices)", src, want, want);
    return -1;
}

/* ---- runtime ---------------------------------------------------------------- */

typedef struct {
    char name[64];
    cl_program prog;
    char *log; /* the compiler's messages when built from source here (malloc'd), else NULL */
} program_entry;

typedef struct {
    int prog;
    char name[64];
    cl_kernel k;
    size_t max_group; /* CL_KERNEL_WORK_GROUP_SIZE; 0 until asked */
} kernel_entry;

typedef struct {
    cl_kernel k;
    size_t global[3];
    cl_uint dims;
    cl_event ev;
} prof_launch;

struct clrt {
    clrt_device dev;
    cl_context ctx;
    cl_command_queue q;
    char options[256];
    char cache_dir[PATH_MAX]; /* "" = no cache */
    const struct embedded_file *sources;
    program_entry *progs;
    int n_progs, cap_progs;
    kernel_entry *kernels;
    int n_kernels, cap_kernels;
    clrt_stats stats;
    int64_t fail_from;   /* launches from this one on fail (test hook); −1: none */
    /* profiling (clrt_profile): one event per launch since the last take */
    bool profiling;
    prof_launch *launches;
    size_t n_launches, cap_launches;
    char err[4096];
};

int clrt_fail(clrt *rt, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->err, sizeof rt->err, fmt, ap);
    va_end(ap);
    return -1;
}

int clrt_fail_cl(clrt *rt, cl_int code, const char *what)
{
    if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES)
        return clrt_fail(rt, "%s: %s (the OpenCL device %s is out of memory or resources)", what,
                         clrt_strerror(code), rt->dev.name);
    return clrt_fail(rt, "%s: %s", what, clrt_strerror(code));
}

const char *clrt_error(const clrt *rt) { return rt->err; }

static void set_build_options(clrt *rt, bool cpu_loops)
{
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(rt->dev.id, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    snprintf(rt->options, sizeof rt->options, "-DCLRT_CPU=%d%s", cpu_loops ? 1 : 0,
             (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) ? " -cl-fp32-correctly-rounded-divide-sqrt" : "");
}

int clrt_set_cpu_loops(clrt *rt, bool cpu_loops)
{
    if (rt->n_progs > 0) return clrt_fail(rt, "the kernels' loop shape must be set before a program is built");
    set_build_options(rt, cpu_loops);
    return 0;
}
const clrt_device *clrt_dev(const clrt *rt) { return &rt->dev; }
cl_context clrt_context(const clrt *rt) { return rt->ctx; }
cl_command_queue clrt_queue(const clrt *rt) { return rt->q; }
void clrt_fault_from(clrt *rt, int64_t launch) { rt->fail_from = launch; }

clrt_stats clrt_get_stats(const clrt *rt) { return rt->stats; }

void clrt_count_wait(clrt *rt) { rt->stats.waits++; }

static void set_cache_dir(clrt *rt, const char *override)
{
    rt->cache_dir[0] = 0;
    char base[PATH_MAX];
    if (override) {
        if (!*override) return;
        snprintf(base, sizeof base, "%s/ds4cl", override);
    } else if (!xdg_dir(XDG_CACHE, base, sizeof base)) {
        return;
    }
    char dir[PATH_MAX];
    if ((size_t)snprintf(dir, sizeof dir, "%s/cl", base) >= sizeof dir) return;
    if (base_mkdir_p(dir, 0700) != 0) return; /* no cache: build every time */
    snprintf(rt->cache_dir, sizeof rt->cache_dir, "%s", dir);
}

clrt *clrt_open(const clrt_options *o, ds4_error *err)
{
    clrt_device *devs;
    int n;
    if (clrt_devices(&devs, &n, err) != 0) return NULL;
    int pick = clrt_pick(devs, n, o ? o->device : NULL, err);
    if (pick < 0) {
        free(devs);
        return NULL;
    }
    clrt *rt = calloc(1, sizeof *rt);
    if (!rt) {
        free(devs);
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    rt->dev = devs[pick];
    /* DS4CL_FAULT_CL_LAUNCH=N: the device "fails" from the N-th kernel
     * launch on, as a device that runs out of resources or is lost
     * mid-turn would (tests of what a turn does then). */
    const char *fault = getenv("DS4CL_FAULT_CL_LAUNCH");
    rt->fail_from = fault && *fault ? strtoll(fault, NULL, 10) : -1;
    free(devs);

    cl_int rc;
    cl_context_properties props[] = { CL_CONTEXT_PLATFORM, (cl_context_properties)rt->dev.platform, 0 };
    rt->ctx = clCreateContext(props, 1, &rt->dev.id, NULL, NULL, &rc);
    if (!rt->ctx) {
        ds4_error_set(err, "cannot create an OpenCL context on %s: %s", rt->dev.name, clrt_strerror(rc));
        clrt_close(rt);
        return NULL;
    }
    /* OpenCL 1.2 entry point: the targeted API level of this build */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    rt->q = clCreateCommandQueue(rt->ctx, rt->dev.id, 0, &rc);
#pragma GCC diagnostic pop
    if (!rt->q) {
        ds4_error_set(err, "cannot create an OpenCL queue on %s: %s", rt->dev.name, clrt_strerror(rc));
        clrt_close(rt);
        return NULL;
    }
    set_build_options(rt, (rt->dev.type & CL_DEVICE_TYPE_CPU) != 0);
    set_cache_dir(rt, o ? o->cache_dir : NULL);
    rt->sources = o && o->sources ? o->sources : clrt_sources;
    return rt;
}

static void prof_release(clrt *rt)
{
    for (size_t i = 0; i < rt->n_launches; i++) clReleaseEvent(rt->launches[i].ev);
    rt->n_launches = 0;
}

void clrt_close(clrt *rt)
{
    if (!rt) return;
    if (rt->q) clFinish(rt->q);
    prof_release(rt);
    free(rt->launches);
    for (int i = 0; i < rt->n_kernels; i++) clReleaseKernel(rt->kernels[i].k);
    for (int i = 0; i < rt->n_progs; i++)
        if (rt->progs[i].prog) clReleaseProgram(rt->progs[i].prog);
    for (int i = 0; i < rt->n_progs; i++) free(rt->progs[i].log);
    free(rt->kernels);
    free(rt->progs);
    if (rt->q) clReleaseCommandQueue(rt->q);
    if (rt->ctx) clReleaseContext(rt->ctx);
    free(rt);
}

int clrt_finish(clrt *rt)
{
    rt->stats.waits++;
    cl_int rc = clFinish(rt->q);
    return rc == CL_SUCCESS ? 0 : clrt_fail_cl(rt, rc, "waiting for the OpenCL queue");
}

/* ---- programs ----------------------------------------------------------------- */

/* common.cl, then NAME.cl (for "NAME:PART", after defining CLRT_PART and
 * CLRT_PART_<PART>); NULL when NAME is not an embedded program or PART is
 * not a plain identifier. */
static char *program_source(const clrt *rt, const char *name, size_t *len)
{
    char file[64];
    const char *part = strchr(name, ':');
    size_t fl = part ? (size_t)(part - name) : strlen(name);
    if (fl >= sizeof file) return NULL;
    memcpy(file, name, fl);
    file[fl] = 0;
    if (part) {
        part++;
        if (!*part) return NULL;
        for (const char *q = part; *q; q++)
            if (!(isalnum((unsigned char)*q) || *q == '_')) return NULL;
    }
    if (!strcmp(file, "common")) return NULL;
    const struct embedded_file *body = embedded_find(rt->sources, file);
    if (!body) return NULL;
    const struct embedded_file *common = embedded_find(rt->sources, "common");
    strbuf b = { 0 };
    if (common) {
        sb_append(&b, common->data, common->len);
        sb_putc(&b, '\n');
    }
    if (part) sb_printf(&b, "#define CLRT_PART 1\n#define CLRT_PART_%s 1\n", part);
    sb_printf(&b, "#line 1 \"%s.cl\"\n", file);
    sb_append(&b, body->data, body->len);
    *len = b.len;
    return sb_take(&b);
}

static void sha256_hex(const void *const *parts, const size_t *lens, int n, char out[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned dl = 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    for (int i = 0; i < n; i++) {
        /* lengths first, so no two different part lists hash alike */
        uint64_t l = lens[i];
        EVP_DigestUpdate(md, &l, sizeof l);
        EVP_DigestUpdate(md, parts[i], lens[i]);
    }
    EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    for (unsigned i = 0; i < 32 && i < dl; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
    out[64] = 0;
}

static void cache_key(const clrt *rt, const char *src, size_t len, char out[65])
{
    const clrt_device *d = &rt->dev;
    const void *parts[] = { d->name, d->vendor, d->driver, d->platform_version, rt->options, src };
    size_t lens[] = { strlen(d->name), strlen(d->vendor), strlen(d->driver), strlen(d->platform_version),
                      strlen(rt->options), len };
    sha256_hex(parts, lens, 6, out);
}

static const char cache_magic[8] = { 'D', 'S', '4', 'C', 'L', 'B', 'I', 'N' };

const char *clrt_cache_path(clrt *rt, const char *program, char *buf, size_t n)
{
    buf[0] = 0;
    if (!rt->cache_dir[0]) return buf;
    size_t len;
    char *src = program_source(rt, program, &len);
    if (!src) return buf;
    char key[65];
    cache_key(rt, src, len, key);
    free(src);
    snprintf(buf, n, "%s/%s.bin", rt->cache_dir, key);
    return buf;
}

/* The binary in a cache file, or NULL when absent or damaged (counted). */
static unsigned char *cache_read(clrt *rt, const char *path, size_t *bin_len)
{
    size_t len;
    unsigned char *f = (unsigned char *)file_read_all(path, &len);
    if (!f) return NULL;
    size_t head = sizeof cache_magic + 64;
    char sum[65];
    if (len > head && !memcmp(f, cache_magic, sizeof cache_magic)) {
        const void *parts[] = { f + head };
        size_t lens[] = { len - head };
        sha256_hex(parts, lens, 1, sum);
        if (!memcmp(sum, f + sizeof cache_magic, 64)) {
            memmove(f, f + head, len - head);
            *bin_len = len - head;
            return f;
        }
    }
    free(f);
    rt->stats.cache_rejects++;
    return NULL;
}

static void cache_write(const char *path, cl_program p)
{
    size_t size = 0;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0) return;
    size_t head = sizeof cache_magic + 64;
    unsigned char *buf = malloc(head + size);
    if (!buf) return;
    unsigned char *bin = buf + head;
    if (clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
        memcpy(buf, cache_magic, sizeof cache_magic);
        char sum[65];
        const void *parts[] = { bin };
        size_t lens[] = { size };
        sha256_hex(parts, lens, 1, sum);
        memcpy(buf + sizeof cache_magic, sum, 64);
        /* a cache that cannot be written only costs build time */
        (void)file_write_atomic(path, buf, head + size, 0600, true, NULL);
    }
    free(buf);
}

static cl_program build_from_binary(clrt *rt, const unsigned char *bin, size_t len)
{
    cl_int rc, st;
    cl_program p = clCreateProgramWithBinary(rt->ctx, 1, &rt->dev.id, &len, &bin, &st, &rc);
    if (!p) return NULL;
    if (rc != CL_SUCCESS || st != CL_SUCCESS || clBuildProgram(p, 1, &rt->dev.id, rt->options, NULL, NULL) != CL_SUCCESS) {
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

/* The compiler's messages for p (malloc'd; NULL when there are none). */
static char *build_log(const clrt *rt, cl_program p)
{
    size_t ll = 0;
    if (clGetProgramBuildInfo(p, rt->dev.id, CL_PROGRAM_BUILD_LOG, 0, NULL, &ll) != CL_SUCCESS || ll < 2) return NULL;
    char *log = malloc(ll + 1);
    if (!log) return NULL;
    log[0] = 0;
    clGetProgramBuildInfo(p, rt->dev.id, CL_PROGRAM_BUILD_LOG, ll, log, NULL);
    log[ll] = 0;
    return log;
}

static cl_program build_from_source(clrt *rt, const char *name, const char *src, size_t len)
{
    cl_int rc;
    cl_program p = clCreateProgramWithSource(rt->ctx, 1, &src, &len, &rc);
    if (!p) {
        clrt_fail(rt, "OpenCL program %s: %s", name, clrt_strerror(rc));
        return NULL;
    }
    rc = clBuildProgram(p, 1, &rt->dev.id, rt->options, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char *log = build_log(rt, p);
        clrt_fail(rt, "building OpenCL program %s for %s failed (%s):\n%s", name, rt->dev.name, clrt_strerror(rc),
                  log && *log ? log : "(no build log)");
        free(log);
        clReleaseProgram(p);
        return NULL;
    }
    return p;
}

static int program_index(clrt *rt, const char *name)
{
    for (int i = 0; i < rt->n_progs; i++)
        if (!strcmp(rt->progs[i].name, name)) return i;
    size_t len;
    char *src = program_source(rt, name, &len);
    if (!src) {
        clrt_fail(rt, "no OpenCL program named %s (opencl/kernels/NAME.cl, or NAME:PART) in this build", name);
        return -1;
    }
    char path[PATH_MAX + 80] = "";
    if (rt->cache_dir[0]) {
        char key[65];
        cache_key(rt, src, len, key);
        snprintf(path, sizeof path, "%s/%s.bin", rt->cache_dir, key);
    }
    cl_program p = NULL;
    char *log = NULL;
    if (path[0]) {
        size_t bl;
        unsigned char *bin = cache_read(rt, path, &bl);
        if (bin) {
            p = build_from_binary(rt, bin, bl);
            if (p) rt->stats.cache_hits++;
            else rt->stats.cache_rejects++;
            free(bin);
        }
    }
    if (!p) {
        p = build_from_source(rt, name, src, len);
        if (p) {
            log = build_log(rt, p);
            rt->stats.builds++;
            if (path[0]) cache_write(path, p);
        }
    }
    free(src);
    if (!p) return -1; /* recorded; a later use tries again */
    if (rt->n_progs == rt->cap_progs) {
        int cap = rt->cap_progs ? 2 * rt->cap_progs : 16;
        program_entry *np = realloc(rt->progs, (size_t)cap * sizeof *np);
        if (!np) {
            clReleaseProgram(p);
            free(log);
            clrt_fail(rt, "out of memory");
            return -1;
        }
        rt->progs = np;
        rt->cap_progs = cap;
    }
    program_entry *e = &rt->progs[rt->n_progs++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->prog = p;
    e->log = log;
    return rt->n_progs - 1;
}

int clrt_build(clrt *rt, const char *program) { return program_index(rt, program) < 0 ? -1 : 0; }

const char *clrt_build_log(const clrt *rt, const char *program)
{
    for (int i = 0; i < rt->n_progs; i++)
        if (!strcmp(rt->progs[i].name, program)) return rt->progs[i].log ? rt->progs[i].log : "";
    return NULL;
}

int clrt_kernel_names(clrt *rt, const char *program, char *buf, size_t n)
{
    int pi = program_index(rt, program);
    if (pi < 0) return -1;
    cl_int rc = clGetProgramInfo(rt->progs[pi].prog, CL_PROGRAM_KERNEL_NAMES, n, buf, NULL);
    if (rc != CL_SUCCESS) return clrt_fail_cl(rt, rc, "listing the kernels of an OpenCL program");
    buf[n - 1] = 0;
    return 0;
}

cl_kernel clrt_kernel(clrt *rt, const char *program, const char *kernel)
{
    for (int i = 0; i < rt->n_kernels; i++)
        if (!strcmp(rt->kernels[i].name, kernel) && !strcmp(rt->progs[rt->kernels[i].prog].name, program))
            return rt->kernels[i].k;
    int pi = program_index(rt, program);
    if (pi < 0) return NULL;
    cl_int rc;
    cl_kernel k = clCreateKernel(rt->progs[pi].prog, kernel, &rc);
    if (!k) {
        clrt_fail(rt, "OpenCL kernel %s in program %s: %s", kernel, program, clrt_strerror(rc));
        return NULL;
    }
    if (rt->n_kernels == rt->cap_kernels) {
        int cap = rt->cap_kernels ? 2 * rt->cap_kernels : 32;
        kernel_entry *nk = realloc(rt->kernels, (size_t)cap * sizeof *nk);
        if (!nk) {
            clReleaseKernel(k);
            clrt_fail(rt, "out of memory");
            return NULL;
        }
        rt->kernels = nk;
        rt->cap_kernels = cap;
    }
    kernel_entry *e = &rt->kernels[rt->n_kernels++];
    e->prog = pi;
    snprintf(e->name, sizeof e->name, "%s", kernel);
    e->k = k;
    e->max_group = 0;
    return k;
}

/* ---- launches ------------------------------------------------------------------ */

clrt_call clrt_begin(clrt *rt, cl_kernel k)
{
    clrt_call c = { .rt = rt, .k = k, .n = 0, .err = k ? CL_SUCCESS : CL_INVALID_KERNEL };
    return c;
}

void clrt_arg(clrt_call *c, size_t size, const void *value)
{
    if (c->err == CL_SUCCESS) {
        cl_int rc = clSetKernelArg(c->k, c->n, size, value);
        if (rc != CL_SUCCESS) {
            c->err = rc;
            c->err_arg = c->n;
        }
    }
    if (!value) c->local_bytes += size;
    c->n++;
}

size_t clrt_kernel_max_group(clrt *rt, cl_kernel k)
{
    kernel_entry *e = NULL;
    for (int i = 0; i < rt->n_kernels && !e; i++)
        if (rt->kernels[i].k == k) e = &rt->kernels[i];
    size_t wg = 0;
    if (e && e->max_group) {
        wg = e->max_group;
    } else if (k && clGetKernelWorkGroupInfo(k, rt->dev.id, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) == CL_SUCCESS && wg) {
        if (e) e->max_group = wg;
    } else {
        wg = rt->dev.max_wg;
    }
    return wg < rt->dev.max_wg ? wg : rt->dev.max_wg;
}

static void kernel_name(cl_kernel k, char *buf, size_t n)
{
    buf[0] = 0;
    if (k && clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, n, buf, NULL) != CL_SUCCESS) buf[0] = 0;
    buf[n - 1] = 0;
}

int clrt_enqueue(clrt_call *c, cl_uint dims, const size_t *global, const size_t *local)
{
    char name[64];
    if (c->err != CL_SUCCESS) {
        if (!c->k) return -1; /* clrt_kernel recorded why */
        kernel_name(c->k, name, sizeof name);
        return clrt_fail(c->rt, "OpenCL kernel %s, argument %u: %s", name, c->err_arg, clrt_strerror(c->err));
    }
    size_t g[3], group = 1;
    for (cl_uint i = 0; i < dims; i++) {
        if (global[i] == 0) return 0;
        g[i] = local ? (global[i] + local[i] - 1) / local[i] * local[i] : global[i];
        if (local) group *= local[i];
    }
    clrt *rt = c->rt;
    if (local && group > clrt_kernel_max_group(rt, c->k)) {
        kernel_name(c->k, name, sizeof name);
        return clrt_fail(rt, "OpenCL kernel %s: a work-group of %zu work-items, above the %zu this device allows it",
                         name, group, clrt_kernel_max_group(rt, c->k));
    }
    if (c->local_bytes > rt->dev.local_mem) {
        kernel_name(c->k, name, sizeof name);
        return clrt_fail(rt, "OpenCL kernel %s: %zu bytes of local memory, above the %llu this device has", name,
                         c->local_bytes, (unsigned long long)rt->dev.local_mem);
    }
    if (group > rt->stats.max_group) rt->stats.max_group = group;
    if (c->local_bytes > rt->stats.max_local) rt->stats.max_local = c->local_bytes;
    prof_launch *pl = NULL;
    if (rt->profiling) {
        if (rt->n_launches == rt->cap_launches) {
            size_t cap = rt->cap_launches ? 2 * rt->cap_launches : 1024;
            prof_launch *a = realloc(rt->launches, cap * sizeof *a);
            if (!a) return clrt_fail(rt, "out of memory recording an OpenCL profile");
            rt->launches = a;
            rt->cap_launches = cap;
        }
        pl = &rt->launches[rt->n_launches];
        *pl = (prof_launch){ .k = c->k, .dims = dims };
        for (cl_uint i = 0; i < dims; i++) pl->global[i] = g[i];
    }
    cl_int rc = rt->fail_from >= 0 && rt->stats.launches >= (uint64_t)rt->fail_from
                    ? CL_OUT_OF_RESOURCES
                    : clEnqueueNDRangeKernel(rt->q, c->k, dims, NULL, g, local, 0, NULL, pl ? &pl->ev : NULL);
    if (rc == CL_SUCCESS && pl) rt->n_launches++;
    if (rc != CL_SUCCESS) {
        kernel_name(c->k, name, sizeof name);
        char what[128];
        snprintf(what, sizeof what, "launching OpenCL kernel %s", name);
        return clrt_fail_cl(c->rt, rc, what);
    }
    c->rt->stats.launches++;
    return 0;
}

/* ---- profiling ------------------------------------------------------------------ */

int clrt_profile(clrt *rt, bool on)
{
    if (rt->profiling == on) return 0;
    cl_int rc = clFinish(rt->q);
    if (rc != CL_SUCCESS) return clrt_fail_cl(rt, rc, "waiting for the OpenCL queue");
    prof_release(rt);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    cl_command_queue q = clCreateCommandQueue(rt->ctx, rt->dev.id, on ? CL_QUEUE_PROFILING_ENABLE : 0, &rc);
#pragma GCC diagnostic pop
    if (!q) return clrt_fail_cl(rt, rc, "creating an OpenCL queue");
    clReleaseCommandQueue(rt->q);
    rt->q = q;
    rt->profiling = on;
    return 0;
}

static int prof_cmp(const void *a, const void *b)
{
    double x = ((const clrt_prof_row *)a)->ms, y = ((const clrt_prof_row *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

int clrt_profile_take(clrt *rt, clrt_prof_row **out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!rt->profiling) return clrt_fail(rt, "OpenCL profiling is off");
    cl_int rc = clFinish(rt->q);
    if (rc != CL_SUCCESS) return clrt_fail_cl(rt, rc, "waiting for the OpenCL queue");
    rt->stats.waits++;
    clrt_prof_row *rows = NULL;
    int nr = 0, cap = 0;
    for (size_t i = 0; i < rt->n_launches; i++) {
        const prof_launch *pl = &rt->launches[i];
        cl_ulong t0 = 0, t1 = 0;
        if (clGetEventProfilingInfo(pl->ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL) != CL_SUCCESS ||
            clGetEventProfilingInfo(pl->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL) != CL_SUCCESS)
            continue;
        char name[64], key[sizeof rows->key];
        kernel_name(pl->k, name, sizeof name);
        if (pl->dims == 1)
            snprintf(key, sizeof key, "%s [%zu]", name, pl->global[0]);
        else if (pl->dims == 2)
            snprintf(key, sizeof key, "%s [%zux%zu]", name, pl->global[0], pl->global[1]);
        else
            snprintf(key, sizeof key, "%s [%zux%zux%zu]", name, pl->global[0], pl->global[1], pl->global[2]);
        int j = 0;
        while (j < nr && strcmp(rows[j].key, key)) j++;
        if (j == nr) {
            if (nr == cap) {
                cap = cap ? 2 * cap : 64;
                clrt_prof_row *a = realloc(rows, (size_t)cap * sizeof *a);
                if (!a) {
                    free(rows);
                    prof_release(rt);
                    return clrt_fail(rt, "out of memory reading an OpenCL profile");
                }
                rows = a;
            }
            rows[nr] = (clrt_prof_row){ 0 };
            snprintf(rows[nr].key, sizeof rows[nr].key, "%s", key);
            snprintf(rows[nr].kernel, sizeof rows[nr].kernel, "%s", name);
            nr++;
        }
        rows[j].count++;
        rows[j].ms += t1 > t0 ? (double)(t1 - t0) / 1e6 : 0;
    }
    prof_release(rt);
    if (nr) qsort(rows, (size_t)nr, sizeof *rows, prof_cmp);
    *out = rows;
    *n = nr;
    return 0;
}
