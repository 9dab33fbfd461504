/* env.c — the tool environment: configuration copy, state directory,
 * the pager behind `more`, the memory of shown lines, paths, arguments and
 * result helpers shared by every tool. */
#include "tools/tool_env.h"

#include "tools/web.h"

#include <dirent.h>
#include <errno.h>
#include <json-c/json.h>
#include <strings.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- environment ------------------------------------------------------------------ */

static int make_state_dir(tool_env *env, ds4_error *err)
{
    if (env->cfg.state_dir && *env->cfg.state_dir) {
        if (base_mkdir_p(env->cfg.state_dir, 0700) != 0) {
            ds4_error_set(err, "cannot create state directory %s: %s", env->cfg.state_dir,
                     strerror(errno));
            return -1;
        }
        env->state_dir = realpath(env->cfg.state_dir, NULL);
        if (!env->state_dir) env->state_dir = xstrdup(env->cfg.state_dir);
        return 0;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || tmp[0] != '/') tmp = "/tmp";
    char buf[4096];
    char prefix[4096];
    snprintf(prefix, sizeof prefix, "%s/ds4cl-tools-", tmp);
    if (temp_template(buf, sizeof buf, prefix) != 0 || !mkdtemp(buf)) {
        ds4_error_set(err, "cannot create a temporary state directory in %s: %s", tmp,
                 strerror(errno));
        return -1;
    }
    env->state_dir = xstrdup(buf);
    env->state_dir_owned = true;
    return 0;
}

static char **copy_list(const char *const *list)
{
    if (!list) return NULL;
    size_t n = 0;
    while (list[n]) n++;
    char **c = xcalloc(n + 1, sizeof *c);
    for (size_t i = 0; i < n; i++) c[i] = xstrdup(list[i]);
    return c;
}

/* --allow takes one tool or a list ("read,edit" or "read edit"). */
static char **split_allow(const char *const *list)
{
    if (!list) return NULL;
    size_t n = 0, cap = 8;
    char **c = xcalloc(cap, sizeof *c);
    for (size_t i = 0; list[i]; i++) {
        for (const char *p = list[i]; *p;) {
            size_t skip = strspn(p, ", \t");
            p += skip;
            size_t len = strcspn(p, ", \t");
            if (!len) break;
            if (n + 2 > cap) {
                cap *= 2;
                c = xrealloc(c, cap * sizeof *c);
            }
            c[n] = xstrndup(p, len);
            c[++n] = NULL;
            p += len;
        }
    }
    return c;
}

static void free_list(char **list)
{
    if (!list) return;
    for (size_t i = 0; list[i]; i++) free(list[i]);
    free(list);
}

