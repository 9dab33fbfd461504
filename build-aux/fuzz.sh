#!/bin/sh
# fuzz.sh SECONDS BIN...  runs each libFuzzer target for SECONDS with its
# corpus in build/fuzz/corpus/NAME (seeded from tests/fuzz/seeds/NAME).
# A target that makes its own seeds (session_snapshot: its model exists
# only inside it) writes them into the directory $DS4CL_FUZZ_SEED_DIR.
set -eu
secs=$1; shift
failed=
for bin in "$@"; do
    name=$(basename "$bin")
    corpus=build/fuzz/corpus/$name
    mkdir -p "$corpus"
    if [ -d "tests/fuzz/seeds/$name" ]; then cp -n tests/fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true; fi
    echo "fuzz: $name for ${secs}s"
    # The log is kept whole (a crash report is longer than the tail shown)
    # and a failing target fails the run once every target has run.
    log=build/fuzz/$name.log
    status=0
    DS4CL_FUZZ_SEED_DIR="$corpus" "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix=build/fuzz/"$name"- "$corpus" >"$log" 2>&1 || status=$?
    tail -n 12 "$log"
    if [ "$status" -ne 0 ]; then
        echo "fuzz: $name FAILED (status $status), see $log"
        failed="$failed $name"
    fi
done
if [ -n "$failed" ]; then
    echo "fuzz: failing targets:$failed"
    exit 1
fi
