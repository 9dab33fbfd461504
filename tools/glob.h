/* glob.h — gitignore-style globs and .gitignore evaluation, shared by
 * search (which files to visit) and the permission rules (path patterns).
 *
 * Glob syntax, matched against a '/'-separated path: `*` and `?` never
 * match '/'; `[abc]`, `[a-z]`, `[!x]`/`[^x]` classes; `\` escapes the next
 * character; `**` as a whole segment matches across directories: a leading
 * `**` + `/` matches in every directory, a trailing `/` + `**` everything
 * inside, and `/` + `**` + `/` zero or more directories. `{a,b}`
 * alternatives are expanded by glob_match_braces only.
 *
 * .gitignore rules implemented: blank lines and `#` comments; trailing
 * spaces unless escaped; `!` negation (last matching pattern wins, and a
 * file below an excluded directory cannot be re-included because that
 * directory is never entered); a trailing `/` matches directories only; a
 * pattern with a `/` at its start or middle is anchored to the directory
 * of its .gitignore, one without matches a name at any depth below it;
 * nested .gitignore files apply below their directory and override outer
 * ones; the repository's .git/info/exclude applies at its top. The global
 * core.excludesFile is not read.
 */
#ifndef DS4CL_TOOLS_GLOB_H
#define DS4CL_TOOLS_GLOB_H

#include <stdbool.h>
#include <stddef.h>

bool glob_match(const char *pattern, const char *path);
/* Case-insensitive for ASCII letters. */
bool glob_match_fold(const char *pattern, const char *path, bool fold);
/* Expands {a,b,...} alternatives (nesting allowed; at most 1024 expanded
 * patterns) first. */
bool glob_match_braces(const char *pattern, const char *path, bool fold);

typedef struct ignore_stack ignore_stack;

ignore_stack *ignore_new(void);
void ignore_free(ignore_stack *st);

/* Pushes the patterns of text as one level whose patterns are relative to
 * the absolute directory base. */
void ignore_push_text(ignore_stack *st, const char *base, const char *text, size_t len);
/* Pushes a level for the directory dir: its .gitignore, plus
 * .git/info/exclude when dir is a repository top. Always pushes a level
 * (maybe empty) so that ignore_pop pairs with it. */
void ignore_push_dir(ignore_stack *st, const char *dir);
void ignore_pop(ignore_stack *st);
/* Pushes levels for the directories from the top of the repository that
 * contains dir down to dir's parent (none when dir is not in a
 * repository); returns how many were pushed. */
size_t ignore_push_ancestors(ignore_stack *st, const char *dir);

/* True when abs_path is ignored by the levels on the stack. */
bool ignore_match(const ignore_stack *st, const char *abs_path, bool is_dir);

#endif
