/* bench_peak.h — compute-peak probes for the speed sweep: how many f32
 * FLOP/s the hardware the engine runs on reaches at best, measured in the
 * same run as the engine (a loaded machine moves both alike). */
#ifndef DS4CL_BENCH_PEAK_H
#define DS4CL_BENCH_PEAK_H

/* Independent 16-lane f32 FMA chains on `threads` host threads, about
 * 0.2 s, GFLOP/s (2 per lane FMA). */
double bench_host_fma_gflops(int threads);

/* The same on an OpenCL device (selected as --device does), with the
 * fma_peak kernel of kernels/bench.cl on every compute unit; 0 when the
 * device cannot be opened. */
double bench_cl_fma_gflops(const char *device);

#endif
