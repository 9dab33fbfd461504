/* dmpi.h — one model split by layers over the ranks of an MPI job
 * (`make MPI=1`, `mpirun -np N ds4cl …`).
 *
 * Rank 0 is the program itself (agent, UI, tools, sessions, sampling):
 * its engine embeds the tokens, runs the first layer range and the output
 * head. Every other rank opens the same model on its own backend and runs
 * one contiguous range of the layers, in rank order; the hyper-connection
 * streams of each chunk pass from rank to rank with point-to-point
 * messages, and the last rank sends the last token's streams back to rank
 * 0. Sessions, rewinds, resets and snapshots are mirrored on every rank
 * (a snapshot gathers each rank's layers into the one payload; a restore
 * scatters it).
 *
 * Ranges follow each rank's device memory, or DS4CL_MPI_SPLIT (e.g. "3,1":
 * relative shares, one per rank), through the engine's one reading of
 * shares and ranges (ds4_parse_shares, ds4_split_layers). Every wait for another rank has a
 * deadline (DS4CL_MPI_TIMEOUT seconds of silence, default 120; a rank at
 * work sends a beat between layers): a rank that died or a link that
 * failed ends the turn with an error naming the rank, and every later
 * evaluation fails with it at once. Ranks whose model file (identity) or
 * build differs from rank 0's refuse to start, with the reason.
 *
 * The front ends never include this header: mpi/join.c installs start,
 * ranks, serve, plan, attach and split_text as the engine's job hook
 * (engine/backend.h), and they call engine/ds4.h's ds4_job_* instead. The
 * statistics below are for benchmarks and tests.
 */
#ifndef DS4CL_DMPI_H
#define DS4CL_DMPI_H

#include <stdint.h>

#include "engine/ds4.h"

/* Starts MPI when the process was launched by mpirun (or another PMI
 * launcher); returns this process's rank: 0 also when not launched so. */
int dmpi_start(int *argc, char ***argv);

/* Ranks in the job (1 when not launched by mpirun). */
int dmpi_ranks(void);

/* Ranks > 0: open the model rank 0 names and serve its commands until it
 * says quit. Returns the exit status. */
int dmpi_serve(void);

/* Rank 0, before opening the engine that runs: greets the ranks and gives
 * each its range of layers, chosen from their memory, with e an engine of
 * the same model and options opened to plan only. *layer_end gets rank
 * 0's own range's end (its range starts at layer 0; 0 when the job has
 * one rank): open the engine that runs with that range, so that its
 * devices hold only those layers. 0, or -1 with err. */
int dmpi_plan(const ds4_engine *e, int *layer_end, ds4_error *err);

/* Rank 0: spread the layers of e (a forward-based engine, before any
 * session is opened) over the job's ranks (as dmpi_plan chose, or now).
 * 0 when done or when the job has one rank; -1 with err (a rank refused:
 * its reason is in err). */
int dmpi_attach(ds4_engine *e, ds4_error *err);

/* Rank 0: tells the other ranks to quit and ends MPI (installed with
 * atexit by dmpi_start; harmless when called again). */
void dmpi_stop(void);

/* The job as rank 0 sees it. hops: stream messages between ranks; bytes:
 * the bytes they carried; ms: wall time rank 0 waited for the other ranks
 * in evaluations. */
typedef struct {
    int ranks;
    uint64_t chunks, tokens, hops, bytes;
    double ms;
} dmpi_stats;
void dmpi_get_stats(dmpi_stats *out);

/* "layers 0-1 on rank 0 (host), 2-3 on rank 1 (host)": the split after
 * dmpi_attach, "" before or without one. */
const char *dmpi_split_text(void);

#endif
