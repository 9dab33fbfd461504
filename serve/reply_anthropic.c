/* reply_anthropic.c — replies in the shape of Anthropic's messages API:
 * a message with thinking, text and tool_use content blocks, or the
 * message_start … content_block_* … message_delta, message_stop events.
 * input_tokens counts the prompt tokens computed for this request and
 * cache_read_input_tokens those taken from the session or the cache, as
 * Anthropic's prompt caching reports them. */
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

#include "serve/serve_impl.h"

typedef struct json_object jo;

enum { AB_NONE = 0, AB_THINKING, AB_TEXT };

/* Thinking blocks carry a signature in this API; clients send it back
 * unread by the server, which keeps the reasoning tokens itself. */
#define SIGNATURE "ds4cl"

static jo *s0(const char *s)
{
    return json_object_new_string(s ? s : "");
}

static jo *sn(const char *s, size_t n)
{
    return json_object_new_string_len(s ? s : "", (int)n);
}

static jo *usage(const sv_job *j, bool start)
{
    jo *u = json_object_new_object();
    json_object_object_add(u, "input_tokens", json_object_new_int64((int64_t)j->prefilled));
    json_object_object_add(u, "cache_creation_input_tokens", json_object_new_int(0));
    json_object_object_add(u, "cache_read_input_tokens", json_object_new_int64((int64_t)j->cached_tokens));
    json_object_object_add(u, "output_tokens", json_object_new_int64(start ? 0 : (int64_t)j->completion_tokens));
    return u;
}

static jo *tool_use(const sv_call *c, bool empty_input)
{
    jo *b = json_object_new_object();
    json_object_object_add(b, "type", s0("tool_use"));
    json_object_object_add(b, "id", s0(c->id));
    json_object_object_add(b, "name", s0(c->name));
    jo *in = empty_input ? NULL : json_tokener_parse(c->args);
    json_object_object_add(b, "input", in ? in : json_object_new_object());
    return b;
}

static jo *message(sv_job *j, bool done)
{
    jo *o = json_object_new_object(), *content = json_object_new_array();
    char id[64];
    snprintf(id, sizeof id, "msg_%s", j->id);
    json_object_object_add(o, "id", s0(id));
    json_object_object_add(o, "type", s0("message"));
    json_object_object_add(o, "role", s0("assistant"));
    json_object_object_add(o, "model", s0(j->model));
    if (done) {
        if (j->reasoning.len) {
            jo *b = json_object_new_object();
            json_object_object_add(b, "type", s0("thinking"));
            json_object_object_add(b, "thinking", sn(j->reasoning.s, j->reasoning.len));
            json_object_object_add(b, "signature", s0(SIGNATURE));
            json_object_array_add(content, b);
        }
        if (j->text.len || !j->n_calls) {
            jo *b = json_object_new_object();
            json_object_object_add(b, "type", s0("text"));
            json_object_object_add(b, "text", sn(j->text.s, j->text.len));
            json_object_array_add(content, b);
        }
        for (size_t i = 0; i < j->n_calls; i++) json_object_array_add(content, tool_use(&j->calls[i], false));
    }
    json_object_object_add(o, "content", content);
    json_object_object_add(o, "stop_reason", done ? s0(j->stop_hit ? "stop_sequence" : sv_finish_anthropic(j->finish)) : NULL);
    json_object_object_add(o, "stop_sequence", done && j->stop_hit ? s0(j->stop_hit) : NULL);
    json_object_object_add(o, "usage", usage(j, !done));
    return o;
}

static void event(sv_job *j, const char *type, jo *o)
{
    json_object_object_add(o, "type", s0(type));
    sv_job_event(j, type, o);
}

static void close_block(sv_job *j)
{
    if (j->block < 0) return;
    if (j->block_kind == AB_THINKING) {
        jo *o = json_object_new_object(), *d = json_object_new_object();
        json_object_object_add(o, "index", json_object_new_int(j->block));
        json_object_object_add(d, "type", s0("signature_delta"));
        json_object_object_add(d, "signature", s0(SIGNATURE));
        json_object_object_add(o, "delta", d);
        event(j, "content_block_delta", o);
    }
    jo *o = json_object_new_object();
    json_object_object_add(o, "index", json_object_new_int(j->block));
    event(j, "content_block_stop", o);
    j->block = -1;
}

