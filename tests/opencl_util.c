/* opencl_util.c — the OpenCL per-op harness (see opencl_util.h). */
#include "tests/opencl_util.h"

#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "cpu/cpu_ops.h"
#include "engine/quant.h"
#include "opencl/cl_runtime.h"
#include "res/embedded.h"
#include "tests/test.h"

const char *oclt_cache_dir(void)
{
    const char *dir = test_printf("%s/build/test-cache", test_root());
    base_mkdir_p(dir, 0700);
    /* PoCL's own kernel cache (its work-group specialisations) beside ours,
     * set before the first OpenCL call of this process */
    setenv("POCL_CACHE_DIR", test_printf("%s/pocl", dir), 0);
    return dir;
}

/* A check that fails while stderr is captured writes its message into the
 * capture: the test's process then shows what was captured on its way
 * out, so the message is not lost. */
static oclt_stderr *g_open_capture;
static oclt_stderr g_capture_copy;

static void show_open_capture(void)
{
    if (!g_open_capture) return;
    oclt_stderr *c = g_open_capture;
    g_open_capture = NULL;
    oclt_captured(c);
}

oclt_stderr oclt_capture_stderr(void)
{
    static bool registered;
    if (!registered) registered = atexit(show_open_capture) == 0;
    oclt_stderr c = { -1, test_tmp_path("stderr.txt") };
    fflush(stderr);
    int fd = open(c.path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    CHECK(fd >= 0);
    c.saved = dup(2);
    CHECK(c.saved >= 0 && dup2(fd, 2) == 2);
    close(fd);
    g_capture_copy = c;
    g_open_capture = &g_capture_copy;
    return c;
}

const char *oclt_captured(oclt_stderr *c)
{
    g_open_capture = NULL;
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    size_t len;
    char *text = test_read_file(c->path, &len);
    if (text && *text) fprintf(stderr, "(the driver said:)\n%s", text);
    return text ? text : "";
}

const char *oclt_compile_all(const char *const *programs, bool cpu_loops)
{
    oclt_require_device();
    ds4_error err = { "" };
    clrt_options o = { .cache_dir = "" };
    oclt_stderr cap = oclt_capture_stderr();
    clrt *rt = clrt_open(&o, &err);
    CHECK_MSG(rt != NULL, "%s", err.msg);
    clrt_set_cpu_loops(rt, cpu_loops);
    char *said = test_printf("%s", "");
    for (int i = 0;; i++) {
        const char *name = programs ? programs[i] : clrt_sources[i].name;
        if (!name) break;
        if (!strcmp(name, "common")) continue;
        char names[4096];
        CHECK_MSG(clrt_kernel_names(rt, name, names, sizeof names) == 0, "%s", clrt_error(rt));
        const char *log = clrt_build_log(rt, name);
        /* drivers log an empty line, or a line of spaces, for a clean build */
        bool blank = true;
        for (const char *q = log; q && *q; q++) blank &= isspace((unsigned char)*q) != 0;
        if (!blank) said = test_printf("%s%s.cl: %s\n", said, name, log);
        for (char *save, *k = strtok_r(names, ";", &save); k; k = strtok_r(NULL, ";", &save))
            CHECK_MSG(clrt_kernel(rt, name, k) != NULL, "%s", clrt_error(rt));
    }
    clrt_close(rt);
    return test_printf("%s%s", said, oclt_captured(&cap));
}

void oclt_check_quiet(const char *said)
{
    CHECK_MSG(!strstr(said, "load_kernel_arg in control flow"), "the driver loads a kernel argument inside control flow");
    CHECK_MSG(!strstr(said, "results may be incorrect"), "the driver warned: %s", said);
    CHECK_MSG(!strcasestr(said, "warning"), "the compiler warned: %s", said);
}

void oclt_require_device(void)
{
    /* engines opened by the test build into the tests' cache, not the user's */
    setenv("XDG_CACHE_HOME", oclt_cache_dir(), 1);
    clrt_device *devs;
    int n;
    ds4_error err = { "" };
    if (clrt_devices(&devs, &n, &err) != 0) SKIP("no OpenCL device: %s", err.msg);
    free(devs);
}

oclt *oclt_open(const mk_spec *spec) { return oclt_open_with(spec, NULL); }

oclt *oclt_open_with(const mk_spec *spec, const clo_options *o)
{
    oclt_require_device();
    oclt *f = test_alloc(sizeof *f);
    if (spec) f->spec = *spec;
    else mk_spec_tiny(&f->spec);
    f->rng = 0x9e3779b9u ^ (uint32_t)f->spec.seed;
    ds4_error err = { "" };
    CHECK_MSG(mk_write_memory(&f->spec, &f->file, &f->len, &err) == 0, "fixture: %s", err.msg);
    f->g = gguf_open_memory(f->file, f->len, &err);
    CHECK_MSG(f->g != NULL, "fixture: %s", err.msg);
    f->m = model_bind(f->g, &err);
    CHECK_MSG(f->m != NULL, "fixture: %s", err.msg);
    f->hp = &f->m->hp;
    f->ops[OCLT_CPU] = &cpu_ops;
    f->ops[OCLT_CL] = &clo_ops;
    f->ctx[OCLT_CPU] = cpu_ops_new(f->m, 2, &err);
    CHECK_MSG(f->ctx[OCLT_CPU] != NULL, "cpu ops: %s", err.msg);
    clo_options co = { 0 };
    if (o) co = *o;
    if (!co.cache_dir) co.cache_dir = oclt_cache_dir();
    f->ctx[OCLT_CL] = clo_new(f->m, &co, &err);
    CHECK_MSG(f->ctx[OCLT_CL] != NULL, "opencl ops: %s", err.msg);
    return f;
}

void oclt_close(oclt *f)
{
    for (int s = 0; s < 2; s++) {
        for (size_t i = 0; i < f->n_bufs; i++) f->ops[s]->release(f->ctx[s], f->bufs[s][i]);
        free(f->bufs[s]);
    }
    cpu_ops_free(f->ctx[OCLT_CPU]);
    clo_free(f->ctx[OCLT_CL]);
    model_free(f->m);
    gguf_close(f->g);
    free(f->file);
    memset(f, 0, sizeof *f);
}

/* ---- buffers ------------------------------------------------------------------- */

oclt_buf oclt_zeros(oclt *f, size_t bytes)
{
    if (f->n_bufs == f->cap_bufs) {
        f->cap_bufs = f->cap_bufs ? 2 * f->cap_bufs : 32;
        for (int s = 0; s < 2; s++) {
            f->bufs[s] = realloc(f->bufs[s], f->cap_bufs * sizeof *f->bufs[s]);
            CHECK(f->bufs[s] != NULL);
        }
    }
    oclt_buf b = { { NULL, NULL }, bytes };
    for (int s = 0; s < 2; s++) {
        b.b[s] = f->ops[s]->alloc(f->ctx[s], bytes);
        CHECK_MSG(b.b[s] != NULL, "%s alloc of %zu bytes: %s", f->ops[s]->name, bytes, f->ops[s]->last_error(f->ctx[s]));
        f->bufs[s][f->n_bufs] = b.b[s];
    }
    f->n_bufs++;
    return b;
}

void oclt_write(oclt *f, oclt_buf b, size_t offset, const void *data, size_t bytes)
{
    for (int s = 0; s < 2; s++)
        CHECK_MSG(f->ops[s]->write(f->ctx[s], b.b[s], offset, data, bytes) == 0, "%s write: %s", f->ops[s]->name,
                  f->ops[s]->last_error(f->ctx[s]));
}

oclt_buf oclt_bytes(oclt *f, const void *data, size_t bytes)
{
    oclt_buf b = oclt_zeros(f, bytes);
    oclt_write(f, b, 0, data, bytes);
    return b;
}

uint32_t oclt_randi(oclt *f, uint32_t n)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 17;
    f->rng ^= f->rng << 5;
    return n ? f->rng % n : f->rng;
}

