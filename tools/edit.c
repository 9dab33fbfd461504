/* edit.c — the `edit` tool: replace an exact, unique piece of text, or a
 * range of lines the model has been shown unchanged, atomically; the
 * result is a small numbered diff. */
#include "tools/tool_env.h"

#include <ctype.h>
#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define DIFF_CONTEXT 3
#define DIFF_MAX_SIDE 40
#define CANDIDATE_LINES 12

/* ---- text helpers ---------------------------------------------------------------------- */

static bool file_uses_crlf(const char *s, size_t n)
{
    size_t crlf = 0, lf = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\n') continue;
        if (i > 0 && s[i - 1] == '\r') crlf++;
        else lf++;
    }
    return crlf > lf;
}

/* s with every bare "\n" turned into "\r\n". */
static char *to_crlf(const char *s, size_t n, size_t *out_len)
{
    strbuf b = {0};
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n' && (i == 0 || s[i - 1] != '\r')) sb_putc(&b, '\r');
        sb_putc(&b, s[i]);
    }
    *out_len = b.len;
    return sb_take(&b);
}

/* Removes "12<TAB>" / "12:<TAB>" prefixes copied from read or search
 * output, when every non-empty line of s carries one. NULL otherwise. */
static char *strip_number_prefixes(const char *s, size_t n, size_t *out_len)
{
    line_index li;
    lines_split(s, n, &li);
    bool all = li.n > 0;
    for (size_t i = 0; i < li.n && all; i++) {
        const char *l = s + li.start[i];
        size_t k = 0, len = li.len[i];
        if (!len) continue;
        while (k < len && l[k] == ' ') k++;
        size_t d = k;
        while (k < len && isdigit((unsigned char)l[k])) k++;
        if (k == d) { all = false; break; }
        if (k < len && (l[k] == ':' || l[k] == '-')) k++;
        if (k >= len || l[k] != '\t') all = false;
    }
    if (!all) {
        lines_free(&li);
        return NULL;
    }
    strbuf b = {0};
    for (size_t i = 0; i < li.n; i++) {
        const char *l = s + li.start[i];
        size_t len = li.len[i], k = 0;
        if (len) {
            k = strcspn(l, "\t") + 1;
            if (k > len) k = len;
        }
        sb_append(&b, l + k, li.end[i] - li.start[i] - k);
    }
    lines_free(&li);
    *out_len = b.len;
    return sb_take(&b);
}

/* Offsets of the occurrences of needle (at most max recorded; returns the
 * total count, occurrences may overlap). */
static size_t find_all(const char *hay, size_t hn, const char *needle, size_t nn, size_t *pos, size_t max)
{
    size_t count = 0;
    if (!nn || nn > hn) return 0;
    const char *p = hay, *end = hay + hn;
    while ((p = memmem(p, (size_t)(end - p), needle, nn))) {
        if (count < max) pos[count] = (size_t)(p - hay);
        count++;
        p++;
    }
    return count;
}

/* ---- similarity (closest candidates when old is not found) ------------------------------- */

static void normalize_ws(const char *s, size_t n, strbuf *b)
{
    sb_clear(b);
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        if (isspace((unsigned char)s[i])) { space = b->len > 0; continue; }
        if (space) sb_putc(b, ' ');
        space = false;
        sb_putc(b, s[i]);
    }
    sb_putc(b, 0);
    b->len--;
}

typedef struct {
    uint8_t h[64];
    unsigned n;
    uint64_t norm; /* hash of the whitespace-normalised text */
    uint64_t exact;
} line_sig;

static void make_sig(const char *s, size_t n, line_sig *sig, strbuf *tmp)
{
    memset(sig, 0, sizeof *sig);
    sig->exact = line_hash(s, n);
    normalize_ws(s, n, tmp);
    sig->norm = line_hash(sb_str(tmp), tmp->len);
    const char *t = sb_str(tmp);
    for (size_t i = 0; i + 1 < tmp->len; i++) {
        unsigned b = ((unsigned char)t[i] * 31u + (unsigned char)t[i + 1]) & 63u;
        if (sig->h[b] < 255) sig->h[b]++;
        sig->n++;
    }
}

