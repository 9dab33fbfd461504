/* serve_impl.h — what the files of serve/ share (request.c: parsing;
 * render.c: prompts as tokens and the reply memory; worker.c: the engine
 * threads; batch.c: their decode tokens as shared steps; cache.c: snapshot files; reply_*.c: the APIs' output shapes;
 * http.c: the daemon and the routes; http_door.c, with its own header:
 * accepting, the connection limit and the request head's check). */
#ifndef DS4CL_SERVE_IMPL_H
#define DS4CL_SERVE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "serve/serve.h"

struct json_object;

/* ---- the normalized request ------------------------------------------------ */

typedef struct {
    char *id;
    char *name;
    char *args;      /* a JSON object, compact */
} sv_call;

/* SV_SYSTEM: a system or developer message after the first turn, rendered
 * where it stands (the ones before it make up system). */
typedef enum { SV_USER = 0, SV_ASSISTANT, SV_TOOL, SV_SYSTEM } sv_role;

typedef struct {
    sv_role role;
    char *text;      /* user text, assistant visible text, tool result, system text */
    char *reasoning; /* assistant; NULL when not given */
    sv_call *calls;  /* assistant */
    size_t n_calls;
    char *call_id;   /* tool: the call it answers */
} sv_msg;

typedef enum { SV_CHOICE_AUTO = 0, SV_CHOICE_NONE, SV_CHOICE_REQUIRED, SV_CHOICE_NAMED } sv_choice;

struct serve_request {
    serve_api api;
    char *model;
    bool stream, include_usage, count_only;
    strbuf system;
    char **tools;    /* {"name","description","parameters"} each */
    size_t n_tools;
    sv_choice choice;
    char *choice_name;
    sv_msg *msgs;
    size_t n_msgs, cap_msgs;
    int max_tokens;  /* 0 = not given */
    bool have_temp, have_top_p, have_top_k, have_seed;
    float temp, top_p;
    int top_k;
    uint64_t seed;
    int think;       /* -1 = server default, 0 off, 1 on */
    char **stop;
    size_t n_stop;
    strbuf notes;    /* what was left out of the prompt and why, for the request log */
};

/* ---- rendering and the reply memory (render.c) ------------------------------ */

typedef struct sv_memo sv_memo;

sv_memo *sv_memo_new(void);
void sv_memo_free(sv_memo *m);
/* Remembers the tokens of a reply (assistant prefix … EOS) by the tokens
 * before it, its visible text and its calls. Thread-safe. */
void sv_memo_put(sv_memo *m, const int32_t *before, size_t n_before, const char *text, const sv_call *calls,
                 size_t n_calls, const int32_t *ids, size_t n);
int sv_memo_save(sv_memo *m, const char *path);
void sv_memo_load(sv_memo *m, const char *path);

/* The prompt of r as tokens, ending with the assistant prefix. -1 with a
 * message when the conversation cannot be rendered. */
int sv_render(const ds4_tokenizer *t, sv_memo *memo, const serve_request *r, bool think, ds4_tokens *out,
              ds4_error *err);

/* ---- jobs ------------------------------------------------------------------- */

typedef struct sv_job sv_job;

/* What the worker reports to the reply writers. */
typedef struct {
    void (*begin)(sv_job *j);
    void (*think)(sv_job *j, const char *s, size_t n);
    void (*text)(sv_job *j, const char *s, size_t n);
    void (*call)(sv_job *j, size_t index, const sv_call *c);
    void (*end)(sv_job *j);            /* j->finish and usage are set */
    char *(*body)(sv_job *j);          /* the non-streamed response JSON */
} sv_writer;

typedef enum { SV_FINISH_STOP = 0, SV_FINISH_LENGTH, SV_FINISH_TOOLS, SV_FINISH_CANCEL, SV_FINISH_ERROR } sv_finish;

struct sv_job {
    serve_request *req;
    const sv_writer *w;
    ds4_tokens prompt;
    bool think;
    char id[48];
    char model[128];
    int skips;                  /* times a later job went first (the worker's, under its lock) */
    int64_t created;
    unsigned long seq;

    /* results, written by the worker before done */
    strbuf reasoning, text;     /* valid UTF-8 */
    sv_call *calls;
    size_t n_calls;
    sv_finish finish;
    bool shutdown;              /* the error is the server stopping */
    char *stop_hit;             /* the stop sequence that ended it */
    char error[512];
    size_t prompt_tokens, cached_tokens, prefilled, completion_tokens, reasoning_tokens;

