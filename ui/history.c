/* history.c — the persisted input history (see editor.h). */
#include "ui/editor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

static void unescape_into(strbuf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            i++;
            sb_putc(b, s[i] == 'n' ? '\n' : s[i]);
        } else {
            sb_putc(b, s[i]);
        }
    }
}

static void push(ui_history *h, char *s)
{
    char **grown = xrealloc(h->v, (h->n + 1) * sizeof *grown);
    h->v = grown;
    h->v[h->n++] = s;
}

static void clear(ui_history *h)
{
    for (size_t i = 0; i < h->n; i++) free(h->v[i]);
    h->n = 0;
}

static void load(ui_history *h)
{
    size_t len;
    char *text = h->path ? file_read_all(h->path, &len) : NULL;
    if (!text) return;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t end = nl ? (size_t)(nl - text) : len;
        if (end > i) {
            strbuf b = { 0 };
            unescape_into(&b, text + i, end - i);
            push(h, sb_take(&b));
        }
        i = end + 1;
    }
    free(text);
    /* a file that grew past the limit elsewhere */
    if (h->n > UI_HISTORY_MAX) {
        size_t drop = h->n - UI_HISTORY_MAX;
        for (size_t i = 0; i < drop; i++) free(h->v[i]);
        memmove(h->v, h->v + drop, UI_HISTORY_MAX * sizeof *h->v);
        h->n = UI_HISTORY_MAX;
    }
}

void ui_history_open(ui_history *h, const char *path)
{
    memset(h, 0, sizeof *h);
    if (path) h->path = xstrdup(path);
    load(h);
}

void ui_history_close(ui_history *h)
{
    clear(h);
    free(h->v);
    free(h->path);
    memset(h, 0, sizeof *h);
}

int ui_history_add(ui_history *h, const char *text, ds4_error *err)
{
    bool blank = true;
    for (const char *p = text; *p && blank; p++) blank = *p == ' ' || *p == '\n' || *p == '\t';
    if (blank) return 0;
    if (h->path) {
        /* what other processes added meanwhile */
        clear(h);
        load(h);
    }
    for (size_t i = 0; i < h->n; i++) {
        if (strcmp(h->v[i], text)) continue;
        free(h->v[i]);
        memmove(h->v + i, h->v + i + 1, (h->n - i - 1) * sizeof *h->v);
        h->n--;
        break;
    }
    push(h, xstrdup(text));
    if (h->n > UI_HISTORY_MAX) {
        free(h->v[0]);
        memmove(h->v, h->v + 1, (h->n - 1) * sizeof *h->v);
        h->n--;
    }
    if (!h->path) return 0;
    strbuf b = { 0 };
    for (size_t i = 0; i < h->n; i++) {
        for (const char *p = h->v[i]; *p; p++) {
            if (*p == '\\') sb_puts(&b, "\\\\");
            else if (*p == '\n') sb_puts(&b, "\\n");
            else if (*p != '\r') sb_putc(&b, *p);
        }
        sb_putc(&b, '\n');
    }
    int rc = file_write_atomic(h->path, b.s ? b.s : "", b.len, 0600, true, err);
    sb_free(&b);
    return rc;
}
