/* worker.c — the threads that drive the engine sessions: one slot (a
 * session and its thread) by default, --parallel N of them otherwise.
 *
 * Jobs arrive rendered (their prompt tokens) in a queue. An idle slot takes
 * the job that suits it best (see fit), leaving a job to another idle slot
 * that suits it better, so that conversations keep to their slots. The
 * slots' decode tokens go to the engine together, as shared steps, and
 * their prompts in pieces between those steps (batch.c). For each job:
 * the session goes to the prompt keeping the longest common prefix with
 * its live state, or from a cached snapshot of a longer prefix (the live
 * state is saved to the cache first when the prompt leaves it, and the
 * states at the ends of the prompt and of its system part as they are
 * read: see prefill); then the
 * reply is sampled as the agent samples (agent/turn.c): the DSML parser
 * follows the bytes, structure is decoded greedily under the structural
 * mask, and the parser's events become the job's reasoning, text and tool
 * calls. Reasoning and text are taken once per token as the agent takes
 * them (dsml_gather: one event per token for a stream, never half a
 * character, valid UTF-8 with U+FFFD for what is not), in the stream and
 * in the reply alike.
 * tool_choice none forbids the DSML token; required (or a named tool)
 * writes the block opener (and the invoke) once the answer begins.
 * The job's cancel flag, or the server stopping, ends the work at the next
 * chunk or token boundary; the server stopping is an error the client is
 * told of in the API's shape, a client that left is told nothing. */
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/utf8.h"
#include "dsml/dsml.h"
#include "serve/serve_impl.h"

#define MAX_SLOTS 16

/* One engine session and the thread that drives it. */
typedef struct {
    sv_worker *w;
    int index;
    ds4_session *sess;
    pthread_t th;
    bool started, idle;
    uint64_t used;    /* when it last took a job (the worker's clock) */
} slot;

struct sv_worker {
    serve_config cfg;
    sv_memo *memo;
    sv_cache *cache;
    pthread_mutex_t cache_mu; /* the cache is one directory for every slot */
    slot slots[MAX_SLOTS];
    int n_slots;
    const ds4_tokenizer *tok;
    int n_vocab;
    int32_t t_eos, t_bos, t_user, t_assistant, t_dsml;
    dsml_vocab *dvocab;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sv_job **q;
    size_t nq, capq;
    uint64_t clock;
    atomic_bool stop;
    sv_batch *batch;
};

/* One reply being sampled. */
typedef struct {
    sv_worker *w;
    sv_job *j;
    ds4_session *sess;
    dsml_parser *parser;
    dsml_masker *masker;
    dsml_schema *schema;
    ds4_tokens forced;   /* opener written for a required call */
    size_t forced_pos;
    bool forcing;        /* the last pick was forced */
    dsml_gather pend;    /* this token's reasoning or text, not yet taken */
    size_t sent;         /* bytes of j->text handed to the writer */
    size_t hold;         /* longest stop sequence less one */
    bool stopped;        /* a stop sequence matched */
    size_t shared;       /* tokens decoded in steps with other sessions */
} gen;

const serve_config *sv_worker_config(const sv_worker *w)
{
    return &w->cfg;
}

void sv_worker_counts(sv_worker *w, uint64_t *steps, uint64_t *shared)
{
    sv_batch_counts(w->batch, steps, shared);
}

static const char *token_bytes(void *ud, int32_t id, size_t *len)
{
    return ds4_token_bytes(ud, id, len);
}

/* ---- the visible text and stop sequences ------------------------------------------------ */

static size_t utf8_floor(const char *s, size_t at, size_t min)
{
    while (at > min && ((unsigned char)s[at] & 0xc0) == 0x80) at--;
    return at;
}

/* Hands j->text[sent..upto) to the writer. */
static void flush_text(gen *g, size_t upto)
{
    sv_job *j = g->j;
    if (upto <= g->sent) return;
    if (j->req->stream) j->w->text(j, j->text.s + g->sent, upto - g->sent);
    g->sent = upto;
}

