/* reply_openai.c — replies in the shapes of OpenAI's chat completions
 * (chat.completion, chat.completion.chunk events ending with [DONE]) and
 * responses (a response object; response.* events) APIs. The reasoning
 * goes out as reasoning_content (chat) and as a reasoning item (responses);
 * usage counts the prompt tokens read from the cache apart, and
 * prefilled_tokens says how many were computed. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "serve/serve_impl.h"

typedef struct json_object jo;

static jo *str(const char *s, size_t n)
{
    return json_object_new_string_len(s ? s : "", (int)n);
}

static jo *s0(const char *s)
{
    return json_object_new_string(s ? s : "");
}

static char *take_json(jo *o)
{
    char *s = sv_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

/* ---- chat completions -------------------------------------------------------------------- */

static jo *chat_usage(const sv_job *j)
{
    jo *u = json_object_new_object(), *pd = json_object_new_object(), *cd = json_object_new_object();
    json_object_object_add(u, "prompt_tokens", json_object_new_int64((int64_t)j->prompt_tokens));
    json_object_object_add(u, "completion_tokens", json_object_new_int64((int64_t)j->completion_tokens));
    json_object_object_add(u, "total_tokens", json_object_new_int64((int64_t)(j->prompt_tokens + j->completion_tokens)));
    json_object_object_add(pd, "cached_tokens", json_object_new_int64((int64_t)j->cached_tokens));
    json_object_object_add(u, "prompt_tokens_details", pd);
    json_object_object_add(cd, "reasoning_tokens", json_object_new_int64((int64_t)j->reasoning_tokens));
    json_object_object_add(u, "completion_tokens_details", cd);
    json_object_object_add(u, "prefilled_tokens", json_object_new_int64((int64_t)j->prefilled));
    return u;
}

static jo *chat_call(size_t index, const sv_call *c, bool with_index)
{
    jo *o = json_object_new_object(), *fn = json_object_new_object();
    if (with_index) json_object_object_add(o, "index", json_object_new_int64((int64_t)index));
    json_object_object_add(o, "id", s0(c->id));
    json_object_object_add(o, "type", s0("function"));
    json_object_object_add(fn, "name", s0(c->name));
    json_object_object_add(fn, "arguments", s0(c->args));
    json_object_object_add(o, "function", fn);
    return o;
}

static jo *chunk(sv_job *j, jo *delta, const char *finish)
{
    jo *o = json_object_new_object(), *choices = json_object_new_array();
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-%s", j->id);
    json_object_object_add(o, "id", s0(id));
    json_object_object_add(o, "object", s0("chat.completion.chunk"));
    json_object_object_add(o, "created", json_object_new_int64(j->created));
    json_object_object_add(o, "model", s0(j->model));
    if (delta) {
        jo *c = json_object_new_object();
        json_object_object_add(c, "index", json_object_new_int(0));
        json_object_object_add(c, "delta", delta);
        json_object_object_add(c, "logprobs", NULL);
        json_object_object_add(c, "finish_reason", finish ? s0(finish) : NULL);
        json_object_array_add(choices, c);
    }
    json_object_object_add(o, "choices", choices);
    return o;
}

static void chat_delta(sv_job *j, const char *key, jo *value)
{
    jo *d = json_object_new_object();
    json_object_object_add(d, key, value);
    sv_job_event(j, NULL, chunk(j, d, NULL));
}

static void chat_begin(sv_job *j)
{
    jo *d = json_object_new_object();
    json_object_object_add(d, "role", s0("assistant"));
    json_object_object_add(d, "content", s0(""));
    sv_job_event(j, NULL, chunk(j, d, NULL));
}

static void chat_think(sv_job *j, const char *s, size_t n) { chat_delta(j, "reasoning_content", str(s, n)); }
static void chat_text(sv_job *j, const char *s, size_t n) { chat_delta(j, "content", str(s, n)); }

static void chat_call_ev(sv_job *j, size_t index, const sv_call *c)
{
    jo *a = json_object_new_array();
    json_object_array_add(a, chat_call(index, c, true));
    chat_delta(j, "tool_calls", a);
}

