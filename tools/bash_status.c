/* bash_status.c — the bash_status tool: a job's state and new output,
 * optionally after waiting for it to end; every job without "job". */
#include "tools/job_view.h"

#include <json-c/json.h>

static int run_bash_status(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    jobs_poll_all(env);
    if (!targ_has(args, "job")) {
        strbuf b = {0};
        jobs_list(env, &b);
        return tool_ok(out, &b);
    }
    job *j = job_find_arg(env, args, out);
    if (!j) return -1;
    long long refresh = 0;
    if (targ_int(args, "refresh_sec", &refresh) && refresh < 0)
        return tool_fail(out, "refresh_sec must be 0 or more (got %lld)", refresh);
    if (refresh > BASH_MAX_TIMEOUT) refresh = BASH_MAX_TIMEOUT;
    if (refresh > 0 && !job_wait(j, (double)refresh * 1000.0, ctx)) return job_interrupted(env, j, out);
    strbuf b = {0};
    job_observe(env, j, &b);
    return tool_ok(out, &b);
}

static void summarize_bash_status(json_object *args, char *buf, size_t size)
{
    job_summarize(args, buf, size, "bash_status");
}

const tool_def tool_bash_status = {
    .name = "bash_status",
    .description =
        "Show a bash job's state and the output it produced since you last looked. refresh_sec "
        "waits up to that many seconds for it to end first (returning as soon as it does). "
        "Without job, lists every job.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"job\":{\"type\":\"integer\",\"description\":\"job number from bash\"},"
        "\"refresh_sec\":{\"type\":\"integer\",\"description\":\"wait up to this long for the job to end\"}}}",
    .cls = TOOL_CLASS_READ,
    .run = run_bash_status,
    .summarize = summarize_bash_status,
};
