/* tool_env.h — what the tools share inside tools/: the tool environment,
 * the pager behind `more`, the memory of shown lines behind stale-edit
 * checks, path resolution against the workspace, argument access and result
 * helpers. Not for use outside tools/ (the agent and UI use tools/tools.h).
 *
 * A tool_env is used by one thread at a time.
 */
#ifndef DS4CL_TOOL_ENV_H
#define DS4CL_TOOL_ENV_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "base/base.h"
#include "tools/tools.h"

struct json_object;
struct perm_rules;
struct job_table;
struct seen_file;
struct web_state;

/* Default cap of a result when ctx->max_result_bytes is 0. */
#define TOOL_DEFAULT_RESULT_BYTES (128u * 1024u)
/* Lines longer than this are cut in decorated output (read, search). */
#define TOOL_LINE_CAP 2000
/* Files larger than this are streamed by read and refused by edit. */
#define TOOL_EDIT_MAX_BYTES (64u * 1024u * 1024u)

/* A line of stored pager text that shows line `line` (0-based) of file
 * `file` (an index into the pager's file list): when `more` shows it, it
 * counts as shown for edits, provided the file is still the version the
 * pager recorded. */
typedef struct {
    size_t out_line;
    size_t file;
    size_t line;
    uint64_t hash;
} pager_mark;

typedef struct {
    char *path;
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
} pager_file;

typedef enum {
    PAGER_NONE = 0,
    PAGER_FILE, /* read: continue the file from a line (re-read from disk) */
    PAGER_TEXT, /* a stored output: continue it by lines */
    PAGER_WEB,  /* visit_page: the web_state keeps the rest of the page */
} pager_kind;

struct tool_env {
    tool_env_config cfg;       /* deep copy; strings owned */
    char *workspace;           /* realpath of cfg.workspace */
    size_t workspace_len;
    char *home;                /* $HOME, or NULL */
    char **allow;              /* copy of cfg.allow */
    struct perm_rules *rules;  /* file rules, then session rules */
    char *state_dir;           /* logs of bash jobs */
    bool state_dir_owned;      /* a temp dir we made: removed at free */

    struct {
        pager_kind kind;
        char *label;           /* path (file) or what produced the text */
        char *text;            /* PAGER_TEXT */
        size_t len;
        size_t next_line;      /* 0-based index of the first line not shown */
        size_t page_lines;     /* default count for `more` */
        bool raw;              /* PAGER_FILE: undecorated */
        pager_mark *marks;     /* PAGER_TEXT: sorted by out_line */
        size_t nmarks;
        pager_file *files;
        size_t nfiles;
    } pager;

    struct seen_file **seen;   /* open hash table keyed by absolute path */
    size_t seen_cap, seen_count;

    struct job_table *jobs;
    struct web_state *web;

    struct {
        int abi;               /* Landlock ABI, 0 when unavailable; -1 before probing */
        bool mount_ns;         /* .git/.ds4cl can be made read-only */
        bool noted;            /* the first bash result carried the status note */
        char status[256];
    } sandbox;
};

/* ---- pager (`more`) ---------------------------------------------------------------
 *
 * Any tool whose output did not fit can leave the rest for `more`. The
 * generic form is a text snapshot continued by lines:
 *
 *   tool_pager_set(env, "search 'foo'", text, len, shown_lines, page_lines);
 *
 * stores a copy of the complete output text; `more` then shows lines
 * shown_lines+1… of it, page_lines at a time unless it is given a count.
 * A later tool_pager_set (or a read that fills the pager) replaces it.
 * tool_pager_show() does the whole job for a tool: appends the first page
 * (and a footer that says how to continue) to out, and stores the rest. */
void tool_pager_set(tool_env *env, const char *label, const char *text, size_t len,
                    size_t shown_lines, size_t page_lines);
void tool_pager_show(tool_env *env, const char *label, const char *text, size_t len,
                     size_t page_lines, size_t max_bytes, strbuf *out);
