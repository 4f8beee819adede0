#!/usr/bin/env bash
# The main job: boot the default machine (2x2x4 compute nodes, two psets of 8)
# and run an example job on all 16 compute nodes, its file I/O shipped to the
# two I/O nodes.  LATTICE_HOME defaults to ~/.lattice.
set -euo pipefail
cd "$(dirname "$0")/.."
lattice=.venv/bin/lattice
work=$(mktemp -d /tmp/lattice-demo.XXXXXX)
chmod 755 "$work"

$lattice init --force
$lattice machine
$lattice block create R00 --shape 2x2x4
trap '$lattice free R00 >/dev/null 2>&1 || true; $lattice block delete R00 >/dev/null 2>&1 || true' EXIT
$lattice boot R00
$lattice blocks
$lattice run --block R00 -n 16 --label --cwd "$work" build/examples/fileops
echo "files the job left on the I/O nodes' file system ($work):"
find "$work" -type f | sort | head -4
echo "..."
$lattice jobs | tail -3
