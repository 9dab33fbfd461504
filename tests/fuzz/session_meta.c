/* Fuzz target: a session's meta.json (session_meta_parse, what session_open and
 * sessions_list read) over arbitrary bytes.
 *
 * What parses must be usable as it is (a valid ID, bounded strings, a
 * context size and counts in range) and must survive a round trip: written
 * with session_meta_write (into a directory on tmpfs when there is one) and read
 * back with session_meta_read, it is the same metadata. Seeds: tests/fuzz/seeds/
 * session_meta/ (tests/fuzz/mkseeds.sh). */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sessions/store_impl.h"

static char g_dir[256];

static void setup(void)
{
    if (g_dir[0]) return;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/ds4cl-fuzz-meta.XXXXXX", base);
    if (!mkdtemp(g_dir)) abort();
}

static void cleanup(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, META_FILE);
    unlink(path);
    rmdir(g_dir);
}

static void bounded(const char *s, size_t size)
{
    if (strnlen(s, size) >= size) abort();
}

static bool same_float(float a, float b)
{
    return a == b || (isnan(a) && isnan(b));
}

static void same_meta(const session_meta *a, const session_meta *b)
{
    const session_info *x = &a->info, *y = &b->info;
    if (strcmp(x->id, y->id) || strcmp(x->title, y->title) || strcmp(x->cwd, y->cwd)) abort();
    if (strcmp(x->model_name, y->model_name) || strcmp(x->backend, y->backend)) abort();
    if (strcmp(x->forked_from, y->forked_from)) abort();
    if (x->model_identity != y->model_identity || a->tokenizer != b->tokenizer) abort();
    if (x->n_ctx != y->n_ctx || x->think != y->think) abort();
    if (!same_float(x->sampling.temperature, y->sampling.temperature) || x->sampling.top_k != y->sampling.top_k ||
        !same_float(x->sampling.top_p, y->sampling.top_p) || !same_float(x->sampling.min_p, y->sampling.min_p) ||
        x->sampling.seed != y->sampling.seed)
        abort();
    if (x->created != y->created || x->updated != y->updated || x->n_tokens != y->n_tokens) abort();
    if (x->user_turns != y->user_turns) abort();
    if (a->snap_tokens != b->snap_tokens || a->snap_hash != b->snap_hash || a->snap_file_bytes != b->snap_file_bytes)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_dir[0]) {
        setup();
        atexit(cleanup);
    }
    /* An exact-size copy without a terminating NUL: the parser gets a
     * length and must not read past it. */
    char *text = malloc(size ? size : 1);
    if (!text) abort();
    memcpy(text, data, size);
    session_meta m;
    int rc = session_meta_parse(text, size, &m);
    free(text);
    if (rc != 0) return 0;

    const session_info *i = &m.info;
    if (!session_id_valid(i->id)) abort();
    if (i->forked_from[0] && !session_id_valid(i->forked_from)) abort();
    bounded(i->title, sizeof i->title);
    bounded(i->cwd, sizeof i->cwd);
    bounded(i->model_name, sizeof i->model_name);
    bounded(i->backend, sizeof i->backend);
    if (i->n_ctx < 0 || i->user_turns < 0) abort();

    ds4_error err = { "" };
    if (session_meta_write(g_dir, &m, &err) != 0) abort();
    session_meta back;
    if (session_meta_read(g_dir, &back) != 0) abort();
    same_meta(&m, &back);
    return 0;
}
