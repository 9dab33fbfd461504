/* bench_quant.h — `ds4cl-bench --quant-bench`: matvec throughput of every
 * weight format against the machine's streaming-read ceiling. */
#ifndef DS4CL_BENCH_QUANT_H
#define DS4CL_BENCH_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* argv holds the arguments after --quant-bench. Returns the exit status. */
int bench_quant(int argc, char **argv);

/* Streaming-read bandwidth in GB/s over `bytes` with `threads` readers (a
 * sum over the buffer, so nothing is written): the best of three reads.
 * Shared with other benchmarks. */
double bench_read_ceiling_gbps(size_t bytes, int threads);

/* The same probe with its buffer kept, for a benchmark that measures the
 * ceiling beside each of its own measurements: on a machine whose memory
 * bandwidth is shared with other guests it moves by 1.5x from one minute
 * to the next. bench_read_probe_gbps returns the best of `reps` reads. */
typedef struct bench_read_probe bench_read_probe;
bench_read_probe *bench_read_probe_open(size_t bytes);
double bench_read_probe_gbps(bench_read_probe *p, int threads, int reps);
void bench_read_probe_close(bench_read_probe *p);

/* Random weight bytes of a type with sane scales (finite f16 d/dmin, plain
 * values in ±2), so kernels see realistic values and no NaN or Inf. */
void bench_fill_weights(uint32_t type, uint8_t *w, size_t bytes);

#endif
