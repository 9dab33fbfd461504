/* dsml.h — the model's DSML tool calls, parsed while they stream, and the
 * structural token mask that keeps a started call well-formed.
 *
 * The parser takes the assistant's sampled bytes (everything after the
 * assistant prefix) and splits them into reasoning, visible text and
 * tool-call blocks (doc/model.md §14):
 *
 *   <｜DSML｜tool_calls>
 *   <｜DSML｜invoke name="TOOL">
 *   <｜DSML｜parameter name="KEY" string="true|false">VALUE</｜DSML｜parameter>
 *   </｜DSML｜invoke>
 *   </｜DSML｜tool_calls>
 *
 * Tolerated on input: the opener without its leading fullwidth bar, a bare
 * invoke without the tool_calls wrapper (closed by EOS or by the wrapper's
 * close tag), any whitespace between tags and attributes, attributes in any
 * order, a missing string attribute (the tool's schema decides), closing
 * tags with stray whitespace or an extra bar. DSML inside <think> is never a
 * call: it ends the stream with an error. Only the fullwidth form (what the
 * model's DSML token decodes to) counts; ASCII "|DSML|" is plain text.
 *
 * "Strict" is the canonical subset (one space before each attribute, name
 * before string, string matching the schema type, known tool and parameter
 * names, no duplicates, required parameters before </invoke>). The mask
 * lets through exactly the tokens that keep a strict parse alive, so
 * whatever the sampler picks in structure, the lenient parser accepts it.
 *
 * dsml_gather turns the parser's reasoning and text into a piece per token
 * and valid UTF-8, for the agent's events and the server's streams alike.
 *
 * Nothing here allocates per byte in steady state, prints, or knows about
 * the engine beyond token byte strings.
 */
#ifndef DS4CL_DSML_H
#define DS4CL_DSML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- tool schemas as the grammar sees them ----------------------------- */

typedef struct dsml_schema dsml_schema;

/* Builds the name/parameter tables from tool schema objects of the form
 * {"name":…,"description":…,"parameters":{"type":"object","properties":{…},
 * "required":[…]}} (what tools_schema_json() returns). Returns NULL with a
 * message in err when a schema is not such an object. */
dsml_schema *dsml_schema_new(const char *const *schemas_json, size_t n, ds4_error *err);
void dsml_schema_free(dsml_schema *s);

/* ---- parser -------------------------------------------------------------- */

typedef enum {
    DSML_EV_THINK = 0,  /* text: reasoning bytes (UTF-8 complete) */
    DSML_EV_THINK_END,  /* </think> seen */
    DSML_EV_TEXT,       /* text: visible answer bytes (UTF-8 complete) */
    DSML_EV_BLOCK,      /* a tool-call block began */
    DSML_EV_CALL,       /* call, name: an invoke tag completed */
    DSML_EV_PARAM,      /* call, name: a parameter value begins */
    DSML_EV_VALUE,      /* call, name, text: value bytes as sampled */
    DSML_EV_CALL_END,   /* call, name, text = arguments JSON object */
    DSML_EV_DONE,       /* the block closed; the calls are ready */
    DSML_EV_ERROR,      /* text: what is wrong */
} dsml_event_type;

typedef struct {
    dsml_event_type type;
    int call;           /* index of the call within the block */
    const char *name;   /* tool name (CALL, CALL_END) or parameter name */
    const char *text;
    size_t len;
} dsml_event;

typedef void (*dsml_event_fn)(void *ud, const dsml_event *ev);

typedef enum {
    DSML_OK = 0,         /* text or reasoning; nothing pending */
    DSML_IN_BLOCK,       /* inside a tool-call block */
    DSML_DONE,           /* the block closed: run the calls */
    DSML_ERROR,          /* malformed (see dsml_error_kind) */
} dsml_state;

typedef enum {
    DSML_ERR_NONE = 0,
    DSML_ERR_SYNTAX,     /* malformed markup or arguments */
    DSML_ERR_IN_THINK,   /* DSML appeared inside the reasoning */
    DSML_ERR_INCOMPLETE, /* the stream ended inside a block */
} dsml_error_kind;

typedef struct {
    char *name;
    char *args_json;     /* a JSON object */
} dsml_call;

typedef struct dsml_parser dsml_parser;

/* schema may be NULL (no names known: strict means syntax only). thinking:
 * the stream starts inside <think> (the assistant prefix ended with it).
 * fn may be NULL. */
dsml_parser *dsml_parser_new(const dsml_schema *schema, bool thinking, dsml_event_fn fn, void *ud);
void dsml_parser_free(dsml_parser *p);
/* Starts a new stream (a new assistant round). */
void dsml_parser_reset(dsml_parser *p, bool thinking);

