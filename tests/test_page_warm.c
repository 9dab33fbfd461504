/* Reading the weights into memory before the first prompt (page_warm):
 * progress up to the whole file, every page in memory afterwards, pages
 * already there skipped, and clear errors. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/page_warm.h"
#include "tests/test.h"

typedef struct {
    int calls;
    uint64_t last_done, total;
    bool monotonic;
} warm_log;

static void record(void *ud, uint64_t done, uint64_t total)
{
    warm_log *l = ud;
    if (l->calls && (done < l->last_done || total != l->total)) l->monotonic = false;
    l->calls++;
    l->last_done = done;
    l->total = total;
}

/* Bytes of path that are in memory now. */
static uint64_t resident_bytes(const char *path)
{
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    size_t size = (size_t)st.st_size, page = (size_t)sysconf(_SC_PAGESIZE), pages = (size + page - 1) / page;
    void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    CHECK(m != MAP_FAILED);
    unsigned char *vec = malloc(pages);
    CHECK(mincore(m, size, vec) == 0);
    uint64_t n = 0;
    for (size_t i = 0; i < pages; i++)
        if (vec[i] & 1) n += i + 1 < pages ? page : size - i * page;
    free(vec);
    munmap(m, size);
    return n;
}

TEST(model_load, weights_are_read_into_memory_with_progress)
{
    /* 150 MiB and a bit: three chunks and a partial page */
    const size_t size = (150u << 20) + 1234;
    const char *path = test_tmp_path("weights.bin");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    char *block = malloc(1 << 20);
    for (size_t i = 0; i < (1u << 20); i++) block[i] = (char)(i * 7);
    for (size_t done = 0; done < size;) {
        size_t n = size - done < (1u << 20) ? size - done : (1u << 20);
        CHECK(write(fd, block, n) == (ssize_t)n);
        done += n;
    }
    free(block);
    CHECK(fsync(fd) == 0);
    /* out of the page cache, where the file system allows it */
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    uint64_t before = resident_bytes(path);

    warm_log log = { .monotonic = true };
    page_warm_stats st;
    ds4_error err = { "" };
    CHECK_MSG(page_warm(path, record, &log, &st, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(st.bytes, size);
    CHECK_EQ_INT(log.total, size);
    CHECK_EQ_INT(log.last_done, size);
    CHECK(log.monotonic);
    CHECK_EQ_INT(log.calls, 3);
    CHECK(st.resident_before <= before + (1u << 20)); /* readahead of others aside */
    CHECK_EQ_INT(resident_bytes(path), size);
    printf("%zu bytes, %llu in memory before, read in %.0f ms\n", size, (unsigned long long)before, st.ms);

    /* a second time everything is there already */
    log = (warm_log){ .monotonic = true };
    CHECK(page_warm(path, record, &log, &st, &err) == 0);
    CHECK_EQ_INT(st.resident_before, size);
    CHECK_EQ_INT(log.last_done, size);
}

TEST(model_load, page_warm_errors_and_empty_files)
{
    ds4_error err = { "" };
    page_warm_stats st;
    CHECK_EQ_INT(page_warm(test_tmp_path("missing.gguf"), NULL, NULL, &st, &err), -1);
    CHECK_CONTAINS(err.msg, "cannot open");
    CHECK_CONTAINS(err.msg, "missing.gguf");
    CHECK_EQ_INT(page_warm(test_tmpdir(), NULL, NULL, &st, &err), -1);
    CHECK_CONTAINS(err.msg, "not a regular file");
    const char *empty = test_tmp_path("empty");
    test_write_file(empty, "", 0);
    warm_log log = { .monotonic = true };
    CHECK_EQ_INT(page_warm(empty, record, &log, &st, &err), 0);
    CHECK_EQ_INT(st.bytes, 0);
    CHECK_EQ_INT(log.calls, 1);
    CHECK_EQ_INT(log.last_done, 0);
}
