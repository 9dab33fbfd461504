#!/bin/sh
# gpu-check.sh — the OpenCL backend on a machine with a GPU, in one command.
#
#   build-aux/gpu-check.sh bundle [DIR]
#       On the build machine: builds the programs for x86-64-v3 (AVX2, no
#       AVX-512), and gathers into DIR (default build/gpu-check) and
#       DIR.tar.gz everything a bare machine lacks: ds4cl, ds4cl-bench,
#       ds4cl-mkmodel, the test runner, the shared libraries they link
#       (the OpenCL ICD loader included; only glibc's own libraries are left
#       to the system), the golden model and its reference logits, and this
#       script.
#
#   ./gpu-check.sh run [--icd LIB] [--device D] [--layers N] [--work DIR] [--only STEP,…]
#       On the GPU machine, inside the unpacked bundle, with nothing
#       installed: registers the GPU's OpenCL driver in a private vendors
#       directory (NVIDIA's libnvidia-opencl.so.1 is looked for where the
#       driver and container runtimes put it; --icd names any driver library
#       instead), then runs, each step logged in WORK (default ./work):
#         devices        ds4cl --list-devices
#         tight/release  the golden model against its reference logits
#                        (tests/test_golden_opencl.c: tight and release
#                        tiers), with the GPU-shaped and the CPU-shaped
#                        kernels
#         roof           ds4cl-bench --cl-bench: the device's streaming-read
#                        roof and the Q8_0 attn_q_b kernels (decode and
#                        prefill) against it
#         fixture        a generated model with DeepSeek V4 Flash widths and
#                        N layers (default 4)
#         speed          prefill and decode on the device alone (ds4cl-bench)
#         hybrid         the same with routed experts in host memory
#                        (ds4cl-bench --hybrid-bench)
#       and prints one summary table. --only runs the named steps alone. Exits 1 when a step failed, 2 when
#       something it needs is missing (with what and where it looked).
set -u

die() {
    echo "gpu-check: $*" >&2
    exit 2
}

# ---- bundle ------------------------------------------------------------------

# glibc's libraries and the dynamic loader: every Linux has its own, and a
# copy from another distribution would not match it
is_system_lib() {
    case "$(basename "$1")" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | \
        libresolv.so.* | libutil.so.* | libgcc_s.so.*) return 0 ;;
    esac
    return 1
}

find_golden() {
    if [ -n "${DS4CL_GOLDEN:-}" ]; then
        echo "$DS4CL_GOLDEN"
        return
    fi
    d=$(pwd)
    while [ "$d" != / ]; do
        d=$(dirname "$d")
        [ -f "$d/shared/golden/A/model.gguf" ] && { echo "$d/shared/golden"; return; }
    done
}

