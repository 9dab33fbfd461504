/* shellparse.c — a bash command line split into its simple commands (see
 * shellparse.h). A recursive scanner over the text: each list level builds
 * its own command while substitutions found inside words are split
 * recursively into the same result. */
#include "tools/shellparse.h"

#include "base/base.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_HEREDOCS 32

typedef struct {
    char *delim;
    bool quoted, strip_tabs;
} heredoc;

typedef struct {
    const char *s;
    size_t pos, len;
    shell_split *out;
    heredoc hd[MAX_HEREDOCS];
    int nhd;
    int depth;
} scanner;

typedef struct {
    char **w;
    size_t n, cap;
    bool writes_file, unsafe_env;
    bool header;       /* inside a for/select header: no command */
} builder;

static void split_text(scanner *parent, const char *text, size_t len);
static void split_substitutions_only(scanner *p, const char *text, size_t len);
static void parse_list(scanner *p, char terminator);

static int peek(const scanner *p, size_t k)
{
    return p->pos + k < p->len ? (unsigned char)p->s[p->pos + k] : 0;
}

static void push_cmd(shell_split *out, builder *b)
{
    if (b->n == 0 && !b->unsafe_env) return;
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 8;
        out->cmd = xrealloc(out->cmd, out->cap * sizeof *out->cmd);
    }
    shell_cmd *c = &out->cmd[out->n++];
    c->argv = xrealloc(b->w, (b->n + 1) * sizeof *b->w);
    c->argv[b->n] = NULL;
    c->argc = b->n;
    c->writes_file = b->writes_file;
    c->unsafe_env = b->unsafe_env;
    memset(b, 0, sizeof *b);
}

static void end_cmd(scanner *p, builder *b)
{
    if (b->header) {
        for (size_t i = 0; i < b->n; i++) free(b->w[i]);
        free(b->w);
        bool unsafe = b->unsafe_env;
        memset(b, 0, sizeof *b);
        b->unsafe_env = unsafe;
        if (!unsafe) return;
    }
    push_cmd(p->out, b);
}

static void drop_builder(builder *b)
{
    for (size_t i = 0; i < b->n; i++) free(b->w[i]);
    free(b->w);
    memset(b, 0, sizeof *b);
}

static bool is_assignment(const char *w)
{
    if (!((*w >= 'A' && *w <= 'Z') || (*w >= 'a' && *w <= 'z') || *w == '_')) return false;
    const char *q = w;
    while ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_') q++;
    return *q == '=' || (q[0] == '+' && q[1] == '=');
}

/* Variables whose value changes what a later command runs or how. */
static bool dangerous_var(const char *w)
{
    static const char *const names[] = { "PATH", "BASH_ENV", "ENV", "IFS", "SHELLOPTS",
                                         "BASHOPTS", "PS4", "PROMPT_COMMAND", "CDPATH",
                                         "GLOBIGNORE", "BASH_LOADABLES_PATH", NULL };
    size_t n = strcspn(w, "+=");
    if (n >= 3 && strncmp(w, "LD_", 3) == 0) return true;
    if (n >= 4 && strncmp(w, "GIT_", 4) == 0) return true;
    for (size_t i = 0; names[i]; i++)
        if (strlen(names[i]) == n && strncmp(w, names[i], n) == 0) return true;
    return false;
}

static bool is_reserved_prefix(const char *w)
{
    static const char *const kw[] = { "if", "then", "else", "elif", "do", "while", "until",
                                      "!", "time", "{", "}", "fi", "done", "esac", "in", NULL };
    for (size_t i = 0; kw[i]; i++)
        if (strcmp(w, kw[i]) == 0) return true;
    return false;
}

static void add_word(scanner *p, builder *b, char *w)
{
    if (b->header) {
        free(w);
        return;
    }
    if (b->n == 0) {
        if (is_assignment(w)) {
            if (dangerous_var(w)) b->unsafe_env = true;
            free(w);
            return;
        }
        if (is_reserved_prefix(w)) {
            free(w);
            return;
        }
        if (!strcmp(w, "for") || !strcmp(w, "select")) {
            b->header = true;
            free(w);
            return;
        }
        if (!strcmp(w, "case") || !strcmp(w, "function") || !strcmp(w, "coproc")) p->out->complex = true;
    }
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 8;
        b->w = xrealloc(b->w, b->cap * sizeof *b->w);
    }
    b->w[b->n++] = w;
}

static bool is_meta(int c)
{
    return c == 0 || c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' ||
           c == '(' || c == ')' || c == '<' || c == '>';
}

