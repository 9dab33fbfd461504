/* Streaming detokenizer: bytes out per token, incomplete UTF-8 held back. */
#include <string.h>

#include "engine/ds4.h"
#include "tests/test.h"
#include "tests/tok_util.h"

static bool valid_utf8(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t len = s[i] < 0x80 ? 1 : s[i] < 0xC2 ? 0 : s[i] < 0xE0 ? 2 : s[i] < 0xF0 ? 3 : s[i] < 0xF5 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

TEST(detok, holds_back_split_characters)
{
    ds4_tokenizer *t = tok_golden(); /* ids 0..255 are the single bytes */
    ds4_detok d = { .npending = 0 };
    char out[DS4_DETOK_MAX];
    static const int32_t grin[] = { 0xF0, 0x9F, 0x98, 0x80 };
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ds4_detok_feed(&d, t, grin[i], out), 0);
    CHECK_EQ_INT(ds4_detok_feed(&d, t, grin[3], out), 4);
    CHECK(!memcmp(out, "\xF0\x9F\x98\x80", 4));
    CHECK_EQ_INT(ds4_detok_flush(&d, out), 0);

    /* "é" then "a": the first byte waits, both come out together */
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0xC3, out), 0);
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0xA9, out), 2);
    CHECK(!memcmp(out, "\xC3\xA9", 2));
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 'a', out), 1);
    CHECK_EQ_INT(out[0], 'a');
}

TEST(detok, invalid_sequences_pass_through)
{
    ds4_tokenizer *t = tok_golden();
    ds4_detok d = { .npending = 0 };
    char out[DS4_DETOK_MAX];
    /* a lead byte followed by ASCII is not a character: both bytes go out */
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0xE4, out), 0);
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 'a', out), 2);
    CHECK(!memcmp(out, "\xE4" "a", 2));
    /* a stray continuation byte is emitted at once */
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0x80, out), 1);
    CHECK_EQ_INT((unsigned char)out[0], 0x80);
    /* an unfinished sequence at the end comes out on flush */
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0xF0, out), 0);
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 0x9F, out), 0);
    CHECK_EQ_INT(ds4_detok_flush(&d, out), 2);
    CHECK(!memcmp(out, "\xF0\x9F", 2));
    CHECK_EQ_INT(d.npending, 0);
    /* an id outside the vocabulary adds nothing */
    CHECK_EQ_INT(ds4_detok_feed(&d, t, 99999, out), 0);
}

TEST(detok, specials_are_their_text)
{
    ds4_tokenizer *t = tok_golden();
    ds4_detok d = { .npending = 0 };
    char out[DS4_DETOK_MAX];
    size_t n = ds4_detok_feed(&d, t, ds4_token_special(t, DS4_TOK_THINK_END), out);
    CHECK_EQ_INT(n, 8);
    CHECK(!memcmp(out, "</think>", 8));
    n = ds4_detok_feed(&d, t, ds4_token_special(t, DS4_TOK_DSML), out);
    CHECK_EQ_INT(n, 10);
    CHECK(!memcmp(out, "\xef\xbd\x9c" "DSML\xef\xbd\x9c", 10));
}

TEST(detok, stream_reassembles_text_in_valid_chunks)
{
    ds4_tokenizer *t = tok_v3();
    const char *text = "Perch\xc3\xa9 \xe6\xaf\x95\xe8\x80\x81\xe5\xb8\x88 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9"
                       "\xe2\x80\x8d\xf0\x9f\x91\xa7 \xf0\x9f\x87\xae\xf0\x9f\x87\xb9 \xe1\x83\x90\xe1\x83\x91 \xd8\xa7"
                       "\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xf0\xa0\x80\x80\xf0\xaa\x9a\xa5 done";
    size_t n;
    int32_t *ids = tok_ids(t, text, strlen(text), false, &n);
    ds4_detok d = { .npending = 0 };
    char out[DS4_DETOK_MAX], all[1024];
    size_t at = 0, held = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k = ds4_detok_feed(&d, t, ids[i], out);
        CHECK_MSG(valid_utf8(out, k), "chunk %zu is not valid UTF-8", i);
        held += d.npending > 0;
        memcpy(all + at, out, k);
        at += k;
    }
    CHECK_EQ_INT(ds4_detok_flush(&d, out), 0);
    CHECK_EQ_INT(at, strlen(text));
    CHECK(!memcmp(all, text, at));
    CHECK(held > 0); /* the text does split characters across tokens */
}