static double sim(const line_sig *a, const line_sig *b)
{
    if (a->exact == b->exact) return 1.0;
    if (a->norm == b->norm) return 0.95;
    if (!a->n || !b->n) return 0;
    unsigned common = 0;
    for (int i = 0; i < 64; i++) common += a->h[i] < b->h[i] ? a->h[i] : b->h[i];
    return 0.9 * 2.0 * common / (a->n + b->n);
}

typedef struct {
    size_t start;
    double score;
} candidate;

/* The (up to) two windows of the file most like old's lines. */
static size_t closest(const char *file, const line_index *fl, const char *old, size_t old_len,
                      candidate *best)
{
    line_index ol;
    lines_split(old, old_len, &ol);
    size_t k = ol.n;
    while (k > 0 && ol.len[k - 1] == 0) k--;
    size_t found = 0;
    if (k == 0 || fl->n == 0) {
        lines_free(&ol);
        return 0;
    }
    strbuf tmp = {0};
    line_sig *os = xcalloc(k, sizeof *os), *fs = xcalloc(fl->n, sizeof *fs);
    for (size_t i = 0; i < k; i++) make_sig(old + ol.start[i], ol.len[i], &os[i], &tmp);
    for (size_t i = 0; i < fl->n; i++) make_sig(file + fl->start[i], fl->len[i], &fs[i], &tmp);
    size_t windows = fl->n >= k ? fl->n - k + 1 : 1;
    bool full = (double)windows * (double)k <= 2e5;
    best[0].score = best[1].score = -1;
    for (size_t s = 0; s < windows; s++) {
        double score = 0;
        size_t span = k < fl->n - s ? k : fl->n - s;
        if (full) {
            for (size_t i = 0; i < span; i++) score += sim(&fs[s + i], &os[i]);
            score /= (double)k;
        } else {
            score = sim(&fs[s], &os[0]);
            if (k > 1 && span == k) score = (score + sim(&fs[s + k - 1], &os[k - 1])) / 2;
        }
        if (score > best[0].score) {
            if (best[0].score >= 0 && (s >= best[0].start + k)) best[1] = best[0];
            best[0] = (candidate){ s, score };
        } else if (score > best[1].score && s >= best[0].start + k) {
            best[1] = (candidate){ s, score };
        }
    }
    /* a second place only when it is about as close as the first */
    found = best[0].score > 0.4 ? (best[1].score > 0.5 && best[1].score >= 0.75 * best[0].score ? 2 : 1) : 0;
    free(os);
    free(fs);
    sb_free(&tmp);
    lines_free(&ol);
    return found;
}

/* ---- output ------------------------------------------------------------------------- */

static void numbered(strbuf *b, const char *text, const line_index *li, size_t i, char mark)
{
    if (mark) sb_putc(b, mark);
    sb_printf(b, "%zu\t", i + 1);
    sb_append_line_capped(b, text + li->start[i], li->len[i], TOOL_LINE_CAP);
    sb_putc(b, '\n');
}

static bool same_line(const char *a, const line_index *la, size_t i, const char *b,
                      const line_index *lb, size_t j)
{
    return la->len[i] == lb->len[j] && !memcmp(a + la->start[i], b + lb->start[j], la->len[i]);
}

/* "line 4" or "lines 4-6". */
static void line_range(char *buf, size_t size, size_t first, size_t last)
{
    if (first == last) snprintf(buf, size, "line %zu", first);
    else snprintf(buf, size, "lines %zu-%zu", first, last);
}

/* Old lines [a, a+nold) became new lines [a, a+nnew). Shows the change
 * with unchanged lines at its ends as context and marks what it shows. */
