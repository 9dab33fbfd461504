/* readable.h — web pages as text a model can read.
 *
 * The extraction itself runs inside the page (readable_page_js,
 * readable_search_js, evaluated in an isolated world so the page's own
 * scripts cannot tamper with it) and returns plain JSON: blocks of text
 * segments and link numbers, or search results. Everything here treats
 * that JSON as hostile: every string is cleaned to valid UTF-8 without
 * control or invisible formatting characters before it is rendered, and
 * the output is cut into parts that fit a byte budget.
 *
 * Rendered page text: headings "## …", list items "- …"/"1. …" (indented
 * by depth), quotes "> …", table rows "| a | b |", preformatted blocks
 * fenced with backticks, paragraphs as lines; a link is its text followed
 * by " [n]", and each part ends with "Links:" listing the URLs of the
 * numbers that part uses.
 */
#ifndef DS4CL_READABLE_H
#define DS4CL_READABLE_H

#include <stdbool.h>
#include <stddef.h>

#include "base/base.h"

struct json_object;

/* Expressions for Runtime.evaluate with returnByValue. */
extern const char readable_page_js[];
extern const char readable_search_js[];

/* Appends s to out as clean UTF-8: invalid sequences become U+FFFD; C0 and
 * C1 controls, DEL, bidirectional embeddings/overrides/isolates, zero-width
 * and invisible "tag" characters (used to hide instructions in text) are
 * dropped; no-break spaces become spaces. With keep_layout, newlines and
 * tabs stay (CR is dropped); without, they become spaces. */
void readable_clean(strbuf *out, const char *s, size_t len, bool keep_layout);

typedef struct readable_doc readable_doc;

/* Renders the value readable_page_js returned; NULL with a message when it
 * does not have the expected shape. */
readable_doc *readable_doc_new(struct json_object *value, ds4_error *err);
void readable_doc_free(readable_doc *d);

const char *readable_doc_title(const readable_doc *d); /* cleaned, one line */
const char *readable_doc_url(const readable_doc *d);
const char *readable_doc_type(const readable_doc *d);  /* MIME type of the document */
int readable_doc_status(const readable_doc *d);        /* HTTP status; 0 when unknown */
bool readable_doc_truncated(const readable_doc *d);    /* the extractor hit its limit */
size_t readable_doc_size(const readable_doc *d);       /* bytes of rendered text */
size_t readable_doc_offset(const readable_doc *d);     /* bytes handed out so far */
size_t readable_doc_link_count(const readable_doc *d);
const char *readable_doc_text(const readable_doc *d);  /* the whole rendered text */

/* Appends the next part to out: text up to a line boundary where possible,
 * then the "Links:" list of that part, together at most max_bytes (at
 * least some text is always taken). Returns the bytes of text consumed;
 * 0 when everything was handed out. */
size_t readable_doc_next(readable_doc *d, size_t max_bytes, strbuf *out);

/* Appends the results in the value readable_search_js returned as a
 * numbered list ("1. title\n   url\n   snippet"), stopping before
 * max_bytes; *count receives how many were written, *found how many the
 * page had. The page's title and text excerpt go to page_text (cleaned)
 * when not NULL, for messages about pages without results. */
void readable_search_format(struct json_object *value, size_t max_bytes, strbuf *out,
                            int *count, int *found, strbuf *page_text);

#endif
