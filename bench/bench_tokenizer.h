/* bench_tokenizer.h — `ds4cl-bench --tokenizer-bench FILE -m MODEL`:
 * tokenizer throughput against the npm reference tokenizer. */
#ifndef DS4CL_BENCH_TOKENIZER_H
#define DS4CL_BENCH_TOKENIZER_H

/* Parses its own flags from argv; returns the exit status. */
int bench_tokenizer_main(int argc, char **argv);

#endif
