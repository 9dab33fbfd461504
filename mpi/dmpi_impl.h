/* dmpi_impl.h — what the two sides of the layer split (front.c on rank 0,
 * rank.c on the others) share: the messages, and a transport in which
 * every wait has a deadline (link.c).
 *
 * Messages: a command (dmpi_cmd, tag CMD) optionally followed by one data
 * message (tag DATA) of cmd.bytes from the same sender; an answer to rank
 * 0 (dmpi_reply, tag REPLY) optionally followed by data; and beats (tag
 * BEAT, no data) that a rank at work sends rank 0 so that a long chunk is
 * not taken for silence. Evaluation is a pipeline: rank 0 sends EVAL with
 * the streams to rank 1, each rank sends EVAL with its output streams to
 * the next, and the last rank answers rank 0 with the last token's
 * streams; a rank that fails answers rank 0 directly. Every other command
 * goes from rank 0 to each rank and is answered by it.
 */
#ifndef DS4CL_DMPI_IMPL_H
#define DS4CL_DMPI_IMPL_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "mpi/dmpi.h"

/* Bumped whenever a message changes: ranks of other protocol versions
 * refuse to start. */
#define DMPI_PROTOCOL 1
#define DMPI_BUILD "ds4cl " DS4CL_VERSION " (split protocol 1)"

enum { DMPI_TAG_CMD = 11, DMPI_TAG_DATA, DMPI_TAG_REPLY, DMPI_TAG_BEAT };

typedef enum {
    DMPI_HELLO = 1, /* data: dmpi_hello; reply value: the rank's device memory, msg: its device */
    DMPI_RANGE,     /* a, b: the rank's layers [a, b) */
    DMPI_OPEN,      /* sid, a: n_ctx */
    DMPI_CLOSE,     /* sid; no reply */
    DMPI_EVAL,      /* sid, a: pos0, b: T; data: T rows of streams, then T token ids */
    DMPI_REWIND,    /* sid, a: tokens to keep */
    DMPI_RESET,     /* sid */
    DMPI_SAVE,      /* sid; reply data: the rank's blocks */
    DMPI_LOAD,      /* sid, a: n_tokens, b: 1 when f16 rows; data: the rank's blocks */
    DMPI_QUIT,      /* no reply */
} dmpi_op;

typedef struct {
    int32_t op, sid;
    int64_t a, b;
    uint64_t bytes; /* of the DATA message that follows; 0: none */
} dmpi_cmd;

typedef struct {
    int32_t rc; /* 0, or -1 with msg */
    int32_t rank;
    int64_t value;
    uint64_t bytes; /* of the DATA message that follows */
    char msg[768];
} dmpi_reply;

typedef struct {
    char build[64];
    char model[4096];
    char device[256];
    uint64_t identity;
    int32_t backend, quant_sim, threads, chunk;
} dmpi_hello;

/* ---- link.c ---------------------------------------------------------------- */

bool dmpi_started(void); /* MPI_Init ran (dmpi_start) */
int dmpi_rank(void);
int dmpi_size(void);
const char *dmpi_host(void); /* this process's host name */
double dmpi_timeout_s(void);  /* DS4CL_MPI_TIMEOUT, default 120 */

/* Sends n bytes to rank `to` with `tag`, waiting at most the timeout for
 * it to be taken. 0, or -1 with err. */
int dmpi_send(int to, int tag, const void *buf, size_t n, ds4_error *err);

/* Waits for a message with `tag` from `from` (MPI_ANY_SOURCE allowed).
 * timeout_s < 0 waits forever (an idle rank waiting for work). Beats that
 * arrive meanwhile are taken, reset the deadline and are reported in
 * *heard (the rank last heard from, when heard is not NULL). On arrival,
 * *src is the sender and *n its byte count. 0, 1 on timeout, -1 with err. */
int dmpi_probe(int from, int tag, double timeout_s, int *src, size_t *n, int *heard, ds4_error *err);

/* Receives exactly n bytes from `from` with `tag` (after dmpi_probe, or a
 * DATA message announced by a command). 0, or -1 with err. */
int dmpi_recv(int from, int tag, void *buf, size_t n, ds4_error *err);

/* A beat to rank 0: now, or at most one every half second. */
void dmpi_beat(bool now);

#endif
