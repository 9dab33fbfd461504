/* bench_opencl.h — `ds4cl-bench --cl-bench`: the OpenCL matmul and moe ops
 * at DeepSeek V4 Flash shapes, each as GB/s of weights (decode) or GFLOP/s
 * (prefill), beside an OpenCL streaming-read roof and an f32 FMA peak
 * measured in the same run. CSV on stdout (bench/README.md). */
#ifndef DS4CL_BENCH_OPENCL_H
#define DS4CL_BENCH_OPENCL_H

/* argv holds the arguments after --cl-bench. Returns the exit status. */
int bench_opencl(int argc, char **argv);

#endif
