/* unicode.c — class lookup over the generated range table, with a flat
 * table for the Basic Multilingual Plane built once per process (almost all
 * text stays there, and the pre-tokenizer asks for every character). */
#include <pthread.h>
#include <stdbool.h>

#include "engine/unicode.h"

static unsigned char bmp_class[0x10000];
static pthread_once_t bmp_once = PTHREAD_ONCE_INIT;

static unsigned class_search(uint32_t cp)
{
    size_t lo = 0, hi = unicode_class_nranges; /* first entry starting above cp */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((unicode_class_ranges[mid] >> 4) <= cp) lo = mid + 1;
        else hi = mid;
    }
    return lo ? unicode_class_ranges[lo - 1] & 15u : UC_OTHER;
}

static void bmp_build(void)
{
    for (size_t i = 0; i < unicode_class_nranges; i++) {
        uint32_t start = unicode_class_ranges[i] >> 4;
        uint32_t end = i + 1 < unicode_class_nranges ? unicode_class_ranges[i + 1] >> 4 : 0x110000;
        if (start >= 0x10000) break;
        if (end > 0x10000) end = 0x10000;
        for (uint32_t cp = start; cp < end; cp++) bmp_class[cp] = (unsigned char)(unicode_class_ranges[i] & 15u);
    }
}

unsigned unicode_class(uint32_t cp)
{
    if (cp < 0x10000) {
        pthread_once(&bmp_once, bmp_build);
        return bmp_class[cp];
    }
    if (cp > 0x10FFFF) return UC_OTHER;
    return class_search(cp);
}

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
        while (i < n && (k = utf8_decode(u + i, n - i, &cp), cp != UNICODE_INVALID)) i += k;
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
    if (len == 1 || len > n) { *cp = UNICODE_INVALID; return 1; }
    uint32_t v = b & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) { *cp = UNICODE_INVALID; return 1; }
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    bool bad = (len == 3 && (v < 0x800 || (v >= 0xD800 && v <= 0xDFFF))) ||
               (len == 4 && (v < 0x10000 || v > 0x10FFFF));
    if (bad) { *cp = UNICODE_INVALID; return 1; }
    *cp = v;
    return len;
}