static void add_text(gen *g, const char *s, size_t n)
{
    sv_job *j = g->j;
    if (g->stopped) return;
    size_t from = j->text.len > g->hold ? j->text.len - g->hold : 0;
    sb_append(&j->text, s, n);
    const serve_request *r = j->req;
    size_t hit = SIZE_MAX, which = 0;
    for (size_t i = 0; i < r->n_stop; i++) {
        const char *p = strstr(j->text.s + from, r->stop[i]);
        if (p && (size_t)(p - j->text.s) < hit) {
            hit = (size_t)(p - j->text.s);
            which = i;
        }
    }
    if (hit != SIZE_MAX) {
        j->text.len = hit;
        j->text.s[hit] = 0;
        flush_text(g, hit);
        g->stopped = true;
        j->stop_hit = sv_strdup(r->stop[which]);
        return;
    }
    size_t safe = j->text.len > g->hold ? j->text.len - g->hold : 0;
    flush_text(g, utf8_floor(j->text.s, safe, g->sent));
}

/* Takes a token's reasoning or text (dsml_gather, after each token). */
static void take_gathered(void *ud, dsml_event_type type, const char *s, size_t n)
{
    gen *g = ud;
    sv_job *j = g->j;
    if (type == DSML_EV_THINK) {
        sb_append(&j->reasoning, s, n);
        if (j->req->stream) j->w->think(j, s, n);
    } else {
        add_text(g, s, n);
    }
}

static void pend_take(gen *g, bool all)
{
    dsml_gather_take(&g->pend, all, take_gathered, g);
}

static void pend_add(gen *g, dsml_event_type type, const char *s, size_t n)
{
    dsml_gather_add(&g->pend, type, s, n, take_gathered, g);
}

static char *valid_dup(const char *s)
{
    strbuf b = { 0 };
    utf8_append_valid(&b, s ? s : "", s ? strlen(s) : 0);
    return sb_take(&b);
}

static void on_dsml(void *ud, const dsml_event *ev)
{
    gen *g = ud;
    sv_job *j = g->j;
    switch (ev->type) {
    case DSML_EV_THINK:
        pend_add(g, DSML_EV_THINK, ev->text, ev->len);
        break;
    case DSML_EV_TEXT:
        pend_add(g, DSML_EV_TEXT, ev->text, ev->len);
        break;
    case DSML_EV_CALL_END: {
        pend_take(g, true);
        struct json_object *args = json_tokener_parse(ev->text);
        const char *canon = args ? json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN |
                                                                            JSON_C_TO_STRING_NOSLASHESCAPE)
                                 : "{}";
        j->calls = xrealloc(j->calls, (j->n_calls + 1) * sizeof *j->calls);
        char id[96];
        snprintf(id, sizeof id, "%s_%s_%zu", j->req->api == SERVE_API_MESSAGES ? "toolu" : "call", j->id, j->n_calls);
        j->calls[j->n_calls] = (sv_call){ sv_strdup(id), valid_dup(ev->name), valid_dup(canon) };
        json_object_put(args);
        flush_text(g, j->text.len);
        if (j->req->stream) j->w->call(j, j->n_calls, &j->calls[j->n_calls]);
        j->n_calls++;
        break;
    }
    default:
        break;
    }
}

static void sample_hook(void *ud, float *logits, int n_vocab, bool *greedy)
{
    gen *g = ud;
    sv_job *j = g->j;
    g->forcing = false;
    if (g->forced_pos < g->forced.n && dsml_answering(g->parser) && !j->text.len) {
        int32_t want = g->forced.ids[g->forced_pos];
        for (int i = 0; i < n_vocab; i++)
            if (i != want) logits[i] = -INFINITY;
        *greedy = true;
        g->forcing = true;
        return;
    }
    if (j->req->choice == SV_CHOICE_NONE && g->w->t_dsml >= 0 && g->w->t_dsml < n_vocab)
        logits[g->w->t_dsml] = -INFINITY;
    if (g->masker && dsml_constrained(g->parser)) dsml_mask_apply(g->masker, g->parser, logits, n_vocab);
    if (dsml_wants_greedy(g->parser)) *greedy = true;
}

