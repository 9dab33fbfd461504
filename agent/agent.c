/* agent.c — the front-end contract: starting and stopping the worker
 * thread, submissions, requests, events, status, confirmations; the turn
 * log and the worker's main loop. */
#include "agent/agent_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

const char *agent_state_name(agent_state s)
{
    switch (s) {
    case AGENT_IDLE: return "idle";
    case AGENT_PREFILL: return "prefill";
    case AGENT_GENERATING: return "generating";
    case AGENT_TOOL: return "tool";
    case AGENT_COMPACTING: return "compacting";
    case AGENT_SAVING: return "saving";
    case AGENT_ERROR: return "error";
    }
    return "?";
}

/* ---- wake pipe and events (callers hold mu) ----------------------------------- */

static void wake_locked(agent *a)
{
    if (a->wake_pending) return;
    a->wake_pending = true;
    char c = 1;
    ssize_t w = write(a->wake_w, &c, 1);
    (void)w; /* the pipe is non-blocking; a full pipe already wakes */
}

static bool mergeable(const agent_event *last, agent_event_type type, const char *tool, const char *name, int call)
{
    if (last->type != type) return false;
    if (type == AGENT_EV_TEXT || type == AGENT_EV_THINKING) return true;
    if (type != AGENT_EV_TOOL_PARAM && type != AGENT_EV_TOOL_PROGRESS) return false;
    if (last->call_index != call) return false;
    if ((last->tool == NULL) != (tool == NULL) || (tool && strcmp(last->tool, tool))) return false;
    if ((last->name == NULL) != (name == NULL) || (name && strcmp(last->name, name))) return false;
    return true;
}

void agent_publish(agent *a, agent_event_type type, const char *text, size_t len, const char *tool,
                   const char *name, const char *args_json, bool is_error, int call_index)
{
    pthread_mutex_lock(&a->mu);
    if (a->n_ev && text && mergeable(&a->ev[a->n_ev - 1], type, tool, name, call_index)) {
        agent_event *last = &a->ev[a->n_ev - 1];
        char *grown = xrealloc(last->text, last->len + len + 1);
        memcpy(grown + last->len, text, len);
        last->len += len;
        grown[last->len] = 0;
        last->text = grown;
    } else {
        if (a->n_ev == a->cap_ev) {
            a->cap_ev = a->cap_ev ? a->cap_ev * 2 : 64;
            a->ev = xrealloc(a->ev, a->cap_ev * sizeof *a->ev);
        }
        agent_event *e = &a->ev[a->n_ev++];
        memset(e, 0, sizeof *e);
        e->type = type;
        if (text) {
            e->text = xmalloc(len + 1);
            memcpy(e->text, text, len);
            e->text[len] = 0;
            e->len = len;
        }
        e->tool = xstrdup(tool);
        e->name = xstrdup(name);
        e->args_json = xstrdup(args_json);
        e->is_error = is_error;
        e->call_index = call_index;
    }
    wake_locked(a);
    pthread_mutex_unlock(&a->mu);
}

void agent_publish_result(agent *a, const char *tool, const char *text, bool is_error, bool denied, int call_index)
{
    pthread_mutex_lock(&a->mu);
    if (a->n_ev == a->cap_ev) {
        a->cap_ev = a->cap_ev ? a->cap_ev * 2 : 64;
        a->ev = xrealloc(a->ev, a->cap_ev * sizeof *a->ev);
    }
    agent_event *e = &a->ev[a->n_ev++];
    memset(e, 0, sizeof *e);
    e->type = AGENT_EV_TOOL_RESULT;
    e->text = xstrdup(text ? text : "");
    e->len = strlen(e->text);
    e->tool = xstrdup(tool);
    e->is_error = is_error;
    e->denied = denied;
    e->call_index = call_index;
    wake_locked(a);
    pthread_mutex_unlock(&a->mu);
}

void agent_notice(agent *a, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    agent_publish(a, AGENT_EV_NOTICE, buf, strlen(buf), NULL, NULL, NULL, false, 0);
    trace_line(a->tr, "notice \"%s\"", buf);
}

void agent_set_state(agent *a, agent_state s)
{
    pthread_mutex_lock(&a->mu);
    agent_state old = a->st.state;
    a->st.state = s;
    if (s != AGENT_PREFILL) a->st.prefill_done = a->st.prefill_total = 0;
    a->st.ctx_used = (int)a->tx.n;
    wake_locked(a);
    pthread_mutex_unlock(&a->mu);
    if (old != s) trace_line(a->tr, "state %s", agent_state_name(s));
}

