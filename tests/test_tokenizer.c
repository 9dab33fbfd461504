/* Tokenizer: pre-tokenizer pieces, published vectors, the golden tiny
 * model's ids, the trust boundary, vocabulary validation, and a
 * differential test against the npm reference tokenizer on > 1 MB. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "engine/npm_vocab.h"
#include "engine/pretok.h"
#include "engine/tokenizer.h"
#include "tests/gguf_util.h"
#include "tests/test.h"
#include "tests/tok_corpus.h"
#include "tests/tok_util.h"

/* ---- pre-tokenizer --------------------------------------------------------- */

typedef struct {
    char buf[4096];
    size_t len;
    size_t total;
} pieces;

static void collect(void *ud, const unsigned char *p, size_t n)
{
    pieces *c = ud;
    c->total += n;
    if (c->len + n + 1 < sizeof c->buf) {
        memcpy(c->buf + c->len, p, n);
        c->len += n;
        c->buf[c->len++] = '|';
        c->buf[c->len] = 0;
    }
}

/* Splits text and returns the pieces joined by '|' (each followed by one). */
static const char *split(const char *text)
{
    pieces c = { .len = 0 };
    c.buf[0] = 0;
    pretok_split((const unsigned char *)text, strlen(text), collect, &c);
    CHECK_EQ_INT(c.total, strlen(text));
    return test_strdup(c.buf);
}