tool_env *tool_env_new(const tool_env_config *cfg, ds4_error *err)
{
    if (err) err->msg[0] = 0;
    tool_env_config zero = {0};
    if (!cfg) cfg = &zero;
    tool_env *env = xcalloc(1, sizeof *env);
    env->cfg = *cfg;
    env->cfg.workspace = xstrdup(cfg->workspace);
    env->cfg.rules_path = xstrdup(cfg->rules_path);
    env->cfg.state_dir = xstrdup(cfg->state_dir);
    env->cfg.cdp_url = xstrdup(cfg->cdp_url);
    env->cfg.browser_path = xstrdup(cfg->browser_path);
    env->cfg.search_url = xstrdup(cfg->search_url);
    env->allow = split_allow(cfg->allow);
    env->cfg.allow = (const char *const *)env->allow;
    char **writable = copy_list(cfg->writable_dirs);
    env->cfg.writable_dirs = (const char *const *)writable;
    env->sandbox.abi = -1;

    const char *ws = cfg->workspace && *cfg->workspace ? cfg->workspace : ".";
    env->workspace = realpath(ws, NULL);
    struct stat st;
    if (!env->workspace || stat(env->workspace, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ds4_error_set(err, "workspace %s is not a directory%s%s", ws,
                 env->workspace ? "" : ": ", env->workspace ? "" : strerror(errno));
        tool_env_free(env);
        return NULL;
    }
    env->workspace_len = strlen(env->workspace);
    if (env->workspace_len == 1) env->workspace_len = 0; /* "/": every path is below it */
    const char *home = getenv("HOME");
    if (home && home[0] == '/') env->home = xstrdup(home);

    for (size_t i = 0; env->allow && env->allow[i]; i++) {
        if (!tools_find(env->allow[i])) {
            ds4_error_set(err, "--allow %s: no such tool", env->allow[i]);
            tool_env_free(env);
            return NULL;
        }
    }
    if (make_state_dir(env, err) != 0 || perm_rules_load(env, err) != 0) {
        tool_env_free(env);
        return NULL;
    }
    return env;
}

void tool_env_free(tool_env *env)
{
    if (!env) return;
    jobs_free(env);
    web_state_free(env->web);
    tool_pager_clear(env);
    seen_clear(env);
    free(env->seen);
    perm_rules_free(env->rules);
    if (env->state_dir_owned && env->state_dir) rm_rf(env->state_dir);
    free(env->state_dir);
    free(env->workspace);
    free(env->home);
    free((char *)env->cfg.workspace);
    free((char *)env->cfg.rules_path);
    free((char *)env->cfg.state_dir);
    free((char *)env->cfg.cdp_url);
    free((char *)env->cfg.browser_path);
    free((char *)env->cfg.search_url);
    free_list(env->allow);
    free_list((char **)env->cfg.writable_dirs);
    free(env);
}

web_state *tool_env_web(tool_env *env)
{
    if (!env) return NULL;
    if (!env->web) {
        tool_env_config c = env->cfg;
        c.state_dir = env->state_dir;
        env->web = web_state_new(&c);
    }
    return env->web;
}

const char *tool_env_workspace(tool_env *env) { return env->workspace; }
const char *tool_env_state_dir(tool_env *env) { return env->state_dir; }

void tool_env_reset_views(tool_env *env)
{
    tool_pager_clear(env);
    seen_clear(env);
}

/* ---- pager ------------------------------------------------------------------------- */

void tool_pager_clear(tool_env *env)
{
    free(env->pager.label);
    free(env->pager.text);
    free(env->pager.marks);
    for (size_t i = 0; i < env->pager.nfiles; i++) free(env->pager.files[i].path);
    free(env->pager.files);
    memset(&env->pager, 0, sizeof env->pager);
}

void tool_pager_set_marks(tool_env *env, pager_mark *marks, size_t nmarks, pager_file *files,
                          size_t nfiles)
{
    env->pager.marks = marks;
    env->pager.nmarks = nmarks;
    env->pager.files = files;
    env->pager.nfiles = nfiles;
}

void tool_pager_set(tool_env *env, const char *label, const char *text, size_t len,
                    size_t shown_lines, size_t page_lines)
{
    tool_pager_clear(env);
    env->pager.kind = PAGER_TEXT;
    env->pager.label = xstrdup(label ? label : "output");
    env->pager.text = xmalloc(len + 1);
    memcpy(env->pager.text, text, len);
    env->pager.text[len] = 0;
    env->pager.len = len;
    env->pager.next_line = shown_lines;
    env->pager.page_lines = page_lines ? page_lines : 100;
}

void tool_pager_set_file(tool_env *env, const char *path, size_t next_line, size_t page_lines,
                         bool raw)
{
    tool_pager_clear(env);
    env->pager.kind = PAGER_FILE;
    env->pager.label = xstrdup(path);
    env->pager.next_line = next_line;
    env->pager.page_lines = page_lines ? page_lines : 500;
    env->pager.raw = raw;
}

void tool_pager_set_web(tool_env *env)
{
    tool_pager_clear(env);
    env->pager.kind = PAGER_WEB;
    env->pager.label = xstrdup("web page");
}

void tool_pager_show(tool_env *env, const char *label, const char *text, size_t len,
                     size_t page_lines, size_t max_bytes, strbuf *out)
{
    line_index li;
    lines_split(text, len, &li);
    if (!page_lines) page_lines = 100;
    size_t budget = max_bytes > 256 ? max_bytes - 256 : max_bytes;
    size_t k = 0, used = 0;
    while (k < li.n && k < page_lines) {
        size_t l = li.end[k] - li.start[k];
        if (k > 0 && used + l > budget) break;
        used += l;
        k++;
    }
    if (k == li.n) {
        sb_append(out, text, len);
        if (len && text[len - 1] != '\n') sb_putc(out, '\n');
        if (env->pager.kind == PAGER_TEXT) tool_pager_clear(env);
    } else {
        sb_append(out, text, li.end[k - 1]);
        if (li.end[k - 1] == 0 || text[li.end[k - 1] - 1] != '\n') sb_putc(out, '\n');
        sb_printf(out, "[%zu of %zu lines shown; call more to see the next %zu]\n", k, li.n,
                  page_lines < li.n - k ? page_lines : li.n - k);
        tool_pager_set(env, label, text, len, k, page_lines);
    }
    lines_free(&li);
}

/* ---- lines ------------------------------------------------------------------------- */

void lines_split(const char *text, size_t len, line_index *li)
{
    size_t cap = 64;
    memset(li, 0, sizeof *li);
    li->start = xmalloc(cap * sizeof *li->start);
    li->len = xmalloc(cap * sizeof *li->len);
    li->end = xmalloc(cap * sizeof *li->end);
    size_t pos = 0;
    while (pos < len) {
        if (li->n == cap) {
            cap *= 2;
            li->start = xrealloc(li->start, cap * sizeof *li->start);
            li->len = xrealloc(li->len, cap * sizeof *li->len);
            li->end = xrealloc(li->end, cap * sizeof *li->end);
        }
        size_t s = pos;
        const char *nl = memchr(text + pos, '\n', len - pos);
        const char *cr = memchr(text + pos, '\r', (nl ? (size_t)(nl - text) : len) - pos);
        size_t e, next;
        if (cr) {
            e = (size_t)(cr - text);
            next = (e + 1 < len && text[e + 1] == '\n') ? e + 2 : e + 1;
        } else if (nl) {
            e = (size_t)(nl - text);
            next = e + 1;
        } else {
            e = len;
            next = len;
        }
        li->start[li->n] = s;
        li->len[li->n] = e - s;
        li->end[li->n] = next;
        li->n++;
        pos = next;
    }
}

void lines_free(line_index *li)
{
    free(li->start);
    free(li->len);
    free(li->end);
    memset(li, 0, sizeof *li);
}

size_t lines_at_offset(const line_index *li, size_t off)
{
    size_t lo = 0, hi = li->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (li->end[mid] <= off) lo = mid + 1;
        else hi = mid;
    }
    return lo < li->n ? lo : (li->n ? li->n - 1 : 0);
}

