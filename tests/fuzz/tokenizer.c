/* Fuzz target: any bytes, trusted or not, tokenize into ids whose bytes
 * are the input again; untrusted text never yields a special id; the
 * streaming detokenizer gives the same bytes back. The vocabulary is a
 * synthetic byte-level one with merges that chain into long tokens, so
 * both merge paths (short and long pieces) run. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/tokenizer.h"

static ds4_tokenizer *tok;

static size_t byte_symbol(unsigned b, char *out)
{
    unsigned cp = b;
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    if (!printable) {
        unsigned k = 0;
        for (unsigned x = 0; x < b; x++) k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 0x100 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static ds4_tokenizer *build(void)
{
    enum { MAXT = 2048 };
    static char store[MAXT][64];
    static const char *toks[MAXT], *merges[MAXT];
    static size_t tlen[MAXT], mlen[MAXT];
    static char mstore[MAXT][130];
    size_t nt = 0, nm = 0;
    for (unsigned b = 0; b < 256; b++) {
        tlen[nt] = byte_symbol(b, store[nt]);
        toks[nt] = store[nt];
        nt++;
    }
    /* merges: every pair of twelve letters, then a chain "et"+"a"+"o"... */
    const char *alpha = "etaoinshrdlu";
    for (const char *a = alpha; *a; a++)
        for (const char *b = alpha; *b; b++) {
            snprintf(mstore[nm], sizeof mstore[nm], "%c %c", *a, *b);
            merges[nm] = mstore[nm];
            mlen[nm] = 3;
            nm++;
            store[nt][0] = *a;
            store[nt][1] = *b;
            tlen[nt] = 2;
            toks[nt] = store[nt];
            nt++;
        }
    /* the chain reaches 40 bytes: pieces longer than the short-piece limit */
    char chain[64] = "et";
    for (int i = 2; i < 40; i++) {
        char next = alpha[i % 12];
        snprintf(mstore[nm], sizeof mstore[nm], "%s %c", chain, next);
        merges[nm] = mstore[nm];
        mlen[nm] = strlen(mstore[nm]);
        nm++;
        size_t l = strlen(chain);
        chain[l] = next;
        chain[l + 1] = 0;
        memcpy(store[nt], chain, l + 1);
        tlen[nt] = l + 1;
        toks[nt] = store[nt];
        nt++;
    }
    for (int k = 0; k < DS4_TOK__COUNT; k++) {
        toks[nt] = tokenizer_special_text((ds4_special)k);
        tlen[nt] = strlen(toks[nt]);
        nt++;
    }
    ds4_error err;
    ds4_tokenizer *t = tokenizer_build(toks, tlen, nt, merges, mlen, nm, &err);
    if (!t) {
        fprintf(stderr, "fuzz vocabulary: %s\n", err.msg);
        abort();
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok) tok = build();
    bool trusted = size && (data[0] & 1);
    const char *text = (const char *)data + (size ? 1 : 0);
    size_t len = size ? size - 1 : 0;
    ds4_tokens out = { 0 };
    if ((trusted ? ds4_tokenize_trusted(tok, text, len, &out) : ds4_tokenize(tok, text, len, &out)) != 0) abort();
    size_t at = 0, specials = 0;
    for (size_t i = 0; i < out.n; i++) {
        size_t l;
        const char *b = ds4_token_bytes(tok, out.ids[i], &l);
        if (!b || at + l > len || memcmp(text + at, b, l)) abort();
        at += l;
        specials += tokenizer_is_special(tok, out.ids[i]);
    }
    if (at != len || (!trusted && specials)) abort();
    ds4_detok d = { .npending = 0 };
    char buf[DS4_DETOK_MAX];
    at = 0;
    for (size_t i = 0; i < out.n; i++) {
        size_t k = ds4_detok_feed(&d, tok, out.ids[i], buf);
        if (at + k > len || memcmp(text + at, buf, k)) abort();
        at += k;
    }
    size_t k = ds4_detok_flush(&d, buf);
    if (at + k != len || memcmp(text + at, buf, k)) abort();
    ds4_tokens_free(&out);
    return 0;
}
