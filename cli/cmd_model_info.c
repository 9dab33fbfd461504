/* cmd_model_info.c — `ds4cl --model-info -m FILE [--ctx N]`: what a DS4
 * GGUF holds (shape, layer kinds, tensor bytes per type) and the memory a
 * session of N tokens needs. The engine is opened once, to plan only (no
 * weight is read or uploaded), and describes its own binding, so a file
 * this accepts is one the engine can load. With `--backend opencl` also
 * the device the engine would pick and what the model and the session take
 * there (with --ctx auto the context is decided first, on an engine of its
 * own: the placement is made for it). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/expert_setup.h"
#include "cli/model_path.h"

#define DEFAULT_INFO_CTX 32768

static void print_bytes(uint64_t b)
{
    if (b >= (1ull << 30)) printf("%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20)) printf("%.2f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024) printf("%.1f KiB", (double)b / 1024.0);
    else printf("%llu B", (unsigned long long)b);
}

/* What the OpenCL backend would use: its device and the placement of the
 * model for a session of n_ctx tokens. */
typedef struct {
    ds4_device dev;
    ds4_placement place;
} opencl_plan;

/* A plan-only engine on o's backend (the CPU backend's binding for the
 * script engine) placing a session of plan_ctx tokens, its routed experts
 * through a cache of expert_cache bytes (0: mapped); NULL after printing
 * why. */
static ds4_engine *open_plan(const ds4cl_options *o, const char *path, int plan_ctx, uint64_t expert_cache)
{
    bool cl = o->backend == DS4_BACKEND_OPENCL;
    ds4_engine_options eo = { .model_path = path, .backend = cl ? DS4_BACKEND_OPENCL : DS4_BACKEND_CPU,
                              .device = o->device, .quant_sim = o->quant_sim, .plan_only = true,
                              .host_expert_layers = o->host_expert_layers, .plan_ctx = plan_ctx, .split = o->split,
                              .stream_experts = o->stream_experts, .expert_cache = expert_cache,
                              .device_memory = cl ? ds4_memory_device_override() : 0 };
    ds4_error err = { { 0 } };
    ds4_engine *e = ds4_engine_open(&eo, &err);
    if (!e) {
        /* errors of the file itself already start with its path */
        size_t pl = strlen(path);
        bool named = !strncmp(err.msg, path, pl);
        fprintf(stderr, "ds4cl: %s%s%s\n", named ? "" : path, named ? "" : ": ", err.msg);
    }
    return e;
}

/* 0, or -1 after printing why the backend has no such device: before any
 * other output, so that a wrong --device is not lost below the model's
 * details. */
static int pick_opencl(const ds4cl_options *o, opencl_plan *p)
{
    ds4_device *devs;
    int n, pick;
    ds4_error derr = { "" };
    if (ds4_backend_devices(DS4_BACKEND_OPENCL, o->device, &devs, &n, &pick, &derr) != 0) {
        fprintf(stderr, "ds4cl: %s\n", derr.msg);
        return -1;
    }
    if (pick >= 0) p->dev = devs[pick];
    free(devs);
    if (pick < 0) {
        fprintf(stderr, "ds4cl: %s\n", derr.msg);
        return -1;
    }
    return 0;
}

static void print_layers(int from, int to)
{
    if (to - from == 1) printf("layer %d", from);
    else printf("layers %d-%d", from, to - 1);
}

