/* gguf.c — GGUF v3 reader: validate everything once at open, then serve
 * metadata values and tensor views straight from the mapping. */
#include "engine/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/quant.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader decodes little-endian fields in place"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_BYTES 24u
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_STRING (1ull << 30)
/* Smallest possible records, for checking counts before allocating:
 * KV = key length (8) + key (≥1) + type (4) + value (≥1);
 * tensor info = name length (8) + name (≥1) + n_dims (4) + ne0 (8) + type (4) + offset (8). */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_BYTES 33u

typedef struct {
    const char *key;
    uint32_t key_len;
    gguf_type type;
    uint64_t value_off;  /* first byte after the type field */
    uint64_t value_end;  /* one past the value */
    gguf_type elem_type; /* arrays */
    uint64_t count;      /* arrays */
    uint64_t elems_off;  /* arrays: first element */
    uint64_t *str_offs;  /* string arrays: offset of each element's length */
} gguf_kv;

struct gguf_file {
    const uint8_t *base;
    size_t size;
    void *map; /* owned mapping (gguf_open), else NULL */
    size_t map_len;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;
    size_t n_kv;
    gguf_kv *kvs;
    size_t n_tensors;
    gguf_tensor *tensors;
    uint32_t *kv_index; /* open-addressing tables: slot = index + 1, 0 = empty */
    size_t kv_index_cap;
    uint32_t *tensor_index;
    size_t tensor_index_cap;
};

/* ---- small helpers --------------------------------------------------------- */

static const uint32_t value_sizes[GGUF_TYPE__COUNT] = {
    [GGUF_TYPE_UINT8] = 1, [GGUF_TYPE_INT8] = 1, [GGUF_TYPE_UINT16] = 2,
    [GGUF_TYPE_INT16] = 2, [GGUF_TYPE_UINT32] = 4, [GGUF_TYPE_INT32] = 4,
    [GGUF_TYPE_FLOAT32] = 4, [GGUF_TYPE_BOOL] = 1, [GGUF_TYPE_STRING] = 0,
    [GGUF_TYPE_ARRAY] = 0, [GGUF_TYPE_UINT64] = 8, [GGUF_TYPE_INT64] = 8,
    [GGUF_TYPE_FLOAT64] = 8,
};

const char *gguf_type_name(uint32_t type)
{
    static const char *const names[GGUF_TYPE__COUNT] = {
        "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
        "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64",
    };
    return type < GGUF_TYPE__COUNT ? names[type] : "?";
}

bool gguf_str_eq(gguf_str s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return h;
}

#define FNV_OFFSET 14695981039346656037ull

static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Printable, truncated rendering of an untrusted name for messages. */
static void quote(char *out, size_t size, const char *s, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= 80) {
            o += (size_t)snprintf(out + o, size - o, "...");
            break;
        }
        if (c >= 0x20 && c < 0x7f && c != '\'') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
    }
    out[o < size ? o : size - 1] = 0;
}

/* ---- the parser ------------------------------------------------------------- */

typedef struct {
    gguf_file *f;
    const uint8_t *b;
    uint64_t size, pos;
    ds4_error *err;
    /* what is being parsed, for messages */
    int64_t kv, tensor;
    const char *name;
    size_t name_len;
} parser;

static const char *where(parser *p, char *buf, size_t size)
{
    char q[400];
    if (p->kv >= 0 && p->name) {
        quote(q, sizeof q, p->name, p->name_len);
        snprintf(buf, size, "metadata KV #%lld ('%s')", (long long)p->kv, q);
    } else if (p->kv >= 0) {
        snprintf(buf, size, "metadata KV #%lld", (long long)p->kv);
    } else if (p->tensor >= 0 && p->name) {
        quote(q, sizeof q, p->name, p->name_len);
        snprintf(buf, size, "tensor info #%lld ('%s')", (long long)p->tensor, q);
    } else if (p->tensor >= 0) {
        snprintf(buf, size, "tensor info #%lld", (long long)p->tensor);
    } else {
        snprintf(buf, size, "header");
    }
    return buf;
}

