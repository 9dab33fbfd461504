/* front.c — rank 0 of the layer split: greets the other ranks, chooses
 * the layer ranges, and hooks the engine's session members
 * (engine_hook_sessions) so that every session, evaluation, rewind, reset
 * and snapshot involves every rank (dmpi.h; dmpi_impl.h has the
 * messages). */
#include "mpi/dmpi_impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"

typedef struct {
    void *st; /* the engine's own state: layers of rank 0 */
    int sid;
} front_state;

static struct {
    bool planned, attached, stopped, broken;
    char why[768];                /* why the job cannot go on (broken) */
    const ds4_session_ops *base;  /* the engine's own members */
    fwd_engine *f;
    int n;                        /* ranks */
    int *bound;                   /* [n + 1]: rank k runs layers [bound[k], bound[k+1]) */
    size_t hc;                    /* bytes of one token's streams */
    int next_sid, cur_sid;
    dmpi_stats stats;
    char split[1024];
} g;

/* MPI runs here without thread support: one session member at a time,
 * whatever thread calls it (the next hook runs inside w_eval's hold). */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

/* ---- messages ----------------------------------------------------------------- */

/* The job cannot go on: every later evaluation fails at once with why. */
static int lost(ds4_error *err, const char *why)
{
    if (!g.broken) {
        g.broken = true;
        snprintf(g.why, sizeof g.why, "%s; the split job cannot go on (restart it; saved sessions are intact)", why);
    }
    return ds4_error_set(err, "%s", g.why);
}

static int send_cmd(int to, dmpi_cmd c, const void *data, ds4_error *err)
{
    ds4_error why = { "" };
    if (dmpi_send(to, DMPI_TAG_CMD, &c, sizeof c, &why) != 0 ||
        (c.bytes && dmpi_send(to, DMPI_TAG_DATA, data, c.bytes, &why) != 0))
        return lost(err, why.msg);
    return 0;
}

/* An answer from rank `from` (MPI_ANY_SOURCE: an evaluation, whose
 * pipeline may answer from any rank); its data, if any, into *data
 * (malloc'd). 0; -1 with err when the rank answered with an error; -2 when
 * it could not be heard (the job is then lost). */
static int wait_reply(int from, dmpi_reply *r, void **data, ds4_error *err)
{
    int src = 0, heard = from == MPI_ANY_SOURCE ? 1 : from;
    size_t n = 0;
    ds4_error why = { "" };
    if (data) *data = NULL;
    int rc = dmpi_probe(from, DMPI_TAG_REPLY, dmpi_timeout_s(), &src, &n, &heard, &why);
    if (rc == 1) {
        if (from == MPI_ANY_SOURCE)
            snprintf(why.msg, sizeof why.msg,
                     "rank %d stopped answering: nothing heard for %g s while it evaluated (it, or the rank it hands "
                     "over to, died or lost its link)", heard, dmpi_timeout_s());
        else
            snprintf(why.msg, sizeof why.msg, "rank %d stopped answering: nothing heard for %g s (it died or lost its link)",
                     from, dmpi_timeout_s());
    }
    if (rc == 0 && (n != sizeof *r || dmpi_recv(src, DMPI_TAG_REPLY, r, sizeof *r, &why) != 0)) {
        if (!why.msg[0]) snprintf(why.msg, sizeof why.msg, "rank %d answered in another protocol version", src);
        rc = -1;
    }
    if (rc == 0) r->msg[sizeof r->msg - 1] = 0;
    if (rc == 0 && r->bytes) {
        void *b = malloc(r->bytes);
        if (!b || dmpi_recv(src, DMPI_TAG_DATA, b, r->bytes, &why) != 0) {
            if (!b) snprintf(why.msg, sizeof why.msg, "out of memory for %llu bytes from rank %d", (unsigned long long)r->bytes, src);
            free(b);
            rc = -1;
        } else if (data) {
            *data = b;
        } else {
            free(b);
        }
    }
    if (rc != 0) {
        lost(err, why.msg);
        return -2;
    }
    if (r->rc != 0) {
        if (data) free(*data), *data = NULL;
        return ds4_error_set(err, "%s", r->msg[0] ? r->msg : "a rank failed");
    }
    return 0;
}

