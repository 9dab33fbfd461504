/* numbers.c — the one strict parser for numbers read from text. strtol and
 * friends accept leading blanks, an empty string (as 0), trailing text and
 * out-of-range values (clamped, with errno); every entry point here refuses
 * all of those, so "--ctx 12k" or "THREADS= 4" is an error, not 12 or 4. */
#include "base/base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The text as quoted in a message: bounded, so a huge argument does not
 * push the reason out of ds4_error. */
#define QUOTE "'%.64s%s'"
#define QARG(s) (s), strlen(s) > 64 ? "…" : ""

/* strto* skip leading blanks; a number people type starts with its sign or
 * a digit (or '.' for a fraction). */
static bool starts_like_a_number(const char *s, bool allow_minus)
{
    if (*s == '+' || (allow_minus && *s == '-')) s++;
    return isdigit((unsigned char)*s) || *s == '.';
}

int num_parse_long(const char *s, long lo, long hi, long *out, ds4_error *err)
{
    if (!s) return ds4_error_set(err, "a number is missing");
    char *end;
    errno = 0;
    long v = starts_like_a_number(s, true) ? strtol(s, &end, 10) : 0;
    if (!starts_like_a_number(s, true) || *end || end == s)
        return ds4_error_set(err, QUOTE " is not a whole number", QARG(s));
    if (errno == ERANGE || v < lo || v > hi)
        return ds4_error_set(err, QUOTE " is not in %ld..%ld", QARG(s), lo, hi);
    *out = v;
    return 0;
}

int num_parse_int(const char *s, int lo, int hi, int *out, ds4_error *err)
{
    long v;
    if (num_parse_long(s, lo, hi, &v, err)) return -1;
    *out = (int)v;
    return 0;
}

int num_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, ds4_error *err)
{
    if (!s) return ds4_error_set(err, "a number is missing");
    if (*s == '-' && starts_like_a_number(s, true))
        return ds4_error_set(err, QUOTE " is not in %llu..%llu", QARG(s), (unsigned long long)lo,
                             (unsigned long long)hi);
    char *end;
    errno = 0;
    unsigned long long v = starts_like_a_number(s, false) ? strtoull(s, &end, 10) : 0;
    if (!starts_like_a_number(s, false) || *end || end == s)
        return ds4_error_set(err, QUOTE " is not a whole number", QARG(s));
    if (errno == ERANGE || v < lo || v > hi)
        return ds4_error_set(err, QUOTE " is not in %llu..%llu", QARG(s), (unsigned long long)lo,
                             (unsigned long long)hi);
    *out = v;
    return 0;
}

int num_parse_double(const char *s, double lo, double hi, double *out, ds4_error *err)
{
    if (!s) return ds4_error_set(err, "a number is missing");
    char *end;
    errno = 0;
    /* the start check also keeps out "nan", "inf" and hex floats' words */
    double v = starts_like_a_number(s, true) ? strtod(s, &end) : 0;
    if (!starts_like_a_number(s, true) || *end || end == s || !isfinite(v))
        return ds4_error_set(err, QUOTE " is not a number", QARG(s));
    if (errno == ERANGE || !(v >= lo && v <= hi))
        return ds4_error_set(err, QUOTE " is not in %g..%g", QARG(s), lo, hi);
    *out = v;
    return 0;
}

int num_parse_size(const char *s, uint64_t *out, ds4_error *err)
{
    if (!s) return ds4_error_set(err, "a size is missing");
    if (!isdigit((unsigned char)*s) && *s != '.')
        return ds4_error_set(err, QUOTE " is not a size (a number of bytes, or with K, M, G, T, P)", QARG(s));
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !isfinite(v) || end == s)
        return ds4_error_set(err, QUOTE " is not a size (a number of bytes, or with K, M, G, T, P)", QARG(s));
    if (*end == ' ') end++;
    double mult = 1;
    static const char units[] = "KMGTP";
    const char *u = *end ? strchr(units, toupper((unsigned char)*end)) : NULL;
    if (u) {
        mult = pow(1024.0, (double)(u - units + 1));
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'B' || *end == 'b') end++;
    } else if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end)
        return ds4_error_set(err, QUOTE " is not a size (a number of bytes, or with K, M, G, T, P)", QARG(s));
    double bytes = v * mult;
    if (bytes >= 18446744073709551616.0) return ds4_error_set(err, QUOTE " is too large a size", QARG(s));
    *out = (uint64_t)bytes;
    return 0;
}

int num_parse_list(const char *s, long lo, long hi, long *out, int max, ds4_error *err)
{
    if (!s || !*s) return ds4_error_set(err, "the list is empty");
    int n = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (n >= max) return ds4_error_set(err, QUOTE " has more than %d items", QARG(s), max);
        char *item = xstrndup(p, len);
        int rc = num_parse_long(item, lo, hi, &out[n], err);
        free(item);
        if (rc) return -1;
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}
