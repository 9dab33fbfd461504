/* unicode.h — the character classes of the DeepSeek pre-tokenizer and a
 * lenient UTF-8 decoder.
 *
 * The classes are the Unicode general-category groups L, M, N, P, S and the
 * whitespace set \s exactly as the reference tokenizer's JavaScript regexes
 * see them (tables generated from node by build-aux/gen-unicode-tables.js).
 */
#ifndef DS4CL_UNICODE_H
#define DS4CL_UNICODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

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

/* Code point standing for one byte that is not part of valid UTF-8. */
#define UNICODE_INVALID 0xFFFFFFFFu

extern const uint32_t unicode_class_ranges[];
extern const size_t unicode_class_nranges;
extern const char unicode_tables_version[];

/* Class bits (category | UC_SPACE) of a code point; UNICODE_INVALID and
 * anything above U+10FFFF are UC_OTHER. */
unsigned unicode_class(uint32_t cp);

/* Decodes one character of s[0..n) (n >= 1) into *cp and returns its byte
 * length. Overlong forms, surrogates, values above U+10FFFF and truncated
 * or stray bytes decode as one byte with *cp = UNICODE_INVALID. */
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Length of the complete UTF-8 sequence that starts with lead byte b
 * (1 for ASCII and for bytes that cannot start a sequence). */
size_t utf8_seq_len(unsigned char b);

/* Length of s[0..n) up to an incomplete but so far well-formed UTF-8
 * sequence at its end (n when it ends on a character boundary): what can
 * be shown before the bytes that complete the last character arrive. */
size_t utf8_complete_len(const char *s, size_t n);

/* Appends s[0..n) to b as valid UTF-8: every byte utf8_decode cannot read
 * as part of a character (stray, truncated, overlong, surrogate) becomes
 * one U+FFFD. For text bound for JSON, which must be valid UTF-8 (a model
 * can write any bytes). Cut where utf8_complete_len says, the pieces come
 * out as the whole would. */
void utf8_append_valid(strbuf *b, const char *s, size_t n);

#endif
