/* join.c — the MPI job as the engine's job hook: the front ends start,
 * serve, plan and attach through engine/ds4.h and never name mpi/. */
#include "mpi/dmpi.h"

#include "engine/backend.h"

static const ds4_job_ops mpi_job = {
    .start = dmpi_start,
    .ranks = dmpi_ranks,
    .serve = dmpi_serve,
    .plan = dmpi_plan,
    .attach = dmpi_attach,
    .split_text = dmpi_split_text,
};
DS4_JOB_REGISTER(mpi_job)