/* Attaches marks (sorted by out_line) and their files to the text pager;
 * takes ownership of both arrays and the paths. */
void tool_pager_set_marks(tool_env *env, pager_mark *marks, size_t nmarks, pager_file *files,
                          size_t nfiles);
/* read's form: continue `path` (absolute) from 0-based line next_line. */
void tool_pager_set_file(tool_env *env, const char *path, size_t next_line,
                         size_t page_lines, bool raw);
/* The web tools keep the rest of a page themselves. */
void tool_pager_set_web(tool_env *env);
void tool_pager_clear(tool_env *env);

/* ---- lines ---------------------------------------------------------------------- */

/* A text split into lines: "\n", "\r\n" and a lone "\r" end a line; the
 * content excludes the terminator. A final line without terminator counts;
 * an empty text has no lines. */
typedef struct {
    size_t n;
    size_t *start;   /* offset of line i */
    size_t *len;     /* content length of line i */
    size_t *end;     /* offset after its terminator */
} line_index;

void lines_split(const char *text, size_t len, line_index *li);
void lines_free(line_index *li);
/* 0-based line containing byte offset off (off ≤ text length). */
size_t lines_at_offset(const line_index *li, size_t off);

/* Hash of a line's content for stale-edit checks; never 0. The three-step
 * form hashes a line that arrives in pieces: line_hash(s, n) ==
 * line_hash_end(line_hash_add(line_hash_begin(), s, n), n). */
uint64_t line_hash(const char *s, size_t n);
uint64_t line_hash_begin(void);
uint64_t line_hash_add(uint64_t h, const char *s, size_t n);
uint64_t line_hash_end(uint64_t h, size_t total_len);

/* Index of the first NUL byte within the first 8 KiB, or -1: git's test
 * for binary content. */
long text_binary_offset(const char *data, size_t len);

/* Appends s[0..n) making it safe to show: invalid UTF-8 becomes U+FFFD,
 * control characters other than tab become "^X"/"\x.." visibly. */
void sb_append_visible(strbuf *b, const char *s, size_t n);
/* Appends a line cut to cap bytes (at a UTF-8 boundary) with a visible
 * note; returns true when it was cut. */
bool sb_append_line_capped(strbuf *b, const char *s, size_t n, size_t cap);

/* Cuts text to max bytes keeping its head and tail with a visible note
 * in between (UTF-8 safe). No-op when it fits. */
void text_fit(strbuf *b, size_t max);

/* ---- shown lines (stale-edit protection) ----------------------------------------- */

/* Records that lines [first, first+count) of the file at abs_path (0-based)
 * were shown with these contents; hashes[i] is line_hash of line first+i. */
void seen_mark(tool_env *env, const char *abs_path, size_t first, size_t count,
               const uint64_t *hashes);
/* Marks the given lines of an indexed text. */
void seen_mark_text(tool_env *env, const char *abs_path, const char *text,
                    const line_index *li, size_t first, size_t count);
/* The remembered hash of 0-based line i, 0 when unknown. */
uint64_t seen_get(tool_env *env, const char *abs_path, size_t line);
/* After an edit replaced old lines [first, first+old_count) by new_count
 * lines: keeps what is before, drops the replaced lines, shifts the rest. */
void seen_splice(tool_env *env, const char *abs_path, size_t first, size_t old_count,
                 size_t new_count);
void seen_forget(tool_env *env, const char *abs_path);
void seen_clear(tool_env *env);
/* The file version (device, inode, size, modification time) the memory
 * belongs to. seen_sync forgets every line when the file changed since
 * (something else wrote it) and records st; seen_set_version only records
 * (after our own write, whose lines the caller has updated). */
struct stat;
void seen_sync(tool_env *env, const char *abs_path, const struct stat *st);
void seen_set_version(tool_env *env, const char *abs_path, const struct stat *st);
bool seen_version_matches(tool_env *env, const char *abs_path, const struct stat *st);

/* ---- paths ------------------------------------------------------------------------- */

/* Absolute, lexically normalised form of path (relative to the workspace;
 * "~/" expands to $HOME). Symlinks are not resolved. malloc'd. */
