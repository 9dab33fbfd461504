/* dsml_util.h — shared by the DSML and agent tests: sample tool schemas,
 * an event recorder for the parser, and a synthetic vocabulary. */
#ifndef DS4CL_DSML_UTIL_H
#define DS4CL_DSML_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dsml/dsml.h"
#include "base/base.h"

#define D "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

/* read, edit, bash, bash_status, list: schemas in the registry's shape. */
extern const char *const dsml_test_schemas[];
extern const size_t dsml_test_n_schemas;
/* A schema built from them, freed when the test ends. */
dsml_schema *dsml_test_schema(void);

/* Everything the parser said, aggregated. */
typedef struct {
    strbuf think, text, seq; /* seq: one word per structural event */
    strbuf values;           /* "name=value;" per parameter */
    int think_end, blocks, calls, call_ends, done, errors;
} dsml_log;

void dsml_log_event(void *ud, const dsml_event *ev);
void dsml_log_free(dsml_log *l);

/* Parses text fed in chunks of the given size (0 = all at once), then
 * finishes; returns the parser (freed at test end) and fills log. */
dsml_parser *dsml_parse_chunked(const dsml_schema *s, bool thinking, const char *text, size_t len,
                                size_t chunk, dsml_log *log);

/* A synthetic vocabulary: all 256 single bytes, the seven specials, the
 * pieces DSML calls are usually made of, common English and code tokens
 * (many space-led), and `extra` pseudo-random tokens. Ids: bytes 0..255,
 * then the specials (see the ids below), then the rest. */
typedef struct {
    char **tok;
    size_t *len;
    int n;
    int32_t eos, bos, user, assistant, think, think_end, dsml;
} synth_vocab;

synth_vocab *synth_vocab_new(int extra, uint64_t seed);
void synth_vocab_free(synth_vocab *v);
const char *synth_bytes(void *ud, int32_t id, size_t *len);
int32_t synth_find(const synth_vocab *v, const char *s);
dsml_vocab *synth_dsml_vocab(const synth_vocab *v);

#endif