__attribute__((format(printf, 3, 4)))
static int fail_at(parser *p, uint64_t at, const char *fmt, ...)
{
    char w[512], what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return ds4_error_set(p->err, "GGUF %s: %s (at byte %llu)", where(p, w, sizeof w), what,
                         (unsigned long long)at);
}

static int need(parser *p, uint64_t n, const char *field)
{
    if (n > p->size || p->pos > p->size - n) {
        char w[512];
        return ds4_error_set(p->err,
                             "truncated GGUF: %s field '%s' needs %llu bytes at byte %llu, "
                             "but the file ends at byte %llu",
                             where(p, w, sizeof w), field, (unsigned long long)n,
                             (unsigned long long)p->pos, (unsigned long long)p->size);
    }
    return 0;
}

static int get_u32(parser *p, const char *field, uint32_t *v)
{
    if (need(p, 4, field)) return -1;
    *v = rd_u32(p->b + p->pos);
    p->pos += 4;
    return 0;
}

static int get_u64(parser *p, const char *field, uint64_t *v)
{
    if (need(p, 8, field)) return -1;
    *v = rd_u64(p->b + p->pos);
    p->pos += 8;
    return 0;
}

/* A length-prefixed string; leaves *s pointing into the buffer. */
static int get_str(parser *p, const char *field, const char **s, uint64_t *len)
{
    uint64_t at = p->pos, n;
    if (get_u64(p, field, &n)) return -1;
    if (n > GGUF_MAX_STRING)
        return fail_at(p, at, "%s length %llu exceeds the 1 GiB limit", field,
                       (unsigned long long)n);
    if (n > p->size - p->pos)
        return fail_at(p, at, "%s length %llu runs past the end of the file (%llu bytes left)",
                       field, (unsigned long long)n, (unsigned long long)(p->size - p->pos));
    *s = (const char *)p->b + p->pos;
    *len = n;
    p->pos += n;
    return 0;
}

/* A scalar value of a fixed-size type at the cursor (checks BOOL bytes). */
static int skip_scalar(parser *p, gguf_type t, const char *field)
{
    uint32_t sz = value_sizes[t];
    if (need(p, sz, field)) return -1;
    if (t == GGUF_TYPE_BOOL && p->b[p->pos] > 1)
        return fail_at(p, p->pos, "BOOL value byte is %u, not 0 or 1", p->b[p->pos]);
    p->pos += sz;
    return 0;
}

static int parse_array(parser *p, gguf_kv *kv)
{
    uint64_t at = p->pos;
    uint32_t et;
    if (get_u32(p, "array element type", &et)) return -1;
    if (et >= GGUF_TYPE__COUNT)
        return fail_at(p, at, "unknown array element type %u", et);
    if (et == GGUF_TYPE_ARRAY)
        return fail_at(p, at, "nested arrays are not supported");
    uint64_t count;
    at = p->pos;
    if (get_u64(p, "array count", &count)) return -1;
    kv->elem_type = (gguf_type)et;
    kv->count = count;
    kv->elems_off = p->pos;
    uint64_t left = p->size - p->pos;
    if (et == GGUF_TYPE_STRING) {
        if (count > left / 8)
            return fail_at(p, at, "array of %llu strings needs at least %llu bytes, %llu left",
                           (unsigned long long)count,
                           (unsigned long long)(count > UINT64_MAX / 8 ? UINT64_MAX : count * 8),
                           (unsigned long long)left);
        kv->str_offs = malloc((count ? count : 1) * sizeof *kv->str_offs);
        if (!kv->str_offs) return fail_at(p, at, "out of memory for %llu strings", (unsigned long long)count);
        for (uint64_t i = 0; i < count; i++) {
            const char *s;
            uint64_t n;
            kv->str_offs[i] = p->pos;
            if (get_str(p, "array string", &s, &n)) return -1;
        }
        return 0;
    }
    uint32_t sz = value_sizes[et];
    if (count > left / sz)
        return fail_at(p, at, "array of %llu %s elements (%llu bytes each) runs past the end of the file (%llu bytes left)",
                       (unsigned long long)count, gguf_type_name(et), (unsigned long long)sz,
                       (unsigned long long)left);
    if (et == GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < count; i++)
            if (p->b[p->pos + i] > 1)
                return fail_at(p, p->pos + i, "BOOL array element %llu is %u, not 0 or 1",
                               (unsigned long long)i, p->b[p->pos + i]);
    }
    p->pos += count * sz;
    return 0;
}

