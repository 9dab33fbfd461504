/* gguf.h — GGUF v3 reader over a read-only mapping.
 *
 * The engine never copies tensor data: tensors are (pointer, size) views
 * into the mapping. Opening validates the whole container (header, every
 * metadata value, every tensor record, alignment, bounds) and fails with a
 * message naming the field and its byte offset; after a successful open no
 * accessor can read outside the file.
 *
 * What open rejects (beyond plain truncation): bad magic; a version other
 * than 3 (one whose low 16 bits are zero is reported as big-endian); KV or
 * tensor counts that cannot fit in the bytes left; empty keys; strings
 * longer than 1 GiB or than the file; unknown value types; nested arrays;
 * BOOL bytes other than 0/1; duplicate metadata keys (rejected, not
 * last-wins: two values for one key means a broken writer, and guessing
 * which one it meant could silently change the model); general.alignment
 * that is not a non-zero power-of-two UINT32; tensor names empty, ≥ 64
 * bytes or duplicated; n_dims outside 1..4; zero or overflowing dims; ggml
 * types outside the set quant.h knows how to store (F32, F16, BF16, I32,
 * Q8_0, Q2_K, Q4_K, IQ2_XXS); rows that are not whole blocks; tensor data
 * misaligned, overlapping another tensor or past the end of the file.
 *
 * Values are decoded on demand from the mapping; string arrays get an offset
 * table at open time so element i is O(1).
 */
#ifndef DS4CL_GGUF_H
#define DS4CL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

typedef struct gguf_file gguf_file;

gguf_file *gguf_open(const char *path, ds4_error *err);
/* Same over a caller-owned buffer (tests, fuzzing); data must outlive f. */
gguf_file *gguf_open_memory(const void *data, size_t len, ds4_error *err);
void gguf_close(gguf_file *f);

/* A stable 64-bit identity of the model: tensor names, types and shapes,
 * the architecture hyper-parameters, and sampled bytes of the weights (so
 * same-shape files with other weights differ). Two files with the same
 * identity can share session snapshots. */
uint64_t gguf_identity(const gguf_file *f);

/* ---- metadata value types ------------------------------------------------ */

typedef enum {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE__COUNT
} gguf_type;

/* "UINT32", "ARRAY", …; "?" for an unknown id. */
const char *gguf_type_name(uint32_t type);

/* A string inside the mapping: not NUL-terminated, may contain any byte. */
typedef struct {
    const char *ptr;
    size_t len;
} gguf_str;

bool gguf_str_eq(gguf_str s, const char *cstr);

/* ---- file layout --------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *f);
uint32_t gguf_alignment(const gguf_file *f);   /* general.alignment or 32 */
uint64_t gguf_data_offset(const gguf_file *f); /* start of the tensor data section */
const void *gguf_base(const gguf_file *f);     /* the whole file, mapped */
size_t gguf_size(const gguf_file *f);
size_t gguf_n_kv(const gguf_file *f);
size_t gguf_n_tensors(const gguf_file *f);

/* ---- metadata ------------------------------------------------------------ */

/* Index of a key, or -1. */
int64_t gguf_find_key(const gguf_file *f, const char *key);
gguf_str gguf_kv_key(const gguf_file *f, size_t i);
gguf_type gguf_kv_type(const gguf_file *f, size_t i);
/* File offset of the value (after the type field); for error messages. */
uint64_t gguf_kv_offset(const gguf_file *f, size_t i);

/* Exact-type getters: true when the key exists with exactly that type. */
bool gguf_get_u8(const gguf_file *f, const char *key, uint8_t *out);
bool gguf_get_i8(const gguf_file *f, const char *key, int8_t *out);
bool gguf_get_u16(const gguf_file *f, const char *key, uint16_t *out);
bool gguf_get_i16(const gguf_file *f, const char *key, int16_t *out);
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i32(const gguf_file *f, const char *key, int32_t *out);
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_f64(const gguf_file *f, const char *key, double *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);

/* Value of KV i converted: any integer type (int: must fit int64), or any
 * integer/float type (float). False when the type does not convert. */
bool gguf_kv_as_int(const gguf_file *f, size_t i, int64_t *out);
bool gguf_kv_as_float(const gguf_file *f, size_t i, double *out);

/* An array value: elem_type, count, and element access. */
typedef struct {
    const gguf_file *file;
    size_t kv;          /* index of the KV holding it */
    gguf_type elem_type;
    uint64_t n;
    const uint8_t *data; /* first element (for strings: its length field) */
} gguf_array;

bool gguf_get_array(const gguf_file *f, const char *key, gguf_array *out);
bool gguf_kv_array(const gguf_file *f, size_t i, gguf_array *out);
/* Element i converted as gguf_kv_as_int/as_float; false when out of range
 * or not convertible. */
bool gguf_array_int(const gguf_array *a, uint64_t i, int64_t *out);
bool gguf_array_float(const gguf_array *a, uint64_t i, double *out);
/* Element i of a string array ({NULL,0} when out of range or not strings). */
gguf_str gguf_array_str(const gguf_array *a, uint64_t i);

/* ---- tensors ------------------------------------------------------------- */

#define GGUF_MAX_DIMS 4
#define GGUF_MAX_NAME 64 /* names are < 64 bytes */

typedef struct {
    char name[GGUF_MAX_NAME]; /* NUL-terminated copy */
    uint32_t n_dims;          /* 1..4 */
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] contiguous; dims past n_dims are 1 */
    uint32_t type;            /* ggml type id (quant.h) */
    uint64_t offset;          /* relative to the data section */
    uint64_t n_elements;
    uint64_t nbytes;
    uint64_t row_bytes;       /* bytes of one ne[0] row */
    const void *data;         /* inside the mapping */
} gguf_tensor;

/* Index of a tensor by exact name, or -1. */
int64_t gguf_find_tensor(const gguf_file *f, const char *name);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, size_t i);
/* NULL when absent. */
const gguf_tensor *gguf_get_tensor(const gguf_file *f, const char *name);

#endif
