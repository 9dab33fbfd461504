/* embedded.h — files compiled into the binary (OpenCL kernels, prompt texts),
 * a neutral place that the modules using them (opencl/, prompts/) both
 * depend on. The tables are generated at build time by build-aux/embed.sh
 * into build/gen/ (the Makefile's GEN_SRCS). */
#ifndef DS4CL_EMBEDDED_H
#define DS4CL_EMBEDDED_H
#include <stddef.h>

struct embedded_file {
    const char *name;   /* base name without extension; NULL ends a table */
    const char *data;   /* NUL-terminated for convenience */
    size_t len;         /* bytes, without the terminating NUL */
};

extern const struct embedded_file clrt_sources[];
extern const struct embedded_file prompt_texts[];

/* Looks a name up in a table; NULL when absent. */
const struct embedded_file *embedded_find(const struct embedded_file *table, const char *name);

#endif