static uint64_t hash_bytes(const char *s, size_t n) { return fnv1a(FNV_OFFSET, s, n); }

static size_t table_cap(size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* Inserts kv i into the key table; returns the index of an existing equal
 * key, or -1 when inserted. */
static int64_t kv_index_insert(gguf_file *f, size_t i)
{
    const gguf_kv *kv = &f->kvs[i];
    size_t mask = f->kv_index_cap - 1;
    for (size_t s = hash_bytes(kv->key, kv->key_len) & mask;; s = (s + 1) & mask) {
        uint32_t slot = f->kv_index[s];
        if (!slot) {
            f->kv_index[s] = (uint32_t)i + 1;
            return -1;
        }
        const gguf_kv *o = &f->kvs[slot - 1];
        if (o->key_len == kv->key_len && memcmp(o->key, kv->key, kv->key_len) == 0)
            return slot - 1;
    }
}

static int64_t tensor_index_insert(gguf_file *f, size_t i)
{
    const char *name = f->tensors[i].name;
    size_t mask = f->tensor_index_cap - 1;
    for (size_t s = hash_bytes(name, strlen(name)) & mask;; s = (s + 1) & mask) {
        uint32_t slot = f->tensor_index[s];
        if (!slot) {
            f->tensor_index[s] = (uint32_t)i + 1;
            return -1;
        }
        if (!strcmp(f->tensors[slot - 1].name, name)) return slot - 1;
    }
}

static int parse_kvs(parser *p)
{
    gguf_file *f = p->f;
    for (size_t i = 0; i < f->n_kv; i++) {
        gguf_kv *kv = &f->kvs[i];
        p->kv = (int64_t)i;
        p->name = NULL;
        uint64_t at = p->pos, klen;
        const char *key;
        if (get_str(p, "key", &key, &klen)) return -1;
        if (klen == 0) return fail_at(p, at, "empty key");
        kv->key = key;
        kv->key_len = (uint32_t)klen; /* ≤ 1 GiB */
        p->name = key;
        p->name_len = klen;
        at = p->pos;
        uint32_t t;
        if (get_u32(p, "value type", &t)) return -1;
        if (t >= GGUF_TYPE__COUNT) return fail_at(p, at, "unknown value type %u", t);
        kv->type = (gguf_type)t;
        kv->value_off = p->pos;
        if (t == GGUF_TYPE_STRING) {
            const char *s;
            uint64_t n;
            if (get_str(p, "string value", &s, &n)) return -1;
        } else if (t == GGUF_TYPE_ARRAY) {
            if (parse_array(p, kv)) return -1;
        } else if (skip_scalar(p, kv->type, "value")) {
            return -1;
        }
        kv->value_end = p->pos;
        int64_t dup = kv_index_insert(f, i);
        if (dup >= 0)
            return fail_at(p, kv->value_off, "duplicate metadata key (first defined by KV #%lld)",
                           (long long)dup);
    }
    p->kv = -1;
    p->name = NULL;

    int64_t ai = gguf_find_key(f, "general.alignment");
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (ai >= 0) {
        const gguf_kv *kv = &f->kvs[ai];
        p->kv = ai;
        p->name = kv->key;
        p->name_len = kv->key_len;
        if (kv->type != GGUF_TYPE_UINT32)
            return fail_at(p, kv->value_off, "general.alignment must be UINT32, not %s",
                           gguf_type_name(kv->type));
        uint32_t a = rd_u32(f->base + kv->value_off);
        if (a == 0 || (a & (a - 1)))
            return fail_at(p, kv->value_off, "general.alignment %u is not a power of two", a);
        f->alignment = a;
        p->kv = -1;
        p->name = NULL;
    }
    return 0;
}

static uint32_t elem_align(uint32_t type)
{
    switch (type) {
    case GGML_TYPE_F32:
    case GGML_TYPE_I32: return 4;
    default: return 2; /* F16, BF16 and every block format start with a 2-byte field */
    }
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int parse_tensors(parser *p)
{
    gguf_file *f = p->f;
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        p->tensor = (int64_t)i;
        p->name = NULL;
        uint64_t at = p->pos, nlen;
        const char *name;
        if (get_str(p, "name", &name, &nlen)) return -1;
        p->name = name;
        p->name_len = nlen;
        if (nlen == 0) return fail_at(p, at, "empty tensor name");
        if (nlen >= GGUF_MAX_NAME)
            return fail_at(p, at, "tensor name is %llu bytes (limit %d)", (unsigned long long)nlen,
                           GGUF_MAX_NAME - 1);
        if (memchr(name, 0, nlen)) return fail_at(p, at, "tensor name contains a NUL byte");
        memcpy(t->name, name, nlen);
        t->name[nlen] = 0;

        at = p->pos;
        if (get_u32(p, "n_dims", &t->n_dims)) return -1;
        if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
            return fail_at(p, at, "n_dims %u is outside 1..%d", t->n_dims, GGUF_MAX_DIMS);
        uint64_t nel = 1;
        for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            at = p->pos;
            if (get_u64(p, "ne", &t->ne[d])) return -1;
            if (t->ne[d] == 0) return fail_at(p, at, "dimension %u is zero", d);
            if (t->ne[d] > (uint64_t)INT64_MAX || nel > (uint64_t)INT64_MAX / t->ne[d])
                return fail_at(p, at, "element count overflows at dimension %u (ne = %llu)", d,
                               (unsigned long long)t->ne[d]);
            nel *= t->ne[d];
        }
        t->n_elements = nel;

        at = p->pos;
        if (get_u32(p, "type", &t->type)) return -1;
        const quant_type_info *ti = quant_type(t->type);
        if (!ti || !ti->storable)
            return fail_at(p, at, "unsupported tensor type %u (%s)", t->type, quant_type_name(t->type));
        if (t->ne[0] % ti->block_elems)
            return fail_at(p, at, "row length %llu is not a multiple of the %s block size %u",
                           (unsigned long long)t->ne[0], ti->name, ti->block_elems);
        t->row_bytes = t->ne[0] / ti->block_elems * ti->block_bytes;
        uint64_t rows = nel / t->ne[0];
        if (rows > UINT64_MAX / t->row_bytes)
            return fail_at(p, at, "byte size overflows");
        t->nbytes = rows * t->row_bytes;

        at = p->pos;
        if (get_u64(p, "offset", &t->offset)) return -1;
        if (t->offset % f->alignment)
            return fail_at(p, at, "data offset %llu is not a multiple of the alignment %u",
                           (unsigned long long)t->offset, f->alignment);
        int64_t dup = tensor_index_insert(f, i);
        if (dup >= 0)
            return fail_at(p, at, "duplicate tensor name (first defined by tensor info #%lld)",
                           (long long)dup);
    }
    p->tensor = -1;
    p->name = NULL;

    uint64_t end_info = p->pos;
    uint64_t pad = (f->alignment - end_info % f->alignment) % f->alignment;
    f->data_offset = end_info + pad;
    if (f->n_tensors == 0) return 0;
    if (f->data_offset > f->size)
        return ds4_error_set(p->err,
                             "truncated GGUF: the tensor data section starts at byte %llu "
                             "but the file ends at byte %llu",
                             (unsigned long long)f->data_offset, (unsigned long long)f->size);
    uint64_t data_len = f->size - f->data_offset;
    for (size_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            return ds4_error_set(p->err,
                                 "GGUF tensor '%s': data [%llu, +%llu bytes) runs past the end of "
                                 "the file (data section %llu bytes at byte %llu)",
                                 t->name, (unsigned long long)(f->data_offset + t->offset),
                                 (unsigned long long)t->nbytes, (unsigned long long)data_len,
                                 (unsigned long long)f->data_offset);
        t->data = f->base + f->data_offset + t->offset;
        if ((uintptr_t)t->data % elem_align(t->type))
            return ds4_error_set(p->err, "GGUF tensor '%s': data at byte %llu is misaligned for %s",
                                 t->name, (unsigned long long)(f->data_offset + t->offset),
                                 quant_type_name(t->type));
    }
    /* Overlap check over the tensors sorted by offset. */
    const gguf_tensor **order = malloc(f->n_tensors * sizeof *order);
    if (!order) return ds4_error_set(p->err, "out of memory");
    for (size_t i = 0; i < f->n_tensors; i++) order[i] = &f->tensors[i];
    qsort(order, f->n_tensors, sizeof *order, cmp_tensor_offset);
    for (size_t i = 1; i < f->n_tensors; i++) {
        const gguf_tensor *a = order[i - 1], *b = order[i];
        if (a->offset + a->nbytes > b->offset) {
            int rc = ds4_error_set(p->err,
                                   "GGUF tensors '%s' and '%s' overlap (data at byte %llu, +%llu "
                                   "bytes, and byte %llu)",
                                   a->name, b->name, (unsigned long long)(f->data_offset + a->offset),
                                   (unsigned long long)a->nbytes,
                                   (unsigned long long)(f->data_offset + b->offset));
            free(order);
            return rc;
        }
    }
    free(order);
    return 0;
}

