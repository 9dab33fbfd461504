/* gguf_write.c — GGUF v3 writer: metadata and directory serialised up
 * front, tensor data streamed with per-tensor alignment padding. */
#include "engine/gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "engine/quant.h"

typedef struct {
    char name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    uint64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes, offset;
} wtensor;

struct gguf_writer {
    uint32_t alignment;
    strbuf meta; /* serialised KV records */
    uint64_t n_kv;
    wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t data_bytes;
    /* output state */
    FILE *fp;
    char *path, *tmp_path;
    char *mem;
    size_t mem_len;
    bool open, failed;
    bool has_alignment_key;
    size_t cur;          /* tensor being written */
    uint64_t cur_written; /* bytes of it written */
};

gguf_writer *gguf_writer_new(uint32_t alignment)
{
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : 32;
    return w;
}

void gguf_writer_free(gguf_writer *w)
{
    if (!w) return;
    if (w->fp) fclose(w->fp);
    if (w->tmp_path) unlink(w->tmp_path);
    free(w->tmp_path);
    free(w->path);
    free(w->mem);
    free(w->tensors);
    sb_free(&w->meta);
    free(w);
}

static void put(gguf_writer *w, const void *p, size_t n) { sb_append(&w->meta, p, n); }
static void put_u32(gguf_writer *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(gguf_writer *w, uint64_t v) { put(w, &v, 8); }

static void put_str(gguf_writer *w, const char *s, size_t n)
{
    put_u64(w, n);
    put(w, s, n);
}

static void put_key(gguf_writer *w, const char *key, gguf_type t)
{
    if (!strcmp(key, "general.alignment")) w->has_alignment_key = true;
    put_str(w, key, strlen(key));
    put_u32(w, t);
    w->n_kv++;
}

void gguf_writer_u32(gguf_writer *w, const char *key, uint32_t v) { put_key(w, key, GGUF_TYPE_UINT32); put_u32(w, v); }
void gguf_writer_i32(gguf_writer *w, const char *key, int32_t v) { put_key(w, key, GGUF_TYPE_INT32); put(w, &v, 4); }
void gguf_writer_u64(gguf_writer *w, const char *key, uint64_t v) { put_key(w, key, GGUF_TYPE_UINT64); put_u64(w, v); }
void gguf_writer_f32(gguf_writer *w, const char *key, float v) { put_key(w, key, GGUF_TYPE_FLOAT32); put(w, &v, 4); }

void gguf_writer_bool(gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    put_key(w, key, GGUF_TYPE_BOOL);
    put(w, &b, 1);
}

void gguf_writer_str(gguf_writer *w, const char *key, const char *v)
{
    put_key(w, key, GGUF_TYPE_STRING);
    put_str(w, v, strlen(v));
}

void gguf_writer_array(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n)
{
    static const uint8_t size[GGUF_TYPE__COUNT] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    put_key(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, elem_type);
    put_u64(w, n);
    put(w, data, (size_t)(n * size[elem_type]));
}

void gguf_writer_str_array(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                           uint64_t n)
{
    put_key(w, key, GGUF_TYPE_ARRAY);
    put_u32(w, GGUF_TYPE_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) put_str(w, strs[i], lens ? lens[i] : strlen(strs[i]));
}

static uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                       ds4_error *err)
{
    const quant_type_info *ti = quant_type(type);
    if (!ti || !ti->storable) return ds4_error_set(err, "gguf writer: tensor '%s': type %u cannot be stored", name, type);
    if (strlen(name) == 0 || strlen(name) >= GGUF_MAX_NAME)
        return ds4_error_set(err, "gguf writer: tensor name '%s' must be 1..%d bytes", name, GGUF_MAX_NAME - 1);
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) return ds4_error_set(err, "gguf writer: tensor '%s': n_dims %u", name, n_dims);
    uint64_t nel = 1;
    for (uint32_t i = 0; i < n_dims; i++) {
        if (ne[i] == 0) return ds4_error_set(err, "gguf writer: tensor '%s': dimension %u is zero", name, i);
        nel *= ne[i];
    }
    if (ne[0] % ti->block_elems)
        return ds4_error_set(err, "gguf writer: tensor '%s': row length %llu is not a multiple of the %s block size %u",
                             name, (unsigned long long)ne[0], ti->name, ti->block_elems);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return ds4_error_set(err, "out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t i = 0; i < n_dims; i++) t->ne[i] = ne[i];
    t->nbytes = nel / ti->block_elems * ti->block_bytes;
    t->offset = w->data_bytes;
    w->data_bytes = align_up(w->data_bytes + t->nbytes, w->alignment);
    return 0;
}

uint64_t gguf_writer_data_bytes(const gguf_writer *w) { return w->data_bytes; }

static int out(gguf_writer *w, const void *p, size_t n, ds4_error *err)
{
    if (n && fwrite(p, 1, n, w->fp) != n) {
        w->failed = true;
        return ds4_error_set(err, "gguf writer: write to %s failed: %s", w->path ? w->path : "memory",
                             strerror(errno));
    }
    return 0;
}

