/* session.c — one open session: loading and repairing its journal,
 * binding it to an engine (what to restore, what to read again), the
 * agent's persistence hooks (journal records, snapshots, the system
 * prompt cache, the budget), forking and closing. */
#include "sessions/sessions_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    agent_turn_kind kind;
    char *text;
    size_t len;
    size_t n_tokens;
    agent_tool_call *calls;
    size_t n_calls;
} turn_rec;

struct session {
    char dir[PATH_MAX];
    int lock_fd;
    int jfd;                  /* journal opened for appending; -1 until needed */
    bool created_here;        /* removed on close when it never got a user turn */

    /* Guards everything below that the worker's hooks change and the
     * front end reads (meta, transcript, records). */
    pthread_mutex_t mu;
    session_meta meta;
    bool meta_written;        /* meta.json describes this session */
    bool dirty;               /* meta changed since it was written */
    ds4_tokens tx;            /* the transcript so far */
    size_t system_len;
    ds4_tokens sys_rec;       /* tokens of the last SYSTEM record */
    turn_rec *turns;
    size_t n_turns, cap_turns;
    char **notes;
    size_t n_notes;
    char io_err[320];         /* a journal failure to report at the next idle */

    /* Serialises the hooks' file writes with session_fork. */
    pthread_mutex_t io;

    /* set by session_attach */
    agent_persist_hooks hooks;
    agent_resume resume;
    ds4_tokens resume_tokens;
    void *map;
    size_t map_len;
    void *sys_map;             /* the cached system prompt beside a saved state */
    size_t sys_map_len;
    char cache_path[PATH_MAX]; /* system prompt cache to check at the first idle; "" = none */
    char run_dir[PATH_MAX];    /* the tools' state directory when it is ours; "" = none */
    ds4_tokens cache_tokens;
    bool cache_hit;
    uint64_t budget;
};

static void note(session *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void hook_turn(void *ud, const agent_turn *t);
static int hook_idle(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen);
static int hook_save(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen);

static void note(session *s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **grown = realloc(s->notes, (s->n_notes + 1) * sizeof *grown);
    if (!grown) abort();
    s->notes = grown;
    s->notes[s->n_notes] = strdup(buf);
    if (!s->notes[s->n_notes]) abort();
    s->n_notes++;
}

static void path_in(const session *s, const char *name, char *buf, size_t size)
{
    session_path_join(buf, size, s->dir, name);
}

static session *session_alloc(const char *dir, int lock_fd)
{
    session *s = calloc(1, sizeof *s);
    if (!s) abort();
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->lock_fd = lock_fd;
    s->jfd = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->io, NULL);
    return s;
}

static void session_free(session *s)
{
    if (s->jfd >= 0) close(s->jfd);
    if (s->map) munmap(s->map, s->map_len);
    if (s->sys_map) munmap(s->sys_map, s->sys_map_len);
    if (s->lock_fd >= 0) close(s->lock_fd);
    ds4_tokens_free(&s->tx);
    ds4_tokens_free(&s->sys_rec);
    ds4_tokens_free(&s->resume_tokens);
    ds4_tokens_free(&s->cache_tokens);
    for (size_t i = 0; i < s->n_turns; i++) {
        free(s->turns[i].text);
        tool_calls_free(s->turns[i].calls, s->turns[i].n_calls);
    }
    free(s->turns);
    for (size_t i = 0; i < s->n_notes; i++) free(s->notes[i]);
    free(s->notes);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->io);
    free(s);
}

/* ---- the transcript from records (caller holds mu or owns s alone) ------------------ */

static bool starts_with(const ds4_tokens *t, const int32_t *ids, size_t n)
{
    return t->n && t->n <= n && !memcmp(t->ids, ids, t->n * sizeof *ids);
}

static void apply_record(session *s, const agent_turn *t)
{
    agent_turn_kind kind = t->kind;
    const char *text = t->text ? t->text : "";
    size_t len = t->len, n = t->n_tokens;
    const int32_t *ids = t->tokens;
    if (kind == AGENT_TURN_SYSTEM) {
        s->tx.n = 0;
        s->sys_rec.n = 0;
        ds4_tokens_append(&s->sys_rec, ids, n);
        s->system_len = n;
    } else if (kind == AGENT_TURN_REBUILD) {
        s->tx.n = 0;
        s->system_len = starts_with(&s->sys_rec, ids, n) ? s->sys_rec.n : 0;
    }
    ds4_tokens_append(&s->tx, ids, n);
    if (s->n_turns == s->cap_turns) {
        s->cap_turns = s->cap_turns ? s->cap_turns * 2 : 32;
        s->turns = realloc(s->turns, s->cap_turns * sizeof *s->turns);
        if (!s->turns) abort();
    }
    turn_rec *r = &s->turns[s->n_turns++];
    r->kind = kind;
    r->len = len;
    r->text = malloc(len + 1);
    if (!r->text) abort();
    memcpy(r->text, text, len);
    r->text[len] = 0;
    r->n_tokens = n;
    r->calls = tool_calls_dup(t->calls, t->n_calls);
    r->n_calls = t->calls ? t->n_calls : 0;
    if (kind == AGENT_TURN_USER) {
        if (s->meta.info.user_turns == 0 && !s->meta.info.title[0])
            title_from_text(s->meta.info.title, sizeof s->meta.info.title, text, len);
        s->meta.info.user_turns++;
    }
    s->meta.info.n_tokens = s->tx.n;
}

