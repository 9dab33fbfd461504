/* turn.c — one user turn: prefill only what is new, sample with structural
 * greedy decoding and the DSML mask, run the calls through the tools,
 * feed the results back, repeat until a plain answer, an interruption, a
 * limit or an error. */
#include "agent/agent_impl.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* ---- prefill ---------------------------------------------------------------------- */

typedef struct {
    agent *a;
    double t0;
    int base, total; /* a sync in two parts reports one progress */
} sync_ctx;

typedef struct {
    int done, total;
    double tps;
} progress_upd;

static void set_progress(agent_status *st, void *ud)
{
    const progress_upd *u = ud;
    st->prefill_done = u->done;
    st->prefill_total = u->total;
    st->prefill_tps = u->tps;
}

static void on_progress(void *ud, int done, int total, double tps)
{
    sync_ctx *c = ud;
    double secs = (base_now_ms() - c->t0) / 1000.0;
    (void)total;
    done += c->base;
    progress_upd u = { done, c->total, tps > 0 ? tps : secs > 0 ? done / secs : 0 };
    agent_status_update(c->a, set_progress, &u);
}

static bool on_cancel(void *ud)
{
    sync_ctx *c = ud;
    return agent_cancelled(c->a);
}

typedef struct {
    size_t prefilled;
    double ms;
} prefill_upd;

static void add_prefill(agent_status *st, void *ud)
{
    const prefill_upd *u = ud;
    st->prefilled_total += u->prefilled;
    st->prefilled_turn += u->prefilled;
    st->prefill_ms += u->ms;
}

static bool starts_with(const int32_t *tokens, size_t n, const ds4_tokens *prefix)
{
    return prefix->n <= n && (prefix->n == 0 || !memcmp(tokens, prefix->ids, prefix->n * sizeof *tokens));
}

/* Engines rewind only a short way cheaply (DS4's compressed KV cannot be
 * shrunk further); going back further means reading everything again. A
 * rebuilt transcript (compaction, /uncompact) goes back to just after the
 * system prompt, so the state there is kept aside for the session to go
 * on from (ds4_session_sync_from). Taken once the session holds exactly
 * the system prompt. */
static void keep_system_prompt(agent *a)
{
    size_t have = ds4_session_n_tokens(a->sess);
    if (have != a->sys_len || have == 0 || ds4_session_kv_bytes(a->sess) > SYS_SNAPSHOT_MAX) return;
    const ds4_tokens cur = { .ids = (int32_t *)ds4_session_tokens(a->sess), .n = have };
    if (!starts_with(a->tx.ids, a->tx.n, &cur)) return;
    void *buf = NULL;
    size_t len = 0;
    ds4_error err = { "" };
    if (ds4_session_snapshot(a->sess, &buf, &len, &err) != 0) return;
    free(a->sys_snap);
    a->sys_snap = buf;
    a->sys_snap_len = len;
    a->sys_snap_tx.n = 0;
    ds4_tokens_append(&a->sys_snap_tx, cur.ids, cur.n);
}

