#!/usr/bin/env bash
# Fuzzes ciod's wire protocol: every kind of connection, 10^7 inputs by
# default.  Prints inputs/s as it goes, then crashes/hangs/leaks found and
# the seed (pass --seed S to reproduce a run, --first-case N --bisect to
# replay one round case by case).  Other options: tests/fuzz/ciodfuzz.py -h.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s ciod
py=.venv/bin/python
[ -x "$py" ] || py=python3
exec "$py" tests/fuzz/ciodfuzz.py --ciod build/bin/ciod "$@"