/* ---- opening ---------------------------------------------------------------------------- */

/* Rewrites a journal that has damage in the middle from its intact
 * records, keeping the damaged original beside it. */
static void repair_journal(session *s, const journal_scan *j, const char *path)
{
    size_t len;
    char *raw = file_read_all(path, &len);
    char backup[PATH_MAX + 64], err[256];
    snprintf(backup, sizeof backup, "%s.damaged-%lld", path, (long long)base_wall_time_s());
    if (!raw || file_write_atomic(backup, raw, len, 0600, false, err, sizeof err) != 0) {
        note(s, "the damaged journal could not be backed up (%s); it is left as it is",
             raw ? err : strerror(errno));
        free(raw);
        return;
    }
    free(raw);
    strbuf b = { 0 };
    journal_encode_header(&b);
    for (size_t i = 0; i < j->n; i++) {
        agent_turn t = journal_rec_turn(&j->recs[i]);
        journal_encode(&b, &t);
    }
    if (file_write_atomic(path, b.s, b.len, 0600, false, err, sizeof err) != 0)
        note(s, "the damaged journal could not be rewritten: %s", err);
    else
        note(s, "the journal was rewritten from its intact records; the damaged original is %s", backup);
    sb_free(&b);
}

static void load_journal(session *s)
{
    char path[PATH_MAX];
    path_in(s, JOURNAL_FILE, path, sizeof path);
    journal_scan j;
    if (journal_read(path, &j) != 0) {
        if (errno != ENOENT)
            note(s, "the journal of session %s cannot be read (%s); its conversation is not available",
                 s->meta.info.id, strerror(errno));
        else if (s->meta.info.user_turns > 0)
            note(s, "the journal of session %s is missing; its conversation cannot be recovered", s->meta.info.id);
        return;
    }
    if (j.n == 0 && j.file_size < JOURNAL_HEADER_LEN) {
        /* Created, then stopped before (or while) its header was written:
         * it starts over with a header at the first record. */
        journal_scan_free(&j);
        if (truncate(path, 0) != 0 && errno != ENOENT)
            note(s, "the empty journal could not be reset: %s", strerror(errno));
        return;
    }
    int turns_before = s->meta.info.user_turns;
    s->meta.info.user_turns = 0;
    bool inconsistent = false;
    for (size_t i = 0; i < j.n; i++) {
        agent_turn t = journal_rec_turn(&j.recs[i]);
        apply_record(s, &t);
        if (t.transcript_len != s->tx.n) inconsistent = true;
    }
    if (j.bad_header)
        note(s, "the journal header of session %s is damaged; its records were read anyway", s->meta.info.id);
    if (j.damaged_spans)
        note(s, "the journal of session %s is damaged: %" PRIu64 " bytes in %zu places were skipped; "
                "the conversation may miss those parts", s->meta.info.id, j.skipped, j.damaged_spans);
    if (inconsistent && !j.damaged_spans)
        note(s, "the journal of session %s does not add up (records out of order); continuing with what it holds",
             s->meta.info.id);
    if (j.torn)
        note(s, "the last record of session %s was incomplete (ds4cl stopped while writing it) and was dropped",
             s->meta.info.id);
    if (turns_before > s->meta.info.user_turns && !j.damaged_spans && !j.torn)
        note(s, "the journal of session %s holds %d user turns, its metadata said %d", s->meta.info.id,
             s->meta.info.user_turns, turns_before);
    if (j.bad_header || j.damaged_spans) {
        repair_journal(s, &j, path);
    } else if (j.torn) {
        if (truncate(path, (off_t)j.valid_end) != 0)
            note(s, "the incomplete record could not be cut off: %s", strerror(errno));
    }
    journal_scan_free(&j);
    s->jfd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
}