TEST(tokenizer, pretokenizer_pieces)
{
    static const char *const cases[][2] = {
        { "    int", "   | int|" },
        { "x  ->", "x| | ->|" },
        { ">;\n", ">;\n|" },
        { "a\n\n  b", "a|\n\n| | b|" },
        { "2048", "204|8|" },
        { "is 128", "is| |128|" },
        { "\xe2\x80\x9cHello\xe2\x80\x9d, he said", "\xe2\x80\x9c|Hello|\xe2\x80\x9d,| he| said|" },
        { "\xe3\x80\x82\n", "\xe3\x80\x82\n|" },
        { "tab\xc2\xa0\xc2\xa0nbsp", "tab|\xc2\xa0|\xc2\xa0nbsp|" },
        { "a\xe3\x80\x80\xe3\x80\x80" "b", "a|\xe3\x80\x80|\xe3\x80\x80" "b|" },
        { "a  \xe4\xbd\xa0\xe5\xa5\xbd", "a|  |\xe4\xbd\xa0\xe5\xa5\xbd|" },
        { "x  \x01", "x| | |\x01|" },
        { "Hello\xe4\xbd\xa0\xe5\xa5\xbd", "Hello|\xe4\xbd\xa0\xe5\xa5\xbd|" },
        { "snprintf(buf, sizeof(buf), \"%d\", value", "snprintf|(buf|,| sizeof|(buf|),| \"%|d|\",| value|" },
        { "it's .com _init", "it|'s| .|com| _|init|" },
        { "\r\n\r\nx", "\r\n\r\n|x|" },
        { "a \n b", "a| \n| b|" },
        { "end  ", "end|  |" },
        /* digits: Arabic-Indic and fullwidth are \p{N} too; ½ and ² as well */
        { "\xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4", "\xd9\xa1\xd9\xa2\xd9\xa3|\xd9\xa4|" },
        { "x\xc2\xb2", "x|\xc2\xb2|" },
        /* a ZWJ between two emoji matches nothing and stands alone */
        { "\xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9", "\xf0\x9f\x91\xa8|\xe2\x80\x8d|\xf0\x9f\x91\xa9|" },
        /* control characters: unmatched runs gather, one before a letter joins it */
        { "\x01\x02" "ab\x03", "\x01|\x02" "ab|\x03|" },
        /* U+FEFF is \s for JavaScript; U+0085 is not */
        { "a\xef\xbb\xbf\xef\xbb\xbf", "a|\xef\xbb\xbf\xef\xbb\xbf|" },
        { "a\xc2\x85\xc2\x85" "b", "a|\xc2\x85|\xc2\x85" "b|" },
        /* the kana blocks hold punctuation, symbols and unassigned code points */
        { "\xe3\x83\x87\xe3\x83\x8b\xe3\x82\xb9\xe3\x83\xbb\xe3\x83\xaa", "\xe3\x83\x87\xe3\x83\x8b\xe3\x82\xb9|\xe3\x83\xbb|\xe3\x83\xaa|" },
        { "\xe3\x83\xb4\xe3\x82\x98\xe3\x83\x95\xe3\x82\x97\xe3\x81\x84", "\xe3\x83\xb4|\xe3\x82\x98\xe3\x83\x95|\xe3\x82\x97\xe3\x81\x84|" },
        /* invalid UTF-8 bytes behave like unassigned characters */
        { "ab\xff\xfe" "cd", "ab|\xff|\xfe" "cd|" },
        { "", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) CHECK_STR_EQ(split(cases[i][0]), cases[i][1]);
}

/* ---- golden tiny model --------------------------------------------------- */

static json_object *golden_examples(json_object **root)
{
    const char *path = test_golden_path("A/case.json");
    if (!path) SKIP("golden A/case.json not present");
    *root = json_object_from_file(path);
    CHECK(*root != NULL);
    json_object *ex;
    CHECK(json_object_object_get_ex(*root, "tokenization_examples", &ex));
    return ex;
}

static int32_t *json_ids(json_object *arr, size_t *n)
{
    *n = json_object_array_length(arr);
    int32_t *ids = test_alloc(*n * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = json_object_get_int(json_object_array_get_idx(arr, i));
    return ids;
}

TEST(tokenizer, golden_raw_and_rendered)
{
    ds4_tokenizer *t = tok_golden();
    CHECK_EQ_INT(ds4_vocab_size(t), 311);
    static const int32_t specials[DS4_TOK__COUNT] = { 304, 305, 306, 307, 308, 309, 310 };
    for (int k = 0; k < DS4_TOK__COUNT; k++) CHECK_EQ_INT(ds4_token_special(t, (ds4_special)k), specials[k]);
    json_object *root, *ex = golden_examples(&root);
    int checked = 0;
    for (size_t i = 0; i < json_object_array_length(ex); i++) {
        json_object *e = json_object_array_get_idx(ex, i), *mode, *text, *ids;
        CHECK(json_object_object_get_ex(e, "mode", &mode) && json_object_object_get_ex(e, "text", &text) &&
              json_object_object_get_ex(e, "ids", &ids));
        const char *m = json_object_get_string(mode);
        bool trusted = !strcmp(m, "rendered");
        if (strcmp(m, "raw") && !trusted) continue; /* chat modes: test_chat.c */
        size_t nwant, ngot;
        int32_t *want = json_ids(ids, &nwant);
        const char *s = json_object_get_string(text);
        int32_t *got = tok_ids(t, s, strlen(s), trusted, &ngot);
        tok_check_ids(test_printf("golden %s example %zu", m, i), got, ngot, want, nwant);
        checked++;
    }
    json_object_put(root);
    CHECK(checked >= 5);
}

/* ---- published vectors (V3 vocabulary) --------------------------------------- */

TEST(tokenizer, v3_published_vectors)
{
    ds4_tokenizer *t = tok_v3();
    size_t n;
    int32_t *ids;
    CHECK_EQ_INT(ds4_vocab_size(t), 129280);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_BOS), 0);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_EOS), 1);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_USER), 128803);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_ASSISTANT), 128804);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_THINK), 128821);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_THINK_END), 128822);
    CHECK_EQ_INT(ds4_token_special(t, DS4_TOK_DSML), 128825);

    const char *s = "You are a helpful assistant";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS(s, ids, n, 3476, 477, 260, 11502, 22896);

    s = "Rispondi in italiano con una frase: chi era Ada Lovelace?";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS(s, ids, n, 52, 278, 4908, 75, 295, 89034, 399, 3919, 123003, 28, 23442, 9861, 63030, 47121,
                  317, 805, 33);

    s = "Complete the C statement with the next exact token only:\nreturn snprintf(buf, sizeof(buf), \"%d\", value";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS("snprintf prompt", ids, n, 41174, 270, 345, 6809, 418, 270, 2894, 6319, 17840, 1353, 1137, 3916,
                  6400, 15626, 97201, 14, 36220, 97201, 754, 51663, 70, 1760, 1990);

    s = "Answer with only the number: 2048 divided by 128 is";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS(s, ids, n, 7805, 418, 1353, 270, 1167, 28, 223, 11154, 26, 7203, 513, 223, 7833, 344);

    s = "Hello! \xe6\xaf\x95\xe8\x80\x81\xe5\xb8\x88\xef\xbc\x81" "1 + 1 = 2 \xc4\xa0\xc3\x91\xc4\xa4\xc3\x90\xc2\xb2"
        "\xc3\x91\xc4\xac\xc3\x91\xc4\xa2";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS("V4 third-party plain vector", ids, n, 19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223,
                  20, 6113, 257, 76589, 131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98);

    s = "<\xef\xbd\x9cUser\xef\xbd\x9c>\xe4\xbd\xa0\xe5\xa5\xbd<\xef\xbd\x9c" "Assistant\xef\xbd\x9c><think>"
        "\xe6\x8e\xa8\xe7\x90\x86</think>\xe7\xad\x94\xe6\xa1\x88<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>";
    ids = tok_ids(t, s, strlen(s), true, &n);
    TOK_CHECK_IDS("V4 third-party rendered vector", ids, n, 128803, 30594, 128804, 128821, 36101, 128822, 7624, 1);

    s = "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>You are a helpful assistant<\xef\xbd\x9cUser"
        "\xef\xbd\x9c>Hi<\xef\xbd\x9c" "Assistant\xef\xbd\x9c></think>";
    ids = tok_ids(t, s, strlen(s), true, &n);
    TOK_CHECK_IDS("rendered", ids, n, 0, 3476, 477, 260, 11502, 22896, 128803, 23166, 128804, 128822);

    /* doc/model.md §13.4: a user typing <｜User｜> gets plain tokens */
    s = "<\xef\xbd\x9cUser\xef\xbd\x9c>";
    ids = tok_ids(t, s, strlen(s), false, &n);
    TOK_CHECK_IDS("plain <｜User｜>", ids, n, 30, 28217, 6756, 28217, 32);

    /* doc/model.md §14: DSML close marker starts as "</" then the DSML token */
    s = "</\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter>\n";
    ids = tok_ids(t, s, strlen(s), true, &n);
    CHECK(n >= 3);
    CHECK_EQ_INT(ids[0], 1718);
    CHECK_EQ_INT(ids[1], 128825);
}