void agent_set_error(agent *a, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&a->mu);
    /* the status keeps its start; the event carries all of it */
    size_t keep = strlen(buf) < sizeof a->st.error ? strlen(buf) : sizeof a->st.error - 1;
    memcpy(a->st.error, buf, keep);
    a->st.error[keep] = 0;
    pthread_mutex_unlock(&a->mu);
    agent_publish(a, AGENT_EV_ERROR, buf, strlen(buf), NULL, NULL, NULL, true, 0);
    trace_line(a->tr, "error \"%s\"", buf);
}

void agent_status_update(agent *a, void (*fn)(agent_status *st, void *ud), void *ud)
{
    pthread_mutex_lock(&a->mu);
    fn(&a->st, ud);
    wake_locked(a);
    pthread_mutex_unlock(&a->mu);
}

static void set_ctx_used(agent_status *st, void *ud) { st->ctx_used = (int)*(size_t *)ud; }

void agent_update_ctx(agent *a)
{
    size_t n = a->tx.n;
    agent_status_update(a, set_ctx_used, &n);
}

bool agent_cancelled(agent *a)
{
    return atomic_load(&a->interrupt);
}

/* ---- turn log ------------------------------------------------------------------ */

static void turn_push(agent *a, agent_turn_kind kind, size_t start, size_t end, const char *text, size_t len)
{
    if (a->n_turns == a->cap_turns) {
        a->cap_turns = a->cap_turns ? a->cap_turns * 2 : 32;
        a->turns = xrealloc(a->turns, a->cap_turns * sizeof *a->turns);
    }
    turn_rec *r = &a->turns[a->n_turns++];
    r->kind = kind;
    r->start = start;
    r->end = end;
    r->text = xmalloc(len + 1);
    memcpy(r->text, text ? text : "", len);
    r->text[len] = 0;
}

/* Hands a record to the persistence hook. A record it could not keep ends
 * the turn (once: what follows is not kept either, and says so no more);
 * outside a turn (the system prompt at start, a compaction asked for) it
 * is reported, and the next turn meets it again. */
static void persist_turn(agent *a, const agent_turn *t)
{
    char msg[480] = "";
    if (a->cfg.persist->on_turn(a->cfg.persist->ud, t, msg, sizeof msg) == 0 || a->persist_failed) return;
    const char *text = msg[0] ? msg : "the session could not be saved";
    if (!a->in_turn) {
        agent_publish(a, AGENT_EV_ERROR, text, strlen(text), NULL, NULL, NULL, true, 0);
        return;
    }
    a->persist_failed = true;
    agent_set_error(a, "%s", text);
    atomic_store(&a->interrupt, true);
}

void turn_log_add_tool(agent *a, size_t start, const char *text, size_t len, const agent_tool_call *calls, size_t n)
{
    turn_push(a, AGENT_TURN_TOOL, start, a->tx.n, text, len);
    if (a->cfg.persist && a->cfg.persist->on_turn) {
        agent_turn t = {
            .kind = AGENT_TURN_TOOL, .text = text ? text : "", .len = len,
            .tokens = a->tx.ids + start, .n_tokens = a->tx.n - start, .transcript_len = a->tx.n,
            .calls = calls, .n_calls = n,
        };
        persist_turn(a, &t);
    }
}

void turn_log_add(agent *a, agent_turn_kind kind, size_t start, const char *text, size_t len)
{
    turn_push(a, kind, start, a->tx.n, text, len);
    if (a->cfg.persist && a->cfg.persist->on_turn) {
        agent_turn t = {
            .kind = kind, .text = text ? text : "", .len = len,
            .tokens = a->tx.ids + start, .n_tokens = a->tx.n - start, .transcript_len = a->tx.n,
        };
        persist_turn(a, &t);
    }
}

char *agent_take_steer(agent *a)
{
    pthread_mutex_lock(&a->mu);
    char *t = a->steer.len ? sb_take(&a->steer) : NULL;
    pthread_mutex_unlock(&a->mu);
    return t;
}

void turn_log_clear(turn_rec *turns, size_t *n)
{
    for (size_t i = 0; i < *n; i++) free(turns[i].text);
    *n = 0;
}

