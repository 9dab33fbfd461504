#!/bin/sh
# late-pkg-config.sh — a pkg-config that behaves as on a machine whose
# packages are installed during the make run: it gives no --cflags or --libs
# until something has asked it --exists (as build-aux/deps.sh does when it
# checks or installs the packages).  CI builds with it as PKG_CONFIG, so a
# Makefile that computes its flags before the dependency step fails to link.
# DS4CL_LATE_STAMP names the file that marks the packages as "installed".
stamp=${DS4CL_LATE_STAMP:?set DS4CL_LATE_STAMP to a fresh path}
for a in "$@"; do
    case $a in
    --exists) : > "$stamp" ;;
    --cflags|--libs) [ -e "$stamp" ] || exit 1 ;;
    esac
done
exec pkg-config "$@"
