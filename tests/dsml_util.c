/* dsml_util.c — see dsml_util.h. */
#include "tests/dsml_util.h"
#include "tests/test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const dsml_test_schemas[] = {
    "{\"name\":\"read\",\"description\":\"Read a file\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"start_line\":{\"type\":\"integer\"},\"max_lines\":{\"type\":\"integer\"},"
    "\"whole\":{\"type\":\"boolean\"}},\"required\":[\"path\"]}}",
    "{\"name\":\"edit\",\"description\":\"Edit a file\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"old\":{\"type\":\"string\"},\"new\":{\"type\":\"string\"}},"
    "\"required\":[\"path\",\"old\",\"new\"]}}",
    "{\"name\":\"bash\",\"description\":\"Run a command\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"command\":{\"type\":\"string\"},\"timeout_sec\":{\"type\":\"integer\"},\"refresh_sec\":{\"type\":\"number\"}},"
    "\"required\":[\"command\"]}}",
    "{\"name\":\"bash_status\",\"description\":\"Job status\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"job\":{\"type\":\"integer\"}},\"required\":[\"job\"]}}",
    "{\"name\":\"list\",\"description\":\"List a directory\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"path\":{\"type\":\"string\"},\"depth\":{\"type\":[\"integer\",\"string\"]}}}}",
};
const size_t dsml_test_n_schemas = sizeof dsml_test_schemas / sizeof dsml_test_schemas[0];

static dsml_schema *g_schema;

static void free_schema_at_exit(void)
{
    dsml_schema_free(g_schema);
    g_schema = NULL;
}

dsml_schema *dsml_test_schema(void)
{
    if (g_schema) return g_schema;
    ds4_error err = { "" };
    g_schema = dsml_schema_new(dsml_test_schemas, dsml_test_n_schemas, &err);
    if (!g_schema) FAIL("schema: %s", err.msg);
    atexit(free_schema_at_exit);
    return g_schema;
}

void dsml_log_event(void *ud, const dsml_event *ev)
{
    dsml_log *l = ud;
    switch (ev->type) {
    case DSML_EV_THINK: sb_append(&l->think, ev->text, ev->len); break;
    case DSML_EV_THINK_END: l->think_end++; sb_puts(&l->seq, "THINK_END "); break;
    case DSML_EV_TEXT: sb_append(&l->text, ev->text, ev->len); break;
    case DSML_EV_BLOCK: l->blocks++; sb_puts(&l->seq, "BLOCK "); break;
    case DSML_EV_CALL: l->calls++; sb_printf(&l->seq, "CALL(%s) ", ev->name); break;
    case DSML_EV_PARAM:
        sb_printf(&l->seq, "PARAM(%s) ", ev->name);
        sb_printf(&l->values, "%s=", ev->name);
        break;
    case DSML_EV_VALUE: sb_append(&l->values, ev->text, ev->len); break;
    case DSML_EV_CALL_END:
        l->call_ends++;
        sb_printf(&l->seq, "END(%s,%.*s) ", ev->name, (int)ev->len, ev->text);
        sb_puts(&l->values, ";");
        break;
    case DSML_EV_DONE: l->done++; sb_puts(&l->seq, "DONE "); break;
    case DSML_EV_ERROR: l->errors++; sb_printf(&l->seq, "ERROR(%.*s) ", (int)ev->len, ev->text); break;
    }
}

void dsml_log_free(dsml_log *l)
{
    sb_free(&l->think);
    sb_free(&l->text);
    sb_free(&l->seq);
    sb_free(&l->values);
}

typedef struct parser_cell {
    dsml_parser *p;
    dsml_log *log;
    struct parser_cell *next;
} parser_cell;
static parser_cell *g_parsers;

static void free_parsers(void)
{
    while (g_parsers) {
        parser_cell *n = g_parsers->next;
        dsml_parser_free(g_parsers->p);
        free(g_parsers);
        g_parsers = n;
    }
}

dsml_parser *dsml_parse_chunked(const dsml_schema *s, bool thinking, const char *text, size_t len,
                                size_t chunk, dsml_log *log)
{
    if (!g_parsers) atexit(free_parsers);
    dsml_parser *p = dsml_parser_new(s, thinking, dsml_log_event, log);
    parser_cell *c = malloc(sizeof *c);
    if (!c) abort();
    c->p = p;
    c->log = log;
    c->next = g_parsers;
    g_parsers = c;
    if (!chunk) chunk = len ? len : 1;
    for (size_t i = 0; i < len; i += chunk) dsml_feed(p, text + i, len - i < chunk ? len - i : chunk);
    dsml_finish(p);
    return p;
}

/* ---- synthetic vocabulary ----------------------------------------------------- */