static void chat_end(sv_job *j)
{
    if (j->finish == SV_FINISH_ERROR) {
        /* a chunk with an error object: the official clients raise it */
        jo *e = json_object_new_object(), *o = json_object_new_object();
        json_object_object_add(e, "message", s0(j->error));
        json_object_object_add(e, "type", s0("server_error"));
        json_object_object_add(e, "param", NULL);
        json_object_object_add(e, "code", NULL);
        json_object_object_add(o, "error", e);
        sv_job_event(j, NULL, o);
    } else {
        sv_job_event(j, NULL, chunk(j, json_object_new_object(), sv_finish_openai(j->finish)));
        if (j->req->include_usage) {
            jo *o = chunk(j, NULL, NULL);
            json_object_object_add(o, "usage", chat_usage(j));
            sv_job_event(j, NULL, o);
        }
    }
    sv_job_emit(j, "data: [DONE]\n\n", 14);
}

static char *chat_body(sv_job *j)
{
    jo *o = json_object_new_object(), *choices = json_object_new_array(), *c = json_object_new_object(),
       *m = json_object_new_object();
    char id[64];
    snprintf(id, sizeof id, "chatcmpl-%s", j->id);
    json_object_object_add(o, "id", s0(id));
    json_object_object_add(o, "object", s0("chat.completion"));
    json_object_object_add(o, "created", json_object_new_int64(j->created));
    json_object_object_add(o, "model", s0(j->model));
    json_object_object_add(m, "role", s0("assistant"));
    json_object_object_add(m, "content", j->text.len || !j->n_calls ? str(j->text.s, j->text.len) : NULL);
    if (j->reasoning.len) json_object_object_add(m, "reasoning_content", str(j->reasoning.s, j->reasoning.len));
    if (j->n_calls) {
        jo *calls = json_object_new_array();
        for (size_t i = 0; i < j->n_calls; i++) json_object_array_add(calls, chat_call(i, &j->calls[i], false));
        json_object_object_add(m, "tool_calls", calls);
    }
    json_object_object_add(c, "index", json_object_new_int(0));
    json_object_object_add(c, "message", m);
    json_object_object_add(c, "logprobs", NULL);
    json_object_object_add(c, "finish_reason", s0(sv_finish_openai(j->finish)));
    json_object_array_add(choices, c);
    json_object_object_add(o, "choices", choices);
    json_object_object_add(o, "usage", chat_usage(j));
    return take_json(o);
}

const sv_writer sv_writer_chat = { chat_begin, chat_think, chat_text, chat_call_ev, chat_end, chat_body };

/* ---- responses ------------------------------------------------------------------------------ */

enum { RB_NONE = 0, RB_REASONING, RB_MESSAGE };

static void resp_event(sv_job *j, const char *type, jo *o)
{
    json_object_object_add(o, "type", s0(type));
    json_object_object_add(o, "sequence_number", json_object_new_int64((int64_t)j->events++));
    sv_job_event(j, type, o);
}

static jo *resp_item_id(sv_job *j, const char *kind, int index)
{
    char id[96];
    snprintf(id, sizeof id, "%s_%s_%d", kind, j->id, index);
    return s0(id);
}

static jo *reasoning_item(sv_job *j, int index, const char *text, size_t n)
{
    jo *it = json_object_new_object(), *summary = json_object_new_array(), *content = json_object_new_array();
    json_object_object_add(it, "id", resp_item_id(j, "rs", index));
    json_object_object_add(it, "type", s0("reasoning"));
    json_object_object_add(it, "summary", summary);
    if (text) {
        jo *p = json_object_new_object();
        json_object_object_add(p, "type", s0("reasoning_text"));
        json_object_object_add(p, "text", str(text, n));
        json_object_array_add(content, p);
    }
    json_object_object_add(it, "content", content);
    return it;
}

static jo *message_item(sv_job *j, int index, const char *text, size_t n, bool done)
{
    jo *it = json_object_new_object(), *content = json_object_new_array();
    json_object_object_add(it, "id", resp_item_id(j, "msg", index));
    json_object_object_add(it, "type", s0("message"));
    json_object_object_add(it, "status", s0(done ? "completed" : "in_progress"));
    json_object_object_add(it, "role", s0("assistant"));
    if (text) {
        jo *p = json_object_new_object();
        json_object_object_add(p, "type", s0("output_text"));
        json_object_object_add(p, "text", str(text, n));
        json_object_object_add(p, "annotations", json_object_new_array());
        json_object_array_add(content, p);
    }
    json_object_object_add(it, "content", content);
    return it;
}

