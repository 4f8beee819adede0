#!/usr/bin/env bash
# Fuzzes ciod's wire protocol: every kind of connection, 10^7 inputs by
# default.  Prints inputs/s as it goes, then crashes/hangs/leaks found and
# the seed (pass --seed S to reproduce a run, --first-case N --bisect to
# replay one round case by case).  Other options: tests/fuzz/ciodfuzz.py -h.
# Exit status: 0 no finding; 1 ciod failed (a finding); 2 bad arguments;
# 3 the fuzzer's own harness broke (not a finding about ciod).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s ciod
py=.venv/bin/python
[ -x "$py" ] || py=python3
rc=0
"$py" tests/fuzz/ciodfuzz.py --ciod build/bin/ciod "$@" || rc=$?
case $rc in
0) ;;
1) echo "fuzz.sh: ciod failed under the fuzzer (a crash, hang, leak or answer out of protocol): see above" >&2 ;;
3) echo "fuzz.sh: the fuzzer's own harness failed, not ciod: see above (a bug to fix in tests/fuzz/ciodfuzz.py)" >&2 ;;
*) echo "fuzz.sh: ciodfuzz.py exited with status $rc" >&2 ;;
esac
exit "$rc"
