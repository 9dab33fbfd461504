/* Fuzz target: a session snapshot (state.kv: ds4_session_restore and the
 * CPU backend's reader of the state payload) over arbitrary bytes.
 *
 * The engine is the CPU backend on a model written in memory at start:
 * the smallest DS4 shape that has every layer kind (ratio 0, ratio 4 with
 * its indexer, and another ratio) and the tiny vocabulary, so that a
 * snapshot is a few KiB and each input is cheap. First byte: bit 0 set
 * makes the target recompute both checksums before restoring, so
 * mutations reach the payload; the rest is the file.
 * Checks: a snapshot that does not load leaves the session as it was; one
 * that loads holds the tokens it says, and writing the session out again
 * gives a snapshot that loads and writes out to the same bytes.
 * Seeds: snapshots of this engine after 0 to 19 tokens (every kind of row
 * and frontier present, the raw window wrapped), written into the
 * directory named by $DS4CL_FUZZ_SEED_DIR when set (build-aux/fuzz.sh sets
 * it to the corpus; the model exists only inside the target, so the seeds
 * cannot be files in the tree). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/ds4.h"
#include "engine/testkit/mkmodel.h"
#include "sessions/journal.h"

/* Small, because a restore loads into a fresh state whose buffers scale
 * with the context: a large one would make every input an mmap. */
#define N_CTX 24
#define SNAP_HEADER 56u

static ds4_engine *g_engine;
static ds4_session *g_sess;

static void die(const char *what, const ds4_error *err)
{
    fprintf(stderr, "session_snapshot: %s: %s\n", what, err ? err->msg : "");
    abort();
}

static void small_spec(mk_spec *s)
{
    mk_spec_tiny(s);
    s->n_layer = 3;
    s->ratios[0] = 0;
    s->ratios[1] = 4;
    s->ratios[2] = 8; /* any ratio but 4 takes the same path as Flash's 128 */
    s->n_head = 2;
    s->head_dim = 32;
    s->n_rot = 16;
    s->q_lora = 32;
    s->o_lora = 32;
    s->n_out_group = 1;
    s->n_expert = 2;
    s->n_expert_used = 1;
    s->n_hash_layer = 1;
    s->n_swa = 4;
    s->n_indexer_head = 1;
    s->indexer_head_dim = 16;
    s->indexer_top_k = 2;
    s->n_hc = 2;
    s->hc_sinkhorn_iters = 2;
    s->name = "ds4cl-fuzz";
}

static void open_engine(void)
{
    mk_spec spec;
    small_spec(&spec);
    ds4_error err = { "" };
    void *buf;
    size_t len;
    if (mk_write_memory(&spec, &buf, &len, &err) != 0) die("model", &err);
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[256];
    snprintf(path, sizeof path, "%s/ds4cl-fuzz-model.XXXXXX", base);
    int fd = mkstemp(path);
    if (fd < 0 || write(fd, buf, len) != (ssize_t)len) die("cannot write the model", NULL);
    close(fd);
    free(buf);
    ds4_engine_options opt = { .model_path = path, .backend = DS4_BACKEND_CPU, .threads = 1 };
    g_engine = ds4_engine_open(&opt, &err);
    unlink(path);
    if (!g_engine) die("engine", &err);
    g_sess = ds4_session_open(g_engine, N_CTX, &err);
    if (!g_sess) die("session", &err);
}

static void write_seed(const char *dir, size_t n_tokens)
{
    /* Named after the model: those of an earlier shape stay, but they are
     * not taken for this one's. */
    ds4_model_info mi;
    ds4_engine_info(g_engine, &mi);
    char path[4096];
    snprintf(path, sizeof path, "%s/snapshot-%016llx-%zu", dir, (unsigned long long)mi.identity, n_tokens);
    if (access(path, F_OK) == 0) return; /* made by an earlier run */
    ds4_error err = { "" };
    ds4_session *s = ds4_session_open(g_engine, N_CTX, &err);
    if (!s) die("session", &err);
    int32_t ids[N_CTX];
    for (size_t i = 0; i < n_tokens; i++) ids[i] = (int32_t)((i * 37 + 11) % 256);
    if (n_tokens && ds4_session_sync(s, ids, n_tokens, NULL, &err) != DS4_OK) die("prefill", &err);
    void *buf;
    size_t len;
    if (ds4_session_snapshot(s, &buf, &len, &err) != 0) die("snapshot", &err);
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot write a seed", NULL);
    fputc(0, f);
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
    ds4_session_close(s);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    open_engine();
    const char *dir = getenv("DS4CL_FUZZ_SEED_DIR");
    if (dir && *dir) {
        static const size_t lens[] = { 0, 1, 3, 9, 19 };
        for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) write_seed(dir, lens[i]);
    }
    return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t len = size - 1;
    uint8_t *d = malloc(len ? len : 1);
    if (!d) abort();
    memcpy(d, data + 1, len);
    if ((data[0] & 1) && len >= SNAP_HEADER) {
        /* the snapshot uses the same CRC-32 as the journal */
        put32(d + 48, journal_crc32(0, d + SNAP_HEADER, len - SNAP_HEADER));
        put32(d + 52, journal_crc32(0, d, 52));
    }
    size_t before = ds4_session_n_tokens(g_sess);
    int32_t last = before ? ds4_session_tokens(g_sess)[before - 1] : -1;
    ds4_error err = { "" };
    if (ds4_session_restore(g_sess, d, len, &err) != 0) {
        if (!err.msg[0]) abort();
        size_t after = ds4_session_n_tokens(g_sess);
        if (after != before || (after && ds4_session_tokens(g_sess)[after - 1] != last)) abort();
        free(d);
        return 0;
    }
    size_t n = ds4_session_n_tokens(g_sess);
    if (n > N_CTX || len < SNAP_HEADER + 4 * n) abort();
    if (n && memcmp(ds4_session_tokens(g_sess), d + SNAP_HEADER, 4 * n)) abort();
    free(d);

    void *a, *b;
    size_t la, lb;
    if (ds4_session_snapshot(g_sess, &a, &la, &err) != 0) abort();
    if (ds4_session_restore(g_sess, a, la, &err) != 0) abort();
    if (ds4_session_n_tokens(g_sess) != n) abort();
    if (ds4_session_snapshot(g_sess, &b, &lb, &err) != 0) abort();
    if (la != lb || memcmp(a, b, la)) abort();
    free(a);
    free(b);
    return 0;
}
