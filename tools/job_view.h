/* job_view.h — how bash jobs look to the model, shared by the bash,
 * bash_status and bash_stop tools: a job's state in words, its output
 * (all of it when short, else the first and last lines and the log's
 * path), waiting with live progress and cancellation, and finding a job
 * by the "job" argument. Not for use outside tools/. */
#ifndef DS4CL_TOOLS_JOB_VIEW_H
#define DS4CL_TOOLS_JOB_VIEW_H

#include <stdbool.h>

#include "tools/jobs.h"
#include "tools/tool_env.h"

struct json_object;

#define BASH_DEFAULT_TIMEOUT 120
#define BASH_MAX_TIMEOUT 3600

/* Appends the job's state and the output the model has not seen yet;
 * releases a finished job once the model has seen its end. */
void job_observe(tool_env *env, job *j, strbuf *b);
/* Waits until the job is done or wait_ms passed (< 0: no limit), passing
 * new output to ctx->progress. Returns false when the call was cancelled
 * (the job is then being stopped). */
bool job_wait(job *j, double wait_ms, const tool_call_ctx *ctx);
/* The result of a call cancelled while it waited on j; returns -1. */
int job_interrupted(tool_env *env, job *j, tool_result *out);
/* The job the "job" argument names, or NULL with an error in out that
 * lists the jobs there are. */
job *job_find_arg(tool_env *env, struct json_object *args, tool_result *out);
/* One line per job: its state and command. */
void jobs_list(tool_env *env, strbuf *b);
/* "bash_status: job 3" */
void job_summarize(struct json_object *args, char *buf, size_t size, const char *tool);

#endif
