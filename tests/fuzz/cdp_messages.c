/* Fuzz target: the DevTools messages the browser tools read.
 *
 * The input is a stream of WebSocket messages separated by NUL bytes (the
 * first MAX_MESSAGES of them), each
 * decoded as the session decodes it (cdp_msg_parse). A reply goes through
 * what cdp_call makes of it (cdp_reply_result); a "result.value" in it is
 * what the page extractor returned, and goes to the renderer of page text
 * and of search results (readable_doc_new, readable_doc_next,
 * readable_search_format), which treat it as hostile.
 * Checks: a decoded message printed and decoded again is the same message
 * of the same kind (printing is a fixed point); every error reads as a
 * printable sentence; rendered text is valid UTF-8 without control
 * characters other than newline and tab, and paging hands out the whole
 * text exactly once. Seeds: tests/fuzz/seeds/cdp_messages/, messages in the
 * shapes Chromium sends. */
#include <json-c/json.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cdp.h"
#include "tools/readable.h"

/* Messages read from one input: more would add cost, not coverage. */
#define MAX_MESSAGES 8

static void printable(const char *s)
{
    if (!*s) abort();
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) abort();
}

/* Valid UTF-8 without C0 controls (newline and tab allowed) or DEL. */
static void clean_text(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) abort();
            i++;
            continue;
        }
        size_t k = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
        if (!k || c > 0xf4 || i + k > n) abort();
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80) abort();
        i += k;
    }
}

static void render(json_object *value, size_t budget)
{
    ds4_error err = { "" };
    readable_doc *d = readable_doc_new(value, &err);
    if (!d) {
        printable(err.msg);
    } else {
        clean_text(readable_doc_title(d), strlen(readable_doc_title(d)));
        size_t total = 0, size = readable_doc_size(d);
        if (strlen(readable_doc_text(d)) != size) abort();
        clean_text(readable_doc_text(d), size);
        for (int part = 0;; part++) {
            strbuf out = { 0 };
            size_t n = readable_doc_next(d, budget, &out);
            clean_text(out.s ? out.s : "", out.len);
            sb_free(&out);
            if (!n) break;
            total += n;
            if (total > size || part > (int)size) abort();
        }
        if (total != size || readable_doc_offset(d) != size) abort();
        readable_doc_free(d);
    }
    strbuf list = { 0 }, page = { 0 };
    int count = 0, found = 0;
    readable_search_format(value, budget, &list, &count, &found, &page);
    clean_text(list.s ? list.s : "", list.len);
    clean_text(page.s ? page.s : "", page.len);
    if (count < 0 || (found >= 0 && count > found)) abort();
    sb_free(&list);
    sb_free(&page);
}

static void one(const char *msg, size_t len, size_t budget)
{
    /* An exact-size copy: the decoder gets a length, not a terminator. */
    char *copy = malloc(len ? len : 1);
    if (!copy) abort();
    memcpy(copy, msg, len);
    cdp_msg m;
    cdp_msg_parse(copy, len, &m);
    free(copy);
    if (m.kind == CDP_MSG_BAD) {
        if (m.obj || m.method) abort();
        printable(m.why);
        return;
    }
    if (!m.obj || (m.kind == CDP_MSG_EVENT) != (m.method != NULL)) abort();

    size_t n1;
    const char *p1 = json_object_to_json_string_length(m.obj, JSON_C_TO_STRING_PLAIN, &n1);
    cdp_msg again;
    cdp_msg_parse(p1, n1, &again);
    if (again.kind != m.kind || again.id != m.id) abort();
    if (m.method && strcmp(m.method, again.method)) abort();
    size_t n2;
    const char *p2 = json_object_to_json_string_length(again.obj, JSON_C_TO_STRING_PLAIN, &n2);
    if (n1 != n2 || memcmp(p1, p2, n1)) abort();
    cdp_msg_free(&again);

    if (m.kind == CDP_MSG_REPLY) {
        json_object *res = NULL, *r, *v;
        ds4_error err = { "" };
        int rc = cdp_reply_result(m.obj, "Runtime.evaluate", &res, &err);
        if (rc == CDP_ERROR) {
            if (res) abort();
            printable(err.msg);
        } else {
            if (rc != CDP_OK || !res || !json_object_is_type(res, json_type_object)) abort();
            if (json_object_object_get_ex(res, "result", &r) && json_object_object_get_ex(r, "value", &v))
                render(v, budget);
            json_object_put(res);
        }
    }
    cdp_msg_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The page budget varies with the input's length so that paging is
     * exercised at small sizes too. */
    size_t budget = 64 + (size % 7) * 300;
    const char *p = (const char *)data, *end = p + size;
    for (int k = 0; k < MAX_MESSAGES && p <= end; k++) {
        const char *z = memchr(p, 0, (size_t)(end - p));
        size_t n = z ? (size_t)(z - p) : (size_t)(end - p);
        one(p, n, budget);
        if (!z) break;
        p = z + 1;
    }
    return 0;
}
