/* bench_peak.c — the compute-peak probes of bench_peak.h. */
#include "bench/bench_peak.h"

#include <pthread.h>
#include <stdlib.h>

#include "base/base.h"
#include "opencl/cl_runtime.h"

/* ---- host -------------------------------------------------------------------- */

/* One register per chain: 16 lanes where the build has AVX-512, else 8
 * (eight 512-bit chains in an AVX2 build would spill to the stack, and
 * the probe would time the spills). */
#if defined(__AVX512F__)
enum { PEAK_LANES = 16 };
#else
enum { PEAK_LANES = 8 };
#endif
typedef float vpeak __attribute__((vector_size(PEAK_LANES * 4)));

typedef struct {
    long iters;
    float out;
} chain_job;

/* Eight chains keep the FMA units' latency hidden; contraction is on for
 * this function only (the rest of the program never contracts): GCC's
 * optimize attribute, clang's fp pragma. */
#if defined(__clang__)
#define CONTRACT_FAST
#else
#define CONTRACT_FAST __attribute__((optimize("fp-contract=fast")))
#endif
CONTRACT_FAST static void *chains(void *p)
{
#if defined(__clang__)
#pragma clang fp contract(fast)
#endif
    chain_job *j = p;
    const float a = 0.9999999f, b = 1e-7f;
    vpeak x0 = { 0 }, x1 = x0 + 1e-3f, x2 = x0 + 2e-3f, x3 = x0 + 3e-3f;
    vpeak x4 = x0 + 4e-3f, x5 = x0 + 5e-3f, x6 = x0 + 6e-3f, x7 = x0 + 7e-3f;
    for (long i = 0; i < j->iters; i++) {
        x0 = x0 * a + b;
        x1 = x1 * a + b;
        x2 = x2 * a + b;
        x3 = x3 * a + b;
        x4 = x4 * a + b;
        x5 = x5 * a + b;
        x6 = x6 * a + b;
        x7 = x7 * a + b;
    }
    vpeak t = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7));
    float s = 0;
    for (int i = 0; i < PEAK_LANES; i++) s += t[i];
    j->out = s; /* keeps the loop */
    return NULL;
}

static double host_run_ms(int threads, long iters)
{
    pthread_t th[256];
    chain_job jobs[256];
    if (threads > 256) threads = 256;
    double t0 = base_now_ms();
    int started = 0;
    for (int i = 0; i < threads; i++) {
        jobs[i].iters = iters;
        if (pthread_create(&th[i], NULL, chains, &jobs[i]) == 0) started++;
        else break;
    }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    return started == threads ? base_now_ms() - t0 : -1;
}

double bench_host_fma_gflops(int threads)
{
    if (threads < 1) threads = 1;
    long iters = 1L << 20;
    double ms = host_run_ms(threads, iters);
    if (ms <= 0) return 0;
    iters = (long)((double)iters * 200.0 / (ms > 0.01 ? ms : 0.01));
    if (iters < 1) iters = 1;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        ms = host_run_ms(threads, iters);
        double g = ms > 0 ? (double)threads * (double)iters * 8 * PEAK_LANES * 2 / (ms * 1e-3) / 1e9 : 0;
        if (g > best) best = g;
    }
    return best;
}

/* ---- OpenCL ------------------------------------------------------------------------ */

static double ocl_run_ms(clrt *rt, cl_kernel k, cl_mem out, size_t items, size_t local, int iters)
{
    double t0 = base_now_ms();
    clrt_call call = clrt_begin(rt, k);
    clrt_arg_mem(&call, out);
    clrt_arg_int(&call, iters);
    clrt_arg_float(&call, 0.9999999f);
    clrt_arg_float(&call, 1e-7f);
    if (clrt_enqueue(&call, 1, &items, &local) || clrt_finish(rt)) return -1;
    return base_now_ms() - t0;
}

double bench_cl_fma_gflops(const char *device)
{
    clrt_options o = { .device = device };
    clrt *rt = clrt_open(&o, NULL);
    if (!rt) return 0;
    const clrt_device *d = clrt_dev(rt);
    const bool cpu = (d->type & CL_DEVICE_TYPE_CPU) != 0;
    /* a few work-items per core on CPU devices, thousands per unit on GPUs */
    size_t items = (size_t)d->compute_units * (cpu ? 4 : 4096), local = cpu ? 1 : 128;
    if (local > d->max_wg) local = d->max_wg;
    cl_int rc;
    cl_mem out = clCreateBuffer(clrt_context(rt), CL_MEM_WRITE_ONLY, items * 4, NULL, &rc);
    cl_kernel k = out ? clrt_kernel(rt, "bench", "fma_peak") : NULL;
    double best = 0;
    int iters = 1000;
    /* the first launch also loads the program and lets the driver build
     * its work-group function: calibrate on the second */
    double ms = k ? ocl_run_ms(rt, k, out, items, local, iters) : -1;
    if (ms > 0) ms = ocl_run_ms(rt, k, out, items, local, iters);
    if (ms > 0) {
        double scale = 200.0 / (ms > 0.01 ? ms : 0.01);
        iters = (int)(iters * (scale > 1e5 ? 1e5 : scale));
        if (iters < 1) iters = 1;
        for (int r = 0; r < 3; r++) {
            ms = ocl_run_ms(rt, k, out, items, local, iters);
            /* 8 chains of float16 FMAs: 256 flops a round */
            double g = ms > 0 ? (double)items * iters * 256.0 / (ms * 1e-3) / 1e9 : 0;
            if (g > best) best = g;
        }
    }
    if (out) clReleaseMemObject(out);
    clrt_close(rt);
    return best;
}
