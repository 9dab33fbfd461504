/* workspace.c — see workspace.h. */
#include "cli/workspace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/commands.h"

int workspace_resolve(const ds4cl_options *o, char ws[PATH_MAX])
{
    char cwd[PATH_MAX];
    const char *wsarg = o->workspace;
    if (!wsarg) {
        if (!getcwd(cwd, sizeof cwd)) {
            fprintf(stderr, "ds4cl: cannot get the current directory: %s\n", strerror(errno));
            return EXIT_ERROR;
        }
        wsarg = cwd;
    }
    if (!realpath(wsarg, ws)) {
        fprintf(stderr, "ds4cl: workspace %s: %s\n", wsarg, strerror(errno));
        return EXIT_USAGE;
    }
    return 0;
}