sync_result agent_sync(agent *a, const int32_t *tokens, size_t n, const char *label)
{
    size_t have = ds4_session_n_tokens(a->sess), cached = 0;
    const int32_t *cur = ds4_session_tokens(a->sess);
    while (cached < have && cached < n && cur[cached] == tokens[cached]) cached++;
    if (cached == n && n == have && ds4_session_logits(a->sess)) return SYNC_OK;
    /* The system prompt is about to be read (again): stop right after it
     * to keep its state, unless the one kept is still that prompt. */
    size_t first = n;
    bool sys_kept = a->sys_snap && a->sys_snap_tx.n == a->sys_len && starts_with(a->tx.ids, a->tx.n, &a->sys_snap_tx);
    if (!sys_kept && a->sys_len > cached && a->sys_len < n && a->sys_len <= a->tx.n &&
        !memcmp(tokens, a->tx.ids, a->sys_len * sizeof *tokens))
        first = a->sys_len;
    /* Before that, its workspace-independent prefix, for a front end that
     * keeps that state for every project (on_shared_prefix). */
    const agent_persist_hooks *ph = a->cfg.persist;
    bool snap_usable = a->sys_snap && starts_with(tokens, n, &a->sys_snap_tx);
    bool at_prefix = ph && ph->on_shared_prefix && a->sys_shared > cached && a->sys_shared < first &&
                     a->sys_shared <= a->tx.n && !memcmp(tokens, a->tx.ids, a->sys_shared * sizeof *tokens) &&
                     !(snap_usable && a->sys_snap_tx.n >= a->sys_shared);
    progress_upd u = { 0, (int)(n - cached), 0 };
    agent_status_update(a, set_progress, &u);
    agent_set_state(a, AGENT_PREFILL);
    trace_line(a->tr, "prefill label=%s transcript=%zu cached=%zu suffix=%zu think=%d", label, n, cached, n - cached,
               (int)a->think);
    if (a->tr) {
        trace_line(a->tr, "tokens label=%s start=%zu len=%zu", label, cached, n - cached);
        for (size_t i = cached; i < n; i++) {
            size_t len;
            const char *b = ds4_token_bytes(a->tok, tokens[i], &len);
            trace_token(a->tr, label, i, tokens[i], b, b ? len : 0);
        }
    }
    sync_ctx c = { a, base_now_ms(), 0, (int)(n - cached) };
    ds4_callbacks cb = { .progress = on_progress, .cancel = on_cancel, .ud = &c };
    ds4_error err = { "" };
    size_t prefilled = 0;
    ds4_status rc = DS4_OK;
    if (at_prefix) {
        rc = ds4_session_sync(a->sess, tokens, a->sys_shared, &cb, &err);
        prefilled += ds4_session_last_prefilled(a->sess);
        if (rc == DS4_OK) ph->on_shared_prefix(ph->ud, a->sess, tokens, a->sys_shared);
        c.base = (int)prefilled;
    }
    if (rc == DS4_OK && first < n) {
        /* a kept state of a shorter prefix (the cached shared one) saves
         * reading that much */
        bool from = snap_usable && a->sys_snap_tx.n <= first;
        rc = ds4_session_sync_from(a->sess, tokens, first, from ? a->sys_snap : NULL, from ? a->sys_snap_len : 0, &cb,
                                   &err);
        prefilled += ds4_session_last_prefilled(a->sess);
        if (rc == DS4_OK) keep_system_prompt(a);
        c.base = (int)prefilled;
    }
    if (rc == DS4_OK) {
        const void *base = a->sys_snap && starts_with(tokens, n, &a->sys_snap_tx) ? a->sys_snap : NULL;
        rc = ds4_session_sync_from(a->sess, tokens, n, base, base ? a->sys_snap_len : 0, &cb, &err);
        prefilled += ds4_session_last_prefilled(a->sess);
    }
    if (rc == DS4_OK && n == a->sys_len) keep_system_prompt(a);
    prefill_upd pu = { prefilled, base_now_ms() - c.t0 };
    agent_status_update(a, add_prefill, &pu);
    trace_line(a->tr, "prefill sync done rc=%d prefilled=%zu %.1f ms", (int)rc, pu.prefilled, pu.ms);
    if (rc == DS4_ERROR) {
        agent_set_error(a, "engine: %s", err.msg);
        return SYNC_ERROR;
    }
    return rc == DS4_INTERRUPTED ? SYNC_INTERRUPTED : SYNC_OK;
}

/* ---- sampling --------------------------------------------------------------------- */

typedef enum { STOP_EOS = 0, STOP_DSML, STOP_LIMIT, STOP_CTX, STOP_INTERRUPT, STOP_ERROR } stop_kind;

static void set_greedy(agent_status *st, void *ud) { st->greedy = *(bool *)ud; }

static void sample_hook(void *ud, float *logits, int n_vocab, bool *greedy)
{
    agent *a = ud;
    a->refused_best = -1;
    if (a->masker && dsml_constrained(a->parser)) {
        int best = 0;
        for (int i = 1; i < n_vocab; i++)
            if (logits[i] > logits[best]) best = i;
        dsml_mask_apply(a->masker, a->parser, logits, n_vocab);
        if (logits[best] == -INFINITY) a->refused_best = best;
    }
    bool g = dsml_wants_greedy(a->parser);
    if (g) *greedy = true;
    bool shown;
    pthread_mutex_lock(&a->mu);
    shown = a->st.greedy;
    pthread_mutex_unlock(&a->mu);
    if (shown != g) agent_status_update(a, set_greedy, &g);
}