static int parse(gguf_file *f, ds4_error *err)
{
    parser p = { .f = f, .b = f->base, .size = f->size, .pos = 0, .err = err, .kv = -1, .tensor = -1 };
    if (f->size < GGUF_HEADER_BYTES)
        return ds4_error_set(err, "truncated GGUF: the file has %llu bytes, the header needs %u",
                             (unsigned long long)f->size, GGUF_HEADER_BYTES);
    if (memcmp(f->base, GGUF_MAGIC, 4)) {
        char q[64];
        quote(q, sizeof q, (const char *)f->base, 4);
        return ds4_error_set(err, "not a GGUF file: magic is '%s', expected 'GGUF' (at byte 0)", q);
    }
    p.pos = 4;
    uint32_t version = rd_u32(f->base + 4);
    p.pos = 8;
    if ((version & 0xffffu) == 0 && version)
        return ds4_error_set(err, "big-endian GGUF is not supported (version field 0x%08x at byte 4)",
                             version);
    if (version != 3)
        return ds4_error_set(err, "unsupported GGUF version %u (only version 3 is read; at byte 4)",
                             version);
    f->version = version;
    uint64_t n_tensors = rd_u64(f->base + 8), n_kv = rd_u64(f->base + 16);
    p.pos = GGUF_HEADER_BYTES;
    uint64_t left = f->size - p.pos;
    if (n_kv > left / GGUF_MIN_KV_BYTES)
        return ds4_error_set(err, "GGUF header: metadata_kv_count %llu cannot fit in the %llu bytes "
                                  "after the header (at byte 16)",
                             (unsigned long long)n_kv, (unsigned long long)left);
    if (n_tensors > (left - n_kv * GGUF_MIN_KV_BYTES) / GGUF_MIN_TENSOR_BYTES)
        return ds4_error_set(err, "GGUF header: tensor_count %llu cannot fit in the %llu bytes "
                                  "after the header and metadata (at byte 8)",
                             (unsigned long long)n_tensors,
                             (unsigned long long)(left - n_kv * GGUF_MIN_KV_BYTES));
    if (n_kv >= UINT32_MAX || n_tensors >= UINT32_MAX)
        return ds4_error_set(err, "GGUF header: too many records");
    f->n_kv = (size_t)n_kv;
    f->n_tensors = (size_t)n_tensors;
    f->kvs = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kvs);
    f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
    f->kv_index_cap = table_cap(f->n_kv);
    f->tensor_index_cap = table_cap(f->n_tensors);
    f->kv_index = calloc(f->kv_index_cap, sizeof *f->kv_index);
    f->tensor_index = calloc(f->tensor_index_cap, sizeof *f->tensor_index);
    if (!f->kvs || !f->tensors || !f->kv_index || !f->tensor_index)
        return ds4_error_set(err, "out of memory reading the GGUF directory");
    if (parse_kvs(&p)) return -1;
    if (parse_tensors(&p)) return -1;
    return 0;
}