uint64_t line_hash_begin(void) { return 1469598103934665603ULL; }

uint64_t line_hash_add(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t line_hash_end(uint64_t h, size_t total_len)
{
    h ^= total_len;
    return h ? h : 1;
}

uint64_t line_hash(const char *s, size_t n)
{
    return line_hash_end(line_hash_add(line_hash_begin(), s, n), n);
}

long text_binary_offset(const char *data, size_t len)
{
    size_t n = len < 8192 ? len : 8192;
    const char *z = memchr(data, 0, n);
    return z ? (long)(z - data) : -1;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 when invalid. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    size_t k;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) { k = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; min = 0x10000; }
    else return 0;
    if (n < k) return 0;
    unsigned cp = c & (0x7F >> k);
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

void sb_append_visible(strbuf *b, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x20 && c < 0x7F) { i++; continue; }
        size_t k = c >= 0x80 ? utf8_seq(u + i, n - i) : 0;
        if (k) { i += k; continue; }
        if (c == '\t') { i++; continue; }
        sb_append(b, s + run, i - run);
        if (c < 0x20) { sb_putc(b, '^'); sb_putc(b, (char)(c + 64)); }
        else if (c == 0x7F) sb_puts(b, "^?");
        else sb_puts(b, "\xEF\xBF\xBD");
        i++;
        run = i;
    }
    sb_append(b, s + run, n - run);
}

