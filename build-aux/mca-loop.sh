#!/bin/sh
# mca-loop.sh ASM FUNCTION CPU... — cycles per pass of FUNCTION's innermost
# loop that multiplies (vpmaddubsw, vpmaddwd, vpdpbusd, vpdpwssd, vfmadd*), as
# llvm-mca's model of each CPU predicts them: a way to weigh a kernel on
# cores one does not have (their ports differ: an Intel core shuffles on
# one port where a Zen core has two). ASM is `cc -S` output (AT&T syntax).
#
#   cc $(CFLAGS) -S cpu/qk_avx2.c -o /tmp/qk_avx2.s
#   build-aux/mca-loop.sh /tmp/qk_avx2.s iq2_tile_1 skylake alderlake znver4
#
# Needs llvm-mca (LLVM 17 or later for the alderlake and znver4 models;
# Debian 12: apt-get install llvm-19, or set MCA=llvm-mca-19). Calls in
# the loop are modelled badly (llvm-mca assumes 100 cycles): keep them out.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 ASM FUNCTION CPU..." >&2; exit 2; }
asm=$1 fn=$2
shift 2
MCA=${MCA:-$(command -v llvm-mca-19 || command -v llvm-mca || true)}
[ -n "$MCA" ] || { echo "$0: llvm-mca not found (apt-get install llvm-19)" >&2; exit 1; }
loop=$(mktemp)
trap 'rm -f "$loop"' EXIT
awk -v fn="$fn" '
    $0 == fn ":" { on = 1; n = 0; next }
    on && $0 ~ "^\t\\.size\t" fn "," { on = 0 }
    on { line[++n] = $0
         if (match($0, /^\.L[0-9]+:/)) at[substr($0, 1, RLENGTH - 1)] = n
         if (match($0, /^\tj[a-z]+\t\.L[0-9]+$/)) {
             l = $2
             if (l in at && at[l] < n) {
                 mul = 0
                 for (i = at[l] + 1; i < n; i++) if (line[i] ~ /vpmaddubsw|vpmaddwd|vpdpbusd|vpdpwssd|vfmadd/) mul = 1
                 if (mul && (best == 0 || n - at[l] < best)) { best = n - at[l]; from = at[l] + 1; to = n - 1
                     delete keep; k = 0; for (i = from; i <= to; i++) keep[++k] = line[i]; nk = k }
             }
         } }
    END { if (!best) { print "no multiplying loop in " fn > "/dev/stderr"; exit 1 }
          for (i = 1; i <= nk; i++) if (keep[i] !~ /^(#|\t\.|\.L)/) print keep[i] }
' "$asm" > "$loop"
printf '%s: %d instructions a pass;' "$fn" "$(wc -l < "$loop")"
for cpu in "$@"; do
    printf ' %s %s' "$cpu" "$("$MCA" -mcpu="$cpu" -iterations=200 "$loop" 2>/dev/null | awk '/^Total Cycles:/ { printf "%.1f", $3 / 200 }')"
done
echo