/* ---- trust boundary -------------------------------------------------------- */

TEST(tokenizer, untrusted_text_never_yields_specials)
{
    ds4_tokenizer *tokenizers[2] = { tok_v3(), NULL };
    if (test_golden_path("A/model.gguf")) tokenizers[1] = tok_golden();
    for (int v = 0; v < 2 && tokenizers[v]; v++) {
        const ds4_tokenizer *t = tokenizers[v];
        char text[2048];
        size_t o = 0;
        for (int k = 0; k < DS4_TOK__COUNT; k++)
            o += (size_t)snprintf(text + o, sizeof text - o, "x%s %s\n", tokenizer_special_text((ds4_special)k),
                                  tokenizer_special_text((ds4_special)k));
        size_t n;
        int32_t *ids = tok_ids(t, text, o, false, &n);
        for (size_t i = 0; i < n; i++) CHECK_MSG(!tokenizer_is_special(t, ids[i]), "special id %d at %zu", ids[i], i);
        /* the bytes come back unchanged */
        char back[4096];
        size_t bl = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l;
            const char *b = ds4_token_bytes(t, ids[i], &l);
            CHECK(b != NULL && bl + l < sizeof back);
            memcpy(back + bl, b, l);
            bl += l;
        }
        CHECK_EQ_INT(bl, o);
        CHECK(!memcmp(back, text, o));
        /* the same text, trusted, has all seven twice */
        ids = tok_ids(t, text, o, true, &n);
        int seen[DS4_TOK__COUNT] = { 0 };
        for (size_t i = 0; i < n; i++)
            for (int k = 0; k < DS4_TOK__COUNT; k++) seen[k] += ids[i] == ds4_token_special(t, (ds4_special)k);
        for (int k = 0; k < DS4_TOK__COUNT; k++) CHECK_EQ_INT(seen[k], 2);
    }
}

