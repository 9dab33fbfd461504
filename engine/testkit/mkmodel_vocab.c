/* mkmodel_vocab.c — vocabularies for generated fixtures: a byte-level tiny
 * one, or a Hugging Face tokenizer.json laid out as the DS4 (V4) vocabulary. */
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/testkit/mkmodel.h"

#define V4_VOCAB 129280
#define V4_BPE_IDS 128000

static const char *const ds4_specials[7] = {
    "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<\xef\xbd\x9cUser\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>",
    "<think>",
    "</think>",
    "\xef\xbd\x9c" "DSML\xef\xbd\x9c",
};
/* Their ids in the V4 vocabulary (doc/model.md §13.1). */
static const int32_t v4_special_ids[7] = { 0, 1, 128803, 128804, 128821, 128822, 128825 };

void mk_vocab_free(mk_vocab *v)
{
    if (v->tokens)
        for (size_t i = 0; i < v->n; i++) free(v->tokens[i]);
    if (v->merges)
        for (size_t i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->lens);
    free(v->types);
    free(v->merges);
    memset(v, 0, sizeof *v);
}

static int alloc_vocab(mk_vocab *v, size_t n, size_t n_merges, ds4_error *err)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    v->n_merges = n_merges;
    v->tokens = calloc(n, sizeof *v->tokens);
    v->lens = calloc(n, sizeof *v->lens);
    v->types = calloc(n, sizeof *v->types);
    v->merges = calloc(n_merges ? n_merges : 1, sizeof *v->merges);
    if (!v->tokens || !v->lens || !v->types || !v->merges) {
        mk_vocab_free(v);
        return ds4_error_set(err, "out of memory");
    }
    return 0;
}

static int set_token(mk_vocab *v, size_t id, const char *s, size_t len, int32_t type)
{
    char *c = malloc(len + 1);
    if (!c) return -1;
    memcpy(c, s, len);
    c[len] = 0;
    free(v->tokens[id]);
    v->tokens[id] = c;
    v->lens[id] = len;
    v->types[id] = type;
    return 0;
}

/* GPT-2 byte-to-unicode: printable bytes stand for themselves, the rest
 * map to U+0100.. in byte order. Writes the UTF-8 of byte b's symbol. */
