/* sandbox.h — what bash commands may write: Landlock for the file system
 * (writes only below the workspace, the temp directories and a few
 * devices; reads and execution everywhere) and a private mount namespace
 * in which the workspace's .git and .ds4cl are bind-mounted read-only
 * (Landlock can only grant, so a read-only hole inside the writable
 * workspace needs the mount).
 *
 * The parent prepares a plan (the Landlock ruleset is built there); the
 * forked child applies it with async-signal-safe calls only, just before
 * exec. A plan that cannot be applied makes the child fail instead of
 * running unconfined.
 */
#ifndef DS4CL_TOOLS_SANDBOX_H
#define DS4CL_TOOLS_SANDBOX_H

#include <stdbool.h>

#include "tools/tool_env.h"

#define SANDBOX_MAX_PROTECT 2

typedef struct {
    int ruleset_fd;               /* -1: no Landlock */
    bool mount_ns;                /* make protect[] read-only in a new mount namespace */
    bool userns;                  /* not root: a user namespace carries the mount namespace */
    char uid_map[64], gid_map[64];
    int nprotect;
    char protect[SANDBOX_MAX_PROTECT][4096];
    unsigned long protect_flags[SANDBOX_MAX_PROTECT];
} sandbox_plan;

/* Builds the plan for one command; log_path, when not NULL, is a file the
 * command may write besides. 0 or -1 with a reason. */
int sandbox_prepare(tool_env *env, const char *log_path, sandbox_plan *plan, ds4_error *err);
void sandbox_plan_release(sandbox_plan *plan);
/* In the child: 0, or the errno of the step that failed (*step names it). */
int sandbox_apply(const sandbox_plan *plan, const char **step);

#endif
