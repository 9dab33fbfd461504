/* journal.c — framing, reading with damage recovery, and durable appends
 * of the session journal (format in journal.h). */
#include "sessions/journal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAGIC "DS4CLJNL"
#define FILE_VERSION 1u
#define REC_MAGIC 0x314e524au /* "JRN1" little-endian */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t journal_crc32(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    while (len--) crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

void journal_encode_header(strbuf *out)
{
    unsigned char h[JOURNAL_HEADER_LEN] = { 0 };
    memcpy(h, FILE_MAGIC, 8);
    le_put_u32(h + 8, FILE_VERSION);
    sb_append(out, (const char *)h, sizeof h);
}

static void put_bytes(strbuf *out, const void *p, size_t n)
{
    if (n) sb_append(out, p, n);
}

static void put_len(strbuf *out, size_t n)
{
    unsigned char b[4];
    le_put_u32(b, (uint32_t)n);
    sb_append(out, (const char *)b, 4);
}

void journal_encode(strbuf *out, const agent_turn *t)
{
    size_t start = out->len;
    unsigned char zero[JOURNAL_FRAME_LEN + JOURNAL_BODY_FIXED] = { 0 };
    sb_append(out, (const char *)zero, sizeof zero);
    put_bytes(out, t->text, t->len);
    for (size_t i = 0; i < t->n_tokens; i++) put_len(out, (uint32_t)t->tokens[i]);
    for (size_t i = 0; i < t->n_calls; i++) {
        const agent_tool_call *c = &t->calls[i];
        const char *name = c->name ? c->name : "", *args = c->args_json ? c->args_json : "";
        const char *res = c->result ? c->result : "";
        unsigned char flags[4] = { (unsigned char)((c->is_error ? 1 : 0) | (c->denied ? 2 : 0)), 0, 0, 0 };
        sb_append(out, (const char *)flags, 4);
        put_len(out, strlen(name));
        put_len(out, strlen(args));
        put_len(out, strlen(res));
        put_bytes(out, name, strlen(name));
        put_bytes(out, args, strlen(args));
        put_bytes(out, res, strlen(res));
    }
    size_t body_len = out->len - start - JOURNAL_FRAME_LEN;
    unsigned char *f = (unsigned char *)out->s + start;
    unsigned char *body = f + JOURNAL_FRAME_LEN;
    body[0] = (unsigned char)t->kind;
    le_put_u32(body + 4, (uint32_t)t->len);
    le_put_u64(body + 8, t->transcript_len);
    le_put_u32(body + 16, (uint32_t)t->n_tokens);
    le_put_u32(body + 20, (uint32_t)t->n_calls);
    le_put_u32(f, REC_MAGIC);
    le_put_u32(f + 4, (uint32_t)body_len);
    le_put_u32(f + 8, journal_crc32(0, body, body_len));
    le_put_u32(f + 12, journal_crc32(0, f, 12));
}

agent_turn journal_rec_turn(const journal_rec *r)
{
    agent_turn t = {
        .kind = r->kind, .text = r->text, .len = r->len, .tokens = r->tokens, .n_tokens = r->n_tokens,
        .transcript_len = (size_t)r->transcript_len, .calls = r->calls, .n_calls = r->n_calls,
    };
    return t;
}

static char *dup_bytes(const void *p, size_t n)
{
    char *s = xmalloc(n + 1);
    if (n) memcpy(s, p, n);
    s[n] = 0;
    return s;
}

agent_tool_call *tool_calls_dup(const agent_tool_call *calls, size_t n)
{
    if (!n) return NULL;
    agent_tool_call *v = xcalloc(n, sizeof *v);
    for (size_t i = 0; i < n; i++) {
        const char *name = calls[i].name ? calls[i].name : "", *args = calls[i].args_json ? calls[i].args_json : "";
        const char *res = calls[i].result ? calls[i].result : "";
        v[i].name = dup_bytes(name, strlen(name));
        v[i].args_json = dup_bytes(args, strlen(args));
        v[i].result = dup_bytes(res, strlen(res));
        v[i].is_error = calls[i].is_error;
        v[i].denied = calls[i].denied;
    }
    return v;
}

void tool_calls_free(agent_tool_call *calls, size_t n)
{
    for (size_t i = 0; calls && i < n; i++) {
        free((char *)calls[i].name);
        free((char *)calls[i].args_json);
        free((char *)calls[i].result);
    }
    free(calls);
}

