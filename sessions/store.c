/* store.c — the directory of sessions: locations, IDs, locks, metadata,
 * listing, deletion and the snapshot budget. */
#include "sessions/store_impl.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A directory without a user turn younger than this may be a session
 * being created right now (mkdir comes before its lock). */
#define EMPTY_DIR_GRACE_S 60
/* A temporary file of a cache write older than this was abandoned. */
#define STALE_TEMP_S 3600

bool session_path_join(char *buf, size_t size, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b >= size) {
        if (size) buf[0] = 0;
        return false;
    }
    memcpy(buf, dir, a);
    buf[a] = '/';
    memcpy(buf + a + 1, name, b + 1);
    return true;
}

void session_strf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, size, fmt, ap);
    va_end(ap);
}

const char *sessions_dir(char *buf, size_t size)
{
    char base[PATH_MAX];
    if (!xdg_dir(XDG_DATA, base, sizeof base)) return NULL;
    int n = snprintf(buf, size, "%s/sessions", base);
    if (n < 0 || (size_t)n >= size || base_mkdir_p(buf, 0700) != 0) return NULL;
    return buf;
}

const char *session_dir_of(const char *id, char *buf, size_t size)
{
    char root[PATH_MAX];
    if (!sessions_dir(root, sizeof root)) return NULL;
    int n = snprintf(buf, size, "%s/%s", root, id);
    return n < 0 || (size_t)n >= size ? NULL : buf;
}

const char *session_sysprompt_cache_dir(char *buf, size_t size)
{
    char base[PATH_MAX];
    if (!xdg_dir(XDG_CACHE, base, sizeof base)) return NULL;
    int n = snprintf(buf, size, "%s/sysprompt", base);
    if (n < 0 || (size_t)n >= size || base_mkdir_p(buf, 0700) != 0) return NULL;
    return buf;
}

bool session_id_valid(const char *name)
{
    if (!name || !*name || name[0] == '.') return false;
    size_t n = 0;
    for (const char *p = name; *p; p++, n++) {
        unsigned char c = (unsigned char)*p;
        if (!(isalnum(c) || c == '.' || c == '_' || c == '-') || c > 127) return false;
    }
    return n < SESSION_ID_MAX;
}

void session_random_id(char *out, size_t size)
{
    unsigned char b[4];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) {
        uint64_t x = (uint64_t)base_now_ms() * 2654435761u ^ (uint64_t)getpid() << 16;
        memcpy(b, &x, sizeof b);
    }
    snprintf(out, size, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
}

uint64_t session_tokens_hash(const int32_t *ids, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)ids[i];
        for (int k = 0; k < 4; k++) {
            h ^= (v >> (8 * k)) & 0xff;
            h *= 0x100000001b3ull;
        }
    }
    return h;
}

uint64_t session_file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
}

int session_keep_damaged(const char *path, char *backup, size_t size, ds4_error *err)
{
    size_t len;
    char *raw = file_read_regular(path, &len);
    if (!raw) {
        ds4_error_set(err, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    /* never over an earlier copy (two repairs within a second) */
    long long now = (long long)base_wall_time_s();
    snprintf(backup, size, "%s.damaged-%lld", path, now);
    for (int k = 2; access(backup, F_OK) == 0 && k < 1000; k++) snprintf(backup, size, "%s.damaged-%lld-%d", path, now, k);
    int rc = file_write_atomic(backup, raw, len, 0600, false, err);
    free(raw);
    return rc;
}

/* ---- locks ------------------------------------------------------------------- */

/* Names a killed process may leave in a session directory. */
static bool is_leftover(const char *name)
{
    return !strcmp(name, RUN_DIR) || (name[0] == '.' && strstr(name, ".tmp."));
}

typedef struct {
    char name[256];
    int64_t mtime;
    uint64_t bytes;
} log_entry;

static int newest_first(const void *a, const void *b)
{
    const log_entry *x = a, *y = b;
    if (x->mtime != y->mtime) return x->mtime > y->mtime ? -1 : 1;
    return strcmp(y->name, x->name);
}

static bool is_job_log(const char *name)
{
    size_t n = strlen(name);
    return n > 8 && !strncmp(name, "job-", 4) && !strcmp(name + n - 4, ".log") && n < 256;
}

void session_trim_run(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    if (!d) return;
    log_entry *logs = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char path[PATH_MAX];
        if (!session_path_join(path, sizeof path, run_dir, de->d_name)) continue;
        struct stat st;
        if (is_job_log(de->d_name) && lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                logs = xrealloc(logs, cap * sizeof *logs);
            }
            snprintf(logs[n].name, sizeof logs[n].name, "%s", de->d_name);
            logs[n].mtime = (int64_t)st.st_mtime;
            logs[n].bytes = (uint64_t)st.st_size;
            n++;
        } else {
            rm_rf(path);
        }
    }
    closedir(d);
    if (n) qsort(logs, n, sizeof *logs, newest_first);
    uint64_t total = 0;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (!session_path_join(path, sizeof path, run_dir, logs[i].name)) continue;
        if (total + logs[i].bytes <= JOB_LOGS_KEPT) {
            total += logs[i].bytes;
            kept++;
        } else {
            unlink(path);
        }
    }
    free(logs);
    if (!kept) rmdir(run_dir);
}