/* Scans a $( ... ) body starting after "$(" and splits it. */
static void read_command_subst(scanner *p, strbuf *w)
{
    size_t start = p->pos - 2;
    if (p->depth >= MAX_DEPTH) {
        p->out->complex = true;
        p->pos = p->len;
        return;
    }
    p->depth++;
    parse_list(p, ')');
    p->depth--;
    sb_append(w, p->s + start, p->pos - start);
}

/* Backtick body after the opening '`': unescape \` \\ \$ and split it. */
static void read_backticks(scanner *p, strbuf *w)
{
    size_t start = p->pos - 1;
    strbuf body = {0};
    while (p->pos < p->len && p->s[p->pos] != '`') {
        char c = p->s[p->pos++];
        if (c == '\\' && p->pos < p->len && strchr("`\\$", p->s[p->pos])) c = p->s[p->pos++];
        sb_putc(&body, c);
    }
    if (p->pos >= p->len) p->out->complex = true;
    else p->pos++;
    split_text(p, sb_str(&body), body.len);
    sb_free(&body);
    sb_append(w, p->s + start, p->pos - start);
}

/* $(( … )) or (( … )) after its opening, which began at start: scans to
 * the matching "))", splitting any substitutions inside. */
static void read_arith(scanner *p, strbuf *w, size_t start)
{
    size_t body = p->pos;
    int depth = 2;
    while (p->pos < p->len && depth > 0) {
        char c = p->s[p->pos++];
        if (c == '(') depth++;
        else if (c == ')') depth--;
    }
    if (depth > 0) p->out->complex = true;
    size_t end = p->pos >= body + 2 ? p->pos - 2 : body;
    split_substitutions_only(p, p->s + body, end > body ? end - body : 0);
    sb_append(w, p->s + start, p->pos - start);
}

static void read_dollar(scanner *p, strbuf *w, bool in_dquote);

static void read_dquote(scanner *p, strbuf *w)
{
    while (p->pos < p->len) {
        char c = p->s[p->pos];
        if (c == '"') { p->pos++; return; }
        if (c == '\\' && p->pos + 1 < p->len) {
            char n = p->s[p->pos + 1];
            p->pos += 2;
            if (n == '\n') continue;
            if (!strchr("$`\"\\", n)) sb_putc(w, '\\');
            sb_putc(w, n);
            continue;
        }
        if (c == '`') { p->pos++; read_backticks(p, w); continue; }
        if (c == '$') { read_dollar(p, w, true); continue; }
        sb_putc(w, c);
        p->pos++;
    }
    p->out->complex = true;
}

static void read_squote(scanner *p, strbuf *w)
{
    while (p->pos < p->len && p->s[p->pos] != '\'') sb_putc(w, p->s[p->pos++]);
    if (p->pos >= p->len) p->out->complex = true;
    else p->pos++;
}

/* At '$': substitutions, ${…}, $'…', or a plain '$'. */
static void read_dollar(scanner *p, strbuf *w, bool in_dquote)
{
    int n1 = peek(p, 1), n2 = peek(p, 2);
    if (n1 == '(' && n2 == '(') { size_t at = p->pos; p->pos += 3; read_arith(p, w, at); return; }
    if (n1 == '(') { p->pos += 2; read_command_subst(p, w); return; }
    if (n1 == '{') {
        size_t start = p->pos;
        p->pos += 2;
        int depth = 1;
        strbuf scratch = {0};
        while (p->pos < p->len && depth > 0) {
            char c = p->s[p->pos];
            if (c == '}') { depth--; p->pos++; continue; }
            if (c == '{') { depth++; p->pos++; continue; }
            if (c == '\\' && p->pos + 1 < p->len) { p->pos += 2; continue; }
            if (c == '\'' && !in_dquote) { p->pos++; read_squote(p, &scratch); continue; }
            if (c == '"') { p->pos++; read_dquote(p, &scratch); continue; }
            if (c == '`') { p->pos++; read_backticks(p, &scratch); continue; }
            if (c == '$') { read_dollar(p, &scratch, in_dquote); continue; }
            p->pos++;
        }
        sb_free(&scratch);
        if (depth > 0) p->out->complex = true;
        sb_append(w, p->s + start, p->pos - start);
        return;
    }
    if (n1 == '\'' && !in_dquote) {
        /* $'…' with backslash escapes */
        p->pos += 2;
        while (p->pos < p->len && p->s[p->pos] != '\'') {
            if (p->s[p->pos] == '\\' && p->pos + 1 < p->len) p->pos++;
            sb_putc(w, p->s[p->pos++]);
        }
        if (p->pos >= p->len) p->out->complex = true;
        else p->pos++;
        return;
    }
    sb_putc(w, '$');
    p->pos++;
}