static void show_diff(tool_env *env, const char *abs, strbuf *b, const char *old, const line_index *lo,
                      const char *nw, const line_index *ln, size_t a, size_t nold, size_t nnew)
{
    size_t head = 0, tail = 0;
    while (head < nold && head < nnew && same_line(old, lo, a + head, nw, ln, a + head)) head++;
    while (tail < nold - head && tail < nnew - head &&
           same_line(old, lo, a + nold - 1 - tail, nw, ln, a + nnew - 1 - tail))
        tail++;
    size_t ca = a + head;                  /* first changed line (both numberings) */
    size_t cold = nold - head - tail, cnew = nnew - head - tail;
    size_t from = ca >= DIFF_CONTEXT ? ca - DIFF_CONTEXT : 0;
    size_t after = ca + cnew;              /* first unchanged line after, new numbering */
    size_t to = after + DIFF_CONTEXT < ln->n ? after + DIFF_CONTEXT : ln->n;
    for (size_t i = from; i < ca; i++) numbered(b, nw, ln, i, ' ');
    for (size_t i = 0; i < cold; i++) {
        if (cold > DIFF_MAX_SIDE && i == DIFF_MAX_SIDE / 2) {
            sb_printf(b, "-… %zu removed lines not shown …\n", cold - DIFF_MAX_SIDE);
            i = cold - DIFF_MAX_SIDE / 2 - 1;
            continue;
        }
        numbered(b, old, lo, ca + i, '-');
    }
    for (size_t i = 0; i < cnew; i++) {
        if (cnew > DIFF_MAX_SIDE && i == DIFF_MAX_SIDE / 2) {
            sb_printf(b, "+… %zu added lines not shown …\n", cnew - DIFF_MAX_SIDE);
            i = cnew - DIFF_MAX_SIDE / 2 - 1;
            continue;
        }
        numbered(b, nw, ln, ca + i, '+');
    }
    for (size_t i = after; i < to; i++) numbered(b, nw, ln, i, ' ');
    /* what the model now knows of the new text */
    if (cnew <= DIFF_MAX_SIDE) seen_mark_text(env, abs, nw, ln, from, to - from);
    else {
        seen_mark_text(env, abs, nw, ln, from, ca + DIFF_MAX_SIDE / 2 - from);
        size_t s2 = ca + cnew - DIFF_MAX_SIDE / 2;
        seen_mark_text(env, abs, nw, ln, s2, to - s2);
    }
}

/* ---- the tool ---------------------------------------------------------------------- */

typedef struct {
    tool_env *env;
    char *abs;          /* resolved target */
    const char *shown;
    struct stat st;
    char *text;
    size_t len;
    line_index li;
    bool crlf;
} edit_file;

static void edit_file_free(edit_file *f)
{
    free(f->text);
    lines_free(&f->li);
    free(f->abs);
}

static int load(tool_env *env, const char *path, edit_file *f, tool_result *out)
{
    memset(f, 0, sizeof *f);
    f->env = env;
    f->abs = tool_real_target(env, path);
    f->shown = tool_display_path(env, f->abs);
    if (tool_check_regular(env, f->abs, &f->st, out) != 0) {
        if (!strncmp(out->text, "Tool error: ", 12) && strstr(out->text, "does not exist")) {
            strbuf b = {0};
            sb_puts(&b, out->text);
            sb_puts(&b, " To create a file use write.");
            free(out->text);
            out->text = sb_take(&b);
        }
        return -1;
    }
    if ((size_t)f->st.st_size > TOOL_EDIT_MAX_BYTES)
        return tool_fail(out, "%s is %lld bytes, more than edit handles (%u MiB); change it with bash",
                         f->shown, (long long)f->st.st_size, TOOL_EDIT_MAX_BYTES >> 20);
    f->text = file_read_all(f->abs, &f->len);
    if (!f->text) return tool_fail(out, "cannot read %s: %s", f->shown, strerror(errno));
    long z = text_binary_offset(f->text, f->len);
    if (z >= 0) return tool_fail(out, "%s looks like a binary file (a NUL byte at offset %ld); edit works on text", f->shown, z);
    lines_split(f->text, f->len, &f->li);
    f->crlf = file_uses_crlf(f->text, f->len);
    return 0;
}