static const char *const pieces[] = {
    /* DSML shapes (doc/model.md §14) */
    "<", "</", "tool", "_c", "alls", ">\n", ">", "\n", "\n\n", "inv", "oke", " name", "=\"", "\"", "\">",
    "\">\n", " string", "true", "false", "parameter", "parameter>\n", "parameter>", "tool_calls", "invoke",
    "read", "edit", "bash", "_status", "list", "path", "old", "new", "command", "job", "depth", "max",
    "_lines", "start", "_line", "whole", "timeout", "_sec", "refresh", "re", "ad", "ba", "sh", "pa", "th",
    " ", "  ", "    ", "\t", "\r\n", "\">/", "\">\n\n", "=\"\"", "\"\"", ">>", "><", "<<", "\"/>",
    /* prose and code */
    " the", " a", " to", " of", " and", " is", " in", " file", " read", " path", " name", " tool", " call",
    "The", "I", " I", " will", " now", ".", ",", ":", ";", "(", ")", "{", "}", "[", "]", "=", "==", " =",
    "int", " int", "return", " return", "main", "()", " {\n", "}\n", "    return", "#include", " <", "stdio",
    ".h", ">\n\n", "/tmp", "/x", ".c", "src", "/", "make", " test", "echo", " hello", "10", "1", "0", "42",
    " ｜", "｜", "DSML", "SML", "DS", "ML", "｜DS", " DSML", "<think", "think", "think>", "</div>", "div",
    "</d", "<!--", "&lt;", "&", "lt", ";\n", "\"\n", "\n}", " \n", "\n ", " \"", "\" ",
};

synth_vocab *synth_vocab_new(int extra, uint64_t seed)
{
    size_t n_pieces = sizeof pieces / sizeof pieces[0];
    synth_vocab *v = calloc(1, sizeof *v);
    if (!v) abort();
    int total = 256 + 7 + (int)n_pieces + extra;
    v->tok = calloc((size_t)total, sizeof *v->tok);
    v->len = calloc((size_t)total, sizeof *v->len);
    if (!v->tok || !v->len) abort();
    int n = 0;
    for (int b = 0; b < 256; b++) {
        v->tok[n] = malloc(2);
        v->tok[n][0] = (char)b;
        v->tok[n][1] = 0;
        v->len[n++] = 1;
    }
    static const char *const specials[] = {
        "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
        "<\xef\xbd\x9cUser\xef\xbd\x9c>", "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>", "<think>", "</think>", D,
    };
    int32_t *ids[] = { &v->bos, &v->eos, &v->user, &v->assistant, &v->think, &v->think_end, &v->dsml };
    for (int k = 0; k < 7; k++) {
        *ids[k] = n;
        v->tok[n] = strdup(specials[k]);
        v->len[n++] = strlen(specials[k]);
    }
    for (size_t k = 0; k < n_pieces; k++) {
        v->tok[n] = strdup(pieces[k]);
        v->len[n++] = strlen(pieces[k]);
    }
    /* Pseudo-random tokens shaped like a BPE vocabulary: mostly letters,
     * about half led by a space, some punctuation and UTF-8. */
    uint64_t st = seed ? seed : 0x9e3779b97f4a7c15ull;
    static const char alpha[] = "etaoinshrdlcumwfgypbvkjxqz_ETAOINSHRDLC0123456789";
    static const char punct[] = "<>/\"=.,;:(){}[]-+*&|!?#'";
    for (int k = 0; k < extra; k++) {
        char buf[32];
        size_t len = 0;
        st ^= st << 13; st ^= st >> 7; st ^= st << 17;
        int kind = (int)(st % 10);
        int want = 2 + (int)((st >> 8) % 9);
        if (kind < 5) buf[len++] = ' ';
        if (kind == 9) {
            static const char *const utf[] = { "\xe4\xbd\xa0", "\xe5\xa5\xbd", "\xc3\xa9", "\xef\xbc\x8c", "\xe2\x80\x9c" };
            const char *u = utf[(st >> 20) % 5];
            memcpy(buf + len, u, strlen(u));
            len += strlen(u);
        }
        while ((int)len < want) {
            st ^= st << 13; st ^= st >> 7; st ^= st << 17;
            char ch = (kind == 8 && len > 0) ? punct[st % (sizeof punct - 1)] : alpha[st % (sizeof alpha - 1)];
            buf[len++] = ch;
        }
        v->tok[n] = malloc(len + 1);
        memcpy(v->tok[n], buf, len);
        v->tok[n][len] = 0;
        v->len[n++] = len;
    }
    v->n = n;
    return v;
}

void synth_vocab_free(synth_vocab *v)
{
    if (!v) return;
    for (int i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok);
    free(v->len);
    free(v);
}

const char *synth_bytes(void *ud, int32_t id, size_t *len)
{
    synth_vocab *v = ud;
    *len = v->len[id];
    return v->tok[id];
}

int32_t synth_find(const synth_vocab *v, const char *s)
{
    size_t n = strlen(s);
    for (int i = 0; i < v->n; i++)
        if (v->len[i] == n && !memcmp(v->tok[i], s, n)) return i;
    return -1;
}

dsml_vocab *synth_dsml_vocab(const synth_vocab *v)
{
    int32_t control[] = { v->bos, v->user, v->assistant, v->think, v->think_end };
    return dsml_vocab_new(v->n, synth_bytes, (void *)v, v->eos, v->dsml, control, 5);
}