static size_t utf8_floor(const char *s, size_t n)
{
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

bool sb_append_line_capped(strbuf *b, const char *s, size_t n, size_t cap)
{
    if (n <= cap) {
        sb_append_visible(b, s, n);
        return false;
    }
    size_t k = utf8_floor(s, cap);
    sb_append_visible(b, s, k);
    sb_printf(b, " … [line cut: %zu bytes in all]", n);
    return true;
}

void text_fit(strbuf *b, size_t max)
{
    if (b->len <= max || max < 512) {
        if (b->len > max && max) {
            size_t k = utf8_floor(b->s, max);
            b->len = k;
            b->s[k] = 0;
        }
        return;
    }
    char note[160];
    size_t note_room = sizeof note;
    size_t head = utf8_floor(b->s, (max - note_room) * 2 / 3);
    size_t tail_len = max - note_room - head;
    size_t tail = b->len - tail_len;
    while (tail < b->len && ((unsigned char)b->s[tail] & 0xC0) == 0x80) tail++;
    int nl = snprintf(note, sizeof note,
                      "\n[… %zu bytes omitted: the output did not fit the room left in the context …]\n",
                      tail - head);
    memmove(b->s + head + (size_t)nl, b->s + tail, b->len - tail);
    memcpy(b->s + head, note, (size_t)nl);
    b->len = head + (size_t)nl + (b->len - tail);
    b->s[b->len] = 0;
}

/* ---- shown lines ------------------------------------------------------------------- */

struct seen_file {
    char *path;
    size_t n;       /* lines known about (array length) */
    uint64_t *h;    /* 0 = not shown */
    struct { dev_t dev; ino_t ino; off_t size; struct timespec mtime; bool set; } ver;
};

static uint64_t path_hash(const char *s)
{
    return line_hash(s, strlen(s));
}

static struct seen_file **seen_slot(tool_env *env, const char *path)
{
    if (!env->seen_cap) return NULL;
    size_t mask = env->seen_cap - 1, i = (size_t)path_hash(path) & mask;
    while (env->seen[i] && strcmp(env->seen[i]->path, path) != 0) i = (i + 1) & mask;
    return &env->seen[i];
}

static struct seen_file *seen_find(tool_env *env, const char *path, bool create)
{
    struct seen_file **slot = seen_slot(env, path);
    if (slot && *slot) return *slot;
    if (!create) return NULL;
    if ((env->seen_count + 1) * 2 > env->seen_cap) {
        size_t ncap = env->seen_cap ? env->seen_cap * 2 : 64;
        struct seen_file **old = env->seen;
        size_t ocap = env->seen_cap;
        env->seen = xcalloc(ncap, sizeof *env->seen);
        env->seen_cap = ncap;
        for (size_t i = 0; i < ocap; i++)
            if (old[i]) *seen_slot(env, old[i]->path) = old[i];
        free(old);
        slot = seen_slot(env, path);
    }
    struct seen_file *f = xcalloc(1, sizeof *f);
    f->path = xstrdup(path);
    *slot = f;
    env->seen_count++;
    return f;
}

static void seen_grow(struct seen_file *f, size_t n)
{
    if (n <= f->n) return;
    f->h = xrealloc(f->h, n * sizeof *f->h);
    memset(f->h + f->n, 0, (n - f->n) * sizeof *f->h);
    f->n = n;
}

void seen_mark(tool_env *env, const char *abs_path, size_t first, size_t count,
               const uint64_t *hashes)
{
    if (!count) return;
    struct seen_file *f = seen_find(env, abs_path, true);
    seen_grow(f, first + count);
    memcpy(f->h + first, hashes, count * sizeof *hashes);
}

void seen_mark_text(tool_env *env, const char *abs_path, const char *text,
                    const line_index *li, size_t first, size_t count)
{
    if (first >= li->n) return;
    if (count > li->n - first) count = li->n - first;
    struct seen_file *f = seen_find(env, abs_path, true);
    seen_grow(f, first + count);
    for (size_t i = 0; i < count; i++)
        f->h[first + i] = line_hash(text + li->start[first + i], li->len[first + i]);
}

uint64_t seen_get(tool_env *env, const char *abs_path, size_t line)
{
    struct seen_file *f = seen_find(env, abs_path, false);
    return f && line < f->n ? f->h[line] : 0;
}

void seen_splice(tool_env *env, const char *abs_path, size_t first, size_t old_count,
                 size_t new_count)
{
    struct seen_file *f = seen_find(env, abs_path, false);
    if (!f || first >= f->n) return;
    /* Lines after the edit keep their state only when nothing moved: the
     * model may still use the numbers it saw before the edit, and a shifted
     * memory would let such a stale number pass the check. */
    size_t keep_to = old_count == new_count ? f->n : first;
    for (size_t i = first; i < f->n; i++)
        if (i >= keep_to || i < first + old_count) f->h[i] = 0;
}

void seen_forget(tool_env *env, const char *abs_path)
{
    struct seen_file *f = seen_find(env, abs_path, false);
    if (f && f->n) memset(f->h, 0, f->n * sizeof *f->h);
}

static bool same_version(const struct seen_file *f, const struct stat *st)
{
    return f->ver.set && f->ver.dev == st->st_dev && f->ver.ino == st->st_ino &&
           f->ver.size == st->st_size && f->ver.mtime.tv_sec == st->st_mtim.tv_sec &&
           f->ver.mtime.tv_nsec == st->st_mtim.tv_nsec;
}

void seen_set_version(tool_env *env, const char *abs_path, const struct stat *st)
{
    struct seen_file *f = seen_find(env, abs_path, true);
    f->ver.dev = st->st_dev;
    f->ver.ino = st->st_ino;
    f->ver.size = st->st_size;
    f->ver.mtime = st->st_mtim;
    f->ver.set = true;
}

void seen_sync(tool_env *env, const char *abs_path, const struct stat *st)
{
    struct seen_file *f = seen_find(env, abs_path, true);
    if (!same_version(f, st) && f->n) memset(f->h, 0, f->n * sizeof *f->h);
    seen_set_version(env, abs_path, st);
}

bool seen_version_matches(tool_env *env, const char *abs_path, const struct stat *st)
{
    struct seen_file *f = seen_find(env, abs_path, false);
    return f && same_version(f, st);
}

void seen_clear(tool_env *env)
{
    for (size_t i = 0; i < env->seen_cap; i++) {
        if (!env->seen[i]) continue;
        free(env->seen[i]->path);
        free(env->seen[i]->h);
        free(env->seen[i]);
        env->seen[i] = NULL;
    }
    env->seen_count = 0;
}

/* ---- paths ------------------------------------------------------------------------- */

/* Joins path onto the workspace (or $HOME for "~/") without normalising. */
static char *join_raw(tool_env *env, const char *path)
{
    strbuf b = {0};
    if (path[0] == '/') sb_puts(&b, path);
    else if (path[0] == '~' && (path[1] == '/' || !path[1]) && env->home) {
        sb_puts(&b, env->home);
        sb_puts(&b, path + 1);
    } else {
        sb_puts(&b, env->workspace);
        if (*path && strcmp(path, ".") != 0) {
            if (b.len == 0 || b.s[b.len - 1] != '/') sb_putc(&b, '/');
            sb_puts(&b, path);
        }
    }
    return sb_take(&b);
}

/* Collapses "//", "/./" and "/../" in an absolute path, in place. */
static void normalize_abs(char *p)
{
    char *out = p;
    const char *in = p;
    while (*in) {
        while (*in == '/') in++;
        if (!*in) break;
        const char *seg = in;
        while (*in && *in != '/') in++;
        size_t n = (size_t)(in - seg);
        if (n == 1 && seg[0] == '.') continue;
        if (n == 2 && seg[0] == '.' && seg[1] == '.') {
            while (out > p && *--out != '/') {}
            continue;
        }
        *out++ = '/';
        memmove(out, seg, n);
        out += n;
    }
    if (out == p) *out++ = '/';
    *out = 0;
}

char *tool_abs_path(tool_env *env, const char *path)
{
    char *p = join_raw(env, path);
    normalize_abs(p);
    return p;
}

char *tool_real_target(tool_env *env, const char *path)
{
    char *raw = join_raw(env, path);
    size_t n = strlen(raw);
    while (n > 1 && raw[n - 1] == '/') raw[--n] = 0;
    /* Find the longest prefix the kernel can resolve; what follows it does
     * not exist, so it holds no symlinks and may be normalised lexically. */
    size_t cut = n;
    char *real = NULL;
    for (;;) {
        char save = raw[cut];
        raw[cut] = 0;
        real = realpath(cut ? raw : "/", NULL);
        raw[cut] = save;
        if (real || cut == 0) break;
        while (cut > 0 && raw[cut - 1] != '/') cut--;
        while (cut > 0 && raw[cut - 1] == '/') cut--;
    }
    strbuf b = {0};
    sb_puts(&b, real ? real : "/");
    free(real);
    if (raw[cut]) {
        sb_putc(&b, '/');
        sb_puts(&b, raw + cut);
    }
    free(raw);
    char *r = sb_take(&b);
    normalize_abs(r);
    return r;
}

bool tool_in_workspace(tool_env *env, const char *p)
{
    size_t w = env->workspace_len;
    if (w == 0) return p[0] == '/';
    return strncmp(p, env->workspace, w) == 0 && (p[w] == 0 || p[w] == '/');
}

bool tool_in_protected(tool_env *env, const char *p)
{
    if (!tool_in_workspace(env, p)) return false;
    const char *rest = p + env->workspace_len;
    if (*rest == '/') rest++;
    static const char *const dirs[] = { ".git", ".ds4cl" };
    for (size_t i = 0; i < 2; i++) {
        size_t n = strlen(dirs[i]);
        if (strncmp(rest, dirs[i], n) == 0 && (rest[n] == 0 || rest[n] == '/')) return true;
    }
    return false;
}

const char *tool_display_path(tool_env *env, const char *p)
{
    size_t w = env->workspace_len;
    if (w == 0) return p;
    if (strncmp(p, env->workspace, w) == 0) {
        if (p[w] == 0) return ".";
        if (p[w] == '/') return p + w + 1;
    }
    return p;
}

/* ---- file checks ------------------------------------------------------------------- */

static size_t edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 64 || m > 64) return 99;
    size_t row[65];
    for (size_t j = 0; j <= m; j++) row[j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t cur = row[j];
            size_t sub = prev + (a[i - 1] != b[j - 1]);
            size_t best = row[j] + 1 < row[j - 1] + 1 ? row[j] + 1 : row[j - 1] + 1;
            row[j] = sub < best ? sub : best;
            prev = cur;
        }
    }
    return row[m];
}

