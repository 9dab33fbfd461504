/* Fuzz target: the shell splitter behind bash rules, the glob matcher and
 * the .gitignore parser on arbitrary bytes. */
#include "tools/glob.h"
#include "tools/shellparse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) return 0;
    memcpy(s, data, size);
    s[size] = 0;
    shell_split sp;
    shell_split_line(s, &sp);
    for (size_t i = 0; i < sp.n; i++)
        for (size_t j = 0; j < sp.cmd[i].argc; j++)
            if (!sp.cmd[i].argv[j]) abort();
    shell_split_free(&sp);
    /* first line a pattern, the rest a path */
    char *nl = strchr(s, '\n');
    if (nl) {
        *nl = 0;
        glob_match_braces(s, nl + 1, size & 1);
        ignore_stack *st = ignore_new();
        ignore_push_text(st, "/w", s, strlen(s));
        ignore_match(st, "/w/a/b.c", false);
        ignore_free(st);
    }
    free(s);
    return 0;
}
