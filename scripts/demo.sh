#!/usr/bin/env bash
# The main job: boot the default machine (2x2x4 compute nodes, two psets of 8)
# and run an example job on all 16 compute nodes, its file I/O shipped to the
# two I/O nodes, then say what each step showed.
#
# The machine lives in a temporary directory, removed at the end, unless
# LATTICE_HOME names one (then that machine is replaced: `lattice init --force`,
# which refuses while a block there is booted).
set -euo pipefail
cd "$(dirname "$0")/.."
lattice=.venv/bin/lattice
work=$(mktemp -d /tmp/lattice-demo-files.XXXXXX)
chmod 755 "$work"
own_home=
if [ -z "${LATTICE_HOME:-}" ]; then
    own_home=$(mktemp -d /tmp/lattice-demo-machine.XXXXXX)
    export LATTICE_HOME=$own_home
fi
cleanup() {
    $lattice free R00 >/dev/null 2>&1 || true
    $lattice block delete R00 >/dev/null 2>&1 || true
    rm -rf "$work"
    [ -z "$own_home" ] || rm -rf "$own_home"
}
trap cleanup EXIT
say() { printf '\n== %s\n' "$*"; }

say "1. A machine: 16 compute nodes on a 2x2x4 torus, in two psets of 8, each pset served by one I/O node (in $LATTICE_HOME)"
$lattice init --force
nodes=$($lattice machine)   # (captured: `| head` would end lattice with SIGPIPE under pipefail)
sed -n 1,4p <<<"$nodes"
echo "   ... ($(grep -c ':J' <<<"$nodes") nodes listed)"

say "2. Boot a block of all 16 nodes: the service node starts one ciod per pset and one compute node process per node"
$lattice block create R00 --shape 2x2x4
$lattice boot R00
$lattice blocks

say "3. Run a 16-rank job under cnk; each rank makes a directory, writes, renames and reads back files (build/examples/fileops)"
$lattice run --block R00 -n 16 --label --cwd "$work" build/examples/fileops | sort -n | sed -n '1,4p;$p'

say "4. Where the I/O went: the ranks' files are on the I/O nodes' file system, made by the I/O nodes as $(id -un)"
files=$(find "$work" -type f | sort)
sed -n 1,4p <<<"$files"
echo "   ... $(wc -l <<<"$files") files in $(find "$work" -mindepth 1 -type d | wc -l) rank directories; rank 15's file holds $(wc -l < "$work/rank-15/result.txt") lines"

say "5. What each I/O node executed for its 8 compute nodes (the shipped calls; 'lattice counters R00' lists them all)"
$lattice counters R00 | awk '$2 ~ /^(openat|write|read|mkdirat|renameat|unlinkat)$/'

say "6. The job's record in the service node's database"
$lattice jobs | sed -n '1p;$p'
echo
echo "Shown: a booted block (2 I/O nodes, 16 compute nodes), a 16-rank job whose file calls each compute"
echo "node shipped to its pset's I/O node, and the database's record of the job. The block is freed now."
