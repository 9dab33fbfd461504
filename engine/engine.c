/* engine.c — opening a model on a backend: GGUF, tokenizer, weights
 * binding, then the backend itself. */
#include "engine/expert_cache.h"
#include "engine/place.h"
#include "engine/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ds4_engine *ds4_engine_open(const ds4_engine_options *opt, ds4_error *err)
{
    if (!opt || !opt->model_path) {
        ds4_error_set(err, "no model file given");
        return NULL;
    }
    const ds4_backend_ops *ops = engine_backend(opt->backend);
    if (!ops) {
        ds4_error_set(err, "unknown backend %d", (int)opt->backend);
        return NULL;
    }
    if (ops->check && ops->check(opt, err)) return NULL;
    ds4_engine *e = xcalloc(1, sizeof *e);
    e->opt = *opt;
    e->model_path = xstrdup(opt->model_path);
    e->script_path = xstrdup(opt->script_path);
    e->device = xstrdup(opt->device);
    e->split = xstrdup(opt->split);
    e->expert_stats = xstrdup(opt->expert_stats);
    e->opt.expert_stats = e->expert_stats;
    e->opt.model_path = e->model_path;
    e->opt.script_path = e->script_path;
    e->opt.device = e->device;
    e->opt.split = e->split;
    e->backend = ops;
    e->sess = &ops->session;

    if (opt->load_progress) opt->load_progress(opt->load_ud, 0.0, "reading model");
    e->gguf = gguf_open(e->model_path, err);
    if (!e->gguf) goto fail;
    e->identity = gguf_identity(e->gguf);
    /* the binding first: a file of another architecture says so, not
     * that its tokenizer is missing */
    if (ops->needs_model) {
        e->model = model_bind(e->gguf, err);
        if (!e->model) goto fail;
    }
    e->tok = tokenizer_from_gguf(e->gguf, err);
    if (!e->tok) goto fail;
    e->n_vocab = ds4_vocab_size(e->tok);
    if ((ops->device ? place_open(e, err) : ops->open(e, err)) != 0) goto fail;
    if (opt->load_progress) opt->load_progress(opt->load_ud, 1.0, "ready");
    return e;

fail:
    ds4_engine_close(e);
    return NULL;
}

static void close_backend(ds4_engine *e)
{
    if (e->impl) {
        if (e->backend->device) place_close(e);
        else if (e->backend->close) e->backend->close(e);
    }
    e->impl = NULL;
    e->placed = false;
    memset(&e->place, 0, sizeof e->place);
}

int ds4_engine_reopen(ds4_engine *e, const ds4_engine_options *opt, ds4_error *err)
{
    if (e->n_sessions > 0) return ds4_error_set(err, "an engine with open sessions cannot be opened again");
    if (e->sess != &e->backend->session) return ds4_error_set(err, "an engine with a hook cannot be opened again");
    close_backend(e);
    e->opt.plan_only = opt->plan_only;
    e->opt.plan_ctx = opt->plan_ctx;
    e->opt.layer_first = opt->layer_first;
    e->opt.layer_end = opt->layer_end;
    e->opt.load_progress = opt->load_progress;
    e->opt.load_ud = opt->load_ud;
    if (opt->load_progress) opt->load_progress(opt->load_ud, 0.0, "reading model");
    if ((e->backend->device ? place_open(e, err) : e->backend->open(e, err)) != 0) {
        e->impl = NULL;
        return -1;
    }
    if (opt->load_progress) opt->load_progress(opt->load_ud, 1.0, "ready");
    return 0;
}

void ds4_engine_close(ds4_engine *e)
{
    if (!e) return;
    close_backend(e);
    if (e->model) model_free(e->model);
    if (e->tok) ds4_tokenizer_free(e->tok);
    if (e->gguf) gguf_close(e->gguf);
    free(e->model_path);
    free(e->script_path);
    free(e->device);
    free(e->split);
    free(e->expert_stats);
    free(e);
}

int engine_hook_sessions(ds4_engine *e, const ds4_session_ops *hook, const ds4_session_ops **base, ds4_error *err)
{
    if (e->n_sessions > 0) return ds4_error_set(err, "an engine hook comes before the first session");
    if (e->sess != &e->backend->session) return ds4_error_set(err, "the engine has a hook already");
    *base = e->sess;
    e->sess = hook;
    return 0;
}

int ds4_engine_placement(const ds4_engine *e, ds4_placement *out)
{
    if (!e->placed) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    *out = e->place;
    return 0;
}

void ds4_engine_info(const ds4_engine *e, ds4_model_info *out)
{
    memset(out, 0, sizeof *out);
    if (e->model) {
        model_describe(e->model, out);
        out->expert_bytes = expert_cache_expert_bytes(e->model);
        out->expert_cache_bytes = e->opt.expert_cache;
    }
    out->n_vocab = e->n_vocab;
    out->identity = e->identity;
    out->backend_name = e->backend->name;
    if (!out->name[0]) {
        const char *base = strrchr(e->model_path, '/');
        snprintf(out->name, sizeof out->name, "%s", base ? base + 1 : e->model_path);
    }
    if (e->placed && e->place.n_devices > 1)
        snprintf(out->device_name, sizeof out->device_name, "%.100s (layers split)", e->place.device_name);
    else if (e->backend->describe) e->backend->describe(e, out);
    if (!out->device_name[0]) snprintf(out->device_name, sizeof out->device_name, "%s", e->backend->name);
}

const char *ds4_device_kind_name(ds4_device_kind k)
{
    switch (k) {
    case DS4_DEVICE_CPU: return "CPU";
    case DS4_DEVICE_GPU: return "GPU";
    case DS4_DEVICE_ACCELERATOR: return "accelerator";
    case DS4_DEVICE_OTHER: break;
    }
    return "other";
}

int ds4_backend_devices(ds4_backend b, const char *want, ds4_device **out, int *n, int *selected, ds4_error *err)
{
    const ds4_backend_ops *ops = engine_backend(b);
    *out = NULL;
    *n = 0;
    *selected = -1;
    if (!ops || !ops->devices) return ds4_error_set(err, "the %s backend runs on no device", ds4_backend_name(b));
    char pieces[DS4_MAX_DEVICES][DS4_DEVICE_PIECE_MAX];
    const char *src;
    ds4_error bad = { "" };
    int np = engine_device_pieces(want, pieces, &src, &bad);
    if (ops->devices(np > 0 ? pieces[0] : NULL, src, out, n, selected, err)) return -1;
    if (np < 0) {
        *selected = -1;
        ds4_error_set(err, "%s", bad.msg);
        return 0;
    }
    /* a list: every piece must name a device; the first is the one picked */
    for (int k = 1; k < np && *selected >= 0; k++) {
        ds4_device *more = NULL;
        int m = 0, sel = -1;
        int rc = ops->devices(pieces[k], src, &more, &m, &sel, err);
        free(more);
        if (rc) return -1;
        if (sel < 0) *selected = -1;
    }
    return 0;
}

const ds4_tokenizer *ds4_engine_tokenizer(const ds4_engine *e) { return e->tok; }

uint64_t ds4_session_bytes_estimate(const ds4_engine *e, int n_ctx)
{
    if (e->backend->device) return place_session_bytes(e, n_ctx);
    return e->backend->session_bytes ? e->backend->session_bytes(e, n_ctx) : 0;
}