/* The same command to every other rank, then every answer. 0, or -1 with
 * err (the first rank's error). */
static int broadcast(dmpi_cmd c, ds4_error *err)
{
    if (g.broken) return ds4_error_set(err, "%s", g.why);
    for (int k = 1; k < g.n; k++)
        if (send_cmd(k, c, NULL, err) != 0) return -1;
    int rc = 0;
    for (int k = 1; k < g.n; k++) {
        dmpi_reply r;
        ds4_error e = { "" };
        int w = wait_reply(k, &r, NULL, &e);
        if (w == -2) return ds4_error_set(err, "%s", e.msg);
        if (w != 0 && rc == 0) rc = ds4_error_set(err, "%s", e.msg);
    }
    return rc;
}

/* ---- the engine's session members, on every rank ---------------------------- */

static void *w_state_new_(ds4_engine *e, int n_ctx, ds4_error *err)
{
    if (g.broken) {
        ds4_error_set(err, "%s", g.why);
        return NULL;
    }
    void *st = g.base->state_new(e, n_ctx, err);
    if (!st) return NULL;
    front_state *fs = xcalloc(1, sizeof *fs);
    fs->st = st;
    fs->sid = ++g.next_sid;
    if (broadcast((dmpi_cmd){ .op = DMPI_OPEN, .sid = fs->sid, .a = n_ctx }, err) != 0) {
        ds4_error keep = *err;
        if (!g.broken)
            for (int k = 1; k < g.n; k++) send_cmd(k, (dmpi_cmd){ .op = DMPI_CLOSE, .sid = fs->sid }, NULL, err);
        *err = keep;
        g.base->state_free(st);
        free(fs);
        return NULL;
    }
    return fs;
}

static void w_state_free_(void *p)
{
    front_state *fs = p;
    if (!fs) return;
    ds4_error err = { "" };
    for (int k = 1; k < g.n && !g.broken; k++) send_cmd(k, (dmpi_cmd){ .op = DMPI_CLOSE, .sid = fs->sid }, NULL, &err);
    g.base->state_free(fs->st);
    free(fs);
}

static long w_eval_(void *p, const int32_t *tokens, size_t pos, size_t n, float *logits, const ds4_callbacks *cb,
                   ds4_error *err)
{
    front_state *fs = p;
    if (g.broken) return ds4_error_set(err, "%s", g.why);
    g.cur_sid = fs->sid;
    return g.base->eval(fs->st, tokens, pos, n, logits, cb, err);
}

static int w_rewind_(void *p, size_t n)
{
    front_state *fs = p;
    ds4_error err = { "" };
    if (g.broken || g.base->rewind(fs->st, n) != 0) return -1;
    return broadcast((dmpi_cmd){ .op = DMPI_REWIND, .sid = fs->sid, .a = (int64_t)n }, &err);
}

static void w_reset_(void *p)
{
    front_state *fs = p;
    ds4_error err = { "" };
    g.base->reset(fs->st);
    if (!g.broken) broadcast((dmpi_cmd){ .op = DMPI_RESET, .sid = fs->sid }, &err);
}

static uint64_t w_kv_bytes(void *p) { return g.base->kv_bytes(((front_state *)p)->st); }

/* Rank 0's header and layers, then every rank's layers in rank order: the
 * canonical payload, layer by layer. */
