/* batch.c — the step combiner: the slots' decode tokens as shared engine
 * steps (ds4_sessions_eval), and the engine's turns between those steps
 * and the slots' prefill pieces.
 *
 * Policy. The engine runs one thing at a time: a decode step or a prefill
 * piece (the worker reads a prompt in pieces of SV_PREFILL_PIECE tokens,
 * each in a turn of its own). A slot that wants to decode a token queues
 * (session, token) and waits. A step goes once every decoding slot (one
 * between sv_batch_join and sv_batch_part) has queued its token: between
 * two steps a slot only samples, so waiting for it costs little, and going
 * without it would leave it to a step of its own, the slots taking turns
 * instead of sharing steps. The waiting slot that finds the engine free
 * then takes every queued token and runs them as one step, then hands each
 * owner its status (an error of the step is every member's error: the
 * engine may have reset them all, and a later sync recomputes them). A
 * slot whose job ends stops queueing; a slot whose prompt is read joins
 * the next step. When decode tokens and prefill pieces both wait, they
 * take turns: after a step, a waiting piece goes first; after a piece, the
 * queued tokens go first. So a long prompt delays the decoding slots by
 * one piece at most per token, and decoding slots cannot starve it.
 *
 * A step is interrupted only by the server stopping: a job cancelled by
 * its client (it left) just stops queueing, and the step it is in
 * finishes for the others.
 *
 * Turned off (--no-batch), each slot calls ds4_session_eval itself and
 * reads its prompt in one sync, the engine's own lock ordering them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

/* One queued decode token. */
typedef struct req {
    ds4_session *sess;
    int32_t id;
    ds4_status rc;
    ds4_error err;
    int members;      /* of the step it was in */
    bool done;
    struct req *next;
} req;

struct sv_batch {
    bool on;
    atomic_bool *stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool busy;              /* a step or a piece has the engine */
    bool piece_first;       /* the last turn was a step: a waiting piece goes next */
    int pieces_waiting;
    int decoding;           /* slots between sv_batch_join and sv_batch_part */
    req *head, **tail;
    int n_queued;
    uint64_t steps, shared_steps;
};

sv_batch *sv_batch_new(bool on, atomic_bool *stop)
{
    sv_batch *b = xcalloc(1, sizeof *b);
    b->on = on;
    b->stop = stop;
    b->tail = &b->head;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

void sv_batch_free(sv_batch *b)
{
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

bool sv_batch_on(const sv_batch *b) { return b->on; }

static bool server_stopping(void *ud)
{
    return atomic_load((atomic_bool *)ud);
}

/* Runs the queued tokens as one step (called with mu held, the engine
 * taken; returns with mu held). A member whose context is full fails on
 * its own: in the step it would fail every member. */
static void run_step(sv_batch *b)
{
    req *list = b->head;
    b->head = NULL;
    b->tail = &b->head;
    b->n_queued = 0;
    pthread_mutex_unlock(&b->mu);
    int n = 0, cap = 0;
    ds4_session **ss = NULL;
    int32_t *ids = NULL;
    for (req *r = list; r; r = r->next) {
        if (ds4_session_n_tokens(r->sess) + 1 > (size_t)ds4_session_n_ctx(r->sess)) {
            r->rc = DS4_ERROR;
            ds4_error_set(&r->err, "the context of %d tokens is full", ds4_session_n_ctx(r->sess));
            r->members = 1;
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            ss = xrealloc(ss, (size_t)cap * sizeof *ss);
            ids = xrealloc(ids, (size_t)cap * sizeof *ids);
        }
        ss[n] = r->sess;
        ids[n++] = r->id;
        r->rc = DS4_OK;
    }
    ds4_error err = { "" };
    ds4_callbacks cb = { .cancel = server_stopping, .ud = b->stop };
    ds4_status rc = n ? ds4_sessions_eval(ss, ids, n, &cb, &err) : DS4_OK;
    free(ss);
    free(ids);
    pthread_mutex_lock(&b->mu);
    for (req *r = list; r; r = r->next) {
        if (r->rc == DS4_OK) {
            r->rc = rc;
            r->err = err;
            r->members = n;
        }
        r->done = true;
    }
    if (n) b->steps++;
    if (n > 1) b->shared_steps++;
}

/* Whether the engine may go to a step now (mu held). */
static bool step_may_go(const sv_batch *b)
{
    return !b->busy && b->n_queued >= b->decoding && !(b->piece_first && b->pieces_waiting > 0);
}

void sv_batch_join(sv_batch *b)
{
    if (!b->on) return;
    pthread_mutex_lock(&b->mu);
    b->decoding++;
    pthread_mutex_unlock(&b->mu);
}

void sv_batch_part(sv_batch *b)
{
    if (!b->on) return;
    pthread_mutex_lock(&b->mu);
    b->decoding--;
    /* the step may have been waiting for this slot's token */
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

ds4_status sv_batch_eval(sv_batch *b, ds4_session *s, int32_t id, int *members, ds4_error *err)
{
    if (!b->on) {
        if (members) *members = 1;
        ds4_status rc = ds4_session_eval(s, id, &(ds4_callbacks){ .cancel = server_stopping, .ud = b->stop }, err);
        pthread_mutex_lock(&b->mu);
        b->steps++;
        pthread_mutex_unlock(&b->mu);
        return rc;
    }
    req r = { .sess = s, .id = id };
    pthread_mutex_lock(&b->mu);
    *b->tail = &r;
    b->tail = &r.next;
    b->n_queued++;
    while (!r.done) {
        if (step_may_go(b) && b->head) {
            b->busy = true;
            run_step(b);
            b->busy = false;
            b->piece_first = true;
            pthread_cond_broadcast(&b->cv);
        } else {
            pthread_cond_wait(&b->cv, &b->mu);
        }
    }
    pthread_mutex_unlock(&b->mu);
    if (members) *members = r.members;
    if (r.rc == DS4_ERROR && err) *err = r.err;
    return r.rc;
}

void sv_batch_enter(sv_batch *b)
{
    if (!b->on) return;
    pthread_mutex_lock(&b->mu);
    b->pieces_waiting++;
    while (b->busy || (b->head && !b->piece_first)) pthread_cond_wait(&b->cv, &b->mu);
    b->pieces_waiting--;
    b->busy = true;
    b->piece_first = false;
    pthread_mutex_unlock(&b->mu);
}

void sv_batch_leave(sv_batch *b)
{
    if (!b->on) return;
    pthread_mutex_lock(&b->mu);
    b->busy = false;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

size_t sv_batch_piece(const sv_batch *b)
{
    return b->on ? SV_PREFILL_PIECE : 0;
}

void sv_batch_counts(sv_batch *b, uint64_t *steps, uint64_t *shared)
{
    pthread_mutex_lock(&b->mu);
    *steps = b->steps;
    *shared = b->shared_steps;
    pthread_mutex_unlock(&b->mu);
}
