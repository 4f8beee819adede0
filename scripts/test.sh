#!/usr/bin/env bash
# Runs every test: builds first, then the unit tests and the end-to-end tests
# that boot real machines.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec .venv/bin/python -m pytest -q -rs "$@" tests