static void open_block(sv_job *j, int kind, jo *block)
{
    close_block(j);
    j->block = j->n_blocks++;
    j->block_kind = kind;
    jo *o = json_object_new_object();
    json_object_object_add(o, "index", json_object_new_int(j->block));
    json_object_object_add(o, "content_block", block);
    event(j, "content_block_start", o);
}

static void delta(sv_job *j, int kind, const char *s, size_t n)
{
    if (j->block < 0 || j->block_kind != kind) {
        jo *b = json_object_new_object();
        json_object_object_add(b, "type", s0(kind == AB_THINKING ? "thinking" : "text"));
        json_object_object_add(b, kind == AB_THINKING ? "thinking" : "text", s0(""));
        if (kind == AB_THINKING) json_object_object_add(b, "signature", s0(""));
        open_block(j, kind, b);
    }
    jo *o = json_object_new_object(), *d = json_object_new_object();
    json_object_object_add(o, "index", json_object_new_int(j->block));
    json_object_object_add(d, "type", s0(kind == AB_THINKING ? "thinking_delta" : "text_delta"));
    json_object_object_add(d, kind == AB_THINKING ? "thinking" : "text", sn(s, n));
    json_object_object_add(o, "delta", d);
    event(j, "content_block_delta", o);
}

static void a_begin(sv_job *j)
{
    jo *o = json_object_new_object();
    json_object_object_add(o, "message", message(j, false));
    event(j, "message_start", o);
}

static void a_think(sv_job *j, const char *s, size_t n) { delta(j, AB_THINKING, s, n); }
static void a_text(sv_job *j, const char *s, size_t n) { delta(j, AB_TEXT, s, n); }

static void a_call(sv_job *j, size_t index, const sv_call *c)
{
    (void)index;
    open_block(j, AB_NONE, tool_use(c, true));
    jo *o = json_object_new_object(), *d = json_object_new_object();
    json_object_object_add(o, "index", json_object_new_int(j->block));
    json_object_object_add(d, "type", s0("input_json_delta"));
    json_object_object_add(d, "partial_json", s0(c->args));
    json_object_object_add(o, "delta", d);
    event(j, "content_block_delta", o);
    close_block(j);
}

static void a_end(sv_job *j)
{
    close_block(j);
    if (j->finish == SV_FINISH_ERROR) {
        jo *o = json_object_new_object(), *e = json_object_new_object();
        /* overloaded_error: the official clients take it as worth a retry */
        json_object_object_add(e, "type", s0(j->shutdown ? "overloaded_error" : "api_error"));
        json_object_object_add(e, "message", s0(j->error));
        json_object_object_add(o, "error", e);
        event(j, "error", o);
        return;
    }
    jo *o = json_object_new_object(), *d = json_object_new_object(), *u = json_object_new_object();
    json_object_object_add(d, "stop_reason", s0(j->stop_hit ? "stop_sequence" : sv_finish_anthropic(j->finish)));
    json_object_object_add(d, "stop_sequence", j->stop_hit ? s0(j->stop_hit) : NULL);
    json_object_object_add(o, "delta", d);
    json_object_object_add(u, "output_tokens", json_object_new_int64((int64_t)j->completion_tokens));
    json_object_object_add(u, "input_tokens", json_object_new_int64((int64_t)j->prefilled));
    json_object_object_add(u, "cache_read_input_tokens", json_object_new_int64((int64_t)j->cached_tokens));
    json_object_object_add(o, "usage", u);
    event(j, "message_delta", o);
    event(j, "message_stop", json_object_new_object());
}

static char *a_body(sv_job *j)
{
    jo *o = message(j, true);
    char *s = sv_strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
    return s;
}

const sv_writer sv_writer_messages = { a_begin, a_think, a_text, a_call, a_end, a_body };
