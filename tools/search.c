/* search.c — the `search` tool: literal or PCRE2 search through a tree,
 * honouring .gitignore, skipping binaries and symlinks, results grouped by
 * file with line numbers and merged context; what does not fit the first
 * result stays for `more`. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tools/tool_env.h"

#include "tools/glob.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEARCH_DEFAULT_RESULTS 50
#define SEARCH_MAX_RESULTS 1000
#define SEARCH_MAX_CONTEXT 10
#define SEARCH_HARD_MATCHES 10000
#define SEARCH_HARD_BYTES (8u << 20)
#define SEARCH_MAX_FILE (256u << 20)
#define SEARCH_MAX_DEPTH 64
#define SEARCH_LINE_CAP 500
#define BINARY_PROBE 8192 /* what text_binary_offset looks at */

typedef struct {
    tool_env *env;
    const tool_call_ctx *ctx;
    /* matcher */
    const char *needle;
    size_t nlen;
    bool memmem_only;
    pcre2_code *re;
    pcre2_match_data *md;
    /* filters */
    char **globs;
    size_t nglobs;
    bool any_positive;
    bool include_ignored;
    bool check_denied;      /* "deny read" rules exist */
    ignore_stack *ign;
    char *root;
    size_t root_len;
    size_t context;
    /* file buffer */
    char *buf;
    size_t cap;
    size_t *hits;
    size_t nhits, caphits;
    /* results */
    strbuf text;
    size_t out_lines;
    size_t matches, files_matched, files_searched, binaries, ignored, too_big, unreadable, denied;
    size_t max_results;
    size_t cut_line;        /* output line where the first page ends */
    bool stopped, cancelled;
    pager_mark *marks;
    size_t nmarks, capmarks;
    pager_file *files;
    size_t nfiles, capfiles;
} searcher;

static void add_mark(searcher *s, size_t file, size_t line, uint64_t h)
{
    if (s->nmarks == s->capmarks) {
        s->capmarks = s->capmarks ? s->capmarks * 2 : 256;
        s->marks = xrealloc(s->marks, s->capmarks * sizeof *s->marks);
    }
    s->marks[s->nmarks++] = (pager_mark){ s->out_lines, file, line, h };
}

static size_t add_file(searcher *s, const char *path, const struct stat *st)
{
    if (s->nfiles == s->capfiles) {
        s->capfiles = s->capfiles ? s->capfiles * 2 : 64;
        s->files = xrealloc(s->files, s->capfiles * sizeof *s->files);
    }
    pager_file *f = &s->files[s->nfiles];
    f->path = xstrdup(path);
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    f->size = st->st_size;
    f->mtime = st->st_mtim;
    return s->nfiles++;
}

static bool glob_ok(searcher *s, const char *abs, const char *name)
{
    if (!s->nglobs) return true;
    const char *rel = abs + s->root_len;
    if (*rel == '/') rel++;
    bool positive = !s->any_positive;
    for (size_t i = 0; i < s->nglobs; i++) {
        const char *g = s->globs[i];
        bool neg = g[0] == '!';
        if (neg) g++;
        bool m = glob_match_braces(g, strchr(g, '/') ? rel : name, false);
        if (m && neg) return false;
        if (m && !neg) positive = true;
    }
    return positive;
}

/* Offsets of the first match in each matching line. */
static void find_hits(searcher *s, const char *buf, size_t len)
{
    s->nhits = 0;
    size_t pos = 0;
    size_t limit = SEARCH_HARD_MATCHES - s->matches;
    while (pos <= len && s->nhits < limit) {
        size_t at;
        if (s->memmem_only) {
            const char *p = memmem(buf + pos, len - pos, s->needle, s->nlen);
            if (!p) break;
            at = (size_t)(p - buf);
        } else {
            int rc = pcre2_match(s->re, (PCRE2_SPTR)buf, len, pos, 0, s->md, NULL);
            if (rc < 0) break;
            at = pcre2_get_ovector_pointer(s->md)[0];
            if (at > len) break;
        }
        if (s->nhits == s->caphits) {
            s->caphits = s->caphits ? s->caphits * 2 : 64;
            s->hits = xrealloc(s->hits, s->caphits * sizeof *s->hits);
        }
        s->hits[s->nhits++] = at;
        const char *le = memchr(buf + at, '\n', len - at);
        if (!le) break;
        pos = (size_t)(le - buf) + 1;
        if (pos >= len) break;
    }
}

