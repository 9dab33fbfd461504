/* memplan.c — memory planning: the arithmetic, memory detection, and the
 * messages that refuse or warn with numbers. */
#include "cli/memplan.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "base/progress.h"

#define UNLIMITED_CGROUP (1ull << 60)

memplan_policy memplan_default_policy(void)
{
    return (memplan_policy){
        .comfort_fraction = 0.90,
        .granularity = 1024,
        .min_ctx = 4096,
        .tight_ctx = 32768,
    };
}

uint64_t memplan_linear_bytes(void *ud, int n_ctx)
{
    const memplan_linear *l = ud;
    return l->fixed + l->per_token * (uint64_t)(n_ctx > 0 ? n_ctx : 0);
}

static int model_limit(const memplan_input *in)
{
    return in->max_ctx > 0 ? in->max_ctx : MEMPLAN_MAX_CTX;
}

static uint64_t need_for(const memplan_input *in, int n_ctx)
{
    uint64_t c = in->ctx_bytes ? in->ctx_bytes(in->ctx_ud, n_ctx) : 0;
    return in->weights_bytes + in->fixed_bytes + c;
}

int memplan_largest_ctx(const memplan_input *in, uint64_t budget, int lo, int hi, int step)
{
    if (lo < 1) lo = 1;
    if (hi < lo) return 0;
    if (need_for(in, lo) > budget) return 0;
    if (need_for(in, hi) <= budget) return hi;
    int good = lo, bad = hi; /* need(good) fits, need(bad) does not */
    while (bad - good > 1) {
        int mid = good + (bad - good) / 2;
        if (need_for(in, mid) <= budget) good = mid;
        else bad = mid;
    }
    if (step > 1) {
        int rounded = good / step * step;
        good = rounded >= lo ? rounded : lo;
    }
    return good;
}

static void budgets(const memplan_input *in, const memplan_policy *pol, memplan_result *out)
{
    uint64_t avail = in->available_bytes;
    uint64_t reserve = pol->reserve_bytes ? pol->reserve_bytes : ds4_memory_reserve(avail);
    out->reserve_bytes = reserve;
    out->usable_bytes = avail > reserve ? avail - reserve : 0;
    out->comfortable_bytes = (uint64_t)((double)out->usable_bytes * pol->comfort_fraction);
}

static void fill_limits(const memplan_input *in, const memplan_policy *pol, int hi, memplan_result *out)
{
    int lo = pol->min_ctx < hi ? pol->min_ctx : hi;
    out->largest_fit = memplan_largest_ctx(in, out->usable_bytes, lo, hi, pol->granularity);
    out->largest_comfortable = memplan_largest_ctx(in, out->comfortable_bytes, lo, hi, pol->granularity);
}

static void measure(const memplan_input *in, int n_ctx, memplan_result *out)
{
    out->n_ctx = n_ctx;
    out->ctx_bytes = n_ctx > 0 && in->ctx_bytes ? in->ctx_bytes(in->ctx_ud, n_ctx) : 0;
    out->need_bytes = in->weights_bytes + in->fixed_bytes + out->ctx_bytes;
}

void memplan_check(const memplan_input *in, const memplan_policy *pol, int n_ctx, memplan_result *out)
{
    memset(out, 0, sizeof *out);
    budgets(in, pol, out);
    int limit = model_limit(in);
    fill_limits(in, pol, limit, out);
    measure(in, n_ctx, out);
    if (n_ctx > limit || out->need_bytes > out->usable_bytes) out->verdict = MEMPLAN_TOO_BIG;
    else if (out->need_bytes > out->comfortable_bytes) out->verdict = MEMPLAN_TIGHT;
    else out->verdict = MEMPLAN_FITS;
}

