/* opencl_util.h — the per-op harness of the OpenCL backend: a model
 * fixture with a CPU ops context (the reference) and an OpenCL ops context
 * on the same ds4_model, buffer pairs holding the same bytes on both
 * sides, one statement that runs an op on both, and comparisons.
 *
 * A new op test is a few lines:
 *
 *   TEST(opencl_ops, add)
 *   {
 *       oclt *f = oclt_open(NULL);                     // skips without OpenCL
 *       oclt_buf a = oclt_floats(f, 1000, -2, 2), b = oclt_floats(f, 1000, -2, 2);
 *       oclt_buf y = oclt_zeros(f, 1000 * 4);
 *       OCLT_BOTH(f, OPS->add(CTX, BUF(a), BUF(b), 1000, BUF(y)));
 *       OCLT_SAME(f, y, 1000 * 4);                     // or OCLT_CLOSE(f, y, n, row, tol)
 *       oclt_close(f);
 *   }
 *
 * Inside OCLT_BOTH, OPS and CTX are one side's ops table and context and
 * BUF(x) its half of the pair x; the statement runs on the CPU first, then
 * on OpenCL, and each must return 0. Weights come from the fixture
 * (f->m->layers[…]) or from oclt_tensor(). Buffers are released by
 * oclt_close(). Programs are cached under build/test-cache (and PoCL's own
 * cache under build/test-cache/pocl), so only a first run compiles.
 */
#ifndef DS4CL_TESTS_OPENCL_UTIL_H
#define DS4CL_TESTS_OPENCL_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gguf.h"
#include "engine/testkit/mkmodel.h"
#include "engine/model.h"
#include "engine/ops.h"
#include "opencl/cl_ops.h"

enum { OCLT_CPU = 0, OCLT_CL = 1 };

typedef struct {
    ds4_buf *b[2];
    size_t bytes;
} oclt_buf;

typedef struct {
    mk_spec spec;
    void *file;
    size_t len;
    gguf_file *g;
    ds4_model *m;
    const ds4_hparams *hp;
    const ds4_ops *ops[2];
    void *ctx[2];
    uint32_t rng;
    ds4_buf **bufs[2]; /* everything allocated, released at close */
    size_t n_bufs, cap_bufs;
} oclt;

/* What a driver writes to stderr (some compile a kernel at its first
 * use, so their diagnostics reach no build log), gathered into a file
 * from oclt_capture_stderr() to oclt_captured(), which restores stderr,
 * echoes what was said (for a failing test's log) and returns it. */
typedef struct {
    int saved;
    const char *path;
} oclt_stderr;
oclt_stderr oclt_capture_stderr(void);
const char *oclt_captured(oclt_stderr *c);

/* Builds each of `programs` (NULL-terminated; NULL = every program of
 * opencl/kernels) from source, with the loops shaped for CPUs or GPUs, and
 * creates every kernel in it: what the driver said meanwhile (its build
 * logs and its stderr), "" when nothing. Fails the test on a build
 * error. */
const char *oclt_compile_all(const char *const *programs, bool cpu_loops);

/* Fails the test where `said` (oclt_compile_all, oclt_captured) holds a
 * compiler warning, or Mesa's note that it loads a kernel argument
 * inside control flow as if every work-item agreed. */
void oclt_check_quiet(const char *said);

/* The cache root the OpenCL tests use (build/test-cache). */
const char *oclt_cache_dir(void);
/* Skips the test (with the reason) when no OpenCL device is present;
 * points XDG_CACHE_HOME at the tests' cache. */
void oclt_require_device(void);

/* A fixture on spec (NULL: mk_spec_tiny) with both contexts; o adds
 * OpenCL options (NULL: defaults, with the test cache). */
oclt *oclt_open(const mk_spec *spec);
oclt *oclt_open_with(const mk_spec *spec, const clo_options *o);
void oclt_close(oclt *f);

/* Buffer pairs. */
oclt_buf oclt_zeros(oclt *f, size_t bytes);
oclt_buf oclt_bytes(oclt *f, const void *data, size_t bytes);
oclt_buf oclt_floats(oclt *f, size_t n, float lo, float hi); /* uniform random */
oclt_buf oclt_ints(oclt *f, const int32_t *v, size_t n);
/* Writes the same bytes into both halves at offset. */
void oclt_write(oclt *f, oclt_buf b, size_t offset, const void *data, size_t bytes);
/* One side's bytes (a test-owned copy of b.bytes). */
void *oclt_read(oclt *f, oclt_buf b, int side);

/* Random values: uniform float in [lo, hi), int in [0, n). */
float oclt_randf(oclt *f, float lo, float hi);
uint32_t oclt_randi(oclt *f, uint32_t n);

/* A random [ne0, ne1, ne2] tensor of type (quantized from values of RMS
 * about `scale`) in test memory, known to both contexts. */
const ds4_tensor *oclt_tensor(oclt *f, uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2, float scale);

/* ---- running and comparing -------------------------------------------------- */

#define OCLT_BOTH(f, call)                                                               \
    for (int oclt_side = 0; oclt_side < 2; oclt_side++) {                                \
        const ds4_ops *OPS = (f)->ops[oclt_side];                                        \
        void *CTX = (f)->ctx[oclt_side];                                                 \
        (void)OPS, (void)CTX;                                                            \
        oclt_check_rc((f), oclt_side, (call), #call, __FILE__, __LINE__);               \
    }
#define BUF(x) ((x).b[oclt_side])

/* Only the OpenCL side: the call must fail with a message containing want. */
#define OCLT_CL_FAILS(f, call, want)                                                     \
    do {                                                                                 \
        const int oclt_side = OCLT_CL;                                                   \
        const ds4_ops *OPS = (f)->ops[oclt_side];                                        \
        void *CTX = (f)->ctx[oclt_side];                                                 \
        (void)OPS, (void)CTX;                                                            \
        oclt_check_fails((f), (call), (want), #call, __FILE__, __LINE__);               \
    } while (0)

/* Results: bit-identical bytes; or rel = max|Δ|/max|cpu| over each row of
 * `row` floats (0: the whole buffer) at most tol. Return the worst rel. */
#define OCLT_SAME(f, b, bytes) oclt_same_at((f), (b), (bytes), __FILE__, __LINE__)
#define OCLT_CLOSE(f, b, n, row, tol) oclt_close_at((f), (b), (n), (row), (tol), __FILE__, __LINE__)

void oclt_check_rc(oclt *f, int side, int rc, const char *what, const char *file, int line);
void oclt_check_fails(oclt *f, int rc, const char *want, const char *what, const char *file, int line);
void oclt_same_at(oclt *f, oclt_buf b, size_t bytes, const char *file, int line);
double oclt_close_at(oclt *f, oclt_buf b, size_t n, size_t row, double tol, const char *file, int line);

#endif