/* ---- open / close -------------------------------------------------------------- */

void gguf_close(gguf_file *f)
{
    if (!f) return;
    if (f->kvs)
        for (size_t i = 0; i < f->n_kv; i++) free(f->kvs[i].str_offs);
    free(f->kvs);
    free(f->tensors);
    free(f->kv_index);
    free(f->tensor_index);
    if (f->map) munmap(f->map, f->map_len);
    free(f);
}

gguf_file *gguf_open_memory(const void *data, size_t len, ds4_error *err)
{
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    f->base = data;
    f->size = len;
    if (!data && len) {
        ds4_error_set(err, "GGUF: no data");
        gguf_close(f);
        return NULL;
    }
    if (parse(f, err)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, ds4_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ds4_error_set(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        ds4_error_set(err, "%s: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        ds4_error_set(err, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    if (size < GGUF_HEADER_BYTES) {
        ds4_error_set(err, "%s: truncated GGUF: the file has %zu bytes, the header needs %u", path,
                      size, GGUF_HEADER_BYTES);
        close(fd);
        return NULL;
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        ds4_error_set(err, "%s: mmap: %s", path, strerror(map_errno));
        return NULL;
    }
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        munmap(map, size);
        ds4_error_set(err, "out of memory");
        return NULL;
    }
    f->map = map;
    f->map_len = size;
    f->base = map;
    f->size = size;
    ds4_error e = { { 0 } };
    if (parse(f, &e)) {
        ds4_error_set(err, "%s: %s", path, e.msg);
        gguf_close(f);
        return NULL;
    }
    return f;
}

/* ---- accessors ---------------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
const void *gguf_base(const gguf_file *f) { return f->base; }
size_t gguf_size(const gguf_file *f) { return f->size; }
size_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
size_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }

int64_t gguf_find_key(const gguf_file *f, const char *key)
{
    size_t n = strlen(key), mask = f->kv_index_cap - 1;
    for (size_t s = hash_bytes(key, n) & mask;; s = (s + 1) & mask) {
        uint32_t slot = f->kv_index[s];
        if (!slot) return -1;
        const gguf_kv *kv = &f->kvs[slot - 1];
        if (kv->key_len == n && memcmp(kv->key, key, n) == 0) return slot - 1;
    }
}

gguf_str gguf_kv_key(const gguf_file *f, size_t i)
{
    if (i >= f->n_kv) return (gguf_str){ NULL, 0 };
    return (gguf_str){ f->kvs[i].key, f->kvs[i].key_len };
}

gguf_type gguf_kv_type(const gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kvs[i].type : GGUF_TYPE__COUNT;
}

uint64_t gguf_kv_offset(const gguf_file *f, size_t i)
{
    return i < f->n_kv ? f->kvs[i].value_off : 0;
}

static const uint8_t *scalar_of(const gguf_file *f, const char *key, gguf_type t)
{
    int64_t i = gguf_find_key(f, key);
    if (i < 0 || f->kvs[i].type != t) return NULL;
    return f->base + f->kvs[i].value_off;
}

#define GETTER(fn, T, gt)                                            \
    bool fn(const gguf_file *f, const char *key, T *out)             \
    {                                                                \
        const uint8_t *v = scalar_of(f, key, gt);                    \
        if (!v) return false;                                        \
        memcpy(out, v, sizeof *out);                                 \
        return true;                                                 \
    }
GETTER(gguf_get_u8, uint8_t, GGUF_TYPE_UINT8)
GETTER(gguf_get_i8, int8_t, GGUF_TYPE_INT8)
GETTER(gguf_get_u16, uint16_t, GGUF_TYPE_UINT16)
GETTER(gguf_get_i16, int16_t, GGUF_TYPE_INT16)
GETTER(gguf_get_u32, uint32_t, GGUF_TYPE_UINT32)
GETTER(gguf_get_i32, int32_t, GGUF_TYPE_INT32)
GETTER(gguf_get_u64, uint64_t, GGUF_TYPE_UINT64)
GETTER(gguf_get_i64, int64_t, GGUF_TYPE_INT64)
GETTER(gguf_get_f32, float, GGUF_TYPE_FLOAT32)
GETTER(gguf_get_f64, double, GGUF_TYPE_FLOAT64)
#undef GETTER

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out)
{
    const uint8_t *v = scalar_of(f, key, GGUF_TYPE_BOOL);
    if (!v) return false;
    *out = *v != 0;
    return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out)
{
    const uint8_t *v = scalar_of(f, key, GGUF_TYPE_STRING);
    if (!v) return false;
    out->len = (size_t)rd_u64(v);
    out->ptr = (const char *)v + 8;
    return true;
}

/* Decodes one scalar of type t at p. */
static bool decode_int(gguf_type t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case GGUF_TYPE_UINT8: *out = p[0]; return true;
    case GGUF_TYPE_INT8: *out = (int8_t)p[0]; return true;
    case GGUF_TYPE_BOOL: *out = p[0] != 0; return true;
    case GGUF_TYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_TYPE_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
    case GGUF_TYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_TYPE_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
    case GGUF_TYPE_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    case GGUF_TYPE_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
    default: return false;
    }
}