/* Whether the run directory holds anything but job logs. */
static bool run_has_scratch(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    if (!d) return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d)))
        found = strcmp(de->d_name, ".") && strcmp(de->d_name, "..") && !is_job_log(de->d_name);
    closedir(d);
    return found;
}

static bool has_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return false;
    bool found = false;
    struct dirent *de;
    while (!found && (de = readdir(d))) {
        char path[PATH_MAX];
        /* job logs alone are kept, not left over */
        if (!strcmp(de->d_name, RUN_DIR)) found = session_path_join(path, sizeof path, dir, RUN_DIR) && run_has_scratch(path);
        else found = is_leftover(de->d_name);
    }
    closedir(d);
    return found;
}

void session_remove_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_leftover(de->d_name)) continue;
        char path[PATH_MAX];
        if (!session_path_join(path, sizeof path, dir, de->d_name)) continue;
        if (!strcmp(de->d_name, RUN_DIR)) session_trim_run(path);
        else rm_rf(path);
    }
    closedir(d);
}

int session_lock(const char *dir)
{
    char path[PATH_MAX];
    session_path_join(path, sizeof path, dir, LOCK_FILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

bool session_locked(const char *dir)
{
    char path[PATH_MAX];
    session_path_join(path, sizeof path, dir, LOCK_FILE);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

/* ---- metadata ------------------------------------------------------------------ */

static const char *think_name(ds4_think t)
{
    return t == DS4_THINK_NONE ? "none" : t == DS4_THINK_MAX ? "max" : "high";
}

static ds4_think think_parse(const char *s)
{
    if (s && !strcmp(s, "none")) return DS4_THINK_NONE;
    if (s && !strcmp(s, "max")) return DS4_THINK_MAX;
    return DS4_THINK_HIGH;
}

static void add_str(struct json_object *o, const char *k, const char *v)
{
    json_object_object_add(o, k, json_object_new_string(v ? v : ""));
}

static void add_hex(struct json_object *o, const char *k, uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%016" PRIx64, v);
    add_str(o, k, buf);
}

int session_meta_write(const char *dir, const session_meta *m, ds4_error *err)
{
    const session_info *i = &m->info;
    struct json_object *o = json_object_new_object();
    json_object_object_add(o, "format", json_object_new_int(1));
    add_str(o, "id", i->id);
    add_str(o, "title", i->title);
    add_str(o, "cwd", i->cwd);
    struct json_object *model = json_object_new_object();
    add_str(model, "name", i->model_name);
    add_hex(model, "identity", i->model_identity);
    add_str(model, "backend", i->backend);
    add_hex(model, "tokenizer", m->tokenizer);
    json_object_object_add(o, "model", model);
    struct json_object *set = json_object_new_object();
    json_object_object_add(set, "ctx", json_object_new_int(i->n_ctx));
    add_str(set, "think", think_name(i->think));
    struct json_object *smp = json_object_new_object();
    json_object_object_add(smp, "temperature", json_object_new_double(i->sampling.temperature));
    json_object_object_add(smp, "top_k", json_object_new_int(i->sampling.top_k));
    json_object_object_add(smp, "top_p", json_object_new_double(i->sampling.top_p));
    json_object_object_add(smp, "min_p", json_object_new_double(i->sampling.min_p));
    json_object_object_add(smp, "seed", json_object_new_uint64(i->sampling.seed));
    json_object_object_add(set, "sampling", smp);
    json_object_object_add(o, "settings", set);
    json_object_object_add(o, "created", json_object_new_int64(i->created));
    json_object_object_add(o, "updated", json_object_new_int64(i->updated));
    json_object_object_add(o, "tokens", json_object_new_uint64(i->n_tokens));
    json_object_object_add(o, "user_turns", json_object_new_int(i->user_turns));
    if (i->forked_from[0]) add_str(o, "forked_from", i->forked_from);
    struct json_object *snap = json_object_new_object();
    json_object_object_add(snap, "tokens", json_object_new_uint64(m->snap_tokens));
    add_hex(snap, "hash", m->snap_hash);
    json_object_object_add(snap, "bytes", json_object_new_uint64(m->snap_file_bytes));
    json_object_object_add(o, "snapshot", snap);
    if (m->journal_bytes) json_object_object_add(o, "journal_bytes", json_object_new_uint64(m->journal_bytes));
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_NOSLASHESCAPE);
    char path[PATH_MAX];
    session_path_join(path, sizeof path, dir, META_FILE);
    strbuf b = { 0 };
    sb_puts(&b, text);
    sb_putc(&b, '\n');
    int rc = file_write_atomic(path, b.s, b.len, 0600, false, err);
    sb_free(&b);
    json_object_put(o);
    return rc;
}

static struct json_object *get(struct json_object *o, const char *k, enum json_type t)
{
    struct json_object *v;
    if (!o || !json_object_object_get_ex(o, k, &v) || !json_object_is_type(v, t)) return NULL;
    return v;
}

static void copy_str(char *out, size_t size, struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k, json_type_string);
    snprintf(out, size, "%s", v ? json_object_get_string(v) : "");
}

static uint64_t get_hex(struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k, json_type_string);
    return v ? strtoull(json_object_get_string(v), NULL, 16) : 0;
}