void memplan_auto(const memplan_input *in, const memplan_policy *pol, int cap, memplan_result *out)
{
    memset(out, 0, sizeof *out);
    budgets(in, pol, out);
    int limit = model_limit(in);
    fill_limits(in, pol, limit, out);
    int hi = cap > 0 && cap < limit ? cap : limit;
    int lo = pol->min_ctx < hi ? pol->min_ctx : hi;
    int c = memplan_largest_ctx(in, out->comfortable_bytes, lo, hi, pol->granularity);
    if (c > 0) {
        measure(in, c, out);
        out->verdict = MEMPLAN_FITS;
        return;
    }
    int f = memplan_largest_ctx(in, out->usable_bytes, lo, hi, pol->granularity);
    if (f > pol->tight_ctx && pol->tight_ctx >= lo) f = pol->tight_ctx;
    if (f > 0) {
        measure(in, f, out);
        out->verdict = MEMPLAN_TIGHT;
        return;
    }
    measure(in, lo, out);
    out->n_ctx = 0;
    out->verdict = MEMPLAN_TOO_BIG;
}

/* ---- detection ----------------------------------------------------------- */

int memplan_parse_meminfo(const char *text, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, key, kl) != 0 || line[kl] != ':') continue;
        char *end;
        unsigned long long v = strtoull(line + kl + 1, &end, 10);
        while (*end == ' ') end++;
        *out = !strncmp(end, "kB", 2) ? (uint64_t)v * 1024 : (uint64_t)v;
        return 0;
    }
    return -1;
}

static int read_u64_file(const char *path, uint64_t *out, bool *is_max)
{
    char *t = file_read_all(path, NULL);
    if (!t) return -1;
    int rc = 0;
    if (is_max) *is_max = !strncmp(t, "max", 3);
    if (is_max && *is_max) {
        *out = 0;
    } else {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(t, &end, 10);
        if (errno || end == t) rc = -1;
        else *out = v;
    }
    free(t);
    return rc;
}

static uint64_t stat_key(const char *dir, const char *key)
{
    char path[PATH_MAX * 2 + 32];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    char *t = file_read_all(path, NULL);
    if (!t) return 0;
    uint64_t v = 0;
    size_t kl = strlen(key);
    for (char *line = t; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    }
    free(t);
    return v;
}

/* Walks dir and its ancestors up to root, taking the smallest headroom. */
static bool walk_levels(const char *root, const char *cg_path, bool v2, uint64_t *best)
{
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s", cg_path);
    size_t n = strlen(rel);
    while (n > 1 && rel[n - 1] == '/') rel[--n] = 0;
    bool found = false;
    for (;;) {
        char dir[PATH_MAX * 2], p_limit[PATH_MAX * 2 + 32], p_usage[PATH_MAX * 2 + 32];
        snprintf(dir, sizeof dir, "%s%s%s", root, v2 ? "" : "/memory", strcmp(rel, "/") ? rel : "");
        snprintf(p_limit, sizeof p_limit, "%s/%s", dir, v2 ? "memory.max" : "memory.limit_in_bytes");
        snprintf(p_usage, sizeof p_usage, "%s/%s", dir, v2 ? "memory.current" : "memory.usage_in_bytes");
        uint64_t limit = 0, usage = 0;
        bool is_max = false;
        if (read_u64_file(p_limit, &limit, &is_max) == 0 && !is_max && limit < UNLIMITED_CGROUP &&
            read_u64_file(p_usage, &usage, NULL) == 0) {
            /* Page cache the kernel can drop counts as usage but is available. */
            uint64_t cache = stat_key(dir, v2 ? "inactive_file" : "total_inactive_file");
            uint64_t used = usage > cache ? usage - cache : 0;
            uint64_t avail = limit > used ? limit - used : 0;
            if (!found || avail < *best) *best = avail;
            found = true;
        }
        if (!strcmp(rel, "/") || !rel[0]) break;
        char *slash = strrchr(rel, '/');
        if (slash == rel) rel[1] = 0;
        else *slash = 0;
    }
    return found;
}

