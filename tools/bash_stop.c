/* bash_stop.c — the bash_stop tool: stop a job (TERM to all its
 * processes, KILL after a grace period) and show how it ended. */
#include "tools/job_view.h"

#include <json-c/json.h>

static int run_bash_stop(tool_env *env, json_object *args, const tool_call_ctx *ctx, tool_result *out)
{
    jobs_poll_all(env);
    job *j = job_find_arg(env, args, out);
    if (!j) return -1;
    strbuf b = {0};
    if (j->done) {
        sb_printf(&b, "job %d had already ended.\n", j->id);
    } else {
        job_stop(j);
        if (!job_wait(j, JOB_KILL_GRACE_MS + 1500, ctx)) {
            sb_free(&b);
            return job_interrupted(env, j, out);
        }
    }
    job_observe(env, j, &b);
    return tool_ok(out, &b);
}

static void summarize_bash_stop(json_object *args, char *buf, size_t size)
{
    job_summarize(args, buf, size, "bash_stop");
}

const tool_def tool_bash_stop = {
    .name = "bash_stop",
    .description =
        "Stop a bash job: SIGTERM to every process it started, SIGKILL to what is left after 2 "
        "seconds. Shows its final output.",
    .parameters_schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"job\":{\"type\":\"integer\",\"description\":\"job number from bash\"}},"
        "\"required\":[\"job\"]}",
    .cls = TOOL_CLASS_READ,
    .run = run_bash_stop,
    .summarize = summarize_bash_stop,
};
