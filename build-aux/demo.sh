#!/bin/sh
# demo.sh BINDIR — the agent end to end on a generated tiny model.
set -eu
bin=${1:-.}
"$bin/ds4cl" --version
"$bin/ds4cl-mkmodel" --version
"$bin/ds4cl-bench" --version