/* A locked directory becomes an open session. */
static session *load_locked(const char *id, const char *dir, int lock_fd)
{
    session *s = session_alloc(dir, lock_fd);
    session_remove_leftovers(dir);
    bool have_meta = meta_read(dir, &s->meta) == 0 && !strcmp(s->meta.info.id, id);
    if (!have_meta) {
        memset(&s->meta, 0, sizeof s->meta);
        snprintf(s->meta.info.id, sizeof s->meta.info.id, "%s", id);
    }
    load_journal(s);
    if (!have_meta) {
        char path[PATH_MAX];
        path_in(s, JOURNAL_FILE, path, sizeof path);
        struct stat st;
        s->meta.info.created = s->meta.info.updated = stat(path, &st) == 0 ? (int64_t)st.st_mtime : base_wall_time_s();
        if (s->meta.info.user_turns > 0) {
            note(s, "the metadata of session %s was missing or unreadable; it was rebuilt from the journal", id);
            s->dirty = true;
        }
    }
    s->meta_written = have_meta;
    return s;
}

session *session_open(const char *id, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    if (!session_id_valid(id)) {
        snprintf(err, errlen, "\"%s\" is not a session ID (letters, digits, '.', '_', '-')", id ? id : "");
        return NULL;
    }
    if (!session_dir_of(id, dir, sizeof dir)) {
        snprintf(err, errlen, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
        return NULL;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "no session \"%s\"", id);
        return NULL;
    }
    int fd = session_lock(dir);
    if (fd < 0) {
        if (errno == EWOULDBLOCK) snprintf(err, errlen, "session %s is open in another ds4cl process", id);
        else snprintf(err, errlen, "cannot lock session %s: %s", id, strerror(errno));
        return NULL;
    }
    return load_locked(id, dir, fd);
}

session *session_create(const char *id, const char *cwd, char *err, size_t errlen)
{
    char dir[PATH_MAX], gen[SESSION_ID_MAX];
    if (id && !session_id_valid(id)) {
        snprintf(err, errlen, "\"%s\" is not a session ID (1-64 letters, digits, '.', '_', '-')", id);
        return NULL;
    }
    for (int attempt = 0;; attempt++) {
        if (!id) random_session_id(gen, sizeof gen);
        const char *name = id ? id : gen;
        if (!session_dir_of(name, dir, sizeof dir)) {
            snprintf(err, errlen, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
            return NULL;
        }
        if (mkdir(dir, 0700) == 0) break;
        if (errno != EEXIST || id || attempt > 100) {
            if (errno == EEXIST) snprintf(err, errlen, "session %s exists already", name);
            else snprintf(err, errlen, "cannot create %s: %s", dir, strerror(errno));
            return NULL;
        }
    }
    int fd = session_lock(dir);
    if (fd < 0) {
        snprintf(err, errlen, "cannot lock the new session %s: %s", dir, strerror(errno));
        rmdir(dir);
        return NULL;
    }
    session *s = session_alloc(dir, fd);
    snprintf(s->meta.info.id, sizeof s->meta.info.id, "%s", id ? id : gen);
    snprintf(s->meta.info.cwd, sizeof s->meta.info.cwd, "%s", cwd ? cwd : "");
    s->meta.info.created = s->meta.info.updated = base_wall_time_s();
    s->created_here = true;
    return s;
}

session_open_status session_open_request(const session_request *rq, session **out, char *err, size_t errlen)
{
    *out = NULL;
    int asked = (rq->session_id != NULL) + (rq->resume ? 1 : 0) + (rq->continue_last ? 1 : 0);
    if (asked > 1) {
        snprintf(err, errlen, "--session, --resume and --continue exclude each other");
        return SESSION_OPEN_ERROR;
    }
    if (rq->session_id) {
        if (!session_id_valid(rq->session_id)) {
            snprintf(err, errlen, "\"%s\" is not a session ID (1-64 letters, digits, '.', '_', '-')", rq->session_id);
            return SESSION_OPEN_ERROR;
        }
        char dir[PATH_MAX];
        struct stat st;
        if (session_dir_of(rq->session_id, dir, sizeof dir) && lstat(dir, &st) == 0)
            *out = session_open(rq->session_id, err, errlen);
        else
            *out = session_create(rq->session_id, rq->cwd, err, errlen);
        /* Two processes creating the same name: the loser opens it. */
        if (!*out && strstr(err, "exists already")) *out = session_open(rq->session_id, err, errlen);
        return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
    }
    if (rq->resume) {
        if (!rq->resume_id) return SESSION_OPEN_PICK;
        char id[SESSION_ID_MAX];
        if (sessions_resolve(rq->resume_id, id, sizeof id, err, errlen) != 0) return SESSION_OPEN_ERROR;
        *out = session_open(id, err, errlen);
        return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
    }
    if (rq->continue_last) {
        session_info *v;
        int n = sessions_list(&v, err, errlen);
        if (n < 0) return SESSION_OPEN_ERROR;
        const char *busy = NULL;
        for (int i = 0; i < n && !*out; i++) {
            if (!rq->cwd || strcmp(v[i].cwd, rq->cwd)) continue;
            if (v[i].in_use) {
                if (!busy) busy = v[i].id;
                continue;
            }
            *out = session_open(v[i].id, err, errlen);
        }
        char busy_id[SESSION_ID_MAX];
        snprintf(busy_id, sizeof busy_id, "%s", busy ? busy : "");
        free(v);
        if (*out) return SESSION_OPEN_OK;
        *out = session_create(NULL, rq->cwd, err, errlen);
        if (!*out) return SESSION_OPEN_ERROR;
        if (busy_id[0])
            note(*out, "the latest session of this directory (%s) is open in another ds4cl process; "
                       "this is a new session", busy_id);
        else
            note(*out, "no earlier session in this directory; this is a new session");
        return SESSION_OPEN_OK;
    }
    *out = session_create(NULL, rq->cwd, err, errlen);
    return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
}

/* ---- attaching to an engine ------------------------------------------------------------ */

static uint64_t tokenizer_fingerprint(const ds4_tokenizer *t)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int n = ds4_vocab_size(t);
    int32_t head[DS4_TOK__COUNT + 1];
    head[0] = n;
    for (int k = 0; k < DS4_TOK__COUNT; k++) head[k + 1] = ds4_token_special(t, (ds4_special)k);
    h ^= tokens_hash(head, DS4_TOK__COUNT + 1);
    for (int32_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *b = ds4_token_bytes(t, id, &len);
        for (size_t i = 0; b && i < len; i++) {
            h ^= (unsigned char)b[i];
            h *= 0x100000001b3ull;
        }
        h ^= 0xff;
        h *= 0x100000001b3ull;
    }
    return h;
}