static int64_t get_int(struct json_object *o, const char *k)
{
    struct json_object *v = get(o, k, json_type_int);
    return v ? json_object_get_int64(v) : 0;
}

/* A member that is absent or of type t (the fields a newer or older
 * writer may leave out): false when it is there with another type. */
static bool typed_or_absent(struct json_object *o, const char *k, enum json_type t)
{
    struct json_object *v;
    return !o || !json_object_object_get_ex(o, k, &v) || json_object_is_type(v, t);
}

/* An integer member, absent or within [lo, hi]. */
static bool int_in(struct json_object *o, const char *k, int64_t lo, int64_t hi)
{
    struct json_object *v;
    if (!o || !json_object_object_get_ex(o, k, &v)) return true;
    if (!json_object_is_type(v, json_type_int)) return false;
    int64_t x = json_object_get_int64(v);
    return x >= lo && x <= hi;
}

/* What meta.json says about the session's size and shape has the types
 * and ranges a writer gives it: anything else is damage (rebuilt from the
 * journal, the original kept), not a default. Its counts are the witness
 * of what the journal should hold, so a wrong one must not pass. */
static bool meta_sane(struct json_object *o)
{
    static const char *const strings[] = { "id", "title", "cwd", "forked_from" };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++)
        if (!typed_or_absent(o, strings[i], json_type_string)) return false;
    static const char *const objects[] = { "model", "settings", "snapshot" };
    for (size_t i = 0; i < sizeof objects / sizeof objects[0]; i++)
        if (!typed_or_absent(o, objects[i], json_type_object)) return false;
    struct json_object *set = get(o, "settings", json_type_object), *snap = get(o, "snapshot", json_type_object);
    struct json_object *model = get(o, "model", json_type_object);
    static const char *const model_strings[] = { "name", "identity", "backend", "tokenizer" };
    for (size_t i = 0; i < sizeof model_strings / sizeof model_strings[0]; i++)
        if (!typed_or_absent(model, model_strings[i], json_type_string)) return false;
    return int_in(o, "created", 0, INT64_MAX) && int_in(o, "updated", 0, INT64_MAX) &&
           int_in(o, "tokens", 0, INT32_MAX) && int_in(o, "user_turns", 0, INT32_MAX) &&
           int_in(o, "journal_bytes", 0, INT64_MAX) && int_in(set, "ctx", 0, 1 << 30) &&
           typed_or_absent(set, "think", json_type_string) && typed_or_absent(set, "sampling", json_type_object) &&
           int_in(snap, "tokens", 0, INT32_MAX) && int_in(snap, "bytes", 0, INT64_MAX) &&
           typed_or_absent(snap, "hash", json_type_string);
}