float oclt_randf(oclt *f, float lo, float hi)
{
    return lo + (hi - lo) * (float)(oclt_randi(f, 0) >> 8) * 0x1p-24f;
}

oclt_buf oclt_floats(oclt *f, size_t n, float lo, float hi)
{
    float *v = test_alloc(n * 4);
    for (size_t i = 0; i < n; i++) v[i] = oclt_randf(f, lo, hi);
    return oclt_bytes(f, v, n * 4);
}

oclt_buf oclt_ints(oclt *f, const int32_t *v, size_t n) { return oclt_bytes(f, v, n * 4); }

void *oclt_read(oclt *f, oclt_buf b, int side)
{
    void *out = test_alloc(b.bytes);
    CHECK_MSG(f->ops[side]->read(f->ctx[side], b.b[side], 0, out, b.bytes) == 0, "%s read: %s", f->ops[side]->name,
              f->ops[side]->last_error(f->ctx[side]));
    return out;
}

const ds4_tensor *oclt_tensor(oclt *f, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, float scale)
{
    const quant_type_info *qi = quant_type(type);
    CHECK_MSG(qi != NULL && ne0 % qi->block_elems == 0, "oclt_tensor: type %s with rows of %lld", quant_type_name(type),
              (long long)ne0);
    ds4_tensor *t = test_alloc(sizeof *t);
    t->name = test_printf("test.%s.%lldx%lldx%lld", quant_type_name(type), (long long)ne0, (long long)ne1, (long long)ne2);
    t->type = type;
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->row_bytes = quant_row_bytes(type, (uint64_t)ne0);
    int64_t rows = ne1 * ne2;
    t->nbytes = t->row_bytes * (uint64_t)rows;
    uint8_t *data = test_alloc((size_t)t->nbytes);
    float *row = test_alloc((size_t)ne0 * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < ne0; i++) row[i] = oclt_randf(f, -1.7320508f, 1.7320508f) * scale;
        if (type == GGML_TYPE_I32)
            for (int64_t i = 0; i < ne0; i++) ((int32_t *)(void *)(data + r * (int64_t)t->row_bytes))[i] = (int32_t)oclt_randi(f, 1000);
        else
            CHECK(quant_quantize_row(type, row, ne0, data + r * (int64_t)t->row_bytes) == t->row_bytes);
    }
    t->data = data;
    ds4_error err = { "" };
    CHECK_MSG(clo_add_tensor(f->ctx[OCLT_CL], t, &err) == 0, "oclt_tensor: %s", err.msg);
    return t;
}

