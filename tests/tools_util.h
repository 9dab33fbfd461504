/* tools_util.h — helpers for the tool tests: a tool environment on a
 * fresh workspace, calls that return the result text, and process checks
 * through /proc. */
#ifndef DS4CL_TESTS_TOOLS_UTIL_H
#define DS4CL_TESTS_TOOLS_UTIL_H

#include <stdbool.h>
#include <stddef.h>

#include "tools/tools.h"

/* A workspace directory (created) under the test's temp dir, and an
 * environment on it. XDG_CONFIG_HOME points into the temp dir so that no
 * user rules apply. The environment is freed when the test ends unless
 * tu_free is called first. */
const char *tu_workspace(void);
tool_env *tu_env_cfg(tool_env_config *cfg);
tool_env *tu_env(void);                  /* --yes, not interactive, no sandbox */
void tu_free(tool_env *env);

/* Runs a call; the text is runner-owned. */
typedef struct {
    const char *text;
    bool is_error, denied;
} tu_result;
tu_result tu_call(tool_env *env, const char *tool, const char *args_json);
tu_result tu_call_ctx(tool_env *env, const char *tool, const char *args_json, const tool_call_ctx *ctx);

/* A file under the workspace (parents created). */
const char *tu_file(const char *rel, const char *content);
const char *tu_path(const char *rel);
/* The whole content of a workspace file, or NULL. */
const char *tu_content(const char *rel);

/* JSON string literal of s (runner-owned), for building arguments. */
const char *tu_json_str(const char *s);

/* Tags this test process's environment, so that what it starts (bash
 * jobs inherit it) can be told from the processes of other test runs on
 * the same machine. tu_env_cfg does it; call it before starting processes
 * some other way. */
void tu_tag_processes(void);
/* Number of live (not zombie) processes started under this test's tag
 * whose command line contains marker, and of zombies among them. */
int tu_procs_with(const char *marker, int *zombies);
/* Waits up to ms for no process with marker to remain; true when none. */
bool tu_wait_gone(const char *marker, int ms);
/* Zombie children of this process. */
int tu_my_zombies(void);
/* Waits up to ms for this process to have no zombie children; true when
 * none is left. A job's supervisor that has just exited is a zombie until
 * the thread that waits for it runs, which a loaded machine may delay. */
bool tu_wait_no_zombies(int ms);

/* Makes this test process (and what it starts) see a kernel without
 * Landlock: its system calls fail with ENOSYS (a seccomp filter). Skips
 * the test when the filter cannot be installed. */
void tu_hide_landlock(void);

/* Makes permission bits apply to this test process even as root (drops
 * the capabilities that override them). */
void tu_obey_permission_bits(void);

#endif
