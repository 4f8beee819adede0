#!/usr/bin/env bash
# Installs what Lattice needs on Debian 12, builds the node-side programs and
# installs the service node (the `lattice` command) into .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

# openssh-server, munge and Slurm are for the multi-host testbed (scripts/testbed.sh);
# libfuse3-dev, fuse3, nftables, iproute2 for the Linux node sandbox (its FUSE file
# client, IP through the I/O node); golang-go and liburing-dev for its "any binary" tests
# postgresql: the server the tests start for the PostgreSQL backend (tests/pgserver.py)
packages=(build-essential gfortran libjansson-dev libssl-dev python3-venv libfftw3-dev mpich libmpich-dev openmpi-bin libopenmpi-dev libpmix-dev hpcc hwloc-nox
          openssh-server munge slurmctld slurmd slurm-client
          libfuse3-dev fuse3 nftables iproute2 golang-go liburing-dev
          chromium chromium-driver
          postgresql)
. scripts/lib/packages.sh
ensure_packages "${packages[@]}" || { echo "setup: cannot go on without these packages" >&2; exit 1; }
# man-db for `man lattice`, zsh for the test of its completion function (tests/unit/test_cli_docs.py)
ensure_packages man-db zsh || { echo "setup: cannot go on without these packages" >&2; exit 1; }

make -s all
./scripts/mpich_tests.sh     # MPICH's own tests the suite runs (tests/mpich/tests.list)

# The venv is made from Debian's own Python (package python3-venv), whatever
# python3 comes first on PATH: a venv's interpreter is a link to the Python
# that made it, so one made from a user's pyenv or conda breaks on any other
# machine. A .venv from another Python, or a broken one, is made anew.
python=/usr/bin/python3
if [ "$(readlink -f .venv/bin/python 2>/dev/null)" != "$(readlink -f "$python")" ] ||
   ! .venv/bin/python -c '' 2>/dev/null; then
    rm -rf .venv
    "$python" -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[test]'
# The `lattice` command itself: pip's launcher imports site and re before
# lattice.cli.client, ~8 ms of every command that the warm server (docs/cli.md)
# cannot save; this one starts Python without site (lattice.cli.client adds it
# back when it runs a command itself). A checkout path with a space keeps
# pip's launcher: a shebang line cannot quote it.
[[ "$PWD" =~ [[:space:]] ]] || cat > .venv/bin/lattice <<LAUNCHER
#!$PWD/.venv/bin/python -S
import sys
sys.path.insert(0, "$PWD/service")
from lattice.cli.client import entry
entry()
LAUNCHER
# Byte-compile the service node now: with PYTHONDONTWRITEBYTECODE set, every
# `lattice` command would otherwise compile its modules from source again.
.venv/bin/python -m compileall -q service >/dev/null
# lattice(1) and shell completion, generated from the command's parser: `man
# lattice` and bash-completion find them beside .venv/bin on PATH; zsh users
# add .venv/share/zsh/site-functions to fpath (docs/cli.md).
.venv/bin/python scripts/manpage.py .venv/share/man/man1/lattice.1
.venv/bin/python scripts/completion.py bash .venv/share/bash-completion/completions/lattice
.venv/bin/python scripts/completion.py zsh .venv/share/zsh/site-functions/_lattice
echo "setup: built build/ and installed .venv/bin/lattice"
