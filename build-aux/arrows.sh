#!/bin/sh
# Usage: arrows.sh [OBJDIR]   (run by `make test`: the build suite)
# Checks that the folders' arrows point down (doc/architecture.md): which
# folder may include which headers, and, given the build's object
# directory, that no engine/ object calls a function defined in a backend
# (cpu/, opencl/) or in mpi/. Prints each forbidden arrow and exits 1 if
# there is one that is not a known exception below.
# ARROWS_ROOT names another source tree to check (the checker's own test).
set -eu
objdir=${1:-}
case $objdir in ''|/*) ;; *) objdir=$PWD/$objdir ;; esac
cd "${ARROWS_ROOT:-$(dirname "$0")/..}"

# Known exceptions, one "FILE HEADER" (or "OBJECT SYMBOL") per line:
# arrows that are still there, each to go with the change that moves its
# code. None is left; nothing may be added: a new arrow that runs the
# wrong way is fixed where it is made.
known='
'

out=$(mktemp "${TMPDIR:-/tmp}/arrows.XXXXXX")
trap 'rm -f "$out"' EXIT
report() { # file header-or-symbol rule
    if printf '%s\n' "$known" | grep -qxF "$1 $2"; then return; fi
    echo "forbidden arrow: $1 -> $2 ($3)"
}

# "FILE HEADER" for every project include of the files under the folders given
includes() {
    for d in "$@"; do
        for f in "$d"/*.c "$d"/*.h; do
            [ -f "$f" ] || continue
            sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
                echo "$f $h"
            done
        done
    done
}

# 1. The backend and op interfaces: only the backends, the engine's hook
#    (mpi/), the engine itself, tests and benchmarks.
includes base res dsml agent tools ui sessions prompts serve download cli | while read -r f h; do
    case $h in engine/backend.h|engine/ops.h) report "$f" "$h" "only engine/, cpu/, opencl/, mpi/ use the backend interface" ;; esac
done > "$out"

# 2. The front ends and every module above the engine reach it through
#    engine/ds4.h only: no backend, no engine-private header, no mpi/.
includes dsml agent tools ui sessions prompts serve download cli | while read -r f h; do
    case $h in
    engine/ds4.h) ;;
    engine/*|cpu/*|opencl/*|mpi/*) report "$f" "$h" "above the engine: engine/ds4.h only" ;;
    esac
done >> "$out"

# 3. serve/ is not the agent: it shares dsml/ with it, nothing of agent/.
includes serve | while read -r f h; do
    case $h in agent/*|ui/*|cli/*) report "$f" "$h" "serve/ uses dsml/, not agent/" ;; esac
done >> "$out"

# 4. The engine and the backends include nothing above them.
includes engine engine/testkit | while read -r f h; do
    case $h in engine/*|base/*|res/*) ;; *) report "$f" "$h" "engine/ includes base/, res/ and itself" ;; esac
done >> "$out"
includes cpu opencl | while read -r f h; do
    case $h in engine/*|base/*|res/*|cpu/*|opencl/*) ;; *) report "$f" "$h" "a backend includes base/, res/, engine/ and itself" ;; esac
done >> "$out"
includes cpu | while read -r f h; do
    case $h in opencl/*) report "$f" "$h" "one backend does not include the other" ;; esac
done >> "$out"
includes opencl | while read -r f h; do
    case $h in cpu/*) report "$f" "$h" "one backend does not include the other" ;; esac
done >> "$out"
includes base res | while read -r f h; do
    case $h in base/*|res/*) ;; *) report "$f" "$h" "base/ and res/ are the bottom" ;; esac
done >> "$out"

# 5. Calls, not only includes: no engine/ object uses a function that a
#    backend or mpi/ defines (a declaration in an engine header would hide
#    such an arrow from the include checks).
if [ -n "$objdir" ] && [ -d "$objdir/engine" ] && [ -d "$objdir/cpu" ]; then
    defs=$(mktemp "${TMPDIR:-/tmp}/arrows-defs.XXXXXX")
    for o in "$objdir"/cpu/*.o "$objdir"/opencl/*.o "$objdir"/mpi/*.o; do
        [ -f "$o" ] && nm --defined-only -g "$o" | awk '$2 ~ /[TDRB]/ { print $3 }'
    done | sort -u > "$defs"
    for o in "$objdir"/engine/*.o "$objdir"/engine/testkit/*.o; do
        [ -f "$o" ] || continue
        nm -u "$o" | awk '{ print $2 }' | sort -u | comm -12 - "$defs" | while read -r s; do
            report "${o#"$objdir"/}" "$s" "engine/ calls no function of a backend or mpi/"
        done
    done >> "$out"
    rm -f "$defs"
fi

if [ -s "$out" ]; then
    cat "$out"
    exit 1
fi
echo "arrows point down"