/* A name the model began that no tool or parameter has: the mask would
 * steer it to another name, one it did not mean (a search "pattern"
 * becoming its "path"), so the call ends there with the error named and
 * the model writes it again. Only where the mask has not overruled the
 * model before in the reply: after that, its wishes are about text it
 * did not write, and the mask keeps steering (a misspelt tag is mended,
 * and the call goes on). */
static bool refuse_name(agent *a, int32_t wanted)
{
    size_t len;
    const char *b = ds4_token_bytes(a->tok, wanted, &len);
    if (!b || !dsml_refuse_name(a->parser, b, len)) return false;
    trace_line(a->tr, "the mask refused the model's token id=%d in a name: %s", wanted, dsml_error(a->parser));
    return true;
}

/* The parser hands text and reasoning over a byte or a few at a time;
 * they are gathered (dsml_gather) and published once per token
 * (agent_stream_flush after each), so a front end sees one event per token
 * however quickly it drains, never half a character, and valid UTF-8. */
static void publish_gathered(void *ud, dsml_event_type type, const char *s, size_t n)
{
    agent_publish(ud, type == DSML_EV_THINK ? AGENT_EV_THINKING : AGENT_EV_TEXT, s, n, NULL, NULL, NULL, false, 0);
}

void agent_stream_flush(agent *a, bool all)
{
    dsml_gather_take(&a->stream, all, publish_gathered, a);
}

void agent_dsml_event(void *ud, const dsml_event *ev)
{
    agent *a = ud;
    if (ev->type != DSML_EV_THINK && ev->type != DSML_EV_TEXT) agent_stream_flush(a, true);
    switch (ev->type) {
    case DSML_EV_THINK:
        dsml_gather_add(&a->stream, DSML_EV_THINK, ev->text, ev->len, publish_gathered, a);
        break;
    case DSML_EV_TEXT:
        dsml_gather_add(&a->stream, DSML_EV_TEXT, ev->text, ev->len, publish_gathered, a);
        break;
    case DSML_EV_BLOCK:
        trace_line(a->tr, "dsml start detected");
        break;
    case DSML_EV_CALL:
        snprintf(a->call_tool, sizeof a->call_tool, "%s", ev->name);
        a->call_index = ev->call;
        agent_publish(a, AGENT_EV_TOOL_START, NULL, 0, ev->name, NULL, NULL, false, ev->call);
        break;
    case DSML_EV_PARAM:
        agent_publish(a, AGENT_EV_TOOL_PARAM, "", 0, a->call_tool, ev->name, NULL, false, ev->call);
        break;
    case DSML_EV_VALUE:
        agent_publish(a, AGENT_EV_TOOL_PARAM, ev->text, ev->len, a->call_tool, ev->name, NULL, false, ev->call);
        break;
    case DSML_EV_CALL_END:
        agent_publish(a, AGENT_EV_TOOL_CALL, NULL, 0, ev->name, NULL, ev->text, false, ev->call);
        break;
    case DSML_EV_DONE:
        trace_line(a->tr, "dsml done calls=%zu", dsml_n_calls(a->parser));
        break;
    case DSML_EV_ERROR:
        trace_line(a->tr, "dsml error %.*s", (int)ev->len, ev->text);
        break;
    case DSML_EV_THINK_END:
        break;
    }
}

typedef struct {
    int generated;
    double tps;
} gen_upd;

static void set_generated(agent_status *st, void *ud)
{
    const gen_upd *u = ud;
    st->generated = u->generated;
    st->gen_tps = u->tps;
    st->generated_total++;
}

static void add_decode(agent_status *st, void *ud) { st->decode_ms += *(double *)ud; }

static bool gen_cancel(void *ud) { return agent_cancelled(ud); }

