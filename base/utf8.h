/* utf8.h — reading UTF-8 as it comes, for every module that handles text
 * a model or a person wrote: a lenient decoder (bytes that are not UTF-8
 * decode one at a time, never stopping the reader), where a stream can be
 * cut without splitting a character, and a copy that is valid UTF-8
 * whatever the input was. */
#ifndef DS4CL_UTF8_H
#define DS4CL_UTF8_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Code point standing for one byte that is not part of valid UTF-8. */
#define UTF8_INVALID 0xFFFFFFFFu

/* Decodes one character of s[0..n) (n >= 1) into *cp and returns its byte
 * length. Overlong forms, surrogates, values above U+10FFFF and truncated
 * or stray bytes decode as one byte with *cp = UTF8_INVALID. */
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