static void print_opencl(const opencl_plan *p, const ds4_engine *e, uint64_t weights_bytes, int n_ctx, ds4_quant_sim q)
{
    const ds4_device *d = &p->dev;
    const ds4_placement *pl = &p->place;
    printf("\non OpenCL device [%d] %s (%s, %s)\n", d->index, d->name, ds4_device_kind_name(d->kind), d->platform);
    printf("  device memory     ");
    print_bytes(pl->device_memory ? pl->device_memory : d->memory);
    if (pl->shares_host_memory) printf(" (shared with the host)");
    else {
        printf("%s, ", ds4_memory_device_override() ? " (DS4CL_DEVICE_MEM)" : "");
        print_bytes(pl->device_budget);
        printf(" usable");
    }
    printf(", largest buffer ");
    print_bytes(d->max_alloc);
    int split = ds4_engine_tensors_over(e, d->max_alloc);
    if (split) printf("; %d tensor%s larger than one buffer, split", split, split == 1 ? "" : "s");
    printf("\n  placement         ");
    int h = pl->host_expert_layers, nl = pl->n_layer;
    if (h == 0) printf("everything on the device%s", pl->n_devices > 1 ? "s, the layers split between them" : "");
    else {
        printf("routed experts of ");
        if (h >= nl) printf("every layer");
        else print_layers(0, h);
        printf(" in host memory, on the CPU");
        if (h < nl) {
            printf("; ");
            print_layers(h, nl);
            printf(" on the device");
        }
        printf("\n                    the rest on the device%s", pl->embed_on_host ? ", the embedding in host memory" : "");
    }
    if (pl->n_devices > 1) {
        for (int i = 0; i < pl->n_devices; i++) {
            const ds4_placement_device *dv = &pl->dev[i];
            printf("\n  device %d          %s: ", i, dv->name);
            print_layers(dv->first_layer, dv->first_layer + dv->n_layers);
            if (dv->host_expert_layers) printf(" (experts of %d on the host)", dv->host_expert_layers);
            if (dv->head) printf(" and the head");
            printf("; ");
            print_bytes(dv->weights);
            printf(" + ");
            print_bytes(dv->session);
            if (!dv->shares_host_memory) {
                printf(" of ");
                print_bytes(dv->budget);
                printf(" usable");
            }
            if (!dv->fits) printf(" (does not fit)");
        }
    }
    printf("\n  on the device%s    ", pl->n_devices > 1 ? "s" : " ");
    print_bytes(pl->device_weights);
    printf(" of weights (%s) + ", pl->shares_host_memory ? "zero-copy over the mapped file" : "uploaded at load");
    print_bytes(pl->device_session);
    printf(" for %d tokens", n_ctx);
    if (pl->stream_bytes) {
        printf(" + ");
        print_bytes(pl->stream_bytes);
        printf(" for streamed experts");
    }
    printf(" = ");
    print_bytes(pl->device_weights + pl->device_session + pl->stream_bytes);
    if (!pl->fits) printf("  (more than the device has)");
    printf("\n  in host memory    ");
    print_bytes(pl->host_weights);
    printf(" of weights computed by the CPU (the file is mapped whole: ");
    print_bytes(weights_bytes);
    printf(")\n  per token         ");
    print_bytes(pl->token_device_bytes);
    printf(" of weights read from device memory, ");
    print_bytes(pl->token_host_bytes);
    printf(" from host memory\n");
    if (!pl->shares_host_memory) {
        printf("  largest context   %d tokens with this placement", pl->largest_ctx);
        if (pl->largest_ctx_all_host != pl->largest_ctx)
            printf(", %d with every routed expert in host memory", pl->largest_ctx_all_host);
        printf("\n");
    }
    if (pl->stream_bytes) {
        printf("  streamed experts  prefill chunks of %d tokens or more compute the host's experts on the device; ",
               pl->stream_experts);
        print_bytes(pl->stream_bytes);
        printf(" kept for them\n");
    }
    if (!pl->fits) printf("  does not fit      %s\n", pl->refusal);
    if (h > 0) {
        const char *why = "";
        printf("  cpu experts       %s\n", ds4_cpu_experts_mode(q, &why));
        if (*why) printf("                    (%s)\n", why);
    }
}

/* Where the routed experts would be on this machine, and what a token
 * then costs in reads from the file. */
static void print_streaming(const ds4cl_options *o, const char *path, uint64_t identity, int n_layer, int n_expert)
{
    ds4_expert_setup xs;
    bool ok = expert_setup(o, path, 0, true, &xs) == 0;
    const ds4_expert_shape *sh = &xs.shape;
    if (!ok) {
        printf("\nrouted experts  no expert cache fits (the numbers are above)\n");
        return;
    }
    if (!xs.plan.streaming) {
        printf("\nrouted experts  mapped with the rest of the file (it fits in memory)\n");
        return;
    }
    printf("\nrouted experts  read from the file through an expert cache\n");
    printf("  in memory         the non-routed weights ");
    print_bytes(sh->resident_bytes);
    printf(", an expert cache of ");
    print_bytes(xs.plan.cache_bytes);
    printf(" (%llu of %llu experts, ", (unsigned long long)xs.plan.slots, (unsigned long long)sh->n_experts);
    print_bytes(sh->slot_bytes);
    printf(" each, locked where permitted), the session\n  in the file       the routed experts ");
    print_bytes(sh->expert_bytes);
    printf("; a token reads %d per layer: ", sh->min_slots);
    print_bytes(sh->token_bytes);
    printf("\n");
    double rates[] = { ds4_expert_uniform_hit_rate(sh, xs.plan.slots), 0.8, 0 };
    const char *what[] = { "uniform routing", "skewed routing", "the routing of earlier runs" };
    char stats[4096];
    int n_rates = 2;
    if (expert_stats_path(path, stats, sizeof stats) &&
        ds4_expert_stats_hit_rate(stats, identity, n_layer, n_expert, xs.plan.slots, &rates[2]) == 0)
        n_rates = 3;
    for (int i = 0; i < n_rates; i++) {
        uint64_t b = ds4_expert_disk_bytes(sh, rates[i]);
        printf("  hit rate %.2f     (%s) ", rates[i], what[i]);
        print_bytes(b);
        printf(" from disk per token");
        if (b) printf(": at most %.1f t/s at 3 GB/s, %.1f t/s at 7 GB/s", 3e9 / (double)b, 7e9 / (double)b);
        printf("\n");
    }
}

