/* detok.c — streaming detokenizer: token bytes out as they come, except a
 * UTF-8 sequence cut by a token boundary, which waits for the token that
 * completes it (a terminal must never see half a character). */
#include <string.h>

#include "engine/ds4.h"
#include "engine/unicode.h"

/* Start of an incomplete but so far well-formed UTF-8 sequence at the end
 * of s[0..n), or n when the text ends on a character boundary. */
static size_t incomplete_tail(const unsigned char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char b = s[n - back];
        if ((b & 0xC0) == 0x80) continue; /* continuation: look further back */
        size_t len = utf8_seq_len(b);
        return len > back ? n - back : n;
    }
    return n;
}

size_t ds4_detok_feed(ds4_detok *d, const ds4_tokenizer *t, int32_t id, char *out)
{
    size_t len = 0;
    const char *bytes = ds4_token_bytes(t, id, &len);
    if (!bytes) len = 0;
    size_t n = (size_t)d->npending;
    memcpy(out, d->pending, n);
    if (len) memcpy(out + n, bytes, len);
    n += len;
    size_t keep = incomplete_tail((const unsigned char *)out, n);
    d->npending = (int)(n - keep);
    memcpy(d->pending, out + keep, n - keep);
    return keep;
}

size_t ds4_detok_flush(ds4_detok *d, char *out)
{
    size_t n = (size_t)d->npending;
    memcpy(out, d->pending, n);
    d->npending = 0;
    return n;
}