static bool job_cancelled(void *ud)
{
    gen *g = ud;
    return atomic_load(&g->j->cancel) || atomic_load(&g->w->stop);
}

/* ---- one job ------------------------------------------------------------------------------- */

static void gen_setup(gen *g)
{
    sv_job *j = g->j;
    const serve_request *r = j->req;
    ds4_error err = { "" };
    if (r->n_tools) {
        /* a named choice: the mask knows only that tool */
        if (r->choice == SV_CHOICE_NAMED) {
            for (size_t i = 0; i < r->n_tools && !g->schema; i++) {
                struct json_object *s = json_tokener_parse(r->tools[i]), *n;
                if (json_object_object_get_ex(s, "name", &n) && !strcmp(json_object_get_string(n), r->choice_name))
                    g->schema = dsml_schema_new((const char *const *)&r->tools[i], 1, &err);
                json_object_put(s);
            }
        } else {
            g->schema = dsml_schema_new((const char *const *)r->tools, r->n_tools, &err);
        }
    }
    if (g->schema && g->w->dvocab) g->masker = dsml_masker_new(g->w->dvocab, g->schema);
    g->parser = dsml_parser_new(g->schema, j->think, on_dsml, g);
    if (r->choice == SV_CHOICE_REQUIRED || r->choice == SV_CHOICE_NAMED) {
        strbuf o = { 0 };
        sb_puts(&o, "<\xef\xbd\x9c" "DSML\xef\xbd\x9ctool_calls>\n");
        if (r->choice == SV_CHOICE_NAMED) sb_printf(&o, "<\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke name=\"%s\">\n", r->choice_name);
        ds4_tokenize_trusted(g->w->tok, o.s, o.len, &g->forced);
        sb_free(&o);
    }
    for (size_t i = 0; i < r->n_stop; i++)
        if (strlen(r->stop[i]) > g->hold) g->hold = strlen(r->stop[i]) - 1;
}

static void gen_free(gen *g)
{
    dsml_parser_free(g->parser);
    dsml_masker_free(g->masker);
    dsml_schema_free(g->schema);
    ds4_tokens_free(&g->forced);
    dsml_gather_free(&g->pend);
}

/* The cache's entry for the prompt when it holds exactly the prompt (a
 * checkpoint): restored, it leaves nothing to read. A snapshot without
 * logits is not used: its last token would have to be read again, and a
 * restored state cannot be cut back even by one token (it holds only the
 * window and the compressor frontier at its end). */
static bool restore_whole(sv_worker *w, gen *g, const void *base, size_t len)
{
    ds4_error e = { "" };
    if (ds4_session_restore(g->sess, base, len, &e) != 0) {
        /* the session is as it was */
        if (!w->cfg.quiet) fprintf(stderr, "ds4cl serve: a cached snapshot does not load: %s\n", e.msg);
        return false;
    }
    if (ds4_session_logits(g->sess)) return true;
    ds4_session_sync(g->sess, NULL, 0, NULL, &e);
    return false;
}

/* A system part (BOS, the tool block and the system text, up to the first
 * user turn) shorter than this gets no snapshot of its own. */
#define HEAD_MIN_TOKENS 256

static void checkpoint(sv_worker *w, ds4_session *s, const char *what)
{
    ds4_error msg = { "" };
    pthread_mutex_lock(&w->cache_mu);
    if (sv_cache_save(w->cache, s, &msg) != 0 && !w->cfg.quiet)
        fprintf(stderr, "ds4cl serve: cannot cache %s state: %s\n", what, msg.msg);
    pthread_mutex_unlock(&w->cache_mu);
}

/* The tokens before the prompt's first user turn. */
static size_t head_of(const sv_worker *w, const ds4_tokens *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (p->ids[i] == w->t_user) return i;
    return 0;
}

static size_t common_prefix(const ds4_session *s, const ds4_tokens *t);

/* ds4_session_sync_from(ids, n, base) in pieces, each in a turn of the
 * engine, so that the decoding slots' steps run between two of them. The
 * first piece ends a piece past what the session keeps (its common prefix
 * with ids, or base_n tokens of the base, which must begin the piece);
 * the next ones go on from where the last ended, as the engine's chunks
 * would. *prefilled gets the tokens computed. */
