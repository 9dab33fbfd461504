/* bench_batch.h — `ds4cl-bench --batch-bench`: aggregate decode speed of
 * B sessions stepped together (ds4_sessions_eval) for several B. */
#ifndef DS4CL_BENCH_BATCH_H
#define DS4CL_BENCH_BATCH_H

/* Whole argv; returns the exit status. CSV on stdout (bench_batch.c). */
int bench_batch_main(int argc, char **argv);

#endif