static void report_whole(agent *a, agent_turn_kind kind, const char *text, size_t len)
{
    if (a->cfg.persist && a->cfg.persist->on_turn) {
        agent_turn t = {
            .kind = kind, .text = text ? text : "", .len = len,
            .tokens = a->tx.ids, .n_tokens = a->tx.n, .transcript_len = a->tx.n,
        };
        persist_turn(a, &t);
    }
}

void turn_log_rebuild(agent *a, const char *text, size_t len) { report_whole(a, AGENT_TURN_REBUILD, text, len); }

/* ---- the worker ------------------------------------------------------------------ */

static void run_hook_idle(agent *a)
{
    if (!a->cfg.persist || !a->cfg.persist->on_idle) return;
    char msg[256] = "";
    if (a->cfg.persist->on_idle(a->cfg.persist->ud, a->sess, a->tx.ids, a->tx.n, msg, sizeof msg) != 0 && msg[0])
        agent_notice(a, "%s", msg);
}

static void do_save(agent *a)
{
    if (!a->cfg.persist || !a->cfg.persist->on_save) {
        agent_notice(a, "saving is not available in this mode");
        return;
    }
    agent_set_state(a, AGENT_SAVING);
    char msg[256] = "";
    int rc = a->cfg.persist->on_save(a->cfg.persist->ud, a->sess, a->tx.ids, a->tx.n, msg, sizeof msg);
    if (rc != 0) agent_set_error(a, "save failed: %s", msg[0] ? msg : "unknown error");
    else if (msg[0]) agent_notice(a, "%s", msg);
}

static void set_can_uncompact_flag(agent_status *st, void *ud) { st->can_uncompact = *(bool *)ud; }

static void do_clear(agent *a)
{
    ds4_tokens_truncate(&a->tx, a->sys_len);
    turn_log_clear(a->turns, &a->n_turns);
    saved_state_free(&a->saved);
    bool can = false;
    agent_status_update(a, set_can_uncompact_flag, &can);
    free(a->last_user);
    a->last_user = NULL;
    a->started_note = false;
    turn_log_rebuild(a, "", 0);
    agent_notice(a, "conversation cleared");
    agent_update_ctx(a);
}

static void apply_think(agent *a)
{
    pthread_mutex_lock(&a->mu);
    bool set = a->think_req_set;
    ds4_think want = a->think_req;
    a->think_req_set = false;
    pthread_mutex_unlock(&a->mu);
    if (!set) return;
    want = ds4_think_for_context(want, a->n_ctx);
    bool max_changes = (want == DS4_THINK_MAX) != (a->think == DS4_THINK_MAX);
    a->think = want;
    if (!max_changes) return;
    /* The Think Max prefix sits right after BOS: re-render the system
     * prompt and keep the turns after it. */
    ds4_tokens sys = { 0 };
    agent_render_system(a, &sys);
    ds4_tokens rest = { 0 };
    ds4_tokens_append(&rest, a->tx.ids + a->sys_len, a->tx.n - a->sys_len);
    long shift = (long)sys.n - (long)a->sys_len;
    a->tx.n = 0;
    ds4_tokens_append(&a->tx, sys.ids, sys.n);
    ds4_tokens_append(&a->tx, rest.ids, rest.n);
    for (size_t i = 0; i < a->n_turns; i++) {
        a->turns[i].start = (size_t)((long)a->turns[i].start + shift);
        a->turns[i].end = (size_t)((long)a->turns[i].end + shift);
    }
    a->sys_len = sys.n;
    ds4_tokens_free(&sys);
    ds4_tokens_free(&rest);
    /* the state before a compaction has the other prefix */
    if (a->saved.valid) {
        saved_state_free(&a->saved);
        bool can = false;
        agent_status_update(a, set_can_uncompact_flag, &can);
    }
    turn_log_rebuild(a, "", 0);
    agent_notice(a, "thinking mode changed; the conversation is read again");
}

static void handle_requests(agent *a)
{
    for (;;) {
        pthread_mutex_lock(&a->mu);
        unsigned req = a->requests;
        a->requests = 0;
        bool stop = a->stop;
        pthread_mutex_unlock(&a->mu);
        if (!req || stop) return;
        atomic_store(&a->interrupt, false);
        if (req & (1u << AGENT_REQ_CLEAR)) do_clear(a);
        if (req & (1u << AGENT_REQ_UNCOMPACT)) {
            if (agent_uncompact(a) < 0) agent_notice(a, "nothing to uncompact");
        }
        if (req & (1u << AGENT_REQ_COMPACT)) {
            compact_result r = agent_compact(a, "user requested compaction");
            if (r == COMPACT_NOTHING) agent_notice(a, "compact skipped: nothing to compact");
        }
        if (req & (1u << AGENT_REQ_SAVE)) do_save(a);
    }
}

