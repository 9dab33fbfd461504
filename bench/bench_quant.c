/* bench_quant.c — kernel micro-benchmark: y = W·x for one token with the
 * CPU backend's product (cpu_mm_rows, the decode path) over a weight
 * matrix far larger than the caches, per format, single- and
 * multi-threaded, next to a plain streaming read of the same size in the
 * same process. Decode is memory-bound, so "GB/s of weights" against that
 * ceiling is the figure of merit. */
#include "bench/bench_quant.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "base/base.h"
#include "bench/bench_qk.h"
#include "cpu/cpu_kernels.h"
#include "engine/quant.h"

typedef struct {
    const uint8_t *w;
    size_t row_bytes;
    uint32_t type;
    const float *x;
    int64_t n;
    float *y;
    int64_t r0, r1;
    uint64_t sink;
    size_t bytes;
} job;

static void *run_matvec(void *arg)
{
    job *j = arg;
    float *scratch = aligned_alloc(64, (cpu_mm_scratch_floats(j->n) * sizeof(float) + 63) & ~(size_t)63);
    if (!scratch) return NULL;
    cpu_weight w = { j->type, j->w, j->row_bytes, j->n };
    const float *x = j->x;
    float *y = j->y;
    cpu_mm_rows(&w, j->r0, j->r1, 1, &x, &y, scratch);
    free(scratch);
    return NULL;
}

static void *run_read(void *arg)
{
    job *j = arg;
    const uint8_t *p = j->w;
    size_t n = j->bytes;
#if defined(__AVX2__)
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t lanes[4];
    _mm256_storeu_si256((__m256i *)lanes, a0);
    j->sink = lanes[0] + lanes[1] + lanes[2] + lanes[3];
#else
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        uint64_t v[4];
        memcpy(v, p + i, 32);
        s0 += v[0];
        s1 += v[1];
        s2 += v[2];
        s3 += v[3];
    }
    j->sink = s0 + s1 + s2 + s3;
#endif
    return NULL;
}

/* Runs fn over `threads` jobs splitting [0, total) and returns seconds. */
static double run_split(void *(*fn)(void *), job *proto, int64_t total, int threads, int unit_bytes)
{
    pthread_t tid[256];
    job jobs[256];
    double t0 = base_now_ms();
    for (int t = 0; t < threads; t++) {
        jobs[t] = *proto;
        int64_t a = total * t / threads, b = total * (t + 1) / threads;
        if (unit_bytes) {
            a -= a % unit_bytes;
            b = t == threads - 1 ? total : b - b % unit_bytes;
            jobs[t].w = proto->w + a;
            jobs[t].bytes = (size_t)(b - a);
        } else {
            jobs[t].r0 = a;
            jobs[t].r1 = b;
        }
        if (t) pthread_create(&tid[t], NULL, fn, &jobs[t]);
    }
    fn(&jobs[0]);
    for (int t = 1; t < threads; t++) pthread_join(tid[t], NULL);
    return (base_now_ms() - t0) / 1000.0;
}

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

void bench_fill_weights(uint32_t type, uint8_t *w, size_t bytes)
{
    for (size_t i = 0; i + 8 <= bytes; i += 8) {
        uint64_t v = next();
        memcpy(w + i, &v, 8);
    }
    const quant_type_info *t = quant_type(type);
    uint16_t d = quant_f32_to_f16(0.01f), dm = quant_f32_to_f16(0.005f);
    if (t->block_elems == 1) {
        if (type == GGML_TYPE_F16 || type == GGML_TYPE_BF16)
            for (size_t i = 0; i + 2 <= bytes; i += 2) {
                uint16_t v = type == GGML_TYPE_F16 ? quant_f32_to_f16((float)(int8_t)w[i] / 64.0f)
                                                  : quant_f32_to_bf16((float)(int8_t)w[i] / 64.0f);
                memcpy(w + i, &v, 2);
            }
        if (type == GGML_TYPE_F32)
            for (size_t i = 0; i + 4 <= bytes; i += 4) {
                float v = (float)(int8_t)w[i] / 64.0f;
                memcpy(w + i, &v, 4);
            }
        return;
    }
    for (size_t b = 0; b + t->block_bytes <= bytes; b += t->block_bytes) {
        if (type == GGML_TYPE_Q2_K) {
            memcpy(w + b + 80, &d, 2);
            memcpy(w + b + 82, &dm, 2);
        } else {
            memcpy(w + b, &d, 2);
            if (type == GGML_TYPE_Q4_K) memcpy(w + b + 2, &dm, 2);
        }
    }
}

static void usage(void)
{
    fputs("usage: ds4cl-bench --quant-bench [--mb M] [--n N] [--threads T] [--reps R] [--types LIST]\n"
          "                                 [--levels LIST] [--ggml PATH] [--qk-only]\n"
          "  --mb M       weight matrix size per format in MiB (default 512, at least 256)\n"
          "  --n N        row length (default 4096; a multiple of 256)\n"
          "  --threads T  threads for the multi-threaded column (default: online cores)\n"
          "  --reps R     repetitions, the best is reported (default 3)\n"
          "  --types L    comma-separated subset of F32,F16,BF16,Q8_0,Q2_K,Q4_K,IQ2_XXS\n"
          "  --levels L   SIMD levels of the integer 2-bit kernels' rows (default\n"
          "               avx512vbmi,avx512,avx2vnni,avx2; also scalar)\n"
          "  --ggml PATH  ggml's test-backend-ops, run first for the yardstick column\n"
          "               (default: $DS4CL_GGML_TBO when set)\n"
          "  --qk-only    only the integer 2-bit kernels' rows\n",
          stderr);
}

struct bench_read_probe {
    uint8_t *buf;
    size_t bytes;
};

