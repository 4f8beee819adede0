#!/usr/bin/env bash
# loaded.sh N CMD [ARGS...]: runs CMD while N CPU hogs (stress-ng --cpu N,
# nice 0; Debian's stress-ng, else `yes`) load the host, and only then:
# the hogs end with CMD, whatever its status.  Prints the load average
# before and after.  For showing that a test waits on events, not on a
# window of seconds (issue 24): `scripts/loaded.sh 60 .venv/bin/python -m
# pytest tests/e2e/test_t0720_datapath.py`.  Exit status: CMD's.
set -uo pipefail
n=${1:?usage: loaded.sh N CMD [ARGS...]}
shift
pids=()
stop() {
    [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null
    wait "${pids[@]}" 2>/dev/null
    pids=()
}
trap stop EXIT
trap 'exit 130' INT TERM
if command -v stress-ng >/dev/null; then
    stress-ng --cpu "$n" --cpu-method loop --quiet &
    pids+=($!)
else
    for _ in $(seq "$n"); do yes >/dev/null & pids+=($!); done
fi
echo "loaded.sh: $n CPU hogs up; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
peak=$(mktemp)
(   # the highest 1-minute load average seen while CMD ran
    max=0
    while sleep 5; do
        l=$(cut -d' ' -f1 /proc/loadavg)
        max=$(awk -v a="$l" -v b="$max" 'BEGIN { print (a > b) ? a : b }')
        echo "$max" >"$peak"
    done
) &
pids+=($!)
start=$(date +%s)
rc=0
"$@" || rc=$?
echo "loaded.sh: done in $(($(date +%s) - start)) s (status $rc); load average now $(cut -d' ' -f1-3 \
/proc/loadavg), peak 1-min load $(cat "$peak")" >&2
rm -f "$peak"
exit "$rc"
