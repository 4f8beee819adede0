#!/usr/bin/env python3
"""What leftovers of jobs cost the root ciod (issue 24, docs/security.md "A
connection belongs to its job").

On a booted 1x1x2 machine, as a user it creates, it runs JOBS jobs whose rank
leaves a holder of its PMI connection (a copy of its PMI_FD, taken with
pidfd_getfd as tests/e2e/test_t0770_pmi_sealed.py does) and prints ciod's
threads and descriptors before and after; then one rank puts PUTS values of
1 KiB and it prints how many were stored, the first refusal, and ciod's RSS
before, during (all puts answered, the job still running) and after the job.
Run as root from the repository:

    .venv/bin/python bench/pmi_seal.py [--jobs 20] [--puts 150000]

With `build/bin/ciod` of an older tree it shows what the leftovers cost there.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "e2e")]

import test_t0770_pmi_sealed as t  # noqa: E402
from conftest import make_machine  # noqa: E402


def settled(pid: int, base: tuple[int, int]) -> tuple[int, int]:
    """ciod's cost once the closed connections' threads ended (or 10 s passed: an older ciod keeps them)."""
    deadline = time.monotonic() + 10
    while not t.back(t.cost(pid), base) and time.monotonic() < deadline:
        time.sleep(0.1)
    return t.cost(pid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--puts", type=int, default=150000)
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pmi-seal-bench-"))
    user = f"latbench{os.getpid() % 10000}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user], check=True)
    m = make_machine(tmp, "--shape", "1x1x2", "--pset-size", "2")
    fifos = Path(tempfile.mkdtemp(prefix="lattice-t0770-"))
    fifos.chmod(0o755)
    runs: t.Runs = []
    try:
        m.run("block", "create", "P", "--shape", "1x1x2")
        m.run("boot", "P")
        exe = m.work / "pmi_probe"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "tests/e2e/pmi_probe.c")], check=True)
        pid = t.ciod_pid(m)
        m.run("run", "--block", "P", "-n", "1", "--kernel", "linux", "--user", user, "--cwd", "/tmp", "/bin/true")
        base = t.cost(pid)
        held = []
        for i in range(a.jobs):
            f = t.fifo(fifos, f"hold{i}")
            run = t.start(m, runs, "-n", "1", "--user", user, str(exe), "hold", str(f))
            held.append(t.hold_and_release(f, run))
            run.wait(timeout=t.GUARD)
        print(f"{a.jobs} jobs leaving a PMI holder: ciod threads, descriptors {base} before, "
              f"{settled(pid, base)} after")
        for s in held:
            s.close()
        before = t.rss_kb(pid)
        f = t.fifo(fifos, "flood")
        run = t.start(m, runs, "-n", "1", "--user", user, str(exe), "flood", str(a.puts), "1024", str(f))
        w = t.opened(f, run)
        during = t.rss_kb(pid)
        os.close(w)
        out, _ = run.communicate(timeout=600)
        print(f"{out.strip()}\nciod RSS: {before} kB before, {during} kB during, {t.rss_kb(pid)} kB after the job")
    finally:
        for run in runs:
            if run.poll() is None:
                run.send_signal(2)
                run.communicate(timeout=t.GUARD)
        m.run("free", "P", check=False)
        subprocess.run(["userdel", user], check=False)
        shutil.rmtree(fifos, ignore_errors=True)
        shutil.rmtree(m.work, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