/* Samples one assistant reply after the prefix already in the session. */
static stop_kind generate(agent *a, size_t max_new, bool ctx_bound)
{
    dsml_parser_reset(a->parser, a->think != DS4_THINK_NONE);
    sb_clear(&a->reply);
    agent_set_state(a, AGENT_GENERATING);
    pthread_mutex_lock(&a->mu);
    a->st.generated = 0;
    a->st.gen_tps = 0;
    pthread_mutex_unlock(&a->mu);
    double t0 = base_now_ms();
    ds4_callbacks cb = { .cancel = gen_cancel, .ud = a };
    stop_kind stop = STOP_EOS;
    size_t count = 0;
    bool steered = false; /* the mask has overruled the model in this reply */
    for (;;) {
        if (agent_cancelled(a)) {
            stop = STOP_INTERRUPT;
            break;
        }
        if (count >= max_new) {
            stop = ctx_bound ? STOP_CTX : STOP_LIMIT;
            break;
        }
        const float *logits = ds4_session_logits(a->sess);
        if (!logits) {
            agent_set_error(a, "engine: no logits to sample from");
            stop = STOP_ERROR;
            break;
        }
        a->refused_best = -1;
        int32_t id = ds4_sample(a->sampler, logits, a->n_vocab, sample_hook, a);
        if (id < 0) {
            agent_set_error(a, "sampler: every token was masked");
            stop = STOP_ERROR;
            break;
        }
        if (a->refused_best >= 0 && !steered && refuse_name(a, a->refused_best)) {
            stop = STOP_DSML;
            break;
        }
        steered = steered || a->refused_best >= 0;
        if (id == a->t_eos || id == a->t_bos || id == a->t_user || id == a->t_assistant) {
            trace_line(a->tr, "token index=%zu id=%d end of reply", count + 1, id);
            stop = STOP_EOS;
            break;
        }
        ds4_tokens_push(&a->tx, id);
        size_t len;
        const char *b = ds4_token_bytes(a->tok, id, &len);
        if (!b) len = 0;
        sb_append(&a->reply, b ? b : "", len);
        trace_token(a->tr, "generated", count + 1, id, b, len);
        dsml_feed(a->parser, b ? b : "", len);
        agent_stream_flush(a, false);
        count++;
        double secs = (base_now_ms() - t0) / 1000.0;
        gen_upd u = { (int)count, secs > 0 ? count / secs : 0 };
        agent_status_update(a, set_generated, &u);
        dsml_state ds = dsml_get_state(a->parser);
        if (ds == DSML_DONE || ds == DSML_ERROR) {
            stop = STOP_DSML;
            break;
        }
        ds4_error err = { "" };
        ds4_status rc = ds4_session_eval(a->sess, id, &cb, &err);
        if (rc == DS4_INTERRUPTED) {
            stop = STOP_INTERRUPT;
            break;
        }
        if (rc == DS4_ERROR) {
            agent_set_error(a, "engine: %s", err.msg);
            stop = STOP_ERROR;
            break;
        }
    }
    if (stop != STOP_DSML) dsml_finish(a->parser);
    agent_stream_flush(a, true);
    double ms = base_now_ms() - t0;
    agent_status_update(a, add_decode, &ms);
    bool off = false;
    agent_status_update(a, set_greedy, &off);
    return stop;
}

/* ---- tools ------------------------------------------------------------------------ */

static bool tool_cancelled(void *ud) { return agent_cancelled(ud); }

static void tool_progress(void *ud, const char *text, size_t len)
{
    agent *a = ud;
    agent_publish(a, AGENT_EV_TOOL_PROGRESS, text, len, a->call_tool, NULL, NULL, false, a->call_index);
}

static void set_confirm(agent_status *st, void *ud) { st->confirm_pending = *(bool *)ud; }

/* The question waits for agent_confirm, an interrupt (no), or its
 * deadline (TOOL_CONFIRM_TIMEOUT): a front end that never answers cannot
 * hang the turn. */