/* Decodes the calls section [p, end): the calls, or false when it does
 * not fill the section exactly. */
static bool decode_calls(const unsigned char *p, const unsigned char *end, uint32_t n, journal_rec *rec)
{
    const unsigned char *q = p;
    for (uint32_t i = 0; i < n; i++) {
        if ((size_t)(end - q) < 16) return false;
        uint64_t a = le_get_u32(q + 4), b = le_get_u32(q + 8), c = le_get_u32(q + 12);
        if (a + b + c > (uint64_t)(end - q) - 16) return false;
        q += 16 + a + b + c;
    }
    if (q != end) return false;
    if (!rec || n == 0) return true;
    rec->calls = xcalloc(n, sizeof *rec->calls);
    rec->n_calls = n;
    q = p;
    for (uint32_t i = 0; i < n; i++) {
        size_t a = le_get_u32(q + 4), b = le_get_u32(q + 8), c = le_get_u32(q + 12);
        agent_tool_call *tc = &rec->calls[i];
        tc->is_error = q[0] & 1;
        tc->denied = (q[0] & 2) != 0;
        q += 16;
        tc->name = dup_bytes(q, a);
        tc->args_json = dup_bytes(q + a, b);
        tc->result = dup_bytes(q + a + b, c);
        q += a + b + c;
    }
    return true;
}

/* The length of a record that checks out at p (frame and body), else 0;
 * the decoded record in rec when non-NULL. */
static size_t record_at(const unsigned char *p, size_t avail, journal_rec *rec)
{
    if (avail < JOURNAL_FRAME_LEN || le_get_u32(p) != REC_MAGIC) return 0;
    if (le_get_u32(p + 12) != journal_crc32(0, p, 12)) return 0;
    uint32_t body_len = le_get_u32(p + 4);
    if (body_len < JOURNAL_BODY_FIXED || body_len > JOURNAL_MAX_BODY || body_len > avail - JOURNAL_FRAME_LEN) return 0;
    const unsigned char *body = p + JOURNAL_FRAME_LEN;
    if (le_get_u32(p + 8) != journal_crc32(0, body, body_len)) return 0;
    unsigned kind = body[0];
    uint32_t text_len = le_get_u32(body + 4), n_tokens = le_get_u32(body + 16), n_calls = le_get_u32(body + 20);
    uint64_t fixed = (uint64_t)JOURNAL_BODY_FIXED + text_len + 4ull * n_tokens;
    if (kind > AGENT_TURN_SYSTEM || fixed > body_len) return 0;
    if (!decode_calls(body + fixed, body + body_len, n_calls, NULL)) return 0;
    if (rec) {
        memset(rec, 0, sizeof *rec);
        rec->kind = (agent_turn_kind)kind;
        rec->len = text_len;
        rec->text = xmalloc((size_t)text_len + 1);
        memcpy(rec->text, body + JOURNAL_BODY_FIXED, text_len);
        rec->text[text_len] = 0;
        rec->n_tokens = n_tokens;
        rec->tokens = xmalloc((n_tokens ? n_tokens : 1) * sizeof *rec->tokens);
        const unsigned char *tp = body + JOURNAL_BODY_FIXED + text_len;
        for (uint32_t i = 0; i < n_tokens; i++) rec->tokens[i] = (int32_t)le_get_u32(tp + 4 * i);
        rec->transcript_len = le_get_u64(body + 8);
        decode_calls(body + fixed, body + body_len, n_calls, rec);
    }
    return JOURNAL_FRAME_LEN + body_len;
}

static void push(journal_scan *s, const journal_rec *r)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->recs = xrealloc(s->recs, s->cap * sizeof *s->recs);
    }
    s->recs[s->n++] = *r;
}

/* A frame header that checks out at p (its body may be damaged or cut
 * off): its kind when the body's first byte is there, else -1; -2 when
 * there is no frame. */
static int frame_kind_at(const unsigned char *p, size_t avail, uint32_t *body_len)
{
    if (avail < JOURNAL_FRAME_LEN || le_get_u32(p) != REC_MAGIC || le_get_u32(p + 12) != journal_crc32(0, p, 12)) return -2;
    *body_len = le_get_u32(p + 4);
    return avail > JOURNAL_FRAME_LEN ? p[JOURNAL_FRAME_LEN] : -1;
}