int memplan_cgroup_available(const char *sysfs_root, const char *proc_cgroup, uint64_t *out)
{
    bool found = false;
    uint64_t best = 0;
    for (const char *line = proc_cgroup; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        const char *c1 = strchr(line, ':');
        if (!c1) continue;
        const char *c2 = strchr(c1 + 1, ':');
        if (!c2) continue;
        size_t plen = strcspn(c2 + 1, "\n");
        char path[PATH_MAX];
        if (plen == 0 || plen >= sizeof path) continue;
        memcpy(path, c2 + 1, plen);
        path[plen] = 0;
        size_t clen = (size_t)(c2 - c1 - 1);
        bool v2 = clen == 0 && line[0] == '0';
        bool v1_memory = false;
        for (const char *p = c1 + 1; p < c2;) {
            size_t k = strcspn(p, ",:");
            if (k == 6 && !strncmp(p, "memory", 6)) v1_memory = true;
            p += k + 1;
        }
        if (!v2 && !v1_memory) continue;
        uint64_t v = 0;
        if (walk_levels(sysfs_root, path, v2, &v) && (!found || v < best)) {
            best = v;
            found = true;
        }
    }
    if (!found) return -1;
    *out = best;
    return 0;
}

int memplan_host_available(uint64_t *bytes, char *source, size_t source_n)
{
    const char *env = getenv("DS4CL_MEM_AVAILABLE");
    if (env && *env) {
        if (num_parse_size(env, bytes, NULL) == 0) {
            snprintf(source, source_n, "DS4CL_MEM_AVAILABLE");
            return 0;
        }
        fprintf(stderr, "ds4cl: ignoring DS4CL_MEM_AVAILABLE=%s (want bytes, e.g. 64G)\n", env);
    }
    char *mi = file_read_all("/proc/meminfo", NULL);
    uint64_t avail = 0;
    bool have = mi && memplan_parse_meminfo(mi, "MemAvailable", &avail) == 0;
    free(mi);
    if (have) snprintf(source, source_n, "MemAvailable");
    char *cg = file_read_all("/proc/self/cgroup", NULL);
    uint64_t cg_avail;
    if (cg && memplan_cgroup_available("/sys/fs/cgroup", cg, &cg_avail) == 0 && (!have || cg_avail < avail)) {
        avail = cg_avail;
        have = true;
        snprintf(source, source_n, "cgroup memory limit");
    }
    free(cg);
    if (!have) return -1;
    *bytes = avail;
    return 0;
}

int memplan_env_check(ds4_error *err)
{
    static const char *const vars[] = { "DS4CL_MEM_AVAILABLE", "DS4CL_DEVICE_MEM" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *env = getenv(vars[i]);
        uint64_t v;
        if (!env || !*env) continue;
        bool size = num_parse_size(env, &v, NULL) == 0;
        if (!size || v == 0)
            return ds4_error_set(err, "%s=%s %s: give bytes or a size such as 64G or 512M (or unset it to use the "
                                      "memory detected)", vars[i], env,
                                 size ? "leaves no memory to plan with" : "is not a memory size");
    }
    return 0;
}

uint64_t memplan_device_memory_override(void)
{
    const char *env = getenv("DS4CL_DEVICE_MEM");
    uint64_t v;
    if (env && *env && num_parse_size(env, &v, NULL) == 0) return v;
    return 0;
}

/* ---- messages ------------------------------------------------------------- */