bench_read_probe *bench_read_probe_open(size_t bytes)
{
    bench_read_probe *p = malloc(sizeof *p);
    if (!p) return NULL;
    p->buf = malloc(bytes);
    if (!p->buf) {
        free(p);
        return NULL;
    }
    memset(p->buf, 1, bytes);
    p->bytes = bytes;
    return p;
}

double bench_read_probe_gbps(bench_read_probe *p, int threads, int reps)
{
    if (!p) return 0.0;
    job proto = { .w = p->buf };
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double s = run_split(run_read, &proto, (int64_t)p->bytes, threads, 64);
        if (s < best) best = s;
    }
    return (double)p->bytes / best / 1e9;
}

void bench_read_probe_close(bench_read_probe *p)
{
    if (!p) return;
    free(p->buf);
    free(p);
}

double bench_read_ceiling_gbps(size_t bytes, int threads)
{
    bench_read_probe *p = bench_read_probe_open(bytes);
    double gbps = bench_read_probe_gbps(p, threads, 3);
    bench_read_probe_close(p);
    return gbps;
}

int bench_quant(int argc, char **argv)
{
    size_t mb = 512;
    int64_t n = 4096;
    int threads = (int)sysconf(_SC_NPROCESSORS_ONLN), reps = 3;
    const char *types_arg = "F16,Q8_0,IQ2_XXS,Q2_K,Q4_K,F32,BF16", *levels = NULL, *ggml = getenv("DS4CL_GGML_TBO");
    bool qk_only = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long num = 0;
        bool is_num = v && (!strcmp(a, "--mb") || !strcmp(a, "--n") || !strcmp(a, "--threads") || !strcmp(a, "--reps"));
        ds4_error err = { "" };
        if (is_num && num_parse_long(argv[++i], 1, 1L << 30, &num, &err)) {
            fprintf(stderr, "ds4cl-bench: --quant-bench: %s: %s\n", a, err.msg);
            usage();
            return 2;
        }
        if (!strcmp(a, "--mb") && is_num) mb = (size_t)num;
        else if (!strcmp(a, "--n") && is_num) n = num;
        else if (!strcmp(a, "--threads") && is_num) threads = (int)num;
        else if (!strcmp(a, "--reps") && is_num) reps = (int)num;
        else if (!strcmp(a, "--types") && v) types_arg = argv[++i];
        else if (!strcmp(a, "--levels") && v) levels = argv[++i];
        else if (!strcmp(a, "--ggml") && v) ggml = argv[++i];
        else if (!strcmp(a, "--qk-only")) qk_only = true;
        else {
            fprintf(stderr, "ds4cl-bench: --quant-bench: unknown or incomplete option '%s'\n", a);
            usage();
            return 2;
        }
    }
    if (mb < 256 || n < 256 || n % 256 || threads < 1 || threads > 256 || reps < 1) {
        usage();
        return 2;
    }
    if (qk_only) return bench_qk(levels, ggml && *ggml ? ggml : NULL, threads, reps);
    size_t bytes = mb << 20;
    printf("quant-bench: %zu MiB per matrix, rows of %lld, %d thread(s), kernels: %s\n", mb, (long long)n,
           threads, cpu_kernels_isa());
    double c1 = bench_read_ceiling_gbps(bytes, 1), cn = bench_read_ceiling_gbps(bytes, threads);
    printf("%-8s %10s %10s %10s %8s %8s\n", "type", "row bytes", "GB/s 1t", "GB/s Nt", "%ceil 1t", "%ceil Nt");
    printf("%-8s %10s %10.2f %10.2f %8s %8s\n", "read", "-", c1, cn, "100", "100");
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) return 1;
    for (int64_t i = 0; i < n; i++) x[i] = (float)((int64_t)(next() % 2001) - 1000) / 1000.0f;
    char list[256];
    snprintf(list, sizeof list, "%s", types_arg);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint32_t type = UINT32_MAX;
        for (uint32_t t = 0; t <= GGML_TYPE_BF16; t++)
            if (quant_type(t) && quant_type(t)->storable && !strcmp(quant_type(t)->name, tok)) type = t;
        if (type == UINT32_MAX || type == GGML_TYPE_I32) {
            fprintf(stderr, "ds4cl-bench: --quant-bench: unknown type '%s'\n", tok);
            free(x);
            return 2;
        }
        size_t rb = (size_t)quant_row_bytes(type, (uint64_t)n);
        int64_t rows = (int64_t)(bytes / rb);
        uint8_t *w = malloc(rb * (size_t)rows);
        float *y = malloc((size_t)rows * sizeof *y);
        if (!w || !y) {
            free(w);
            free(y);
            free(x);
            fprintf(stderr, "ds4cl-bench: out of memory\n");
            return 1;
        }
        bench_fill_weights(type, w, rb * (size_t)rows);
        job proto = { .w = w, .row_bytes = rb, .type = type, .x = x, .n = n, .y = y };
        double best1 = 1e30, bestn = 1e30;
        for (int r = 0; r < reps; r++) {
            double s = run_split(run_matvec, &proto, rows, 1, 0);
            if (s < best1) best1 = s;
            s = run_split(run_matvec, &proto, rows, threads, 0);
            if (s < bestn) bestn = s;
        }
        double total = (double)rb * (double)rows;
        double g1 = total / best1 / 1e9, gn = total / bestn / 1e9;
        printf("%-8s %10zu %10.2f %10.2f %8.0f %8.0f\n", quant_type(type)->name, rb, g1, gn, 100 * g1 / c1,
               100 * gn / cn);
        fflush(stdout);
        free(w);
        free(y);
    }
    free(x);
    return bench_qk(levels, ggml && *ggml ? ggml : NULL, threads, reps);
}
