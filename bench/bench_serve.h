/* bench_serve.h — `ds4cl-bench --serve-bench`: time to first token and
 * decode tokens/s through `ds4cl serve` against the same reply computed in
 * process, in the same run (CSV on stdout). */
#ifndef DS4CL_BENCH_SERVE_H
#define DS4CL_BENCH_SERVE_H

/* Parses its own flags from argv; returns the exit status. */
int bench_serve_main(int argc, char **argv);

#endif
