#!/bin/sh
# bench.sh BINDIR — the benchmarks of bench/README.md, CSV on stdout.
set -eu
bin=${1:-.}
"$bin/ds4cl-bench" --version
