#!/bin/bash
# bench/ras_trust.sh CHECKOUT JOBS: what an operator reads in `lattice ras` after JOBS
# jobs (hello, fileops, a rank exiting 3, in turn) on a booted 2x2x4 machine of that
# checkout's build: neighbouring events out of time order, how many time formats, ERRORs
# about I/O workers, and events naming a job that `lattice ras --job` leaves out
# (issue 26; bench/RESULTS.md "RAS an operator can trust").
set -u
co=$1; n=$2
export LATTICE_WARM=0 PATH=$co/.venv/bin:$PATH LATTICE_HOME=$(mktemp -d /tmp/habits-measure.XXXX)
lattice init >/dev/null && lattice block create R00 --shape 2x2x4 >/dev/null && lattice boot R00 >/dev/null
for i in $(seq 1 $n); do
  case $((i % 3)) in
    0) lattice run --block R00 -n 16 $co/build/examples/hello >/dev/null 2>&1 ;;
    1) lattice run --block R00 -n 8 -D "$(mktemp -d)" $co/build/examples/fileops >/dev/null 2>&1 ;;
    2) lattice run --block R00 -n 4 $co/build/examples/exit_code 1 3 >/dev/null 2>&1 ;;
  esac
done
lattice ras > $LATTICE_HOME/ras.txt
lattice jobs > $LATTICE_HOME/jobs.txt
python3 - "$LATTICE_HOME" <<'PY'
import sys, re, datetime as dt, subprocess
home = sys.argv[1]
lines = open(f"{home}/ras.txt").read().splitlines()
def t(s):
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
times = [l.split()[0] for l in lines]
ooo = sum(1 for a, b in zip(times, times[1:]) if t(a) > t(b))
fmts = {re.sub(r"\d", "9", x) for x in times}
err_worker = sum(1 for l in lines if " ERROR " in l and "I/O worker" in l)
jobs = [l.split()[0] for l in open(f"{home}/jobs.txt").read().splitlines()[1:]]
missing = 0
for j in jobs:
    about = [l for l in lines if re.search(rf"\bjob {j}\b", l)]
    shown = subprocess.run(["lattice", "ras", "--job", j], capture_output=True, text=True).stdout.splitlines()
    missing += len([l for l in about if l not in shown])
print(f"events={len(lines)} neighbours_out_of_order={ooo} of {len(lines)-1} time_formats={len(fmts)} "
      f"worker_errors={err_worker} events_naming_a_job_missing_from_ras_--job={missing} jobs={len(jobs)}")
PY
lattice free --all >/dev/null 2>&1
rm -rf $LATTICE_HOME