static size_t byte_symbol(int b, char *out)
{
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

/* Merges of the tiny vocabulary, in rank order; each operand is a byte
 * symbol or the product of an earlier merge ("Ġ" is a space, "Ċ" a newline). */
static const char *const tiny_merges[] = {
    "\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "\xc4\xa0 a", "e r", "o n", "\xc4\xa0 s",
    "r e", "a t", "e n", "\xc4\xa0 c", "o r", "i s", "\xc4\xa0 w", "\xc4\xa0 o",
    "in g", "e s", "\xc4\xa0 f", "\xc4\xa0 p", "\xc4\xa0 b", "\xc4\xa0 m", "a n", "e d",
    "\xc4\xa0 i", "\xc4\xa0 d", "a l", "a r", "\xc4\xa0t o", "\xc4\xa0o f", "\xc4\xa0" "a n", "\xc4\xa0" "an d",
    "\xc4\xa0i n", "\xc4\xa0 \xc4\xa0", "\xc4\xa0\xc4\xa0 \xc4\xa0\xc4\xa0", "\xc4\x8a \xc4\x8a", "\xc4\xa0" "f or",
    "\xc4\xa0 re", "o u", "l e", "\xc4\xa0 (", "( )", "\xc4\xa0 =", "\xc4\xa0 {", "i t", "\xc4\xa0 is",
    "\xc4\xa0 it", "t h",
};

int mk_vocab_tiny(mk_vocab *v, ds4_error *err)
{
    size_t nm = sizeof tiny_merges / sizeof tiny_merges[0];
    if (alloc_vocab(v, 256 + nm + 7, nm, err)) return -1;
    for (int b = 0; b < 256; b++) {
        char sym[4];
        if (set_token(v, (size_t)b, sym, byte_symbol(b, sym), 1)) goto oom;
    }
    for (size_t i = 0; i < nm; i++) {
        const char *m = tiny_merges[i], *sp = strchr(m, ' ');
        char joined[64];
        size_t a = (size_t)(sp - m), b = strlen(sp + 1);
        memcpy(joined, m, a);
        memcpy(joined + a, sp + 1, b);
        if (set_token(v, 256 + i, joined, a + b, 1)) goto oom;
        v->merges[i] = strdup(m);
        if (!v->merges[i]) goto oom;
    }
    for (int k = 0; k < 7; k++)
        if (set_token(v, 256 + nm + (size_t)k, ds4_specials[k], strlen(ds4_specials[k]), 3)) goto oom;
    v->bos = (int32_t)(256 + nm);
    v->eos = v->bos + 1;
    return 0;
oom:
    mk_vocab_free(v);
    return ds4_error_set(err, "out of memory");
}

/* tokenizer.json merges are "A B" strings or, in newer files, ["A", "B"]. */
static char *merge_string(json_object *m)
{
    if (json_object_is_type(m, json_type_string)) return strdup(json_object_get_string(m));
    if (json_object_is_type(m, json_type_array) && json_object_array_length(m) == 2) {
        const char *a = json_object_get_string(json_object_array_get_idx(m, 0));
        const char *b = json_object_get_string(json_object_array_get_idx(m, 1));
        if (!a || !b) return NULL;
        size_t n = strlen(a) + strlen(b) + 2;
        char *s = malloc(n);
        if (s) snprintf(s, n, "%s %s", a, b);
        return s;
    }
    return NULL;
}

int mk_vocab_from_json(mk_vocab *v, const char *path, ds4_error *err)
{
    memset(v, 0, sizeof *v);
    json_object *root = json_object_from_file(path);
    if (!root) return ds4_error_set(err, "%s: cannot read or parse as JSON: %s", path, json_util_get_last_err());
    json_object *model, *vocab, *merges, *added = NULL;
    if (!json_object_object_get_ex(root, "model", &model) || !json_object_object_get_ex(model, "vocab", &vocab) ||
        !json_object_is_type(vocab, json_type_object) || !json_object_object_get_ex(model, "merges", &merges) ||
        !json_object_is_type(merges, json_type_array)) {
        json_object_put(root);
        return ds4_error_set(err, "%s: not a BPE tokenizer.json (model.vocab / model.merges missing)", path);
    }
    json_object_object_get_ex(root, "added_tokens", &added);
    size_t nm = json_object_array_length(merges);
    if (alloc_vocab(v, V4_VOCAB, nm, err)) {
        json_object_put(root);
        return -1;
    }
    int rc = 0;
    json_object_object_foreach(vocab, key, val)
    {
        int64_t id = json_object_get_int64(val);
        if (id < 0 || id >= V4_BPE_IDS) continue; /* ids above the BPE range come from the V4 layout */
        if (set_token(v, (size_t)id, key, strlen(key), 1)) goto oom;
    }
    if (added && json_object_is_type(added, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(added); i++) {
            json_object *t = json_object_array_get_idx(added, i), *jid, *jc, *js;
            if (!json_object_object_get_ex(t, "id", &jid) || !json_object_object_get_ex(t, "content", &jc)) continue;
            int64_t id = json_object_get_int64(jid);
            if (id < 0 || id >= V4_VOCAB) continue;
            bool special = json_object_object_get_ex(t, "special", &js) && json_object_get_boolean(js);
            const char *c = json_object_get_string(jc);
            if (set_token(v, (size_t)id, c, strlen(c), special ? 3 : 4)) goto oom;
        }
    }
    /* The V4 specials at their V4 ids; a copy of one elsewhere becomes a
     * placeholder so that every special string stays unique. */
    bool *dup = calloc(V4_VOCAB, sizeof *dup);
    if (!dup) goto oom;
    for (int k = 0; k < 7; k++) {
        for (size_t id = 0; id < V4_VOCAB; id++)
            if (v->tokens[id] && (int32_t)id != v4_special_ids[k] && !strcmp(v->tokens[id], ds4_specials[k])) {
                free(v->tokens[id]);
                v->tokens[id] = NULL;
                dup[id] = true;
            }
        if (set_token(v, (size_t)v4_special_ids[k], ds4_specials[k], strlen(ds4_specials[k]), 3)) {
            free(dup);
            goto oom;
        }
    }
    for (size_t id = 0; id < V4_VOCAB; id++) {
        if (v->tokens[id]) continue;
        if (id < V4_BPE_IDS && dup[id]) {
            char ph[64];
            snprintf(ph, sizeof ph, "<\xef\xbd\x9c" "duplicate\xe2\x96\x81special\xe2\x96\x81%zu\xef\xbd\x9c>", id);
            if (set_token(v, id, ph, strlen(ph), 5)) {
                free(dup);
                goto oom;
            }
            continue;
        }
        if (id < V4_BPE_IDS) {
            free(dup);
            rc = ds4_error_set(err, "%s: vocabulary has no token with id %zu", path, id);
            goto fail;
        }
        char ph[64];
        snprintf(ph, sizeof ph, "<\xef\xbd\x9cplace\xe2\x96\x81holder\xe2\x96\x81no\xe2\x96\x81%zu\xef\xbd\x9c>",
                 id - V4_BPE_IDS);
        if (set_token(v, id, ph, strlen(ph), 5)) {
            free(dup);
            goto oom;
        }
    }
    free(dup);
    for (size_t i = 0; i < nm; i++) {
        v->merges[i] = merge_string(json_object_array_get_idx(merges, i));
        if (!v->merges[i]) {
            rc = ds4_error_set(err, "%s: merge %zu is neither \"A B\" nor [\"A\", \"B\"]", path, i);
            goto fail;
        }
    }
    v->bos = 0;
    v->eos = 1;
    json_object_put(root);
    return 0;
oom:
    rc = ds4_error_set(err, "out of memory");
fail:
    json_object_put(root);
    mk_vocab_free(v);
    return rc;
}
