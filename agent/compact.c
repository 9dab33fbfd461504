/* compact.c — context compaction: the model writes a durable task-state
 * summary (greedy, thinking off, never a tool call), the transcript is
 * rebuilt from a fresh system prompt (AGENTS.md re-read from disk), the
 * summary, the user's latest request verbatim and a verbatim tail that
 * starts at a user turn. The state before is kept for /uncompact, and a
 * compaction that fails or is interrupted leaves the conversation as it
 * was. */
#include "agent/agent_impl.h"

#include <stdlib.h>
#include <string.h>

#define TAIL_MAX 50000
#define SNAPSHOT_KEEP_MAX (512ull << 20)

/* Thresholds apply to the context minus what compaction itself needs, so
 * the soft limit always comes before the hard one. */
bool agent_should_compact(const agent *a, size_t used)
{
    size_t reserve = agent_compact_reserve(a);
    size_t usable = (size_t)a->n_ctx > reserve ? (size_t)a->n_ctx - reserve : 0;
    if (used >= usable) return true;
    size_t free_min = usable / 4 < 8192 ? usable / 4 : 8192;
    return used * 100 >= usable * 85 || usable - used <= free_min;
}

void saved_state_free(saved_state *s)
{
    ds4_tokens_free(&s->tx);
    turn_log_clear(s->turns, &s->n_turns);
    free(s->turns);
    free(s->snap);
    memset(s, 0, sizeof *s);
}

static void copy_turns(turn_rec **dst, size_t *n, const turn_rec *src, size_t count)
{
    *dst = xcalloc(count ? count : 1, sizeof **dst);
    for (size_t i = 0; i < count; i++) {
        (*dst)[i] = src[i];
        (*dst)[i].text = xstrdup(src[i].text);
    }
    *n = count;
}

/* Puts a saved conversation back as the live one (the session follows
 * with the next sync). */
static void restore_from(agent *a, saved_state *s)
{
    a->tx.n = 0;
    ds4_tokens_append(&a->tx, s->tx.ids, s->tx.n);
    a->sys_len = s->sys_len;
    turn_log_clear(a->turns, &a->n_turns);
    free(a->turns);
    copy_turns(&a->turns, &a->n_turns, s->turns, s->n_turns);
    a->cap_turns = a->n_turns ? a->n_turns : 1;
}

static void set_compacted(agent_status *st, void *ud)
{
    st->compactions++;
    st->can_uncompact = *(bool *)ud;
}

static void set_can_uncompact(agent_status *st, void *ud) { st->can_uncompact = *(bool *)ud; }

static bool summary_cancel(void *ud) { return agent_cancelled(ud); }

static void force_greedy(void *ud, float *logits, int n_vocab, bool *greedy)
{
    (void)ud;
    (void)logits;
    (void)n_vocab;
    *greedy = true;
}

/* Samples the summary after the private prompt now in the session. */
static int write_summary(agent *a, size_t max_tokens, strbuf *out, bool *interrupted)
{
    ds4_callbacks cb = { .cancel = summary_cancel, .ud = a };
    for (size_t i = 0; i < max_tokens; i++) {
        if (agent_cancelled(a)) {
            *interrupted = true;
            return -1;
        }
        const float *logits = ds4_session_logits(a->sess);
        if (!logits) return -1;
        int32_t id = ds4_sample(a->sampler, logits, a->n_vocab, force_greedy, NULL);
        if (id < 0 || id == a->t_eos || id == a->t_bos || id == a->t_user || id == a->t_assistant ||
            id == a->t_think || id == a->t_think_end || id == a->t_dsml) {
            if (id == a->t_dsml) {
                trace_line(a->tr, "compaction summary stopped before control token id=%d", id);
                /* the "<" that opened the marker is not summary */
                if (out->len && out->s[out->len - 1] == '<') out->s[--out->len] = 0;
            }
            break;
        }
        size_t len;
        const char *b = ds4_token_bytes(a->tok, id, &len);
        if (b) sb_append(out, b, len);
        ds4_error err = { "" };
        ds4_status rc = ds4_session_eval(a->sess, id, &cb, &err);
        if (rc == DS4_INTERRUPTED) {
            *interrupted = true;
            return -1;
        }
        if (rc == DS4_ERROR) {
            agent_set_error(a, "engine: %s", err.msg);
            return -1;
        }
    }
    return 0;
}

