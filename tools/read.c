/* read.c — the `read` tool: a range of a text file with line numbers,
 * streamed so that huge files cost memory for the shown range only. */
#include "tools/tool_env.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_DEFAULT_LINES 500
#define READ_MAX_LINES 100000
#define READ_CHUNK (1u << 20)
/* room kept for the header and the footer of a result */
#define READ_FRAME 400

typedef struct {
    /* request */
    size_t first, last;     /* 1-based inclusive range wanted (last may be SIZE_MAX) */
    bool raw, whole;
    size_t cap;             /* bytes of body allowed */
    /* progress */
    size_t line;            /* 1-based number of the line being read */
    size_t cur_len;
    uint64_t cur_hash;
    bool cur_cut;
    strbuf cur;             /* the current line's shown bytes (in range only) */
    bool pending_cr;
    /* output */
    strbuf body;
    size_t shown_first, shown_last; /* 0 when none */
    bool stopped;           /* body full: later lines are not shown */
    size_t body_need;       /* whole=true: bytes the range would take */
    uint64_t *hashes;
    size_t nhash, caphash;
} reader;

static void push_hash(reader *r, uint64_t h)
{
    if (r->nhash == r->caphash) {
        r->caphash = r->caphash ? r->caphash * 2 : 256;
        r->hashes = xrealloc(r->hashes, r->caphash * sizeof *r->hashes);
    }
    r->hashes[r->nhash++] = h;
}

static bool in_range(const reader *r)
{
    return r->line >= r->first && r->line <= r->last;
}

static void end_line(reader *r, const char *term, size_t tlen)
{
    if (in_range(r)) {
        uint64_t h = line_hash_end(r->cur_hash, r->cur_len);
        strbuf one = {0};
        if (r->raw) {
            sb_append(&one, r->cur.s ? r->cur.s : "", r->cur.len);
            sb_append(&one, term, tlen);
        } else {
            sb_printf(&one, "%zu\t", r->line);
            if (r->cur_cut) {
                sb_append_visible(&one, r->cur.s ? r->cur.s : "", r->cur.len);
                sb_printf(&one, " … [line cut: %zu bytes in all]", r->cur_len);
            } else {
                sb_append_visible(&one, r->cur.s ? r->cur.s : "", r->cur.len);
            }
            sb_putc(&one, '\n');
        }
        if (r->whole) r->body_need += one.len;
        if (!r->stopped && r->body.len + one.len > r->cap && r->shown_first) r->stopped = true;
        if (!r->stopped) {
            sb_append(&r->body, one.s ? one.s : "", one.len);
            if (!r->shown_first) r->shown_first = r->line;
            r->shown_last = r->line;
            push_hash(r, r->cur_cut ? 0 : h);
        }
        sb_free(&one);
    }
    r->line++;
    r->cur_len = 0;
    r->cur_hash = line_hash_begin();
    r->cur_cut = false;
    sb_clear(&r->cur);
}

static void feed(reader *r, const char *buf, size_t n)
{
    size_t i = 0;
    if (r->pending_cr && n > 0) {
        r->pending_cr = false;
        if (buf[0] == '\n') {
            /* the "\r\n" of the line already ended */
            i = 1;
            if (r->raw && !r->stopped && r->shown_last == r->line - 1) sb_putc(&r->body, '\n');
        }
    }
    while (i < n) {
        size_t s = i;
        while (i < n && buf[i] != '\n' && buf[i] != '\r') i++;
        size_t k = i - s;
        if (k) {
            r->cur_hash = line_hash_add(r->cur_hash, buf + s, k);
            if (in_range(r)) {
                size_t room = r->raw ? k : (r->cur.len < TOOL_LINE_CAP ? TOOL_LINE_CAP - r->cur.len : 0);
                if (room < k) r->cur_cut = true;
                sb_append(&r->cur, buf + s, room < k ? room : k);
            }
            r->cur_len += k;
        }
        if (i >= n) break;
        if (buf[i] == '\n') {
            end_line(r, "\n", 1);
            i++;
        } else {
            if (i + 1 < n) {
                bool crlf = buf[i + 1] == '\n';
                end_line(r, crlf ? "\r\n" : "\r", crlf ? 2 : 1);
                i += crlf ? 2 : 1;
            } else {
                /* a '\r' at the end of the chunk: the next byte decides */
                end_line(r, "\r", 1);
                r->pending_cr = true;
                i++;
            }
        }
    }
}