static tool_confirm tool_ask(void *ud, const char *tool, const char *summary)
{
    agent *a = ud;
    int limit = agent_confirm_timeout_ms(&a->cfg);
    pthread_mutex_lock(&a->mu);
    a->confirm_waiting = true;
    a->confirm_answered = false;
    a->confirm_deadline = limit > 0 ? base_now_ms() + limit : 0;
    pthread_mutex_unlock(&a->mu);
    bool on = true;
    agent_status_update(a, set_confirm, &on);
    agent_publish(a, AGENT_EV_CONFIRM, summary, strlen(summary ? summary : ""), tool, NULL, NULL, false, a->call_index);
    trace_line(a->tr, "confirm tool=%s", tool);
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (limit > 0) {
        until.tv_sec += limit / 1000;
        until.tv_nsec += (long)(limit % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    bool timed_out = false;
    pthread_mutex_lock(&a->mu);
    while (!a->confirm_answered && !a->stop && !atomic_load(&a->interrupt) && !timed_out) {
        if (limit > 0) timed_out = pthread_cond_timedwait(&a->cv, &a->mu, &until) == ETIMEDOUT;
        else pthread_cond_wait(&a->cv, &a->mu);
    }
    tool_confirm answer = a->confirm_answered ? a->confirm_answer
                          : timed_out && !a->stop && !atomic_load(&a->interrupt) ? TOOL_CONFIRM_TIMEOUT
                                                                                  : TOOL_CONFIRM_NO;
    a->confirm_waiting = false;
    a->confirm_answered = false;
    a->confirm_deadline = 0;
    pthread_mutex_unlock(&a->mu);
    bool off = false;
    agent_status_update(a, set_confirm, &off);
    if (answer == TOOL_CONFIRM_TIMEOUT)
        agent_notice(a, "No answer to the permission question within %d s: %s was refused.", (limit + 999) / 1000,
                     summary ? summary : tool);
    trace_line(a->tr, "confirm answer=%d", (int)answer);
    return answer;
}

static void set_rounds(agent_status *st, void *ud) { st->tool_rounds = *(int *)ud; }

typedef struct {
    agent_tool_call *v;
    size_t n;
} call_log;

static void call_log_free(call_log *l)
{
    for (size_t i = 0; i < l->n; i++) free((char *)l->v[i].result);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

/* Runs the block's calls in order; the tool message goes into msg, the
 * calls and results into log (names and arguments point into the parser). */
static void run_calls(agent *a, strbuf *msg, call_log *log)
{
    size_t n = dsml_n_calls(a->parser);
    log->v = xcalloc(n ? n : 1, sizeof *log->v);
    for (size_t i = 0; i < n; i++) {
        const dsml_call *c = dsml_call_at(a->parser, i);
        tool_result res = { 0 };
        snprintf(a->call_tool, sizeof a->call_tool, "%s", c->name);
        a->call_index = (int)i;
        if (agent_cancelled(a)) {
            /* a turn also stops when the session cannot record it */
            res.text = strdup(a->persist_failed ? "Tool error: not run: the session could not be saved"
                                                : "Tool error: not run: the user interrupted");
            res.is_error = true;
        } else {
            agent_set_state(a, AGENT_TOOL);
            trace_line(a->tr, "tool call index=%zu name=%s args=%s", i, c->name, c->args_json);
            size_t used = a->tx.n + (size_t)msg->len / 3;
            size_t room = (size_t)a->n_ctx > used + agent_compact_reserve(a) + 64
                              ? (size_t)a->n_ctx - used - agent_compact_reserve(a) - 64 : 0;
            tool_call_ctx ctx = {
                .cancelled = tool_cancelled,
                .progress = tool_progress,
                .confirm = a->cfg.tools.interactive ? tool_ask : NULL,
                .ud = a,
                .max_result_bytes = room * 3 / (n - i) + 1,
            };
            double t0 = base_now_ms();
            if (a->cfg.custom_tools) {
                a->cfg.custom_tools->run(a->cfg.custom_tools->ud, c->name, c->args_json, &ctx, &res);
            } else if (a->env) {
                tools_run(a->env, c->name, c->args_json, &ctx, &res);
            } else {
                res.text = strdup("Tool error: the tools are not set up");
                res.is_error = true;
            }
            if (!res.text) {
                res.text = strdup("Tool error: the tool returned nothing");
                res.is_error = true;
            }
            if (a->tr) {
                strbuf esc = { 0 };
                trace_escape(&esc, res.text, strlen(res.text));
                trace_line(a->tr, "tool result index=%zu name=%s error=%d denied=%d bytes=%zu %.0f ms text=\"%s\"", i,
                           c->name, (int)res.is_error, (int)res.denied, strlen(res.text), base_now_ms() - t0, sb_str(&esc));
                sb_free(&esc);
            }
        }
        if (!res.text) abort();
        agent_publish_result(a, c->name, res.text, res.is_error, res.denied, (int)i);
        sb_printf(msg, "Tool result %zu (%s):\n%s\n", i + 1, c->name, res.text);
        log->v[log->n++] = (agent_tool_call){ .name = c->name, .args_json = c->args_json, .result = res.text,
                                              .is_error = res.is_error, .denied = res.denied };
    }
}

/* ---- the turn ----------------------------------------------------------------------- */

size_t agent_compact_reserve(const agent *a)
{
    return a->compact_reserve;
}

/* Appends the tool message, compacting first when it would not fit.
 * Returns false when not even a short error fits. */
static bool append_tool_message(agent *a, const char *text, const call_log *calls)
{
    ds4_tokens t = { 0 };
    ds4_chat_tool_result(a->tok, &t, text);
    size_t reserve = agent_compact_reserve(a);
    char *replaced = NULL;
    if (a->tx.n + t.n + reserve > (size_t)a->n_ctx) {
        /* Compaction frees at most the conversation: for a result that
         * would not fit even beside the system prompt alone it only costs
         * time. */
        if (a->sys_len + t.n + reserve + 64 <= (size_t)a->n_ctx) agent_compact(a, "tool result would exceed context");
        if (a->tx.n + t.n + reserve > (size_t)a->n_ctx) {
            strbuf b = { 0 };
            sb_printf(&b, "Tool error: the result (%zu tokens) does not fit the context (%d tokens, %zu used, "
                          "%zu kept free). Ask for less output: a smaller read range, a narrower search, "
                          "a command that prints less.",
                      t.n, a->n_ctx, a->tx.n, reserve);
            replaced = sb_take(&b);
            t.n = 0;
            ds4_chat_tool_result(a->tok, &t, replaced);
            agent_notice(a, "a tool result did not fit the context; the model was asked for less");
            if (a->tx.n + t.n + 16 > (size_t)a->n_ctx) {
                free(replaced);
                ds4_tokens_free(&t);
                return false;
            }
        }
    }
    size_t start = a->tx.n;
    ds4_tokens_append(&a->tx, t.ids, t.n);
    const char *logged = replaced ? replaced : text;
    turn_log_add_tool(a, start, logged, strlen(logged), calls->v, calls->n);
    free(replaced);
    ds4_tokens_free(&t);
    agent_update_ctx(a);
    return true;
}

bool agent_add_tool_results(agent *a, const char *text, agent_tool_call *calls, size_t n)
{
    call_log l = { calls, n };
    return append_tool_message(a, text, &l);
}

static void reset_turn_status(agent_status *st, void *ud)
{
    (void)ud;
    st->prefilled_turn = 0;
    st->tool_rounds = 0;
    st->generated = 0;
    st->gen_tps = 0;
}

static char *session_note(void)
{
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M %Z", &tm);
    strbuf b = { 0 };
    sb_printf(&b, "[Session started %s. Use the date only when it matters.]\n\n", when);
    return sb_take(&b);
}

const char *agent_run_turn(agent *a, const char *text)
{
    agent_status_update(a, reset_turn_status, NULL);
    if (a->tr) {
        strbuf esc = { 0 };
        trace_escape(&esc, text, strlen(text));
        trace_line(a->tr, "user=\"%s\"", sb_str(&esc));
        sb_free(&esc);
    }

    ds4_tokens user = { 0 };
    char *note = (!a->started_note && !a->cfg.no_date) ? session_note() : NULL;
    strbuf full = { 0 };
    if (note) sb_puts(&full, note);
    sb_puts(&full, text);
    free(note);
    ds4_chat_user(a->tok, &user, sb_str(&full));
    sb_free(&full);

    size_t reserve = agent_compact_reserve(a);
    if (agent_should_compact(a, a->tx.n + user.n)) {
        compact_result r = agent_compact(a, "soft limit before user turn");
        if (r == COMPACT_INTERRUPTED) {
            ds4_tokens_free(&user);
            return AGENT_END_INTERRUPTED;
        }
    }
    if (a->tx.n + user.n + reserve + 64 > (size_t)a->n_ctx) {
        agent_set_error(a, "the message (%zu tokens) does not fit the context (%d tokens, %zu in use)", user.n,
                        a->n_ctx, a->tx.n);
        ds4_tokens_free(&user);
        return AGENT_END_CONTEXT_FULL;
    }
    size_t start = a->tx.n;
    ds4_tokens_append(&a->tx, user.ids, user.n);
    ds4_tokens_free(&user);
    a->started_note = true;
    /* set only now: a compaction just before this turn carries the
     * previous request, and this one follows it verbatim anyway */
    free(a->last_user);
    a->last_user = xstrdup(text);
    turn_log_add(a, AGENT_TURN_USER, start, text, strlen(text));
    agent_publish(a, AGENT_EV_USER, text, strlen(text), NULL, NULL, NULL, false, 0);
    agent_update_ctx(a);

    int rounds = 0, malformed = 0, repeats = 0;
    sb_clear(&a->last_calls);
    for (;;) {
        if (rounds > 0 && agent_should_compact(a, a->tx.n)) {
            compact_result r = agent_compact(a, "soft limit before tool continuation");
            if (r == COMPACT_INTERRUPTED) return AGENT_END_INTERRUPTED;
        }
        size_t astart = a->tx.n;
        ds4_chat_assistant_prefix(a->tok, &a->tx, a->think);
        sync_result sr = agent_sync(a, a->tx.ids, a->tx.n, "prefill_suffix");
        if (sr == SYNC_ERROR) {
            ds4_tokens_truncate(&a->tx, astart);
            return AGENT_END_ERROR;
        }
        if (sr == SYNC_INTERRUPTED) {
            /* The turn stays in the transcript, closed; what the model did
             * not read yet is read with the next turn. */
            ds4_chat_assistant_end(a->tok, &a->tx);
            turn_log_add(a, AGENT_TURN_ASSISTANT, astart, "", 0);
            if (!a->persist_failed)
                agent_notice(a, "Model reading interrupted; it may only be aware of the part it read so far.");
            return AGENT_END_INTERRUPTED;
        }
        size_t room = (size_t)a->n_ctx > a->tx.n + reserve + 1 ? (size_t)a->n_ctx - a->tx.n - reserve - 1 : 0;
        size_t max_new = room;
        bool ctx_bound = true;
        if (a->cfg.max_tokens > 0 && (size_t)a->cfg.max_tokens < room) {
            max_new = (size_t)a->cfg.max_tokens;
            ctx_bound = false;
        }
        stop_kind stop = generate(a, max_new, ctx_bound);
        ds4_chat_assistant_end(a->tok, &a->tx);
        turn_log_add(a, AGENT_TURN_ASSISTANT, astart, a->reply.s ? a->reply.s : "", a->reply.len);
        agent_update_ctx(a);

        if (stop == STOP_ERROR) return AGENT_END_ERROR;
        if (stop == STOP_INTERRUPT) {
            if (!a->persist_failed) agent_notice(a, "Stopped by user.");
            return AGENT_END_INTERRUPTED;
        }
        strbuf msg = { 0 };
        call_log calls = { 0 };
        dsml_state ds = dsml_get_state(a->parser);
        if (ds == DSML_DONE && dsml_n_calls(a->parser) > 0) {
            malformed = 0;
            run_calls(a, &msg, &calls);
            /* The same calls round after round is a loop; say so. */
            strbuf sig = { 0 };
            for (size_t i = 0; i < calls.n; i++) sb_printf(&sig, "%s %s\n", calls.v[i].name, calls.v[i].args_json);
            repeats = a->last_calls.len && !strcmp(sb_str(&sig), sb_str(&a->last_calls)) ? repeats + 1 : 0;
            sb_free(&a->last_calls);
            a->last_calls = sig;
            if (repeats >= 2) {
                sb_printf(&msg, "Note: this is the %d%s time in a row you made exactly these calls; the results "
                                "will not change. Try something different, or answer with what you know.\n",
                          repeats + 1, repeats + 1 == 3 ? "rd" : "th");
                agent_notice(a, "the model repeated the same tool calls %d times in a row", repeats + 1);
            }
        } else if (ds == DSML_ERROR) {
            malformed++;
            const char *why = dsml_error(a->parser);
            agent_publish(a, AGENT_EV_NOTICE, why, strlen(why), NULL, NULL, NULL, true, 0);
            trace_line(a->tr, "malformed dsml in assistant output: %s", why);
            if (malformed >= AGENT_MAX_MALFORMED_IN_A_ROW) {
                agent_set_error(a, "the model wrote %d malformed tool calls in a row; the last: %s", malformed, why);
                return AGENT_END_MALFORMED;
            }
            sb_printf(&msg, "Tool error: invalid DSML tool call: %s\n\n%s\n", why, dsml_syntax_reminder());
        } else {
            if (stop == STOP_LIMIT) return AGENT_END_MAX_TOKENS;
            if (stop == STOP_CTX) {
                agent_set_error(a, "the context is full (%zu of %d tokens)", a->tx.n, a->n_ctx);
                return AGENT_END_CONTEXT_FULL;
            }
            return AGENT_END_DONE;
        }
        rounds++;
        agent_status_update(a, set_rounds, &rounds);
        bool fits = append_tool_message(a, sb_str(&msg), &calls);
        sb_free(&msg);
        call_log_free(&calls);
        if (!fits) {
            agent_set_error(a, "the context is full even after compaction");
            return AGENT_END_CONTEXT_FULL;
        }
        /* What the user typed meanwhile, read before the next round. */
        char *steer = agent_cancelled(a) ? NULL : agent_take_steer(a);
        if (steer) {
            size_t ustart = a->tx.n;
            ds4_tokens ut = { 0 };
            ds4_chat_user(a->tok, &ut, steer);
            if (a->tx.n + ut.n + reserve + 64 <= (size_t)a->n_ctx) {
                ds4_tokens_append(&a->tx, ut.ids, ut.n);
                turn_log_add(a, AGENT_TURN_USER, ustart, steer, strlen(steer));
                agent_publish(a, AGENT_EV_USER, steer, strlen(steer), NULL, NULL, NULL, false, 0);
                trace_line(a->tr, "queued user text read after the tool round (%zu bytes)", strlen(steer));
                free(a->last_user);
                a->last_user = steer;
                steer = NULL;
                agent_update_ctx(a);
            } else {
                /* no room now: it becomes the next turn */
                pthread_mutex_lock(&a->mu);
                strbuf keep = { 0 };
                sb_puts(&keep, steer);
                if (a->steer.len) {
                    sb_puts(&keep, "\n\n");
                    sb_append(&keep, a->steer.s, a->steer.len);
                }
                sb_free(&a->steer);
                a->steer = keep;
                pthread_mutex_unlock(&a->mu);
            }
            ds4_tokens_free(&ut);
            free(steer);
        }
        if (agent_cancelled(a)) {
            if (!a->persist_failed) agent_notice(a, "Stopped by user.");
            return AGENT_END_INTERRUPTED;
        }
        if ((size_t)rounds >= a->max_tool_rounds) {
            /* what lets it go on depends on who is there to do it */
            const char *pl = rounds == 1 ? "" : "s";
            if (a->cfg.tools.interactive)
                agent_notice(a, "Stopped after %d tool round%s (the limit, --max-tool-rounds); "
                                "send a message to let it continue.", rounds, pl);
            else
                agent_notice(a, "Stopped after %d tool round%s (the limit, --max-tool-rounds); resume the "
                                "session (--resume %s) with a new prompt to let it continue, or allow more rounds.",
                             rounds, pl, a->session_id ? a->session_id : "");
            return AGENT_END_MAX_TOOL_ROUNDS;
        }
    }
}
