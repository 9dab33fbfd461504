/* bench_open.c — the cost of opening a model, stage by stage: reading and
 * validating the GGUF container (mmap, header, metadata, tensor table),
 * the model identity, building the tokenizer from the metadata, binding
 * the DS4 tensors, and the whole ds4_engine_open on the CPU backend
 * (which repeats those stages and sets up the backend).
 *
 * A "cold" run first drops this file's pages from the page cache
 * (posix_fadvise DONTNEED: only pages nobody maps, other files untouched),
 * so it pays for the reads from disk that the stages make; "warm" runs
 * find them cached. Opening never reads the tensor data itself (it is
 * mapped), so the times depend on the metadata, not on the weights' size. */
#include "bench/bench_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/ds4.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/tokenizer.h"

static int usage(void)
{
    fputs("usage: ds4cl-bench --open-bench -m MODEL [--runs N]\n", stderr);
    return 2;
}

static int drop_cached_pages(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return rc == 0 ? 0 : -1;
}

typedef struct {
    double gguf, identity, tokenizer, bind, engine;
} open_times;

static int run_once(const char *path, open_times *t, ds4_error *err)
{
    double t0 = base_now_ms();
    gguf_file *f = gguf_open(path, err);
    if (!f) return -1;
    double t1 = base_now_ms();
    volatile uint64_t id = gguf_identity(f);
    (void)id;
    double t2 = base_now_ms();
    ds4_tokenizer *tok = tokenizer_from_gguf(f, err);
    double t3 = base_now_ms();
    ds4_model *m = tok ? model_bind(f, err) : NULL;
    double t4 = base_now_ms();
    if (m) model_free(m);
    if (tok) ds4_tokenizer_free(tok);
    gguf_close(f);
    if (!m) return -1;
    t->gguf = (t1 - t0) / 1e3;
    t->identity = (t2 - t1) / 1e3;
    t->tokenizer = (t3 - t2) / 1e3;
    t->bind = (t4 - t3) / 1e3;
    return 0;
}

static int engine_once(const char *path, double *s, ds4_error *err)
{
    ds4_engine_options o = { 0 };
    o.model_path = path;
    o.backend = DS4_BACKEND_CPU;
    double t0 = base_now_ms();
    ds4_engine *e = ds4_engine_open(&o, err);
    *s = (base_now_ms() - t0) / 1e3;
    if (!e) return -1;
    ds4_engine_close(e);
    return 0;
}

int bench_open_main(int argc, char **argv)
{
    const char *model = NULL;
    int runs = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--open-bench")) continue;
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) {
            if (num_parse_int(argv[++i], 1, 1000, &runs, NULL)) {
                fprintf(stderr, "ds4cl-bench: --runs wants a count from 1 to 1000, not '%s'\n", argv[i]);
                return usage();
            }
        } else {
            fprintf(stderr, "ds4cl-bench: unexpected argument '%s' for --open-bench\n", argv[i]);
            return usage();
        }
    }
    if (!model) return usage();
    struct stat st;
    if (stat(model, &st) != 0) {
        fprintf(stderr, "ds4cl-bench: %s: %s\n", model, strerror(errno));
        return 1;
    }
    ds4_error err = { { 0 } };
    for (int r = 0; r <= runs; r++) {
        /* run 0 is cold; the engine open gets its own cold start */
        bool cold = r == 0;
        if (cold && drop_cached_pages(model) != 0) {
            fprintf(stderr, "ds4cl-bench: cannot drop the cached pages of %s\n", model);
            return 1;
        }
        open_times t = { 0 };
        if (run_once(model, &t, &err) != 0) {
            fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
            return 1;
        }
        if (cold) drop_cached_pages(model);
        if (engine_once(model, &t.engine, &err) != 0) {
            fprintf(stderr, "ds4cl-bench: %s\n", err.msg);
            return 1;
        }
        if (r == 0) printf("run,cache,file_bytes,gguf_open_s,identity_s,tokenizer_s,bind_s,engine_open_s\n");
        printf("%d,%s,%lld,%.4f,%.4f,%.4f,%.4f,%.4f\n", r, cold ? "cold" : "warm", (long long)st.st_size, t.gguf,
               t.identity, t.tokenizer, t.bind, t.engine);
        fflush(stdout);
    }
    return 0;
}