static void emit_line(searcher *s, size_t file, const char *buf, size_t ls, size_t len, size_t lineno,
                      char sep)
{
    if (len && buf[ls + len - 1] == '\r') len--;
    sb_printf(&s->text, "%zu%c\t", lineno + 1, sep);
    bool cut = sb_append_line_capped(&s->text, buf + ls, len, SEARCH_LINE_CAP);
    sb_putc(&s->text, '\n');
    add_mark(s, file, lineno, cut ? 0 : line_hash(buf + ls, len));
    s->out_lines++;
}

static void note_page_cut(searcher *s)
{
    if (s->matches == s->max_results && s->cut_line == SIZE_MAX) s->cut_line = s->out_lines;
}

static void search_file(searcher *s, const char *abs, int fd, const struct stat *st)
{
    if ((size_t)st->st_size > SEARCH_MAX_FILE) {
        s->too_big++;
        return;
    }
    size_t need = (size_t)st->st_size + 1;
    if (need > s->cap) {
        s->cap = need > s->cap * 2 ? need : s->cap * 2;
        free(s->buf);
        s->buf = xmalloc(s->cap);
    }
    size_t len = 0;
    bool checked = false;
    for (;;) {
        if (len + 1 >= s->cap) break;
        /* the binary test needs only the head: read that first, so a
         * large binary costs one small read */
        size_t want = s->cap - 1 - len;
        if (!checked && len + want > BINARY_PROBE) want = BINARY_PROBE - len;
        ssize_t r = read(fd, s->buf + len, want);
        if (r < 0) {
            if (errno == EINTR) continue;
            s->unreadable++;
            return;
        }
        if (r == 0) break;
        len += (size_t)r;
        if (!checked && len >= BINARY_PROBE) {
            checked = true;
            if (text_binary_offset(s->buf, len) >= 0) break;
        }
    }
    s->files_searched++;
    if (text_binary_offset(s->buf, len) >= 0) {
        s->binaries++;
        return;
    }
    find_hits(s, s->buf, len);
    if (!s->nhits) return;
    const char *buf = s->buf;
    size_t file = add_file(s, abs, st);
    s->files_matched++;
    note_page_cut(s);
    sb_append_visible(&s->text, tool_display_path(s->env, abs), strlen(tool_display_path(s->env, abs)));
    sb_putc(&s->text, '\n');
    s->out_lines++;
    /* a lone '\r' ends a line for read and edit too: number lines the same
     * way, through a full line index, in such files */
    bool lone_cr = false;
    for (const char *p = memchr(buf, '\r', len); p && !lone_cr; p = memchr(p + 1, '\r', len - (size_t)(p + 1 - buf)))
        if ((size_t)(p - buf) + 1 >= len || p[1] != '\n') lone_cr = true;
    if (s->context == 0 && !lone_cr) {
        size_t lineno = 0, counted = 0;
        for (size_t i = 0; i < s->nhits; i++) {
            const char *lsp = s->hits[i] ? memrchr(buf, '\n', s->hits[i]) : NULL;
            size_t ls = lsp ? (size_t)(lsp - buf) + 1 : 0;
            for (const char *p = buf + counted; (p = memchr(p, '\n', ls - (size_t)(p - buf)));) {
                lineno++;
                p++;
                if ((size_t)(p - buf) >= ls) break;
            }
            counted = ls;
            const char *le = memchr(buf + ls, '\n', len - ls);
            size_t n = le ? (size_t)(le - buf) - ls : len - ls;
            note_page_cut(s);
            emit_line(s, file, buf, ls, n, lineno, ':');
            s->matches++;
        }
    } else {
        line_index li;
        lines_split(buf, len, &li);
        size_t shown_to = 0; /* lines below this were printed */
        bool any = false;
        size_t li_pos = 0;
        for (size_t i = 0; i < s->nhits; i++) {
            /* hit offsets grow: advance the line cursor */
            while (li_pos + 1 < li.n && li.end[li_pos] <= s->hits[i]) li_pos++;
            size_t m = li_pos;
            size_t from = m >= s->context ? m - s->context : 0;
            if (from < shown_to) from = shown_to;
            note_page_cut(s);
            if (any && from > shown_to) {
                sb_puts(&s->text, "--\n");
                s->out_lines++;
            }
            for (size_t k = from; k < m; k++) emit_line(s, file, buf, li.start[k], li.len[k], k, '-');
            if (m >= shown_to) emit_line(s, file, buf, li.start[m], li.len[m], m, ':');
            s->matches++;
            size_t to = m + s->context + 1 < li.n ? m + s->context + 1 : li.n;
            /* context after, up to the next hit (which prints itself) */
            size_t next_hit_line = SIZE_MAX;
            if (i + 1 < s->nhits) {
                size_t q = li_pos;
                while (q + 1 < li.n && li.end[q] <= s->hits[i + 1]) q++;
                next_hit_line = q;
            }
            for (size_t k = m + 1; k < to && k < next_hit_line; k++)
                emit_line(s, file, buf, li.start[k], li.len[k], k, '-');
            shown_to = to < next_hit_line ? to : next_hit_line;
            if (shown_to < m + 1) shown_to = m + 1;
            any = true;
        }
        lines_free(&li);
    }
    if (s->matches >= SEARCH_HARD_MATCHES || s->text.len >= SEARCH_HARD_BYTES) s->stopped = true;
}

