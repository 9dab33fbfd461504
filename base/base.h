/* base.h — the few helpers every module needs and none should write twice:
 * the error convention, allocation, little-endian fields, a growable
 * string buffer, byte counts for people, numbers read from text (the one
 * strict parser), whole-file reads, atomic file
 * replacement, mkdir -p, the XDG directories of ds4cl, and a clock. */
#ifndef DS4CL_BASE_H
#define DS4CL_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- errors ----------------------------------------------------------------
 * The convention across module boundaries: a function that can fail
 * returns -1 (or NULL) and writes why into a ds4_error the caller passes
 * (which may be NULL when the caller does not want the message). */
typedef struct {
    char msg[768];
} ds4_error;

/* Formats into err (no-op when err is NULL). Always returns -1 so callers
 * can `return ds4_error_set(err, ...)`. */
int ds4_error_set(ds4_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- allocation ---------------------------------------------------------------
 * The policy: running out of memory for bookkeeping (strings, lists, small
 * tables) is fatal — these print a message and abort, there is no sensible
 * recovery for a terminal program. Allocations sized by input (model
 * tensors, sessions, snapshots, files) use malloc directly and report a
 * failure as an error, so that a too-large request loses nothing. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s); /* NULL stays NULL */
char *xstrndup(const char *s, size_t n); /* at most n bytes of s, NUL-terminated */

/* ---- little-endian fields of on-disk formats ------------------------------ */
static inline void le_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void le_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t le_get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t le_get_u64(const unsigned char *p) { return le_get_u32(p) | (uint64_t)le_get_u32(p + 4) << 32; }

/* ---- string buffer (always NUL-terminated once anything was appended) ---- */
typedef struct {
    char *s;
    size_t len, cap;
} strbuf;

void sb_append(strbuf *b, const char *s, size_t n);
void sb_puts(strbuf *b, const char *s);
void sb_putc(strbuf *b, char c);
void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(strbuf *b, const char *fmt, va_list ap);
void sb_clear(strbuf *b);                 /* keeps the allocation */
char *sb_take(strbuf *b);                 /* returns the string ("" if empty), resets b */
void sb_free(strbuf *b);
const char *sb_str(const strbuf *b);      /* "" when empty */

/* A byte count for people: "512 B", "1.50 KiB", "12.3 MiB", "140 GiB". */
const char *format_bytes(char *buf, size_t n, uint64_t bytes);

/* ---- numbers read from text -------------------------------------------------
 * The one parser for numbers people type (flags, environment variables,
 * list items). Strict: the whole string is the number (no blanks around
 * it, no trailing text, not empty), it fits its type and lies in [lo, hi].
 * Each returns 0, or -1 with err saying why in words that name the text
 * ("'12x' is not a whole number", "'0' is not in 1..100"); the caller
 * prefixes the flag. *out is written only on success. */
int num_parse_long(const char *s, long lo, long hi, long *out, ds4_error *err);
int num_parse_int(const char *s, int lo, int hi, int *out, ds4_error *err);
/* Unsigned: a leading '-' is refused (strtoull would wrap it around). */
int num_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out, ds4_error *err);
/* Decimal or exponent notation; nan and inf are refused. */
int num_parse_double(const char *s, double lo, double hi, double *out, ds4_error *err);
/* A byte count: a number (fractions allowed) and an optional unit K, M, G,
 * T or P (powers of 1024; "G", "GB", "GiB" alike, any case), a blank
 * allowed between them: "123", "64G", "1.5T", "512MiB", "8 kB". */
int num_parse_size(const char *s, uint64_t *out, ds4_error *err);
/* A comma-separated list of whole numbers, each in [lo, hi], at most max
 * of them: their count (at least 1), or -1 with err (an empty item, a bad
 * one, or too many). */
int num_parse_list(const char *s, long lo, long hi, long *out, int max, ds4_error *err);

/* ---- files ---------------------------------------------------------------- */

/* Reads a whole file (NUL-terminated). NULL with errno set on failure. */
char *file_read_all(const char *path, size_t *len);
/* The same for a file that must be a regular one (session data): opened
 * without blocking, so a FIFO in its place cannot hang the caller; a
 * directory fails with EISDIR, anything else not regular with EINVAL. */
char *file_read_regular(const char *path, size_t *len);

/* Writes all of data to fd, going on after short writes and EINTR. 0, or
 * -1 with errno (what was written before the failure stays written). */
int fd_write_all(int fd, const void *data, size_t len);

/* Bytes an unprivileged writer may still put on the file system holding
 * path; UINT64_MAX when that cannot be told. */
uint64_t fs_free_bytes(const char *path);

/* Testing: after `bytes` more bytes written through fd_write_all (and so
 * file_write_atomic), writes fail with ENOSPC, and fs_free_bytes reports
 * at most what is left. Negative turns it off. The environment variable
 * DS4CL_FAULT_SPACE=BYTES sets it when the process first writes. */
void fault_space_set(int64_t bytes);

/* Replaces path with data atomically: write a temp file in the same
 * directory, fsync it, rename over path, fsync the directory. mode < 0 keeps
 * the mode of an existing file (0644 for a new one). Missing parent
 * directories are created when make_parents is true. On failure returns -1,
 * fills err, and leaves any existing file untouched. */
int file_write_atomic(const char *path, const void *data, size_t len, int mode,
                      bool make_parents, ds4_error *err);

/* The prefix of the temporary files file_write_atomic makes beside path
 * (".NAME.tmp.PID." in its directory: the PID tells a later process whether
 * the writer may still be running); -1 when it does not fit. */
int temp_prefix_for(char *buf, size_t size, const char *path);

/* Removes the temporary files of file_write_atomic under root (bounded:
 * at most max_entries directory entries are looked at, symlinks are not
 * followed) whose writer is gone: its PID runs no process, or runs one
 * that started after the file was last written. Returns how many. */
size_t temp_sweep(const char *root, size_t max_entries);

/* A template for mkstemp/mkdtemp in buf: prefix followed by the six
 * placeholder characters they replace. -1 (errno ENAMETOOLONG) when it
 * does not fit in size bytes. */
int temp_template(char *buf, size_t size, const char *prefix);

/* mkdir -p; 0 on success (also when it exists). */
int base_mkdir_p(const char *path, mode_t mode);

/* Removes a directory tree (no symlink following); 0 on success. */
int rm_rf(const char *path);

/* ---- XDG locations of ds4cl ("…/ds4cl"); created on first use ------------ */
typedef enum { XDG_DATA, XDG_CONFIG, XDG_CACHE, XDG_STATE } xdg_kind;

/* Writes e.g. "$XDG_DATA_HOME/ds4cl" (or "$HOME/.local/share/ds4cl") into
 * buf and creates it (mode 0700). Returns buf, or NULL when no home exists. */
const char *xdg_dir(xdg_kind kind, char *buf, size_t size);

/* ---- time ------------------------------------------------------------------ */
double base_now_ms(void);       /* monotonic */
int64_t base_wall_time_s(void); /* seconds since the epoch */

#endif
