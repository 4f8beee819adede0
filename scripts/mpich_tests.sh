#!/usr/bin/env bash
# Builds MPICH's own tests named in tests/mpich/tests.list into
# build/mpich-tests/, against Debian's MPICH (mpicc.mpich).  The source is
# the Debian archive's MPICH 4.0.2 tarball (the version Debian ships),
# checked against the sha256 of its .dsc and kept in build/src/.
# Only test/mpi's small harness (util/mtest*.c) is compiled with each test,
# with a configuration header written here instead of its configure run.
set -euo pipefail
cd "$(dirname "$0")/.."

version=4.0.2
tarball=mpich_$version.orig.tar.xz
sha256=b27039f964afeb6b8a3e009c56b441cbe368c26d6d6476ad3bb7190996875860
url=${LATTICE_MPICH_SOURCE_URL:-http://deb.debian.org/debian/pool/main/m/mpich/$tarball}
src=build/src
out=build/mpich-tests
list=tests/mpich/tests.list

mkdir -p "$src" "$out"
if ! echo "$sha256  $src/$tarball" | sha256sum -c --status 2>/dev/null; then
    curl -fsSL --retry 3 -o "$src/$tarball.part" "$url" ||
        { echo "mpich_tests: cannot fetch $url" >&2; exit 1; }
    echo "$sha256  $src/$tarball.part" | sha256sum -c --status ||
        { echo "mpich_tests: $url is not MPICH $version's tarball (sha256)" >&2; rm -f "$src/$tarball.part"; exit 1; }
    mv "$src/$tarball.part" "$src/$tarball"
fi
tree=$src/mpich-$version/test/mpi
[ -f "$tree/util/mtest.c" ] || tar -C "$src" -xJf "$src/$tarball" "mpich-$version/test/mpi"

# what test/mpi's configure would find on this system (Debian 12, MPICH 4)
cat >"$out/mpitestconf.h.new" <<'CONF'
#define HAVE_STDLIB_H 1
#define HAVE_STRING_H 1
#define HAVE_UNISTD_H 1
#define HAVE_STDINT_H 1
#define HAVE_INTTYPES_H 1
#define HAVE_STDARG_H 1
#define HAVE_SYS_TIME_H 1
#define HAVE_SYS_RESOURCE_H 1
#define HAVE_GETRUSAGE 1
#define HAVE_LONG_DOUBLE 1
#define HAVE_LONG_LONG 1
#define HAVE_PTHREAD_H 1
#define HAVE_MPI_INIT_THREAD 1
#define HAVE_MPI_WIN_CREATE 1
#define HAVE_MPI_SPAWN 1
#define THREAD_PACKAGE_NAME 2
CONF
cmp -s "$out/mpitestconf.h.new" "$out/mpitestconf.h" && rm "$out/mpitestconf.h.new" ||
    mv "$out/mpitestconf.h.new" "$out/mpitestconf.h"

harness=("$tree/util/mtest.c" "$tree/util/mtest_single.c" "$tree/util/mtest_common.c")
while read -r name source flags; do
    case "$name" in ''|'#'*) continue ;; esac
    [ -f "$tree/$source" ] || { echo "mpich_tests: $list: no $source in MPICH $version" >&2; exit 1; }
    exe=$out/$name
    [ "$exe" -nt "$tree/$source" ] && [ "$exe" -nt "$list" ] && [ "$exe" -nt "$out/mpitestconf.h" ] && continue
    # shellcheck disable=SC2086  # flags are words
    mpicc.mpich -O2 -w -I"$out" -I"$tree/include" $flags -o "$exe" "$tree/$source" "${harness[@]}"
done <"$list"
echo "mpich_tests: $(grep -cv '^\s*\(#\|$\)' "$list") of MPICH's tests in $out"