    /* writer state (streaming) */
    int block;                  /* open content block, -1 none */
    int block_kind;
    int n_blocks;
    unsigned long events;

    /* shared with the connection, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    strbuf out;                 /* SSE bytes not yet sent */
    bool done;
    atomic_bool cancel;
    int refs;
};

sv_job *sv_job_new(serve_request *req, const sv_writer *w, const char *model);
void sv_job_unref(sv_job *j);
/* Appends bytes to the stream (the worker's side) and wakes the writer. */
void sv_job_emit(sv_job *j, const char *s, size_t n);
/* Appends one SSE event: "event: NAME\n" when name is given, then
 * "data: JSON\n\n". Takes (puts) o. */
void sv_job_event(sv_job *j, const char *name, struct json_object *o);

extern const sv_writer sv_writer_chat, sv_writer_messages, sv_writer_responses;

/* ---- the worker (worker.c) -------------------------------------------------------- */

typedef struct sv_worker sv_worker;

sv_worker *sv_worker_start(const serve_config *cfg, sv_memo *memo, ds4_error *err);
/* Queues a job (takes a reference). */
void sv_worker_submit(sv_worker *w, sv_job *j);
/* Cancels everything, saves the cache, joins the thread, closes the
 * session; jobs submitted afterwards fail at once. */
void sv_worker_stop(sv_worker *w);
void sv_worker_free(sv_worker *w);
const serve_config *sv_worker_config(const sv_worker *w);

/* Decode steps and prefill pieces so far: steps, and those of several
 * sessions. */
void sv_worker_counts(sv_worker *w, uint64_t *steps, uint64_t *shared);

/* ---- the step combiner (batch.c; its policy is there) -------------------------- */

typedef struct sv_batch sv_batch;

/* The worker reads a prompt in pieces of this many tokens (a multiple of
 * the engine's default prefill chunk, so that the chunks stay the same),
 * each in a turn of the engine. */
#define SV_PREFILL_PIECE 256

/* on: combine; off: every call goes to the engine directly. stop: the
 * server stopping, the only thing that interrupts a step. */
sv_batch *sv_batch_new(bool on, atomic_bool *stop);
void sv_batch_free(sv_batch *b);
bool sv_batch_on(const sv_batch *b);
/* Appends id to s as ds4_session_eval does, in the next shared step;
 * *members (may be NULL) gets how many sessions that step had. Waits. */
ds4_status sv_batch_eval(sv_batch *b, ds4_session *s, int32_t id, int *members, ds4_error *err);
/* A slot decodes (queues a token after each step) from join to part: a
 * step waits for the tokens of every such slot. */
void sv_batch_join(sv_batch *b);
void sv_batch_part(sv_batch *b);
/* A turn of the engine for one prefill piece (nothing when off). */
void sv_batch_enter(sv_batch *b);
void sv_batch_leave(sv_batch *b);
/* The prefill piece in tokens; 0: the whole prompt at once (off). */
size_t sv_batch_piece(const sv_batch *b);
/* Steps so far, and those of several sessions. */
void sv_batch_counts(sv_batch *b, uint64_t *steps, uint64_t *shared);

/* ---- the snapshot cache (cache.c) ------------------------------------------------ */

typedef struct sv_cache sv_cache;

/* Opens (creates) the directory, reads its token files, and removes the
 * temporary files that writers killed mid-save left there. */
sv_cache *sv_cache_open(const char *dir, uint64_t max_bytes, uint64_t model_identity);
void sv_cache_close(sv_cache *c);
/* Saves the session's state (its tokens beside it). */
int sv_cache_save(sv_cache *c, ds4_session *s, ds4_error *err);
/* The snapshot whose token prefix is the longest prefix of ids (all of
 * ids included), longer than min_len; malloc'd bytes, or NULL. *n_prefix
 * gets its length. */
void *sv_cache_find(sv_cache *c, const int32_t *ids, size_t n, size_t min_len, size_t *len, size_t *n_prefix);
/* The memo file's path in the cache directory ("" when no cache). */
const char *sv_cache_memo_path(const sv_cache *c);

/* ---- helpers ------------------------------------------------------------------------ */

char *sv_strdup(const char *s);
const char *sv_finish_openai(sv_finish f);
const char *sv_finish_anthropic(sv_finish f);

#endif