/* --ctx auto: the context a session would get on this machine, and why
 * (the planner's account), as -p and the interactive agent would plan it,
 * on e (a plan-only engine); 0 after printing the refusal when none fits. */
static int plan_auto(const ds4_engine *e, const ds4cl_options *o, char *why, size_t whylen)
{
    ds4_error err = { { 0 } };
    int n_ctx = 0;
    int rc = ds4_memory_session_ctx(e, o->backend, o->device, -1, DEFAULT_INFO_CTX, 0, &n_ctx, why, whylen, &err);
    if (rc != 0) fprintf(stderr, "ds4cl: %s\n", err.msg);
    return rc == 0 ? n_ctx : 0;
}

int cmd_model_info(const ds4cl_options *o)
{
    ds4_error env_err = { { 0 } };
    if (ds4_memory_env_check(&env_err) != 0) {
        fprintf(stderr, "ds4cl: %s\n", env_err.msg);
        return EXIT_USAGE;
    }
    /* Like every other mode: -m FILE, else the default model link. */
    char path_buf[PATH_MAX];
    const char *path = model_path_resolve(o->model_path, path_buf, sizeof path_buf);
    if (!path) return EXIT_ERROR;
    bool cl = o->backend == DS4_BACKEND_OPENCL;
    int n_ctx = o->ctx > 0 ? o->ctx : DEFAULT_INFO_CTX;
    char why[1024] = "";
    ds4_engine *e = NULL;
    if (o->ctx == -1) {
        /* the CPU backend plans the context beside the expert cache it
         * would stream through, not beside every expert */
        ds4_expert_setup xs;
        memset(&xs, 0, sizeof xs);
        if (!cl && expert_setup(o, path, 0, true, &xs) != 0) return EXIT_ERROR;
        e = open_plan(o, path, 0, xs.plan.cache_bytes);
        n_ctx = e ? plan_auto(e, o, why, sizeof why) : 0;
        /* the placement on the devices is made for the context decided */
        if (!n_ctx || cl) ds4_engine_close(e), e = NULL;
        if (!n_ctx) return EXIT_ERROR;
    }
    opencl_plan clp;
    memset(&clp, 0, sizeof clp);
    if (cl && pick_opencl(o, &clp) != 0) return EXIT_ERROR;
    if (!e && !(e = open_plan(o, path, n_ctx, 0))) return EXIT_ERROR;
    if (cl) ds4_engine_placement(e, &clp.place);
    strbuf text = { 0 };
    ds4_error err = { { 0 } };
    if (ds4_engine_describe_model(e, &text, &err) != 0) {
        fprintf(stderr, "ds4cl: %s\n", err.msg);
        sb_free(&text);
        ds4_engine_close(e);
        return EXIT_ERROR;
    }
    fputs(sb_str(&text), stdout);
    sb_free(&text);
    ds4_model_info info;
    ds4_engine_info(e, &info);
    uint64_t ctx_bytes = ds4_model_context_bytes(e, n_ctx);
    printf("\nmemory for %d tokens\n", n_ctx);
    if (why[0]) printf("  %s\n", why);
    printf("  weights (mapped)  ");
    print_bytes(info.weights_bytes);
    printf("\n  session state     ");
    print_bytes(ctx_bytes);
    printf("  (f32 raw windows, compressed and indexer rows, compressor frontiers, logits)\n");
    printf("  total             ");
    print_bytes(info.weights_bytes + ctx_bytes);
    printf("\n");
    if (cl) print_opencl(&clp, e, info.weights_bytes, n_ctx, o->quant_sim);
    else {
        print_streaming(o, path, info.identity, info.n_layer, info.n_expert);
        const char *note = "";
        printf("\ncpu experts   %s\n", ds4_cpu_experts_mode(o->quant_sim, &note));
        if (*note) printf("              (%s)\n", note);
    }
    ds4_engine_close(e);
    return EXIT_DONE;
}
