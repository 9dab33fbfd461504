/* base.h — the few helpers every module needs and none should write twice:
 * a growable string buffer, whole-file reads, atomic file replacement,
 * mkdir -p, the XDG directories of ds4cl, and a monotonic clock. */
#ifndef DS4CL_BASE_H
#define DS4CL_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

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

/* ---- files ---------------------------------------------------------------- */

/* Reads a whole file (NUL-terminated). NULL with errno set on failure. */
char *file_read_all(const char *path, size_t *len);

/* Replaces path with data atomically: write a temp file in the same
 * directory, fsync it, rename over path, fsync the directory. mode < 0 keeps
 * the mode of an existing file (0644 for a new one). Missing parent
 * directories are created when make_parents is true. On failure returns -1,
 * fills err, and leaves any existing file untouched. */
int file_write_atomic(const char *path, const void *data, size_t len, int mode,
                      bool make_parents, char *err, size_t errlen);

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