/* ---- checks ---------------------------------------------------------------------- */

void oclt_check_rc(oclt *f, int side, int rc, const char *what, const char *file, int line)
{
    if (rc != 0) test_fail_at(file, line, "%s side: %s failed: %s", f->ops[side]->name, what, f->ops[side]->last_error(f->ctx[side]));
}

void oclt_check_fails(oclt *f, int rc, const char *want, const char *what, const char *file, int line)
{
    const char *msg = f->ops[OCLT_CL]->last_error(f->ctx[OCLT_CL]);
    if (rc == 0) test_fail_at(file, line, "%s succeeded on OpenCL, expected a failure naming \"%s\"", what, want);
    if (!strstr(msg, want)) test_fail_at(file, line, "%s failed with \"%s\", expected \"%s\"", what, msg, want);
}

void oclt_same_at(oclt *f, oclt_buf b, size_t bytes, const char *file, int line)
{
    if (bytes > b.bytes) test_fail_at(file, line, "comparing %zu bytes of a buffer of %zu", bytes, b.bytes);
    const uint8_t *cpu = oclt_read(f, b, OCLT_CPU), *cl = oclt_read(f, b, OCLT_CL);
    for (size_t i = 0; i < bytes; i++)
        if (cpu[i] != cl[i]) {
            size_t w = i / 4 * 4;
            uint32_t a = 0, c = 0;
            if (w + 4 <= bytes) {
                memcpy(&a, cpu + w, 4);
                memcpy(&c, cl + w, 4);
            }
            test_fail_at(file, line, "byte %zu differs: cpu %02x, opencl %02x (word %zu: cpu 0x%08x, opencl 0x%08x)", i,
                         cpu[i], cl[i], w / 4, a, c);
        }
}

double oclt_close_at(oclt *f, oclt_buf b, size_t n, size_t row, double tol, const char *file, int line)
{
    if (n * 4 > b.bytes) test_fail_at(file, line, "comparing %zu floats of a buffer of %zu bytes", n, b.bytes);
    if (!row) row = n;
    const float *cpu = oclt_read(f, b, OCLT_CPU), *cl = oclt_read(f, b, OCLT_CL);
    double worst = 0;
    for (size_t r0 = 0; r0 < n; r0 += row) {
        size_t r1 = r0 + row < n ? r0 + row : n, at = r0;
        double mag = 0, dmax = 0;
        for (size_t i = r0; i < r1; i++) {
            if (isnan(cl[i]) != isnan(cpu[i]))
                test_fail_at(file, line, "element %zu: cpu %.9g, opencl %.9g", i, cpu[i], cl[i]);
            mag = fmax(mag, fabs(cpu[i]));
            double d = fabs((double)cl[i] - cpu[i]);
            if (d > dmax) {
                dmax = d;
                at = i;
            }
        }
        double rel = mag > 0 ? dmax / mag : dmax;
        if (rel > worst) worst = rel;
        if (rel > tol)
            test_fail_at(file, line, "row %zu: rel %.3g > %.3g (element %zu: cpu %.9g, opencl %.9g; row max %.6g)",
                         r0 / row, rel, tol, at, cpu[at], cl[at], mag);
    }
    return worst;
}