static bool decode_float(gguf_type t, const uint8_t *p, double *out)
{
    if (t == GGUF_TYPE_FLOAT32) { float v; memcpy(&v, p, 4); *out = v; return true; }
    if (t == GGUF_TYPE_FLOAT64) { double v; memcpy(&v, p, 8); *out = v; return true; }
    if (t == GGUF_TYPE_BOOL) return false;
    int64_t iv;
    if (!decode_int(t, p, &iv)) return false;
    *out = (double)iv;
    return true;
}

bool gguf_kv_as_int(const gguf_file *f, size_t i, int64_t *out)
{
    if (i >= f->n_kv || f->kvs[i].type == GGUF_TYPE_BOOL) return false;
    return decode_int(f->kvs[i].type, f->base + f->kvs[i].value_off, out);
}

bool gguf_kv_as_float(const gguf_file *f, size_t i, double *out)
{
    if (i >= f->n_kv) return false;
    return decode_float(f->kvs[i].type, f->base + f->kvs[i].value_off, out);
}

bool gguf_kv_array(const gguf_file *f, size_t i, gguf_array *out)
{
    if (i >= f->n_kv || f->kvs[i].type != GGUF_TYPE_ARRAY) return false;
    const gguf_kv *kv = &f->kvs[i];
    *out = (gguf_array){ .file = f, .kv = i, .elem_type = kv->elem_type, .n = kv->count,
                         .data = f->base + kv->elems_off };
    return true;
}