void memplan_explain(const memplan_result *r, const memplan_input *in, int requested,
                     const char *what, const char *source, char *buf, size_t n)
{
    char need[32], usable[32], avail[32], reserve[32], weights[32], ctx[32];
    format_bytes(need, sizeof need, r->need_bytes);
    format_bytes(usable, sizeof usable, r->usable_bytes);
    format_bytes(avail, sizeof avail, in->available_bytes);
    format_bytes(reserve, sizeof reserve, r->reserve_bytes);
    format_bytes(weights, sizeof weights, in->weights_bytes + in->fixed_bytes);
    format_bytes(ctx, sizeof ctx, r->ctx_bytes);
    strbuf b = { 0 };
    int limit = model_limit(in);
    char ctxname[64];
    if (requested > 0) snprintf(ctxname, sizeof ctxname, "--ctx %d", requested);
    else snprintf(ctxname, sizeof ctxname, "%s", requested == -1 ? "--ctx auto" : "the default context");

    if (r->verdict == MEMPLAN_TOO_BIG && requested > limit) {
        sb_printf(&b, "%s is beyond the model's limit of %d tokens", ctxname, limit);
    } else if (r->verdict == MEMPLAN_TOO_BIG) {
        if (r->largest_fit == 0 && in->weights_bytes + in->fixed_bytes) {
            int least = in->least_ctx > 0 ? in->least_ctx : memplan_default_policy().min_ctx;
            uint64_t w = in->weights_bytes + in->fixed_bytes;
            if (w > r->usable_bytes || !in->ctx_bytes) {
                sb_printf(&b, "the model does not fit in %s: the weights alone need %s,\n", what, weights);
            } else {
                char c[32];
                format_bytes(c, sizeof c, in->ctx_bytes(in->ctx_ud, least));
                sb_printf(&b, "the model does not fit in %s: the weights need %s and even %d tokens of context %s more,\n",
                          what, weights, least, c);
            }
            sb_printf(&b, "  usable %s: %s available (%s) minus %s kept free", usable, avail, source, reserve);
        } else {
            sb_printf(&b, "%s does not fit in %s:\n", ctxname, what);
            if (in->weights_bytes + in->fixed_bytes)
                sb_printf(&b, "  needs %s: weights %s + context %s (KV, compressed rows, scratch)\n", need, weights, ctx);
            else
                sb_printf(&b, "  needs %s for the context (KV, compressed rows, scratch)\n", need);
            sb_printf(&b, "  usable %s: %s available (%s) minus %s kept free\n", usable, avail, source, reserve);
            sb_printf(&b, "  the largest context that fits is %d tokens", r->largest_fit);
            if (r->largest_comfortable)
                sb_printf(&b, "; --ctx auto picks %d, which leaves some room", r->largest_comfortable);
        }
    } else {
        int pct = r->usable_bytes ? (int)(100.0 * (double)r->need_bytes / (double)r->usable_bytes + 0.5) : 100;
        bool tight = r->verdict == MEMPLAN_TIGHT;
        if (requested > 0)
            sb_printf(&b, "--ctx %d %s", r->n_ctx, tight ? "leaves little memory: it needs" : "needs");
        else
            sb_printf(&b, "%s: %d tokens, %s", requested == -1 ? "--ctx auto" : "context reduced to fit",
                      r->n_ctx, tight ? "though memory is short: it needs" : "needing");
        sb_printf(&b, " %s of %s usable %s (%d%%)", need, usable, what, pct);
        if (tight && r->largest_comfortable)
            sb_printf(&b, "; --ctx %d would be comfortable", r->largest_comfortable);
        else if (requested == -1 && !tight)
            sb_printf(&b, "; the largest context, in steps of %d, that keeps within %d%% of it%s",
                      memplan_default_policy().granularity, (int)(memplan_default_policy().comfort_fraction * 100 + 0.5),
                      r->n_ctx >= limit ? " (here the model's limit)" : "");
    }
    snprintf(buf, n, "%s", sb_str(&b));
    sb_free(&b);
}

static const char override_hint[] =
    "(DS4CL_MEM_AVAILABLE=BYTES, or DS4CL_DEVICE_MEM for OpenCL, overrides the detected memory)";

/* The engine's device enumeration and selection rule; no context is
 * created. */
int memplan_opencl_device(const char *device, memplan_device *out)
{
    memset(out, 0, sizeof *out);
    ds4_device *devs;
    int n, i;
    ds4_error err = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, device, &devs, &n, &i, &err) != 0) return -1;
    if (i >= 0) {
        snprintf(out->name, sizeof out->name, "%s", devs[i].name);
        out->global_mem = devs[i].memory;
        out->unified = devs[i].shares_host_memory;
    }
    free(devs);
    return i >= 0 && out->global_mem > 0 ? 0 : -1;
}