/* Feeds sampled bytes. Bytes after DONE or ERROR are ignored. */
void dsml_feed(dsml_parser *p, const char *bytes, size_t len);
/* The stream ended (EOS sampled, or generation stopped). Flushes held text;
 * a bare-invoke block closes; any other open block becomes INCOMPLETE. */
void dsml_finish(dsml_parser *p);

dsml_state dsml_get_state(const dsml_parser *p);
dsml_error_kind dsml_error_kind_of(const dsml_parser *p);
const char *dsml_error(const dsml_parser *p);          /* "" when none */
size_t dsml_n_calls(const dsml_parser *p);
const dsml_call *dsml_call_at(const dsml_parser *p, size_t i);
/* The raw bytes of the block so far (canonical opener first), for
 * diagnostics. */
const char *dsml_stanza(const dsml_parser *p, size_t *len);
/* True when the reasoning ended (</think> seen, or the stream began
 * without thinking). */
bool dsml_answering(const dsml_parser *p);

/* Sampling policy for the next token: structure is decoded greedily
 * (markers, tags, names, a close tag that has begun); values keep the
 * user's sampling. */
bool dsml_wants_greedy(const dsml_parser *p);
/* True when the next token must continue a call: the mask applies. */
bool dsml_constrained(const dsml_parser *p);

/* The model meant to write `wanted` (a token's bytes) next, and the mask
 * refused it. When that was a tool or parameter name the schema does not
 * have (or a parameter given twice), the block ends there in DSML_ERROR,
 * the message naming the tool, the name the model began and the names it
 * could take, and true is returned; elsewhere false, nothing changed: a
 * constrained value or tag is the mask's to steer. */
bool dsml_refuse_name(dsml_parser *p, const char *wanted, size_t len);

/* A short reminder of the exact call shape, fed back with syntax errors. */
const char *dsml_syntax_reminder(void);

/* ---- reasoning and text a token at a time ----------------------------------
 * THINK and TEXT events hand their bytes over as they settle, a byte or a
 * few at a time. A front end that streams them gathers them here and takes
 * them once per token (dsml_gather_take after each dsml_feed): one piece
 * per token however the parser cut them, one kind at a time (a new kind
 * takes what the other gathered first), as valid UTF-8. A character cut
 * short waits for the bytes that complete it; bytes that are no character,
 * and one left unfinished when its region or the reply ends (`all`), are
 * U+FFFD. */
typedef struct {
    strbuf buf;
    dsml_event_type type;   /* DSML_EV_THINK or DSML_EV_TEXT */
} dsml_gather;

/* Receives what is taken: s[0..n), n > 0, of one kind. */
typedef void (*dsml_gather_fn)(void *ud, dsml_event_type type, const char *s, size_t n);

void dsml_gather_add(dsml_gather *g, dsml_event_type type, const char *s, size_t n, dsml_gather_fn fn, void *ud);
void dsml_gather_take(dsml_gather *g, bool all, dsml_gather_fn fn, void *ud);
void dsml_gather_free(dsml_gather *g);

/* ---- structural mask over a vocabulary ------------------------------------ */

typedef struct dsml_vocab dsml_vocab;

/* Token bytes by id (specials: their literal text). */
typedef const char *(*dsml_token_bytes_fn)(void *ud, int32_t id, size_t *len);

/* Precomputes byte strings and first-byte buckets for n_vocab tokens. eos
 * and dsml are the EOS and DSML special ids; `control` lists the other
 * control tokens (BOS, user, assistant, think markers) that are never
 * allowed inside structure. */
dsml_vocab *dsml_vocab_new(int n_vocab, dsml_token_bytes_fn bytes, void *ud,
                           int32_t eos, int32_t dsml, const int32_t *control, size_t n_control);
void dsml_vocab_free(dsml_vocab *v);

typedef struct dsml_masker dsml_masker;

/* A mask cache for one schema and vocabulary (both must outlive it). */
dsml_masker *dsml_masker_new(const dsml_vocab *v, const dsml_schema *schema);
void dsml_masker_free(dsml_masker *m);

/* When the parser is constrained, sets the logits of every token that
 * cannot continue a strict call to -INFINITY and returns how many remain;
 * otherwise leaves logits alone and returns n_vocab. */
int dsml_mask_apply(dsml_masker *m, const dsml_parser *p, float *logits, int n_vocab);

/* The ids the mask would allow in p's current state (for tests); returns
 * the count and points *ids at storage owned by the masker (valid until
 * the next call). Returns -1 when p is not constrained. */
int dsml_mask_allowed(dsml_masker *m, const dsml_parser *p, const int32_t **ids);

/* Cache statistics (for benchmarks). */
void dsml_masker_stats(const dsml_masker *m, uint64_t *hits, uint64_t *misses);

#endif
