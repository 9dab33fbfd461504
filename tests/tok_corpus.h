/* tok_corpus.h — the seeded text corpus of the differential tokenizer
 * test: the repository's own sources plus generated prose, CJK and
 * Japanese, emoji, digits, punctuation, whitespace, control characters,
 * random UTF-8 over all planes, rule-boundary soup and very long pieces.
 * Every text is valid UTF-8 (the reference works on Unicode strings). */
#ifndef DS4CL_TOK_CORPUS_H
#define DS4CL_TOK_CORPUS_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char **texts; /* runner-owned */
    size_t *lens;
    const char **kinds; /* which generator made each text */
    size_t count;
    size_t bytes;
} tok_corpus;

/* Builds a corpus of at least min_bytes from the seed. */
tok_corpus tok_corpus_build(uint64_t seed, size_t min_bytes);

#endif