/* Writes the new text, reports and updates the shown-lines memory. */
static int commit(edit_file *f, char *nw, size_t nlen, size_t first_line, size_t old_count,
                  const char *how, tool_result *out)
{
    ds4_error err = { "" };
    if (file_write_atomic(f->abs, nw, nlen, -1, false, &err) != 0) {
        free(nw);
        return tool_fail(out, "%s was not changed: %s", f->shown, err.msg);
    }
    line_index ln;
    lines_split(nw, nlen, &ln);
    size_t new_count = ln.n + old_count >= f->li.n ? ln.n + old_count - f->li.n : 0;
    long delta = (long)ln.n - (long)f->li.n;
    strbuf b = {0};
    char was[48], now[48];
    line_range(was, sizeof was, first_line + 1, first_line + old_count);
    line_range(now, sizeof now, first_line + 1, first_line + new_count);
    if (old_count == 0)
        sb_printf(&b, "Edited %s%s: inserted %zu line%s before line %zu", f->shown, how, new_count,
                  new_count == 1 ? "" : "s", first_line + 1);
    else if (new_count == 0)
        sb_printf(&b, "Edited %s%s: deleted %s", f->shown, how, was);
    else if (old_count == new_count)
        sb_printf(&b, "Edited %s%s: changed %s", f->shown, how, was);
    else
        sb_printf(&b, "Edited %s%s: %s became %s", f->shown, how, was, now);
    if (delta) sb_printf(&b, "; later lines moved by %+ld (re-read before line-editing them)", delta);
    sb_printf(&b, "; the file has %zu line%s now\n", ln.n, ln.n == 1 ? "" : "s");
    seen_splice(f->env, f->abs, first_line, old_count, new_count);
    show_diff(f->env, f->abs, &b, f->text, &f->li, nw, &ln, first_line, old_count, new_count);
    struct stat nst;
    if (stat(f->abs, &nst) == 0) seen_set_version(f->env, f->abs, &nst);
    lines_free(&ln);
    free(nw);
    return tool_ok(out, &b);
}

static int not_found(edit_file *f, const char *old, size_t old_len, tool_result *out)
{
    candidate best[2];
    size_t n = closest(f->text, &f->li, old, old_len, best);
    line_index ol;
    lines_split(old, old_len, &ol);
    size_t k = ol.n;
    while (k > 1 && ol.len[k - 1] == 0) k--;
    lines_free(&ol);
    strbuf b = {0};
    sb_printf(&b, "Tool error: old text not found in %s (it must match exactly, whitespace included).", f->shown);
    if (n == 0) {
        sb_puts(&b, " Nothing in the file resembles it; read the file to see its current text.");
    } else {
        seen_sync(f->env, f->abs, &f->st);
        for (size_t c = 0; c < n; c++) {
            size_t s = best[c].start, e = s + (k > CANDIDATE_LINES ? CANDIDATE_LINES : k);
            if (e > f->li.n) e = f->li.n;
            sb_printf(&b, "\n%s text is at lines %zu-%zu%s:\n", c ? "Next closest" : "The closest", s + 1,
                      s + k <= f->li.n ? s + k : f->li.n, best[c].score >= 0.95 ? " (differs in whitespace)" : "");
            for (size_t i = s; i < e; i++) numbered(&b, f->text, &f->li, i, 0);
            if (e < s + k && e < f->li.n) sb_puts(&b, "…\n");
            seen_mark_text(f->env, f->abs, f->text, &f->li, s, e - s);
        }
        sb_puts(&b, "Copy old from these lines exactly, or replace them by number with start_line/end_line.");
    }
    free(out->text);
    out->text = sb_take(&b);
    out->is_error = true;
    return -1;
}

