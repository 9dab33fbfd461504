/* pretok.c — the three isolating splits of the DeepSeek pre-tokenizer.
 *
 * Split 1 isolates runs of up to three \p{N} characters, split 2 isolates
 * runs of CJK ideographs (U+4E00..U+9FA5) and kana (U+3040..U+30FF); what
 * lies between goes to split 3, the alternation
 *
 *   [ASCII punct][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *   | ' '?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 *
 * evaluated with first-alternative-wins semantics inside each piece (the
 * piece end counts as "not followed by \S"). Digit pieces need no third
 * split (no alternative matches a digit run); CJK pieces do, since the
 * kana blocks also hold punctuation (U+30FB), symbols (U+309B) and
 * unassigned code points (U+3097). Characters no alternative matches at
 * their position gather into one piece until the next match. */
#include <pthread.h>
#include <stdbool.h>

#include "engine/pretok.h"
#include "base/utf8.h"
#include "engine/unicode.h"

/* ASCII classes: avoid the table walk for the common case. */
static unsigned char ascii_class[128];
static pthread_once_t ascii_once = PTHREAD_ONCE_INIT;

static void ascii_init(void)
{
    for (unsigned c = 0; c < 128; c++) ascii_class[c] = (unsigned char)unicode_class(c);
}

typedef struct {
    uint32_t cp;
    unsigned cls; /* UC_* category | UC_SPACE */
    size_t len;
} uchar;

static inline uchar char_at(const unsigned char *s, size_t i, size_t end)
{
    uchar c;
    if (s[i] < 0x80) {
        c.cp = s[i];
        c.cls = ascii_class[s[i]];
        c.len = 1;
    } else {
        c.len = utf8_decode(s + i, end - i, &c.cp);
        c.cls = unicode_class(c.cp);
    }
    return c;
}

static inline bool is_letter_or_mark(unsigned cls)
{
    unsigned k = cls & UC_CATEGORY;
    return k == UC_L || k == UC_M;
}

static inline bool is_punct_or_symbol(unsigned cls)
{
    unsigned k = cls & UC_CATEGORY;
    return k == UC_P || k == UC_S;
}

static inline bool is_ascii_alpha(unsigned char b)
{
    return (unsigned char)((b | 0x20) - 'a') < 26;
}

static inline bool is_ascii_punct(uint32_t cp)
{
    return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') ||
           (cp >= '[' && cp <= '`') || (cp >= '{' && cp <= '~');
}

static inline bool is_crlf(uint32_t cp) { return cp == '\r' || cp == '\n'; }

static inline bool is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF);
}

/* End of the maximal run of L/M characters starting at i. */
static size_t letter_run(const unsigned char *s, size_t i, size_t end)
{
    while (i < end) {
        uchar c = char_at(s, i, end);
        if (!is_letter_or_mark(c.cls)) break;
        i += c.len;
    }
    return i;
}

/* End of a P/S run from i, followed by any run of CR/LF. */
static size_t punct_run_then_newlines(const unsigned char *s, size_t i, size_t end)
{
    while (i < end) {
        uchar c = char_at(s, i, end);
        if (!is_punct_or_symbol(c.cls)) break;
        i += c.len;
    }
    while (i < end && (s[i] == '\r' || s[i] == '\n')) i++;
    return i;
}

