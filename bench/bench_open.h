/* bench_open.h — `ds4cl-bench --open-bench -m MODEL`: how long opening a
 * DS4 GGUF takes, stage by stage, with the file's pages cold and warm. */
#ifndef DS4CL_BENCH_OPEN_H
#define DS4CL_BENCH_OPEN_H

/* Parses its own flags from argv; returns the exit status. */
int bench_open_main(int argc, char **argv);

#endif
