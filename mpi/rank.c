/* rank.c — a rank > 0 of the layer split: opens the model rank 0 names,
 * runs its layer range for every session rank 0 opens, and answers rank
 * 0's commands until it says quit (dmpi_impl.h has the messages). */
#include "mpi/dmpi_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"
#include "engine/forward.h"

typedef struct {
    int sid;
    void *st;
} srv_session;

typedef struct {
    ds4_engine *e;
    fwd_engine *f;
    dmpi_hello h;       /* rank 0's greeting: how to open the model */
    char path[4096];    /* the model file here */
    int l0, l1;
    size_t hc; /* bytes of one token's streams */
    srv_session *ss;
    int n_ss;
} server;

static int reply(int32_t rc, int64_t value, const void *data, size_t bytes, const char *msg)
{
    dmpi_reply r;
    memset(&r, 0, sizeof r);
    r.rc = rc;
    r.rank = dmpi_rank();
    r.value = value;
    r.bytes = bytes;
    if (msg) snprintf(r.msg, sizeof r.msg, "rank %d (%s): %s", dmpi_rank(), dmpi_host(), msg);
    ds4_error err = { "" };
    if (dmpi_send(0, DMPI_TAG_REPLY, &r, sizeof r, &err) != 0) return -1;
    if (bytes && dmpi_send(0, DMPI_TAG_DATA, data, bytes, &err) != 0) return -1;
    return 0;
}

static int fail(const char *msg) { return reply(-1, 0, NULL, 0, msg); }

static void load_beat(void *ud, double fraction, const char *what)
{
    (void)ud, (void)fraction, (void)what;
    dmpi_beat(false);
}

static bool beat_cancel(void *ud)
{
    (void)ud;
    dmpi_beat(false);
    return false;
}

static int hello(server *s, const dmpi_hello *h)
{
    char why[1024];
    if (strncmp(h->build, DMPI_BUILD, sizeof h->build) != 0) {
        snprintf(why, sizeof why, "refusing to start: this build is %s, rank 0's is %.64s", DMPI_BUILD, h->build);
        return fail(why);
    }
    const char *path = getenv("DS4CL_MPI_MODEL");
    if (!path || !*path) path = h->model;
    s->h = *h;
    snprintf(s->path, sizeof s->path, "%s", path);
    /* Opened to plan only until rank 0 names this rank's layers: a device
     * then receives those layers' weights and no others. */
    ds4_engine_options eo = {
        .model_path = path,
        .backend = (ds4_backend)h->backend,
        .device = h->device[0] ? h->device : NULL,
        .threads = h->threads,
        .quant_sim = (ds4_quant_sim)h->quant_sim,
        .plan_only = true,
    };
    ds4_error err = { "" };
    s->e = ds4_engine_open(&eo, &err);
    if (!s->e) {
        snprintf(why, sizeof why, "cannot load %.200s: %.700s", path, err.msg);
        return fail(why);
    }
    ds4_model_info info;
    ds4_engine_info(s->e, &info);
    if (info.identity != h->identity) {
        snprintf(why, sizeof why,
                 "refusing to start: its model %.300s (identity %016llx) is not rank 0's (identity %016llx); every rank "
                 "needs the same file",
                 path, (unsigned long long)info.identity, (unsigned long long)h->identity);
        return fail(why);
    }
    s->f = fwd_of(s->e);
    if (!s->f) return fail("its backend has no layered forward pass");
    fwd_set_chunk(s->f, h->chunk);
    s->hc = (size_t)s->e->model->hp.hc_dim * sizeof(float);
    ds4_device *devs = NULL;
    int n = 0, sel = -1;
    uint64_t mem = 0;
    if (ds4_backend_devices((ds4_backend)h->backend, eo.device, &devs, &n, &sel, &err) == 0 && sel >= 0)
        mem = devs[sel].memory;
    free(devs);
    return reply(0, (int64_t)mem, NULL, 0, info.device_name);
}