static double get_num(struct json_object *o, const char *k, double dflt)
{
    struct json_object *v;
    if (!o || !json_object_object_get_ex(o, k, &v)) return dflt;
    if (!json_object_is_type(v, json_type_double) && !json_object_is_type(v, json_type_int)) return dflt;
    return json_object_get_double(v);
}

int session_meta_read(const char *dir, session_meta *out)
{
    memset(out, 0, sizeof *out);
    char path[PATH_MAX];
    session_path_join(path, sizeof path, dir, META_FILE);
    size_t len;
    char *text = file_read_regular(path, &len);
    if (!text) return -1;
    int rc = session_meta_parse(text, len, out);
    free(text);
    return rc;
}

int session_meta_parse(const char *text, size_t len, session_meta *out)
{
    memset(out, 0, sizeof *out);
    if (len > INT_MAX) return -1;
    struct json_tokener *tok = json_tokener_new();
    struct json_object *o = json_tokener_parse_ex(tok, text, (int)len);
    bool ok = o && json_tokener_get_error(tok) == json_tokener_success && json_object_is_type(o, json_type_object);
    json_tokener_free(tok);
    session_info *i = &out->info;
    if (ok) {
        copy_str(i->id, sizeof i->id, o, "id");
        ok = session_id_valid(i->id) && get(o, "created", json_type_int) != NULL && meta_sane(o);
    }
    if (!ok) {
        json_object_put(o);
        memset(out, 0, sizeof *out);
        return -1;
    }
    copy_str(i->title, sizeof i->title, o, "title");
    copy_str(i->cwd, sizeof i->cwd, o, "cwd");
    struct json_object *model = get(o, "model", json_type_object);
    copy_str(i->model_name, sizeof i->model_name, model, "name");
    i->model_identity = get_hex(model, "identity");
    copy_str(i->backend, sizeof i->backend, model, "backend");
    out->tokenizer = get_hex(model, "tokenizer");
    struct json_object *set = get(o, "settings", json_type_object);
    int64_t ctx = get_int(set, "ctx");
    i->n_ctx = ctx > 0 && ctx < (1 << 30) ? (int)ctx : 0;
    struct json_object *th = get(set, "think", json_type_string);
    i->think = think_parse(th ? json_object_get_string(th) : NULL);
    struct json_object *smp = get(set, "sampling", json_type_object);
    i->sampling.temperature = (float)get_num(smp, "temperature", 0);
    double top_k = get_num(smp, "top_k", 0);
    i->sampling.top_k = top_k > INT_MIN && top_k < INT_MAX ? (int)top_k : 0; /* NaN and overflow: off */
    i->sampling.top_p = (float)get_num(smp, "top_p", 1);
    i->sampling.min_p = (float)get_num(smp, "min_p", 0);
    struct json_object *seed = get(smp, "seed", json_type_int);
    i->sampling.seed = seed ? json_object_get_uint64(seed) : 0;
    i->created = get_int(o, "created");
    i->updated = get_int(o, "updated");
    int64_t toks = get_int(o, "tokens"), turns = get_int(o, "user_turns");
    i->n_tokens = toks > 0 ? (size_t)toks : 0;
    i->user_turns = turns > 0 && turns < INT_MAX ? (int)turns : 0;
    copy_str(i->forked_from, sizeof i->forked_from, o, "forked_from");
    if (!session_id_valid(i->forked_from)) i->forked_from[0] = 0;
    struct json_object *snap = get(o, "snapshot", json_type_object);
    int64_t st = get_int(snap, "tokens"), sb = get_int(snap, "bytes");
    out->snap_tokens = st > 0 ? (size_t)st : 0;
    out->snap_hash = get_hex(snap, "hash");
    out->snap_file_bytes = sb > 0 ? (uint64_t)sb : 0;
    int64_t jb = get_int(o, "journal_bytes");
    out->journal_bytes = jb > 0 ? (uint64_t)jb : 0;
    json_object_put(o);
    return 0;
}

