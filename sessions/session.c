/* session.c — one open session: opening and creating it, binding it to
 * an engine (what to restore, what to read again), queries, forking and
 * closing. Its journal is read in load.c, written by the hooks in
 * persist.c. */
#include "sessions/session_impl.h"

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

void session_note(session *s, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    char **grown = xrealloc(s->notes, (s->n_notes + 1) * sizeof *grown);
    s->notes = grown;
    s->notes[s->n_notes] = xstrdup(buf);
    s->n_notes++;
}

void session_path_in(const session *s, const char *name, char *buf, size_t size)
{
    session_path_join(buf, size, s->dir, name);
}

static session *session_alloc(const char *dir, int lock_fd)
{
    session *s = xcalloc(1, sizeof *s);
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    s->lock_fd = lock_fd;
    s->jfd = -1;
    s->durable_end = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->io, NULL);
    return s;
}

static void session_free(session *s)
{
    if (s->jfd >= 0) close(s->jfd);
    sb_free(&s->pending);
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

void session_apply_record(session *s, const agent_turn *t)
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
        s->turns = xrealloc(s->turns, s->cap_turns * sizeof *s->turns);
    }
    turn_rec *r = &s->turns[s->n_turns++];
    r->kind = kind;
    r->len = len;
    r->text = xmalloc(len + 1);
    memcpy(r->text, text, len);
    r->text[len] = 0;
    r->n_tokens = n;
    r->calls = tool_calls_dup(t->calls, t->n_calls);
    r->n_calls = t->calls ? t->n_calls : 0;
    if (kind == AGENT_TURN_USER) {
        if (s->meta.info.user_turns == 0 && !s->meta.info.title[0])
            session_title_from_text(s->meta.info.title, sizeof s->meta.info.title, text, len);
        s->meta.info.user_turns++;
    }
    s->meta.info.n_tokens = s->tx.n;
}

/* ---- opening ---------------------------------------------------------------------------- */

/* A locked directory becomes an open session, or NULL with err (the lock
 * is released then). */
static session *load_locked(const char *id, const char *dir, int lock_fd, ds4_error *err)
{
    session *s = session_alloc(dir, lock_fd);
    session_remove_leftovers(dir);
    bool have_meta = session_meta_read(dir, &s->meta) == 0 && !strcmp(s->meta.info.id, id);
    if (!have_meta) {
        memset(&s->meta, 0, sizeof s->meta);
        snprintf(s->meta.info.id, sizeof s->meta.info.id, "%s", id);
    }
    if (session_load_journal(s, err) != 0) {
        session_free(s);
        return NULL;
    }
    if (!have_meta) {
        char path[PATH_MAX];
        session_path_in(s, JOURNAL_FILE, path, sizeof path);
        struct stat st;
        s->meta.info.created = s->meta.info.updated = stat(path, &st) == 0 ? (int64_t)st.st_mtime : base_wall_time_s();
        if (s->meta.info.user_turns > 0) {
            /* a damaged original is kept beside, as a damaged journal is */
            char mpath[PATH_MAX], backup[PATH_MAX + 64] = "";
            session_path_in(s, META_FILE, mpath, sizeof mpath);
            ds4_error kerr = { "" };
            if (session_file_bytes(mpath) == 0)
                session_note(s, "the metadata of session %s was missing; it was rebuilt from the journal", id);
            else if (session_keep_damaged(mpath, backup, sizeof backup, &kerr) == 0)
                session_note(s, "the metadata of session %s was unreadable; it was rebuilt from the journal, the damaged "
                             "original is %s", id, backup);
            else
                session_note(s, "the metadata of session %s was unreadable; it was rebuilt from the journal (the "
                             "damaged original could not be kept: %s)", id, kerr.msg);
            s->dirty = true;
        }
    }
    s->meta_written = have_meta;
    /* a loss is told once: the metadata now counts what is left */
    if (have_meta && s->dirty) {
        ds4_error merr = { "" };
        pthread_mutex_lock(&s->mu);
        if (session_write_meta_locked(s, &merr) != 0) session_note(s, "session %s: %s", id, merr.msg);
        pthread_mutex_unlock(&s->mu);
    }
    return s;
}

