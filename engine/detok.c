/* detok.c — streaming detokenizer: token bytes out as they come, except a
 * UTF-8 sequence cut by a token boundary, which waits for the token that
 * completes it (a terminal must never see half a character). */
#include <string.h>

#include "engine/ds4.h"
#include "base/utf8.h"

size_t ds4_detok_feed(ds4_detok *d, const ds4_tokenizer *t, int32_t id, char *out)
{
    size_t len = 0;
    const char *bytes = ds4_token_bytes(t, id, &len);
    if (!bytes) len = 0;
    size_t n = (size_t)d->npending;
    memcpy(out, d->pending, n);
    if (len) memcpy(out + n, bytes, len);
    n += len;
    size_t keep = utf8_complete_len(out, n);
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
