/* tokenizer.h — engine-internal entry points of the tokenizer (the public
 * ones are in ds4.h). */
#ifndef DS4CL_TOKENIZER_H
#define DS4CL_TOKENIZER_H

#include "engine/ds4.h"
#include "engine/gguf.h"

/* Builds the tokenizer from tokenizer.ggml.* metadata of an open file. */
ds4_tokenizer *tokenizer_from_gguf(const gguf_file *f, ds4_error *err);

#endif