static int edit_old_new(edit_file *f, const char *old, size_t old_len, const char *nw, size_t new_len,
                        long long start_line, long long end_line, tool_result *out)
{
    char *conv_old = NULL, *conv_new = NULL;
    const char *how = "";
    size_t pos[64];
    size_t count = find_all(f->text, f->len, old, old_len, pos, 64);
    if (count == 0 && f->crlf && memchr(old, '\n', old_len)) {
        size_t l1, l2;
        conv_old = to_crlf(old, old_len, &l1);
        conv_new = to_crlf(nw, new_len, &l2);
        count = find_all(f->text, f->len, conv_old, l1, pos, 64);
        if (count) { old = conv_old; old_len = l1; nw = conv_new; new_len = l2; }
    }
    if (count == 0) {
        size_t l1, l2;
        char *so = strip_number_prefixes(old, old_len, &l1);
        char *sn = so ? strip_number_prefixes(nw, new_len, &l2) : NULL;
        if (so && (sn || new_len == 0)) {
            count = find_all(f->text, f->len, so, l1, pos, 64);
            if (count) {
                free(conv_old);
                free(conv_new);
                conv_old = so;
                conv_new = sn;
                old = so;
                old_len = l1;
                nw = sn ? sn : "";
                new_len = sn ? l2 : 0;
                how = " (line-number prefixes removed from old and new)";
                so = sn = NULL;
            }
        }
        free(so);
        free(sn);
    }
    int rc;
    if (count == 0) {
        rc = not_found(f, old, old_len, out);
    } else {
        size_t pick = SIZE_MAX;
        if (count > 1 && start_line > 0) {
            /* the occurrence that starts within [start_line, end_line] */
            long long hi = end_line >= start_line ? end_line : start_line;
            size_t hits = 0;
            for (size_t i = 0; i < count && i < 64; i++) {
                long long l = (long long)lines_at_offset(&f->li, pos[i]) + 1;
                if (l >= start_line && l <= hi) { pick = i; hits++; }
            }
            if (hits != 1) pick = SIZE_MAX;
        } else if (count == 1) {
            pick = 0;
        }
        if (pick == SIZE_MAX) {
            strbuf b = {0};
            sb_printf(&b, "old text occurs %zu times in %s, at lines ", count, f->shown);
            for (size_t i = 0; i < count && i < 10; i++)
                sb_printf(&b, "%s%zu", i ? ", " : "", lines_at_offset(&f->li, pos[i]) + 1);
            if (count > 10) sb_puts(&b, ", …");
            sb_puts(&b, ". Add neighbouring lines to old so that it matches once, or give start_line "
                        "(and end_line) to pick the occurrence that starts there.");
            rc = tool_fail(out, "%s", sb_str(&b));
            sb_free(&b);
        } else if (old_len == new_len && !memcmp(old, nw, old_len)) {
            rc = tool_fail(out, "old and new are the same; nothing to change");
        } else {
            size_t p = pos[pick];
            size_t first = lines_at_offset(&f->li, p);
            size_t last = lines_at_offset(&f->li, p + old_len - 1);
            /* whole lines from first to last are replaced by their new form */
            strbuf t = {0};
            sb_append(&t, f->text, p);
            sb_append(&t, nw, new_len);
            sb_append(&t, f->text + p + old_len, f->len - p - old_len);
            size_t tlen = t.len;
            rc = commit(f, sb_take(&t), tlen, first, last - first + 1, how, out);
        }
    }
    free(conv_old);
    free(conv_new);
    return rc;
}