void tool_suggest_names(const char *abs_path, strbuf *b)
{
    char *dir = xstrdup(abs_path);
    char *slash = strrchr(dir, '/');
    if (!slash) { free(dir); return; }
    const char *name = slash + 1;
    char *base = xstrdup(name);
    if (slash == dir) slash[1] = 0;
    else *slash = 0;
    DIR *d = opendir(dir);
    if (!d) {
        sb_printf(b, " (%s does not exist either)", dir);
        free(dir);
        free(base);
        return;
    }
    struct dirent *e;
    int found = 0;
    size_t blen = strlen(base);
    while ((e = readdir(d)) && found < 5) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        bool close = strcasecmp(e->d_name, base) == 0 || edit_distance(e->d_name, base) <= (blen > 3 ? 2 : 1) ||
                     (blen >= 3 && strncmp(e->d_name, base, blen) == 0);
        if (!close) continue;
        sb_printf(b, "%s%s", found ? ", " : " Similar names there: ", e->d_name);
        found++;
    }
    if (found) sb_putc(b, '.');
    closedir(d);
    free(dir);
    free(base);
}

int tool_check_regular(tool_env *env, const char *abs_path, struct stat *st, tool_result *out)
{
    const char *shown = tool_display_path(env, abs_path);
    if (stat(abs_path, st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR) {
            strbuf b = {0};
            sb_printf(&b, "%s does not exist.", shown);
            tool_suggest_names(abs_path, &b);
            int rc = tool_fail(out, "%s", sb_str(&b));
            sb_free(&b);
            return rc;
        }
        return tool_fail(out, "cannot access %s: %s", shown, strerror(e));
    }
    if (S_ISDIR(st->st_mode)) return tool_fail(out, "%s is a directory; use list to see what it holds", shown);
    if (!S_ISREG(st->st_mode)) return tool_fail(out, "%s is not a regular file (a device, socket or pipe)", shown);
    if (access(abs_path, R_OK) != 0) return tool_fail(out, "cannot read %s: %s", shown, strerror(errno));
    return 0;
}

