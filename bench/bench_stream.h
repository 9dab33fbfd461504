/* bench_stream.h — `ds4cl-bench --stream-bench`: decode with the routed
 * experts streamed from the file through an expert cache at several
 * budgets, against the mapped file cold and resident. */
#ifndef DS4CL_BENCH_STREAM_H
#define DS4CL_BENCH_STREAM_H

/* Whole argv; returns the exit status. CSV on stdout (bench_stream.c). */
int bench_stream_main(int argc, char **argv);

#endif