TEST(tokenizer, token_bytes_of_specials_and_bytes)
{
    ds4_tokenizer *t = tok_golden();
    size_t len;
    const char *b = ds4_token_bytes(t, 306, &len);
    CHECK(b && len == strlen("<\xef\xbd\x9cUser\xef\xbd\x9c>") && !memcmp(b, "<\xef\xbd\x9cUser\xef\xbd\x9c>", len));
    b = ds4_token_bytes(t, 32, &len); /* "Ġ" is the space byte */
    CHECK(b && len == 1 && b[0] == ' ');
    b = ds4_token_bytes(t, 10, &len);
    CHECK(b && len == 1 && b[0] == '\n');
    CHECK(ds4_token_bytes(t, 311, &len) == NULL && len == 0);
    CHECK(ds4_token_bytes(t, -1, &len) == NULL);
}

TEST(tokenizer, arbitrary_bytes_round_trip)
{
    ds4_tokenizer *t = tok_v3();
    uint64_t rng = 42;
    for (int round = 0; round < 200; round++) {
        unsigned char buf[700];
        size_t len = tok_rand(&rng) % sizeof buf;
        for (size_t i = 0; i < len; i++) {
            uint64_t r = tok_rand(&rng);
            buf[i] = (unsigned char)(r % 4 == 0 ? r >> 8 : r % 4 == 1 ? 0x80 + (r >> 8) % 64 : 'a' + (r >> 8) % 26);
        }
        size_t n;
        int32_t *ids = tok_ids(t, (const char *)buf, len, round % 2, &n);
        size_t at = 0;
        for (size_t i = 0; i < n; i++) {
            size_t l;
            const char *b = ds4_token_bytes(t, ids[i], &l);
            CHECK(b && at + l <= len && !memcmp(buf + at, b, l));
            at += l;
        }
        CHECK_EQ_INT(at, len);
    }
}

/* ---- vocabulary validation ------------------------------------------------- */

typedef struct {
    const char *tok[300];
    size_t tok_len[300];
    char store[300][8];
    const char *merge[4];
    size_t merge_len[4];
    size_t n_tok, n_merge;
} mini_vocab;

/* 256 byte symbols, "ab", then the seven specials; one merge "a b". */
static void mini_init(mini_vocab *v)
{
    memset(v, 0, sizeof *v);
    for (unsigned b = 0; b < 256; b++) {
        unsigned cp = b;
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        if (!printable) {
            unsigned k = 0;
            for (unsigned x = 0; x < b; x++) k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
            cp = 0x100 + k;
        }
        char *s = v->store[b];
        if (cp < 0x80) s[0] = (char)cp;
        else { s[0] = (char)(0xC0 | (cp >> 6)); s[1] = (char)(0x80 | (cp & 0x3F)); }
        v->tok[b] = s;
    }
    v->tok[256] = "ab";
    for (int k = 0; k < DS4_TOK__COUNT; k++) v->tok[257 + k] = tokenizer_special_text((ds4_special)k);
    v->n_tok = 257 + DS4_TOK__COUNT;
    for (size_t i = 0; i < v->n_tok; i++) v->tok_len[i] = strlen(v->tok[i]);
    v->merge[0] = "a b";
    v->n_merge = 1;
    v->merge_len[0] = 3;
}

