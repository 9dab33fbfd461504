/* glob.c — gitignore-style glob matching and the .gitignore stack. */
#include "tools/glob.h"

#include "base/base.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- globs ------------------------------------------------------------------------- */

static int fold_char(int c, bool fold)
{
    return fold && c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Matches a [...] class at p against c; *end receives the position after
 * the class. Returns -1 when p does not start a well-formed class. */
static int match_class(const char *p, int c, bool fold, const char **end)
{
    const char *q = p + 1;
    bool neg = false;
    if (*q == '!' || *q == '^') { neg = true; q++; }
    bool hit = false;
    bool first = true;
    c = fold_char(c, fold);
    while (*q && (*q != ']' || first)) {
        first = false;
        int lo = (unsigned char)*q;
        if (lo == '\\' && q[1]) lo = (unsigned char)*++q;
        q++;
        int hi = lo;
        if (*q == '-' && q[1] && q[1] != ']') {
            q++;
            hi = (unsigned char)*q;
            if (hi == '\\' && q[1]) hi = (unsigned char)*++q;
            q++;
        }
        int l = fold_char(lo, fold), h = fold_char(hi, fold);
        if (c >= l && c <= h) hit = true;
        /* a range like A-Z also matches its other case when folding */
        if (fold && c >= 'a' && c <= 'z' && c - 32 >= lo && c - 32 <= hi) hit = true;
    }
    if (*q != ']') return -1;
    *end = q + 1;
    return hit != neg;
}

/* Matching with memory of failed (pattern, path) positions: every pair
 * is tried at most once, so patterns full of stars stay polynomial. */
typedef struct {
    const char *pat, *str;
    size_t plen, slen;
    bool fold;
    uint8_t *failed; /* bit per (pattern position, path position) */
} matcher;

static bool tried(const matcher *m, size_t pi, size_t si)
{
    size_t k = pi * (m->slen + 1) + si;
    return m->failed[k >> 3] & (1u << (k & 7));
}

static void mark(matcher *m, size_t pi, size_t si)
{
    size_t k = pi * (m->slen + 1) + si;
    m->failed[k >> 3] |= (uint8_t)(1u << (k & 7));
}

static bool match_at(matcher *m, size_t pi, size_t si)
{
    if (tried(m, pi, si)) return false;
    size_t pi0 = pi, si0 = si;
    const char *pat = m->pat, *str = m->str;
    bool r = false;
    for (;;) {
        char c = pat[pi];
        if (!c) { r = !str[si]; break; }
        if (c == '*') {
            bool seg_start = pi == 0 || pat[pi - 1] == '/';
            if (pat[pi + 1] == '*' && seg_start && (pat[pi + 2] == '/' || !pat[pi + 2])) {
                if (!pat[pi + 2]) { r = true; break; }
                size_t q = pi + 3;
                for (size_t t = si;;) {
                    if (match_at(m, q, t)) { r = true; break; }
                    const char *sl = strchr(str + t, '/');
                    if (!sl) break;
                    t = (size_t)(sl - str) + 1;
                }
                break;
            }
            while (pat[pi] == '*') pi++;
            if (!pat[pi]) { r = !strchr(str + si, '/'); break; }
            for (size_t t = si;; t++) {
                if (match_at(m, pi, t)) { r = true; break; }
                if (!str[t] || str[t] == '/') break;
            }
            break;
        }
        if (!str[si]) break;
        if (c == '?') {
            if (str[si] == '/') break;
            pi++;
            si++;
            continue;
        }
        if (c == '[') {
            const char *end;
            int k = str[si] == '/' ? 0 : match_class(pat + pi, (unsigned char)str[si], m->fold, &end);
            if (k == 0) break;
            if (k == 1) {
                pi = (size_t)(end - pat);
                si++;
                continue;
            }
            /* not a class: a literal '[' */
        }
        if (c == '\\' && pat[pi + 1]) c = pat[++pi];
        if (fold_char((unsigned char)c, m->fold) != fold_char((unsigned char)str[si], m->fold)) break;
        pi++;
        si++;
    }
    if (!r) mark(m, pi0, si0);
    return r;
}

bool glob_match_fold(const char *pattern, const char *path, bool fold)
{
    matcher m = { pattern, path, strlen(pattern), strlen(path), fold, NULL };
    size_t bits = (m.plen + 1) * (m.slen + 1);
    if (m.plen > 4096 || m.slen > 8192) return false;
    uint8_t small[512];
    m.failed = bits <= sizeof small * 8 ? small : xcalloc((bits + 7) / 8, 1);
    memset(m.failed, 0, m.failed == small ? sizeof small : 0);
    bool r = match_at(&m, 0, 0);
    if (m.failed != small) free(m.failed);
    return r;
}

bool glob_match(const char *pattern, const char *path)
{
    return glob_match_fold(pattern, path, false);
}

/* Alternatives multiply: {a,b}{c,d}… is bounded by a budget of expanded
 * patterns. */
static bool braces(const char *pattern, const char *path, bool fold, int *budget)
{
    if (--*budget < 0) return false;
    const char *open = NULL;
    for (const char *p = pattern; *p; p++) {
        if (*p == '\\' && p[1]) { p++; continue; }
        if (*p == '{') { open = p; break; }
    }
    if (!open) return glob_match_fold(pattern, path, fold);
    /* find the matching '}' and the top-level commas */
    int depth = 0;
    const char *close = NULL;
    for (const char *p = open; *p; p++) {
        if (*p == '\\' && p[1]) { p++; continue; }
        if (*p == '{') depth++;
        else if (*p == '}' && --depth == 0) { close = p; break; }
    }
    if (!close) return glob_match_fold(pattern, path, fold);
    size_t pre = (size_t)(open - pattern);
    const char *alt = open + 1;
    depth = 0;
    for (const char *p = open + 1; p <= close; p++) {
        if (*p == '\\' && p[1] && p < close) { p++; continue; }
        if (*p == '{') depth++;
        else if (*p == '}' && depth > 0) depth--;
        else if ((*p == ',' && depth == 0) || p == close) {
            strbuf b = {0};
            sb_append(&b, pattern, pre);
            sb_append(&b, alt, (size_t)(p - alt));
            sb_puts(&b, close + 1);
            bool m = braces(sb_str(&b), path, fold, budget);
            sb_free(&b);
            if (m) return true;
            alt = p + 1;
        }
    }
    return false;
}

bool glob_match_braces(const char *pattern, const char *path, bool fold)
{
    int budget = 1024;
    return braces(pattern, path, fold, &budget);
}

/* ---- .gitignore stack -------------------------------------------------------------- */

typedef struct {
    char *glob;
    bool negate, dir_only, anchored;
} ignore_pattern;

typedef struct {
    char *base;        /* absolute directory the patterns are relative to */
    size_t base_len;
    ignore_pattern *pat;
    size_t n;
} ignore_level;

struct ignore_stack {
    ignore_level *lv;
    size_t n, cap;
};

ignore_stack *ignore_new(void)
{
    ignore_stack *st = xcalloc(1, sizeof *st);
    return st;
}

static void level_free(ignore_level *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->pat[i].glob);
    free(l->pat);
    free(l->base);
}