static srv_session *find(server *s, int sid)
{
    for (int i = 0; i < s->n_ss; i++)
        if (s->ss[i].sid == sid) return &s->ss[i];
    return NULL;
}

/* The engine for layers [l0, l1): the planning one is replaced by one
 * opened for that range (its devices hold only those layers' weights). */
static int open_range(server *s, int l0, int l1, ds4_error *err)
{
    if (s->n_ss) return ds4_error_set(err, "a new layer range with sessions open");
    const dmpi_hello *h = &s->h;
    ds4_engine_options eo = {
        .model_path = s->path,
        .backend = (ds4_backend)h->backend,
        .device = h->device[0] ? h->device : NULL,
        .threads = h->threads,
        .quant_sim = (ds4_quant_sim)h->quant_sim,
        .layer_first = l0,
        .layer_end = l1,
        .load_progress = load_beat,
    };
    ds4_engine *e = ds4_engine_open(&eo, err);
    if (!e) return -1;
    fwd_engine *f = fwd_of(e);
    if (!f) {
        ds4_engine_close(e);
        return ds4_error_set(err, "its backend has no layered forward pass");
    }
    fwd_set_chunk(f, h->chunk);
    ds4_engine_close(s->e);
    s->e = e;
    s->f = f;
    return 0;
}

static int open_session(server *s, int sid, int n_ctx)
{
    ds4_error err = { "" };
    void *st = s->e->sess->state_new(s->e, n_ctx, &err);
    if (!st) return fail(err.msg);
    s->ss = xrealloc(s->ss, (size_t)(s->n_ss + 1) * sizeof *s->ss);
    s->ss[s->n_ss++] = (srv_session){ sid, st };
    return reply(0, 0, NULL, 0, NULL);
}

static void close_session(server *s, int sid)
{
    srv_session *x = find(s, sid);
    if (!x) return;
    s->e->sess->state_free(x->st);
    *x = s->ss[--s->n_ss];
}

/* A chunk's streams from the previous rank: run the range, pass the result
 * on (or, from the last rank, the last token's streams back to rank 0). */
static int eval(server *s, const dmpi_cmd *c, int src)
{
    ds4_error err = { "" };
    srv_session *x = find(s, c->sid);
    int T = (int)c->b;
    size_t sb = (size_t)T * s->hc;
    if (T < 1 || c->bytes != sb + (size_t)T * sizeof(int32_t)) return fail("a chunk's streams have the wrong size");
    /* the streams, then the ids; the output keeps the ids behind the
     * streams for the next rank */
    float *S = malloc(c->bytes);
    bool last = dmpi_rank() == dmpi_size() - 1;
    float *out = malloc(last ? s->hc : c->bytes);
    int rc = -1;
    if (!S || !out) {
        fail("out of memory for a chunk's streams");
    } else if (dmpi_recv(src, DMPI_TAG_DATA, S, c->bytes, &err) != 0) {
        fail(err.msg);
    } else if (!x) {
        fail("no such session");
    } else {
        dmpi_beat(true);
        ds4_callbacks cb = { .cancel = beat_cancel };
        const int32_t *tok = (const int32_t *)(const void *)((const char *)S + sb);
        if (!last) memcpy((char *)out + sb, tok, (size_t)T * sizeof(int32_t));
        long done = fwd_stage_eval(x->st, tok, S, c->a, T, out, last, &cb, &err);
        if (done != T) {
            fail(err.msg);
        } else if (last) {
            rc = reply(0, T, out, s->hc, NULL);
        } else {
            dmpi_cmd next = *c;
            if (dmpi_send(dmpi_rank() + 1, DMPI_TAG_CMD, &next, sizeof next, &err) != 0 ||
                dmpi_send(dmpi_rank() + 1, DMPI_TAG_DATA, out, c->bytes, &err) != 0)
                fail(err.msg);
            else
                rc = 0;
        }
    }
    free(S);
    free(out);
    return rc;
}

