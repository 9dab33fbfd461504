/* workspace.h — the directory the agent works in: -C DIR or the current
 * directory, made absolute with symlinks resolved. */
#ifndef DS4CL_WORKSPACE_H
#define DS4CL_WORKSPACE_H

#include <limits.h>

#include "cli/options.h"

/* 0 with the path in ws, or the exit status (usage: a bad -C; error: no
 * current directory) with the reason printed on stderr. */
int workspace_resolve(const ds4cl_options *o, char ws[PATH_MAX]);

#endif