static int w_save_(void *p, strbuf *out, ds4_error *err)
{
    front_state *fs = p;
    if (g.broken) return ds4_error_set(err, "%s", g.why);
    if (g.base->save(fs->st, out, err) != 0) return -1;
    for (int k = 1; k < g.n; k++) {
        if (send_cmd(k, (dmpi_cmd){ .op = DMPI_SAVE, .sid = fs->sid }, NULL, err) != 0) return -1;
        dmpi_reply r;
        void *blocks = NULL;
        if (wait_reply(k, &r, &blocks, err) != 0) return -1;
        sb_append(out, blocks, r.bytes);
        free(blocks);
    }
    return 0;
}

/* Rank 0 checks the whole payload and loads its layers; each rank gets the
 * blocks of its own. */
static int w_load_(void *p, const void *payload, size_t len, size_t n_tokens, ds4_error *err)
{
    front_state *fs = p;
    if (g.broken) return ds4_error_set(err, "%s", g.why);
    if (g.base->load(fs->st, payload, len, n_tokens, err) != 0) return -1;
    bool f16 = le_get_u32((const unsigned char *)payload + 8) != 0;
    for (int k = 1; k < g.n; k++) {
        uint64_t a = fwd_payload_offset(g.f, f16, (int64_t)n_tokens, g.bound[k]);
        uint64_t b = fwd_payload_offset(g.f, f16, (int64_t)n_tokens, g.bound[k + 1]);
        dmpi_cmd c = { .op = DMPI_LOAD, .sid = fs->sid, .a = (int64_t)n_tokens, .b = f16, .bytes = b - a };
        if (send_cmd(k, c, (const char *)payload + a, err) != 0) return -1;
        dmpi_reply r;
        if (wait_reply(k, &r, NULL, err) != 0) return -1;
    }
    return 0;
}

