/* tokenizer_gguf.c — the tokenizer of a GGUF file, from the
 * tokenizer.ggml.tokens and tokenizer.ggml.merges arrays (the tensor data
 * is never touched). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

static bool string_array(const gguf_file *f, const char *key, gguf_array *a, ds4_error *err)
{
    if (!gguf_get_array(f, key, a)) {
        ds4_error_set(err, "the model has no %s", key);
        return false;
    }
    if (a->elem_type != GGUF_TYPE_STRING) {
        ds4_error_set(err, "%s is an array of %s, not of strings", key, gguf_type_name(a->elem_type));
        return false;
    }
    return true;
}

ds4_tokenizer *tokenizer_from_gguf(const gguf_file *f, ds4_error *err)
{
    gguf_array toks, merges;
    if (!string_array(f, "tokenizer.ggml.tokens", &toks, err)) return NULL;
    if (!string_array(f, "tokenizer.ggml.merges", &merges, err)) return NULL;
    const gguf_array *arr[2] = { &toks, &merges };
    const char **strs[2];
    size_t *lens[2];
    for (int k = 0; k < 2; k++) {
        strs[k] = xmalloc((size_t)arr[k]->n * sizeof(char *) + 1);
        lens[k] = xmalloc((size_t)arr[k]->n * sizeof(size_t) + 1);
        for (uint64_t i = 0; i < arr[k]->n; i++) {
            gguf_str s = gguf_array_str(arr[k], i);
            strs[k][i] = s.ptr;
            lens[k][i] = s.len;
        }
    }
    ds4_tokenizer *t = tokenizer_build(strs[0], lens[0], (size_t)toks.n, strs[1], lens[1], (size_t)merges.n, err);
    for (int k = 0; k < 2; k++) {
        free(strs[k]);
        free(lens[k]);
    }
    return t;
}

ds4_tokenizer *ds4_tokenizer_open(const char *gguf_path, ds4_error *err)
{
    gguf_file *f = gguf_open(gguf_path, err);
    if (!f) return NULL;
    ds4_tokenizer *t = tokenizer_from_gguf(f, err);
    if (!t && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ds4_error_set(err, "%s: %s", gguf_path, msg);
    }
    gguf_close(f);
    return t;
}