/* Reads one word at p->pos (not at a metacharacter). *quoted tells whether
 * any quoting appeared (here-document delimiters care). */
static char *read_word(scanner *p, bool *quoted)
{
    strbuf w = {0};
    bool q = false;
    while (p->pos < p->len) {
        int c = (unsigned char)p->s[p->pos];
        if (is_meta(c)) break;
        if (c == '\\') {
            q = true;
            if (p->pos + 1 >= p->len) { p->pos++; break; }
            char n = p->s[p->pos + 1];
            p->pos += 2;
            if (n != '\n') sb_putc(&w, n);
            continue;
        }
        if (c == '\'') { q = true; p->pos++; read_squote(p, &w); continue; }
        if (c == '"') { q = true; p->pos++; read_dquote(p, &w); continue; }
        if (c == '`') { p->pos++; read_backticks(p, &w); continue; }
        if (c == '$') {
            if (peek(p, 1) == '"') { q = true; p->pos += 2; read_dquote(p, &w); continue; }
            read_dollar(p, &w, false);
            continue;
        }
        sb_putc(&w, (char)c);
        p->pos++;
    }
    if (quoted) *quoted = q;
    return sb_take(&w);
}

static void skip_blanks(scanner *p)
{
    for (;;) {
        int c = peek(p, 0);
        if (c == ' ' || c == '\t') p->pos++;
        else if (c == '\\' && peek(p, 1) == '\n') p->pos += 2;
        else break;
    }
}

static bool harmless_target(const char *t)
{
    return !strcmp(t, "/dev/null") || !strcmp(t, "/dev/stdout") || !strcmp(t, "/dev/stderr") ||
           !strncmp(t, "/dev/fd/", 8);
}

static bool all_digits(const char *s)
{
    if (!*s) return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return false;
    return true;
}

/* At '<' or '>' (or "&>"): a redirection or a process substitution. */
static void read_redirection(scanner *p, builder *b)
{
    int c = peek(p, 0), n1 = peek(p, 1);
    if ((c == '<' || c == '>') && n1 == '(') {
        /* process substitution: a word whose command is split out */
        strbuf w = {0};
        p->pos += 2;
        size_t start = p->pos - 2;
        p->depth++;
        if (p->depth > MAX_DEPTH) { p->out->complex = true; p->pos = p->len; }
        else parse_list(p, ')');
        p->depth--;
        sb_append(&w, p->s + start, p->pos - start);
        add_word(p, b, sb_take(&w));
        return;
    }
    bool writes = false, dup = false, heredoc_op = false, strip = false, herestring = false;
    if (c == '&') {
        p->pos += peek(p, 2) == '>' ? 3 : 2;
        writes = true;
    } else if (c == '>') {
        p->pos++;
        if (peek(p, 0) == '>' || peek(p, 0) == '|') p->pos++;
        else if (peek(p, 0) == '&') { p->pos++; dup = true; }
        writes = true;
    } else {
        p->pos++;
        if (peek(p, 0) == '<') {
            p->pos++;
            if (peek(p, 0) == '<') { p->pos++; herestring = true; }
            else {
                heredoc_op = true;
                if (peek(p, 0) == '-') { p->pos++; strip = true; }
            }
        } else if (peek(p, 0) == '&') { p->pos++; dup = true; }
        else if (peek(p, 0) == '>') { p->pos++; writes = true; }
    }
    skip_blanks(p);
    if (is_meta(peek(p, 0))) {
        p->out->complex = true;
        return;
    }
    bool quoted = false;
    char *target = read_word(p, &quoted);
    (void)herestring;
    if (heredoc_op) {
        if (p->nhd < MAX_HEREDOCS) {
            p->hd[p->nhd++] = (heredoc){ target, quoted, strip };
            return;
        }
        p->out->complex = true;
    } else if (writes && !(dup && (all_digits(target) || !strcmp(target, "-"))) &&
               !harmless_target(target)) {
        b->writes_file = true;
    }
    free(target);
}

/* After a newline: the bodies of pending here-documents. */
static void read_heredoc_bodies(scanner *p)
{
    for (int i = 0; i < p->nhd; i++) {
        heredoc *h = &p->hd[i];
        size_t body = p->pos;
        bool found = false;
        while (p->pos < p->len) {
            size_t ls = p->pos;
            const char *nl = memchr(p->s + ls, '\n', p->len - ls);
            size_t le = nl ? (size_t)(nl - p->s) : p->len;
            p->pos = nl ? le + 1 : p->len;
            size_t k = ls;
            if (h->strip_tabs)
                while (k < le && p->s[k] == '\t') k++;
            if (le - k == strlen(h->delim) && !memcmp(p->s + k, h->delim, le - k)) {
                if (!h->quoted) split_substitutions_only(p, p->s + body, ls - body);
                found = true;
                break;
            }
        }
        if (!found && !h->quoted) split_substitutions_only(p, p->s + body, p->pos - body);
        free(h->delim);
    }
    p->nhd = 0;
}