static const char *mini_build_error(mini_vocab *v)
{
    for (size_t i = 0; i < v->n_merge; i++) v->merge_len[i] = strlen(v->merge[i]);
    ds4_error err = { { 0 } };
    ds4_tokenizer *t = tokenizer_build(v->tok, v->tok_len, v->n_tok, v->merge, v->merge_len, v->n_merge, &err);
    if (t) {
        ds4_tokenizer_free(t);
        return NULL;
    }
    return test_strdup(err.msg);
}

TEST(tokenizer, rejects_broken_vocabularies)
{
    mini_vocab v;
    mini_init(&v);
    CHECK(mini_build_error(&v) == NULL);

    mini_init(&v);
    v.tok['a'] = "zz";
    v.tok_len['a'] = 2;
    const char *e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "byte 0x61");

    mini_init(&v);
    v.merge[0] = "a c d";
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "not of the form");

    mini_init(&v);
    v.merge[0] = "ab b";
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "result of merge 0");

    mini_init(&v);
    v.merge[0] = "xy b";
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "left operand of merge 0");

    mini_init(&v);
    v.merge[0] = "a ";
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "not of the form");

    mini_init(&v);
    v.tok[257 + DS4_TOK_DSML] = "DSML";
    v.tok_len[257 + DS4_TOK_DSML] = 4;
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "DSML");
    CHECK_CONTAINS(e, "missing");

    mini_init(&v);
    v.n_tok = 100;
    e = mini_build_error(&v);
    CHECK(e != NULL);
    CHECK_CONTAINS(e, "vocabulary");

    /* merges work: "ab" becomes token 256, "aab" = a + ab */
    mini_init(&v);
    ds4_error err;
    ds4_tokenizer *t = tokenizer_build(v.tok, v.tok_len, v.n_tok, v.merge, v.merge_len, v.n_merge, &err);
    CHECK(t != NULL);
    ds4_tokens out = { 0 };
    ds4_tokenize(t, "aab", 3, &out);
    bool ok = out.n == 2 && out.ids[0] == 'a' && out.ids[1] == 256;
    ds4_tokens_free(&out);
    ds4_tokenizer_free(t);
    CHECK(ok);
}

/* ---- differential test against the npm reference ------------------------ */

static void report_mismatch(const ds4_tokenizer *t, const tok_corpus *c, size_t i, const int32_t *got, size_t ngot,
                            const int32_t *want, size_t nwant)
{
    size_t k = 0, at = 0;
    while (k < ngot && k < nwant && got[k] == want[k]) {
        size_t l;
        ds4_token_bytes(t, got[k], &l);
        at += l;
        k++;
    }
    size_t from = at > 40 ? at - 40 : 0, to = at + 40 < c->lens[i] ? at + 40 : c->lens[i];
    size_t lo = k > 4 ? k - 4 : 0;
    FAIL("text %zu (%s, %zu bytes): first difference at token %zu, byte %zu\n  context %s\n  ours %s\n  ref  %s",
         i, c->kinds[i], c->lens[i], k, at,
         json_object_to_json_string(json_object_new_string_len(c->texts[i] + from, (int)(to - from))),
         tok_format(got + lo, (ngot - lo) < 12 ? ngot - lo : 12), tok_format(want + lo, (nwant - lo) < 12 ? nwant - lo : 12));
}

