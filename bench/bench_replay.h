/* bench_replay.h — `ds4cl-bench --replay-bench`: a coding agent's traffic
 * (a main conversation with tool turns, sub-agents, one-shot title and
 * background requests) replayed against `ds4cl serve`, and how many prompt
 * tokens of each request the server took from its live sessions and
 * snapshot cache (CSV on stdout). */
#ifndef DS4CL_BENCH_REPLAY_H
#define DS4CL_BENCH_REPLAY_H

/* Parses its own flags from argv; returns the exit status. */
int bench_replay_main(int argc, char **argv);

#endif