static ds4_status sync_pieces(sv_worker *w, gen *g, const int32_t *ids, size_t n, const void *base, size_t base_len,
                              size_t base_n, const ds4_callbacks *cb, ds4_error *err, size_t *prefilled)
{
    size_t piece = sv_batch_piece(w->batch), from = 0;
    const int32_t *cur = ds4_session_tokens(g->sess);
    size_t have = ds4_session_n_tokens(g->sess);
    while (from < have && from < n && cur[from] == ids[from]) from++;
    if (base && base_n > from) from = base_n;
    size_t upto = piece && from + piece < n ? from + piece : n;
    ds4_status rc;
    for (;;) {
        sv_batch_enter(w->batch);
        rc = ds4_session_sync_from(g->sess, ids, upto, base, base_len, cb, err);
        sv_batch_leave(w->batch);
        *prefilled += ds4_session_last_prefilled(g->sess);
        base = NULL;
        base_len = 0;
        if (rc != DS4_OK || upto == n) return rc;
        upto = upto + piece < n ? upto + piece : n;
    }
}

/* Brings the session to the job's prompt: the live state when the prompt
 * goes on from it; else the longest cached snapshot that begins the prompt
 * (the live state is cached first), the engine keeping whichever shares
 * more. With a cache, two more states are cached when they are computed
 * (checkpoints): the end of the prompt, so that the same prompt sent again
 * after its reply, after another conversation took the session, or after a
 * restart, comes back whole; and the end of its system part, so that a new
 * conversation with the same tools and system prompt (another sub-agent of
 * a kind) starts from it. A snapshot that holds more than a prompt shares
 * (the prompt and its reply) cannot be used for it: the engine's snapshot
 * keeps only what the next token needs (the sliding window and the
 * compressor frontier), so it goes on from its own end only. */
static ds4_status prefill(sv_worker *w, gen *g, ds4_error *err)
{
    sv_job *j = g->j;
    const int32_t *ids = j->prompt.ids;
    size_t n = j->prompt.n, have = ds4_session_n_tokens(g->sess), common = common_prefix(g->sess, &j->prompt);
    size_t base_len = 0, base_n = 0;
    void *base = NULL;
    if (w->cache) {
        pthread_mutex_lock(&w->cache_mu);
        ds4_error msg = { "" };
        if (common < have && sv_cache_save(w->cache, g->sess, &msg) != 0 && !w->cfg.quiet)
            fprintf(stderr, "ds4cl serve: cannot cache the session state: %s\n", msg.msg);
        /* a live state to cut back may not rewind that far: any cached
         * prefix is then better than reading the prompt from nothing */
        base = sv_cache_find(w->cache, ids, n, common < have ? 0 : common, &base_len, &base_n);
        pthread_mutex_unlock(&w->cache_mu);
    }
    if (base && base_n == n) {
        restore_whole(w, g, base, base_len);
        free(base);
        base = NULL;
        base_n = 0;
        common = common_prefix(g->sess, &j->prompt);
    }
    ds4_callbacks cb = { .cancel = job_cancelled, .ud = g };
    ds4_status rc = DS4_OK;
    size_t head = w->cache ? head_of(w, &j->prompt) : 0, prefilled = 0;
    if (head >= HEAD_MIN_TOKENS && head < n && common < head && base_n < head) {
        rc = sync_pieces(w, g, ids, head, base, base_len, base_n, &cb, err, &prefilled);
        if (rc == DS4_OK && prefilled) checkpoint(w, g->sess, "the system prompt's");
        free(base);
        base = NULL;
        base_len = 0;
        base_n = 0;
    }
    if (rc == DS4_OK) rc = sync_pieces(w, g, ids, n, base, base_len, base_n, &cb, err, &prefilled);
    free(base);
    j->prefilled = prefilled;
    j->prompt_tokens = n;
    j->cached_tokens = n > j->prefilled ? n - j->prefilled : 0;
    if (rc == DS4_OK && j->prefilled && w->cache) checkpoint(w, g->sess, "the prompt's");
    return rc;
}

