/* jobs.h — background jobs of the bash tools.
 *
 * Each job has a supervisor process, forked from the agent, that starts a
 * new session, becomes the child subreaper of everything below it, and
 * forks the shell (`bash -c COMMAND`, in its own process group, stdin
 * /dev/null, stdout and stderr into a pipe the supervisor copies to the
 * job's log file, optionally sandboxed). The supervisor, not the agent,
 * enforces the timeout, so a job the agent does not look at still ends on
 * time. The job lasts as long as any process below it: when the shell
 * exits and `cmd &` left something running, the job is still running.
 * Stopping (bash_stop, a timeout, cancellation, the agent exiting — also
 * by a crash, through the parent-death signal) sends SIGTERM to every
 * process of the job, then SIGKILL after a grace period, until none is
 * left; processes that left the process group or the session are still
 * found, because orphans are re-parented to the supervisor. The agent
 * reaps only its own supervisors, by pid: one small thread per job waits
 * for its supervisor, so none stays a zombie while nobody looks.
 *
 * Only async-signal-safe calls run in the forked processes before exec,
 * so jobs can be started from a multi-threaded program.
 */
#ifndef DS4CL_TOOLS_JOBS_H
#define DS4CL_TOOLS_JOBS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "tools/tool_env.h"

#define JOB_KILL_GRACE_MS 2000
#define JOB_MAX_RUNNING 16
#define JOB_LOG_CAP (512ull << 20)

typedef struct job {
    int id;
    pid_t sup;            /* supervisor; also the pgid/sid of the job's session */
    pthread_t reaper;     /* waits for the supervisor */
    bool reaper_joined;
    atomic_bool reaped;   /* set by the reaper once sup_status is valid */
    atomic_int sup_status;
    pid_t shell;          /* 0 until the supervisor reports it */
    int report_fd;        /* supervisor → agent records; -1 once closed */
    int log_fd;           /* read side of the log; -1 when closed (job_log_fd reopens) */
    char *command;
    char *log_path;
    double start_ms, end_ms;
    int timeout_s;
    bool sandboxed;
    bool done;            /* every process of the job has ended */
    bool shell_exited;
    int shell_status;     /* wait status of the shell */
    bool timed_out, stopping, log_capped;
    bool final_reported;  /* the model has seen it done */
    size_t shown_upto;    /* log bytes shown to the model */
    size_t progress_upto; /* log bytes passed to ctx->progress */
} job;

struct job_table {
    job **v;
    size_t n, cap;
    int next_id;
};

/* Starts a job; NULL with a reason in err. */
job *jobs_start(tool_env *env, const char *command, int timeout_s, bool sandbox, ds4_error *err);
/* Collects the supervisor's reports and reaps it when it is done. */
void job_poll(job *j);
void jobs_poll_all(tool_env *env);
/* Asks the supervisor to stop the job (TERM, then KILL after the grace
 * period); returns at once. */
void job_stop(job *j);
job *jobs_find(tool_env *env, int id);
size_t jobs_running(tool_env *env);
/* Log size in bytes. */
size_t job_log_size(job *j);
/* The read side of the log, opened on demand; -1 when it is gone. */
int job_log_fd(job *j);
/* Closes the log's read side of a finished job (open descriptors must not
 * grow with the number of jobs a session ran). */
void job_release(job *j);

#endif