void session_title_from_text(char *out, size_t size, const char *text, size_t len)
{
    size_t n = 0;
    bool space = false;
    for (size_t i = 0; i < len && n + 1 < size; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c < 0x20 || c == 0x7f) {
            space = n > 0;
            continue;
        }
        if (space) {
            if (n + 2 >= size) break;
            out[n++] = ' ';
            space = false;
        }
        out[n++] = (char)c;
    }
    /* Never end inside a UTF-8 sequence. */
    size_t cut = n;
    while (cut > 0 && ((unsigned char)out[cut - 1] & 0xc0) == 0x80) cut--;
    if (cut > 0 && ((unsigned char)out[cut - 1] & 0x80)) {
        unsigned char lead = (unsigned char)out[cut - 1];
        size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
        if (n - (cut - 1) < want) n = cut - 1;
    }
    out[n] = 0;
}

void session_meta_from_journal(const journal_scan *j, session_info *info)
{
    size_t tokens = 0;
    info->user_turns = 0;
    for (size_t k = 0; k < j->n; k++) {
        const journal_rec *r = &j->recs[k];
        if (r->kind == AGENT_TURN_SYSTEM || r->kind == AGENT_TURN_REBUILD) tokens = r->n_tokens;
        else tokens += r->n_tokens;
        if (r->kind == AGENT_TURN_USER) {
            if (info->user_turns == 0 && !info->title[0]) session_title_from_text(info->title, sizeof info->title, r->text, r->len);
            info->user_turns++;
        }
    }
    info->n_tokens = tokens;
}

/* ---- listing ---------------------------------------------------------------------- */

typedef struct {
    session_info *v;
    size_t n, cap;
} info_vec;

static void info_push(info_vec *iv, const session_info *i)
{
    if (iv->n == iv->cap) {
        iv->cap = iv->cap ? iv->cap * 2 : 16;
        iv->v = xrealloc(iv->v, iv->cap * sizeof *iv->v);
    }
    iv->v[iv->n++] = *i;
}

