/* unicode.c — class lookup over the generated range table, with a flat
 * table for the Basic Multilingual Plane built once per process (almost all
 * text stays there, and the pre-tokenizer asks for every character). */
#include <pthread.h>

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