/* The members the engine calls, one at a time. */
static void *w_state_new(ds4_engine *e, int n_ctx, ds4_error *err)
{
    pthread_mutex_lock(&g_mu);
    void *rc = w_state_new_(e, n_ctx, err);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static void w_state_free(void *p)
{
    pthread_mutex_lock(&g_mu);
    w_state_free_(p);
    pthread_mutex_unlock(&g_mu);
}

static long w_eval(void *p, const int32_t *tokens, size_t pos, size_t n, float *logits, const ds4_callbacks *cb,
                   ds4_error *err)
{
    pthread_mutex_lock(&g_mu);
    long rc = w_eval_(p, tokens, pos, n, logits, cb, err);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static int w_rewind(void *p, size_t n)
{
    pthread_mutex_lock(&g_mu);
    int rc = w_rewind_(p, n);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static void w_reset(void *p)
{
    pthread_mutex_lock(&g_mu);
    w_reset_(p);
    pthread_mutex_unlock(&g_mu);
}

static int w_save(void *p, strbuf *out, ds4_error *err)
{
    pthread_mutex_lock(&g_mu);
    int rc = w_save_(p, out, err);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

static int w_load(void *p, const void *payload, size_t len, size_t n_tokens, ds4_error *err)
{
    pthread_mutex_lock(&g_mu);
    int rc = w_load_(p, payload, len, n_tokens, err);
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* After rank 0's layers: the chunk through every other rank, in order. */
static int next_stage(void *ud, void *st, const int32_t *tok, const float *S, int64_t pos0, int T, float *last,
                      ds4_error *err)
{
    (void)ud, (void)st;
    if (g.broken) return ds4_error_set(err, "%s", g.why);
    double t0 = base_now_ms();
    /* the streams, then the ids (hash-routed layers choose experts by them) */
    size_t sb = (size_t)T * g.hc, tb = (size_t)T * sizeof(int32_t);
    char *msg = malloc(sb + tb);
    if (!msg) return ds4_error_set(err, "out of memory for %d tokens' streams", T);
    memcpy(msg, S, sb);
    memcpy(msg + sb, tok, tb);
    dmpi_cmd c = { .op = DMPI_EVAL, .sid = g.cur_sid, .a = pos0, .b = T, .bytes = sb + tb };
    int rc = send_cmd(1, c, msg, err);
    free(msg);
    if (rc != 0) return -1;
    dmpi_reply r;
    void *out = NULL;
    if (wait_reply(MPI_ANY_SOURCE, &r, &out, err) != 0) return -1;
    if (r.bytes != g.hc) {
        free(out);
        return lost(err, "the last rank answered with streams of another size");
    }
    memcpy(last, out, g.hc);
    free(out);
    g.stats.chunks++;
    g.stats.tokens += (uint64_t)T;
    g.stats.hops += (uint64_t)g.n;
    g.stats.bytes += (uint64_t)(g.n - 1) * (sb + tb) + g.hc;
    g.stats.ms += base_now_ms() - t0;
    return 0;
}

/* ---- attach -------------------------------------------------------------------- */

static uint64_t own_memory(const ds4_engine *e)
{
    ds4_device *d = NULL;
    int n = 0, sel = -1;
    uint64_t mem = 0;
    if (ds4_backend_devices(e->opt.backend, e->opt.device, &d, &n, &sel, NULL) == 0 && sel >= 0) mem = d[sel].memory;
    free(d);
    return mem;
}

/* Greets every rank; their device memory into mem[], and their refusals
 * into err. */
static int greet(const ds4_engine *e, double *mem, char (*desc)[768], ds4_error *err)
{
    dmpi_hello *h = xcalloc(1, sizeof *h);
    snprintf(h->build, sizeof h->build, "%s", DMPI_BUILD);
    snprintf(h->model, sizeof h->model, "%s", e->model_path);
    snprintf(h->device, sizeof h->device, "%s", e->opt.device ? e->opt.device : "");
    h->identity = e->identity;
    h->backend = (int32_t)e->opt.backend;
    h->quant_sim = (int32_t)e->opt.quant_sim;
    h->threads = e->opt.threads;
    h->chunk = fwd_chunk(g.f);
    int rc = 0;
    for (int k = 1; k < g.n && rc == 0; k++)
        rc = send_cmd(k, (dmpi_cmd){ .op = DMPI_HELLO, .bytes = sizeof *h }, h, err);
    free(h);
    strbuf why = { 0 };
    for (int k = 1; k < g.n && rc == 0; k++) {
        dmpi_reply r;
        ds4_error e1 = { "" };
        int w = wait_reply(k, &r, NULL, &e1);
        if (w == -2) rc = ds4_error_set(err, "%s", e1.msg);
        else if (w != 0) sb_printf(&why, "%s%s", why.len ? "; " : "", e1.msg);
        else {
            mem[k] = (double)r.value;
            snprintf(desc[k], sizeof desc[k], "%s", r.msg);
        }
    }
    if (rc == 0 && why.len) rc = ds4_error_set(err, "%s", sb_str(&why));
    sb_free(&why);
    return rc;
}

static int choose_ranges(const ds4_engine *e, double *mem, ds4_error *err)
{
    const char *env = getenv("DS4CL_MPI_SPLIT");
    double *w = xcalloc((size_t)g.n, sizeof *w);
    int rc = 0;
    if (env && *env) {
        char what[160];
        snprintf(what, sizeof what, "DS4CL_MPI_SPLIT=%s", env);
        rc = ds4_parse_shares(env, g.n, w, what, "rank", err);
    } else {
        /* by memory; a rank that cannot say gets an even share */
        double known = 0;
        int n_known = 0;
        for (int k = 0; k < g.n; k++)
            if (mem[k] > 0) known += mem[k], n_known++;
        for (int k = 0; k < g.n; k++) w[k] = mem[k] > 0 ? mem[k] : n_known ? known / n_known : 1.0;
    }
    if (rc == 0) rc = ds4_split_layers(e->model->hp.n_layer, g.n, w, "rank", g.bound, err);
    free(w);
    return rc;
}

/* Greets the ranks, chooses the ranges and sends every rank > 0 its own
 * (it then opens the model for those layers). The split's description
 * goes to g.split. */
static int assign_ranges(const ds4_engine *e, ds4_error *err)
{
    g.f = fwd_of(e);
    if (!g.f || !e->model) return ds4_error_set(err, "the layer split needs a backend with the layered forward pass");
    g.n = dmpi_size();
    g.hc = (size_t)e->model->hp.hc_dim * sizeof(float);
    g.bound = xcalloc((size_t)g.n + 1, sizeof *g.bound);
    double *mem = xcalloc((size_t)g.n, sizeof *mem);
    char(*desc)[768] = xcalloc((size_t)g.n, sizeof *desc);
    mem[0] = (double)own_memory(e);
    int rc = greet(e, mem, desc, err);
    if (rc == 0) rc = choose_ranges(e, mem, err);
    for (int k = 1; k < g.n && rc == 0; k++) {
        if (send_cmd(k, (dmpi_cmd){ .op = DMPI_RANGE, .a = g.bound[k], .b = g.bound[k + 1] }, NULL, err) != 0) rc = -1;
        dmpi_reply r;
        if (rc == 0 && wait_reply(k, &r, NULL, err) != 0) rc = -1;
    }
    if (rc == 0) {
        int at = snprintf(g.split, sizeof g.split, "layers %d-%d on rank 0 (%s)", 0, g.bound[1] - 1, dmpi_host());
        for (int k = 1; k < g.n && at < (int)sizeof g.split; k++)
            at += snprintf(g.split + at, sizeof g.split - (size_t)at, ", %d-%d on %s", g.bound[k], g.bound[k + 1] - 1,
                           desc[k]);
        g.planned = true;
    }
    free(mem);
    free(desc);
    return rc;
}

int dmpi_plan(const ds4_engine *e, int *layer_end, ds4_error *err)
{
    *layer_end = 0;
    if (!dmpi_started() || dmpi_size() < 2) return 0;
    if (g.planned) return ds4_error_set(err, "an MPI job splits one model only");
    if (assign_ranges(e, err)) return -1;
    g.f = NULL; /* e was for planning; dmpi_attach takes the engine that runs */
    *layer_end = g.bound[1];
    return 0;
}

int dmpi_attach(ds4_engine *e, ds4_error *err)
{
    if (!dmpi_started() || dmpi_size() < 2) return 0;
    if (g.attached) return ds4_error_set(err, "an MPI job splits one model only");
    if (!g.planned && assign_ranges(e, err)) return -1;
    g.f = fwd_of(e);
    if (!g.f || !e->model) return ds4_error_set(err, "the layer split needs a backend with the layered forward pass");
    int rc = fwd_set_layers(g.f, 0, g.bound[1], err);
    if (rc == 0) {
        fwd_set_next(g.f, next_stage, NULL);
        static const ds4_session_ops hook = { .state_new = w_state_new, .state_free = w_state_free, .eval = w_eval,
                                              .rewind = w_rewind, .reset = w_reset, .kv_bytes = w_kv_bytes,
                                              .save = w_save, .load = w_load };
        rc = engine_hook_sessions(e, &hook, &g.base, err);
    }
    if (rc == 0) {
        g.attached = true;
        g.stats.ranks = g.n;
    }
    return rc;
}

void dmpi_stop(void)
{
    if (!dmpi_started() || g.stopped || dmpi_rank() != 0) return;
    g.stopped = true;
    ds4_error err = { "" };
    for (int k = 1; k < dmpi_size() && !g.broken; k++) send_cmd(k, (dmpi_cmd){ .op = DMPI_QUIT }, NULL, &err);
    /* a lost rank would hold MPI_Finalize forever: the launcher ends
     * the job instead */
    if (!g.broken) MPI_Finalize();
}

void dmpi_get_stats(dmpi_stats *out)
{
    *out = g.stats;
    out->ranks = g.attached ? g.n : 1;
}

const char *dmpi_split_text(void) { return g.split; }
