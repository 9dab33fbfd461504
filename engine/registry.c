/* registry.c — what joins the engine from outside it: the backends' tables,
 * kept in id order, and the job hook, with the answers for a job of one
 * process when no hook joined (backend.h). */
#include "engine/backend.h"

#include <stdio.h>
#include <stdlib.h>

/* More than the ds4_backend ids there are: a new backend needs no change
 * here until there are this many. */
#define MAX_BACKENDS 8

static const ds4_backend_ops *registry[MAX_BACKENDS];
static size_t n_registered;
static const ds4_job_ops *job_hook;

/* Called from constructors, before main: nothing to report an error to
 * yet, and a build that registers wrongly must not run at all. */
static void registry_fault(const char *what, const char *name)
{
    fprintf(stderr, "ds4cl: %s: %s\n", what, name);
    fflush(stderr); /* abort flushes nothing, and stderr may be a file */
    abort();
}

void ds4_backend_register(const ds4_backend_ops *ops)
{
    if (n_registered == MAX_BACKENDS) registry_fault("too many backends registered", ops->name);
    size_t at = n_registered;
    while (at > 0 && registry[at - 1]->id >= ops->id) {
        if (registry[at - 1]->id == ops->id) registry_fault("two backends registered with one id", ops->name);
        at--;
    }
    for (size_t i = n_registered; i > at; i--) registry[i] = registry[i - 1];
    registry[at] = ops;
    n_registered++;
}

const ds4_backend_ops *engine_backend(ds4_backend b)
{
    for (size_t i = 0; i < n_registered; i++)
        if (registry[i]->id == b) return registry[i];
    return NULL;
}

const ds4_backend_ops *engine_host_backend(void)
{
    for (size_t i = 0; i < n_registered; i++)
        if (registry[i]->ops_new) return registry[i];
    return NULL;
}

const ds4_backend *ds4_backends(int *n)
{
    static ds4_backend all[MAX_BACKENDS];
    for (size_t i = 0; i < n_registered; i++) all[i] = registry[i]->id;
    *n = (int)n_registered;
    return all;
}

const char *ds4_backend_name(ds4_backend b)
{
    const ds4_backend_ops *ops = engine_backend(b);
    return ops ? ops->name : "?";
}

void ds4_job_register(const ds4_job_ops *job)
{
    if (job_hook) registry_fault("two job hooks registered", "");
    job_hook = job;
}

int ds4_job_start(int *argc, char ***argv) { return job_hook ? job_hook->start(argc, argv) : 0; }

int ds4_job_ranks(void) { return job_hook ? job_hook->ranks() : 1; }

int ds4_job_serve(void)
{
    /* only a rank above 0 serves, and only a job hook gives ranks */
    return job_hook ? job_hook->serve() : 1;
}

int ds4_job_plan(const ds4_engine *e, int *layer_end, ds4_error *err)
{
    *layer_end = 0;
    return job_hook ? job_hook->plan(e, layer_end, err) : 0;
}

int ds4_job_attach(ds4_engine *e, ds4_error *err) { return job_hook ? job_hook->attach(e, err) : 0; }

const char *ds4_job_split_text(void) { return job_hook ? job_hook->split_text() : ""; }
