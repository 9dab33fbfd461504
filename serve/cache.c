/* cache.c — the server's bounded on-disk cache of session snapshots.
 *
 * Each entry is two files named by a hash of its tokens: KEY.snap, the
 * engine's snapshot (ds4_session_snapshot), and KEY.tok, the token prefix
 * it holds behind a small header (magic, model identity, count), so that
 * finding the entry for a prompt reads only the token files. Both are
 * written atomically, the snapshot first: a token file never names a
 * snapshot that is not complete. Entries of another model are left alone;
 * the oldest entries go when the directory holds more than max_bytes.
 * Opening it removes the temporary files of atomic writes whose writer is
 * gone (a server killed mid-save), as the sessions do in a workspace
 * (temp_sweep). Only the worker thread uses it. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve/serve_impl.h"

#define TOK_MAGIC 0x31534b4f544c4344ull /* "DCLTOKS1" */

/* Directory entries the sweep of leftover temporary files looks at: the
 * cache holds two files an entry, far fewer than this. */
#define TEMP_SWEEP_ENTRIES 100000

typedef struct {
    uint64_t key;
    int32_t *ids;
    size_t n;
    uint64_t bytes;
    int64_t stamp;
} entry;

struct sv_cache {
    char *dir;
    char memo[4096];
    uint64_t max_bytes, identity;
    entry *v;
    size_t n;
    int64_t clock;
};

static uint64_t tokens_key(const int32_t *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)ids;
    for (size_t i = 0; i < n * sizeof *ids; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void path_of(const sv_cache *c, uint64_t key, const char *ext, char *out, size_t size)
{
    snprintf(out, size, "%s/%016llx.%s", c->dir, (unsigned long long)key, ext);
}

static uint64_t file_size(const char *path, int64_t *mtime)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    if (mtime) *mtime = (int64_t)st.st_mtime;
    return (uint64_t)st.st_size;
}

static void load_entry(sv_cache *c, const char *name)
{
    unsigned long long key;
    char ext[8];
    if (sscanf(name, "%16llx.%7s", &key, ext) != 2 || strcmp(ext, "tok")) return;
    char tok[4096], snap[4096];
    path_of(c, key, "tok", tok, sizeof tok);
    path_of(c, key, "snap", snap, sizeof snap);
    size_t len = 0;
    char *data = file_read_all(tok, &len);
    uint64_t head[3];
    int64_t mtime = 0;
    uint64_t bytes = file_size(snap, &mtime);
    if (data && len >= sizeof head && bytes) {
        memcpy(head, data, sizeof head);
        if (head[0] == TOK_MAGIC && head[1] == c->identity && head[2] == (len - sizeof head) / sizeof(int32_t)) {
            c->v = xrealloc(c->v, (c->n + 1) * sizeof *c->v);
            entry *e = &c->v[c->n++];
            e->key = key;
            e->n = head[2];
            e->ids = xmalloc((e->n ? e->n : 1) * sizeof *e->ids);
            memcpy(e->ids, data + sizeof head, e->n * sizeof *e->ids);
            e->bytes = bytes + len;
            e->stamp = mtime;
            if (mtime > c->clock) c->clock = mtime;
        }
    }
    free(data);
}

sv_cache *sv_cache_open(const char *dir, uint64_t max_bytes, uint64_t model_identity)
{
    if (!dir || base_mkdir_p(dir, 0700) != 0) return NULL;
    sv_cache *c = xcalloc(1, sizeof *c);
    c->dir = sv_strdup(dir);
    c->max_bytes = max_bytes;
    c->identity = model_identity;
    snprintf(c->memo, sizeof c->memo, "%s/replies-%016llx.bin", dir, (unsigned long long)model_identity);
    temp_sweep(dir, TEMP_SWEEP_ENTRIES);
    DIR *d = opendir(dir);
    for (struct dirent *de; d && (de = readdir(d));) load_entry(c, de->d_name);
    if (d) closedir(d);
    return c;
}

void sv_cache_close(sv_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) free(c->v[i].ids);
    free(c->v);
    free(c->dir);
    free(c);
}

const char *sv_cache_memo_path(const sv_cache *c)
{
    return c ? c->memo : "";
}

static void drop(sv_cache *c, size_t i)
{
    char p[4096];
    path_of(c, c->v[i].key, "tok", p, sizeof p);
    unlink(p);
    path_of(c, c->v[i].key, "snap", p, sizeof p);
    unlink(p);
    free(c->v[i].ids);
    c->v[i] = c->v[--c->n];
}

static void evict(sv_cache *c)
{
    for (;;) {
        uint64_t total = 0;
        size_t oldest = 0;
        for (size_t i = 0; i < c->n; i++) {
            total += c->v[i].bytes;
            if (c->v[i].stamp < c->v[oldest].stamp) oldest = i;
        }
        if (total <= c->max_bytes || c->n <= 1) return;
        drop(c, oldest);
    }
}

int sv_cache_save(sv_cache *c, ds4_session *s, ds4_error *err)
{
    size_t n = ds4_session_n_tokens(s);
    const int32_t *ids = ds4_session_tokens(s);
    if (!c || !n) return 0;
    uint64_t key = tokens_key(ids, n);
    for (size_t i = 0; i < c->n; i++)
        if (c->v[i].key == key && c->v[i].n == n) {
            c->v[i].stamp = ++c->clock;
            return 0;
        }
    void *buf = NULL;
    size_t len = 0;
    if (ds4_session_snapshot(s, &buf, &len, err) != 0) return -1;
    char snap[4096], tok[4096];
    path_of(c, key, "snap", snap, sizeof snap);
    path_of(c, key, "tok", tok, sizeof tok);
    int rc = file_write_atomic(snap, buf, len, 0600, true, err);
    free(buf);
    if (rc != 0) return -1;
    strbuf b = { 0 };
    uint64_t head[3] = { TOK_MAGIC, c->identity, n };
    sb_append(&b, (const char *)head, sizeof head);
    sb_append(&b, (const char *)ids, n * sizeof *ids);
    rc = file_write_atomic(tok, b.s, b.len, 0600, true, err);
    sb_free(&b);
    if (rc != 0) {
        unlink(snap);
        return -1;
    }
    c->v = xrealloc(c->v, (c->n + 1) * sizeof *c->v);
    entry *e2 = &c->v[c->n++];
    e2->key = key;
    e2->n = n;
    e2->ids = xmalloc(n * sizeof *ids);
    memcpy(e2->ids, ids, n * sizeof *ids);
    e2->bytes = len + sizeof head + n * sizeof *ids;
    e2->stamp = ++c->clock;
    evict(c);
    return 0;
}

void *sv_cache_find(sv_cache *c, const int32_t *ids, size_t n, size_t min_len, size_t *len, size_t *n_prefix)
{
    if (!c) return NULL;
    long best = -1;
    for (size_t i = 0; i < c->n; i++) {
        const entry *e = &c->v[i];
        if (e->n <= min_len || e->n > n || (best >= 0 && e->n <= c->v[best].n)) continue;
        if (!memcmp(e->ids, ids, e->n * sizeof *ids)) best = (long)i;
    }
    if (best < 0) return NULL;
    char snap[4096];
    path_of(c, c->v[best].key, "snap", snap, sizeof snap);
    void *data = file_read_all(snap, len);
    if (!data) {
        drop(c, (size_t)best);
        return NULL;
    }
    c->v[best].stamp = ++c->clock;
    *n_prefix = c->v[best].n;
    return data;
}
