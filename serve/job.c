/* job.c — a request on its way through the worker: shared between the
 * connection thread (which waits on it and writes what it produces) and
 * the engine worker (which fills it), freed by whichever lets go last. */
#include <json-c/json.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

sv_job *sv_job_new(serve_request *req, const sv_writer *w, const char *model)
{
    static atomic_ulong counter;
    sv_job *j = xcalloc(1, sizeof *j);
    j->req = req;
    j->w = w;
    j->seq = atomic_fetch_add(&counter, 1) + 1;
    j->created = base_wall_time_s();
    j->block = -1;
    snprintf(j->id, sizeof j->id, "%llx%06lx", (unsigned long long)j->created, j->seq & 0xffffff);
    snprintf(j->model, sizeof j->model, "%s", model ? model : "ds4");
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    return j;
}

void sv_job_unref(sv_job *j)
{
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (!last) return;
    serve_request_free(j->req);
    ds4_tokens_free(&j->prompt);
    sb_free(&j->reasoning);
    sb_free(&j->text);
    sb_free(&j->out);
    for (size_t i = 0; i < j->n_calls; i++) {
        free(j->calls[i].id);
        free(j->calls[i].name);
        free(j->calls[i].args);
    }
    free(j->calls);
    free(j->stop_hit);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
}

void sv_job_emit(sv_job *j, const char *s, size_t n)
{
    pthread_mutex_lock(&j->mu);
    sb_append(&j->out, s, n);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void sv_job_event(sv_job *j, const char *name, struct json_object *o)
{
    strbuf b = { 0 };
    if (name) sb_printf(&b, "event: %s\n", name);
    sb_puts(&b, "data: ");
    sb_puts(&b, json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    sb_puts(&b, "\n\n");
    sv_job_emit(j, b.s, b.len);
    sb_free(&b);
    json_object_put(o);
}

const char *sv_finish_openai(sv_finish f)
{
    switch (f) {
    case SV_FINISH_LENGTH: return "length";
    case SV_FINISH_TOOLS: return "tool_calls";
    default: return "stop";
    }
}

const char *sv_finish_anthropic(sv_finish f)
{
    switch (f) {
    case SV_FINISH_LENGTH: return "max_tokens";
    case SV_FINISH_TOOLS: return "tool_use";
    default: return "end_turn";
    }
}
