/* shellparse.h — splits a bash command line into the simple commands it
 * runs, for the permission rules.
 *
 * Every simple command is reported with its words unquoted: the parts of
 * lists and pipelines (`;`, `&&`, `||`, `|`, `|&`, `&`, newlines), of
 * subshells and groups, of command substitutions `$( )` and backticks
 * (also inside double quotes, ${…}, arithmetic and unquoted here-document
 * bodies) and of process substitutions `<( )` `>( )`. Words that carry an
 * expansion keep its text ("$(…)", "$HOME"), so they can only match rule
 * patterns written for them. Leading reserved words (if, then, do, while,
 * !, time, …) and variable assignments are stripped; `for`/`select`
 * headers are no commands. Constructs the splitter does not follow
 * (case, function definitions, unbalanced quotes or parentheses) set
 * `complex`, and the caller must then not rely on the split to allow
 * anything.
 */
#ifndef DS4CL_TOOLS_SHELLPARSE_H
#define DS4CL_TOOLS_SHELLPARSE_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char **argv;       /* unquoted words; argv[argc] == NULL */
    size_t argc;
    bool writes_file;  /* output redirection to a file other than /dev/null, /dev/std* */
    bool unsafe_env;   /* assigns PATH, LD_*, BASH_ENV, IFS or the like */
} shell_cmd;

typedef struct {
    shell_cmd *cmd;
    size_t n, cap;
    bool complex;
} shell_split;

void shell_split_line(const char *line, shell_split *out);
void shell_split_free(shell_split *s);

#endif
