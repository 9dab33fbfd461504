/* journal.h — the append-only record file of a session (internal to
 * sessions/).
 *
 * File: a 16-byte header ("DS4CLJNL", u32 version, u32 0), then records:
 *   u32 magic "JRN1" | u32 body length | u32 crc32(body) | u32 crc32(the
 *   12 bytes before) | body
 *   body: u8 kind | 3 zero bytes | u32 text length | u64 transcript
 *   length | u32 token count | u32 call count | text | i32 tokens[] |
 *   calls (TOOL records: u8 flags (1 error, 2 denied) | 3 zero bytes |
 *   u32 name length | u32 arguments length | u32 result length | name |
 *   arguments JSON | result)
 * all little-endian. The header checksum lets a reader trust a length
 * before reading that far; the body checksum covers the rest. A reader
 * keeps every record that checks out: an incomplete last record (the
 * process died while appending) is a torn tail, anything unreadable in
 * the middle is skipped up to the next record that checks out. Readers
 * open it without blocking and refuse anything but a regular file.
 */
#ifndef DS4CL_SESSIONS_JOURNAL_H
#define DS4CL_SESSIONS_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "base/base.h"

#define JOURNAL_HEADER_LEN 16u
#define JOURNAL_FRAME_LEN 16u
#define JOURNAL_BODY_FIXED 24u
#define JOURNAL_MAX_BODY (1u << 30)

typedef struct {
    agent_turn_kind kind;
    char *text;            /* NUL-terminated copy */
    size_t len;
    int32_t *tokens;
    size_t n_tokens;
    uint64_t transcript_len;
    agent_tool_call *calls; /* owned, NUL-terminated strings */
    size_t n_calls;
} journal_rec;

typedef struct {
    journal_rec *recs;
    size_t n, cap;
    uint64_t file_size;
    uint64_t valid_end;     /* offset after the last record that checked out */
    uint64_t skipped;       /* bytes of damaged spans before valid_end */
    size_t damaged_spans;
    uint64_t torn;          /* bytes after valid_end that form no record */
    bool bad_header;
    /* torn is what an append cut short leaves: the start of one record
     * (less than a frame, or a frame that checks out and runs past the
     * end), nothing else */
    bool torn_partial;
    /* torn is no record at all: bytes that do not begin with a record's
     * frame (garbage appended, a zero-filled tail), not a cut */
    bool tail_garbage;
    /* frames whose header checks out inside the skipped spans and the torn
     * tail (records that were there and could not be read), and how many
     * of them were user turns */
    size_t lost_records, lost_user;
} journal_scan;

uint32_t journal_crc32(uint32_t crc, const void *data, size_t len);

/* Reads and checks a journal. -1 with errno when the file cannot be read
 * (ENOENT: there is none); 0 otherwise, whatever its damage. */
int journal_read(const char *path, journal_scan *out);
/* The transcript length each record of recs should carry (SYSTEM and
 * REBUILD start over): the journal a repair writes adds up again. */
void journal_encode_all(strbuf *out, const journal_rec *recs, size_t n);
/* Decodes a journal held in memory (the same checks). */
void journal_parse(const unsigned char *data, size_t len, journal_scan *out);
void journal_scan_free(journal_scan *s);

/* The file header, and one framed record, appended to out. */
void journal_encode_header(strbuf *out);
void journal_encode(strbuf *out, const agent_turn *t);
/* A record as the agent_turn it was written from (pointing into r). */
agent_turn journal_rec_turn(const journal_rec *r);
/* Deep copies of tool calls, and their release. */
agent_tool_call *tool_calls_dup(const agent_tool_call *calls, size_t n);
void tool_calls_free(agent_tool_call *calls, size_t n);

/* Appends bytes and fdatasyncs; when either fails the file is cut back
 * to where it was. 0, or -1 with err naming path and the cause. */
int journal_append(int fd, const char *path, const void *data, size_t len, ds4_error *err);

#endif