TEST(tokenizer, differential_vs_reference_1mb)
{
    ds4_tokenizer *t = tok_v3();
    /* DS4CL_TOK_SEED / DS4CL_TOK_BYTES explore other corpora by hand. */
    const char *seed = getenv("DS4CL_TOK_SEED"), *bytes = getenv("DS4CL_TOK_BYTES");
    tok_corpus c = tok_corpus_build(seed ? strtoull(seed, NULL, 0) : 20240611,
                                    bytes ? strtoull(bytes, NULL, 0) : 1200000);
    CHECK(c.bytes >= 1000000);
    tok_oracle_result ref = tok_oracle("plain", (const char *const *)c.texts, c.lens, c.count);
    size_t tokens = 0, mismatches = 0, first = (size_t)-1;
    int32_t *fgot = NULL;
    size_t fngot = 0;
    for (size_t i = 0; i < c.count; i++) {
        ds4_tokens out = { 0 };
        CHECK(ds4_tokenize(t, c.texts[i], c.lens[i], &out) == 0);
        bool same = out.n == ref.n[i] && !memcmp(out.ids, ref.ids[i], out.n * sizeof *out.ids);
        tokens += out.n;
        if (!same) {
            if (!mismatches) {
                first = i;
                fgot = test_alloc(out.n * sizeof *fgot);
                memcpy(fgot, out.ids, out.n * sizeof *fgot);
                fngot = out.n;
            }
            mismatches++;
        }
        ds4_tokens_free(&out);
    }
    printf("%zu texts, %zu bytes, %zu tokens, %zu mismatching texts\n", c.count, c.bytes, tokens, mismatches);
    if (mismatches) report_mismatch(t, &c, first, fgot, fngot, ref.ids[first], ref.n[first]);
    CHECK(tokens > 100000);
}

/* Trusted text with the specials V3 also knows: the reference's own encode(). */
TEST(tokenizer, trusted_matches_reference_encode)
{
    ds4_tokenizer *t = tok_v3();
    const char *const texts[] = {
        "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>You are terse.<\xef\xbd\x9cUser\xef\xbd\x9c>"
        "Hi there\n\n<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Hello!<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "  <\xef\xbd\x9cUser\xef\xbd\x9c>  x<\xef\xbd\x9cUser\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>2024\n",
        "<\xef\xbd\x9cUser\xef\xbd\x9c",
        "\xef\xbd\x9c<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>\xef\xbd\x9c>",
        "\xe4\xbd\xa0\xe5\xa5\xbd<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>123<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>.\n",
    };
    size_t n = sizeof texts / sizeof texts[0], lens[8];
    for (size_t i = 0; i < n; i++) lens[i] = strlen(texts[i]);
    tok_oracle_result ref = tok_oracle("encode", texts, lens, n);
    for (size_t i = 0; i < n; i++) {
        size_t ng;
        int32_t *got = tok_ids(t, texts[i], lens[i], true, &ng);
        tok_check_ids(test_printf("trusted text %zu", i), got, ng, ref.ids[i], ref.n[i]);
    }
}

/* ---- opening model files and --dump-tokens ----------------------------------- */

TEST(tokenizer, open_rejects_bad_files)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("golden model A/model.gguf not present");
    size_t size;
    char *data = test_read_file(model, &size);
    CHECK(data != NULL && size > 200000);
    ds4_error err = { { 0 } };
    /* cut inside the metadata */
    const char *cut = test_tmp_path("cut.gguf");
    test_write_file(cut, data, 5000);
    CHECK(ds4_tokenizer_open(cut, &err) == NULL);
    CHECK_CONTAINS(err.msg, "cut.gguf");
    CHECK_CONTAINS(err.msg, "cannot fit");
    /* wrong magic */
    const char *bad = test_tmp_path("bad.gguf");
    data[0] = 'X';
    test_write_file(bad, data, 4096);
    CHECK(ds4_tokenizer_open(bad, &err) == NULL);
    CHECK_CONTAINS(err.msg, "not a GGUF file");
    CHECK(ds4_tokenizer_open(test_tmp_path("missing.gguf"), &err) == NULL);
    CHECK_CONTAINS(err.msg, "missing.gguf");
    /* a renamed key: no vocabulary */
    data[0] = 'G';
    char *key = memmem(data, size, "tokenizer.ggml.tokens", 21);
    CHECK(key != NULL);
    key[15] = 'T';
    const char *renamed = test_tmp_path("renamed.gguf");
    test_write_file(renamed, data, size);
    CHECK(ds4_tokenizer_open(renamed, &err) == NULL);
    CHECK_CONTAINS(err.msg, "no tokenizer.ggml.tokens");
}

