#!/bin/sh
# fuzz.sh SECONDS BIN...  runs each libFuzzer target for SECONDS with its
# corpus in build/fuzz/corpus/NAME (seeded from tests/fuzz/seeds/NAME).
set -eu
secs=$1; shift
for bin in "$@"; do
    name=$(basename "$bin")
    corpus=build/fuzz/corpus/$name
    mkdir -p "$corpus"
    if [ -d "tests/fuzz/seeds/$name" ]; then cp -n tests/fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true; fi
    echo "fuzz: $name for ${secs}s"
    "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
done