char *tool_abs_path(tool_env *env, const char *path);
/* Like tool_abs_path, then resolves symlinks in the longest existing prefix
 * (the final component too when it exists): where a write would land.
 * malloc'd. */
char *tool_real_target(tool_env *env, const char *path);
/* True when the resolved path is the workspace or below it. */
bool tool_in_workspace(tool_env *env, const char *real_path);
/* True for the workspace's .git and .ds4cl and anything below them. */
bool tool_in_protected(tool_env *env, const char *real_path);
/* Path for messages: relative to the workspace when below it, else as is.
 * Points into abs_path or a static "."; valid while abs_path is. */
const char *tool_display_path(tool_env *env, const char *abs_path);

/* Checks that abs_path is a regular file that can be opened for reading
 * and fills st; otherwise writes a tool error (missing — with similarly
 * named neighbours —, a directory, not a regular file, no permission)
 * and returns -1. */
int tool_check_regular(tool_env *env, const char *abs_path, struct stat *st, tool_result *out);
/* Appends " Similar names here: a, b." for a path that does not exist. */
void tool_suggest_names(const char *abs_path, strbuf *b);

/* ---- arguments --------------------------------------------------------------------
 * tools_run has checked names and types against the schema and converted
 * numbers and booleans given as strings, so these only look values up. */
const char *targ_str(struct json_object *args, const char *name);
bool targ_int(struct json_object *args, const char *name, long long *out);
bool targ_bool(struct json_object *args, const char *name, bool dflt);
bool targ_has(struct json_object *args, const char *name);

/* ---- results ------------------------------------------------------------------------ */

/* "Tool error: <message>"; returns -1. */
int tool_fail(tool_result *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Takes b's text as the result; returns 0. */
int tool_ok(tool_result *out, strbuf *b);
/* The result cap of this call. */
size_t tool_result_cap(const tool_call_ctx *ctx);
bool tool_cancelled(const tool_call_ctx *ctx);

/* Copies a one-line summary of s into buf: controls become spaces, long
 * text is cut with "…". */
void tool_summary_clip(char *buf, size_t size, const char *prefix, const char *s);

/* ---- tools (tools/<name>.c) ------------------------------------------------------- */

extern const tool_def tool_read, tool_more, tool_write, tool_edit, tool_list,
    tool_search, tool_bash, tool_bash_status, tool_bash_stop;

/* read's core, also used by `more` for PAGER_FILE. */
int read_file_range(tool_env *env, const char *abs_path, size_t start_line, size_t max_lines,
                    bool whole, bool raw, const tool_call_ctx *ctx, tool_result *out);

/* ---- policy (tools/policy.c) ----------------------------------------------------- */

int perm_rules_load(tool_env *env, ds4_error *err);
/* tools_policy, and *why = the rule that decided ("file:line"), or NULL. */
perm_decision perm_decide(tool_env *env, const tool_def *t, struct json_object *args,
                          const char **why);
void perm_rules_free(struct perm_rules *r);
/* True when a "deny read PATTERN" rule covers abs_path: search skips such
 * files. perm_has_read_denials says whether any such rule exists. */
bool perm_read_denied(tool_env *env, const char *abs_path);
bool perm_has_read_denials(tool_env *env);
/* Adds the session rule that answering "always" to this call means. */
void perm_add_session_rule(tool_env *env, const tool_def *t, struct json_object *args);
/* The reason a write/edit/bash call needs approval even when rules allow
 * the tool ("outside the workspace"), or NULL. */
const char *perm_ask_reason(tool_env *env, const tool_def *t, struct json_object *args);

/* ---- jobs and sandbox (tools/jobs.c, tools/sandbox.c) ---------------------------- */

void jobs_free(tool_env *env);
/* Probes Landlock and mount namespaces once; fills env->sandbox. */
void sandbox_probe(tool_env *env);
/* True when bash calls run sandboxed by default. */
bool sandbox_active(tool_env *env);

#endif