static void cut_utf8_tail(strbuf *b)
{
    /* a line cut inside a UTF-8 sequence would show a replacement char */
    size_t n = b->len, k = n;
    while (k > 0 && n - k < 4 && ((unsigned char)b->s[k - 1] & 0xC0) == 0x80) k--;
    if (k > 0 && ((unsigned char)b->s[k - 1] & 0x80)) {
        unsigned char c = (unsigned char)b->s[k - 1];
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (n - (k - 1) < need) {
            b->len = k - 1;
            b->s[b->len] = 0;
        }
    }
}

int read_file_range(tool_env *env, const char *abs_path, size_t start_line, size_t max_lines,
                    bool whole, bool raw, const tool_call_ctx *ctx, tool_result *out)
{
    struct stat st;
    if (tool_check_regular(env, abs_path, &st, out) != 0) return -1;
    const char *shown = tool_display_path(env, abs_path);
    int fd = open(abs_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return tool_fail(out, "cannot open %s: %s", shown, strerror(errno));
    if (start_line < 1) start_line = 1;
    if (max_lines < 1) max_lines = 1;
    if (max_lines > READ_MAX_LINES) max_lines = READ_MAX_LINES;

    size_t cap = tool_result_cap(ctx);
    reader r = {0};
    r.first = start_line;
    r.last = whole ? SIZE_MAX : start_line + max_lines - 1;
    r.raw = raw;
    r.whole = whole;
    r.cap = cap > READ_FRAME * 2 ? cap - READ_FRAME : cap / 2;
    r.line = 1;
    r.cur_hash = line_hash_begin();

    char *buf = xmalloc(READ_CHUNK);
    size_t total_bytes = 0;
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf, READ_CHUNK);
        if (n < 0) {
            if (errno == EINTR) continue;
            rc = tool_fail(out, "error reading %s: %s", shown, strerror(errno));
            break;
        }
        if (n == 0) break;
        if (total_bytes == 0) {
            long z = text_binary_offset(buf, (size_t)n);
            if (z >= 0) {
                rc = tool_fail(out, "%s looks like a binary file (a NUL byte at offset %ld; %lld bytes). "
                                    "Inspect it with bash instead, e.g. `xxd %s | head` or `file %s`.",
                               shown, z, (long long)st.st_size, shown, shown);
                break;
            }
        }
        total_bytes += (size_t)n;
        feed(&r, buf, (size_t)n);
        if (tool_cancelled(ctx)) {
            rc = tool_fail(out, "interrupted while reading %s", shown);
            break;
        }
    }
    close(fd);
    free(buf);
    if (rc == 0) {
        /* a last line without terminator */
        if (r.cur_len > 0 || r.cur_cut) end_line(&r, "", 0);
        size_t nlines = r.line - 1;
        if (whole && r.stopped) {
            rc = tool_fail(out, "%s from line %zu to its end is %zu lines (about %zu bytes as read "
                                "output), which does not fit the room left in the context (%zu bytes). "
                                "Read it in parts with max_lines and continue with more, or search it.",
                           shown, start_line, nlines - start_line + 1, r.body_need, cap);
        } else if (nlines == 0) {
            strbuf b = {0};
            sb_printf(&b, "%s: empty file (0 lines)\n", shown);
            seen_sync(env, abs_path, &st);
            tool_pager_clear(env);
            rc = tool_ok(out, &b);
        } else if (start_line > nlines) {
            rc = tool_fail(out, "start_line %zu is past the end of %s, which has %zu lines", start_line,
                           shown, nlines);
        } else {
            strbuf b = {0};
            size_t a = r.shown_first, z = r.shown_last;
            if (raw) cut_utf8_tail(&r.body);
            if (!raw) {
                sb_printf(&b, "%s: lines %zu-%zu of %zu", shown, a, z, nlines);
                if (z < nlines)
                    sb_printf(&b, "; continue_offset=%zu (call more to read the next %zu lines)", z + 1,
                              max_lines);
                if (r.stopped && z < r.last && z < nlines)
                    sb_printf(&b, "; stopped before line %zu to fit the context", z + 1);
                sb_putc(&b, '\n');
                sb_append(&b, sb_str(&r.body), r.body.len);
            } else {
                sb_append(&b, sb_str(&r.body), r.body.len);
                if (b.len && b.s[b.len - 1] != '\n' && b.s[b.len - 1] != '\r') sb_putc(&b, '\n');
                if (z < nlines)
                    sb_printf(&b, "[raw read of %s stopped at line %zu of %zu; continue_offset=%zu: "
                                  "call more to read on]\n", shown, z, nlines, z + 1);
            }
            seen_sync(env, abs_path, &st);
            seen_mark(env, abs_path, a - 1, r.nhash, r.hashes);
            if (z < nlines) tool_pager_set_file(env, abs_path, z, max_lines, raw);
            else if (env->pager.kind == PAGER_FILE) tool_pager_clear(env);
            rc = tool_ok(out, &b);
        }
    }
    sb_free(&r.body);
    sb_free(&r.cur);
    free(r.hashes);
    return rc;
}

