/* bench_hybrid.h — `ds4cl-bench --hybrid-bench`: decode and prefill with
 * the routed experts in host memory against the device holding them all. */
#ifndef DS4CL_BENCH_HYBRID_H
#define DS4CL_BENCH_HYBRID_H

/* Whole argv; returns the exit status. CSV on stdout (bench_hybrid.c). */
int bench_hybrid_main(int argc, char **argv);

#endif
