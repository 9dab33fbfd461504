#!/bin/sh
# deps.sh --check    exit 0 when everything ds4cl needs to build and test is here
# deps.sh --install  install the missing Debian packages (apt-get as root,
#                    sudo otherwise), non-interactively
# deps.sh --check-mpi / --install-mpi  the same for Open MPI, which only
#                    `make MPI=1` needs
# deps.sh --rusticl-dir  print where Mesa's OpenCL drivers are unpacked
#
# Mesa's OpenCL drivers (rusticl, clover: Debian's mesa-opencl-icd) are a
# second OpenCL implementation for the tests. They are unpacked into a
# private directory rather than installed, so that they register nothing in
# /etc/OpenCL/vendors: PoCL stays the only system-wide driver, and a test
# picks rusticl or several drivers through its own OCL_ICD_VENDORS
# directory. Their libraries (LLVM 15, libclc, the SPIR-V translator) are
# installed as ordinary packages.
set -u

PKGS="build-essential pkg-config clang libclang-rt-14-dev libncursesw5-dev
libcurl4-openssl-dev libssl-dev libwebsockets-dev libjson-c-dev libpcre2-dev
libmicrohttpd-dev ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo tmux chromium
ca-certificates curl libclc-15 libllvmspirvlib15"
MESA_CL_PKG=mesa-opencl-icd
MESA_CL_DIR=${DS4CL_MESA_CL_DIR:-/usr/local/lib/ds4cl/mesa-opencl-icd}
MESA_CL_LIB=$MESA_CL_DIR/usr/lib/$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)/libRusticlOpenCL.so.1
MPI_PKGS="libopenmpi-dev openmpi-bin"

missing() {
    for lib in ncursesw libcurl libwebsockets json-c OpenCL libpcre2-8 libcrypto libmicrohttpd; do
        ${PKG_CONFIG:-pkg-config} --exists "$lib" 2>/dev/null || { echo "library $lib"; return 0; }
    done
    for prog in cc clang make pkg-config clinfo tmux node npm; do
        command -v "$prog" >/dev/null 2>&1 || { echo "program $prog"; return 0; }
    done
    command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
        || { echo "program chromium"; return 0; }
    [ -e /etc/OpenCL/vendors/pocl.icd ] || { echo "PoCL OpenCL driver"; return 0; }
    [ -e "$MESA_CL_LIB" ] || [ -e "$MESA_CL_DIR/UNAVAILABLE" ] || { echo "Mesa's OpenCL drivers (rusticl) in $MESA_CL_DIR"; return 0; }
    return 1
}

sudo_or_explain() {
    if [ "$(id -u)" = 0 ]; then
        SUDO=
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO=sudo
    else
        echo "ds4cl: installing packages needs root: run 'sudo make deps' or install:" >&2
        echo "  $1" | tr '\n' ' ' >&2
        echo >&2
        exit 1
    fi
}

# Unpacks mesa-opencl-icd into MESA_CL_DIR (its dependencies come with PKGS).
unpack_mesa_cl() {
    [ -e "$MESA_CL_LIB" ] && return 0
    tmp=$(mktemp -d) || return 1
    # apt's download user cannot write into a directory only root owns
    chmod 0777 "$tmp"
    (cd "$tmp" && apt-get download -qq "$MESA_CL_PKG") || { rm -rf "$tmp"; return 1; }
    $SUDO mkdir -p "$MESA_CL_DIR" && $SUDO dpkg -x "$tmp"/"$MESA_CL_PKG"_*.deb "$MESA_CL_DIR"
    rc=$?
    rm -rf "$tmp"
    return $rc
}

case "${1:---check}" in
--rusticl-dir)
    echo "$MESA_CL_DIR"
    ;;
--check-mpi)
    command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 && exit 0
    echo "ds4cl: MPI=1 needs Open MPI (mpicc, mpirun); installing $MPI_PKGS" >&2
    exit 1
    ;;
--install-mpi)
    sudo_or_explain "$MPI_PKGS"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq || exit 1
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $MPI_PKGS || exit 1
    echo "ds4cl: Open MPI installed"
    ;;
--check)
    what=$(missing) || exit 0
    echo "ds4cl: missing $what; installing dependencies (make deps)" >&2
    exit 1
    ;;
--install)
    sudo_or_explain "$PKGS nodejs npm"
    extra=
    # A Node.js from elsewhere (e.g. NodeSource) already brings npm; the
    # Debian npm package would conflict with it.
    command -v node >/dev/null 2>&1 || extra="$extra nodejs"
    command -v npm >/dev/null 2>&1 || extra="$extra npm"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq || exit 1
    # shellcheck disable=SC2086
    $SUDO apt-get install -y -qq --no-install-recommends $PKGS $extra || exit 1
    if ! unpack_mesa_cl; then
        # not asked again by every build: remove the file to retry
        echo "ds4cl: could not unpack $MESA_CL_PKG; the rusticl tests will be skipped" >&2
        $SUDO mkdir -p "$MESA_CL_DIR" && echo "$MESA_CL_PKG could not be downloaded" | $SUDO tee "$MESA_CL_DIR/UNAVAILABLE" >/dev/null
    fi
    if what=$(missing); then
        echo "ds4cl: still missing $what after installing packages" >&2
        exit 1
    fi
    echo "ds4cl: dependencies installed"
    ;;
*)
    echo "usage: deps.sh --check | --install | --check-mpi | --install-mpi | --rusticl-dir" >&2
    exit 2
    ;;
esac
