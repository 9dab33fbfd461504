/* pretok.h — the DeepSeek-V3/V4 pre-tokenizer: splits text into the pieces
 * that byte-level BPE then encodes independently.
 *
 * Semantics are those of the published tokenizer.json (three isolating
 * regex splits: \p{N}{1,3}; CJK/kana runs; the six-way alternation), as a
 * JavaScript engine evaluates them; see doc/model.md §13.2. Bytes that are
 * not valid UTF-8 behave like an unassigned character and stay in the
 * pieces, so every byte of the input lands in exactly one piece, in order.
 */
#ifndef DS4CL_PRETOK_H
#define DS4CL_PRETOK_H

#include <stddef.h>

typedef void (*pretok_piece_fn)(void *ud, const unsigned char *piece, size_t len);

/* Calls fn for each piece of text[0..len), left to right. */
void pretok_split(const unsigned char *text, size_t len, pretok_piece_fn fn, void *ud);

#endif