static bool skip_dir_name(const char *n)
{
    return !strcmp(n, ".git") || !strcmp(n, ".hg") || !strcmp(n, ".svn");
}

typedef struct {
    char *name;
    unsigned char type;
} dentry;

static int by_name(const void *a, const void *b)
{
    return strcmp(((const dentry *)a)->name, ((const dentry *)b)->name);
}

static void walk(searcher *s, const char *dir, int depth)
{
    if (depth > SEARCH_MAX_DEPTH || s->stopped || s->cancelled) return;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        s->unreadable++;
        return;
    }
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        s->unreadable++;
        return;
    }
    if (!s->include_ignored) ignore_push_dir(s->ign, dir);
    dentry *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            v = xrealloc(v, cap * sizeof *v);
        }
        v[n].name = xstrdup(e->d_name);
        v[n].type = e->d_type;
        n++;
    }
    qsort(v, n, sizeof *v, by_name);
    strbuf path = {0};
    for (size_t i = 0; i < n && !s->stopped; i++) {
        if (tool_cancelled(s->ctx)) {
            s->cancelled = true;
            break;
        }
        unsigned char t = v[i].type;
        struct stat st;
        if (t == DT_UNKNOWN) {
            if (fstatat(dfd, v[i].name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
            t = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : S_ISLNK(st.st_mode) ? DT_LNK : DT_UNKNOWN;
        }
        if (t != DT_DIR && t != DT_REG) continue; /* symlinks, devices, pipes */
        sb_clear(&path);
        sb_printf(&path, "%s/%s", strcmp(dir, "/") ? dir : "", v[i].name);
        if (t == DT_DIR) {
            if (skip_dir_name(v[i].name)) continue;
            if (!s->include_ignored && ignore_match(s->ign, sb_str(&path), true)) {
                s->ignored++;
                continue;
            }
            walk(s, sb_str(&path), depth + 1);
            continue;
        }
        if (!glob_ok(s, sb_str(&path), v[i].name)) continue;
        if (!s->include_ignored && ignore_match(s->ign, sb_str(&path), false)) {
            s->ignored++;
            continue;
        }
        if (s->check_denied && perm_read_denied(s->env, sb_str(&path))) {
            s->denied++;
            continue;
        }
        int fd = openat(dfd, v[i].name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) {
            s->unreadable++;
            continue;
        }
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) search_file(s, sb_str(&path), fd, &st);
        close(fd);
    }
    sb_free(&path);
    for (size_t i = 0; i < n; i++) free(v[i].name);
    free(v);
    closedir(d);
    if (!s->include_ignored) ignore_pop(s->ign);
}

