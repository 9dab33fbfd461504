/* tools.h — the agent's tools behind one registry.
 *
 * Each tool (tools/<name>.c) gives a name, a description and JSON schema that
 * are rendered into the system prompt, a permission class, and a handler.
 * tools_run() is the only way the agent executes a call: it parses the
 * arguments, applies the permission policy (asking the front end through
 * the callback when a rule says "ask"), runs the handler with cancellation,
 * and always produces a result text for the model — errors included, as
 * plain text starting with "Tool error: ".
 *
 * A tool_env holds what persists between calls of one agent: the workspace
 * root, the permission policy, what `read`/`search` have shown (for `more`
 * and stale-edit checks), background bash jobs, the browser. Freeing it
 * stops every job and closes the browser. A tool_env is used by one thread
 * at a time; bash jobs started from a thread are stopped when that thread
 * exits (their supervisors watch it).
 *
 * Permissions
 * -----------
 * Read tools (read, more, search, list, bash_status, bash_stop) run
 * freely, except where a deny rule names their path (search skips files a
 * `deny read` rule covers). write, edit, bash, web_search and visit_page
 * are decided in this order:
 *   1. a matching deny rule denies;
 *   2. write/edit of a path outside the workspace or inside its .git or
 *      .ds4cl (symlinks resolved) asks, unless an allow rule that names
 *      that path (a pattern, not a bare tool rule) matches — --yes and
 *      --allow do not cover these;
 *   3. a matching ask rule asks; a matching allow rule allows;
 *   4. --yes (yes_to_all) or --allow TOOL allows;
 *   5. bash running in the sandbox (see below) is allowed;
 *   6. anything else asks.
 * "ask" with no way to ask (interactive false or no confirm callback)
 * becomes a denial whose text says how to allow the call. An "always"
 * answer adds a session rule (tools_always_rule shows which).
 *
 * Rules files are read at tool_env_new, in this order: XDG config
 * (…/ds4cl/rules), the workspace's .ds4cl/rules, then rules_path. One rule
 * per line, `#` starts a comment:
 *
 *   allow|ask|deny TOOL [PATTERN]
 *
 * TOOL is a tool name or `*`. Without PATTERN the rule covers every call of
 * the tool. For bash, PATTERN is a command prefix in shell words, each a
 * glob for one word ("git status", "npm run *", "rm"); a first word
 * without '/' also matches by base name ("rm" covers /bin/rm). A command
 * line is split into its simple commands (;, &&, ||, |, &, newlines,
 * $( ), backticks, subshells, process substitution): it is allowed only
 * when every one is allowed by a rule or is an effect-free builtin (cd,
 * echo, printf, test, true, …); one denied part denies it, one asked part
 * asks. Deny and ask rules also look through wrappers (sudo, env, xargs,
 * timeout, …) and into `sh -c '…'`. Unsandboxed, an allow rule does not
 * cover a command that redirects output into a file or sets PATH, LD_*
 * and the like. For read/write/edit/list/search PATTERN is a path glob
 * (gitignore syntax with **; relative to the workspace, or absolute, or
 * ~/…) matched against the path and its parent directories; for
 * visit_page a URL glob, for web_search a query glob.
 *
 * Sandbox
 * -------
 * With cfg->sandbox and a kernel with Landlock, bash commands can write
 * only below the workspace, the temp directories (writable_dirs) and a
 * few devices; they read and execute anything; .git and .ds4cl in the
 * workspace are mounted read-only in a private mount namespace where the
 * kernel allows one. bash sandbox=false runs a command unconfined, which
 * asks like any unsandboxed command. Without Landlock every bash call
 * asks (unless rules allow it); tools_sandbox_status says which applies.
 */
#ifndef DS4CL_TOOLS_H
#define DS4CL_TOOLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

struct json_object;
typedef struct tool_env tool_env;

typedef enum {
    TOOL_CLASS_READ = 0, /* runs freely */
    TOOL_CLASS_WRITE,    /* asks unless allowed */
    TOOL_CLASS_EXEC,
    TOOL_CLASS_NETWORK,
} tool_class;

typedef enum {
    TOOL_CONFIRM_NO = 0,
    TOOL_CONFIRM_YES,
    TOOL_CONFIRM_ALWAYS, /* yes, and allow this rule for the rest of the session */
    TOOL_CONFIRM_TIMEOUT, /* nobody answered in time: no */
} tool_confirm;

