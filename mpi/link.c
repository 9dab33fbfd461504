/* link.c — MPI start and a transport in which no wait is unbounded: sends
 * and receives are nonblocking requests polled until a deadline, with a
 * short sleep between polls (blocking MPI calls spin on a core, and the
 * ranks of one machine share its cores with the computation). */
#include "mpi/dmpi_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank, g_size = 1;
static bool g_started;
static char g_host[MPI_MAX_PROCESSOR_NAME + 1] = "localhost";
static double g_last_beat;

int dmpi_rank(void) { return g_rank; }
int dmpi_ranks(void) { return g_size; }
int dmpi_size(void) { return g_size; }
const char *dmpi_host(void) { return g_host; }

double dmpi_timeout_s(void)
{
    const char *v = getenv("DS4CL_MPI_TIMEOUT");
    char *end;
    double t = v && *v ? strtod(v, &end) : 0;
    return v && *v && !*end && t > 0 ? t : 120.0;
}

int dmpi_start(int *argc, char ***argv)
{
    /* a process mpirun did not start stays a plain program: no MPI
     * runtime, no singleton start-up */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK")) return 0;
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "ds4cl: cannot start MPI\n");
        return -1;
    }
    g_started = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int len = 0;
    if (MPI_Get_processor_name(g_host, &len) != MPI_SUCCESS) snprintf(g_host, sizeof g_host, "rank %d", g_rank);
    if (g_rank == 0) atexit(dmpi_stop);
    return g_rank;
}

bool dmpi_started(void) { return g_started; }

/* Sleeps a little longer each round while nothing happens: a few
 * microseconds first (a decode step's answer is near), up to a
 * millisecond (an idle rank costs nothing). */
static void pause_for(int round)
{
    long ns = round < 8 ? 2000L << round : 1000000L;
    struct timespec ts = { 0, ns > 1000000L ? 1000000L : ns };
    nanosleep(&ts, NULL);
}

static const char *mpi_why(int rc)
{
    static char buf[MPI_MAX_ERROR_STRING + 1];
    int len = 0;
    if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) snprintf(buf, sizeof buf, "MPI error %d", rc);
    return buf;
}

/* Polls rq until it completes or timeout_s passes: 0, 1 on timeout, -1
 * with err. */
static int wait_req(MPI_Request *rq, double timeout_s, ds4_error *err)
{
    double deadline = base_now_ms() + timeout_s * 1000.0;
    for (int round = 0;; round++) {
        int done = 0;
        int rc = MPI_Test(rq, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return ds4_error_set(err, "%s", mpi_why(rc));
        if (done) return 0;
        if (base_now_ms() > deadline) return 1;
        pause_for(round);
    }
}

int dmpi_send(int to, int tag, const void *buf, size_t n, ds4_error *err)
{
    if (n > INT_MAX) return ds4_error_set(err, "a message of %zu bytes is beyond MPI's count", n);
    MPI_Request rq;
    int rc = MPI_Isend(buf, (int)n, MPI_BYTE, to, tag, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return ds4_error_set(err, "cannot send to rank %d: %s", to, mpi_why(rc));
    ds4_error why = { "" };
    rc = wait_req(&rq, dmpi_timeout_s(), &why);
    if (rc < 0) return ds4_error_set(err, "cannot send to rank %d: %s", to, why.msg);
    if (rc > 0)
        return ds4_error_set(err, "rank %d stopped answering: it did not take a message of %zu bytes within %g s (it died or "
                             "lost its link)", to, n, dmpi_timeout_s());
    return 0;
}

int dmpi_probe(int from, int tag, double timeout_s, int *src, size_t *n, int *heard, ds4_error *err)
{
    double deadline = base_now_ms() + timeout_s * 1000.0;
    for (int round = 0;; round++) {
        int flag = 0;
        MPI_Status st;
        int rc = MPI_Iprobe(MPI_ANY_SOURCE, DMPI_TAG_BEAT, MPI_COMM_WORLD, &flag, &st);
        if (rc == MPI_SUCCESS && flag) {
            char b;
            MPI_Recv(&b, 1, MPI_BYTE, st.MPI_SOURCE, DMPI_TAG_BEAT, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (heard) *heard = st.MPI_SOURCE;
            deadline = base_now_ms() + timeout_s * 1000.0;
            round = 0;
            continue;
        }
        rc = MPI_Iprobe(from, tag, MPI_COMM_WORLD, &flag, &st);
        if (rc != MPI_SUCCESS) return ds4_error_set(err, "%s", mpi_why(rc));
        if (flag) {
            int count = 0;
            MPI_Get_count(&st, MPI_BYTE, &count);
            *src = st.MPI_SOURCE;
            *n = (size_t)count;
            return 0;
        }
        if (timeout_s >= 0 && base_now_ms() > deadline) return 1;
        pause_for(round);
    }
}

int dmpi_recv(int from, int tag, void *buf, size_t n, ds4_error *err)
{
    if (n > INT_MAX) return ds4_error_set(err, "a message of %zu bytes is beyond MPI's count", n);
    MPI_Request rq;
    int rc = MPI_Irecv(buf, (int)n, MPI_BYTE, from, tag, MPI_COMM_WORLD, &rq);
    if (rc != MPI_SUCCESS) return ds4_error_set(err, "cannot receive from rank %d: %s", from, mpi_why(rc));
    ds4_error why = { "" };
    rc = wait_req(&rq, dmpi_timeout_s(), &why);
    if (rc < 0) return ds4_error_set(err, "cannot receive from rank %d: %s", from, why.msg);
    if (rc > 0)
        return ds4_error_set(err, "rank %d stopped answering: a message of %zu bytes from it stalled for %g s (it died or "
                             "lost its link)", from, n, dmpi_timeout_s());
    return 0;
}

void dmpi_beat(bool now)
{
    double t = base_now_ms();
    if (!now && t - g_last_beat < 500.0) return;
    g_last_beat = t;
    static const char b = 0;
    MPI_Request rq;
    /* small enough to go out eagerly: nothing waits for it */
    if (MPI_Isend(&b, 1, MPI_BYTE, 0, DMPI_TAG_BEAT, MPI_COMM_WORLD, &rq) == MPI_SUCCESS) MPI_Request_free(&rq);
}