/* The idle hook runs before the state says idle, so a front end that
 * sees IDLE also sees what the hook did (an autosave, say). */
static void finish_busy(agent *a)
{
    if (a->cfg.persist && a->cfg.persist->on_idle) {
        agent_set_state(a, AGENT_SAVING);
        run_hook_idle(a);
    }
    pthread_mutex_lock(&a->mu);
    bool err = a->st.error[0] != 0;
    pthread_mutex_unlock(&a->mu);
    agent_set_state(a, err ? AGENT_ERROR : AGENT_IDLE);
}

static void *worker_main(void *arg)
{
    agent *a = arg;
    trace_line(a->tr, "agent worker start ctx=%d tokens=%zu", a->n_ctx, a->tx.n);
    if (!a->resumed) report_whole(a, AGENT_TURN_SYSTEM, "", 0);
    if (a->unanswered) {
        agent_answer_unanswered(a, a->unanswered, a->unanswered_len);
        free(a->unanswered);
        a->unanswered = NULL;
    }
    agent_sync(a, a->tx.ids, a->tx.n, "initial_system_prompt");
    agent_update_ctx(a);
    finish_busy(a);
    for (;;) {
        pthread_mutex_lock(&a->mu);
        while (!a->stop && !a->mailbox && !a->requests && !a->think_req_set && !a->trace_req_set)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->stop) {
            pthread_mutex_unlock(&a->mu);
            break;
        }
        char *text = a->mailbox;
        a->mailbox = NULL;
        /* Only this thread writes the trace, so it swaps files here,
         * between turns, never under a writer. */
        trace *old_trace = NULL;
        bool trace_swapped = a->trace_req_set;
        if (trace_swapped) {
            old_trace = a->tr;
            a->tr = a->trace_req;
            a->trace_req = NULL;
            a->trace_req_set = false;
        }
        pthread_mutex_unlock(&a->mu);
        if (trace_swapped) {
            trace_line(old_trace, "trace stop");
            trace_close(old_trace);
            trace_line(a->tr, "agent trace start ctx=%d tokens=%zu", a->n_ctx, a->tx.n);
        }
        apply_think(a);
        if (text) {
            a->persist_failed = false;
            a->in_turn = true;
            const char *why = agent_run_turn(a, text);
            a->in_turn = false;
            if (a->persist_failed) why = AGENT_END_NOT_SAVED;
            free(text);
            agent_publish(a, AGENT_EV_TURN_END, why, strlen(why), NULL, NULL, NULL,
                          strcmp(why, AGENT_END_DONE) != 0 && strcmp(why, AGENT_END_INTERRUPTED) != 0, 0);
            trace_line(a->tr, "turn end \"%s\"", why);
        }
        handle_requests(a);
        /* What was typed meanwhile and not read yet is the next turn. */
        pthread_mutex_lock(&a->mu);
        if (!a->stop && !a->mailbox && a->steer.len) {
            a->mailbox = sb_take(&a->steer);
            atomic_store(&a->interrupt, false);
            a->st.error[0] = 0;
        }
        bool again = a->mailbox != NULL && !a->stop;
        pthread_mutex_unlock(&a->mu);
        if (!again) finish_busy(a);
    }
    trace_line(a->tr, "agent worker stop");
    return NULL;
}

/* ---- start and stop -------------------------------------------------------------- */

static const char *vocab_bytes(void *ud, int32_t id, size_t *len)
{
    return ds4_token_bytes(ud, id, len);
}

