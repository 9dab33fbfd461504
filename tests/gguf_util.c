/* gguf_util.c — byte-level GGUF builders for tests. */
#include "tests/gguf_util.h"

#include <stdlib.h>
#include <string.h>

#include "engine/gguf.h"
#include "engine/quant.h"

void gb_bytes(gbuf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) abort();
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

void gb_u8(gbuf *b, uint8_t v) { gb_bytes(b, &v, 1); }
void gb_u32(gbuf *b, uint32_t v) { gb_bytes(b, &v, 4); }
void gb_u64(gbuf *b, uint64_t v) { gb_bytes(b, &v, 8); }
void gb_f32(gbuf *b, float v) { gb_bytes(b, &v, 4); }

void gb_str(gbuf *b, const char *s)
{
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}

void gb_zeros(gbuf *b, size_t n)
{
    static const uint8_t z[64];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        gb_bytes(b, z, k);
        n -= k;
    }
}

void gb_align(gbuf *b, size_t align) { gb_zeros(b, (align - b->n % align) % align); }

void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}

void gb_key(gbuf *b, const char *key, uint32_t type)
{
    gb_str(b, key);
    gb_u32(b, type);
}

void gb_kv_u32(gbuf *b, const char *key, uint32_t v)
{
    gb_key(b, key, GGUF_TYPE_UINT32);
    gb_u32(b, v);
}

void gb_kv_str(gbuf *b, const char *key, const char *v)
{
    gb_key(b, key, GGUF_TYPE_STRING);
    gb_str(b, v);
}

void gb_tinfo(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset)
{
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}

void gb_free(gbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

void gb_minimal(gbuf *b)
{
    gb_header(b, 3, 2, 6);
    gb_kv_str(b, "general.architecture", "test");
    gb_kv_u32(b, "general.alignment", 32);
    gb_kv_str(b, "general.name", "minimal");
    gb_kv_u32(b, "test.count", 42);
    gb_key(b, "test.ints", GGUF_TYPE_ARRAY);
    gb_u32(b, GGUF_TYPE_INT32);
    gb_u64(b, 3);
    gb_u32(b, 3);
    gb_u32(b, (uint32_t)-1);
    gb_u32(b, 7);
    gb_key(b, "test.strings", GGUF_TYPE_ARRAY);
    gb_u32(b, GGUF_TYPE_STRING);
    gb_u64(b, 3);
    gb_str(b, "x");
    gb_str(b, "");
    gb_str(b, "hello");
    gb_tinfo(b, "a", 2, (const uint64_t[]){ 8, 2 }, GGML_TYPE_F32, 0);
    gb_tinfo(b, "b", 2, (const uint64_t[]){ 32, 3 }, GGML_TYPE_Q8_0, 64);
    gb_align(b, 32);
    for (int i = 0; i < 16; i++) gb_f32(b, (float)i);
    for (int r = 0; r < 3; r++) {
        gb_u32(b, 0x3c00); /* fp16 1.0 — only two bytes belong to d */
        b->n -= 2;
        for (int i = 0; i < 32; i++) gb_u8(b, (uint8_t)(int8_t)(i - 16));
    }
}

long gb_find(const gbuf *b, const void *needle, size_t n)
{
    for (size_t i = 0; i + n <= b->n; i++)
        if (!memcmp(b->p + i, needle, n)) return (long)i;
    return -1;
}
