/* trace.c — `--trace FILE`: an append-only log of tokens, tool calls,
 * results and state changes, one line each, flushed per line, every line
 * starting with the local time to the millisecond. Text is escaped so a
 * line is always one line: \\ \n \r \t \" and other control bytes as \xNN. */
#include "agent/agent_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

struct trace {
    FILE *f;
    pthread_mutex_t mu;
};

trace *trace_open(const char *path, ds4_error *err)
{
    FILE *f = fopen(path, "ae");
    if (!f) {
        ds4_error_set(err, "cannot open the trace file %s: %s", path, strerror(errno));
        return NULL;
    }
    trace *t = xcalloc(1, sizeof *t);
    t->f = f;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void trace_close(trace *t)
{
    if (!t) return;
    fclose(t->f);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

void trace_escape(strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\\': sb_puts(b, "\\\\"); break;
        case '\n': sb_puts(b, "\\n"); break;
        case '\r': sb_puts(b, "\\r"); break;
        case '\t': sb_puts(b, "\\t"); break;
        case '"': sb_puts(b, "\\\""); break;
        default:
            if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02x", c);
            else sb_putc(b, (char)c);
        }
    }
}

static void stamp(strbuf *b)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    time_t secs = tv.tv_sec;
    localtime_r(&secs, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    sb_printf(b, "%s.%03d ", when, (int)(tv.tv_usec / 1000));
}

static void write_line(trace *t, const strbuf *b)
{
    pthread_mutex_lock(&t->mu);
    fwrite(b->s, 1, b->len, t->f);
    fputc('\n', t->f);
    fflush(t->f);
    pthread_mutex_unlock(&t->mu);
}

void trace_line(trace *t, const char *fmt, ...)
{
    if (!t) return;
    strbuf msg = { 0 }, line = { 0 };
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(&msg, fmt, ap);
    va_end(ap);
    stamp(&line);
    /* Formatted values may hold anything; keep the line one line. */
    for (size_t i = 0; i < msg.len; i++) {
        unsigned char c = (unsigned char)msg.s[i];
        if (c == '\n') sb_puts(&line, "\\n");
        else if (c == '\r') sb_puts(&line, "\\r");
        else if (c < 0x20 && c != '\t') sb_printf(&line, "\\x%02x", c);
        else sb_putc(&line, (char)c);
    }
    write_line(t, &line);
    sb_free(&msg);
    sb_free(&line);
}

void trace_token(trace *t, const char *label, size_t index, int32_t id, const char *bytes, size_t len)
{
    if (!t) return;
    strbuf line = { 0 };
    stamp(&line);
    sb_printf(&line, "token %s index=%zu id=%d bytes=%zu text=\"", label, index, id, len);
    trace_escape(&line, bytes ? bytes : "", len);
    sb_puts(&line, "\" hex=");
    for (size_t i = 0; i < len; i++) sb_printf(&line, "%02x", (unsigned char)bytes[i]);
    write_line(t, &line);
    sb_free(&line);
}
