/* libFuzzer target for the server's request head check (the bytes a
 * client sends before libmicrohttpd sees them).
 *
 * The input is what came on a connection so far. A bad head must carry a
 * status the server sends and a reason; a sound one a request line and the
 * end of the head; and the verdict must not go back on what came: what
 * makes a head incomplete leaves every earlier part of it incomplete, and
 * a part found whole never turns incomplete as more comes. Seeds
 * (tests/fuzz/seeds/serve_head/) are the heads the API clients send. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/http_door.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static sv_head_verdict check(const uint8_t *data, size_t n)
{
    sv_head h;
    memset(&h, 0, sizeof h);
    sv_head_verdict v = sv_head_check((const char *)data, n, 4096, &h);
    if (v == SV_HEAD_BAD) {
        unsigned s = h.status;
        if ((s != 400 && s != 413 && s != 414 && s != 431 && s != 501) || !h.why[0]) abort();
    } else if (v == SV_HEAD_OK) {
        if (!h.what[0] || !h.path[0] || (!memmem(data, n, "\n\r\n", 3) && !memmem(data, n, "\n\n", 2))) abort();
    } else if (v != SV_HEAD_MORE) {
        abort();
    }
    if (memchr(h.what, '\n', sizeof h.what) || memchr(h.path, '\n', sizeof h.path)) abort();
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sv_head_verdict whole = check(data, size);
    for (size_t cut = size / 2; cut < size; cut += (size - cut + 1) / 2) {
        sv_head_verdict part = check(data, cut);
        if (whole == SV_HEAD_MORE && part != SV_HEAD_MORE) abort();
        if (part == SV_HEAD_OK && whole == SV_HEAD_MORE) abort();
    }
    return 0;
}