static int setup_tools(agent *a, ds4_error *err)
{
    if (a->cfg.custom_tools) {
        const agent_tools *t = a->cfg.custom_tools;
        a->n_schemas = t->n;
        a->schemas = xcalloc(t->n ? t->n : 1, sizeof *a->schemas);
        for (size_t i = 0; i < t->n; i++) a->schemas[i] = xstrdup(t->schemas_json[i]);
    } else {
        ds4_error msg = { "" };
        tool_env_config tc = a->cfg.tools;
        if (!tc.workspace) tc.workspace = a->workspace;
        a->env = tool_env_new(&tc, &msg);
        if (!a->env) return ds4_error_set(err, "tools: %s", msg.msg[0] ? msg.msg : "cannot set up");
        size_t n = 0;
        const tool_def *const *all = tools_all(&n);
        a->schemas = xcalloc(n ? n : 1, sizeof *a->schemas);
        for (size_t i = 0; i < n; i++) a->schemas[a->n_schemas++] = tools_schema_json(all[i]);
    }
    if (a->n_schemas) {
        ds4_error msg = { "" };
        a->dschema = dsml_schema_new((const char *const *)a->schemas, a->n_schemas, &msg);
        if (!a->dschema) return ds4_error_set(err, "tool schemas: %s", msg.msg);
    }
    return 0;
}

static void random_id(char *out, size_t size)
{
    unsigned char b[8];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) {
        uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(base_now_ms() * 1000);
        memcpy(b, &x, sizeof b);
    }
    snprintf(out, size, "%02x%02x%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]);
}

static void agent_free(agent *a)
{
    if (a->env) tool_env_free(a->env);
    for (size_t i = 0; i < a->n_schemas; i++) free(a->schemas[i]);
    free(a->schemas);
    free(a->unanswered);
    dsml_parser_free(a->parser);
    dsml_masker_free(a->masker);
    dsml_vocab_free(a->dvocab);
    dsml_schema_free(a->dschema);
    ds4_sampler_free(a->sampler);
    ds4_session_close(a->sess);
    ds4_tokens_free(&a->tx);
    free(a->sys_snap);
    ds4_tokens_free(&a->sys_snap_tx);
    turn_log_clear(a->turns, &a->n_turns);
    free(a->turns);
    saved_state_free(&a->saved);
    free(a->last_user);
    sb_free(&a->reply);
    dsml_gather_free(&a->stream);
    sb_free(&a->last_calls);
    trace_close(a->tr);
    trace_close(a->trace_req);
    if (a->wake_r >= 0) close(a->wake_r);
    if (a->wake_w >= 0) close(a->wake_w);
    agent_events_free(a->ev, a->n_ev);
    free(a->mailbox);
    sb_free(&a->steer);
    free(a->workspace);
    free(a->system_extra);
    free(a->session_id);
    pthread_mutex_destroy(&a->mu);
    pthread_cond_destroy(&a->cv);
    free(a);
}

/* The part of a start that needs no thread, session or pipe: enough to
 * render the system prompt. */
static agent *agent_alloc(const agent_config *cfg)
{
    agent *a = xcalloc(1, sizeof *a);
    a->wake_r = a->wake_w = -1;
    pthread_mutex_init(&a->mu, NULL);
    /* timed waits (a permission question) follow the monotonic clock */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&a->interrupt, false);
    a->cfg = *cfg;
    a->workspace = xstrdup(cfg->workspace ? cfg->workspace : ".");
    a->system_extra = xstrdup(cfg->system_extra);
    a->cfg.workspace = a->workspace;
    a->cfg.system_extra = a->system_extra;
    a->cfg.trace_path = NULL;
    a->cfg.resume = NULL; /* used during start only */
    a->engine = cfg->engine;
    a->tok = ds4_engine_tokenizer(cfg->engine);
    a->n_vocab = ds4_vocab_size(a->tok);
    a->n_ctx = cfg->n_ctx;
    a->t_bos = ds4_token_special(a->tok, DS4_TOK_BOS);
    a->t_eos = ds4_token_special(a->tok, DS4_TOK_EOS);
    a->t_user = ds4_token_special(a->tok, DS4_TOK_USER);
    a->t_assistant = ds4_token_special(a->tok, DS4_TOK_ASSISTANT);
    a->t_think = ds4_token_special(a->tok, DS4_TOK_THINK);
    a->t_think_end = ds4_token_special(a->tok, DS4_TOK_THINK_END);
    a->t_dsml = ds4_token_special(a->tok, DS4_TOK_DSML);
    a->max_tool_rounds = cfg->max_tool_rounds > 0 ? (size_t)cfg->max_tool_rounds : AGENT_DEFAULT_MAX_TOOL_ROUNDS;
    a->think = ds4_think_for_context(cfg->think, cfg->n_ctx);
    return a;
}

/* Context kept free beyond the compaction reserve when a conversation
 * starts: its first user turn must fit somewhere. */
#define START_MARGIN 64
/* What a context needs beyond that to be usable at all: a short first
 * request (with the session note) and the start of its answer. */