static void trim(strbuf *b)
{
    size_t s = 0, e = b->len;
    while (s < e && (b->s[s] == ' ' || b->s[s] == '\n' || b->s[s] == '\r' || b->s[s] == '\t')) s++;
    while (e > s && (b->s[e - 1] == ' ' || b->s[e - 1] == '\n' || b->s[e - 1] == '\r' || b->s[e - 1] == '\t')) e--;
    if (!b->s) return;
    memmove(b->s, b->s + s, e - s);
    b->len = e - s;
    b->s[b->len] = 0;
}

/* Index of the first user turn starting at or after `from` (in the turn
 * log), or n_turns. */
static size_t first_user_turn_from(const agent *a, size_t from)
{
    for (size_t i = 0; i < a->n_turns; i++)
        if (a->turns[i].kind == AGENT_TURN_USER && a->turns[i].start >= from) return i;
    return a->n_turns;
}

compact_result agent_compact(agent *a, const char *reason)
{
    bool has_turn = false;
    for (size_t i = 0; i < a->n_turns && !has_turn; i++) has_turn = a->turns[i].kind != AGENT_TURN_REBUILD;
    if (a->tx.n <= a->sys_len || !has_turn) return COMPACT_NOTHING;
    agent_set_state(a, AGENT_COMPACTING);
    agent_notice(a, "Compacting (%s): summarizing the task state.", reason);
    trace_line(a->tr, "compaction start reason=\"%s\" transcript=%zu", reason, a->tx.n);

    /* What /uncompact (and a failure) goes back to. */
    saved_state before = { 0 };
    before.valid = true;
    ds4_tokens_append(&before.tx, a->tx.ids, a->tx.n);
    before.sys_len = a->sys_len;
    copy_turns(&before.turns, &before.n_turns, a->turns, a->n_turns);
    if (ds4_session_kv_bytes(a->sess) <= SNAPSHOT_KEEP_MAX && ds4_session_n_tokens(a->sess) > 0) {
        ds4_error err;
        if (ds4_session_snapshot(a->sess, &before.snap, &before.snap_len, &err) != 0) before.snap = NULL;
    }
    size_t bottom = a->tx.n;

    /* The private request: never part of the transcript. */
    ds4_tokens priv = { 0 };
    ds4_tokens_append(&priv, a->tx.ids, a->tx.n);
    char *req = agent_compact_request(reason);
    ds4_chat_user(a->tok, &priv, req);
    free(req);
    ds4_chat_assistant_prefix(a->tok, &priv, DS4_THINK_NONE);
    compact_result result = COMPACT_FAILED;
    strbuf summary = { 0 };
    ds4_tokens ntx = { 0 };
    if (priv.n + 64 >= (size_t)a->n_ctx) {
        agent_set_error(a, "not enough context left to request a compaction summary");
        goto out;
    }
    size_t budget = a->summary_budget;
    if (budget > (size_t)a->n_ctx - priv.n - 1) budget = (size_t)a->n_ctx - priv.n - 1;
    sync_result sr = agent_sync(a, priv.ids, priv.n, "compaction_prompt");
    if (sr != SYNC_OK) {
        result = sr == SYNC_INTERRUPTED ? COMPACT_INTERRUPTED : COMPACT_FAILED;
        goto out;
    }
    agent_set_state(a, AGENT_COMPACTING);
    bool interrupted = false;
    if (write_summary(a, budget, &summary, &interrupted) != 0) {
        result = interrupted ? COMPACT_INTERRUPTED : COMPACT_FAILED;
        goto out;
    }
    trim(&summary);
    if (summary.len == 0) {
        agent_set_error(a, "compaction failed: the model wrote an empty summary");
        goto out;
    }

    /* The verbatim tail: the recent turns, from a user turn on; never more
     * than half of the conversation, or compacting would not shrink it. */
    size_t tail_budget = (size_t)a->n_ctx / 10 < TAIL_MAX ? (size_t)a->n_ctx / 10 : TAIL_MAX;
    size_t half = (bottom - a->sys_len) / 2;
    if (tail_budget > half) tail_budget = half;
    size_t from = bottom - tail_budget;
    size_t ti = first_user_turn_from(a, from);
    size_t tail_start = ti < a->n_turns ? a->turns[ti].start : bottom;
    bool latest_in_tail = false;
    for (size_t i = ti; i < a->n_turns; i++)
        if (a->turns[i].kind == AGENT_TURN_USER && a->last_user && !strcmp(a->turns[i].text, a->last_user))
            latest_in_tail = true;

    agent_render_system(a, &ntx);
    size_t new_sys = ntx.n;
    strbuf note = { 0 };
    sb_puts(&note, "[Note from the agent, not from the user: the earlier conversation was compacted to free "
                   "context. Durable task-state summary:]\n");
    sb_append(&note, summary.s, summary.len);
    sb_puts(&note, "\n[End of summary.]");
    if (a->last_user && !latest_in_tail) {
        sb_puts(&note, "\n[The user's latest request, verbatim:]\n");
        sb_puts(&note, a->last_user);
    }
    /* Background jobs outlive the conversation they were started in. */
    char *jobs = a->env ? tools_jobs_report(a->env) : NULL;
    if (jobs) {
        sb_puts(&note, "\n[Background bash jobs now (see them with bash_status, end them with bash_stop):]\n");
        sb_puts(&note, jobs);
        free(jobs);
    }
    if (tail_start < bottom) sb_puts(&note, "\n[The recent conversation follows verbatim.]");
    size_t note_start = ntx.n;
    ds4_chat_user(a->tok, &ntx, sb_str(&note));
    size_t shift_to = ntx.n;
    ds4_tokens_append(&ntx, a->tx.ids + tail_start, bottom - tail_start);

    /* Swap in the new transcript, keeping the turn log aligned. */
    turn_rec *nturns = NULL;
    size_t nn = 0, ncap = a->n_turns + 2;
    nturns = xcalloc(ncap, sizeof *nturns);
    nturns[nn].kind = AGENT_TURN_REBUILD;
    nturns[nn].start = note_start;
    nturns[nn].end = shift_to;
    nturns[nn].text = sb_take(&note);
    nn++;
    for (size_t i = ti; i < a->n_turns; i++) {
        nturns[nn] = a->turns[i];
        nturns[nn].start = a->turns[i].start - tail_start + shift_to;
        nturns[nn].end = a->turns[i].end - tail_start + shift_to;
        nturns[nn].text = xstrdup(a->turns[i].text);
        nn++;
    }
    sb_free(&note);
    size_t old_n = a->tx.n;
    a->tx.n = 0;
    ds4_tokens_append(&a->tx, ntx.ids, ntx.n);
    a->sys_len = new_sys;
    turn_log_clear(a->turns, &a->n_turns);
    free(a->turns);
    a->turns = nturns;
    a->n_turns = nn;
    a->cap_turns = ncap;

    sr = agent_sync(a, a->tx.ids, a->tx.n, "compaction_rebuild");
    if (sr != SYNC_OK) {
        restore_from(a, &before);
        result = sr == SYNC_INTERRUPTED ? COMPACT_INTERRUPTED : COMPACT_FAILED;
        goto out;
    }
    saved_state_free(&a->saved);
    a->saved = before;
    a->saved.mark = a->tx.n;
    memset(&before, 0, sizeof before);
    bool can = true;
    agent_status_update(a, set_compacted, &can);
    agent_publish(a, AGENT_EV_COMPACTION, summary.s, summary.len, NULL, NULL, NULL, false, 0);
    agent_notice(a, "Compacted: %zu tokens became %zu (summary and %zu tokens of recent conversation).", old_n,
                 a->tx.n, bottom - tail_start);
    trace_line(a->tr, "compacted reason=\"%s\" old=%zu new=%zu tail_start=%zu tail=%zu", reason, old_n, a->tx.n,
               tail_start, bottom - tail_start);
    turn_log_rebuild(a, summary.s, summary.len);
    result = COMPACT_OK;

out:
    /* The session read the private request (and maybe part of a new
     * transcript): put back the state of the conversation kept, so the
     * next turn does not read it all again (an engine rewinds only a
     * little way). */
    if (result != COMPACT_OK && before.snap) {
        size_t have = ds4_session_n_tokens(a->sess);
        const int32_t *cur = ds4_session_tokens(a->sess);
        bool same = have == a->tx.n && (have == 0 || !memcmp(cur, a->tx.ids, have * sizeof *cur));
        ds4_error err = { "" };
        if (!same && ds4_session_restore(a->sess, before.snap, before.snap_len, &err) != 0)
            trace_line(a->tr, "compaction: the saved state did not load (%s); reading again", err.msg);
    }
    if (result == COMPACT_INTERRUPTED) {
        agent_notice(a, "Compaction interrupted; keeping the previous conversation.");
    } else if (result == COMPACT_FAILED) {
        pthread_mutex_lock(&a->mu);
        bool has_error = a->st.error[0] != 0;
        pthread_mutex_unlock(&a->mu);
        if (!has_error) agent_set_error(a, "compaction failed");
    }
    agent_update_ctx(a);
    saved_state_free(&before);
    ds4_tokens_free(&priv);
    ds4_tokens_free(&ntx);
    sb_free(&summary);
    return result;
}