static int save(server *s, const dmpi_cmd *c)
{
    srv_session *x = find(s, c->sid);
    if (!x) return fail("no such session");
    strbuf out = { 0 };
    ds4_error err = { "" };
    int rc = fwd_stage_save(x->st, &out, &err) == 0 ? reply(0, 0, out.s, out.len, NULL) : fail(err.msg);
    sb_free(&out);
    return rc;
}

static int load(server *s, const dmpi_cmd *c, int src)
{
    srv_session *x = find(s, c->sid);
    void *blocks = malloc(c->bytes ? c->bytes : 1);
    ds4_error err = { "" };
    int rc;
    if (!blocks) rc = fail("out of memory for a session's state");
    else if (dmpi_recv(src, DMPI_TAG_DATA, blocks, c->bytes, &err) != 0) rc = fail(err.msg);
    else if (!x) rc = fail("no such session");
    else if (fwd_stage_load(x->st, blocks, c->bytes, (size_t)c->a, c->b != 0, &err) != 0) rc = fail(err.msg);
    else rc = reply(0, 0, NULL, 0, NULL);
    free(blocks);
    return rc;
}

/* One command; 1 after QUIT. */
static int serve_one(server *s, const dmpi_cmd *c, int src)
{
    ds4_error err = { "" };
    srv_session *x = c->op >= DMPI_OPEN ? find(s, c->sid) : NULL;
    bool ready = s->f != NULL;
    if (c->op != DMPI_HELLO && c->op != DMPI_QUIT && !ready) return fail("the model is not open");
    switch ((dmpi_op)c->op) {
    case DMPI_HELLO: {
        dmpi_hello h;
        if (c->bytes != sizeof h) return fail("a greeting of another protocol version");
        if (dmpi_recv(src, DMPI_TAG_DATA, &h, sizeof h, &err) != 0) return -1;
        h.build[sizeof h.build - 1] = h.model[sizeof h.model - 1] = h.device[sizeof h.device - 1] = 0;
        return hello(s, &h);
    }
    case DMPI_RANGE:
        if (open_range(s, (int)c->a, (int)c->b, &err) != 0) return fail(err.msg);
        s->l0 = (int)c->a;
        s->l1 = (int)c->b;
        return reply(0, 0, NULL, 0, NULL);
    case DMPI_OPEN: return open_session(s, c->sid, (int)c->a);
    case DMPI_CLOSE: close_session(s, c->sid); return 0;
    case DMPI_EVAL: return eval(s, c, src);
    case DMPI_REWIND:
        if (!x) return fail("no such session");
        return reply(fwd_backend_rewind(x->st, (size_t)c->a), 0, NULL, 0, NULL);
    case DMPI_RESET:
        if (!x) return fail("no such session");
        fwd_backend_reset(x->st);
        return reply(0, 0, NULL, 0, NULL);
    case DMPI_SAVE: return save(s, c);
    case DMPI_LOAD: return load(s, c, src);
    case DMPI_QUIT: return 1;
    }
    return fail("unknown command");
}

int dmpi_serve(void)
{
    server s;
    memset(&s, 0, sizeof s);
    int rc = 0;
    for (;;) {
        int src = 0;
        size_t n = 0;
        ds4_error err = { "" };
        /* idle: rank 0 may wait for its user for hours; if it dies, the
         * launcher ends the job */
        if (dmpi_probe(MPI_ANY_SOURCE, DMPI_TAG_CMD, -1, &src, &n, NULL, &err) != 0) {
            fprintf(stderr, "ds4cl: rank %d: %s\n", dmpi_rank(), err.msg);
            rc = 1;
            break;
        }
        dmpi_cmd c;
        if (n != sizeof c || dmpi_recv(src, DMPI_TAG_CMD, &c, sizeof c, &err) != 0) {
            fprintf(stderr, "ds4cl: rank %d: a command of another protocol version from rank %d\n", dmpi_rank(), src);
            rc = 1;
            break;
        }
        if (serve_one(&s, &c, src) == 1) break;
    }
    while (s.n_ss) close_session(&s, s.ss[0].sid);
    free(s.ss);
    ds4_engine_close(s.e);
    MPI_Finalize();
    return rc;
}