/* HASH of a system prompt's KV state: what it depends on. Not the
 * context size: a snapshot restores into a session of any context that
 * holds its tokens, and --ctx auto picks a slightly different size
 * whenever free memory moves. */
static void sysprompt_key(const ds4_model_info *mi, const int32_t *ids, size_t n, char out[65])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!md) abort();
    EVP_DigestInit_ex(md, EVP_sha256(), NULL);
    char head[160];
    /* CPU and OpenCL share the snapshot format; the script engine's
     * payload is its own. */
    bool scripted = mi->backend_name && !strcmp(mi->backend_name, "script");
    int hl = snprintf(head, sizeof head, "ds4cl-sysprompt 2 %016" PRIx64 " %s %zu", mi->identity,
                      scripted ? "script" : "model", n);
    EVP_DigestUpdate(md, head, (size_t)hl);
    for (size_t i = 0; i < n; i++) {
        unsigned char b[4] = { (unsigned char)ids[i], (unsigned char)(ids[i] >> 8), (unsigned char)(ids[i] >> 16),
                               (unsigned char)(ids[i] >> 24) };
        EVP_DigestUpdate(md, b, 4);
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    EVP_DigestFinal_ex(md, d, &dl);
    EVP_MD_CTX_free(md);
    for (unsigned i = 0; i < 32 && i < dl; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static bool prompt_cache_on = true;

void sessions_set_prompt_cache(bool on) { prompt_cache_on = on; }

static bool sysprompt_path(const ds4_model_info *mi, const int32_t *ids, size_t n, char *buf, size_t size)
{
    if (!prompt_cache_on) return false;
    char dir[PATH_MAX], key[65] = "";
    if (!sysprompt_cache_dir(dir, sizeof dir)) return false;
    sysprompt_key(mi, ids, n, key);
    int w = snprintf(buf, size, "%s/%s.kv", dir, key);
    return w > 0 && (size_t)w < size;
}

/* Maps a snapshot file read-only and marks it used (the budget evicts the
 * least recently used). false when absent or unreadable. */
static bool map_file(const char *path, void **map, size_t *map_len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
    if (ok) {
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        ok = m != MAP_FAILED;
        if (ok) {
            *map = m;
            *map_len = (size_t)st.st_size;
            (void)futimens(fd, NULL);
        }
    }
    close(fd);
    return ok;
}

static bool map_snapshot(session *s, const char *path) { return map_file(path, &s->map, &s->map_len); }

int session_attach(session *s, ds4_engine *e, agent_config *cfg, char *err, size_t errlen)
{
    ds4_model_info mi;
    ds4_engine_info(e, &mi);
    const ds4_tokenizer *tok = ds4_engine_tokenizer(e);
    uint64_t fp = tokenizer_fingerprint(tok);
    session_attach_done(s);
    pthread_mutex_lock(&s->mu);
    session_info *info = &s->meta.info;
    const char *id = info->id;
    int rc = 0;
    if (s->tx.n) {
        if (s->meta.tokenizer && s->meta.tokenizer != fp) {
            snprintf(err, errlen, "session %s was written with a model of another vocabulary (%s); open it with that model",
                     id, info->model_name[0] ? info->model_name : "unknown");
            rc = -1;
        }
        int n_vocab = ds4_vocab_size(tok);
        for (size_t i = 0; rc == 0 && i < s->tx.n; i++) {
            if (s->tx.ids[i] < 0 || s->tx.ids[i] >= n_vocab) {
                snprintf(err, errlen, "session %s holds tokens this model does not know (saved with %s)", id,
                         info->model_name[0] ? info->model_name : "another model");
                rc = -1;
            }
        }
        if (rc == 0 && s->tx.n >= (size_t)cfg->n_ctx) {
            snprintf(err, errlen, "session %s has %zu tokens, more than the context of %d (use --ctx)", id, s->tx.n,
                     cfg->n_ctx);
            rc = -1;
        }
    }
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    bool other_model = info->model_identity && info->model_identity != mi.identity;
    bool other_backend = info->backend[0] && mi.backend_name &&
                         (!strcmp(info->backend, "script")) != (!strcmp(mi.backend_name, "script"));
    if (other_model && s->tx.n)
        note(s, "session %s was saved with another model (%s); continuing with %s", id,
             info->model_name[0] ? info->model_name : "unknown", mi.name);
    snprintf(info->model_name, sizeof info->model_name, "%s", mi.name);
    snprintf(info->backend, sizeof info->backend, "%s", mi.backend_name ? mi.backend_name : "");
    info->model_identity = mi.identity;
    info->n_ctx = cfg->n_ctx;
    info->think = cfg->think;
    info->sampling = cfg->sampling;
    if (cfg->workspace && strcmp(info->cwd, cfg->workspace)) {
        /* The tools work where ds4cl runs now; --continue finds it there. */
        if (info->cwd[0] && s->tx.n)
            note(s, "session %s was started in %s; its tools now work in %s", id, info->cwd, cfg->workspace);
        strf(info->cwd, sizeof info->cwd, "%s", cfg->workspace);
    }
    s->meta.tokenizer = fp;
    s->dirty = true;

    char warn[256];
    s->budget = sessions_budget(warn, sizeof warn);
    if (warn[0]) note(s, "%s", warn);

    s->cache_path[0] = 0;
    s->cache_hit = false;
    s->resume_tokens.n = 0;
    memset(&s->resume, 0, sizeof s->resume);
    if (s->tx.n) {
        ds4_tokens_append(&s->resume_tokens, s->tx.ids, s->tx.n);
        s->resume.tokens = s->resume_tokens.ids;
        s->resume.n_tokens = s->resume_tokens.n;
        s->resume.system_len = s->system_len;
        char path[PATH_MAX];
        path_in(s, STATE_FILE, path, sizeof path);
        bool have = file_bytes(path) > 0, own_state = false;
        if (have && (other_model || other_backend)) {
            note(s, "the saved KV state of session %s belongs to another model; reading its %zu tokens again", id,
                 s->tx.n);
        } else if (have && map_snapshot(s, path)) {
            own_state = s->meta.snap_file_bytes == s->map_len;
            /* A compaction rebuilds the conversation on its system prompt:
             * the cached state of that prompt saves reading it then. */
            char cpath[PATH_MAX];
            if (s->system_len && sysprompt_path(&mi, s->tx.ids, s->system_len, cpath, sizeof cpath) &&
                map_file(cpath, &s->sys_map, &s->sys_map_len)) {
                s->resume.system_snapshot = s->sys_map;
                s->resume.system_snapshot_len = s->sys_map_len;
            }
        } else {
            /* The cached system prompt still saves that much. */
            char cpath[PATH_MAX];
            bool cached = s->system_len && sysprompt_path(&mi, s->tx.ids, s->system_len, cpath, sizeof cpath) &&
                          map_snapshot(s, cpath);
            if (cached) {
                s->resume.system_snapshot = s->map;
                s->resume.system_snapshot_len = s->map_len;
            }
            note(s, "session %s has no saved KV state%s; reading its %zu tokens again", id,
                 have ? " that can be read" : " (removed by the disk budget or never written)",
                 cached ? s->tx.n - s->system_len : s->tx.n);
        }
        /* What state.kv holds is known only when it is the file the
         * metadata describes (the idle hook skips rewriting it then). */
        if (!own_state) s->meta.snap_tokens = 0;
    } else {
        ds4_error derr = { "" };
        ds4_tokens sys = { 0 };
        if (agent_system_prompt(cfg, &sys, &derr) != 0) {
            snprintf(err, errlen, "%s", derr.msg);
            ds4_tokens_free(&sys);
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        s->cache_tokens.n = 0;
        ds4_tokens_append(&s->cache_tokens, sys.ids, sys.n);
        if (sysprompt_path(&mi, sys.ids, sys.n, s->cache_path, sizeof s->cache_path) &&
            map_snapshot(s, s->cache_path)) {
            s->cache_hit = true;
            ds4_tokens_append(&s->resume_tokens, sys.ids, sys.n);
            s->resume.tokens = s->resume_tokens.ids;
            s->resume.n_tokens = s->resume.system_len = sys.n;
            s->resume.system_snapshot = s->map;
            s->resume.system_snapshot_len = s->map_len;
        }
        ds4_tokens_free(&sys);
    }
    s->resume.snapshot = s->map;
    s->resume.snapshot_len = s->map_len;
    s->hooks.ud = s;
    pthread_mutex_unlock(&s->mu);

    s->hooks.on_turn = hook_turn;
    s->hooks.on_idle = hook_idle;
    s->hooks.on_save = hook_save;
    cfg->persist = &s->hooks;
    /* The tools keep their scratch (a browser profile, job logs) in the
     * session: one place to clean, also after a crash (see
     * session_remove_leftovers). Set whatever cfg held: a config reused
     * from an earlier attach points into a session that may be closed. */
    path_in(s, RUN_DIR, s->run_dir, sizeof s->run_dir);
    cfg->tools.state_dir = s->run_dir;
    cfg->resume = s->resume.n_tokens ? &s->resume : NULL;
    cfg->session_id = s->meta.info.id;
    return 0;
}

void session_attach_done(session *s)
{
    if (s->map) munmap(s->map, s->map_len);
    s->map = NULL;
    s->map_len = 0;
    s->resume.snapshot = NULL;
    s->resume.snapshot_len = 0;
    if (s->sys_map) munmap(s->sys_map, s->sys_map_len);
    s->sys_map = NULL;
    s->sys_map_len = 0;
    s->resume.system_snapshot = NULL;
    s->resume.system_snapshot_len = 0;
}

/* ---- hooks (the worker's thread) --------------------------------------------------------- */

static int write_meta_locked(session *s, char *err, size_t errlen)
{
    s->meta.info.updated = base_wall_time_s();
    if (meta_write(s->dir, &s->meta, err, errlen) != 0) return -1;
    s->meta_written = true;
    s->dirty = false;
    return 0;
}

static int ensure_journal(session *s, char *err, size_t errlen)
{
    if (s->jfd >= 0) return 0;
    char path[PATH_MAX];
    path_in(s, JOURNAL_FILE, path, sizeof path);
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        strf(err, errlen, "cannot create the session journal %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size == 0) {
        strbuf h = { 0 };
        journal_encode_header(&h);
        int rc = journal_append(fd, h.s, h.len, err, errlen);
        sb_free(&h);
        int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        if (rc != 0) {
            close(fd);
            return -1;
        }
    }
    s->jfd = fd;
    return 0;
}

static void hook_turn(void *ud, const agent_turn *t)
{
    session *s = ud;
    strbuf rec = { 0 };
    journal_encode(&rec, t);
    pthread_mutex_lock(&s->io);
    char err[320] = "";
    int rc = ensure_journal(s, err, sizeof err);
    if (rc == 0) rc = journal_append(s->jfd, rec.s, rec.len, err, sizeof err);
    pthread_mutex_lock(&s->mu);
    apply_record(s, t);
    s->dirty = true;
    if (rc != 0 && !s->io_err[0]) snprintf(s->io_err, sizeof s->io_err, "%s", err);
    /* The first user turn makes the session worth listing. */
    if (t->kind == AGENT_TURN_USER && !s->meta_written && write_meta_locked(s, err, sizeof err) != 0 && !s->io_err[0])
        snprintf(s->io_err, sizeof s->io_err, "%s", err);
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->io);
    sb_free(&rec);
}

static bool same_tokens(const int32_t *a, size_t na, const ds4_tokens *b)
{
    return na == b->n && (na == 0 || !memcmp(a, b->ids, na * sizeof *a));
}

/* Writes state.kv when the KV state holds something it does not. forced:
 * also when nothing changed (then only the message). */
static int snapshot_locked(session *s, ds4_session *ks, bool forced, char *msg, size_t msglen)
{
    size_t have = ds4_session_n_tokens(ks);
    const int32_t *ids = ds4_session_tokens(ks);
    if (have == 0) return 0;
    uint64_t h = tokens_hash(ids, have);
    pthread_mutex_lock(&s->mu);
    size_t snap_n = s->meta.snap_tokens;
    uint64_t snap_h = s->meta.snap_hash;
    pthread_mutex_unlock(&s->mu);
    /* Everything was read from scratch: whatever state.kv holds did not
     * load (damaged, or never written), whatever the metadata says. */
    bool full_read = have > 1 && ds4_session_last_prefilled(ks) == have;
    bool unchanged = have == snap_n && h == snap_h && !full_read;
    /* Only the EOS closing the last reply is new (the state restored at
     * resume, plus what every next turn reads first anyway): rewriting a
     * large state for one token would delay the next turn. */
    bool eos_only = snap_n && have == snap_n + 1 && ds4_session_last_prefilled(ks) <= 1 &&
                    tokens_hash(ids, snap_n) == snap_h;
    char path[PATH_MAX];
    path_in(s, STATE_FILE, path, sizeof path);
    if (!unchanged && (forced || !eos_only)) {
        ds4_error err = { "" };
        if (ds4_session_save(ks, path, &err) != 0) {
            /* msg is a short line for the user: the start of the
             * engine's error says what failed */
            snprintf(msg, msglen, "session %s: the KV state could not be saved: %.300s", s->meta.info.id, err.msg);
            return -1;
        }
        pthread_mutex_lock(&s->mu);
        s->meta.snap_tokens = have;
        s->meta.snap_hash = h;
        s->meta.snap_file_bytes = file_bytes(path);
        s->dirty = true;
        pthread_mutex_unlock(&s->mu);
        sessions_enforce_budget(s->budget);
    }
    if (forced)
        snprintf(msg, msglen, "saved session %s (%zu tokens, %.1f MiB)", s->meta.info.id, have,
                 (double)file_bytes(path) / (1 << 20));
    return 0;
}

static int idle_or_save(session *s, ds4_session *ks, const int32_t *tokens, size_t n, bool forced, char *msg,
                        size_t msglen)
{
    pthread_mutex_lock(&s->io);
    int rc = 0;
    msg[0] = 0;
    pthread_mutex_lock(&s->mu);
    if (s->io_err[0]) {
        snprintf(msg, msglen, "%s", s->io_err);
        s->io_err[0] = 0;
        rc = 1;
    }
    int user_turns = s->meta.info.user_turns;
    pthread_mutex_unlock(&s->mu);

    /* The system prompt's state, once: when it was not cached, or the
     * cached one could not be used (the prompt was read after all). */
    if (s->cache_path[0]) {
        if (same_tokens(tokens, n, &s->cache_tokens) && same_tokens(ds4_session_tokens(ks), ds4_session_n_tokens(ks), &s->cache_tokens) &&
            ds4_session_logits(ks) && (!s->cache_hit || ds4_session_last_prefilled(ks) > 0)) {
            ds4_error err = { "" };
            if (ds4_session_save(ks, s->cache_path, &err) == 0) sessions_enforce_budget(s->budget);
        }
        s->cache_path[0] = 0;
    }

    if (user_turns == 0) {
        if (forced) snprintf(msg, msglen, "nothing to save yet");
    } else {
        char smsg[512] = "";
        if (snapshot_locked(s, ks, forced, smsg, sizeof smsg) != 0) {
            snprintf(msg, msglen, "%s", smsg);
            rc = forced ? -1 : 1;
        } else if (forced && rc == 0) {
            snprintf(msg, msglen, "%s", smsg);
        }
        pthread_mutex_lock(&s->mu);
        char err[256];
        if (s->dirty && write_meta_locked(s, err, sizeof err) != 0 && rc == 0) {
            snprintf(msg, msglen, "session %s: %s", s->meta.info.id, err);
            rc = 1;
        }
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&s->io);
    return rc;
}

static int hook_idle(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen)
{
    return idle_or_save(ud, ks, tokens, n, false, msg, msglen);
}

static int hook_save(void *ud, ds4_session *ks, const int32_t *tokens, size_t n, char *msg, size_t msglen)
{
    return idle_or_save(ud, ks, tokens, n, true, msg, msglen) < 0 ? -1 : 0;
}

/* ---- queries ---------------------------------------------------------------------------- */

size_t session_notes(const session *s, const char *const **lines)
{
    *lines = (const char *const *)s->notes;
    return s->n_notes;
}

const char *session_id(const session *s) { return s->meta.info.id; }

void session_get_info(session *s, session_info *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->meta.info;
    pthread_mutex_unlock(&s->mu);
    char path[PATH_MAX];
    path_in(s, STATE_FILE, path, sizeof path);
    out->snapshot_bytes = file_bytes(path);
    out->in_use = true;
}

size_t session_history(session *s, int max_user, session_turn **out)
{
    pthread_mutex_lock(&s->mu);
    size_t from = 0;
    if (max_user > 0) {
        int seen = 0;
        for (size_t i = s->n_turns; i-- > 0;) {
            if (s->turns[i].kind == AGENT_TURN_USER && ++seen == max_user) {
                from = i;
                break;
            }
        }
    }
    size_t n = s->n_turns - from;
    session_turn *v = calloc(n ? n : 1, sizeof *v);
    if (!v) abort();
    for (size_t i = 0; i < n; i++) {
        const turn_rec *r = &s->turns[from + i];
        v[i].kind = r->kind;
        v[i].len = r->len;
        v[i].n_tokens = r->n_tokens;
        v[i].text = malloc(r->len + 1);
        if (!v[i].text) abort();
        memcpy(v[i].text, r->text, r->len + 1);
        v[i].calls = tool_calls_dup(r->calls, r->n_calls);
        v[i].n_calls = r->n_calls;
    }
    pthread_mutex_unlock(&s->mu);
    *out = v;
    return n;
}

void session_turns_free(session_turn *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].text);
        tool_calls_free(v[i].calls, v[i].n_calls);
    }
    free(v);
}