static void sample_reply(sv_worker *w, gen *g)
{
    sv_job *j = g->j;
    size_t room = (size_t)w->cfg.n_ctx > j->prompt.n + 1 ? (size_t)w->cfg.n_ctx - j->prompt.n - 1 : 0;
    int limit = j->req->max_tokens ? j->req->max_tokens : w->cfg.max_tokens;
    size_t max_new = limit > 0 && (size_t)limit < room ? (size_t)limit : room;
    ds4_sampling sp = w->cfg.sampling;
    const serve_request *r = j->req;
    if (r->have_temp) sp.temperature = r->temp;
    if (r->have_top_p) sp.top_p = r->top_p;
    if (r->have_top_k) sp.top_k = r->top_k;
    if (r->have_seed) sp.seed = r->seed;
    else if (!w->cfg.seed_given) sp.seed = (uint64_t)base_wall_time_s() * 0x9e3779b97f4a7c15ull ^ j->seq;
    ds4_sampler *sampler = ds4_sampler_new(&sp);
    ds4_tokens sampled = { 0 };
    j->finish = SV_FINISH_STOP;
    bool eos = false;
    sv_batch_join(w->batch);
    for (;;) {
        if (job_cancelled(g)) {
            j->finish = SV_FINISH_CANCEL;
            break;
        }
        if (sampled.n >= max_new) {
            j->finish = SV_FINISH_LENGTH;
            break;
        }
        const float *logits = ds4_session_logits(g->sess);
        int32_t id = logits ? ds4_sample(sampler, logits, w->n_vocab, sample_hook, g) : -1;
        if (id < 0) {
            snprintf(j->error, sizeof j->error, "%s", logits ? "every token was masked" : "no logits to sample from");
            j->finish = SV_FINISH_ERROR;
            break;
        }
        if (g->forcing) g->forced_pos++;
        if (id == w->t_eos || id == w->t_bos || id == w->t_user || id == w->t_assistant) {
            eos = true;
            break;
        }
        ds4_tokens_push(&sampled, id);
        if (!dsml_answering(g->parser)) j->reasoning_tokens++;
        size_t len = 0;
        const char *b = ds4_token_bytes(w->tok, id, &len);
        dsml_feed(g->parser, b ? b : "", b ? len : 0);
        pend_take(g, false);
        dsml_state ds = dsml_get_state(g->parser);
        if (ds == DSML_DONE || ds == DSML_ERROR || g->stopped) break;
        /* the step is interrupted by the server stopping only: this job's
         * cancel flag is looked at before the next token */
        ds4_error err = { "" };
        int members = 1;
        ds4_status rc = sv_batch_eval(w->batch, g->sess, id, &members, &err);
        if (members > 1) g->shared++;
        if (rc == DS4_INTERRUPTED) {
            j->finish = SV_FINISH_CANCEL;
            break;
        }
        if (rc == DS4_ERROR) {
            snprintf(j->error, sizeof j->error, "engine: %.495s", err.msg);
            j->finish = SV_FINISH_ERROR;
            break;
        }
    }
    sv_batch_part(w->batch);
    dsml_state ds = dsml_get_state(g->parser);
    if (ds != DSML_DONE && ds != DSML_ERROR) dsml_finish(g->parser);
    ds = dsml_get_state(g->parser);
    if (ds == DSML_ERROR) {
        /* a call the parser cannot read goes to the client as text */
        size_t len = 0;
        const char *st = dsml_stanza(g->parser, &len);
        pend_add(g, DSML_EV_TEXT, st, len);
    }
    pend_take(g, true);
    flush_text(g, j->text.len);
    j->completion_tokens = sampled.n;
    if (j->n_calls && (j->finish == SV_FINISH_STOP || ds == DSML_DONE)) j->finish = SV_FINISH_TOOLS;
    /* A reply that ended on its own is remembered as sampled (prefix + EOS):
     * the client sending it back gets these very tokens. */
    if ((eos || ds == DSML_DONE) && !g->stopped && j->prompt.n >= 2) {
        ds4_tokens whole = { 0 };
        ds4_tokens_append(&whole, j->prompt.ids + j->prompt.n - 2, 2);
        ds4_tokens_append(&whole, sampled.ids, sampled.n);
        ds4_tokens_push(&whole, w->t_eos);
        sv_memo_put(w->memo, j->prompt.ids, j->prompt.n - 2, j->text.s ? j->text.s : "", j->calls, j->n_calls,
                    whole.ids, whole.n);
        ds4_tokens_free(&whole);
    }
    ds4_tokens_free(&sampled);
    ds4_sampler_free(sampler);
}