static int by_updated(const void *a, const void *b)
{
    const session_info *x = a, *y = b;
    if (x->updated != y->updated) return x->updated > y->updated ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* A session directory without readable metadata: rebuilt from the
 * journal (and repaired when nobody has it open), or removed when it never
 * got a user turn. Returns true when info describes a session. */
static bool recover_entry(const char *dir, const char *id, session_info *info)
{
    char path[PATH_MAX];
    session_path_join(path, sizeof path, dir, JOURNAL_FILE);
    journal_scan j;
    bool have = journal_read(path, &j) == 0;
    memset(info, 0, sizeof *info);
    session_strf(info->id, sizeof info->id, "%s", id);
    if (have) session_meta_from_journal(&j, info);
    journal_scan_free(&j);
    struct stat st;
    int64_t mtime = stat(have ? path : dir, &st) == 0 ? (int64_t)st.st_mtime : base_wall_time_s();
    if (info->user_turns == 0) {
        /* metadata and a KV state are written only after a user turn: a
         * directory holding either had a conversation, whose journal is
         * gone or unreadable; opening it says what is left */
        char mpath[PATH_MAX], kpath[PATH_MAX];
        session_path_join(mpath, sizeof mpath, dir, META_FILE);
        session_path_join(kpath, sizeof kpath, dir, STATE_FILE);
        bool had_turns = session_file_bytes(mpath) > 0 || session_file_bytes(kpath) > 0;
        if (!had_turns && base_wall_time_s() - mtime > EMPTY_DIR_GRACE_S) {
            int fd = session_lock(dir);
            if (fd >= 0) {
                rm_rf(dir);
                close(fd);
            }
        }
        return false;
    }
    info->created = info->updated = mtime;
    info->meta_missing = true;
    int fd = session_lock(dir);
    if (fd >= 0) {
        session_meta m = { .info = *info };
        m.info.meta_missing = false;
        /* a damaged original is kept beside, as a damaged journal is;
         * when it cannot be, it stays where it is */
        char mpath[PATH_MAX], backup[PATH_MAX + 64];
        session_path_join(mpath, sizeof mpath, dir, META_FILE);
        if (session_file_bytes(mpath) == 0 || session_keep_damaged(mpath, backup, sizeof backup, NULL) == 0)
            (void)session_meta_write(dir, &m, NULL);
        close(fd);
    }
    return true;
}

int sessions_list(session_info **out, ds4_error *err)
{
    *out = NULL;
    char root[PATH_MAX];
    if (!sessions_dir(root, sizeof root)) {
        ds4_error_set(err, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
        return -1;
    }
    DIR *d = opendir(root);
    if (!d) {
        ds4_error_set(err, "cannot read %s: %s", root, strerror(errno));
        return -1;
    }
    info_vec iv = { 0 };
    struct dirent *de;
    while ((de = readdir(d))) {
        char dir[PATH_MAX];
        session_path_join(dir, sizeof dir, root, de->d_name);
        if (!strncmp(de->d_name, ".deleted-", 9)) {
            rm_rf(dir); /* an interrupted deletion */
            continue;
        }
        if (!session_id_valid(de->d_name)) continue;
        struct stat st;
        if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        session_meta m;
        session_info info;
        if (session_meta_read(dir, &m) == 0 && !strcmp(m.info.id, de->d_name)) {
            info = m.info;
        } else if (!recover_entry(dir, de->d_name, &info)) {
            continue;
        }
        char path[PATH_MAX];
        session_path_join(path, sizeof path, dir, STATE_FILE);
        info.snapshot_bytes = session_file_bytes(path);
        info.in_use = session_locked(dir);
        info_push(&iv, &info);
    }
    closedir(d);
    if (iv.n) qsort(iv.v, iv.n, sizeof *iv.v, by_updated);
    *out = iv.v;
    return (int)iv.n;
}

static void fmt_age(char *out, size_t size, int64_t secs)
{
    if (secs < 0) secs = 0;
    if (secs < 60) snprintf(out, size, "%llds", (long long)secs);
    else if (secs < 3600) snprintf(out, size, "%lldm", (long long)(secs / 60));
    else if (secs < 86400) snprintf(out, size, "%lldh", (long long)(secs / 3600));
    else session_strf(out, size, "%lldd", (long long)(secs / 86400));
}

static void fmt_count(char *out, size_t size, size_t n)
{
    if (n < 10000) snprintf(out, size, "%zu", n);
    else if (n < 1000000) snprintf(out, size, "%.1fk", n / 1000.0);
    else snprintf(out, size, "%.1fM", n / 1e6);
}

/* The ID column's width for the first `max` of v (0: all). */
static size_t id_width(const session_info *v, size_t n, size_t max)
{
    size_t shown = max && max < n ? max : n;
    size_t w = 8;
    for (size_t i = 0; i < shown; i++)
        if (strlen(v[i].id) > w) w = strlen(v[i].id);
    return w;
}

char *sessions_format_header(const session_info *v, size_t n, size_t max)
{
    strbuf b = { 0 };
    size_t w = id_width(v, n, max);
    sb_printf(&b, "  %-*s %5s %7s  %s\n", (int)w, "ID", "USED", "TOKENS", "TITLE");
    sb_printf(&b, "  %-*s %s\n", (int)w, "", "DIRECTORY");
    return sb_take(&b);
}

char *sessions_format_list(const session_info *v, size_t n, size_t max, const char *current_id)
{
    strbuf b = { 0 };
    if (n == 0) {
        sb_puts(&b, "no saved sessions\n");
        return sb_take(&b);
    }
    size_t shown = max && max < n ? max : n;
    size_t w = id_width(v, n, max);
    int64_t now = base_wall_time_s();
    for (size_t i = 0; i < shown; i++) {
        const session_info *s = &v[i];
        char age[16], toks[16];
        fmt_age(age, sizeof age, now - s->updated);
        fmt_count(toks, sizeof toks, s->n_tokens);
        bool cur = current_id && !strcmp(current_id, s->id);
        sb_printf(&b, "%c %-*s %5s %7s  %s%s\n", cur ? '*' : ' ', (int)w, s->id, age, toks,
                  s->title[0] ? s->title : "(untitled)", cur ? "" : s->in_use ? "  [open elsewhere]" : "");
        sb_printf(&b, "  %-*s %s%s%s\n", (int)w, "", s->cwd[0] ? s->cwd : "(directory unknown)",
                  s->snapshot_bytes ? "" : "  [no saved KV state]", s->forked_from[0] ? "  [fork]" : "");
    }
    if (shown < n) sb_printf(&b, "  … and %zu more\n", n - shown);
    return sb_take(&b);
}

int sessions_resolve(const char *id_or_prefix, char *id, size_t idsize, ds4_error *err)
{
    if (!id_or_prefix || !session_id_valid(id_or_prefix)) {
        ds4_error_set(err, "\"%s\" is not a session ID (letters, digits, '.', '_', '-')",
                 id_or_prefix ? id_or_prefix : "");
        return -1;
    }
    char root[PATH_MAX];
    if (!sessions_dir(root, sizeof root)) {
        ds4_error_set(err, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
        return -1;
    }
    DIR *d = opendir(root);
    if (!d) {
        ds4_error_set(err, "cannot read %s: %s", root, strerror(errno));
        return -1;
    }
    size_t plen = strlen(id_or_prefix), matches = 0;
    strbuf names = { 0 };
    char found[SESSION_ID_MAX] = "";
    bool exact = false;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!session_id_valid(de->d_name) || strncmp(de->d_name, id_or_prefix, plen)) continue;
        if (!strcmp(de->d_name, id_or_prefix)) exact = true;
        matches++;
        session_strf(found, sizeof found, "%s", de->d_name);
        if (matches <= 8) sb_printf(&names, "%s%s", matches > 1 ? ", " : "", de->d_name);
    }
    closedir(d);
    int rc = 0;
    if (exact) {
        snprintf(id, idsize, "%s", id_or_prefix);
    } else if (matches == 1) {
        snprintf(id, idsize, "%s", found);
    } else if (matches == 0) {
        ds4_error_set(err, "no session \"%s\"", id_or_prefix);
        rc = -1;
    } else {
        ds4_error_set(err, "\"%s\" matches %zu sessions: %s%s", id_or_prefix, matches, sb_str(&names),
                 matches > 8 ? ", …" : "");
        rc = -1;
    }
    sb_free(&names);
    return rc;
}

int sessions_delete(const char *id, ds4_error *err)
{
    char dir[PATH_MAX];
    if (!session_id_valid(id) || !session_dir_of(id, dir, sizeof dir)) {
        ds4_error_set(err, "\"%s\" is not a session ID", id ? id : "");
        return -1;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ds4_error_set(err, "no session \"%s\"", id);
        return -1;
    }
    int fd = session_lock(dir);
    if (fd < 0) {
        ds4_error_set(err, errno == EWOULDBLOCK ? "session %s is open in a ds4cl process" : "cannot lock session %s: %s",
                 id, strerror(errno));
        return -1;
    }
    /* Renamed first so that a deletion cut short leaves no half session. */
    char trash[PATH_MAX + 32], suffix[16];
    session_random_id(suffix, sizeof suffix);
    char root[PATH_MAX];
    sessions_dir(root, sizeof root);
    snprintf(trash, sizeof trash, "%s/.deleted-%s-%s", root, id, suffix);
    int rc = 0;
    if (rename(dir, trash) != 0) {
        ds4_error_set(err, "cannot delete session %s: %s", id, strerror(errno));
        rc = -1;
    } else if (rm_rf(trash) != 0) {
        ds4_error_set(err, "session %s deleted, but %s could not be removed completely: %s", id, trash,
                 strerror(errno));
    }
    close(fd);
    return rc;
}

/* ---- budget ------------------------------------------------------------------------ */

uint64_t sessions_budget(char *warn, size_t warnlen)
{
    if (warn && warnlen) warn[0] = 0;
    const char *s = getenv("DS4CL_SESSION_BUDGET");
    if (!s || !*s) return SESSION_DEFAULT_BUDGET;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    bool ok = errno == 0 && end != s && s[0] != '-';
    uint64_t mul = 1;
    if (ok && *end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1ull << 10; break;
        case 'M': mul = 1ull << 20; break;
        case 'G': mul = 1ull << 30; break;
        case 'T': mul = 1ull << 40; break;
        default: ok = false;
        }
        if (ok) {
            end++;
            if (!strcasecmp(end, "ib") || !strcasecmp(end, "b")) end += strlen(end);
            ok = *end == 0;
        }
    }
    if (!ok || (mul > 1 && v > UINT64_MAX / mul)) {
        if (warn && warnlen)
            snprintf(warn, warnlen, "DS4CL_SESSION_BUDGET=\"%s\" is not a size (like 20G or 512M); using 20G", s);
        return SESSION_DEFAULT_BUDGET;
    }
    return (uint64_t)v * mul;
}