void ignore_free(ignore_stack *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) level_free(&st->lv[i]);
    free(st->lv);
    free(st);
}

static void parse_line(ignore_level *l, size_t *cap, const char *s, size_t n)
{
    if (n && s[n - 1] == '\r') n--;
    /* trailing spaces go unless escaped with a backslash */
    while (n && s[n - 1] == ' ' && !(n >= 2 && s[n - 2] == '\\')) n--;
    if (!n || s[0] == '#') return;
    ignore_pattern p = {0};
    if (s[0] == '!') { p.negate = true; s++; n--; }
    else if (s[0] == '\\' && n > 1 && (s[1] == '#' || s[1] == '!')) { s++; n--; }
    if (n && s[n - 1] == '/') { p.dir_only = true; n--; }
    if (!n) return;
    if (memchr(s, '/', n)) p.anchored = true;
    if (s[0] == '/') { s++; n--; }
    if (!n) return;
    strbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        /* "\ " keeps a trailing space; drop the escape there only */
        if (s[i] == '\\' && i + 1 < n && s[i + 1] == ' ') continue;
        sb_putc(&b, s[i]);
    }
    p.glob = sb_take(&b);
    if (l->n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        l->pat = xrealloc(l->pat, *cap * sizeof *l->pat);
    }
    l->pat[l->n++] = p;
}

