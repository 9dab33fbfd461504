/* policy.c — permission rules: loading the rules files, matching a call
 * against them, the defaults per tool class, and the session rules that
 * an "always" answer adds. The format is described in tools/tools.h and
 * README.md. */
#include "tools/tool_env.h"

#include "tools/glob.h"
#include "tools/shellparse.h"

#include <errno.h>
#include <fnmatch.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    perm_decision action;
    char *tool;           /* NULL = every tool */
    char **argv;          /* bash: command prefix pattern; NULL = any command */
    size_t argc;
    char *pattern;        /* other tools: glob on the subject; NULL = any */
    char *exact;          /* session rule for one exact bash command line */
    char *where;          /* "file:line" or "session" */
} perm_rule;

struct perm_rules {
    perm_rule *r;
    size_t n, cap;
};

/* The argument a rule pattern is matched against, per tool. */
static const char *subject_param(const char *tool)
{
    static const char *const map[][2] = {
        { "read", "path" }, { "write", "path" }, { "edit", "path" }, { "list", "path" },
        { "search", "path" }, { "bash", "command" }, { "visit_page", "url" },
        { "web_search", "query" },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(map[i][0], tool)) return map[i][1];
    return NULL;
}

static bool is_path_tool(const char *tool)
{
    const char *p = subject_param(tool);
    return p && !strcmp(p, "path");
}