bool gguf_get_array(const gguf_file *f, const char *key, gguf_array *out)
{
    int64_t i = gguf_find_key(f, key);
    return i >= 0 && gguf_kv_array(f, (size_t)i, out);
}

bool gguf_array_int(const gguf_array *a, uint64_t i, int64_t *out)
{
    if (i >= a->n || a->elem_type == GGUF_TYPE_STRING || a->elem_type == GGUF_TYPE_BOOL) return false;
    return decode_int(a->elem_type, a->data + i * value_sizes[a->elem_type], out);
}

bool gguf_array_float(const gguf_array *a, uint64_t i, double *out)
{
    if (i >= a->n || a->elem_type == GGUF_TYPE_STRING) return false;
    return decode_float(a->elem_type, a->data + i * value_sizes[a->elem_type], out);
}

gguf_str gguf_array_str(const gguf_array *a, uint64_t i)
{
    if (i >= a->n || a->elem_type != GGUF_TYPE_STRING) return (gguf_str){ NULL, 0 };
    const gguf_file *f = a->file;
    const uint8_t *p = f->base + f->kvs[a->kv].str_offs[i];
    return (gguf_str){ (const char *)p + 8, (size_t)rd_u64(p) };
}

int64_t gguf_find_tensor(const gguf_file *f, const char *name)
{
    size_t mask = f->tensor_index_cap - 1;
    for (size_t s = hash_bytes(name, strlen(name)) & mask;; s = (s + 1) & mask) {
        uint32_t slot = f->tensor_index[s];
        if (!slot) return -1;
        if (!strcmp(f->tensors[slot - 1].name, name)) return slot - 1;
    }
}

