#!/bin/sh
# kvpilot's launcher. The bundled Python needs glibc @FLOOR@; on an older C library the loader
# would stop with "version `GLIBC_2.xx' not found" before kvpilot could say anything, so the
# version is checked here first, then the real executable (kvpilot.bin, next to this file) runs.
floor=@FLOOR@
version=
glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null)
case $glibc in
    "glibc "[0-9]*) version=${glibc#glibc } ;;
    *) version=$(ldd --version 2>/dev/null | sed -n '1s/.* \([0-9][0-9]*\.[0-9][0-9]*\)$/\1/p') ;;
esac
case $version in
    [0-9]*.[0-9]*)
        major=${version%%.*}
        minor=${version#*.}
        minor=${minor%%[!0-9]*}
        if [ "$major" -lt "${floor%%.*}" ] || {
            [ "$major" -eq "${floor%%.*}" ] && [ "${minor:-0}" -lt "${floor#*.}" ]
        }; then
            echo "kvpilot needs glibc $floor or newer (@DISTRIBUTIONS@); this system has glibc $version." >&2
            exit 1
        fi
        ;;
esac
self=$(readlink -f "$0" 2>/dev/null) || self=$0
KVPILOT_LAUNCHER=$self
export KVPILOT_LAUNCHER
exec "${self%/*}/kvpilot.bin" "$@"
