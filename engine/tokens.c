/* tokens.c — token vectors of the public API. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/ds4.h"

static void tokens_reserve(ds4_tokens *t, size_t n)
{
    if (n <= t->cap) return;
    size_t cap = t->cap ? t->cap : 64;
    while (cap < n) cap *= 2;
    t->ids = xrealloc(t->ids, cap * sizeof *t->ids);
    t->cap = cap;
}

void ds4_tokens_push(ds4_tokens *t, int32_t id)
{
    tokens_reserve(t, t->n + 1);
    t->ids[t->n++] = id;
}

void ds4_tokens_append(ds4_tokens *t, const int32_t *ids, size_t n)
{
    if (!n) return;
    tokens_reserve(t, t->n + n);
    memcpy(t->ids + t->n, ids, n * sizeof *ids);
    t->n += n;
}

void ds4_tokens_truncate(ds4_tokens *t, size_t n)
{
    if (n < t->n) t->n = n;
}

void ds4_tokens_free(ds4_tokens *t)
{
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}
