/* tok_util.h — tokenizers and the reference oracle for the tokenizer,
 * chat and detokenizer tests. Functions that need something absent (the
 * golden data, node/npm) end the test with SKIP and a reason. */
#ifndef DS4CL_TOK_UTIL_H
#define DS4CL_TOK_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/ds4.h"

/* The golden tiny model's tokenizer (311 tokens). Freed when the test ends. */
ds4_tokenizer *tok_golden(void);

/* The DeepSeek V3 vocabulary and merges of the npm reference package,
 * extended to the V4 layout of 129280 ids with <think> 128821, </think>
 * 128822 and ｜DSML｜ 128825 (other new ids are "[PADn]" fillers).
 * Freed when the test ends. */
ds4_tokenizer *tok_v3(void);

/* Directory of the installed reference package (skips when unavailable). */
const char *tok_npm_package(void);

typedef struct {
    int32_t **ids; /* ids[i]: ids of text i */
    size_t *n;     /* n[i]: how many */
    size_t count;
    double ms;     /* time the reference spent tokenizing */
} tok_oracle_result;

/* Runs the reference tokenizer once over all texts (runner-owned memory).
 * mode "plain": the package's pipeline without added-token recognition;
 * "encode": its encode() without BOS (added tokens recognised). */
tok_oracle_result tok_oracle(const char *mode, const char *const *texts, const size_t *lens, size_t n);

/* Tokenizes text with t (trusted or not) into a runner-owned array. */
int32_t *tok_ids(const ds4_tokenizer *t, const char *text, size_t len, bool trusted, size_t *n);

/* Formats ids as "[1, 2, 3]" (runner-owned). */
char *tok_format(const int32_t *ids, size_t n);

/* Fails the test with a readable diff unless got equals want. */
void tok_check_ids(const char *what, const int32_t *got, size_t ngot, const int32_t *want, size_t nwant);

#define TOK_CHECK_IDS(what, got, ngot, ...)                                                      \
    do {                                                                                         \
        static const int32_t want_[] = { __VA_ARGS__ };                                          \
        tok_check_ids(what, got, ngot, want_, sizeof want_ / sizeof want_[0]);                   \
    } while (0)

/* A seeded splitmix64 generator for corpus construction. */
uint64_t tok_rand(uint64_t *state);

#endif