#define FIRST_TURN_ROOM 1024

/* The summary's share of the context: enough to be useful in a small one,
 * never so much that a large one waits long for it. */
static size_t summary_budget_for(int n_ctx)
{
    size_t b = n_ctx > 0 ? (size_t)n_ctx / 16 : 0;
    return b < 96 ? 96 : b > 4096 ? 4096 : b;
}

/* The compaction request as the model reads it, with the longest reason. */
static size_t compact_request_tokens(agent *a)
{
    char *req = agent_compact_request("tool result would exceed context (longest reason)");
    ds4_tokens t = { 0 };
    ds4_chat_user(a->tok, &t, req);
    ds4_chat_assistant_prefix(a->tok, &t, DS4_THINK_NONE);
    size_t n = t.n;
    ds4_tokens_free(&t);
    free(req);
    return n;
}

/* The smallest context in which a conversation of `start` tokens still
 * leaves compaction its room (the summary grows with the context). */
static int min_ctx_for(size_t start, size_t request)
{
    size_t fixed = start + request + 16 + START_MARGIN;
    size_t n = fixed + summary_budget_for(0);
    while (n < fixed + summary_budget_for((int)(n < INT_MAX ? n : INT_MAX))) n = fixed + summary_budget_for((int)n);
    return n > INT_MAX ? INT_MAX : (int)n;
}

int agent_confirm_timeout_ms(const agent_config *cfg)
{
    if (!cfg || cfg->confirm_timeout_ms == 0) return AGENT_CONFIRM_TIMEOUT_MS;
    return cfg->confirm_timeout_ms < 0 ? -1 : cfg->confirm_timeout_ms;
}

int agent_min_ctx(const agent_config *cfg, ds4_error *err)
{
    if (!cfg || !cfg->engine) return ds4_error_set(err, "no engine");
    agent *a = agent_alloc(cfg);
    int rc = setup_tools(a, err);
    if (rc == 0) {
        ds4_tokens sys = { 0 };
        agent_render_system(a, &sys);
        rc = min_ctx_for(sys.n + FIRST_TURN_ROOM, compact_request_tokens(a));
        if (rc < AGENT_MIN_CTX) rc = AGENT_MIN_CTX;
        ds4_tokens_free(&sys);
    }
    agent_free(a);
    return rc;
}

int agent_system_prompt_parts(const agent_config *cfg, ds4_tokens *out, size_t *shared, ds4_error *err)
{
    if (!cfg || !cfg->engine) return ds4_error_set(err, "no engine");
    agent *a = agent_alloc(cfg);
    int rc = setup_tools(a, err);
    if (rc == 0) agent_render_system(a, out);
    if (shared) *shared = rc == 0 ? a->sys_shared : 0;
    agent_free(a);
    return rc;
}

int agent_system_prompt(const agent_config *cfg, ds4_tokens *out, ds4_error *err)
{
    return agent_system_prompt_parts(cfg, out, NULL, err);
}

