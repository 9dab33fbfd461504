/* bench_qk.h — `ds4cl-bench --quant-bench`'s rows of the integer 2-bit
 * kernels (engine/qk.h): per SIMD level, the routed experts' decode and
 * prefill products and ggml's perf shape, each against the same-run read
 * ceiling and, given ggml's test-backend-ops, against ggml's figures
 * measured in the same run. */
#ifndef DS4CL_BENCH_QK_H
#define DS4CL_BENCH_QK_H

/* levels: comma-separated level names (NULL: every SIMD level); ggml_path:
 * test-backend-ops to run first (NULL: no yardstick). Returns the exit
 * status. */
int bench_qk(const char *levels, const char *ggml_path, int threads, int reps);

#endif
