/* unicode.h — the character classes of the DeepSeek pre-tokenizer.
 *
 * The classes are the Unicode general-category groups L, M, N, P, S and the
 * whitespace set \s exactly as the reference tokenizer's JavaScript regexes
 * see them (tables generated from node by build-aux/gen-unicode-tables.js).
 * The UTF-8 reader they are asked about is base/utf8.h.
 */
#ifndef DS4CL_UNICODE_H
#define DS4CL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/utf8.h"

enum {
    UC_OTHER = 0, /* Cc, Cf, Co, Cn, Zl/Zp/Zs outside \s ... and invalid bytes */
    UC_L = 1,
    UC_M = 2,
    UC_N = 3,
    UC_P = 4,
    UC_S = 5,
    UC_CATEGORY = 7, /* mask of the category part */
    UC_SPACE = 8,    /* flag: JavaScript \s */
};

extern const uint32_t unicode_class_ranges[];
extern const size_t unicode_class_nranges;
extern const char unicode_tables_version[];

/* Class bits (category | UC_SPACE) of a code point; UTF8_INVALID and
 * anything above U+10FFFF are UC_OTHER. */
unsigned unicode_class(uint32_t cp);

#endif