typedef struct {
    char path[PATH_MAX];
    char dir[PATH_MAX]; /* the session's directory; "" for a system prompt cache */
    uint64_t bytes;
    struct timespec used;
    dev_t dev;
    ino_t ino;
    bool counted; /* the first entry of its file: its bytes count once */
} snap_file;

typedef struct {
    snap_file *v;
    size_t n, cap;
} snap_vec;

static void snap_push(snap_vec *sv, const char *path, const char *dir)
{
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) return;
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 32;
        sv->v = xrealloc(sv->v, sv->cap * sizeof *sv->v);
    }
    snap_file *f = &sv->v[sv->n++];
    snprintf(f->path, sizeof f->path, "%s", path);
    snprintf(f->dir, sizeof f->dir, "%s", dir ? dir : "");
    f->bytes = (uint64_t)st.st_size;
    f->used = st.st_mtim;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->counted = true;
    for (size_t i = 0; i + 1 < sv->n && f->counted; i++)
        if (sv->v[i].dev == f->dev && sv->v[i].ino == f->ino) f->counted = false;
}

/* Other entries naming the same file as v[k] (a fork shares its parent's
 * snapshot through a hard link) that are still there. */
static bool other_links(const snap_vec *sv, size_t k)
{
    for (size_t i = 0; i < sv->n; i++)
        if (i != k && sv->v[i].bytes && sv->v[i].dev == sv->v[k].dev && sv->v[i].ino == sv->v[k].ino) return true;
    return false;
}