/* End of the alternation's match at i, or 0 when nothing matches there. */
static size_t match_at(const unsigned char *s, size_t i, size_t end)
{
    uchar c0 = char_at(s, i, end);
    size_t i1 = i + c0.len;
    uchar c1 = { 0, UC_OTHER, 0 };
    bool has1 = i1 < end;
    if (has1) c1 = char_at(s, i1, end);

    /* 1: one ASCII punctuation character then ASCII letters */
    if (is_ascii_punct(c0.cp) && has1 && c1.cp < 0x80 && is_ascii_alpha((unsigned char)c1.cp)) {
        size_t j = i1 + 1;
        while (j < end && is_ascii_alpha(s[j])) j++;
        return j;
    }
    /* 2: optional non-letter/punct/symbol/CR/LF character, then letters/marks */
    if (is_letter_or_mark(c0.cls)) return letter_run(s, i, end);
    unsigned k0 = c0.cls & UC_CATEGORY;
    if (k0 != UC_P && k0 != UC_S && !is_crlf(c0.cp) && has1 && is_letter_or_mark(c1.cls))
        return letter_run(s, i1, end);
    /* 3: optional space, punctuation/symbols, then CR/LF */
    if (c0.cp == ' ' && has1 && is_punct_or_symbol(c1.cls)) return punct_run_then_newlines(s, i1, end);
    if (k0 == UC_P || k0 == UC_S) return punct_run_then_newlines(s, i, end);
    if (!(c0.cls & UC_SPACE)) return 0;

    /* 4-6 on the maximal whitespace run from i */
    size_t j = i, last_start = i, after_newline = 0, nchars = 0;
    while (j < end) {
        uchar c = char_at(s, j, end);
        if (!(c.cls & UC_SPACE)) break;
        if (is_crlf(c.cp)) after_newline = j + 1;
        last_start = j;
        j += c.len;
        nchars++;
    }
    if (after_newline) return after_newline;       /* \s*[\r\n]+ */
    if (j == end || nchars == 1) return j;          /* \s+(?!\S), or \s+ */
    return last_start;                              /* \s+(?!\S) leaving one */
}

static void split3(const unsigned char *s, size_t start, size_t end, pretok_piece_fn fn, void *ud)
{
    size_t i = start, unmatched = end; /* unmatched < end: start of a pending run */
    while (i < end) {
        size_t m = match_at(s, i, end);
        if (m) {
            if (unmatched < end) {
                fn(ud, s + unmatched, i - unmatched);
                unmatched = end;
            }
            fn(ud, s + i, m - i);
            i = m;
        } else {
            if (unmatched == end) unmatched = i;
            i += char_at(s, i, end).len;
        }
    }
    if (unmatched < end) fn(ud, s + unmatched, end - unmatched);
}

static void split2(const unsigned char *s, size_t start, size_t end, pretok_piece_fn fn, void *ud)
{
    size_t i = start, seg = start;
    while (i < end) {
        if (s[i] < 0x80) { i++; continue; }
        uchar c = char_at(s, i, end);
        if (!is_cjk(c.cp)) { i += c.len; continue; }
        if (seg < i) split3(s, seg, i, fn, ud);
        size_t j = i + c.len;
        while (j < end && s[j] >= 0x80) {
            uchar d = char_at(s, j, end);
            if (!is_cjk(d.cp)) break;
            j += d.len;
        }
        split3(s, i, j, fn, ud);
        i = seg = j;
    }
    if (seg < end) split3(s, seg, end, fn, ud);
}

void pretok_split(const unsigned char *s, size_t len, pretok_piece_fn fn, void *ud)
{
    pthread_once(&ascii_once, ascii_init);
    size_t i = 0, seg = 0;
    while (i < len) {
        uchar c;
        if (s[i] < 0x80) {
            if ((unsigned)(s[i] - '0') > 9u) { i++; continue; }
            c.len = 1;
            c.cls = UC_N;
        } else {
            c = char_at(s, i, len);
        }
        if ((c.cls & UC_CATEGORY) != UC_N) { i += c.len; continue; }
        if (seg < i) split2(s, seg, i, fn, ud);
        size_t j = i + c.len;
        for (int n = 1; n < 3 && j < len; n++) {
            uchar d = char_at(s, j, len);
            if ((d.cls & UC_CATEGORY) != UC_N) break;
            j += d.len;
        }
        fn(ud, s + i, j - i);
        i = seg = j;
    }
    if (seg < len) split2(s, seg, len, fn, ud);
}
