/* page_warm.c — see page_warm.h. */
#include "cli/page_warm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* Big enough that readahead streams, small enough that progress moves
 * several times a second on a slow disk. */
#define WARM_CHUNK (64u << 20)

int page_warm(const char *path, page_warm_fn fn, void *ud, page_warm_stats *st, ds4_error *err)
{
    double t0 = base_now_ms();
    page_warm_stats local = { 0 };
    if (!st) st = &local;
    memset(st, 0, sizeof *st);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ds4_error_set(err, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ds4_error_set(err, "%s is not a regular file", path);
        close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)sb.st_size;
    st->bytes = size;
    if (size == 0) {
        close(fd);
        if (fn) fn(ud, 0, 0);
        return 0;
    }
    unsigned char *map = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        ds4_error_set(err, "cannot map %s: %s", path, strerror(map_errno));
        return -1;
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t vec_len = WARM_CHUNK / page + 1;
    unsigned char *vec = xmalloc(2 * vec_len);
    unsigned char *cur = vec, *next = vec + vec_len;
    volatile unsigned char sink = 0;
    /* What is in memory is asked before the readahead of a chunk starts,
     * so resident_before counts only what was there already. */
    size_t len0 = size < WARM_CHUNK ? (size_t)size : WARM_CHUNK;
    bool cur_known = mincore(map, len0, cur) == 0;
    (void)madvise(map, len0, MADV_WILLNEED);
    for (uint64_t off = 0; off < size; off += WARM_CHUNK) {
        size_t len = size - off < WARM_CHUNK ? (size_t)(size - off) : WARM_CHUNK;
        /* the disk reads the next chunk while this one is touched */
        bool next_known = false;
        if (off + len < size) {
            uint64_t left = size - off - len;
            size_t nlen = left < WARM_CHUNK ? (size_t)left : WARM_CHUNK;
            next_known = mincore(map + off + len, nlen, next) == 0;
            (void)madvise(map + off + len, nlen, MADV_WILLNEED);
        }
        size_t pages = (len + page - 1) / page;
        for (size_t i = 0; i < pages; i++) {
            size_t in_page = i + 1 < pages ? page : len - i * page;
            if (cur_known && (cur[i] & 1)) {
                st->resident_before += in_page;
                continue;
            }
            sink ^= map[off + i * page];
        }
        if (fn) fn(ud, off + len, size);
        unsigned char *t = cur;
        cur = next;
        next = t;
        cur_known = next_known;
    }
    (void)sink;
    free(vec);
    munmap(map, (size_t)size);
    st->ms = base_now_ms() - t0;
    return 0;
}
