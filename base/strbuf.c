/* strbuf.c — growable NUL-terminated byte buffer. Allocation failure is
 * fatal (base.h's policy). */
#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void sb_reserve(strbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}

void sb_append(strbuf *b, const char *s, size_t n)
{
    sb_reserve(b, n);
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void sb_puts(strbuf *b, const char *s) { sb_append(b, s, strlen(s)); }

void sb_putc(strbuf *b, char c) { sb_append(b, &c, 1); }

void sb_vprintf(strbuf *b, const char *fmt, va_list ap)
{
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0) return;
    sb_reserve(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void sb_clear(strbuf *b)
{
    b->len = 0;
    if (b->s) b->s[0] = 0;
}

char *sb_take(strbuf *b)
{
    char *s = b->s;
    if (!s) {
        s = xmalloc(1);
        s[0] = 0;
    }
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void sb_free(strbuf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

const char *sb_str(const strbuf *b) { return b->s ? b->s : ""; }