bundle() {
    out=${1:-build/gpu-check}
    [ -f Makefile ] && [ -d opencl ] || die "run 'bundle' from the repository root"
    golden=$(find_golden)
    [ -n "$golden" ] && [ -f "$golden/A/model.gguf" ] ||
        die "golden data not found (shared/golden beside the checkout, or \$DS4CL_GOLDEN)"
    arch=x86-64-v3
    make -j"${JOBS:-2}" ARCH=$arch programs "build/rel-$arch/ds4cl-tests" >&2 || die "the build failed"
    rm -rf "$out" "$out.tar.gz"
    mkdir -p "$out/bin" "$out/lib" "$out/golden" || die "cannot create $out"
    for p in ds4cl ds4cl-bench ds4cl-mkmodel; do cp "build/bin-$arch/$p" "$out/bin/"; done
    cp "build/rel-$arch/ds4cl-tests" "$out/bin/"
    strip "$out"/bin/* 2>/dev/null
    for b in "$out"/bin/*; do
        ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
    done | sort -u | while read -r lib; do
        is_system_lib "$lib" || cp -L "$lib" "$out/lib/"
    done
    strip --strip-unneeded "$out"/lib/* 2>/dev/null
    mkdir -p "$out/golden/A" "$out/golden/A-f32-nosim/variants" "$out/golden/A-f32"
    cp "$golden/A/model.gguf" "$out/golden/A/"
    for s in A-f32-nosim A-f32; do
        cp "$golden/$s/case.json" "$golden/$s/prefix_logits.f32" "$golden/$s/routing.json" "$out/golden/$s/"
    done
    cp "$golden/A-f32-nosim/variants/prefix_logits_f16kv.f32" "$out/golden/A-f32-nosim/variants/"
    cp README.md "$out/prompt.txt"
    cp build-aux/gpu-check.sh "$out/gpu-check.sh"
    chmod +x "$out/gpu-check.sh"
    tar -C "$(dirname "$out")" -czf "$out.tar.gz" "$(basename "$out")" || die "tar failed"
    echo "bundle: $out ($(du -sh "$out" | cut -f1)), $out.tar.gz ($(du -h "$out.tar.gz" | cut -f1))"
    echo "on the GPU machine: tar xzf $(basename "$out").tar.gz && $(basename "$out")/gpu-check.sh run"
}

# ---- run -----------------------------------------------------------------------

# NVIDIA's OpenCL driver library: the driver's own install, the NVIDIA
# container runtime's mounts, WSL
find_nvidia() {
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /usr/local/nvidia/lib64 /usr/local/nvidia/lib \
        /usr/lib/wsl/lib /run/nvidia/driver/usr/lib/x86_64-linux-gnu; do
        [ -e "$d/libnvidia-opencl.so.1" ] && { echo "$d/libnvidia-opencl.so.1"; return; }
    done
    if command -v ldconfig >/dev/null 2>&1; then
        ldconfig -p 2>/dev/null | awk '/libnvidia-opencl\.so\.1 / { print $NF; exit }'
    fi
}

SUMMARY=
record() { # step, status, seconds, result
    SUMMARY="$SUMMARY$(printf '%-12s %-5s %6s  %s' "$1" "$2" "$3" "$4")
"
}

# step NAME RESULT-FILTER COMMAND...: runs the command with its output in
# WORK/NAME.log; RESULT-FILTER (a shell function) reads the log and prints
# the summary's result column
FAILED=0
ONLY=
step() {
    name=$1 filter=$2
    shift 2
    case ",$ONLY," in
    ,,) ;;
    *",$name,"*) ;;
    *) record "$name" skip - "not in --only"; return ;;
    esac
    echo "== $name: $*"
    t0=$(date +%s)
    "$@" >"$WORK/$name.log" 2>&1
    rc=$?
    t=$(($(date +%s) - t0))
    tail -n 15 "$WORK/$name.log" | sed 's/^/   /'
    res=$($filter "$WORK/$name.log" 2>/dev/null)
    if [ $rc -eq 0 ]; then
        record "$name" ok "$t" "$res"
    else
        FAILED=1
        record "$name" FAIL "$t" "exit $rc: ${res:-see $WORK/$name.log}"
    fi
}

res_devices() { grep -m1 -E '\((default|selected)\)' "$1" | sed 's/^ *//'; }
res_tests() { grep -E '^[0-9]+ passed' "$1" | tail -n 1; }
res_roof() { # the read roof, then each row's GB/s and share of it
    awk -F, '$1 == "roof" && $2 == "stream_read" { printf "read roof %s GB/s; ", $10 }
             $1 != "roof" && $2 == "attn_q_b" && $10 != "" { printf "T=%s %s GB/s (%s%% of it); ", $7, $10, $11 }
             $1 != "roof" && $2 == "attn_q_b" && $10 == "" { printf "T=%s %s GFLOP/s (%s%% of peak); ", $7, $12, $13 }' "$1" | cut -c1-110
}
res_fixture() { ls -l "$FIXTURE" 2>/dev/null | awk '{ printf "%.1f GB\n", $5 / 1e9 }'; }
# The CSV rows after their header line (the driver and the bench print
# other lines first), by column name.
res_csv() { # frontier, decode t/s, prefill t/s
    awk -F, '/^backend,/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
             col["decode_tps"] && /^[a-z]+,[0-9]/ { printf "ctx %s: decode %.2f t/s, prefill %.2f t/s; ", $col["frontier"], $col["decode_tps"], $col["prefill_tps"] }' "$1" | cut -c1-110
}
res_hybrid() { # each placement's decode t/s against the device alone
    awk -F, '/^placement,/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
             col["decode_tps"] && /^[a-z-]+,[0-9]/ { printf "%s %.2f t/s (%.2fx); ", $col["placement"], $col["decode_tps"], $col["decode_vs_device"] }' "$1" | cut -c1-110
}

# The golden tests of one tier with one kernel shape (the tests that name
# a shape keep theirs).
golden() { # shape, patterns...
    shape=$1
    shift
    env DS4CL_KERNELS="$shape" "$B/bin/ds4cl-tests" "$@"
}

run() {
    icd= layers=4
    WORK=$(pwd)/work
    while [ $# -gt 0 ]; do
        case "$1" in
        --icd) icd=$2; shift 2 ;;
        --device) export DS4CL_DEVICE="$2"; shift 2 ;;
        --layers) layers=$2; shift 2 ;;
        --work) WORK=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        *) die "unknown argument '$1' (run [--icd LIB] [--device D] [--layers N] [--work DIR] [--only STEP,…])" ;;
        esac
    done
    B=$(cd "$(dirname "$0")" && pwd)
    for f in bin/ds4cl bin/ds4cl-bench bin/ds4cl-mkmodel bin/ds4cl-tests lib/libOpenCL.so.1 golden/A/model.gguf \
        golden/A-f32-nosim/prefix_logits.f32 golden/A-f32/prefix_logits.f32 prompt.txt; do
        [ -e "$B/$f" ] || die "the bundle lacks $f ($B/$f): rebuild it with build-aux/gpu-check.sh bundle"
    done
    if [ -z "$icd" ]; then
        icd=$(find_nvidia)
        [ -n "$icd" ] || die "no NVIDIA OpenCL driver: libnvidia-opencl.so.1 is not in /usr/lib/x86_64-linux-gnu," \
            "/usr/lib64, /usr/local/nvidia/lib64, /usr/lib/wsl/lib nor the ldconfig cache (a container needs" \
            "NVIDIA_DRIVER_CAPABILITIES to include compute); name a driver library with --icd PATH"
    fi
    [ -r "$icd" ] || die "the OpenCL driver library $icd does not exist or cannot be read"
    mkdir -p "$WORK/vendors" "$WORK/cache" || die "cannot create $WORK"
    rm -f "$WORK"/vendors/*.icd
    echo "$icd" >"$WORK/vendors/device.icd"
    export OCL_ICD_VENDORS="$WORK/vendors"
    export LD_LIBRARY_PATH="$B/lib"
    export XDG_CACHE_HOME="$WORK/cache" DS4CL_ROOT="$WORK" DS4CL_GOLDEN="$B/golden" DS4CL_BINDIR="$B/bin"
    # a library missing, or this system's glibc older than the build's
    # (2.34 for a Debian 12 build: Ubuntu 22.04 and later)
    missing=$(for b in "$B"/bin/*; do ldd "$b" 2>&1 | grep 'not found'; done | sort -u)
    [ -z "$missing" ] || die "the programs cannot be loaded here:
$missing"
    echo "driver: $icd; work: $WORK"
    start=$(date +%s)

    step devices res_devices "$B/bin/ds4cl" --list-devices
    [ $FAILED -eq 0 ] || { printf '\n%s' "$SUMMARY"; die "no usable OpenCL device through $icd"; }
    tight="golden_opencl.nosim golden_opencl.f16kv golden_opencl.routing"
    # shellcheck disable=SC2086
    step tight-gpu res_tests golden gpu $tight
    step release-gpu res_tests golden gpu golden_opencl.full_numerics
    # shellcheck disable=SC2086
    step tight-cpu res_tests golden cpu $tight
    step release-cpu res_tests golden cpu golden_opencl.full_numerics
    step roof res_roof "$B/bin/ds4cl-bench" --cl-bench --only attn_q_b --reps 3
    FIXTURE="$WORK/flash-width-${layers}l.gguf"
    if [ ! -s "$FIXTURE" ] && { [ -z "$ONLY" ] || [ -n "$(echo ",$ONLY," | grep -E ',(speed|hybrid),')" ]; }; then
        step fixture res_fixture "$B/bin/ds4cl-mkmodel" -q -o "$FIXTURE" --preset flash-width --layers "$layers" --tiny-vocab
    fi
    step speed res_csv "$B/bin/ds4cl-bench" -m "$FIXTURE" --prompt-file "$B/prompt.txt" --backend opencl \
        --ctx-start 512 --ctx-max 1024 --step 512 --gen-tokens 16
    step hybrid res_hybrid "$B/bin/ds4cl-bench" --hybrid-bench -m "$FIXTURE" --prefill 512 --gen-tokens 16 --rounds 2

    printf '\n%-12s %-5s %6s  %s\n' step state sec result
    printf '%s' "$SUMMARY"
    # what the chosen device allows and offers (--list-devices), for the record
    awk '/\((default|selected)\)/ { on = 1; next } on && /work-groups/ { sub(/^ */, ""); print "device: " $0; exit }' \
        "$WORK/devices.log" 2>/dev/null
    echo "total $(($(date +%s) - start)) s; logs in $WORK"
    return $FAILED
}

case "${1:-}" in
bundle) shift; bundle "$@" ;;
run) shift; run "$@" ;;
*) echo "usage: gpu-check.sh bundle [DIR] | run [--icd LIB] [--device D] [--layers N] [--work DIR] [--only STEP,…]" >&2; exit 2 ;;
esac