session *session_open(const char *id, ds4_error *err)
{
    char dir[PATH_MAX];
    if (!session_id_valid(id)) {
        ds4_error_set(err, "\"%s\" is not a session ID (letters, digits, '.', '_', '-')", id ? id : "");
        return NULL;
    }
    if (!session_dir_of(id, dir, sizeof dir)) {
        ds4_error_set(err, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
        return NULL;
    }
    struct stat st;
    if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        ds4_error_set(err, "no session \"%s\"", id);
        return NULL;
    }
    int fd = session_lock(dir);
    if (fd < 0) {
        if (errno == EWOULDBLOCK) ds4_error_set(err, "session %s is open in another ds4cl process", id);
        else ds4_error_set(err, "cannot lock session %s: %s", id, strerror(errno));
        return NULL;
    }
    return load_locked(id, dir, fd, err);
}

session *session_create(const char *id, const char *cwd, ds4_error *err)
{
    char dir[PATH_MAX], gen[SESSION_ID_MAX];
    if (id && !session_id_valid(id)) {
        ds4_error_set(err, "\"%s\" is not a session ID (1-64 letters, digits, '.', '_', '-')", id);
        return NULL;
    }
    for (int attempt = 0;; attempt++) {
        if (!id) session_random_id(gen, sizeof gen);
        const char *name = id ? id : gen;
        if (!session_dir_of(name, dir, sizeof dir)) {
            ds4_error_set(err, "no home directory for sessions (set HOME or XDG_DATA_HOME)");
            return NULL;
        }
        if (mkdir(dir, 0700) == 0) break;
        if (errno != EEXIST || id || attempt > 100) {
            if (errno == EEXIST) ds4_error_set(err, "session %s exists already", name);
            else ds4_error_set(err, "cannot create %s: %s", dir, strerror(errno));
            return NULL;
        }
    }
    int fd = session_lock(dir);
    if (fd < 0) {
        ds4_error_set(err, "cannot lock the new session %s: %s", dir, strerror(errno));
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

session_open_status session_open_request(const session_request *rq, session **out, ds4_error *err)
{
    *out = NULL;
    int asked = (rq->session_id != NULL) + (rq->resume ? 1 : 0) + (rq->continue_last ? 1 : 0);
    if (asked > 1) {
        ds4_error_set(err, "--session, --resume and --continue exclude each other");
        return SESSION_OPEN_ERROR;
    }
    if (rq->session_id) {
        if (!session_id_valid(rq->session_id)) {
            ds4_error_set(err, "\"%s\" is not a session ID (1-64 letters, digits, '.', '_', '-')", rq->session_id);
            return SESSION_OPEN_ERROR;
        }
        char dir[PATH_MAX];
        struct stat st;
        if (session_dir_of(rq->session_id, dir, sizeof dir) && lstat(dir, &st) == 0)
            *out = session_open(rq->session_id, err);
        else
            *out = session_create(rq->session_id, rq->cwd, err);
        /* Two processes creating the same name: the loser opens it. */
        if (!*out && err && strstr(err->msg, "exists already")) *out = session_open(rq->session_id, err);
        return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
    }
    if (rq->resume) {
        if (!rq->resume_id) return SESSION_OPEN_PICK;
        char id[SESSION_ID_MAX];
        if (sessions_resolve(rq->resume_id, id, sizeof id, err) != 0) return SESSION_OPEN_ERROR;
        *out = session_open(id, err);
        return *out ? SESSION_OPEN_OK : SESSION_OPEN_ERROR;
    }
    if (rq->continue_last) {
        session_info *v;
        int n = sessions_list(&v, err);
        if (n < 0) return SESSION_OPEN_ERROR;
        const char *busy = NULL;
        for (int i = 0; i < n && !*out; i++) {
            if (!rq->cwd || strcmp(v[i].cwd, rq->cwd)) continue;
            if (v[i].in_use) {
                if (!busy) busy = v[i].id;
                continue;
            }
            *out = session_open(v[i].id, err);
        }
        char busy_id[SESSION_ID_MAX];
        snprintf(busy_id, sizeof busy_id, "%s", busy ? busy : "");
        free(v);
        if (*out) return SESSION_OPEN_OK;
        *out = session_create(NULL, rq->cwd, err);
        if (!*out) return SESSION_OPEN_ERROR;
        if (busy_id[0])
            session_note(*out, "the latest session of this directory (%s) is open in another ds4cl process; "
                       "this is a new session", busy_id);
        else
            session_note(*out, "no earlier session in this directory; this is a new session");
        return SESSION_OPEN_OK;
    }
    *out = session_create(NULL, rq->cwd, err);
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
    h ^= session_tokens_hash(head, DS4_TOK__COUNT + 1);
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
    int hl = snprintf(head, sizeof head, "ds4cl-sysprompt 3 %016" PRIx64 " %s %zu", mi->identity,
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
    if (!session_sysprompt_cache_dir(dir, sizeof dir)) return false;
    sysprompt_key(mi, ids, n, key);
    int w = snprintf(buf, size, "%s/%s.kv", dir, key);
    return w > 0 && (size_t)w < size;
}

/* Maps a snapshot file read-only and marks it used (the budget evicts the
 * least recently used). false when absent or unreadable. */
static bool map_file(const char *path, void **map, size_t *map_len)
{
    /* O_NONBLOCK: a FIFO in its place is refused, not waited on */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
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

/* Directory entries of the workspace looked at for the temporary files
 * an interrupted atomic write left: bounds the walk in a huge tree. */
#define TEMP_SWEEP_ENTRIES 50000

int session_attach(session *s, ds4_engine *e, agent_config *cfg, ds4_error *err)
{
    /* A write killed halfway (an edit of a large file, say) leaves its
     * temporary file beside the target; the next session here removes
     * those whose writer is gone (see temp_sweep). */
    size_t swept = cfg->workspace ? temp_sweep(cfg->workspace, TEMP_SWEEP_ENTRIES) : 0;
    if (swept)
        session_note(s, "removed %zu temporary file%s that an interrupted write left in %s", swept, swept == 1 ? "" : "s",
             cfg->workspace);
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
            ds4_error_set(err, "session %s was written with a model of another vocabulary (%s); open it with that model",
                     id, info->model_name[0] ? info->model_name : "unknown");
            rc = -1;
        }
        int n_vocab = ds4_vocab_size(tok);
        for (size_t i = 0; rc == 0 && i < s->tx.n; i++) {
            if (s->tx.ids[i] < 0 || s->tx.ids[i] >= n_vocab) {
                ds4_error_set(err, "session %s holds tokens this model does not know (saved with %s)", id,
                         info->model_name[0] ? info->model_name : "another model");
                rc = -1;
            }
        }
        if (rc == 0 && s->tx.n >= (size_t)cfg->n_ctx) {
            ds4_error_set(err, "session %s has %zu tokens, more than the context of %d (use --ctx)", id, s->tx.n,
                     cfg->n_ctx);
            rc = -1;
        }
    }
    if (rc != 0) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    if (s->need_system) {
        ds4_error derr = { "" };
        ds4_tokens sys = { 0 };
        if (agent_system_prompt(cfg, &sys, &derr) == 0 && s->tx.n + sys.n < (size_t)cfg->n_ctx)
            session_rebuild_system(s, &sys);
        ds4_tokens_free(&sys);
    }
    bool other_model = info->model_identity && info->model_identity != mi.identity;
    bool other_backend = info->backend[0] && mi.backend_name &&
                         (!strcmp(info->backend, "script")) != (!strcmp(mi.backend_name, "script"));
    if (other_model && s->tx.n)
        session_note(s, "session %s was saved with another model (%s); continuing with %s", id,
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
            session_note(s, "session %s was started in %s; its tools now work in %s", id, info->cwd, cfg->workspace);
        session_strf(info->cwd, sizeof info->cwd, "%s", cfg->workspace);
    }
    s->meta.tokenizer = fp;
    s->dirty = true;

    char warn[256];
    s->budget = sessions_budget(warn, sizeof warn);
    if (warn[0]) session_note(s, "%s", warn);

    s->cache_path[0] = 0;
    s->cache_hit = false;
    s->resume_tokens.n = 0;
    memset(&s->resume, 0, sizeof s->resume);
    if (s->tx.n) {
        /* The cache holds the system prompt's shared prefix (the same in
         * every workspace): usable when this transcript begins with it. */
        size_t shared = 0;
        ds4_tokens now = { 0 };
        ds4_error perr = { "" };
        if (s->system_len && agent_system_prompt_parts(cfg, &now, &shared, &perr) == 0 && shared &&
            shared <= s->system_len && !memcmp(now.ids, s->tx.ids, shared * sizeof *now.ids))
            s->resume.system_snapshot_tokens = shared;
        else
            shared = 0;
        ds4_tokens_free(&now);
        ds4_tokens_append(&s->resume_tokens, s->tx.ids, s->tx.n);
        s->resume.tokens = s->resume_tokens.ids;
        /* a reply whose calls got no result: the agent answers them */
        if (s->n_turns && s->turns[s->n_turns - 1].kind == AGENT_TURN_ASSISTANT) {
            s->resume.last_reply = s->turns[s->n_turns - 1].text;
            s->resume.last_reply_len = s->turns[s->n_turns - 1].len;
        }
        s->resume.n_tokens = s->resume_tokens.n;
        s->resume.system_len = s->system_len;
        char path[PATH_MAX];
        session_path_in(s, STATE_FILE, path, sizeof path);
        bool have = session_file_bytes(path) > 0, own_state = false;
        if (have && (other_model || other_backend)) {
            session_note(s, "the saved KV state of session %s belongs to another model; reading its %zu tokens again", id,
                 s->tx.n);
        } else if (have && map_snapshot(s, path)) {
            own_state = s->meta.snap_file_bytes == s->map_len;
            /* A compaction rebuilds the conversation on its system prompt:
             * the cached state of that prompt saves reading it then. */
            char cpath[PATH_MAX];
            if (shared && sysprompt_path(&mi, s->tx.ids, shared, cpath, sizeof cpath) &&
                map_file(cpath, &s->sys_map, &s->sys_map_len)) {
                s->resume.system_snapshot = s->sys_map;
                s->resume.system_snapshot_len = s->sys_map_len;
            }
        } else {
            /* The cached system prompt still saves that much. */
            char cpath[PATH_MAX];
            bool cached = shared && sysprompt_path(&mi, s->tx.ids, shared, cpath, sizeof cpath) &&
                          map_snapshot(s, cpath);
            if (cached) {
                s->resume.system_snapshot = s->map;
                s->resume.system_snapshot_len = s->map_len;
            }
            struct stat kst;
            bool empty = !have && lstat(path, &kst) == 0 && S_ISREG(kst.st_mode);
            session_note(s, "session %s has no saved KV state%s; reading its %zu tokens again", id,
                 have    ? " that can be read"
                 : empty ? " (its state.kv is empty: damaged)"
                         : " (removed by the disk budget or never written)",
                 cached ? s->tx.n - shared : s->tx.n);
        }
        /* What state.kv holds is known only when it is the file the
         * metadata describes (the idle hook skips rewriting it then). */
        if (!own_state) s->meta.snap_tokens = 0;
    } else {
        ds4_tokens sys = { 0 };
        size_t shared = 0;
        if (agent_system_prompt_parts(cfg, &sys, &shared, err) != 0) {
            ds4_tokens_free(&sys);
            pthread_mutex_unlock(&s->mu);
            return -1;
        }
        /* The cache keeps the shared prefix, the same for every
         * workspace; the rest (the workspace's part) is read after it. */
        if (!shared || shared > sys.n) shared = sys.n;
        s->cache_tokens.n = 0;
        ds4_tokens_append(&s->cache_tokens, sys.ids, shared);
        if (sysprompt_path(&mi, sys.ids, shared, s->cache_path, sizeof s->cache_path) &&
            map_snapshot(s, s->cache_path)) {
            s->cache_hit = true;
            ds4_tokens_append(&s->resume_tokens, sys.ids, sys.n);
            s->resume.tokens = s->resume_tokens.ids;
            s->resume.n_tokens = s->resume.system_len = sys.n;
            s->resume.system_snapshot = s->map;
            s->resume.system_snapshot_len = s->map_len;
            s->resume.system_snapshot_tokens = shared;
        }
        ds4_tokens_free(&sys);
    }
    s->resume.snapshot = s->map;
    s->resume.snapshot_len = s->map_len;
    s->hooks.ud = s;
    pthread_mutex_unlock(&s->mu);

    s->hooks.on_turn = session_hook_turn;
    s->hooks.on_idle = session_hook_idle;
    s->hooks.on_shared_prefix = session_hook_shared_prefix;
    s->hooks.on_save = session_hook_save;
    cfg->persist = &s->hooks;
    /* The tools keep their scratch (a browser profile, job logs) in the
     * session: one place to clean, also after a crash (see
     * session_remove_leftovers). Set whatever cfg held: a config reused
     * from an earlier attach points into a session that may be closed. */
    session_path_in(s, RUN_DIR, s->run_dir, sizeof s->run_dir);
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
    session_path_in(s, STATE_FILE, path, sizeof path);
    out->snapshot_bytes = session_file_bytes(path);
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
    session_turn *v = xcalloc(n ? n : 1, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        const turn_rec *r = &s->turns[from + i];
        v[i].kind = r->kind;
        v[i].len = r->len;
        v[i].n_tokens = r->n_tokens;
        v[i].text = xmalloc(r->len + 1);
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

static int copy_file(const char *from, const char *to, ds4_error *err)
{
    size_t len;
    char *data = file_read_all(from, &len);
    if (!data) {
        ds4_error_set(err, "cannot read %s: %s", from, strerror(errno));
        return -1;
    }
    int rc = file_write_atomic(to, data, len, 0600, false, err);
    free(data);
    return rc;
}

session *session_fork(session *s, ds4_error *err)
{
    pthread_mutex_lock(&s->mu);
    char cwd[sizeof s->meta.info.cwd];
    snprintf(cwd, sizeof cwd, "%s", s->meta.info.cwd);
    int turns = s->meta.info.user_turns;
    pthread_mutex_unlock(&s->mu);
    if (turns == 0) {
        ds4_error_set(err, "nothing to fork yet: the session has no turns");
        return NULL;
    }
    session *f = session_create(NULL, cwd, err);
    if (!f) return NULL;
    pthread_mutex_lock(&s->io);
    char from[PATH_MAX], to[PATH_MAX];
    session_path_in(s, JOURNAL_FILE, from, sizeof from);
    session_path_in(f, JOURNAL_FILE, to, sizeof to);
    int rc = copy_file(from, to, err);
    session_path_in(s, STATE_FILE, from, sizeof from);
    session_path_in(f, STATE_FILE, to, sizeof to);
    /* Snapshots are never changed in place (always replaced by rename),
     * so both sessions may share one file. */
    if (rc == 0 && session_file_bytes(from) > 0 && link(from, to) != 0) (void)copy_file(from, to, err);
    pthread_mutex_lock(&s->mu);
    session_meta m = s->meta;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_unlock(&s->io);
    if (rc == 0) {
        snprintf(m.info.forked_from, sizeof m.info.forked_from, "%s", m.info.id);
        snprintf(m.info.id, sizeof m.info.id, "%s", f->meta.info.id);
        m.info.created = m.info.updated = base_wall_time_s();
        if (session_file_bytes(to) != m.snap_file_bytes) m.snap_tokens = 0;
        rc = session_meta_write(f->dir, &m, err);
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
    return load_locked(id, dir, fd, err);
}

void session_close(session *s)
{
    if (!s) return;
    session_attach_done(s);
    /* a last try at what a full disk kept out of the journal */
    pthread_mutex_lock(&s->io);
    (void)session_flush_pending(s, NULL);
    pthread_mutex_unlock(&s->io);
    pthread_mutex_lock(&s->mu);
    if (s->run_dir[0]) session_trim_run(s->run_dir);
    if (s->created_here && s->meta.info.user_turns == 0) {
        rm_rf(s->dir);
    } else if (s->dirty && s->meta.info.user_turns > 0 && !s->pending.len) {
        (void)session_write_meta_locked(s, NULL);
    }
    pthread_mutex_unlock(&s->mu);
    session_free(s);
}
