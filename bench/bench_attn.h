/* bench_attn.h — `ds4cl-bench --attn-bench`: the cost of one attention
 * step and of the indexer at long context, per backend, on a model with
 * DeepSeek V4 Flash's attention widths. */
#ifndef DS4CL_BENCH_ATTN_H
#define DS4CL_BENCH_ATTN_H

/* argv holds the arguments after --attn-bench. Returns the exit status. */
int bench_attn(int argc, char **argv);

#endif