/* ---- arguments --------------------------------------------------------------------- */

static json_object *arg_get(json_object *args, const char *name)
{
    json_object *v;
    if (!args || !json_object_is_type(args, json_type_object)) return NULL;
    if (!json_object_object_get_ex(args, name, &v) || !v) return NULL;
    return v;
}

const char *targ_str(json_object *args, const char *name)
{
    json_object *v = arg_get(args, name);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

bool targ_int(json_object *args, const char *name, long long *out)
{
    json_object *v = arg_get(args, name);
    if (!v || !json_object_is_type(v, json_type_int)) return false;
    *out = (long long)json_object_get_int64(v);
    return true;
}

bool targ_bool(json_object *args, const char *name, bool dflt)
{
    json_object *v = arg_get(args, name);
    return v && json_object_is_type(v, json_type_boolean) ? json_object_get_boolean(v) : dflt;
}

bool targ_has(json_object *args, const char *name)
{
    return arg_get(args, name) != NULL;
}

/* ---- results ----------------------------------------------------------------------- */

int tool_fail(tool_result *out, const char *fmt, ...)
{
    strbuf b = {0};
    sb_puts(&b, "Tool error: ");
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&b, fmt, ap);
    va_end(ap);
    free(out->text);
    out->text = sb_take(&b);
    out->is_error = true;
    return -1;
}