agent *agent_start(const agent_config *cfg, ds4_error *err)
{
    if (!cfg || !cfg->engine) {
        ds4_error_set(err, "no engine");
        return NULL;
    }
    if (cfg->n_ctx < AGENT_MIN_CTX) {
        ds4_error_set(err, "a context of %d tokens is too small for the agent (at least %d)", cfg->n_ctx,
                      AGENT_MIN_CTX);
        return NULL;
    }
    agent *a = agent_alloc(cfg);
    char id[64];
    if (cfg->session_id && *cfg->session_id) snprintf(id, sizeof id, "%s", cfg->session_id);
    else random_id(id, sizeof id);
    a->session_id = xstrdup(id);
    a->cfg.session_id = a->session_id;
    snprintf(a->st.session_id, sizeof a->st.session_id, "%s", id);
    a->st.ctx_size = cfg->n_ctx;
    a->st.state = AGENT_PREFILL;

    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        ds4_error_set(err, "cannot create the wake pipe: %s", strerror(errno));
        agent_free(a);
        return NULL;
    }
    a->wake_r = fds[0];
    a->wake_w = fds[1];
    if (cfg->trace_path) {
        a->tr = trace_open(cfg->trace_path, err);
        if (!a->tr) {
            agent_free(a);
            return NULL;
        }
    }
    a->sess = ds4_session_open(cfg->engine, cfg->n_ctx, err);
    if (!a->sess) {
        agent_free(a);
        return NULL;
    }
    a->sampler = ds4_sampler_new(&cfg->sampling);
    if (setup_tools(a, err) != 0) {
        agent_free(a);
        return NULL;
    }
    if (a->env) {
        a->sandboxed = tools_sandbox_active(a->env);
        snprintf(a->sandbox_why, sizeof a->sandbox_why, "%s", tools_sandbox_status(a->env));
    }
    /* Said once, at the start: without Landlock every command asks. */
    if (a->env && cfg->tools.sandbox && !a->sandboxed && a->sandbox_why[0])
        agent_notice(a, "%s", a->sandbox_why);
    if (a->dschema && !cfg->no_dsml_mask) {
        int32_t control[] = { a->t_bos, a->t_user, a->t_assistant, a->t_think, a->t_think_end };
        a->dvocab = dsml_vocab_new(a->n_vocab, vocab_bytes, (void *)a->tok, a->t_eos, a->t_dsml, control, 5);
        a->masker = dsml_masker_new(a->dvocab, a->dschema);
    }
    a->parser = dsml_parser_new(a->dschema, a->think != DS4_THINK_NONE, agent_dsml_event, a);
    /* Room for a compaction to run at all: its request and its summary. */
    a->summary_budget = summary_budget_for(cfg->n_ctx);
    a->compact_reserve = compact_request_tokens(a) + a->summary_budget + 16;

    const agent_resume *rs = cfg->resume;
    if (rs && rs->n_tokens) {
        if (rs->n_tokens > (size_t)cfg->n_ctx) {
            ds4_error_set(err, "the saved conversation (%zu tokens) does not fit a context of %d", rs->n_tokens, cfg->n_ctx);
            agent_free(a);
            return NULL;
        }
        /* A saved state that does not load (damaged, another model or
         * shape) costs time, not the conversation: it is read again. */
        ds4_error rerr = { "" };
        bool unloadable = rs->snapshot && ds4_session_restore(a->sess, rs->snapshot, rs->snapshot_len, &rerr) != 0;
        if (unloadable)
            agent_notice(a, "the saved state could not be loaded (%s); reading the conversation again", rerr.msg);
        ds4_tokens_append(&a->tx, rs->tokens, rs->n_tokens);
        ds4_tokens sys = { 0 };
        agent_render_system(a, &sys);
        a->sys_len = rs->system_len ? rs->system_len : sys.n <= rs->n_tokens ? sys.n : 0;
        ds4_tokens_free(&sys);
        /* the same bytes will not load as the system prompt's state either:
         * reading it again then lets the front end cache it anew */
        bool same_bytes = unloadable && rs->system_snapshot == rs->snapshot;
        if (a->sys_len && rs->system_snapshot && !same_bytes && rs->system_snapshot_len <= SYS_SNAPSHOT_MAX) {
            a->sys_snap = xmalloc(rs->system_snapshot_len);
            memcpy(a->sys_snap, rs->system_snapshot, rs->system_snapshot_len);
            a->sys_snap_len = rs->system_snapshot_len;
            size_t held = rs->system_snapshot_tokens && rs->system_snapshot_tokens < a->sys_len
                              ? rs->system_snapshot_tokens
                              : a->sys_len;
            ds4_tokens_append(&a->sys_snap_tx, a->tx.ids, held);
        }
        /* Only a system prompt (a cached one): a fresh session that skips
         * reading it, so it starts like one. */
        bool fresh = rs->system_len && rs->system_len == rs->n_tokens;
        a->started_note = !fresh;
        a->resumed = !fresh;
        if (rs->last_reply && rs->last_reply_len) {
            a->unanswered = xmalloc(rs->last_reply_len);
            memcpy(a->unanswered, rs->last_reply, rs->last_reply_len);
            a->unanswered_len = rs->last_reply_len;
        }
    } else {
        agent_render_system(a, &a->tx);
        a->sys_len = a->tx.n;
    }
    if (a->tx.n + agent_compact_reserve(a) + START_MARGIN > (size_t)cfg->n_ctx) {
        ds4_error_set(err, "the system prompt (%zu tokens) leaves no room in a context of %d tokens "
                      "(it needs at least %d)", a->sys_len, cfg->n_ctx,
                      min_ctx_for(a->tx.n + FIRST_TURN_ROOM, compact_request_tokens(a)));
        agent_free(a);
        return NULL;
    }
    a->st.ctx_used = (int)a->tx.n;
    if (pthread_create(&a->th, NULL, worker_main, a) != 0) {
        ds4_error_set(err, "cannot start the worker thread");
        agent_free(a);
        return NULL;
    }
    a->th_started = true;
    return a;
}