/* Where a session's memory comes from. The weights are memory-mapped from
 * the GGUF, so they always take host memory; a discrete OpenCL device gets
 * its own copy of every weight tensor at open (opencl/cl_ops.c) and holds
 * the session beside it, while a unified-memory device shares the host's
 * memory and reads the mapping in place. */
typedef struct {
    uint64_t available;
    const char *what;
    char source[160];
    bool holds_weights;
} pool;

static int host_pool(pool *p)
{
    p->what = "memory";
    p->holds_weights = true;
    return memplan_host_available(&p->available, p->source, sizeof p->source);
}

static int session_pool(ds4_backend backend, const char *device, pool *p)
{
    memset(p, 0, sizeof *p);
    if (backend != DS4_BACKEND_OPENCL) return host_pool(p);
    uint64_t dev = memplan_device_memory_override();
    if (dev) {
        p->available = dev;
        p->what = "device memory";
        p->holds_weights = true;
        snprintf(p->source, sizeof p->source, "DS4CL_DEVICE_MEM");
        return 0;
    }
    memplan_device d;
    if (memplan_opencl_device(device, &d) != 0 || d.unified || d.global_mem == 0) return host_pool(p);
    p->available = d.global_mem;
    p->what = "device memory";
    p->holds_weights = true;
    snprintf(p->source, sizeof p->source, "%s, total", d.name);
    return 0;
}

int memplan_precheck_file(const char *model_path, ds4_backend backend)
{
    /* Every backend maps the weights from the file into host memory. */
    if (backend == DS4_BACKEND_SCRIPT) return 0;
    struct stat st;
    if (stat(model_path, &st) != 0) return 0; /* the loader reports it */
    pool pl;
    if (host_pool(&pl) != 0) return 0;
    memplan_input in = { .weights_bytes = (uint64_t)st.st_size, .available_bytes = pl.available };
    memplan_policy pol = memplan_default_policy();
    memplan_result r;
    memplan_check(&in, &pol, 0, &r);
    if (r.need_bytes <= r.usable_bytes) return 0;
    char w[32], u[32], a[32], k[32];
    fprintf(stderr,
            "ds4cl: the model does not fit in %s: its weights need %s, %s is usable\n"
            "  (%s available per %s, minus %s kept free).\n"
            "Free some memory, or use a smaller model %s.\n",
            pl.what, format_bytes(w, sizeof w, in.weights_bytes), format_bytes(u, sizeof u, r.usable_bytes),
            format_bytes(a, sizeof a, pl.available), pl.source, format_bytes(k, sizeof k, r.reserve_bytes),
            override_hint);
    return -1;
}

static uint64_t engine_ctx_bytes(void *ud, int n_ctx)
{
    return ds4_session_bytes_estimate((const ds4_engine *)ud, n_ctx);
}

/* The placement's refusal of a requested context, whose suggestion (the
 * largest context it holds) must be one the caller can use. */
static int placement_refusal(const ds4_placement *place, int least, ds4_error *err)
{
    int all_host = place->largest_ctx_all_host;
    if (all_host > 0 && all_host >= least) {
        ds4_error_set(err, "%s\n%s", place->refusal, override_hint);
        return -2;
    }
    /* the placement's own tail suggests a context too small to use */
    static const char tail[] = "; the largest context that fits is";
    const char *cut = all_host > 0 ? strstr(place->refusal, tail) : NULL;
    int keep = cut ? (int)(cut - place->refusal) : (int)strlen(place->refusal);
    if (cut)
        ds4_error_set(err, "%.*s; no context of the %d tokens needed at least fits (the largest is %d): use a "
                           "device with more memory or --backend cpu\n%s",
                      keep, place->refusal, least, all_host, override_hint);
    else
        ds4_error_set(err, "%s\n%s", place->refusal, override_hint);
    return -1;
}