static void split_globs(searcher *s, const char *g)
{
    /* "*.c,*.h" or "*.c *.h"; commas inside {} belong to the glob */
    size_t cap = 0;
    const char *p = g;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        if (!*p) break;
        const char *q = p;
        int depth = 0;
        while (*q && !(depth == 0 && (*q == ',' || *q == ' '))) {
            if (*q == '{') depth++;
            else if (*q == '}' && depth > 0) depth--;
            q++;
        }
        if (s->nglobs == cap) {
            cap = cap ? cap * 2 : 4;
            s->globs = xrealloc(s->globs, cap * sizeof *s->globs);
        }
        s->globs[s->nglobs] = xstrndup(p, (size_t)(q - p));
        if (s->globs[s->nglobs][0] != '!') s->any_positive = true;
        s->nglobs++;
        p = q;
    }
}

static void searcher_free(searcher *s)
{
    for (size_t i = 0; i < s->nglobs; i++) free(s->globs[i]);
    free(s->globs);
    if (s->md) pcre2_match_data_free(s->md);
    if (s->re) pcre2_code_free(s->re);
    ignore_free(s->ign);
    free(s->root);
    free(s->buf);
    free(s->hits);
    sb_free(&s->text);
    free(s->marks);
    for (size_t i = 0; i < s->nfiles; i++) free(s->files[i].path);
    free(s->files);
}

static void describe_query(strbuf *b, const char *query, bool regex, bool fold)
{
    sb_printf(b, "%s \"", regex ? "regex" : "text");
    sb_append_line_capped(b, query, strlen(query), 200);
    sb_printf(b, "\"%s", fold ? " (ignoring case)" : "");
}

