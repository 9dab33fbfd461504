/* bench_search.h — `ds4cl-bench --search-bench DIR`: the agent's search
 * tool against `grep -rn` on the same tree and queries. */
#ifndef DS4CL_BENCH_SEARCH_H
#define DS4CL_BENCH_SEARCH_H

/* Parses its own flags from argv; returns the exit status. */
int bench_search_main(int argc, char **argv);

#endif
