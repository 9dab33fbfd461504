/* libFuzzer target for the server's request parser.
 *
 * First byte: the API (chat completions, messages, responses); the rest is
 * the request body. Whatever parses must be a well-formed conversation:
 * tool schemas and call arguments are JSON objects, every tool result
 * follows an assistant message with calls (system messages may stand
 * between); whatever does not parse must say why. Seeds
 * (tests/fuzz/seeds/serve_request/) are bodies of the three APIs with
 * tools, tool calls and results, three of them sent by Claude Code, Codex
 * CLI and opencode. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void must_be_object(const char *text)
{
    struct json_object *o = json_tokener_parse(text);
    if (!o || !json_object_is_type(o, json_type_object)) abort();
    json_object_put(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    serve_api api = (serve_api)(data[0] % 3);
    ds4_error err = { "" };
    serve_request *r = serve_request_parse(api, (const char *)data + 1, size - 1, &err);
    if (!r) {
        if (!err.msg[0]) abort();
        return 0;
    }
    for (size_t i = 0; i < r->n_tools; i++) must_be_object(r->tools[i]);
    for (size_t i = 0; i < r->n_msgs; i++) {
        const sv_msg *m = &r->msgs[i];
        for (size_t k = 0; k < m->n_calls; k++) {
            if (!m->calls[k].name) abort();
            must_be_object(m->calls[k].args);
        }
        if (m->role == SV_TOOL) {
            size_t k = i;
            while (k > 0 && (r->msgs[k - 1].role == SV_TOOL || r->msgs[k - 1].role == SV_SYSTEM)) k--;
            if (k == 0 || r->msgs[k - 1].role != SV_ASSISTANT || !r->msgs[k - 1].n_calls) abort();
        }
    }
    serve_request_free(r);
    return 0;
}
