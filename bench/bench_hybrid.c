/* bench_hybrid.c — `ds4cl-bench --hybrid-bench -m MODEL`: the OpenCL
 * backend with its routed experts in host memory (computed by the CPU)
 * against the same device holding everything, in one run.
 *
 * For each placement (every expert on the device; the first half of the
 * layers' experts on the host; every layer's on the host) an engine is
 * opened, a prompt of --prefill random tokens is read (prefill_tps) and
 * --gen-tokens tokens are decoded one at a time (decode_tps). The rounds
 * alternate the placements (--rounds, best of each kept) so that a load
 * that comes and goes is shared out. Per decode step: step_ms, the
 * hand-overs between device and host (handover_ms, handover_bytes), the
 * host's routed experts (host_experts_ms), the host's waits for the
 * device before a hand-over (wait_ms), and the rest of the step, the
 * schedule's own time and what the device kept the host waiting for
 * beside those (device_ms, which includes wait_ms). decode_vs_device and
 * prefill_vs_device are the ratios to the device-only row; handover_pct is
 * the hand-overs' share of a step.
 *
 * hybrid-all-streamed is hybrid-all with --stream-experts 32: prefill
 * chunks compute the host's experts on the device, each layer's weights
 * copied there for it (decode steps, one token, stay on the host).
 *
 * --split-devices 0,1 adds a row with the layers split over those devices
 * (every expert on them): its handover_bytes are the hidden state passed
 * from one device's range to the next.
 *
 * With PoCL, device and host are the same cores: then the ratio measures
 * what the hybrid schedule costs (hand-overs, waits), not what a GPU gains. */
#include "bench/bench_hybrid.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "engine/backend.h"
#include "engine/ds4.h"
#include "engine/forward.h"

typedef struct {
    const char *model, *device, *devices;
    long prefill, gen, rounds;
    int threads;
} hyb_opts;

typedef struct {
    const char *name;
    int host;            /* ds4_engine_options.host_expert_layers */
    const char *devices; /* a device list (a layer split), or NULL for the one device */
    int stream;          /* ds4_engine_options.stream_experts */
    double prefill_tps, decode_tps, step_ms, handover_ms, wait_ms, experts_ms, handover_bytes;
    int host_layers;
    bool ran;
} hyb_row;

static int parse(int argc, char **argv, hyb_opts *o)
{
    *o = (hyb_opts){ .prefill = 512, .gen = 32, .rounds = 2 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long *num = !strcmp(a, "--prefill")      ? &o->prefill
                    : !strcmp(a, "--gen-tokens") ? &o->gen
                    : !strcmp(a, "--rounds")     ? &o->rounds
                                                 : NULL;
        if (!strcmp(a, "--hybrid-bench")) continue;
        if (!v) {
            fprintf(stderr, "ds4cl-bench: %s needs a value\n", a);
            return -1;
        }
        i++;
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--device")) o->device = v;
        else if (!strcmp(a, "--split-devices")) o->devices = v;
        else if (!strcmp(a, "--threads") && num_parse_int(v, 0, 1024, &o->threads, NULL)) {
            fprintf(stderr, "ds4cl-bench: --threads wants 0..1024, not '%s'\n", v);
            return -1;
        } else if (!strcmp(a, "--threads")) continue;
        else if (num) {
            if (num_parse_long(v, 1, 100000, num, NULL)) {
                fprintf(stderr, "ds4cl-bench: %s wants 1..100000, not '%s'\n", a, v);
                return -1;
            }
        } else {
            fprintf(stderr, "ds4cl-bench: unknown option '%s' for --hybrid-bench\n", a);
            return -1;
        }
    }
    if (!o->model) {
        fprintf(stderr, "ds4cl-bench: --hybrid-bench needs -m MODEL\n");
        return -1;
    }
    return 0;
}