const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const gguf_tensor *gguf_get_tensor(const gguf_file *f, const char *name)
{
    int64_t i = gguf_find_tensor(f, name);
    return i < 0 ? NULL : &f->tensors[i];
}

/* ---- identity ------------------------------------------------------------------ */

static int cmp_tensor_name(const void *a, const void *b)
{
    return strcmp((*(const gguf_tensor *const *)a)->name, (*(const gguf_tensor *const *)b)->name);
}

static int cmp_kv_key(const void *a, const void *b)
{
    const gguf_kv *x = *(const gguf_kv *const *)a, *y = *(const gguf_kv *const *)b;
    size_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, n);
    return c ? c : (x->key_len > y->key_len) - (x->key_len < y->key_len);
}

/* Order-independent: tensors by name, then the "<arch>." keys by key, each
 * with its type and raw value bytes. Tokenizer arrays are not included (they
 * do not change the session state a snapshot holds, and they are large). */
#define IDENTITY_SAMPLE 256

uint64_t gguf_identity(const gguf_file *f)
{
    uint64_t h = FNV_OFFSET;
    const gguf_tensor **ts = malloc((f->n_tensors ? f->n_tensors : 1) * sizeof *ts);
    const gguf_kv **ks = malloc((f->n_kv ? f->n_kv : 1) * sizeof *ks);
    if (!ts || !ks) {
        free(ts);
        free(ks);
        return 0;
    }
    for (size_t i = 0; i < f->n_tensors; i++) ts[i] = &f->tensors[i];
    qsort(ts, f->n_tensors, sizeof *ts, cmp_tensor_name);
    for (size_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = ts[i];
        h = fnv1a(h, t->name, strlen(t->name) + 1);
        h = fnv1a(h, &t->type, sizeof t->type);
        h = fnv1a(h, &t->n_dims, sizeof t->n_dims);
        h = fnv1a(h, t->ne, t->n_dims * sizeof t->ne[0]);
    }
    gguf_str arch = { NULL, 0 };
    size_t nk = 0;
    if (gguf_get_str(f, "general.architecture", &arch) && arch.len > 0 && arch.len < 200) {
        h = fnv1a(h, arch.ptr, arch.len);
        for (size_t i = 0; i < f->n_kv; i++) {
            const gguf_kv *kv = &f->kvs[i];
            if (kv->key_len > arch.len && kv->key[arch.len] == '.' &&
                memcmp(kv->key, arch.ptr, arch.len) == 0)
                ks[nk++] = kv;
        }
    }
    qsort(ks, nk, sizeof *ks, cmp_kv_key);
    for (size_t i = 0; i < nk; i++) {
        const gguf_kv *kv = ks[i];
        uint32_t t = kv->type;
        h = fnv1a(h, kv->key, kv->key_len);
        h = fnv1a(h, &t, sizeof t);
        h = fnv1a(h, f->base + kv->value_off, kv->value_end - kv->value_off);
    }
    /* Two files of the same shape can hold different weights (another
     * seed, another fine-tune): a few sampled bytes of the first and last
     * tensors by name tell them apart without reading gigabytes (each
     * sample touches one page of the mapping). */
    for (size_t i = 0; i < f->n_tensors && i < 2; i++) {
        const gguf_tensor *t = ts[i == 0 ? 0 : f->n_tensors - 1];
        size_t n = t->nbytes < IDENTITY_SAMPLE ? (size_t)t->nbytes : IDENTITY_SAMPLE;
        h = fnv1a(h, t->data, n);
        h = fnv1a(h, (const unsigned char *)t->data + (t->nbytes - n), n);
    }
    free(ts);
    free(ks);
    return h;
}