static jo *call_item(sv_job *j, int index, const sv_call *c)
{
    jo *it = json_object_new_object();
    json_object_object_add(it, "id", resp_item_id(j, "fc", index));
    json_object_object_add(it, "type", s0("function_call"));
    json_object_object_add(it, "status", s0("completed"));
    json_object_object_add(it, "call_id", s0(c->id));
    json_object_object_add(it, "name", s0(c->name));
    json_object_object_add(it, "arguments", s0(c->args));
    return it;
}

static jo *resp_usage(const sv_job *j)
{
    jo *u = json_object_new_object(), *in = json_object_new_object(), *out = json_object_new_object();
    json_object_object_add(u, "input_tokens", json_object_new_int64((int64_t)j->prompt_tokens));
    json_object_object_add(in, "cached_tokens", json_object_new_int64((int64_t)j->cached_tokens));
    json_object_object_add(u, "input_tokens_details", in);
    json_object_object_add(u, "output_tokens", json_object_new_int64((int64_t)j->completion_tokens));
    json_object_object_add(out, "reasoning_tokens", json_object_new_int64((int64_t)j->reasoning_tokens));
    json_object_object_add(u, "output_tokens_details", out);
    json_object_object_add(u, "total_tokens", json_object_new_int64((int64_t)(j->prompt_tokens + j->completion_tokens)));
    json_object_object_add(u, "prefilled_tokens", json_object_new_int64((int64_t)j->prefilled));
    return u;
}

/* A reply without text or calls still has its (empty) message, where
 * clients look for the answer; a failed one has what it produced. */
static bool resp_has_message(const sv_job *j)
{
    return j->text.len || (!j->n_calls && j->finish != SV_FINISH_ERROR);
}

static jo *response(sv_job *j, bool done)
{
    jo *o = json_object_new_object(), *output = json_object_new_array();
    char id[64];
    snprintf(id, sizeof id, "resp_%s", j->id);
    json_object_object_add(o, "id", s0(id));
    json_object_object_add(o, "object", s0("response"));
    json_object_object_add(o, "created_at", json_object_new_int64(j->created));
    json_object_object_add(o, "model", s0(j->model));
    const char *status = !done ? "in_progress" : j->finish == SV_FINISH_LENGTH ? "incomplete"
                                             : j->finish == SV_FINISH_ERROR    ? "failed"
                                                                               : "completed";
    json_object_object_add(o, "status", s0(status));
    if (done) {
        int k = 0;
        if (j->reasoning.len) json_object_array_add(output, reasoning_item(j, k++, j->reasoning.s, j->reasoning.len));
        if (resp_has_message(j)) json_object_array_add(output, message_item(j, k++, j->text.s, j->text.len, true));
        for (size_t i = 0; i < j->n_calls; i++) json_object_array_add(output, call_item(j, k++, &j->calls[i]));
        json_object_object_add(o, "usage", resp_usage(j));
        if (j->finish == SV_FINISH_LENGTH) {
            jo *inc = json_object_new_object();
            json_object_object_add(inc, "reason", s0("max_output_tokens"));
            json_object_object_add(o, "incomplete_details", inc);
        }
        if (j->finish == SV_FINISH_ERROR) {
            jo *e = json_object_new_object();
            json_object_object_add(e, "code", s0("server_error"));
            json_object_object_add(e, "message", s0(j->error));
            json_object_object_add(o, "error", e);
        }
    }
    json_object_object_add(o, "output", output);
    return o;
}

static void resp_begin(sv_job *j)
{
    jo *o = json_object_new_object();
    json_object_object_add(o, "response", response(j, false));
    resp_event(j, "response.created", o);
    o = json_object_new_object();
    json_object_object_add(o, "response", response(j, false));
    resp_event(j, "response.in_progress", o);
}