static const char *slot_name(const slot *sl)
{
    static const char *const names[MAX_SLOTS] = { " (slot 1)", " (slot 2)", " (slot 3)", " (slot 4)", " (slot 5)",
                                                  " (slot 6)", " (slot 7)", " (slot 8)", " (slot 9)", " (slot 10)",
                                                  " (slot 11)", " (slot 12)", " (slot 13)", " (slot 14)",
                                                  " (slot 15)", " (slot 16)" };
    return names[sl->index];
}

static void run_job(sv_worker *w, slot *sl, sv_job *j)
{
    gen g = { .w = w, .j = j, .sess = sl->sess };
    gen_setup(&g);
    double t0 = base_now_ms();
    ds4_error err = { "" };
    if (j->req->stream) j->w->begin(j);
    ds4_status rc = prefill(w, &g, &err);
    double t1 = base_now_ms();
    if (rc == DS4_ERROR) {
        snprintf(j->error, sizeof j->error, "engine: %.495s", err.msg);
        j->finish = SV_FINISH_ERROR;
    } else if (rc == DS4_INTERRUPTED) {
        j->finish = SV_FINISH_CANCEL;
    } else {
        sample_reply(w, &g);
    }
    if (!w->cfg.quiet)
        fprintf(stderr, "ds4cl serve: request %lu%s: prompt %zu tokens (%zu prefilled, %zu cached) in %.0f ms, "
                        "%zu generated in %.0f ms (%zu in shared steps), %s%s%s\n",
                j->seq, w->n_slots > 1 ? slot_name(sl) : "", j->prompt_tokens, j->prefilled, j->cached_tokens, t1 - t0, j->completion_tokens,
                base_now_ms() - t1, g.shared,
                j->finish == SV_FINISH_CANCEL ? "cancelled" : j->finish == SV_FINISH_ERROR ? j->error
                                                                                           : sv_finish_openai(j->finish),
                j->req->notes.len ? "; left out: " : "", sb_str(&j->req->notes));
    /* the server stopping is an error the client is told of; a client
     * that went away hears nothing */
    if (j->finish == SV_FINISH_CANCEL && atomic_load(&w->stop) && !atomic_load(&j->cancel)) {
        j->finish = SV_FINISH_ERROR;
        j->shutdown = true;
        snprintf(j->error, sizeof j->error, "the server is shutting down");
    }
    if (j->req->stream && j->finish != SV_FINISH_CANCEL) j->w->end(j);
    gen_free(&g);
}

/* Hands a finished job back to its connection. When the server is
 * stopping, a stream's last events (its error) must leave before the
 * connections are closed: the connection lets go of the job once it has
 * sent the whole response, which is waited for when drain says (a while
 * at most). */
static void job_done(sv_job *j, bool drain)
{
    pthread_mutex_lock(&j->mu);
    j->done = true;
    pthread_cond_broadcast(&j->cv);
    drain = drain && j->shutdown && j->req->stream;
    for (int i = 0; drain && j->refs > 1 && i < 200; i++) {
        pthread_mutex_unlock(&j->mu);
        nanosleep(&(struct timespec){ 0, 10 * 1000000L }, NULL);
        pthread_mutex_lock(&j->mu);
    }
    pthread_mutex_unlock(&j->mu);
    sv_job_unref(j);
}

/* Ends a job that will not run, the server going away; a stream gets its
 * beginning and the error event. */
