#!/bin/sh
# bench-search.sh [TREE] — the search tool against `grep -rn` on a large
# tree (default /usr/include). Best of 3 warm runs each; CSV on stdout:
#   query,mode,ds4cl_ms,grep_ms,ds4cl_first_line
# Both skip symlinks found while walking; grep reads every file, the
# search tool skips binaries (NUL in the first 8 KiB), .git and what
# .gitignore excludes (a system tree has none).
set -eu
tree=${1:-/usr/include}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
make -s programs >/dev/null
# the tools and what they stand on
PKGS="libcurl libwebsockets json-c libpcre2-8"
mkdir -p build/bench
objs=$(ls build/rel/tools/*.o build/rel/base/*.o)
cc -std=c11 -O2 -D_GNU_SOURCE -I. $(pkg-config --cflags $PKGS) -o build/bench/bench-search \
    build-aux/bench-search.c $objs $(pkg-config --libs $PKGS) -lm -pthread -ldl
bin=build/bench/bench-search

best_grep() { # args: grep options and pattern
    best=""
    for i in 1 2 3; do
        t0=$(date +%s%N)
        grep -rn "$@" "$tree" >/dev/null 2>&1 || true
        t1=$(date +%s%N)
        t=$(( (t1 - t0) / 1000000 ))
        if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
    done
    echo "$best"
}

# warm the page cache
grep -rn zzzzzz "$tree" >/dev/null 2>&1 || true

echo "query,mode,ds4cl_ms,grep_ms,ds4cl_first_line"
run() { # query mode(literal|regex) case(case|nocase) grep-flags…
    q=$1 mode=$2 cs=$3
    shift 3
    out=$("$bin" "$tree" "$q" "$mode" "$cs" 3)
    ms=$(printf '%s' "$out" | cut -f1)
    first=$(printf '%s' "$out" | cut -f2 | tr ',' ';')
    g=$(best_grep "$@" -e "$q")
    echo "\"$q\",$mode/$cs,$ms,$g,\"$first\""
}
run pthread_mutex_lock literal case -F
run PTHREAD_MUTEX_LOCK literal nocase -F -i
run 'struct[[:space:]]+sockaddr_in6' regex case -E
run '^#define[[:space:]]+__[A-Z_]+_H$' regex case -E
run 'zzqqxxnotthere' literal case -F