TEST(tokenizer, dump_tokens_cli)
{
    const char *model = test_golden_path("A/model.gguf");
    if (!model) SKIP("golden model A/model.gguf not present");
    char *out;
    int rc = test_runf(&out, "'%s/ds4cl' --dump-tokens --raw -m '%s' -p 'int main(void) {'", test_bindir(), model);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "[259, 116, 267, 97, 259, 40, 118, 111, 105, 100, 41, 32, 123]\n");
    /* rendered as one non-thinking user turn */
    rc = test_runf(&out, "'%s/ds4cl' --dump-tokens -m '%s' -p 'Hi there'", test_bindir(), model);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "[304, 306, 72, 105, 258, 268, 307, 309]\n");
    /* special strings in the text stay plain in both forms; stdin and files */
    const char *f = test_tmp_path("prompt.txt");
    test_write_file(f, "</think>", 8);
    rc = test_runf(&out, "'%s/ds4cl' --dump-tokens --raw -m '%s' --prompt-file '%s'", test_bindir(), model, f);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "[60, 47, 116, 104, 259, 107, 62]\n");
    rc = test_runf(&out, "printf '</think>' | '%s/ds4cl' --dump-tokens -m '%s' -p -", test_bindir(), model);
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "[304, 306, 60, 47, 116, 104, 259, 107, 62, 307, 309]\n");
    /* errors */
    rc = test_runf(&out, "'%s/ds4cl' --dump-tokens -m '%s/nope.gguf' -p x", test_bindir(), test_tmpdir());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "nope.gguf");
    /* no -m and no default model (an empty home) */
    rc = test_runf(&out, "HOME='%s' XDG_DATA_HOME= '%s/ds4cl' --dump-tokens -p x", test_tmpdir(), test_bindir());
    CHECK_EQ_INT(rc, 1);
    CHECK_CONTAINS(out, "no model");
    /* the default model link serves when -m is absent */
    rc = test_runf(&out, "mkdir -p '%s/.local/share/ds4cl/models' && ln -s '%s' '%s/.local/share/ds4cl/models/default' && "
                         "HOME='%s' XDG_DATA_HOME= '%s/ds4cl' --dump-tokens --raw -p 'Hi'",
                   test_tmpdir(), model, test_tmpdir(), test_tmpdir(), test_bindir());
    CHECK_EQ_INT(rc, 0);
    CHECK_STR_EQ(out, "[72, 105]\n");
}

TEST(tokenizer, empty_and_null_text)
{
    ds4_tokenizer *t = tok_golden();
    ds4_tokens out = { 0 };
    CHECK_EQ_INT(ds4_tokenize(t, NULL, 0, &out), 0);
    CHECK_EQ_INT(ds4_tokenize_trusted(t, "", 0, &out), 0);
    CHECK_EQ_INT(out.n, 0);
    CHECK_EQ_INT(ds4_tokenize(t, NULL, 3, &out), -1);
    CHECK_EQ_INT(ds4_tokenize(NULL, "x", 1, &out), -1);
    CHECK_EQ_INT(ds4_token_special(NULL, DS4_TOK_BOS), -1);
    CHECK_EQ_INT(ds4_vocab_size(NULL), 0);
}

typedef struct {
    const ds4_tokenizer *t;
    const char *text;
    size_t len;
    ds4_tokens out;
} tok_job;

