#!/bin/sh
# bench_llamacpp.sh BINDIR PROMPT — ds4cl against llama.cpp on one fixture,
# round by round, CSV on stdout (bench/README.md, "llama.cpp as the
# yardstick").
#
# llama.cpp runs through node-llama-cpp's prebuilt CPU binaries, pinned by
# bench/llamacpp/package-lock.json and installed into build/bench/llamacpp
# (npm, registry access; nothing of it is part of the build or the tests).
# The fixture is the flash-width 2-layer model with compress ratios 0,4:
# llama.cpp divides by zero on a model without a ratio-4 layer.
#
# Each round runs every ds4cl expert arithmetic and llama.cpp on the same
# PREFILL tokens then GEN decoded tokens at the same thread count, the
# order flipped every other round; ratios are ds4cl over llama.cpp of the
# same round. load1 is /proc/loadavg's first figure before each run.
# Environment: BENCH_LLAMACPP_THREADS, _ROUNDS, _PREFILL, _GEN, _EXPERTS
# (see build-aux/bench.sh).
set -eu
bin=$1
prompt=$2
dir=build/bench
nl=$dir/llamacpp
model=$dir/flash-width-2l-r04.gguf
prefill=${BENCH_LLAMACPP_PREFILL:-512}
gen=${BENCH_LLAMACPP_GEN:-32}
rounds=${BENCH_LLAMACPP_ROUNDS:-3}

echo "engine,threads,round,prefill_tokens,gen_tokens,prefill_tps,decode_tps,prefill_ratio,decode_ratio,load1,kernels"
if ! command -v node > /dev/null 2>&1 || ! command -v npm > /dev/null 2>&1; then
    echo "# skipped: needs node and npm (node-llama-cpp)"
    exit 0
fi
mkdir -p "$nl"
if ! cmp -s bench/llamacpp/package-lock.json "$nl/package-lock.json" || [ ! -d "$nl/node_modules/node-llama-cpp" ]; then
    cp bench/llamacpp/package.json bench/llamacpp/package-lock.json "$nl/"
    # the lock pins every version; only the linux-x64 CPU binaries are
    # wanted (the GPU variants are optional dependencies), and no install
    # script runs (it would try to build llama.cpp from source)
    if ! (cd "$nl" && npm install --omit=optional --ignore-scripts --no-audit --no-fund >&2); then
        echo "# skipped: npm could not install node-llama-cpp (bench/llamacpp/package-lock.json)"
        exit 0
    fi
fi
cp bench/llamacpp/run.mjs "$nl/"
if [ ! -s "$model" ]; then
    echo "bench: generating $model (flash widths, 2 layers, ratios 0,4)" >&2
    if ! "$bin/ds4cl-mkmodel" -o "$model" --preset flash-width --layers 2 --ratios 0,4 >&2; then
        "$bin/ds4cl-mkmodel" -o "$model" --preset flash-width --layers 2 --ratios 0,4 --tiny-vocab >&2
    fi
fi

amodel=$(realpath "$model")
aprompt=$(realpath "$prompt")
load1() { cut -d' ' -f1 /proc/loadavg; }

# ours ARITH THREADS: "prefill_tps,decode_tps,kernels,load1"
ours() {
    l=$(load1)
    DS4CL_EXPERTS=$1 "$bin/ds4cl-bench" -m "$model" --prompt-file "$prompt" --backend cpu --threads "$2" \
        --ctx-start "$prefill" --ctx-max "$prefill" --step "$prefill" --gen-tokens "$gen" \
        > "$dir/llamacpp-ours.csv" 2> "$dir/llamacpp-ours.err" || { cat "$dir/llamacpp-ours.err" >&2; return 1; }
    k=$(sed -n 's/.* on cpu (\(.*\)), [0-9.]* GB read.*/\1/p' "$dir/llamacpp-ours.err" | tr ',' ';')
    tail -n 1 "$dir/llamacpp-ours.csv" | awk -F, -v k="$k" -v l="$l" '{ printf "%s,%s,%s,%s\n", $3, $4, k, l }'
}

# theirs THREADS: "prefill_tps,decode_tps,kernels,load1"
theirs() {
    l=$(load1)
    r=$(cd "$nl" && node run.mjs "$amodel" "$aprompt" "$1" "$prefill" "$gen") || return 1
    echo "$r,$l"
}

for t in $BENCH_LLAMACPP_THREADS; do
    r=1
    while [ "$r" -le "$rounds" ]; do
        their=
        if [ $((r % 2)) = 0 ]; then their=$(theirs "$t"); fi
        for a in ${BENCH_LLAMACPP_EXPERTS:-q8k}; do ours "$a" "$t" > "$dir/llamacpp-$a.row"; done
        if [ $((r % 2)) = 1 ]; then their=$(theirs "$t"); fi
        tp=$(echo "$their" | cut -d, -f1)
        td=$(echo "$their" | cut -d, -f2)
        for a in ${BENCH_LLAMACPP_EXPERTS:-q8k}; do
            awk -F, -v a="$a" -v t="$t" -v r="$r" -v p="$prefill" -v g="$gen" -v tp="$tp" -v td="$td" \
                '{ printf "ds4cl-%s,%s,%s,%s,%s,%s,%s,%.2f,%.2f,%s,%s\n", a, t, r, p, g, $1, $2, $1 / tp, $2 / td, $4, $3 }' \
                "$dir/llamacpp-$a.row"
        done
        echo "$their" | awk -F, -v t="$t" -v r="$r" -v p="$prefill" -v g="$gen" \
            '{ printf "llamacpp,%s,%s,%s,%s,%s,%s,1.00,1.00,%s,ggml-cpu-%s\n", t, r, p, g, $1, $2, $4, $3 }'
        r=$((r + 1))
    done
done