static int run_one(const hyb_opts *o, hyb_row *r, ds4_error *err)
{
    int n_ctx = (int)(o->prefill + o->gen + 8);
    ds4_engine_options eo = { .model_path = o->model, .backend = DS4_BACKEND_OPENCL,
                              .device = r->devices ? r->devices : o->device, .threads = o->threads,
                              .quant_sim = DS4_QSIM_FULL, .host_expert_layers = r->host, .plan_ctx = n_ctx,
                              .stream_experts = r->stream };
    ds4_engine *e = ds4_engine_open(&eo, err);
    if (!e) return -1;
    ds4_placement pl;
    ds4_engine_placement(e, &pl);
    r->host_layers = pl.host_expert_layers;
    ds4_session *s = ds4_session_open(e, n_ctx, err);
    if (!s) {
        ds4_engine_close(e);
        return -1;
    }
    int32_t *ids = xcalloc((size_t)o->prefill, sizeof *ids);
    uint32_t x = 12345;
    for (long i = 0; i < o->prefill; i++) {
        x = x * 1103515245u + 12345u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)e->n_vocab);
    }
    int rc = -1;
    double t0 = base_now_ms();
    if (ds4_session_sync(s, ids, (size_t)o->prefill, NULL, err) != DS4_OK) goto out;
    double prefill_ms = base_now_ms() - t0;
    fwd_handover_stats a, b;
    fwd_get_handover_stats(fwd_of(e), &a);
    t0 = base_now_ms();
    int32_t next = ids[0];
    for (long i = 0; i < o->gen; i++) {
        if (ds4_session_eval(s, next, NULL, err) != DS4_OK) goto out;
        next = (next + 7) % e->n_vocab;
    }
    double decode_ms = base_now_ms() - t0;
    fwd_get_handover_stats(fwd_of(e), &b);
    double ptps = (double)o->prefill / (prefill_ms / 1000.0), dtps = (double)o->gen / (decode_ms / 1000.0);
    if (!r->ran || dtps > r->decode_tps) {
        r->decode_tps = dtps;
        r->step_ms = decode_ms / (double)o->gen;
        r->handover_ms = (b.ms - a.ms) / (double)o->gen;
        r->wait_ms = (b.wait_ms - a.wait_ms) / (double)o->gen;
        r->experts_ms = (b.experts_ms - a.experts_ms) / (double)o->gen;
        r->handover_bytes = (double)(b.bytes - a.bytes) / (double)o->gen;
    }
    if (ptps > r->prefill_tps) r->prefill_tps = ptps;
    r->ran = true;
    rc = 0;
out:
    free(ids);
    ds4_session_close(s);
    ds4_engine_close(e);
    return rc;
}

int bench_hybrid_main(int argc, char **argv)
{
    hyb_opts o;
    if (parse(argc, argv, &o)) return 2;
    hyb_row rows[] = {
        { .name = "device", .host = DS4_EXPERTS_ON_DEVICE },
        { .name = "hybrid-half", .host = 0 },
        { .name = "hybrid-all", .host = INT_MAX },
        { .name = "hybrid-all-streamed", .host = INT_MAX, .stream = 32 },
        { .name = "split", .host = DS4_EXPERTS_ON_DEVICE, .devices = o.devices },
    };
    const int n_rows = (int)(sizeof rows / sizeof rows[0]) - (o.devices ? 0 : 1);
    ds4_error err = { "" };
    /* half the layers: read from the file's layer count */
    ds4_engine_options po = { .model_path = o.model, .backend = DS4_BACKEND_OPENCL, .device = o.device,
                              .plan_only = true };
    ds4_engine *pe = ds4_engine_open(&po, &err);
    if (!pe) {
        fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
        return 1;
    }
    ds4_model_info info;
    ds4_engine_info(pe, &info);
    ds4_engine_close(pe);
    rows[1].host = info.n_layer / 2 > 0 ? info.n_layer / 2 : 1;
    fprintf(stderr, "ds4cl-bench: %s on %s, %d layers, %ld prefill + %ld decode tokens, %ld rounds\n", info.name,
            info.device_name, info.n_layer, o.prefill, o.gen, o.rounds);
    for (long round = 0; round < o.rounds; round++)
        for (int i = 0; i < n_rows; i++) {
            int k = round % 2 ? n_rows - 1 - i : i; /* alternate the order */
            if (run_one(&o, &rows[k], &err)) {
                fprintf(stderr, "ds4cl-bench: %s: %s\n", rows[k].name, err.msg);
                return 1;
            }
        }
    printf("placement,host_expert_layers,prefill_tps,decode_tps,prefill_vs_device,decode_vs_device,step_ms,"
           "handover_ms,handover_pct,host_experts_ms,wait_ms,device_ms,handover_bytes_per_token\n");
    for (int i = 0; i < n_rows; i++) {
        const hyb_row *r = &rows[i];
        double device_ms = r->step_ms - r->handover_ms - r->experts_ms;
        printf("%s,%d,%.2f,%.3f,%.3f,%.3f,%.2f,%.3f,%.2f,%.2f,%.2f,%.2f,%.0f\n", r->name, r->host_layers,
               r->prefill_tps, r->decode_tps, r->prefill_tps / rows[0].prefill_tps, r->decode_tps / rows[0].decode_tps,
               r->step_ms, r->handover_ms, 100.0 * r->handover_ms / r->step_ms, r->experts_ms, r->wait_ms,
               device_ms > 0 ? device_ms : 0, r->handover_bytes);
    }
    return 0;
}