static int edit_lines(edit_file *f, long long s, long long e, const char *nw, size_t new_len,
                      tool_result *out)
{
    long long n = (long long)f->li.n;
    bool insert = e == s - 1;
    if (s < 1) return tool_fail(out, "start_line must be 1 or more (got %lld)", s);
    if (!insert && e < s)
        return tool_fail(out, "end_line (%lld) is before start_line (%lld); use end_line = start_line - 1 "
                              "to insert before start_line", e, s);
    if (s > n + 1 || (!insert && e > n))
        return tool_fail(out, "%s has %lld lines; lines %lld-%lld do not exist", f->shown, n, s, e);
    if (!seen_version_matches(f->env, f->abs, &f->st)) {
        bool any = false;
        for (long long i = 0; i < n && !any; i++) any = seen_get(f->env, f->abs, (size_t)i) != 0;
        if (any)
            return tool_fail(out, "%s changed since you last saw it (something else wrote it); read the "
                                  "lines again before a line edit, or use old/new", f->shown);
        return tool_fail(out, "you have not seen lines of %s yet; read lines %lld-%lld first, or use old/new",
                         f->shown, insert ? (s > 1 ? s - 1 : 1) : s, insert ? s : e);
    }
    /* every replaced line must have been shown as it is now; an insertion
     * needs a neighbour that was */
    if (insert) {
        bool ok = false;
        if (s >= 2 && seen_get(f->env, f->abs, (size_t)s - 2) ==
                          line_hash(f->text + f->li.start[s - 2], f->li.len[s - 2])) ok = true;
        if (s <= n && seen_get(f->env, f->abs, (size_t)s - 1) ==
                          line_hash(f->text + f->li.start[s - 1], f->li.len[s - 1])) ok = true;
        if (!ok)
            return tool_fail(out, "the lines around line %lld of %s have not been shown to you as they are "
                                  "now; read them first", s, f->shown);
    } else {
        for (long long i = s - 1; i < e; i++) {
            uint64_t h = seen_get(f->env, f->abs, (size_t)i);
            if (h == 0)
                return tool_fail(out, "line %lld of %s has not been shown to you since it last changed "
                                      "(or was shown cut); read lines %lld-%lld again, or use old/new",
                                 i + 1, f->shown, s, e);
            if (h != line_hash(f->text + f->li.start[i], f->li.len[i]))
                return tool_fail(out, "line %lld of %s is not what you were shown; read lines %lld-%lld "
                                      "again before editing them", i + 1, f->shown, s, e);
        }
    }
    char *conv = NULL;
    size_t conv_len;
    if (f->crlf && memchr(nw, '\n', new_len)) {
        conv = to_crlf(nw, new_len, &conv_len);
        nw = conv;
        new_len = conv_len;
    }
    size_t a = (size_t)s - 1;
    size_t from = a < f->li.n ? f->li.start[a] : f->len;
    size_t to = insert ? from : f->li.end[e - 1];
    strbuf t = {0};
    sb_append(&t, f->text, from);
    /* appending after a last line that has no newline */
    if (insert && from == f->len && f->len && f->text[f->len - 1] != '\n' && f->text[f->len - 1] != '\r')
        sb_puts(&t, f->crlf ? "\r\n" : "\n");
    sb_append(&t, nw, new_len);
    /* new lines end like the lines they replace; inserted ones always do */
    bool replaced_had_eol = insert || (to > 0 && (f->text[to - 1] == '\n' || f->text[to - 1] == '\r'));
    if (new_len && replaced_had_eol && nw[new_len - 1] != '\n' && nw[new_len - 1] != '\r')
        sb_puts(&t, f->crlf ? "\r\n" : "\n");
    sb_append(&t, f->text + to, f->len - to);
    free(conv);
    size_t tlen = t.len;
    return commit(f, sb_take(&t), tlen, a, insert ? 0 : (size_t)(e - s + 1), "", out);
}