static perm_rule *add_rule(struct perm_rules *rs)
{
    if (rs->n == rs->cap) {
        rs->cap = rs->cap ? rs->cap * 2 : 16;
        rs->r = xrealloc(rs->r, rs->cap * sizeof *rs->r);
    }
    perm_rule *r = &rs->r[rs->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void rule_free(perm_rule *r)
{
    free(r->tool);
    for (size_t i = 0; i < r->argc; i++) free(r->argv[i]);
    free(r->argv);
    free(r->pattern);
    free(r->exact);
    free(r->where);
}

void perm_rules_free(struct perm_rules *rs)
{
    if (!rs) return;
    for (size_t i = 0; i < rs->n; i++) rule_free(&rs->r[i]);
    free(rs->r);
    free(rs);
}

static int parse_rules(tool_env *env, const char *file, const char *text, ds4_error *err)
{
    int lineno = 0;
    const char *p = text;
    while (*p) {
        lineno++;
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *line = xstrndup(p, n);
        p += n + (e ? 1 : 0);
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        size_t l = strlen(s);
        while (l && (s[l - 1] == ' ' || s[l - 1] == '\t' || s[l - 1] == '\r')) s[--l] = 0;
        if (!*s || *s == '#') { free(line); continue; }
        char *act = s;
        s += strcspn(s, " \t");
        if (*s) *s++ = 0;
        while (*s == ' ' || *s == '\t') s++;
        char *tool = s;
        s += strcspn(s, " \t");
        if (*s) *s++ = 0;
        while (*s == ' ' || *s == '\t') s++;
        perm_decision a;
        if (!strcmp(act, "allow")) a = PERM_ALLOW;
        else if (!strcmp(act, "ask")) a = PERM_ASK;
        else if (!strcmp(act, "deny")) a = PERM_DENY;
        else {
            ds4_error_set(err, "%s:%d: unknown action '%s' (allow, ask or deny)", file, lineno, act);
            free(line);
            return -1;
        }
        if (!*tool) {
            ds4_error_set(err, "%s:%d: '%s' needs a tool name (or *)", file, lineno, act);
            free(line);
            return -1;
        }
        if (strcmp(tool, "*") != 0 && !tools_find(tool)) {
            ds4_error_set(err, "%s:%d: no tool named '%s'", file, lineno, tool);
            free(line);
            return -1;
        }
        if (*s && (!strcmp(tool, "*") || !subject_param(tool))) {
            ds4_error_set(err, "%s:%d: '%s' rules take no pattern", file, lineno, tool);
            free(line);
            return -1;
        }
        perm_rule r = { .action = a };
        r.tool = strcmp(tool, "*") ? xstrndup(tool, strlen(tool)) : NULL;
        char where[600];
        snprintf(where, sizeof where, "%s:%d", file, lineno);
        r.where = xstrndup(where, strlen(where));
        if (*s && !strcmp(tool, "bash")) {
            shell_split sp;
            shell_split_line(s, &sp);
            if (sp.n != 1 || sp.complex || sp.cmd[0].argc == 0) {
                ds4_error_set(err, "%s:%d: a bash pattern is one simple command (words, no ; | && or redirections)",
                         file, lineno);
                shell_split_free(&sp);
                rule_free(&r);
                free(line);
                return -1;
            }
            r.argv = sp.cmd[0].argv;
            r.argc = sp.cmd[0].argc;
            sp.cmd[0].argv = NULL;
            sp.cmd[0].argc = 0;
            shell_split_free(&sp);
        } else if (*s) {
            r.pattern = xstrndup(s, strlen(s));
        }
        *add_rule(env->rules) = r;
        free(line);
    }
    return 0;
}

static int load_file(tool_env *env, const char *path, bool must_exist, ds4_error *err)
{
    size_t len;
    char *text = file_read_all(path, &len);
    if (!text) {
        if (errno == ENOENT && !must_exist) return 0;
        ds4_error_set(err, "cannot read rules file %s: %s", path, strerror(errno));
        return -1;
    }
    if (memchr(text, 0, len)) {
        ds4_error_set(err, "rules file %s is not text", path);
        free(text);
        return -1;
    }
    int rc = parse_rules(env, path, text, err);
    free(text);
    return rc;
}

int perm_rules_load(tool_env *env, ds4_error *err)
{
    env->rules = xcalloc(1, sizeof *env->rules);
    char dir[4096];
    /* XDG_CONFIG is only read, so do not create it when it is missing */
    const char *xdg = getenv("XDG_CONFIG_HOME");
    if (xdg && xdg[0] == '/') snprintf(dir, sizeof dir, "%s/ds4cl/rules", xdg);
    else if (env->home) snprintf(dir, sizeof dir, "%s/.config/ds4cl/rules", env->home);
    else dir[0] = 0;
    if (dir[0] && load_file(env, dir, false, err) != 0) return -1;
    snprintf(dir, sizeof dir, "%s/.ds4cl/rules", env->workspace_len ? env->workspace : "");
    if (load_file(env, dir, false, err) != 0) return -1;
    if (env->cfg.rules_path && *env->cfg.rules_path &&
        load_file(env, env->cfg.rules_path, true, err) != 0)
        return -1;
    return 0;
}

/* ---- matching ------------------------------------------------------------------------ */

static const char *base_name(const char *s)
{
    const char *b = strrchr(s, '/');
    return b && b[1] ? b + 1 : s;
}

static bool argv_matches(const perm_rule *r, char *const *argv, size_t argc)
{
    if (argc < r->argc) return false;
    for (size_t i = 0; i < r->argc; i++) {
        if (fnmatch(r->argv[i], argv[i], 0) == 0) continue;
        /* "rm" also covers "/bin/rm" */
        if (i == 0 && !strchr(r->argv[0], '/') && fnmatch(r->argv[0], base_name(argv[0]), 0) == 0)
            continue;
        return false;
    }
    return true;
}

/* Commands that run another command given in their arguments. */
static size_t skip_wrapper(char *const *argv, size_t argc)
{
    static const char *const wrappers[] = { "sudo", "doas", "env", "command", "builtin", "exec",
                                            "nohup", "nice", "time", "timeout", "xargs", "stdbuf",
                                            "setsid", "ionice", "chrt", "unbuffer", "busybox", NULL };
    size_t i = 0;
    while (i < argc) {
        const char *w = base_name(argv[i]);
        bool is_wrapper = false;
        for (size_t k = 0; wrappers[k]; k++)
            if (!strcmp(w, wrappers[k])) is_wrapper = true;
        if (!is_wrapper) break;
        i++;
        /* their options, assignments (env) and durations (timeout) */
        while (i < argc && (argv[i][0] == '-' || strchr(argv[i], '=') ||
                            strspn(argv[i], "0123456789.smhd") == strlen(argv[i])))
            i++;
    }
    return i;
}

typedef struct {
    bool deny, ask, allow;
    bool allow_explicit; /* an allow rule with a pattern matched */
    const char *deny_where, *ask_where;
} rule_hits;

static void hit(rule_hits *h, const perm_rule *r)
{
    if (r->action == PERM_DENY) {
        h->deny = true;
        if (!h->deny_where) h->deny_where = r->where;
    } else if (r->action == PERM_ASK) {
        h->ask = true;
        if (!h->ask_where) h->ask_where = r->where;
    } else {
        h->allow = true;
        if (r->argv || r->pattern || r->exact) h->allow_explicit = true;
    }
}

static bool tool_matches(const perm_rule *r, const tool_def *t)
{
    return !r->tool || !strcmp(r->tool, t->name);
}

static bool harmless_builtin(const shell_cmd *c)
{
    static const char *const ok[] = { "true", "false", ":", "test", "[", "[[", "cd", "pwd",
                                      "echo", "printf", "sleep", NULL };
    if (c->argc == 0 || c->writes_file || c->unsafe_env) return false;
    for (size_t i = 0; ok[i]; i++)
        if (!strcmp(c->argv[0], ok[i])) return true;
    return false;
}

/* Rules for one simple command: deny and ask rules also look through
 * wrappers (sudo, env, xargs, …) and into `sh -c` strings; allow rules
 * take the command as written. */
static void match_simple(const struct perm_rules *rs, const tool_def *t, const shell_cmd *c,
                         bool sandboxed, rule_hits *h, int depth)
{
    size_t off = skip_wrapper(c->argv, c->argc);
    for (size_t i = 0; i < rs->n; i++) {
        const perm_rule *r = &rs->r[i];
        if (!tool_matches(r, t) || !r->argv) continue;
        if (r->action == PERM_ALLOW) {
            if (!sandboxed && (c->writes_file || c->unsafe_env)) continue;
            if (argv_matches(r, c->argv, c->argc)) hit(h, r);
        } else if (argv_matches(r, c->argv, c->argc) ||
                   (off < c->argc && argv_matches(r, c->argv + off, c->argc - off))) {
            hit(h, r);
        }
    }
    /* sh -c '…' and eval: the inner commands count for deny and ask */
    if (depth < 4 && off < c->argc) {
        const char *w = base_name(c->argv[off]);
        const char *inner = NULL;
        if (!strcmp(w, "sh") || !strcmp(w, "bash") || !strcmp(w, "dash") || !strcmp(w, "zsh") ||
            !strcmp(w, "ksh")) {
            for (size_t k = off + 1; k + 1 < c->argc; k++)
                if (!strcmp(c->argv[k], "-c")) { inner = c->argv[k + 1]; break; }
        } else if (!strcmp(w, "eval") && off + 1 < c->argc) {
            inner = c->argv[off + 1];
        }
        if (inner) {
            shell_split sp;
            shell_split_line(inner, &sp);
            for (size_t k = 0; k < sp.n; k++) {
                rule_hits sub = {0};
                match_simple(rs, t, &sp.cmd[k], sandboxed, &sub, depth + 1);
                if (sub.deny) { h->deny = true; if (!h->deny_where) h->deny_where = sub.deny_where; }
                if (sub.ask) { h->ask = true; if (!h->ask_where) h->ask_where = sub.ask_where; }
            }
            shell_split_free(&sp);
        }
    }
}

static bool path_matches(tool_env *env, const char *pattern, const char *abs)
{
    strbuf pat = {0};
    if (pattern[0] == '/') sb_puts(&pat, pattern);
    else if (pattern[0] == '~' && pattern[1] == '/' && env->home) {
        sb_puts(&pat, env->home);
        sb_puts(&pat, pattern + 1);
    } else {
        sb_puts(&pat, env->workspace_len ? env->workspace : "");
        sb_putc(&pat, '/');
        sb_puts(&pat, pattern);
    }
    while (pat.len > 1 && pat.s[pat.len - 1] == '/') pat.s[--pat.len] = 0;
    /* the pattern or any directory above the path: "src" covers src/a.c */
    bool m = false;
    char *p = xstrdup(abs);
    for (;;) {
        if (glob_match_braces(sb_str(&pat), p, false)) { m = true; break; }
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) break;
        *slash = 0;
    }
    free(p);
    sb_free(&pat);
    return m;
}

static bool bash_sandboxed(tool_env *env, json_object *args)
{
    return sandbox_active(env) && targ_bool(args, "sandbox", true);
}

static void match_rules(tool_env *env, const tool_def *t, json_object *args, rule_hits *h)
{
    const struct perm_rules *rs = env->rules;
    const char *subj_name = subject_param(t->name);
    const char *subject = subj_name ? targ_str(args, subj_name) : NULL;
    bool is_bash = !strcmp(t->name, "bash");
    /* rules without a pattern, and session rules for one exact command */
    for (size_t i = 0; i < rs->n; i++) {
        const perm_rule *r = &rs->r[i];
        if (!tool_matches(r, t)) continue;
        if (r->exact) {
            if (subject && !strcmp(r->exact, subject)) hit(h, r);
        } else if (!r->argv && !r->pattern) {
            hit(h, r);
        }
    }
    if (!subject) return;
    if (is_bash) {
        shell_split sp;
        shell_split_line(subject, &sp);
        bool sandboxed = bash_sandboxed(env, args);
        /* allowed only when every part is: by a rule, or as a builtin
         * without effects (cd, echo without redirection, test, …) */
        bool all_allowed = sp.n > 0 && !sp.complex;
        for (size_t k = 0; k < sp.n; k++) {
            rule_hits one = {0};
            match_simple(rs, t, &sp.cmd[k], sandboxed, &one, 0);
            if (one.deny) { h->deny = true; if (!h->deny_where) h->deny_where = one.deny_where; }
            if (one.ask) { h->ask = true; if (!h->ask_where) h->ask_where = one.ask_where; }
            if (!one.allow && !harmless_builtin(&sp.cmd[k])) all_allowed = false;
        }
        if (all_allowed) {
            h->allow = true;
            h->allow_explicit = true;
        }
        shell_split_free(&sp);
        return;
    }
    /* paths: where the call really lands (symlinks resolved) for every
     * rule; deny and ask rules also see the path as written */
    bool is_path = is_path_tool(t->name);
    char *real = is_path ? tool_real_target(env, subject) : NULL;
    char *lexical = is_path ? tool_abs_path(env, subject) : NULL;
    for (size_t i = 0; i < rs->n; i++) {
        const perm_rule *r = &rs->r[i];
        if (!tool_matches(r, t) || !r->pattern) continue;
        bool m;
        if (!is_path) m = fnmatch(r->pattern, subject, 0) == 0;
        else m = path_matches(env, r->pattern, real) ||
                 (r->action != PERM_ALLOW && path_matches(env, r->pattern, lexical));
        if (m) hit(h, r);
    }
    free(real);
    free(lexical);
}

bool perm_read_denied(tool_env *env, const char *abs_path)
{
    const struct perm_rules *rs = env->rules;
    for (size_t i = 0; i < rs->n; i++) {
        const perm_rule *r = &rs->r[i];
        if (r->action != PERM_DENY || !r->pattern || !r->tool || strcmp(r->tool, "read") != 0) continue;
        if (path_matches(env, r->pattern, abs_path)) return true;
    }
    return false;
}

bool perm_has_read_denials(tool_env *env)
{
    const struct perm_rules *rs = env->rules;
    for (size_t i = 0; i < rs->n; i++)
        if (rs->r[i].action == PERM_DENY && rs->r[i].pattern && rs->r[i].tool &&
            !strcmp(rs->r[i].tool, "read"))
            return true;
    return false;
}

const char *perm_ask_reason(tool_env *env, const tool_def *t, json_object *args)
{
    if (!strcmp(t->name, "bash")) {
        if (!targ_bool(args, "sandbox", true) && sandbox_active(env)) return "outside the sandbox";
        return NULL;
    }
    if (t->cls != TOOL_CLASS_WRITE) return NULL;
    const char *path = targ_str(args, "path");
    if (!path) return NULL;
    char *real = tool_real_target(env, path);
    const char *why = NULL;
    if (!tool_in_workspace(env, real)) why = "outside the workspace";
    else if (tool_in_protected(env, real)) why = "inside .git or .ds4cl";
    free(real);
    return why;
}

static bool in_allow_list(tool_env *env, const tool_def *t)
{
    for (size_t i = 0; env->allow && env->allow[i]; i++)
        if (!strcmp(env->allow[i], t->name)) return true;
    return false;
}

perm_decision perm_decide(tool_env *env, const tool_def *t, json_object *args, const char **why)
{
    const char *dummy;
    if (!why) why = &dummy;
    *why = NULL;
    if (!env || !t) return PERM_DENY;
    rule_hits h = {0};
    match_rules(env, t, args, &h);
    if (h.deny) {
        *why = h.deny_where;
        return PERM_DENY;
    }
    const char *reason = perm_ask_reason(env, t, args);
    if (reason && strcmp(reason, "outside the sandbox") != 0) {
        /* writes outside the workspace or into .git/.ds4cl: only a rule
         * that names the path allows them */
        if (h.allow && h.allow_explicit && !h.ask) return PERM_ALLOW;
        *why = h.ask_where;
        return PERM_ASK;
    }
    if (h.ask) {
        *why = h.ask_where;
        return PERM_ASK;
    }
    if (h.allow) return PERM_ALLOW;
    if (env->cfg.yes_to_all || in_allow_list(env, t)) return PERM_ALLOW;
    if (t->cls == TOOL_CLASS_READ) return PERM_ALLOW;
    if (!strcmp(t->name, "bash") && bash_sandboxed(env, args)) return PERM_ALLOW;
    return PERM_ASK;
}

perm_decision tools_policy(tool_env *env, const tool_def *t, json_object *args)
{
    return perm_decide(env, t, args, NULL);
}

/* ---- session rules ------------------------------------------------------------------- */

static bool plain_word(const char *w)
{
    if (!w || !*w) return false;
    for (const char *p = w; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return false;
    return w[0] != '-';
}

static void add_session(tool_env *env, const tool_def *t, char **argv, size_t argc,
                        const char *pattern, const char *exact)
{
    perm_rule *r = add_rule(env->rules);
    r->action = PERM_ALLOW;
    r->tool = xstrndup(t->name, strlen(t->name));
    r->where = xstrndup("session", 7);
    if (argc) {
        r->argv = xcalloc(argc + 1, sizeof *r->argv);
        for (size_t i = 0; i < argc; i++) r->argv[i] = xstrndup(argv[i], strlen(argv[i]));
        r->argc = argc;
    }
    if (pattern) {
        /* a literal path: escape what the glob would read as wildcards */
        strbuf b = {0};
        for (const char *p = pattern; *p; p++) {
            if (strchr("*?[]{}\\", *p)) sb_putc(&b, '\\');
            sb_putc(&b, *p);
        }
        r->pattern = sb_take(&b);
    }
    if (exact) r->exact = xstrndup(exact, strlen(exact));
}

/* What "always" remembers: for bash, each command's name and its
 * subcommand word ("git commit", "make test", "ls"), so that the same kind
 * of command is not asked again while a different one still is; for a
 * command line the splitter cannot follow, that exact line. For writes
 * outside the workspace, that exact path; otherwise the tool. */
static char *always_rule_text(tool_env *env, const tool_def *t, json_object *args, bool add)
{
    strbuf b = {0};
    if (!strcmp(t->name, "bash")) {
        const char *cmd = targ_str(args, "command");
        shell_split sp;
        shell_split_line(cmd ? cmd : "", &sp);
        if (sp.complex || sp.n == 0) {
            sb_printf(&b, "allow bash exactly: %s", cmd ? cmd : "");
            if (add) add_session(env, t, NULL, 0, NULL, cmd ? cmd : "");
        } else {
            for (size_t k = 0; k < sp.n; k++) {
                shell_cmd *c = &sp.cmd[k];
                if (harmless_builtin(c) || c->argc == 0) continue;
                size_t take = c->argc > 1 && plain_word(c->argv[1]) ? 2 : 1;
                if (b.len) sb_puts(&b, "; ");
                sb_puts(&b, "allow bash");
                for (size_t i = 0; i < take; i++) sb_printf(&b, " %s", c->argv[i]);
                if (add) add_session(env, t, c->argv, take, NULL, NULL);
            }
            if (!b.len) sb_puts(&b, "allow bash (builtins only)");
        }
        shell_split_free(&sp);
        return sb_take(&b);
    }
    const char *reason = perm_ask_reason(env, t, args);
    const char *path = targ_str(args, "path");
    if (reason && path) {
        char *real = tool_real_target(env, path);
        sb_printf(&b, "allow %s %s", t->name, real);
        if (add) add_session(env, t, NULL, 0, real, NULL);
        free(real);
    } else {
        sb_printf(&b, "allow %s", t->name);
        if (add) add_session(env, t, NULL, 0, NULL, NULL);
    }
    return sb_take(&b);
}

void perm_add_session_rule(tool_env *env, const tool_def *t, json_object *args)
{
    free(always_rule_text(env, t, args, true));
}

char *tools_always_rule(tool_env *env, const tool_def *t, json_object *args)
{
    if (!env || !t) return NULL;
    return always_rule_text(env, t, args, false);
}