int agent_uncompact(agent *a)
{
    if (!a->saved.valid) return -1;
    /* What was said since the compaction follows the restored
     * conversation, when both fit. */
    size_t mark = a->saved.mark <= a->tx.n ? a->saved.mark : a->tx.n;
    size_t since = a->tx.n - mark;
    if (a->saved.tx.n + since + agent_compact_reserve(a) + 64 > (size_t)a->n_ctx) {
        agent_notice(a, "Cannot undo the compaction: the conversation from before it (%zu tokens) and what "
                        "came since (%zu tokens) do not fit the context of %d tokens.",
                     a->saved.tx.n, since, a->n_ctx);
        return 1;
    }
    saved_state s = a->saved;
    memset(&a->saved, 0, sizeof a->saved);
    ds4_tokens later = { 0 };
    ds4_tokens_append(&later, a->tx.ids + mark, since);
    size_t nlater = 0;
    turn_rec *lturns = xcalloc(a->n_turns ? a->n_turns : 1, sizeof *lturns);
    for (size_t i = 0; i < a->n_turns; i++) {
        if (a->turns[i].start < mark) continue;
        lturns[nlater] = a->turns[i];
        lturns[nlater].start = a->turns[i].start - mark + s.tx.n;
        lturns[nlater].end = a->turns[i].end - mark + s.tx.n;
        lturns[nlater].text = xstrdup(a->turns[i].text);
        nlater++;
    }
    restore_from(a, &s);
    ds4_tokens_append(&a->tx, later.ids, later.n);
    if (a->n_turns + nlater > a->cap_turns) {
        a->cap_turns = a->n_turns + nlater;
        a->turns = xrealloc(a->turns, a->cap_turns * sizeof *a->turns);
    }
    memcpy(a->turns + a->n_turns, lturns, nlater * sizeof *lturns);
    a->n_turns += nlater;
    free(lturns);
    ds4_tokens_free(&later);
    if (s.snap) {
        ds4_error err;
        if (ds4_session_restore(a->sess, s.snap, s.snap_len, &err) != 0)
            trace_line(a->tr, "uncompact: snapshot not usable (%s); reading again", err.msg);
    }
    agent_sync(a, a->tx.ids, a->tx.n, "uncompact");
    turn_log_rebuild(a, "", 0);
    bool can = false;
    agent_status_update(a, set_can_uncompact, &can);
    if (since)
        agent_notice(a, "Restored the conversation from before the last compaction, followed by what came since "
                        "(%zu tokens).", a->tx.n);
    else
        agent_notice(a, "Restored the conversation from before the last compaction (%zu tokens).", a->tx.n);
    agent_update_ctx(a);
    saved_state_free(&s);
    return 0;
}
