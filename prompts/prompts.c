/* prompts.c — lookup of the embedded prompt texts and other embedded files. */
#include "prompts/prompts.h"
#include "prompts/embedded.h"

#include <string.h>

const struct embedded_file *embedded_find(const struct embedded_file *table, const char *name)
{
    for (const struct embedded_file *f = table; f->name; f++)
        if (strcmp(f->name, name) == 0) return f;
    return NULL;
}

const char *prompt_text(const char *name, size_t *len)
{
    const struct embedded_file *f = embedded_find(prompt_texts, name);
    if (!f) return NULL;
    if (len) *len = f->len;
    return f->data;
}
