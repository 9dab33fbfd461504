/* gguf_util.h — byte-level GGUF builders for the reader's tests: raw
 * records (to make malformed files on purpose) and a small valid file. */
#ifndef DS4CL_TESTS_GGUF_UTIL_H
#define DS4CL_TESTS_GGUF_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t *p;
    size_t n, cap;
} gbuf;

void gb_bytes(gbuf *b, const void *data, size_t n);
void gb_u8(gbuf *b, uint8_t v);
void gb_u32(gbuf *b, uint32_t v);
void gb_u64(gbuf *b, uint64_t v);
void gb_f32(gbuf *b, float v);
void gb_str(gbuf *b, const char *s); /* u64 length + bytes */
void gb_zeros(gbuf *b, size_t n);
void gb_align(gbuf *b, size_t align);
/* magic, version, tensor_count, kv_count */
void gb_header(gbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv);
/* key + value type; the caller writes the value */
void gb_key(gbuf *b, const char *key, uint32_t type);
void gb_kv_u32(gbuf *b, const char *key, uint32_t v);
void gb_kv_str(gbuf *b, const char *key, const char *v);
void gb_tinfo(gbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset);
void gb_free(gbuf *b);

/* A valid file: 6 KVs (architecture, alignment 32, name, a UINT32, an INT32
 * array [3, -1, 7], a string array ["x", "", "hello"]) and two tensors:
 * "a" F32 [8, 2] = 0..15 and "b" Q8_0 [32, 3] (d = 1, qs[i] = i - 16). */
void gb_minimal(gbuf *b);

/* Offset of the first occurrence of needle in the buffer (-1 if none). */
long gb_find(const gbuf *b, const void *needle, size_t n);

#endif