/* ---- fork and close ------------------------------------------------------------------------ */

static int copy_file(const char *from, const char *to, char *err, size_t errlen)
{
    size_t len;
    char *data = file_read_all(from, &len);
    if (!data) {
        snprintf(err, errlen, "cannot read %s: %s", from, strerror(errno));
        return -1;
    }
    int rc = file_write_atomic(to, data, len, 0600, false, err, errlen);
    free(data);
    return rc;
}

session *session_fork(session *s, char *err, size_t errlen)
{
    pthread_mutex_lock(&s->mu);
    char cwd[sizeof s->meta.info.cwd];
    snprintf(cwd, sizeof cwd, "%s", s->meta.info.cwd);
    int turns = s->meta.info.user_turns;
    pthread_mutex_unlock(&s->mu);
    if (turns == 0) {
        snprintf(err, errlen, "nothing to fork yet: the session has no turns");
        return NULL;
    }
    session *f = session_create(NULL, cwd, err, errlen);
    if (!f) return NULL;
    pthread_mutex_lock(&s->io);
    char from[PATH_MAX], to[PATH_MAX];
    path_in(s, JOURNAL_FILE, from, sizeof from);
    path_in(f, JOURNAL_FILE, to, sizeof to);
    int rc = copy_file(from, to, err, errlen);
    path_in(s, STATE_FILE, from, sizeof from);
    path_in(f, STATE_FILE, to, sizeof to);
    /* Snapshots are never changed in place (always replaced by rename),
     * so both sessions may share one file. */
    if (rc == 0 && file_bytes(from) > 0 && link(from, to) != 0) (void)copy_file(from, to, err, errlen);
    pthread_mutex_lock(&s->mu);
    session_meta m = s->meta;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->io);
    if (rc == 0) {
        snprintf(m.info.forked_from, sizeof m.info.forked_from, "%s", m.info.id);
        snprintf(m.info.id, sizeof m.info.id, "%s", f->meta.info.id);
        m.info.created = m.info.updated = base_wall_time_s();
        if (file_bytes(to) != m.snap_file_bytes) m.snap_tokens = 0;
        rc = meta_write(f->dir, &m, err, errlen);
    }
    if (rc != 0) {
        rm_rf(f->dir);
        session_free(f);
        return NULL;
    }
    char id[SESSION_ID_MAX], dir[PATH_MAX];
    snprintf(id, sizeof id, "%s", f->meta.info.id);
    snprintf(dir, sizeof dir, "%s", f->dir);
    int fd = f->lock_fd;
    f->lock_fd = -1;
    session_free(f);
    return load_locked(id, dir, fd);
}

void session_close(session *s)
{
    if (!s) return;
    session_attach_done(s);
    pthread_mutex_lock(&s->mu);
    if (s->run_dir[0]) rm_rf(s->run_dir);
    if (s->created_here && s->meta.info.user_turns == 0) {
        rm_rf(s->dir);
    } else if (s->dirty && s->meta.info.user_turns > 0) {
        char err[256];
        (void)write_meta_locked(s, err, sizeof err);
    }
    pthread_mutex_unlock(&s->mu);
    session_free(s);
}