static void refuse_job(sv_job *j, bool drain)
{
    j->finish = SV_FINISH_ERROR;
    j->shutdown = true;
    snprintf(j->error, sizeof j->error, "the server is shutting down");
    if (j->req->stream) {
        j->w->begin(j);
        j->w->end(j);
    }
    job_done(j, drain);
}

static size_t common_prefix(const ds4_session *s, const ds4_tokens *t)
{
    size_t have = ds4_session_n_tokens(s), k = 0;
    const int32_t *cur = ds4_session_tokens(s);
    while (k < have && k < t->n && cur[k] == t->ids[k]) k++;
    return k;
}

/* How well a job suits a slot: best, a session that holds mostly the
 * job's own prefix (a conversation going on, the longer the better); then
 * an empty session; last, the least recently used one, whose state is
 * given up (to the snapshot cache). */
static int64_t fit(const slot *sl, const sv_job *j)
{
    size_t held = ds4_session_n_tokens(sl->sess), common = common_prefix(sl->sess, &j->prompt);
    if (common > 0 && common * 2 >= held) return ((int64_t)1 << 50) + (int64_t)common;
    if (!held) return (int64_t)1 << 49;
    return -(int64_t)sl->used;
}

/* Jobs passed over this often go first: a conversation going on in a busy
 * slot cannot keep a new one waiting for ever. */
#define MAX_SKIPS 2

/* The queued job this idle slot should take (under w->mu), or -1: the
 * oldest of those that suit it best (the oldest of all once it has been
 * passed over MAX_SKIPS times), unless another idle slot suits that job
 * better: it is left to that slot, which was woken too. */
static long pick_job(sv_worker *w, const slot *sl)
{
    long best = -1;
    int64_t best_fit = 0;
    for (size_t i = 0; i < w->nq; i++) {
        int64_t f = fit(sl, w->q[i]);
        bool overdue = w->q[i]->skips >= MAX_SKIPS;
        if (best < 0 || f > best_fit || overdue) {
            best = (long)i;
            best_fit = f;
        }
        if (overdue) break;
    }
    for (int k = 0; best >= 0 && k < w->n_slots; k++) {
        const slot *o = &w->slots[k];
        if (o != sl && o->idle && fit(o, w->q[best]) > best_fit) return -1;
    }
    return best;
}

static void *worker_main(void *arg)
{
    slot *sl = arg;
    sv_worker *w = sl->w;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        long pick = -1;
        sl->idle = true;
        while (!atomic_load(&w->stop) && (pick = pick_job(w, sl)) < 0) pthread_cond_wait(&w->cv, &w->mu);
        if (atomic_load(&w->stop)) break;
        sv_job *j = w->q[pick];
        for (long i = 0; i < pick; i++) w->q[i]->skips++;
        memmove(w->q + pick, w->q + pick + 1, (w->nq - (size_t)pick - 1) * sizeof *w->q);
        w->nq--;
        sl->idle = false;
        sl->used = ++w->clock;
        /* the job another idle slot left to this one may suit it now */
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        if (!atomic_load(&j->cancel)) run_job(w, sl, j);
        else j->finish = SV_FINISH_CANCEL;
        job_done(j, true);
        pthread_mutex_lock(&w->mu);
    }
    /* jobs still queued are refused: the server is going away */
    for (size_t i = 0; i < w->nq; i++) refuse_job(w->q[i], true);
    w->nq = 0;
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void close_slots(sv_worker *w)
{
    for (int k = 0; k < w->n_slots; k++) {
        ds4_session_close(w->slots[k].sess);
        w->slots[k].sess = NULL;
    }
}

