/* memory.c — the memory planner: the arithmetic of a plan under the
 * headroom policy, its account in words, and the plan of a session on an
 * opened engine (engine/ds4.h, "memory planning"). Nothing is printed:
 * the front ends print the text it returns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "engine/ds4.h"

uint64_t ds4_memory_reserve(uint64_t memory)
{
    uint64_t r = memory / 16;
    return r < (1ull << 30) ? r : 1ull << 30;
}

ds4_memory_policy ds4_memory_default_policy(void)
{
    return (ds4_memory_policy){
        .comfort_fraction = 0.90,
        .granularity = 1024,
        .min_ctx = 4096,
        .tight_ctx = 32768,
    };
}

uint64_t ds4_memory_linear_bytes(void *ud, int n_ctx)
{
    const ds4_memory_linear *l = ud;
    return l->fixed + l->per_token * (uint64_t)(n_ctx > 0 ? n_ctx : 0);
}

static int model_limit(const ds4_memory_input *in)
{
    return in->max_ctx > 0 ? in->max_ctx : DS4_MAX_CTX;
}

static uint64_t need_for(const ds4_memory_input *in, int n_ctx)
{
    uint64_t c = in->ctx_bytes ? in->ctx_bytes(in->ctx_ud, n_ctx) : 0;
    return in->weights_bytes + in->fixed_bytes + c;
}

int ds4_memory_largest_ctx(const ds4_memory_input *in, uint64_t budget, int lo, int hi, int step)
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

static void budgets(const ds4_memory_input *in, const ds4_memory_policy *pol, ds4_memory_result *out)
{
    uint64_t avail = in->available_bytes;
    uint64_t reserve = pol->reserve_bytes ? pol->reserve_bytes : ds4_memory_reserve(avail);
    out->reserve_bytes = reserve;
    out->usable_bytes = avail > reserve ? avail - reserve : 0;
    out->comfortable_bytes = (uint64_t)((double)out->usable_bytes * pol->comfort_fraction);
}

static void fill_limits(const ds4_memory_input *in, const ds4_memory_policy *pol, int hi, ds4_memory_result *out)
{
    int lo = pol->min_ctx < hi ? pol->min_ctx : hi;
    out->largest_fit = ds4_memory_largest_ctx(in, out->usable_bytes, lo, hi, pol->granularity);
    out->largest_comfortable = ds4_memory_largest_ctx(in, out->comfortable_bytes, lo, hi, pol->granularity);
}

static void measure(const ds4_memory_input *in, int n_ctx, ds4_memory_result *out)
{
    out->n_ctx = n_ctx;
    out->ctx_bytes = n_ctx > 0 && in->ctx_bytes ? in->ctx_bytes(in->ctx_ud, n_ctx) : 0;
    out->need_bytes = in->weights_bytes + in->fixed_bytes + out->ctx_bytes;
}

void ds4_memory_check(const ds4_memory_input *in, const ds4_memory_policy *pol, int n_ctx, ds4_memory_result *out)
{
    memset(out, 0, sizeof *out);
    budgets(in, pol, out);
    int limit = model_limit(in);
    fill_limits(in, pol, limit, out);
    measure(in, n_ctx, out);
    if (n_ctx > limit || out->need_bytes > out->usable_bytes) out->verdict = DS4_MEMORY_TOO_BIG;
    else if (out->need_bytes > out->comfortable_bytes) out->verdict = DS4_MEMORY_TIGHT;
    else out->verdict = DS4_MEMORY_FITS;
}

void ds4_memory_auto(const ds4_memory_input *in, const ds4_memory_policy *pol, int cap, ds4_memory_result *out)
{
    memset(out, 0, sizeof *out);
    budgets(in, pol, out);
    int limit = model_limit(in);
    fill_limits(in, pol, limit, out);
    int hi = cap > 0 && cap < limit ? cap : limit;
    int lo = pol->min_ctx < hi ? pol->min_ctx : hi;
    int c = ds4_memory_largest_ctx(in, out->comfortable_bytes, lo, hi, pol->granularity);
    if (c > 0) {
        measure(in, c, out);
        out->verdict = DS4_MEMORY_FITS;
        return;
    }
    int f = ds4_memory_largest_ctx(in, out->usable_bytes, lo, hi, pol->granularity);
    if (f > pol->tight_ctx && pol->tight_ctx >= lo) f = pol->tight_ctx;
    if (f > 0) {
        measure(in, f, out);
        out->verdict = DS4_MEMORY_TIGHT;
        return;
    }
    measure(in, lo, out);
    out->n_ctx = 0;
    out->verdict = DS4_MEMORY_TOO_BIG;
}

/* ---- the account in words ------------------------------------------------ */

void ds4_memory_explain(const ds4_memory_result *r, const ds4_memory_input *in, int requested,
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

    if (r->verdict == DS4_MEMORY_TOO_BIG && requested > limit) {
        sb_printf(&b, "%s is beyond the model's limit of %d tokens", ctxname, limit);
    } else if (r->verdict == DS4_MEMORY_TOO_BIG) {
        if (r->largest_fit == 0 && in->weights_bytes + in->fixed_bytes) {
            int least = in->least_ctx > 0 ? in->least_ctx : ds4_memory_default_policy().min_ctx;
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
        bool tight = r->verdict == DS4_MEMORY_TIGHT;
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
                      ds4_memory_default_policy().granularity, (int)(ds4_memory_default_policy().comfort_fraction * 100 + 0.5),
                      r->n_ctx >= limit ? " (here the model's limit)" : "");
    }
    snprintf(buf, n, "%s", sb_str(&b));
    sb_free(&b);
}