/* Here-documents announced in a scanner that ends before their bodies. */
static void drop_heredocs(scanner *p)
{
    for (int i = 0; i < p->nhd; i++) free(p->hd[i].delim);
    p->nhd = 0;
}

/* Splits only the substitutions found in a text that is not itself a
 * command (here-document bodies, arithmetic). */
static void split_substitutions_only(scanner *p, const char *text, size_t len)
{
    scanner sub = { .s = text, .len = len, .out = p->out, .depth = p->depth + 1 };
    if (sub.depth > MAX_DEPTH) { p->out->complex = true; return; }
    strbuf scratch = {0};
    while (sub.pos < sub.len) {
        char c = text[sub.pos];
        if (c == '\\' && sub.pos + 1 < sub.len) { sub.pos += 2; continue; }
        if (c == '`') { sub.pos++; read_backticks(&sub, &scratch); continue; }
        if (c == '$') { read_dollar(&sub, &scratch, true); continue; }
        sub.pos++;
    }
    sb_free(&scratch);
    drop_heredocs(&sub);
}

/* A backtick body: a whole command list of its own. */
static void split_text(scanner *parent, const char *text, size_t len)
{
    if (parent->depth + 1 > MAX_DEPTH) { parent->out->complex = true; return; }
    scanner sub = { .s = text, .len = len, .out = parent->out, .depth = parent->depth + 1 };
    parse_list(&sub, 0);
    drop_heredocs(&sub);
}

static void parse_list(scanner *p, char terminator)
{
    builder b = {0};
    for (;;) {
        skip_blanks(p);
        int c = peek(p, 0);
        if (c == 0) {
            if (terminator) p->out->complex = true;
            end_cmd(p, &b);
            if (p->nhd) read_heredoc_bodies(p);
            return;
        }
        if (c == ')' ) {
            p->pos++;
            end_cmd(p, &b);
            if (terminator == ')') return;
            p->out->complex = true;
            continue;
        }
        if (c == '\n') {
            p->pos++;
            end_cmd(p, &b);
            if (p->nhd) read_heredoc_bodies(p);
            continue;
        }
        if (c == '&' && peek(p, 1) == '>') { read_redirection(p, &b); continue; }
        if (c == ';' || c == '&' || c == '|') {
            p->pos++;
            int n = peek(p, 0);
            if ((c == '&' && n == '&') || (c == '|' && (n == '|' || n == '&')) ||
                (c == ';' && (n == ';' || n == '&')))
                p->pos++;
            if (c == ';' && (n == ';' || n == '&')) p->out->complex = true;
            end_cmd(p, &b);
            continue;
        }
        if (c == '#' ) {
            while (p->pos < p->len && p->s[p->pos] != '\n') p->pos++;
            continue;
        }
        if (c == '(') {
            if (b.n > 0) {
                /* name() — a function definition */
                p->out->complex = true;
            }
            p->pos++;
            end_cmd(p, &b);
            if (peek(p, 0) == '(') {
                /* (( arithmetic )) */
                p->pos++;
                strbuf scratch = {0};
                read_arith(p, &scratch, p->pos - 2);
                sb_free(&scratch);
                continue;
            }
            if (p->depth >= MAX_DEPTH) { p->out->complex = true; p->pos = p->len; continue; }
            p->depth++;
            parse_list(p, ')');
            p->depth--;
            continue;
        }
        if (c == '<' || c == '>') { read_redirection(p, &b); continue; }
        bool quoted;
        char *w = read_word(p, &quoted);
        int n = peek(p, 0);
        if ((n == '<' || n == '>') && !quoted && all_digits(w)) {
            free(w); /* a file descriptor number */
            read_redirection(p, &b);
            continue;
        }
        add_word(p, &b, w);
    }
    drop_builder(&b);
}

void shell_split_line(const char *line, shell_split *out)
{
    memset(out, 0, sizeof *out);
    scanner p = { .s = line ? line : "", .len = line ? strlen(line) : 0, .out = out };
    parse_list(&p, 0);
    drop_heredocs(&p);
}

void shell_split_free(shell_split *s)
{
    for (size_t i = 0; i < s->n; i++) {
        for (size_t j = 0; j < s->cmd[i].argc; j++) free(s->cmd[i].argv[j]);
        free(s->cmd[i].argv);
    }
    free(s->cmd);
    memset(s, 0, sizeof *s);
}
