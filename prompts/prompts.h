/* prompts.h — the texts we send the model, compiled into the binary from
 * the .txt files of prompts/ (one file per prompt, named by its base name). */
#ifndef DS4CL_PROMPTS_H
#define DS4CL_PROMPTS_H

#include <stddef.h>

/* The text of prompts/NAME.txt, or NULL when there is no such prompt. */
const char *prompt_text(const char *name, size_t *len);

#endif