static int run_edit(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    (void)ctx;
    const char *path = targ_str(args, "path");
    json_object *ov = NULL, *nv = NULL;
    json_object_object_get_ex(args, "old", &ov);
    json_object_object_get_ex(args, "new", &nv);
    long long s = 0, e = 0;
    bool has_s = targ_int(args, "start_line", &s);
    bool has_e = targ_int(args, "end_line", &e);
    if (!*path) return tool_fail(out, "edit needs a non-empty path");
    if (!nv)
        return tool_fail(out, "edit needs new: the replacement text (new=\"\" deletes). Give old (exact "
                              "text to replace) or start_line/end_line (shown lines to replace)");
    if (!ov && !has_s)
        return tool_fail(out, "edit needs either old (the exact text to replace, matching once) or "
                              "start_line (and end_line) of lines you were shown");
    if (ov && json_object_get_string_len(ov) == 0)
        return tool_fail(out, "old is empty; give the exact text to replace, or use start_line/end_line");
    edit_file f;
    if (load(env, path, &f, out) != 0) {
        edit_file_free(&f);
        return -1;
    }
    int rc;
    const char *nws = json_object_get_string(nv);
    size_t nwl = (size_t)json_object_get_string_len(nv);
    if (ov) rc = edit_old_new(&f, json_object_get_string(ov), (size_t)json_object_get_string_len(ov), nws, nwl,
                              has_s ? s : 0, has_e ? e : 0, out);
    else rc = edit_lines(&f, s, has_e ? e : s, nws, nwl, out);
    edit_file_free(&f);
    return rc;
}

static void summarize_edit(json_object *args, char *buf, size_t size)
{
    char head[400];
    tool_summary_clip(head, sizeof head, "edit: ", targ_str(args, "path"));
    long long s, e;
    json_object *ov = NULL, *nv = NULL;
    json_object_object_get_ex(args, "old", &ov);
    json_object_object_get_ex(args, "new", &nv);
    size_t nl = 0, ol = 0;
    if (nv) {
        line_index li;
        lines_split(json_object_get_string(nv), (size_t)json_object_get_string_len(nv), &li);
        nl = li.n;
        lines_free(&li);
    }
    if (ov) {
        line_index li;
        lines_split(json_object_get_string(ov), (size_t)json_object_get_string_len(ov), &li);
        ol = li.n;
        lines_free(&li);
        if (ol == nl) snprintf(buf, size, "%s (change %zu line%s)", head, ol, ol == 1 ? "" : "s");
        else snprintf(buf, size, "%s (replace %zu line%s with %zu)", head, ol, ol == 1 ? "" : "s", nl);
    } else if (targ_int(args, "start_line", &s)) {
        if (!targ_int(args, "end_line", &e)) e = s;
        char range[48];
        line_range(range, sizeof range, s > 0 ? (size_t)s : 0, e > 0 ? (size_t)e : 0);
        if (e == s - 1) snprintf(buf, size, "%s (insert %zu line%s before line %lld)", head, nl, nl == 1 ? "" : "s", s);
        else snprintf(buf, size, "%s (%s → %zu line%s)", head, range, nl, nl == 1 ? "" : "s");
    } else {
        snprintf(buf, size, "%s", head);
    }
}

const tool_def tool_edit = {
    .name = "edit",
    .description =
        "Change part of an existing file; the change is written atomically and the result shows "
        "a numbered diff. Two ways:\n"
        "1. old + new: old is the exact current text (whitespace included, without the line "
        "numbers read shows) and must occur exactly once; include a few neighbouring lines to make "
        "it unique, or give start_line to pick the occurrence starting there. If old is not found "
        "the error shows the closest lines.\n"
        "2. start_line + end_line + new: replaces those whole lines (end_line defaults to "
        "start_line; end_line = start_line - 1 inserts before start_line). Only lines you have "
        "been shown by read, search or an earlier edit and that have not changed since can be "
        "replaced this way; otherwise read them again.\n"
        "new=\"\" deletes. After an edit that adds or removes lines, the lines below it move: use "
        "the numbers in the diff or read again. Put path first. To create a file use write.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"file to change\"},"
        "\"old\":{\"type\":\"string\",\"description\":\"exact text to replace (matches once)\"},"
        "\"new\":{\"type\":\"string\",\"description\":\"replacement text\"},"
        "\"start_line\":{\"type\":\"integer\",\"description\":\"first line to replace, 1-based\"},"
        "\"end_line\":{\"type\":\"integer\",\"description\":\"last line to replace (default start_line)\"}},"
        "\"required\":[\"path\",\"new\"]}",
    .cls = TOOL_CLASS_WRITE,
    .run = run_edit,
    .summarize = summarize_edit,
};
