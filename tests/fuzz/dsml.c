/* libFuzzer target for the DSML parser and the structural mask.
 *
 * First byte: bit 0 thinking, bits 1-3 chunk size, bit 4 mask walk.
 * Parser mode: feeds the rest in chunks and checks that chunking does not
 * change the outcome and that finished calls carry JSON objects.
 * Mask walk: the rest picks tokens of a small vocabulary — from the
 * allowed set whenever the parser is constrained — and the walk must never
 * meet an empty mask or a malformed call.
 */
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsml/dsml.h"

#define D "\xef\xbd\x9c" "DSML" "\xef\xbd\x9c"

static const char *const schemas[] = {
    "{\"name\":\"read\",\"parameters\":{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
    "\"max_lines\":{\"type\":\"integer\"},\"whole\":{\"type\":\"boolean\"}},\"required\":[\"path\"]}}",
    "{\"name\":\"bash\",\"parameters\":{\"type\":\"object\",\"properties\":{\"command\":{\"type\":\"string\"},"
    "\"refresh_sec\":{\"type\":\"number\"}},\"required\":[\"command\"]}}",
    "{\"name\":\"bash_status\",\"parameters\":{\"type\":\"object\",\"properties\":{\"job\":{\"type\":\"integer\"}}}}",
};

static const char *const vocab_text[] = {
    "<", "</", D, "tool_calls", "tool", "_c", "alls", ">", ">\n", "\n", " ", "invoke", " name", "=\"", "\"", "\">",
    "parameter", " string", "true", "false", "read", "bash", "_status", "path", "max_lines", "whole", "command",
    "refresh_sec", "job", "re", "ad", "ba", "sh", "1", "0", "-", ".", "e", "5", "x", "/tmp", " a", "<end>",
    "\xef\xbd\x9c", "DSML", "\t", "  ",
    /* every printable ASCII byte, as a real byte-level vocabulary has */
    "/", "!", "#", "$", "%", "&", "'", "(", ")", "*", "+", ",", "2", "3", "4", "6", "7", "8", "9", ":", ";", "=", "?",
    "@", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S", "T", "U",
    "V", "W", "X", "Y", "Z", "[", "\\", "]", "^", "_", "`", "a", "b", "c", "d", "f", "g", "h", "i", "j", "k", "l",
    "m", "n", "o", "p", "q", "r", "s", "t", "u", "v", "w", "y", "z", "{", "|", "}", "~",
};
#define N_VOCAB ((int)(sizeof vocab_text / sizeof vocab_text[0]))
#define EOS_ID 42 /* "<end>" */
#define DSML_ID 2

static dsml_schema *g_schema;
static dsml_vocab *g_vocab;
static dsml_masker *g_masker;

static const char *vocab_bytes(void *ud, int32_t id, size_t *len)
{
    (void)ud;
    *len = strlen(vocab_text[id]);
    return vocab_text[id];
}

static void setup(void)
{
    if (g_schema) return;
    ds4_error err = { "" };
    g_schema = dsml_schema_new(schemas, sizeof schemas / sizeof schemas[0], &err);
    if (!g_schema) abort();
    g_vocab = dsml_vocab_new(N_VOCAB, vocab_bytes, NULL, EOS_ID, DSML_ID, NULL, 0);
    g_masker = dsml_masker_new(g_vocab, g_schema);
}

static void check_calls(const dsml_parser *p)
{
    if (dsml_get_state(p) != DSML_DONE) return;
    for (size_t i = 0; i < dsml_n_calls(p); i++) {
        const dsml_call *c = dsml_call_at(p, i);
        struct json_object *o = json_tokener_parse(c->args_json);
        if (!o || !json_object_is_type(o, json_type_object)) abort();
        json_object_put(o);
    }
}

static void parser_mode(const uint8_t *data, size_t size, bool thinking, size_t chunk)
{
    dsml_parser *a = dsml_parser_new(g_schema, thinking, NULL, NULL);
    dsml_parser *b = dsml_parser_new(g_schema, thinking, NULL, NULL);
    dsml_feed(a, (const char *)data, size);
    dsml_finish(a);
    for (size_t i = 0; i < size; i += chunk) {
        (void)dsml_wants_greedy(b);
        (void)dsml_constrained(b);
        dsml_feed(b, (const char *)data + i, size - i < chunk ? size - i : chunk);
    }
    dsml_finish(b);
    if (dsml_get_state(a) != dsml_get_state(b) || dsml_n_calls(a) != dsml_n_calls(b)) abort();
    if (strcmp(dsml_error(a), dsml_error(b))) abort();
    for (size_t i = 0; i < dsml_n_calls(a); i++)
        if (strcmp(dsml_call_at(a, i)->args_json, dsml_call_at(b, i)->args_json)) abort();
    check_calls(a);
    dsml_parser_free(a);
    dsml_parser_free(b);
}

static void walk_mode(const uint8_t *data, size_t size)
{
    dsml_parser *p = dsml_parser_new(g_schema, false, NULL, NULL);
    dsml_feed(p, "<" D, 11);
    bool forced = true; /* from here on the block began under the mask */
    for (size_t i = 0; i < size; i++) {
        dsml_state st = dsml_get_state(p);
        if (st == DSML_DONE || st == DSML_ERROR) break;
        int32_t id;
        if (dsml_constrained(p)) {
            const int32_t *ids;
            int n = dsml_mask_allowed(g_masker, p, &ids);
            if (n <= 0) abort(); /* a dead end */
            id = ids[data[i] % (unsigned)n];
        } else {
            id = data[i] % N_VOCAB;
            if (id == EOS_ID) id = 0;
        }
        if (id == EOS_ID) {
            dsml_finish(p);
            break;
        }
        size_t len;
        const char *b = vocab_bytes(NULL, id, &len);
        dsml_feed(p, b, len);
    }
    /* Structure was always masked, values are free text or checked
     * scalars: whatever happened, the block is never malformed. */
    if (forced && dsml_get_state(p) == DSML_ERROR) abort();
    check_calls(p);
    dsml_parser_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1) return 0;
    uint8_t flags = data[0];
    if (flags & 16) walk_mode(data + 1, size - 1);
    else parser_mode(data + 1, size - 1, flags & 1, 1 + ((flags >> 1) & 7));
    return 0;
}