int memplan_session_ctx_why(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                            int default_ctx, int least, int *n_ctx, char *why, size_t whylen, ds4_error *err)
{
    if (why && whylen) why[0] = 0;
    int fallback = requested > 0 ? requested : default_ctx;
    ds4_model_info info;
    memset(&info, 0, sizeof info);
    ds4_engine_info(e, &info);
    pool pl;
    memplan_policy pol = memplan_default_policy();
    /* with an expert cache, the routed experts take its budget, not their size */
    uint64_t weights = info.weights_bytes - (info.expert_cache_bytes ? info.expert_bytes - info.expert_cache_bytes : 0);
    ds4_placement place;
    if (backend == DS4_BACKEND_OPENCL && ds4_engine_placement(e, &place) == 0 && !place.shares_host_memory &&
        place.device_memory) {
        /* The placement decided what the device holds, within its own
         * reserve; all of the rest is the session's. */
        memset(&pl, 0, sizeof pl);
        pl.available = place.device_memory;
        pl.what = "device memory";
        pl.holds_weights = true;
        snprintf(pl.source, sizeof pl.source, "%s", memplan_device_memory_override() ? "DS4CL_DEVICE_MEM" : place.device_name);
        weights = place.device_weights;
        if (requested > 0 && !place.fits) return placement_refusal(&place, least, err);
        pol.reserve_bytes = place.device_memory - place.device_budget;
        pol.comfort_fraction = 1.0;
    } else if (session_pool(backend, device, &pl) != 0) {
        if (requested == -1 && why) snprintf(why, whylen, "cannot tell how much memory is free; using --ctx %d", fallback);
        else if (requested == -1) fprintf(stderr, "ds4cl: cannot tell how much memory is free; using --ctx %d\n", fallback);
        *n_ctx = fallback;
        return 0;
    }
    memplan_input in = {
        .weights_bytes = pl.holds_weights ? weights : 0,
        .ctx_bytes = engine_ctx_bytes,
        .ctx_ud = (void *)e,
        .available_bytes = pl.available,
        .max_ctx = info.n_ctx_train,
        .least_ctx = least > pol.min_ctx ? least : 0,
    };
    if (least > pol.min_ctx) pol.min_ctx = least;
    memplan_result r;
    char msg[1024];
    if (requested > 0) {
        memplan_check(&in, &pol, requested, &r);
    } else if (requested == -1) {
        memplan_auto(&in, &pol, 0, &r);
    } else {
        memplan_check(&in, &pol, default_ctx, &r);
        if (r.verdict != MEMPLAN_FITS) memplan_auto(&in, &pol, default_ctx, &r);
    }
    memplan_explain(&r, &in, requested, pl.what, pl.source, msg, sizeof msg);
    if (r.verdict == MEMPLAN_TOO_BIG) {
        /* the model's limit is no matter of memory: no hint about it */
        bool beyond = requested > model_limit(&in);
        ds4_error_set(err, "%s%s%s", msg, beyond ? "" : "\n", beyond ? "" : override_hint);
        return requested > 0 && (beyond || r.largest_fit > 0) ? -2 : -1;
    }
    bool tell = r.verdict == MEMPLAN_TIGHT || requested == -1 || (requested == 0 && r.n_ctx != default_ctx);
    const char *warn = r.verdict == MEMPLAN_TIGHT ? "warning: " : "";
    if (tell && why) snprintf(why, whylen, "%s%s", warn, msg);
    else if (tell) fprintf(stderr, "ds4cl: %s%s\n", warn, msg);
    *n_ctx = r.n_ctx;
    return 0;
}

int memplan_session_ctx(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                        int default_ctx, int least, int *n_ctx, ds4_error *err)
{
    return memplan_session_ctx_why(e, backend, device, requested, default_ctx, least, n_ctx, NULL, 0, err);
}
