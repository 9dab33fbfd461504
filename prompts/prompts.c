/* prompts.c — lookup of the embedded prompt texts. */
#include "prompts/prompts.h"

#include "res/embedded.h"

const char *prompt_text(const char *name, size_t *len)
{
    const struct embedded_file *f = embedded_find(prompt_texts, name);
    if (!f) return NULL;
    if (len) *len = f->len;
    return f->data;
}
