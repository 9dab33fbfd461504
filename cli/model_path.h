/* model_path.h — where ds4cl finds its model when no -m is given.
 *
 * The default model is the path "$XDG_DATA_HOME/ds4cl/models/default"
 * (~/.local/share/ds4cl/models/default): `ds4cl download` makes it a
 * symbolic link to the file it fetched; a user may equally link or copy a
 * GGUF there by hand.
 */
#ifndef DS4CL_MODEL_PATH_H
#define DS4CL_MODEL_PATH_H

#include <stddef.h>

#include "base/base.h"

/* Writes the default model path into buf (creating the ds4cl data
 * directory, not the models/ directory). NULL when no home directory is
 * known or buf is too small. */
const char *default_model_path(char *buf, size_t n);

/* The model to open: `given` (from -m) when it names a readable file,
 * otherwise the default model (the file the default link points to). When
 * there is nothing to open, prints a short explanation on stderr — the
 * missing -m file, or how to download a model and where to put one — and
 * returns NULL. The result is `given` itself or a path written into buf. */
const char *model_path_resolve(const char *given, char *buf, size_t n);

/* Makes the default model path a symbolic link to target (an absolute path
 * is stored), replacing any previous link atomically. A regular file at
 * the default path is left alone (returns -1 with a message in err). */
int default_model_set(const char *target, ds4_error *err);

#endif