/* Per-call context supplied by the agent. Every callback may be NULL. */
typedef struct {
    /* Polled often; true aborts the call within ~100 ms. */
    bool (*cancelled)(void *ud);
    /* Live output while the tool runs (e.g. the tail of a bash log). */
    void (*progress)(void *ud, const char *text, size_t len);
    /* Permission question for the front end; summary is one line such as
     * "bash: make test". NULL (non-interactive) means the policy decides
     * alone and "ask" becomes "deny". */
    tool_confirm (*confirm)(void *ud, const char *tool, const char *summary);
    void *ud;
    /* Upper bound for the result text in bytes, derived from the context
     * room left; tools cap or paginate their output to fit. 0 = default. */
    size_t max_result_bytes;
} tool_call_ctx;

typedef struct {
    char *text;     /* malloc'd; what the model sees */
    bool is_error;  /* text starts with "Tool error: " */
    bool denied;    /* refused by the permission policy or the user */
} tool_result;

typedef struct tool_def {
    const char *name;
    const char *description;
    const char *parameters_schema; /* JSON Schema object of the parameters */
    tool_class cls;
    /* args is a JSON object (validated against nothing yet); writes the
     * result into out; returns 0 on success, -1 when out->text is an error. */
    int (*run)(tool_env *env, struct json_object *args, const tool_call_ctx *ctx, tool_result *out);
    /* One-line summary for permission questions and UI ("bash: make"). */
    void (*summarize)(struct json_object *args, char *buf, size_t size);
} tool_def;

/* ---- registry ---------------------------------------------------------------- */

/* All tools in prompt order; *n receives the count. */
const tool_def *const *tools_all(size_t *n);
const tool_def *tools_find(const char *name);

/* {"name":…,"description":…,"parameters":…} for the system prompt;
 * malloc'd. */
char *tools_schema_json(const tool_def *t);

/* ---- environment and policy --------------------------------------------------- */

typedef enum { PERM_ALLOW = 0, PERM_ASK, PERM_DENY } perm_decision;

typedef struct {
    const char *workspace;     /* absolute path; writes outside it always ask */
    bool yes_to_all;           /* --yes */
    const char *const *allow;  /* --allow TOOL… (NULL-terminated), may be NULL */
    const char *rules_path;    /* extra rules file, read after the XDG config and workspace ones */
    bool interactive;          /* false: never ask, "ask" becomes deny */
    bool sandbox;              /* run bash under Landlock when available */
    const char *state_dir;     /* per-session dir for logs, browser profile; NULL = temp */
    const char *cdp_url;       /* attach to a running browser instead of starting one */
    const char *browser_path;  /* browser executable; NULL = search PATH */
    const char *search_url;    /* web_search template with {query}; NULL = default */
    /* Directories a sandboxed bash may write besides the workspace
     * (NULL-terminated). NULL = /tmp, /var/tmp, /dev/shm and $TMPDIR; an
     * empty list = none. */
    const char *const *writable_dirs;
} tool_env_config;

tool_env *tool_env_new(const tool_env_config *cfg, ds4_error *err);
void tool_env_free(tool_env *env);

/* The decision the policy takes for a call before asking anyone. */
perm_decision tools_policy(tool_env *env, const tool_def *t, struct json_object *args);

/* Executes one call: name and the raw JSON object text of its arguments.
 * Never fails to produce out->text (unknown tool, bad JSON, denial and
 * cancellation are all results). */
void tools_run(tool_env *env, const char *name, const char *args_json,
               const tool_call_ctx *ctx, tool_result *out);

void tool_result_free(tool_result *r);

/* ---- additions for front ends and the agent ------------------------------------ */

/* The rule an "always" answer to this call would add, as text
 * ("allow bash make test"); malloc'd. */
char *tools_always_rule(tool_env *env, const tool_def *t, struct json_object *args);

/* One line saying how bash commands are confined (or why they are not). */
const char *tools_sandbox_status(tool_env *env);
/* True when bash commands run sandboxed by default; false when the
 * sandbox is off or the kernel has no Landlock (then every bash call
 * needs approval or a rule). */
bool tools_sandbox_active(tool_env *env);

/* Jobs the model should hear about (e.g. after a compaction): one line per
 * running job and per finished job whose end it has not seen; malloc'd,
 * NULL when there is none. Also reaps finished jobs. */
char *tools_jobs_report(tool_env *env);
/* Running bash jobs (reaps finished ones). */
size_t tools_jobs_running(tool_env *env);

/* Forgets what read/search have shown (the `more` state and the lines
 * that line edits may replace), as when the conversation is reset. */
void tool_env_reset_views(tool_env *env);

const char *tool_env_workspace(tool_env *env);
/* Where job logs live (cfg->state_dir, or a temp dir removed at free). */
const char *tool_env_state_dir(tool_env *env);

#endif