static int run_read(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    const char *path = targ_str(args, "path");
    long long start = 1, max = READ_DEFAULT_LINES;
    targ_int(args, "start_line", &start);
    targ_int(args, "max_lines", &max);
    if (!*path) return tool_fail(out, "read needs a non-empty path");
    if (start < 1) return tool_fail(out, "start_line must be 1 or more (got %lld)", start);
    if (max < 1) return tool_fail(out, "max_lines must be 1 or more (got %lld)", max);
    char *abs = tool_abs_path(env, path);
    int rc = read_file_range(env, abs, (size_t)start, (size_t)max, targ_bool(args, "whole", false),
                             targ_bool(args, "raw", false), ctx, out);
    free(abs);
    return rc;
}

static void summarize_read(json_object *args, char *buf, size_t size)
{
    char tmp[400];
    long long start = 1, max = READ_DEFAULT_LINES;
    targ_int(args, "start_line", &start);
    targ_int(args, "max_lines", &max);
    if (targ_bool(args, "whole", false)) snprintf(tmp, sizeof tmp, "from line %lld to the end", start);
    else snprintf(tmp, sizeof tmp, "lines %lld-%lld", start, start + max - 1);
    char head[300];
    tool_summary_clip(head, sizeof head, "read: ", targ_str(args, "path"));
    snprintf(buf, size, "%s (%s)", head, tmp);
}

const tool_def tool_read = {
    .name = "read",
    .description =
        "Read a text file. Each line comes as its number, a tab, and the text; the numbers are "
        "not part of the file (never copy them into edit's old text). Reads max_lines lines "
        "(default 500) from start_line (default 1); when more remains the header gives "
        "continue_offset, and `more` continues where the read stopped. For a first look at a "
        "large file read 100-200 lines or use search. whole=true reads from start_line to the "
        "end and is refused when that does not fit the room left in the context. raw=true gives "
        "the exact text without numbers. Lines over 2000 bytes are cut with a note; binary files "
        "are refused. Relative paths start at the workspace root.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"path\":{\"type\":\"string\",\"description\":\"file to read\"},"
        "\"start_line\":{\"type\":\"integer\",\"description\":\"first line, 1-based (default 1)\"},"
        "\"max_lines\":{\"type\":\"integer\",\"description\":\"how many lines (default 500)\"},"
        "\"whole\":{\"type\":\"boolean\",\"description\":\"read to the end of the file\"},"
        "\"raw\":{\"type\":\"boolean\",\"description\":\"exact text without line numbers\"}},"
        "\"required\":[\"path\"]}",
    .cls = TOOL_CLASS_READ,
    .run = run_read,
    .summarize = summarize_read,
};