int tool_ok(tool_result *out, strbuf *b)
{
    free(out->text);
    out->text = sb_take(b);
    out->is_error = false;
    return 0;
}

size_t tool_result_cap(const tool_call_ctx *ctx)
{
    if (!ctx || !ctx->max_result_bytes) return TOOL_DEFAULT_RESULT_BYTES;
    return ctx->max_result_bytes < 1024 ? 1024 : ctx->max_result_bytes;
}

bool tool_cancelled(const tool_call_ctx *ctx)
{
    return ctx && ctx->cancelled && ctx->cancelled(ctx->ud);
}

void tool_summary_clip(char *buf, size_t size, const char *prefix, const char *s)
{
    if (!size) return;
    int k = snprintf(buf, size, "%s", prefix ? prefix : "");
    size_t n = k < 0 ? 0 : (size_t)k >= size ? size - 1 : (size_t)k;
    if (!s) return;
    const unsigned char *u = (const unsigned char *)s;
    bool space = false;
    while (*u && n + 1 < size) {
        unsigned char c = *u++;
        if (c < 0x20 || c == 0x7F) {
            if (!space && n > 0) { buf[n++] = ' '; space = true; }
            continue;
        }
        space = c == ' ';
        buf[n++] = (char)c;
    }
    buf[n] = 0;
    if (*u && size >= 8) {
        /* cut at a UTF-8 boundary and mark it */
        size_t m = n > 4 ? n - 4 : 0;
        while (m > 0 && ((unsigned char)buf[m] & 0xC0) == 0x80) m--;
        memcpy(buf + m, " …", 5);
    }
}
