/* gguf.h — GGUF v3 reader over a read-only mapping.
 *
 * The engine never copies tensor data: tensors are (pointer, size) views
 * into the mapping. Opening validates the whole container (header, every
 * metadata value, every tensor record, alignment, bounds) and fails with a
 * message naming the field and its byte offset; after a successful open no
 * accessor can read outside the file.
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

/* A stable 64-bit identity of the model: tensor names, types and shapes
 * plus the architecture hyper-parameters. Two files with the same identity
 * can share session snapshots. */
uint64_t gguf_identity(const gguf_file *f);

#endif