static void *tok_worker(void *arg)
{
    tok_job *j = arg;
    for (int r = 0; r < 20; r++) {
        ds4_tokens_truncate(&j->out, 0);
        ds4_tokenize_trusted(j->t, j->text, j->len, &j->out);
    }
    return NULL;
}

/* One tokenizer, several threads at once: same ids as one at a time. */
TEST(tokenizer, shared_across_threads)
{
    ds4_tokenizer *t = tok_golden();
    tok_corpus c = tok_corpus_build(5, 40000);
    enum { N = 4 };
    tok_job jobs[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        size_t k = (size_t)i * (c.count / N);
        jobs[i] = (tok_job){ t, c.texts[k], c.lens[k], { 0 } };
        CHECK(pthread_create(&th[i], NULL, tok_worker, &jobs[i]) == 0);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    bool same = true;
    for (int i = 0; i < N; i++) {
        ds4_tokens one = { 0 };
        ds4_tokenize_trusted(t, jobs[i].text, jobs[i].len, &one);
        same = same && one.n == jobs[i].out.n && !memcmp(one.ids, jobs[i].out.ids, one.n * sizeof *one.ids);
        ds4_tokens_free(&one);
        ds4_tokens_free(&jobs[i].out);
    }
    CHECK(same);
}

/* Without node/npm the reference vocabulary fails with a clear message;
 * once extracted, it is served from the cache without them. */
TEST(tokenizer, npm_vocab_errors_and_cache)
{
    char path[4096];
    ds4_error err = { { 0 } };
    setenv("XDG_CACHE_HOME", test_tmp_path("cache"), 1);
    setenv("PATH", test_tmp_path("nothing"), 1);
    CHECK_EQ_INT(npm_tokenizer_json_path(path, sizeof path, &err), -1);
    CHECK_CONTAINS(err.msg, "cannot run npm");
    CHECK_EQ_INT(npm_package_dir(path, sizeof path, &err), -1);
    CHECK_CONTAINS(err.msg, "npm");
    const char *json = test_tmp_path("cache/ds4cl/tokenizer-deepseek_v3-" NPM_VOCAB_VERSION ".json");
    test_write_file(json, "{}", 2);
    CHECK_EQ_INT(npm_tokenizer_json_path(path, sizeof path, &err), 0);
    CHECK_STR_EQ(path, json);
}

/* The vocabulary arrays must be arrays of strings, and both must exist. */
TEST(tokenizer, vocabulary_arrays_of_other_types_are_refused)
{
    static const char *const cases[][3] = {
        /* tokens type, merges present, expected message */
        { "int", "yes", "tokenizer.ggml.tokens is an array of INT32, not of strings" },
        { "str", "no", "the model has no tokenizer.ggml.merges" },
    };
    for (int c = 0; c < 2; c++) {
        gbuf b = { 0 };
        bool merges = !strcmp(cases[c][1], "yes");
        gb_header(&b, 3, 0, merges ? 2 : 1);
        gb_key(&b, "tokenizer.ggml.tokens", 9);
        if (!strcmp(cases[c][0], "int")) {
            gb_u32(&b, 5);
            gb_u64(&b, 2);
            gb_u32(&b, 1);
            gb_u32(&b, 2);
        } else {
            gb_u32(&b, 8);
            gb_u64(&b, 1);
            gb_str(&b, "a");
        }
        if (merges) {
            gb_key(&b, "tokenizer.ggml.merges", 9);
            gb_u32(&b, 8);
            gb_u64(&b, 0);
        }
        const char *path = test_tmp_path("types-%d.gguf", c);
        test_write_file(path, b.p, b.n);
        gb_free(&b);
        ds4_error err = { { 0 } };
        CHECK(ds4_tokenizer_open(path, &err) == NULL);
        CHECK_CONTAINS(err.msg, cases[c][2]);
        CHECK_CONTAINS(err.msg, path);
    }
}