/* Counts the frames in [from, to) into lost_records and lost_user. */
static void count_lost(const unsigned char *data, size_t len, size_t from, size_t to, journal_scan *out)
{
    for (size_t at = from; at < to && at < len;) {
        uint32_t body_len;
        int kind = frame_kind_at(data + at, len - at, &body_len);
        if (kind == -2) {
            at++;
            continue;
        }
        out->lost_records++;
        if (kind == AGENT_TURN_USER) out->lost_user++;
        at += JOURNAL_FRAME_LEN;
    }
}

void journal_parse(const unsigned char *data, size_t len, journal_scan *out)
{
    memset(out, 0, sizeof *out);
    out->file_size = len;
    size_t pos = 0;
    if (len >= JOURNAL_HEADER_LEN && !memcmp(data, FILE_MAGIC, 8) && le_get_u32(data + 8) == FILE_VERSION) {
        pos = JOURNAL_HEADER_LEN;
    } else if (len > 0) {
        /* Not our header (damaged or another version): records are
         * self-describing, so look for them anyway. */
        out->bad_header = true;
    }
    out->valid_end = pos;
    while (pos < len) {
        journal_rec r;
        size_t n = record_at(data + pos, len - pos, &r);
        if (n) {
            push(out, &r);
            pos += n;
            out->valid_end = pos;
            continue;
        }
        /* Resynchronise on the next record that checks out. */
        size_t next = pos + 1;
        while (next < len && !record_at(data + next, len - next, NULL)) next++;
        if (next >= len) break;
        count_lost(data, len, pos, next, out);
        out->skipped += next - pos;
        out->damaged_spans++;
        pos = next;
    }
    out->torn = len - out->valid_end;
    if (out->torn) {
        size_t at = out->valid_end;
        uint32_t body_len = 0;
        int kind = frame_kind_at(data + at, len - at, &body_len);
        /* an append cut short leaves the start of a frame: its magic, or
         * as much of it as there is */
        unsigned char magic[4];
        le_put_u32(magic, REC_MAGIC);
        bool framed = !memcmp(data + at, magic, out->torn < 4 ? (size_t)out->torn : 4);
        out->torn_partial = framed && (out->torn < JOURNAL_FRAME_LEN ||
                                       (kind != -2 && (uint64_t)JOURNAL_FRAME_LEN + body_len > out->torn));
        out->tail_garbage = kind == -2 && !out->torn_partial;
        count_lost(data, len, at, len, out);
    }
}

void journal_encode_all(strbuf *out, const journal_rec *recs, size_t n)
{
    uint64_t tx = 0;
    for (size_t i = 0; i < n; i++) {
        agent_turn t = journal_rec_turn(&recs[i]);
        if (t.kind == AGENT_TURN_SYSTEM || t.kind == AGENT_TURN_REBUILD) tx = 0;
        tx += t.n_tokens;
        t.transcript_len = (size_t)tx;
        journal_encode(out, &t);
    }
}

int journal_read(const char *path, journal_scan *out)
{
    memset(out, 0, sizeof *out);
    size_t len;
    char *data = file_read_regular(path, &len);
    if (!data) return -1;
    journal_parse((const unsigned char *)data, len, out);
    free(data);
    return 0;
}

void journal_scan_free(journal_scan *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->recs[i].text);
        free(s->recs[i].tokens);
        tool_calls_free(s->recs[i].calls, s->recs[i].n_calls);
    }
    free(s->recs);
    memset(s, 0, sizeof *s);
}

int journal_append(int fd, const char *path, const void *data, size_t len, ds4_error *err)
{
    off_t start = lseek(fd, 0, SEEK_END);
    const char *what = "cannot append to the session journal";
    int rc = fd_write_all(fd, data, len);
    if (rc == 0 && fdatasync(fd) != 0) {
        what = "cannot sync the session journal";
        rc = -1;
    }
    if (rc != 0) {
        int e = errno;
        /* Whatever reached the file is not known to be durable: cut it
         * off, so that writing it again later cannot repeat it. When the
         * cut fails too, the next append cuts first (the caller knows
         * where the journal ends) and readers skip a torn record. */
        if (start >= 0) (void)!ftruncate(fd, start);
        ds4_error_set(err, "%s %s: %s", what, path, strerror(e));
        return -1;
    }
    return 0;
}
