/* bash.c — the bash tool: start a command as a job (sandboxed where it
 * can be), wait for it or for refresh_sec with live output and
 * cancellation, and show the model its state and output (job_view.h). */
#include "tools/job_view.h"

#include <json-c/json.h>
#include <stdio.h>
#include <string.h>

static int run_bash(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    const char *command = targ_str(args, "command");
    long long timeout = BASH_DEFAULT_TIMEOUT, refresh = -1;
    bool has_timeout = targ_int(args, "timeout_sec", &timeout);
    bool has_refresh = targ_int(args, "refresh_sec", &refresh);
    bool want_sandbox = targ_bool(args, "sandbox", true);
    const char *p = command;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (!*p) return tool_fail(out, "bash needs a command");
    if (has_timeout && timeout < 1) return tool_fail(out, "timeout_sec must be 1 or more (got %lld)", timeout);
    if (has_refresh && refresh < 1) return tool_fail(out, "refresh_sec must be 1 or more (got %lld)", refresh);
    bool clamped = timeout > BASH_MAX_TIMEOUT;
    if (clamped) timeout = BASH_MAX_TIMEOUT;
    bool sandboxed = want_sandbox && sandbox_active(env);
    ds4_error err = { "" };
    jobs_poll_all(env);
    job *j = jobs_start(env, command, (int)timeout, sandboxed, &err);
    if (!j) return tool_fail(out, "%s", err.msg);
    if (!job_wait(j, has_refresh ? (double)refresh * 1000.0 : -1, ctx)) return job_interrupted(env, j, out);
    strbuf b = {0};
    if (clamped) sb_printf(&b, "(timeout_sec is limited to %d)\n", BASH_MAX_TIMEOUT);
    job_observe(env, j, &b);
    return tool_ok(out, &b);
}

static void summarize_bash(json_object *args, char *buf, size_t size)
{
    char cmd[1024];
    tool_summary_clip(cmd, sizeof cmd, "bash: ", targ_str(args, "command"));
    snprintf(buf, size, "%s%s", cmd, targ_bool(args, "sandbox", true) ? "" : " [without sandbox]");
}

const tool_def tool_bash = {
    .name = "bash",
    .description =
        "Run a bash command in the workspace root and return its exit status and output "
        "(stdout and stderr together; long output shows its first and last lines and the path of "
        "the full log, which read can open). stdin is empty and there is no terminal: never run "
        "interactive programs or editors. The command is killed after timeout_sec (default 120, "
        "at most 3600), together with everything it started. For long commands (builds, test "
        "suites, servers) pass refresh_sec: the call returns after that many seconds while the "
        "command keeps running as a job; then use bash_status to see new output and bash_stop to "
        "end it. Commands run sandboxed where the system allows it: they can write only inside "
        "the workspace (not .git) and temp directories, and read anything. When a command "
        "must write elsewhere (git commit, installing packages, caches in the home directory), "
        "set sandbox=false; the user may be asked to approve.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"command\":{\"type\":\"string\",\"description\":\"bash command line\"},"
        "\"timeout_sec\":{\"type\":\"integer\",\"description\":\"kill it after this many seconds (default 120)\"},"
        "\"refresh_sec\":{\"type\":\"integer\",\"description\":\"return after this many seconds and leave it running\"},"
        "\"sandbox\":{\"type\":\"boolean\",\"description\":\"false runs it outside the sandbox (needs approval)\"}},"
        "\"required\":[\"command\"]}",
    .cls = TOOL_CLASS_EXEC,
    .run = run_bash,
    .summarize = summarize_bash,
};
