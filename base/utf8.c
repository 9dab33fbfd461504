/* utf8.c — the lenient UTF-8 reader: every byte sequence decodes, one
 * character or one invalid byte at a time. */
#include "base/utf8.h"

#include <stdbool.h>

size_t utf8_seq_len(unsigned char b)
{
    if (b < 0xC2) return 1;
    if (b < 0xE0) return 2;
    if (b < 0xF0) return 3;
    if (b < 0xF5) return 4;
    return 1;
}

size_t utf8_complete_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char b = u[n - back];
        if ((b & 0xC0) == 0x80) continue; /* continuation: look further back */
        size_t len = utf8_seq_len(b);
        return len > back ? n - back : n;
    }
    return n;
}

void utf8_append_valid(strbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t run = i, k = 0;
        uint32_t cp = 0;
        while (i < n && (k = utf8_decode(u + i, n - i, &cp), cp != UTF8_INVALID)) i += k;
        sb_append(b, s + run, i - run);
        if (i < n) {
            sb_append(b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
}

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    size_t len = utf8_seq_len(b);
    if (len == 1 || len > n) { *cp = UTF8_INVALID; return 1; }
    uint32_t v = b & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = UTF8_INVALID; return 1; }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    bool bad = (len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
               (len == 4 && (v < 0x10000 || v > 0x10FFFF));
    if (bad) { *cp = UTF8_INVALID; return 1; }
    *cp = v;
    return len;
}
