/* tokenizer.h — engine-internal entry points of the tokenizer (the public
 * ones are in ds4.h). */
#ifndef DS4CL_TOKENIZER_H
#define DS4CL_TOKENIZER_H

#include "engine/ds4.h"
#include "engine/gguf.h"

/* Builds the tokenizer from tokenizer.ggml.* metadata of an open file. */
ds4_tokenizer *tokenizer_from_gguf(const gguf_file *f, ds4_error *err);

/* Builds the tokenizer from plain arrays: token strings by id (byte-level
 * form for BPE tokens, literal text for added tokens) and merges "A B" by
 * rank. Nothing is kept pointing into the arrays. Validates the vocabulary:
 * every merge operand and result is a token, all 256 byte symbols and the
 * seven special strings exist, no token decodes to more than
 * DS4_DETOK_MAX - 8 bytes. */
ds4_tokenizer *tokenizer_build(const char *const *tokens, const size_t *token_lens, size_t n_tokens,
                               const char *const *merges, const size_t *merge_lens, size_t n_merges,
                               ds4_error *err);

/* The literal text of a special token (e.g. "<｜User｜>"). */
const char *tokenizer_special_text(ds4_special which);

/* Byte offset of the first special string in s[0..n) (what
 * ds4_tokenize_trusted would turn into a special id), or n when none. */
size_t tokenizer_first_special(const char *s, size_t n);

/* True when id is one of the seven special tokens of t. */
bool tokenizer_is_special(const ds4_tokenizer *t, int32_t id);

#endif
