/* tokenizer_gguf.c — the tokenizer of a GGUF file: tokenizer.ggml.tokens
 * and tokenizer.ggml.merges, read from the metadata section only (the
 * tensor data is never touched). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/tokenizer.h"

typedef struct {
    const unsigned char *p, *start, *end;
    const char *path;
    ds4_error *err;
    bool failed;
} cursor;

static bool need(cursor *c, uint64_t n, const char *what)
{
    if (c->failed) return false;
    if ((uint64_t)(c->end - c->p) < n) {
        ds4_error_set(c->err, "%s: truncated GGUF metadata (%s at byte %zu)", c->path, what,
                      (size_t)(c->p - c->start));
        c->failed = true;
        return false;
    }
    return true;
}

static uint64_t rd(cursor *c, int n, const char *what)
{
    if (!need(c, (uint64_t)n, what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)c->p[i] << (8 * i);
    c->p += n;
    return v;
}

static const char *rd_str(cursor *c, size_t *len, const char *what)
{
    uint64_t n = rd(c, 8, what);
    if (!need(c, n, what)) return NULL;
    const char *s = (const char *)c->p;
    c->p += n;
    *len = (size_t)n;
    return s;
}

static void skip_value(cursor *c, uint32_t type, bool nested)
{
    static const int size[] = { 1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8 };
    if (c->failed) return;
    if (type > 12 || (type == 9 && nested)) {
        ds4_error_set(c->err, "%s: bad GGUF value type %u at byte %zu", c->path, type, (size_t)(c->p - c->start));
        c->failed = true;
        return;
    }
    if (type == 8) {
        size_t len;
        rd_str(c, &len, "string value");
    } else if (type == 9) {
        uint32_t et = (uint32_t)rd(c, 4, "array type");
        uint64_t n = rd(c, 8, "array length");
        if (et != 8 && et <= 12 && et != 9) {
            if (need(c, n * (uint64_t)size[et], "array")) c->p += n * (uint64_t)size[et];
            return;
        }
        for (uint64_t i = 0; i < n && !c->failed; i++) skip_value(c, et, true);
    } else {
        rd(c, size[type], "value");
    }
}

ds4_tokenizer *ds4_tokenizer_open(const char *gguf_path, ds4_error *err)
{
    /* Mapped, not read: a model file is tens of GB and only the metadata
     * pages at its start are touched. */
    int fd = open(gguf_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ds4_error_set(err, "cannot open %s: %s", gguf_path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 24) {
        ds4_error_set(err, "%s is not a GGUF file", gguf_path);
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    char *data = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (data == MAP_FAILED) {
        ds4_error_set(err, "cannot map %s: %s", gguf_path, strerror(errno));
        return NULL;
    }
    cursor c = { (const unsigned char *)data, (const unsigned char *)data, (const unsigned char *)data + size,
                 gguf_path, err, false };
    const char **arrays[2] = { NULL, NULL };
    size_t *lens[2] = { NULL, NULL }, counts[2] = { 0, 0 };
    ds4_tokenizer *t = NULL;
    if (rd(&c, 4, "magic") != 0x46554747u) {
        if (!c.failed) ds4_error_set(err, "%s is not a GGUF file", gguf_path);
        goto done;
    }
    uint32_t version = (uint32_t)rd(&c, 4, "version");
    if (!c.failed && version != 3) {
        ds4_error_set(err, "%s: GGUF version %u is not supported", gguf_path, version);
        goto done;
    }
    rd(&c, 8, "tensor count");
    uint64_t nkv = rd(&c, 8, "metadata count");
    for (uint64_t k = 0; k < nkv && !c.failed; k++) {
        size_t klen = 0;
        const char *key = rd_str(&c, &klen, "key");
        uint32_t type = (uint32_t)rd(&c, 4, "value type");
        if (c.failed) break;
        int which = klen == 21 && !memcmp(key, "tokenizer.ggml.tokens", 21) ? 0
                  : klen == 21 && !memcmp(key, "tokenizer.ggml.merges", 21) ? 1 : -1;
        if (which < 0) {
            skip_value(&c, type, false);
            continue;
        }
        uint32_t et = type == 9 ? (uint32_t)rd(&c, 4, "array type") : 0;
        if (!c.failed && (type != 9 || et != 8)) {
            ds4_error_set(err, "%s: %.*s is not an array of strings", gguf_path, (int)klen, key);
            goto done;
        }
        uint64_t n = rd(&c, 8, "array length");
        if (!need(&c, n * 8, key) || arrays[which]) {
            if (!c.failed) ds4_error_set(err, "%s: %.*s appears twice", gguf_path, (int)klen, key);
            goto done;
        }
        arrays[which] = malloc((size_t)n * sizeof(char *) + 1);
        lens[which] = malloc((size_t)n * sizeof(size_t) + 1);
        if (!arrays[which] || !lens[which]) abort();
        counts[which] = (size_t)n;
        for (size_t i = 0; i < n && !c.failed; i++) arrays[which][i] = rd_str(&c, &lens[which][i], key);
    }
    if (c.failed) goto done;
    if (!arrays[0]) {
        ds4_error_set(err, "%s has no tokenizer.ggml.tokens", gguf_path);
        goto done;
    }
    if (!arrays[1]) {
        ds4_error_set(err, "%s has no tokenizer.ggml.merges", gguf_path);
        goto done;
    }
    t = tokenizer_build(arrays[0], lens[0], counts[0], arrays[1], lens[1], counts[1], err);
    if (!t && err) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        ds4_error_set(err, "%s: %s", gguf_path, msg);
    }
done:
    for (int i = 0; i < 2; i++) {
        free(arrays[i]);
        free(lens[i]);
    }
    munmap(data, size);
    return t;
}