static int run_search(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    const char *query = targ_str(args, "query");
    const char *path = targ_str(args, "path");
    const char *glob = targ_str(args, "glob");
    bool regex = targ_bool(args, "regex", false);
    bool cs = targ_bool(args, "case_sensitive", true);
    long long context = 0, max_results = SEARCH_DEFAULT_RESULTS;
    targ_int(args, "context", &context);
    targ_int(args, "max_results", &max_results);
    if (!*query) return tool_fail(out, "search needs a non-empty query");
    if (context < 0 || context > SEARCH_MAX_CONTEXT)
        return tool_fail(out, "context must be between 0 and %d (got %lld)", SEARCH_MAX_CONTEXT, context);
    if (max_results < 1) return tool_fail(out, "max_results must be 1 or more (got %lld)", max_results);
    if (max_results > SEARCH_MAX_RESULTS) max_results = SEARCH_MAX_RESULTS;

    searcher s = {0};
    s.env = env;
    s.ctx = ctx;
    s.context = (size_t)context;
    s.max_results = (size_t)max_results;
    s.cut_line = SIZE_MAX;
    s.include_ignored = targ_bool(args, "include_ignored", false);
    s.check_denied = perm_has_read_denials(env);
    s.needle = query;
    s.nlen = strlen(query);
    s.memmem_only = !regex && cs;
    if (!s.memmem_only) {
        int errcode;
        PCRE2_SIZE erroff;
        uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
        opts |= regex ? PCRE2_MULTILINE : PCRE2_LITERAL;
        if (!cs) opts |= PCRE2_CASELESS;
        s.re = pcre2_compile((PCRE2_SPTR)query, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
        if (!s.re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(errcode, msg, sizeof msg);
            searcher_free(&s);
            return tool_fail(out, "invalid regex at offset %zu: %s", (size_t)erroff, (const char *)msg);
        }
        pcre2_jit_compile(s.re, PCRE2_JIT_COMPLETE);
        s.md = pcre2_match_data_create_from_pattern(s.re, NULL);
    }
    if (glob && *glob) split_globs(&s, glob);

    char *abs = tool_abs_path(env, path && *path ? path : ".");
    const char *shown = tool_display_path(env, abs);
    struct stat st;
    int rc = 0;
    if (stat(abs, &st) != 0) {
        strbuf b = {0};
        sb_printf(&b, "%s does not exist.", shown);
        if (errno == ENOENT) tool_suggest_names(abs, &b);
        rc = tool_fail(out, "%s", sb_str(&b));
        sb_free(&b);
    } else if (S_ISDIR(st.st_mode)) {
        s.root = xstrdup(abs);
        s.root_len = strlen(abs);
        s.ign = ignore_new();
        if (!s.include_ignored) ignore_push_ancestors(s.ign, abs);
        walk(&s, abs, 0);
    } else if (S_ISREG(st.st_mode)) {
        /* a file named explicitly is searched even when ignored */
        int fd = open(abs, O_RDONLY | O_CLOEXEC);
        if (fd < 0) rc = tool_fail(out, "cannot read %s: %s", shown, strerror(errno));
        else {
            search_file(&s, abs, fd, &st);
            close(fd);
            if (s.binaries) rc = tool_fail(out, "%s looks like a binary file; search skips binaries", shown);
        }
    } else {
        rc = tool_fail(out, "%s is not a regular file or directory", shown);
    }
    if (rc == 0 && s.cancelled) rc = tool_fail(out, "search interrupted");
    if (rc == 0) {
        /* seen lines of changed files are forgotten before any is marked */
        for (size_t i = 0; i < s.nfiles; i++) {
            struct stat fst = { .st_dev = s.files[i].dev, .st_ino = s.files[i].ino,
                                .st_size = s.files[i].size, .st_mtim = s.files[i].mtime };
            seen_sync(env, s.files[i].path, &fst);
        }
        strbuf b = {0};
        if (s.matches == 0) {
            sb_puts(&b, "No matches for ");
            describe_query(&b, query, regex, !cs);
            sb_printf(&b, " in %s (%zu file%s searched", shown, s.files_searched, s.files_searched == 1 ? "" : "s");
        } else {
            sb_printf(&b, "%s%zu matching line%s in %zu file%s for ", s.stopped ? "At least " : "", s.matches,
                      s.matches == 1 ? "" : "s", s.files_matched, s.files_matched == 1 ? "" : "s");
            describe_query(&b, query, regex, !cs);
            sb_printf(&b, " in %s (%zu file%s searched", shown, s.files_searched, s.files_searched == 1 ? "" : "s");
        }
        if (s.ignored) sb_printf(&b, "; %zu paths skipped by .gitignore", s.ignored);
        if (s.binaries) sb_printf(&b, "; %zu binary files skipped", s.binaries);
        if (s.too_big) sb_printf(&b, "; %zu files over 256 MiB skipped", s.too_big);
        if (s.unreadable) sb_printf(&b, "; %zu unreadable", s.unreadable);
        if (s.denied) sb_printf(&b, "; %zu skipped by deny read rules", s.denied);
        sb_puts(&b, ")\n");
        if (s.matches == 0 && s.ignored && !s.include_ignored)
            sb_puts(&b, "include_ignored=true also searches what .gitignore excludes.\n");
        if (s.matches == 0 && cs && !regex)
            sb_puts(&b, "The search was case-sensitive; case_sensitive=false ignores case.\n");
        if (s.stopped) sb_printf(&b, "The search stopped early; narrow it with path or glob.\n");
        /* the first page: max_results matches, within the room of the result */
        size_t cap = tool_result_cap(ctx);
        size_t budget = cap > b.len + 400 ? cap - b.len - 400 : 256;
        line_index li;
        lines_split(sb_str(&s.text), s.text.len, &li);
        size_t k = 0, used = 0, limit = s.cut_line == SIZE_MAX ? li.n : s.cut_line;
        while (k < limit) {
            size_t l = li.end[k] - li.start[k];
            if (k > 0 && used + l > budget) break;
            used += l;
            k++;
        }
        sb_append(&b, sb_str(&s.text), k ? li.end[k - 1] : 0);
        /* mark the shown lines of each file */
        for (size_t i = 0; i < s.nmarks && s.marks[i].out_line < k; i++)
            seen_mark(env, s.files[s.marks[i].file].path, s.marks[i].line, 1, &s.marks[i].hash);
        if (k < li.n) {
            sb_printf(&b, "[%zu of %zu output lines shown; call more to see the rest]\n", k, li.n);
            char label[300];
            snprintf(label, sizeof label, "search for \"%.200s\"", query);
            tool_pager_set(env, label, sb_str(&s.text), s.text.len, k, k > 50 ? k : 50);
            tool_pager_set_marks(env, s.marks, s.nmarks, s.files, s.nfiles);
            s.marks = NULL;
            s.nmarks = 0;
            s.files = NULL;
            s.nfiles = 0;
        } else if (env->pager.kind == PAGER_TEXT) {
            /* an older output's rest must not look like this one's */
            tool_pager_clear(env);
        }
        lines_free(&li);
        rc = tool_ok(out, &b);
    }
    free(abs);
    searcher_free(&s);
    return rc;
}

static void summarize_search(json_object *args, char *buf, size_t size)
{
    char q[300];
    tool_summary_clip(q, sizeof q, "search: ", targ_str(args, "query"));
    const char *p = targ_str(args, "path");
    snprintf(buf, size, "%s in %s", q, p && *p ? p : ".");
}

const tool_def tool_search = {
    .name = "search",
    .description =
        "Search file contents under a directory (default: the workspace) or in one file. Shows "
        "matching lines grouped by file as \"N:<TAB>text\" (context lines as \"N-<TAB>text\"); "
        "lines shown here count as seen for line-range edits. The query is literal text unless "
        "regex=true (PCRE syntax). Files and directories excluded by .gitignore, binary files, "
        "symlinks and .git are skipped (include_ignored=true searches ignored paths too). glob "
        "limits which files are searched: \"*.c\", \"*.{c,h}\", \"src/**/*.py\", several "
        "separated by commas, \"!*.min.js\" to exclude. With many matches the first max_results "
        "(default 50) are shown and more shows the rest. Prefer search over reading whole files "
        "to find where something is.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"query\":{\"type\":\"string\",\"description\":\"text (or regex) to find\"},"
        "\"path\":{\"type\":\"string\",\"description\":\"directory or file (default: workspace root)\"},"
        "\"regex\":{\"type\":\"boolean\",\"description\":\"query is a PCRE regular expression\"},"
        "\"case_sensitive\":{\"type\":\"boolean\",\"description\":\"default true\"},"
        "\"glob\":{\"type\":\"string\",\"description\":\"file name pattern(s), e.g. *.c,*.h\"},"
        "\"context\":{\"type\":\"integer\",\"description\":\"lines before and after each match (0-10)\"},"
        "\"max_results\":{\"type\":\"integer\",\"description\":\"matches in the first result (default 50)\"},"
        "\"include_ignored\":{\"type\":\"boolean\",\"description\":\"also search .gitignored paths\"}},"
        "\"required\":[\"query\"]}",
    .cls = TOOL_CLASS_READ,
    .run = run_search,
    .summarize = summarize_search,
};