static const char override_hint[] =
    "(DS4CL_MEM_AVAILABLE=BYTES, or DS4CL_DEVICE_MEM for OpenCL, overrides the detected memory)";

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
    return ds4_memory_host_available(&p->available, p->source, sizeof p->source);
}

static int session_pool(ds4_backend backend, const char *device, pool *p)
{
    memset(p, 0, sizeof *p);
    if (backend != DS4_BACKEND_OPENCL) return host_pool(p);
    uint64_t dev = ds4_memory_device_override();
    if (dev) {
        p->available = dev;
        p->what = "device memory";
        p->holds_weights = true;
        snprintf(p->source, sizeof p->source, "DS4CL_DEVICE_MEM");
        return 0;
    }
    ds4_memory_device d;
    if (ds4_memory_opencl_device(device, &d) != 0 || d.unified || d.global_mem == 0) return host_pool(p);
    p->available = d.global_mem;
    p->what = "device memory";
    p->holds_weights = true;
    snprintf(p->source, sizeof p->source, "%s, total", d.name);
    return 0;
}

int ds4_memory_precheck_file(const char *model_path, ds4_backend backend, ds4_error *err)
{
    /* Every backend maps the weights from the file into host memory. */
    if (backend == DS4_BACKEND_SCRIPT) return 0;
    struct stat st;
    if (stat(model_path, &st) != 0) return 0; /* the loader reports it */
    pool pl;
    if (host_pool(&pl) != 0) return 0;
    ds4_memory_input in = { .weights_bytes = (uint64_t)st.st_size, .available_bytes = pl.available };
    ds4_memory_policy pol = ds4_memory_default_policy();
    ds4_memory_result r;
    ds4_memory_check(&in, &pol, 0, &r);
    if (r.need_bytes <= r.usable_bytes) return 0;
    char w[32], u[32], a[32], k[32];
    return ds4_error_set(err,
                         "the model does not fit in %s: its weights need %s, %s is usable\n"
                         "  (%s available per %s, minus %s kept free).\n"
                         "Free some memory, or use a smaller model %s.",
                         pl.what, format_bytes(w, sizeof w, in.weights_bytes),
                         format_bytes(u, sizeof u, r.usable_bytes),
                         format_bytes(a, sizeof a, pl.available), pl.source,
                         format_bytes(k, sizeof k, r.reserve_bytes), override_hint);
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

int ds4_memory_session_ctx(const ds4_engine *e, ds4_backend backend, const char *device, int requested,
                           int default_ctx, int least, int *n_ctx, char *why, size_t whylen, ds4_error *err)
{
    if (why && whylen) why[0] = 0;
    int fallback = requested > 0 ? requested : default_ctx;
    ds4_model_info info;
    memset(&info, 0, sizeof info);
    ds4_engine_info(e, &info);
    pool pl;
    ds4_memory_policy pol = ds4_memory_default_policy();
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
        snprintf(pl.source, sizeof pl.source, "%s", ds4_memory_device_override() ? "DS4CL_DEVICE_MEM" : place.device_name);
        weights = place.device_weights;
        if (requested > 0 && !place.fits) return placement_refusal(&place, least, err);
        pol.reserve_bytes = place.device_memory - place.device_budget;
        pol.comfort_fraction = 1.0;
    } else if (session_pool(backend, device, &pl) != 0) {
        if (requested == -1 && why) snprintf(why, whylen, "cannot tell how much memory is free; using --ctx %d", fallback);
        *n_ctx = fallback;
        return 0;
    }
    ds4_memory_input in = {
        .weights_bytes = pl.holds_weights ? weights : 0,
        .ctx_bytes = engine_ctx_bytes,
        .ctx_ud = (void *)e,
        .available_bytes = pl.available,
        .max_ctx = info.n_ctx_train,
        .least_ctx = least > pol.min_ctx ? least : 0,
    };
    if (least > pol.min_ctx) pol.min_ctx = least;
    ds4_memory_result r;
    char msg[1024];
    if (requested > 0) {
        ds4_memory_check(&in, &pol, requested, &r);
    } else if (requested == -1) {
        ds4_memory_auto(&in, &pol, 0, &r);
    } else {
        ds4_memory_check(&in, &pol, default_ctx, &r);
        if (r.verdict != DS4_MEMORY_FITS) ds4_memory_auto(&in, &pol, default_ctx, &r);
    }
    ds4_memory_explain(&r, &in, requested, pl.what, pl.source, msg, sizeof msg);
    if (r.verdict == DS4_MEMORY_TOO_BIG) {
        /* the model's limit is no matter of memory: no hint about it */
        bool beyond = requested > model_limit(&in);
        ds4_error_set(err, "%s%s%s", msg, beyond ? "" : "\n", beyond ? "" : override_hint);
        return requested > 0 && (beyond || r.largest_fit > 0) ? -2 : -1;
    }
    bool tell = r.verdict == DS4_MEMORY_TIGHT || requested == -1 || (requested == 0 && r.n_ctx != default_ctx);
    const char *warn = r.verdict == DS4_MEMORY_TIGHT ? "warning: " : "";
    if (tell && why) snprintf(why, whylen, "%s%s", warn, msg);
    *n_ctx = r.n_ctx;
    return 0;
}