sv_worker *sv_worker_start(const serve_config *cfg, sv_memo *memo, ds4_error *err)
{
    sv_worker *w = xcalloc(1, sizeof *w);
    w->cfg = *cfg;
    w->memo = memo;
    w->n_slots = cfg->parallel < 1 ? 1 : cfg->parallel > MAX_SLOTS ? MAX_SLOTS : cfg->parallel;
    ds4_error e = { "" };
    for (int k = 0; k < w->n_slots; k++) {
        w->slots[k] = (slot){ .w = w, .index = k };
        w->slots[k].sess = ds4_session_open(cfg->engine, cfg->n_ctx, &e);
        if (!w->slots[k].sess) {
            ds4_error_set(err, "cannot open %s of %d tokens: %s", k ? "another session" : "a session", cfg->n_ctx,
                     e.msg);
            close_slots(w);
            free(w);
            return NULL;
        }
    }
    w->tok = ds4_engine_tokenizer(cfg->engine);
    w->n_vocab = ds4_vocab_size(w->tok);
    w->t_eos = ds4_token_special(w->tok, DS4_TOK_EOS);
    w->t_bos = ds4_token_special(w->tok, DS4_TOK_BOS);
    w->t_user = ds4_token_special(w->tok, DS4_TOK_USER);
    w->t_assistant = ds4_token_special(w->tok, DS4_TOK_ASSISTANT);
    w->t_dsml = ds4_token_special(w->tok, DS4_TOK_DSML);
    int32_t control[] = { w->t_bos, w->t_user, w->t_assistant, ds4_token_special(w->tok, DS4_TOK_THINK),
                          ds4_token_special(w->tok, DS4_TOK_THINK_END) };
    w->dvocab = dsml_vocab_new(w->n_vocab, token_bytes, (void *)w->tok, w->t_eos, w->t_dsml, control, 5);
    if (cfg->cache_dir) {
        ds4_model_info info;
        ds4_engine_info(cfg->engine, &info);
        w->cache = sv_cache_open(cfg->cache_dir, cfg->cache_max_bytes, info.identity);
        if (!w->cache) fprintf(stderr, "ds4cl serve: cannot use the cache directory %s\n", cfg->cache_dir);
        else sv_memo_load(memo, sv_cache_memo_path(w->cache));
    }
    w->batch = sv_batch_new(!cfg->no_batch, &w->stop);
    pthread_mutex_init(&w->mu, NULL);
    pthread_mutex_init(&w->cache_mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    for (int k = 0; k < w->n_slots; k++) {
        if (pthread_create(&w->slots[k].th, NULL, worker_main, &w->slots[k]) != 0) {
            ds4_error_set(err, "cannot start an engine thread");
            sv_worker_stop(w);
            sv_worker_free(w);
            return NULL;
        }
        w->slots[k].started = true;
    }
    return w;
}

void sv_worker_submit(sv_worker *w, sv_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&w->mu);
    if (atomic_load(&w->stop)) {
        pthread_mutex_unlock(&w->mu);
        /* (the connection, which calls this, has not begun to send) */
        refuse_job(j, false);
        return;
    }
    if (w->nq == w->capq) {
        w->capq = w->capq ? 2 * w->capq : 16;
        w->q = xrealloc(w->q, w->capq * sizeof *w->q);
    }
    w->q[w->nq++] = j;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void sv_worker_stop(sv_worker *w)
{
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stop, true);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    for (int k = 0; k < w->n_slots; k++)
        if (w->slots[k].started) pthread_join(w->slots[k].th, NULL);
    for (int k = 0; w->cache && k < w->n_slots; k++) {
        ds4_error msg = { "" };
        if (sv_cache_save(w->cache, w->slots[k].sess, &msg) != 0)
            fprintf(stderr, "ds4cl serve: cannot cache the session state: %s\n", msg.msg);
    }
    if (w->cache) {
        if (sv_memo_save(w->memo, sv_cache_memo_path(w->cache)) != 0)
            fprintf(stderr, "ds4cl serve: cannot save the reply memory in %s\n", sv_cache_memo_path(w->cache));
    }
    sv_cache_close(w->cache);
    w->cache = NULL;
    dsml_vocab_free(w->dvocab);
    w->dvocab = NULL;
    close_slots(w);
}

void sv_worker_free(sv_worker *w)
{
    if (!w) return;
    pthread_mutex_destroy(&w->mu);
    pthread_mutex_destroy(&w->cache_mu);
    pthread_cond_destroy(&w->cv);
    sv_batch_free(w->batch);
    free(w->q);
    free(w);
}
