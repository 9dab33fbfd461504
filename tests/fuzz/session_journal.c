/* Fuzz target: the session journal reader (journal_parse, what
 * session_open reads) over arbitrary bytes.
 *
 * First byte: bit 0 set makes the target repair the checksums of every
 * frame whose magic and length fit before parsing, so mutations reach the
 * record bodies instead of stopping at a checksum; the rest is the file.
 * Checks: the scan's offsets add up; the prefix up to valid_end reads as
 * the same records with nothing torn; the records written out again
 * (journal_encode) read back as the same records, undamaged; the metadata
 * derived from them is one bounded line. Seeds: tests/fuzz/seeds/
 * session_journal/ (tests/fuzz/mkseeds.sh). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sessions/journal.h"
#include "sessions/store_impl.h"

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Recomputes both checksums of each frame with the record magic and a
 * body length that fits; skips over the bodies it fixed. */
static void fix_checksums(uint8_t *d, size_t len)
{
    size_t pos = 0;
    while (pos + JOURNAL_FRAME_LEN <= len) {
        uint32_t body = rd32(d + pos + 4);
        if (memcmp(d + pos, "JRN1", 4) || body > len - pos - JOURNAL_FRAME_LEN) {
            pos++;
            continue;
        }
        wr32(d + pos + 8, journal_crc32(0, d + pos + JOURNAL_FRAME_LEN, body));
        wr32(d + pos + 12, journal_crc32(0, d + pos, 12));
        pos += JOURNAL_FRAME_LEN + body;
    }
}

static void same_calls(const journal_rec *a, const journal_rec *b)
{
    if (a->n_calls != b->n_calls) abort();
    for (size_t i = 0; i < a->n_calls; i++) {
        const agent_tool_call *x = &a->calls[i], *y = &b->calls[i];
        /* The writer stores each string up to its first NUL. */
        if (strcmp(x->name, y->name) || strcmp(x->args_json, y->args_json) || strcmp(x->result, y->result)) abort();
        if (x->is_error != y->is_error || x->denied != y->denied) abort();
    }
}

static void same_recs(const journal_scan *a, const journal_scan *b)
{
    if (a->n != b->n) abort();
    for (size_t i = 0; i < a->n; i++) {
        const journal_rec *x = &a->recs[i], *y = &b->recs[i];
        if (x->kind != y->kind || x->len != y->len || memcmp(x->text, y->text, x->len)) abort();
        if (x->text[x->len] || y->text[y->len]) abort();
        if (x->n_tokens != y->n_tokens || x->transcript_len != y->transcript_len) abort();
        if (x->n_tokens && memcmp(x->tokens, y->tokens, x->n_tokens * sizeof *x->tokens)) abort();
        same_calls(x, y);
    }
}

static void check_scan(const journal_scan *s, size_t len)
{
    if (s->file_size != len || s->valid_end > len || s->torn != len - s->valid_end) abort();
    if (s->skipped > s->valid_end || (s->skipped == 0) != (s->damaged_spans == 0)) abort();
    if (s->n == 0 && s->valid_end > JOURNAL_HEADER_LEN) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    size_t len = size - 1;
    /* An exact-size copy, so reading past the end is caught. */
    uint8_t *d = malloc(len ? len : 1);
    if (!d) abort();
    memcpy(d, data + 1, len);
    if (data[0] & 1) fix_checksums(d, len);

    journal_scan s;
    journal_parse(d, len, &s);
    check_scan(&s, len);

    if (s.torn) { /* otherwise the prefix is the whole input */
        journal_scan pre;
        journal_parse(d, (size_t)s.valid_end, &pre);
        if (pre.torn || (s.valid_end && pre.bad_header != s.bad_header)) abort();
        same_recs(&s, &pre);
        journal_scan_free(&pre);
    }

    strbuf out = { 0 };
    journal_encode_header(&out);
    for (size_t i = 0; i < s.n; i++) {
        agent_turn t = journal_rec_turn(&s.recs[i]);
        journal_encode(&out, &t);
    }
    journal_scan back;
    journal_parse((const unsigned char *)out.s, out.len, &back);
    if (back.bad_header || back.damaged_spans || back.torn || back.valid_end != out.len) abort();
    same_recs(&s, &back);
    journal_scan_free(&back);
    sb_free(&out);

    session_info info;
    memset(&info, 0, sizeof info);
    session_meta_from_journal(&s, &info);
    size_t tl = strnlen(info.title, sizeof info.title);
    if (tl >= sizeof info.title || memchr(info.title, '\n', tl)) abort();

    journal_scan_free(&s);
    free(d);
    return 0;
}