void agent_stop(agent *a)
{
    if (!a) return;
    pthread_mutex_lock(&a->mu);
    a->stop = true;
    atomic_store(&a->interrupt, true);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    if (a->th_started) pthread_join(a->th, NULL);
    agent_free(a);
}

/* ---- front-end calls -------------------------------------------------------------- */

int agent_submit(agent *a, const char *text)
{
    if (!text) return -1;
    pthread_mutex_lock(&a->mu);
    bool idle = a->st.state == AGENT_IDLE || a->st.state == AGENT_ERROR;
    if (!idle || a->mailbox || a->stop) {
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    a->mailbox = xstrdup(text);
    /* A Ctrl+C from before this turn must not end it. */
    atomic_store(&a->interrupt, false);
    a->st.state = AGENT_PREFILL;
    a->st.error[0] = 0;
    pthread_cond_broadcast(&a->cv);
    wake_locked(a);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

int agent_steer(agent *a, const char *text)
{
    if (!text || !*text) return -1;
    pthread_mutex_lock(&a->mu);
    bool running = a->mailbox || (a->st.state != AGENT_IDLE && a->st.state != AGENT_ERROR);
    if (!running || a->stop) {
        pthread_mutex_unlock(&a->mu);
        return -1;
    }
    if (a->steer.len) sb_puts(&a->steer, "\n\n");
    sb_puts(&a->steer, text);
    pthread_mutex_unlock(&a->mu);
    return 0;
}

char *agent_unsteer(agent *a)
{
    return agent_take_steer(a);
}

void agent_interrupt(agent *a)
{
    atomic_store(&a->interrupt, true);
    pthread_mutex_lock(&a->mu);
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

void agent_confirm(agent *a, tool_confirm answer)
{
    pthread_mutex_lock(&a->mu);
    if (a->confirm_waiting) {
        a->confirm_answered = true;
        a->confirm_answer = answer;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
}

void agent_request(agent *a, agent_request_kind kind)
{
    pthread_mutex_lock(&a->mu);
    a->requests |= 1u << kind;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

ds4_think agent_set_think(agent *a, ds4_think mode)
{
    pthread_mutex_lock(&a->mu);
    a->think_req = mode;
    a->think_req_set = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    return ds4_think_for_context(mode, a->n_ctx);
}

int agent_set_trace(agent *a, const char *path, ds4_error *err)
{
    trace *t = NULL;
    if (path) {
        t = trace_open(path, err);
        if (!t) return -1;
    }
    pthread_mutex_lock(&a->mu);
    trace *dropped = a->trace_req;
    a->trace_req = t;
    a->trace_req_set = true;
    pthread_cond_broadcast(&a->cv);
    pthread_mutex_unlock(&a->mu);
    trace_close(dropped);
    return 0;
}

int agent_wake_fd(agent *a) { return a->wake_r; }

size_t agent_drain(agent *a, agent_event **events)
{
    pthread_mutex_lock(&a->mu);
    size_t n = a->n_ev;
    *events = a->ev;
    a->ev = NULL;
    a->n_ev = a->cap_ev = 0;
    a->wake_pending = false;
    char buf[64];
    while (read(a->wake_r, buf, sizeof buf) > 0) {
    }
    pthread_mutex_unlock(&a->mu);
    return n;
}

void agent_events_free(agent_event *events, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(events[i].text);
        free(events[i].tool);
        free(events[i].name);
        free(events[i].args_json);
    }
    free(events);
}

void agent_get_status(agent *a, agent_status *out)
{
    pthread_mutex_lock(&a->mu);
    *out = a->st;
    out->confirm_pending = a->confirm_waiting && !a->confirm_answered;
    out->confirm_left_ms = 0;
    if (out->confirm_pending) {
        double left = a->confirm_deadline > 0 ? a->confirm_deadline - base_now_ms() : -1;
        out->confirm_left_ms = left < 0 && a->confirm_deadline > 0 ? 0 : (int)left;
    }
    pthread_mutex_unlock(&a->mu);
}

bool agent_sandbox(agent *a, const char **why)
{
    if (why) *why = a->sandbox_why;
    return a->sandboxed;
}