static int by_use(const void *a, const void *b)
{
    const snap_file *x = a, *y = b;
    if (x->used.tv_sec != y->used.tv_sec) return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec) return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->path, y->path);
}

uint64_t sessions_enforce_budget(uint64_t budget)
{
    snap_vec sv = { 0 };
    char root[PATH_MAX], cache[PATH_MAX];
    if (sessions_dir(root, sizeof root)) {
        DIR *d = opendir(root);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (!session_id_valid(de->d_name)) continue;
            char dir[PATH_MAX], path[PATH_MAX + 16];
            session_path_join(dir, sizeof dir, root, de->d_name);
            session_path_join(path, sizeof path, dir, STATE_FILE);
            snap_push(&sv, path, dir);
            /* what a killed process left in a session nobody has open
             * (a browser profile, a half-written snapshot) */
            if (has_leftovers(dir)) {
                int fd = session_lock(dir);
                if (fd >= 0) {
                    session_remove_leftovers(dir);
                    close(fd);
                }
            }
        }
        if (d) closedir(d);
    }
    if (session_sysprompt_cache_dir(cache, sizeof cache)) {
        DIR *d = opendir(cache);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            size_t l = strlen(de->d_name);
            char path[PATH_MAX];
            if (!session_path_join(path, sizeof path, cache, de->d_name)) continue;
            if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp.")) {
                /* A write cut short; another process may be writing one
                 * now, so only old ones go. */
                struct stat st;
                if (lstat(path, &st) == 0 && base_wall_time_s() - (int64_t)st.st_mtime > STALE_TEMP_S) unlink(path);
                continue;
            }
            if (de->d_name[0] == '.' || l < 4 || strcmp(de->d_name + l - 3, ".kv")) continue;
            snap_push(&sv, path, NULL);
        }
        if (d) closedir(d);
    }
    uint64_t total = 0, freed = 0;
    for (size_t i = 0; i < sv.n; i++)
        if (sv.v[i].counted) total += sv.v[i].bytes;
    if (total > budget && sv.n) {
        qsort(sv.v, sv.n, sizeof *sv.v, by_use);
        for (size_t i = 0; i < sv.n && total > budget; i++) {
            snap_file *f = &sv.v[i];
            bool gone = false;
            if (f->dir[0]) {
                int fd = session_lock(f->dir);
                if (fd < 0) continue; /* open somewhere: its state is in use */
                gone = unlink(f->path) == 0;
                close(fd);
            } else {
                gone = unlink(f->path) == 0;
            }
            if (gone) {
                /* the disk space comes back with the file's last name */
                uint64_t bytes = f->bytes;
                f->bytes = 0;
                if (!other_links(&sv, i)) {
                    total -= bytes;
                    freed += bytes;
                }
            }
        }
    }
    free(sv.v);
    return freed;
}