static int zeros(gguf_writer *w, uint64_t n, ds4_error *err)
{
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        if (out(w, z, k, err)) return -1;
        n -= k;
    }
    return 0;
}

static void hb(strbuf *b, const void *p, size_t n) { sb_append(b, p, n); }

static int write_head(gguf_writer *w, ds4_error *err)
{
    /* readers assume 32 without the key */
    if (w->alignment != 32 && !w->has_alignment_key) gguf_writer_u32(w, "general.alignment", w->alignment);
    strbuf head = { 0 };
    hb(&head, "GGUF", 4);
    uint32_t version = 3;
    uint64_t nt = w->n_tensors;
    hb(&head, &version, 4);
    hb(&head, &nt, 8);
    hb(&head, &w->n_kv, 8);
    if (w->meta.len) hb(&head, w->meta.s, w->meta.len);
    for (size_t i = 0; i < w->n_tensors; i++) {
        const wtensor *t = &w->tensors[i];
        uint64_t n = strlen(t->name);
        hb(&head, &n, 8);
        hb(&head, t->name, n);
        hb(&head, &t->n_dims, 4);
        hb(&head, t->ne, 8 * t->n_dims);
        hb(&head, &t->type, 4);
        hb(&head, &t->offset, 8);
    }
    int rc = out(w, head.s, head.len, err);
    if (!rc) rc = zeros(w, align_up(head.len, w->alignment) - head.len, err);
    sb_free(&head);
    w->open = true;
    w->cur = 0;
    w->cur_written = 0;
    return rc;
}

int gguf_writer_open(gguf_writer *w, const char *path, ds4_error *err)
{
    if (w->open) return ds4_error_set(err, "gguf writer: already open");
    w->path = strdup(path);
    size_t n = strlen(path) + 32;
    w->tmp_path = malloc(n);
    if (!w->path || !w->tmp_path) return ds4_error_set(err, "out of memory");
    snprintf(w->tmp_path, n, "%s.tmp.%ld", path, (long)getpid());
    w->fp = fopen(w->tmp_path, "wb");
    if (!w->fp) {
        int e = errno;
        free(w->tmp_path);
        w->tmp_path = NULL;
        return ds4_error_set(err, "gguf writer: cannot create %s: %s", path, strerror(e));
    }
    setvbuf(w->fp, NULL, _IOFBF, 1 << 20);
    return write_head(w, err);
}

int gguf_writer_open_memory(gguf_writer *w, ds4_error *err)
{
    if (w->open) return ds4_error_set(err, "gguf writer: already open");
    w->fp = open_memstream(&w->mem, &w->mem_len);
    if (!w->fp) return ds4_error_set(err, "gguf writer: open_memstream: %s", strerror(errno));
    return write_head(w, err);
}

int gguf_writer_write(gguf_writer *w, const void *data, size_t n, ds4_error *err)
{
    const uint8_t *p = data;
    if (!w->open || w->failed) return ds4_error_set(err, "gguf writer: not open");
    while (n) {
        if (w->cur >= w->n_tensors)
            return ds4_error_set(err, "gguf writer: %zu bytes beyond the last declared tensor", n);
        const wtensor *t = &w->tensors[w->cur];
        uint64_t left = t->nbytes - w->cur_written;
        size_t k = n < left ? n : (size_t)left;
        if (out(w, p, k, err)) return -1;
        p += k;
        n -= k;
        w->cur_written += k;
        if (w->cur_written == t->nbytes) {
            if (zeros(w, align_up(t->nbytes, w->alignment) - t->nbytes, err)) return -1;
            w->cur++;
            w->cur_written = 0;
        }
    }
    return 0;
}

int gguf_writer_close(gguf_writer *w, void **buf, size_t *len, ds4_error *err)
{
    if (!w->open) return ds4_error_set(err, "gguf writer: not open");
    if (w->cur < w->n_tensors)
        return ds4_error_set(err, "gguf writer: tensor '%s' is missing %llu bytes of data", w->tensors[w->cur].name,
                             (unsigned long long)(w->tensors[w->cur].nbytes - w->cur_written));
    FILE *fp = w->fp;
    w->fp = NULL;
    w->open = false;
    if (fflush(fp) != 0 || (w->tmp_path && fsync(fileno(fp)) != 0)) {
        int e = errno;
        fclose(fp);
        return ds4_error_set(err, "gguf writer: write failed: %s", strerror(e));
    }
    if (fclose(fp) != 0) return ds4_error_set(err, "gguf writer: close failed: %s", strerror(errno));
    if (w->tmp_path) {
        if (rename(w->tmp_path, w->path) != 0)
            return ds4_error_set(err, "gguf writer: cannot rename into %s: %s", w->path, strerror(errno));
        free(w->tmp_path);
        w->tmp_path = NULL;
        return 0;
    }
    if (buf) {
        *buf = w->mem;
        *len = w->mem_len;
        w->mem = NULL;
    }
    return 0;
}