static void resp_close_block(sv_job *j)
{
    if (j->block < 0) return;
    jo *o = json_object_new_object();
    json_object_object_add(o, "output_index", json_object_new_int(j->block));
    if (j->block_kind == RB_MESSAGE) {
        jo *d = json_object_new_object();
        json_object_object_add(d, "item_id", resp_item_id(j, "msg", j->block));
        json_object_object_add(d, "output_index", json_object_new_int(j->block));
        json_object_object_add(d, "content_index", json_object_new_int(0));
        json_object_object_add(d, "text", str(j->text.s, j->text.len));
        resp_event(j, "response.output_text.done", d);
        json_object_object_add(o, "item", message_item(j, j->block, j->text.s, j->text.len, true));
    } else {
        json_object_object_add(o, "item", reasoning_item(j, j->block, j->reasoning.s, j->reasoning.len));
    }
    resp_event(j, "response.output_item.done", o);
    j->block = -1;
}

static void resp_open(sv_job *j, int kind)
{
    if (j->block >= 0 && j->block_kind == kind) return;
    resp_close_block(j);
    j->block = j->n_blocks++;
    j->block_kind = kind;
    jo *o = json_object_new_object();
    json_object_object_add(o, "output_index", json_object_new_int(j->block));
    json_object_object_add(o, "item", kind == RB_MESSAGE ? message_item(j, j->block, NULL, 0, false)
                                                         : reasoning_item(j, j->block, NULL, 0));
    resp_event(j, "response.output_item.added", o);
    if (kind == RB_MESSAGE) {
        jo *p = json_object_new_object(), *part = json_object_new_object();
        json_object_object_add(p, "item_id", resp_item_id(j, "msg", j->block));
        json_object_object_add(p, "output_index", json_object_new_int(j->block));
        json_object_object_add(p, "content_index", json_object_new_int(0));
        json_object_object_add(part, "type", s0("output_text"));
        json_object_object_add(part, "text", s0(""));
        json_object_object_add(part, "annotations", json_object_new_array());
        json_object_object_add(p, "part", part);
        resp_event(j, "response.content_part.added", p);
    }
}

static void resp_delta(sv_job *j, int kind, const char *s, size_t n)
{
    resp_open(j, kind);
    jo *o = json_object_new_object();
    const char *prefix = kind == RB_MESSAGE ? "msg" : "rs";
    json_object_object_add(o, "item_id", resp_item_id(j, prefix, j->block));
    json_object_object_add(o, "output_index", json_object_new_int(j->block));
    json_object_object_add(o, "content_index", json_object_new_int(0));
    json_object_object_add(o, "delta", str(s, n));
    resp_event(j, kind == RB_MESSAGE ? "response.output_text.delta" : "response.reasoning_text.delta", o);
}

static void resp_think(sv_job *j, const char *s, size_t n) { resp_delta(j, RB_REASONING, s, n); }
static void resp_text(sv_job *j, const char *s, size_t n) { resp_delta(j, RB_MESSAGE, s, n); }

static void resp_call(sv_job *j, size_t index, const sv_call *c)
{
    (void)index;
    resp_close_block(j);
    int k = j->n_blocks++;
    jo *o = json_object_new_object();
    json_object_object_add(o, "output_index", json_object_new_int(k));
    json_object_object_add(o, "item", call_item(j, k, c));
    resp_event(j, "response.output_item.added", o);
    o = json_object_new_object();
    json_object_object_add(o, "item_id", resp_item_id(j, "fc", k));
    json_object_object_add(o, "output_index", json_object_new_int(k));
    json_object_object_add(o, "arguments", s0(c->args));
    resp_event(j, "response.function_call_arguments.done", o);
    o = json_object_new_object();
    json_object_object_add(o, "output_index", json_object_new_int(k));
    json_object_object_add(o, "item", call_item(j, k, c));
    resp_event(j, "response.output_item.done", o);
}

/* The final response lists only items the stream announced (added …
 * done), in their order. A failure ends in response.failed, its error in
 * the response, as the Responses API reports one (the official clients and
 * Codex read it there). */
static void resp_end(sv_job *j)
{
    if (resp_has_message(j) && !j->text.len) resp_open(j, RB_MESSAGE);
    resp_close_block(j);
    jo *o = json_object_new_object();
    json_object_object_add(o, "response", response(j, true));
    resp_event(j, j->finish == SV_FINISH_ERROR    ? "response.failed"
                  : j->finish == SV_FINISH_LENGTH ? "response.incomplete"
                                                  : "response.completed",
               o);
}

static char *resp_body(sv_job *j)
{
    return take_json(response(j, true));
}

const sv_writer sv_writer_responses = { resp_begin, resp_think, resp_text, resp_call, resp_end, resp_body };
