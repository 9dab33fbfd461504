/* gguf_write.h — GGUF v3 writer for fixtures and tools.
 *
 * Metadata and the tensor directory are declared first (in the order they
 * will appear), then gguf_writer_open() writes header, metadata and
 * directory, and the tensor bytes are streamed with gguf_writer_write() in
 * declaration order: the writer pads each tensor to the alignment, so a
 * caller can push a multi-GB tensor in chunks without holding it. The file
 * is written under a temporary name and renamed into place by
 * gguf_writer_close(), so a failed or interrupted write leaves no partial
 * file at the destination. gguf_writer_open_memory() writes into a buffer
 * instead (tests, fuzz seeds).
 */
#ifndef DS4CL_GGUF_WRITE_H
#define DS4CL_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"
#include "engine/gguf.h"

typedef struct gguf_writer gguf_writer;

/* alignment: a power of two; 0 means 32. Any other value is recorded as
 * general.alignment unless the caller writes that key. Returns NULL only
 * without memory. */
gguf_writer *gguf_writer_new(uint32_t alignment);
/* Frees everything; an unfinished file output is removed. */
void gguf_writer_free(gguf_writer *w);

/* ---- metadata (before open) ------------------------------------------------ */
void gguf_writer_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_str(gguf_writer *w, const char *key, const char *v);
/* A numeric array: n little-endian elements of elem_type at data. */
void gguf_writer_array(gguf_writer *w, const char *key, gguf_type elem_type, const void *data, uint64_t n);
/* A string array; lens may be NULL for NUL-terminated strings. */
void gguf_writer_str_array(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                           uint64_t n);

/* ---- tensors (before open) ------------------------------------------------- */
/* Declares the next tensor; fails when the shape cannot be stored in `type`. */
int gguf_writer_tensor(gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                       ds4_error *err);
/* Bytes of tensor data the file will hold, padding included. */
uint64_t gguf_writer_data_bytes(const gguf_writer *w);

/* ---- output ---------------------------------------------------------------- */
int gguf_writer_open(gguf_writer *w, const char *path, ds4_error *err);
int gguf_writer_open_memory(gguf_writer *w, ds4_error *err);
/* Appends tensor bytes (any chunking, across tensor boundaries too). */
int gguf_writer_write(gguf_writer *w, const void *data, size_t n, ds4_error *err);
/* Checks that every declared byte was written, then renames the file into
 * place (file output) or hands the buffer over (*buf, *len; free()). */
int gguf_writer_close(gguf_writer *w, void **buf, size_t *len, ds4_error *err);

#endif