static ignore_level *push_level(ignore_stack *st, const char *base)
{
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 16;
        st->lv = xrealloc(st->lv, st->cap * sizeof *st->lv);
    }
    ignore_level *l = &st->lv[st->n++];
    memset(l, 0, sizeof *l);
    l->base = xstrdup(base);
    l->base_len = strlen(base);
    while (l->base_len > 1 && l->base[l->base_len - 1] == '/') l->base[--l->base_len] = 0;
    return l;
}

static void add_text(ignore_level *l, size_t *cap, const char *text, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t e = nl ? (size_t)(nl - text) : len;
        parse_line(l, cap, text + pos, e - pos);
        pos = e + 1;
    }
}

void ignore_push_text(ignore_stack *st, const char *base, const char *text, size_t len)
{
    ignore_level *l = push_level(st, base);
    size_t cap = 0;
    add_text(l, &cap, text, len);
}

static void add_file(ignore_level *l, size_t *cap, const char *path)
{
    size_t len;
    char *text = file_read_all(path, &len);
    if (!text) return;
    add_text(l, cap, text, len);
    free(text);
}

void ignore_push_dir(ignore_stack *st, const char *dir)
{
    ignore_level *l = push_level(st, dir);
    size_t cap = 0;
    strbuf p = {0};
    sb_printf(&p, "%s/.git/info/exclude", l->base_len > 1 ? l->base : "");
    add_file(l, &cap, sb_str(&p));
    sb_clear(&p);
    sb_printf(&p, "%s/.gitignore", l->base_len > 1 ? l->base : "");
    add_file(l, &cap, sb_str(&p));
    sb_free(&p);
}

void ignore_pop(ignore_stack *st)
{
    if (st->n) level_free(&st->lv[--st->n]);
}

size_t ignore_push_ancestors(ignore_stack *st, const char *dir)
{
    /* the repository top: the nearest ancestor holding .git */
    char *d = xstrdup(dir);
    size_t n = strlen(d);
    while (n > 1 && d[n - 1] == '/') d[--n] = 0;
    size_t top = (size_t)-1;
    strbuf p = {0};
    for (size_t k = n;;) {
        sb_clear(&p);
        sb_append(&p, d, k);
        sb_puts(&p, "/.git");
        struct stat sbuf;
        if (stat(sb_str(&p), &sbuf) == 0) { top = k; break; }
        while (k > 0 && d[k - 1] != '/') k--;
        if (k <= 1) break;
        k--;
    }
    size_t pushed = 0;
    if (top != (size_t)-1 && top < n) {
        /* push top, then each directory below it, up to dir's parent */
        size_t k = top;
        for (;;) {
            char save = d[k];
            d[k] = 0;
            ignore_push_dir(st, k ? d : "/");
            d[k] = save;
            pushed++;
            size_t next = k + 1;
            while (next < n && d[next] != '/') next++;
            if (next >= n) break;
            k = next;
        }
    }
    sb_free(&p);
    free(d);
    return pushed;
}

bool ignore_match(const ignore_stack *st, const char *abs_path, bool is_dir)
{
    bool ignored = false;
    for (size_t i = 0; i < st->n; i++) {
        const ignore_level *l = &st->lv[i];
        if (!l->n) continue;
        const char *rel;
        if (l->base_len <= 1) rel = abs_path + 1;
        else if (strncmp(abs_path, l->base, l->base_len) == 0 && abs_path[l->base_len] == '/')
            rel = abs_path + l->base_len + 1;
        else continue;
        const char *name = strrchr(rel, '/');
        name = name ? name + 1 : rel;
        for (size_t j = 0; j < l->n; j++) {
            const ignore_pattern *p = &l->pat[j];
            if (p->dir_only && !is_dir) continue;
            if (p->negate == ignored) {
                /* only a pattern that would change the outcome needs matching */
                if (glob_match(p->glob, p->anchored ? rel : name)) ignored = !p->negate;
            }
        }
    }
    return ignored;
}
