#!/usr/bin/env python3
"""The machine's database, SQLite beside PostgreSQL (issue 26).

Timed is the wall time of whole `lattice` commands (the warm server on, as
by default) on a booted 1x1x2 block, psets of 2:
  jobs      `lattice jobs` (a read, after the sweep every command does)
  run       `lattice run --block B -n 2 hello` (a job's records written and ended)
  create    `lattice block create` + `lattice block delete` (two write transactions)
and, under contention, `--writers N` processes that each create and delete
a block of their own pset M times at once: the time for all of them (every
transaction takes the one writers' lock on either backend).
PostgreSQL is a server of its own started here (tests/pgserver.py: on a
unix socket, fsync off, as in the tests); the commands alternate backends
round by round after one untimed round each.

    .venv/bin/python bench/db_backends.py [--repeat 15] [--writers 4] [--rounds 10]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import pgserver  # noqa: E402

LATTICE = [str(ROOT / ".venv" / "bin" / "lattice")]
HELLO = str(ROOT / "build" / "examples" / "hello")


def timed(env: dict[str, str], *args: str) -> float:
    t = time.perf_counter()
    subprocess.run([*LATTICE, *args], env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def contention(env: dict[str, str], writers: int, rounds: int) -> float:
    """writers processes, each creating and deleting its own block rounds times, at once."""
    script = ("import subprocess, sys\n"
              "for _ in range(int(sys.argv[2])):\n"
              f"    subprocess.run({LATTICE!r} + ['block', 'create', sys.argv[1], '--shape', '1x1x2', "
              "'--corner', '0,0,' + sys.argv[3]], check=True, capture_output=True)\n"
              f"    subprocess.run({LATTICE!r} + ['block', 'delete', sys.argv[1]], check=True, "
              "capture_output=True)\n")
    t = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-c", script, f"W{i}", str(rounds), str(2 + 2 * i)], env=env)
             for i in range(writers)]
    for p in procs:
        assert p.wait() == 0
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    server = pgserver.Server()
    server.start()
    top = Path(tempfile.mkdtemp(prefix="lattice-dbbench-"))
    envs: dict[str, dict[str, str]] = {}
    try:
        for backend in ("sqlite", "postgresql"):
            env = dict(os.environ, LATTICE_HOME=str(top / backend), LATTICE_WARM_IDLE="30")
            where = ["--database", server.create_database()] if backend == "postgresql" else []
            shape = ["--shape", f"1x1x{2 + 2 * a.writers}", "--pset-size", "2", "--memory", "256M"]
            subprocess.run([*LATTICE, "init", *shape, *where], env=env, check=True, capture_output=True)
            subprocess.run([*LATTICE, "block", "create", "B", "--shape", "1x1x2", "--corner", "0,0,0"], env=env,
                           check=True, capture_output=True)
            subprocess.run([*LATTICE, "boot", "B"], env=env, check=True, capture_output=True)
            envs[backend] = env
        cases = {"jobs": ("jobs",), "run": ("run", "--block", "B", "-n", "2", HELLO)}
        times: dict[tuple[str, str], list[float]] = {}
        for r in range(a.repeat + 1):
            for backend, env in envs.items() if r % 2 else reversed(envs.items()):
                for case, args in cases.items():
                    t = timed(env, *args)
                    t2 = timed(env, "block", "create", "C", "--shape", "1x1x2", "--corner", "0,0,2")
                    t2 += timed(env, "block", "delete", "C")
                    if r:               # the first round warms the caches and the warm servers
                        times.setdefault((backend, case), []).append(t)
                        times.setdefault((backend, "create"), []).append(t2)
        print(f"median [min-max] of {a.repeat} rounds, seconds")
        for case in ("jobs", "run", "create"):
            for backend in envs:
                ts = times[(backend, case)]
                print(f"{case:<8} {backend:<11} {statistics.median(ts):.4f} [{min(ts):.4f}-{max(ts):.4f}]")
        for backend, env in envs.items():
            t = contention(env, a.writers, a.rounds)
            print(f"contention {backend:<11} {a.writers} writers x {a.rounds} create+delete: {t:.2f} s "
                  f"({t / (a.writers * a.rounds * 2) * 1000:.1f} ms a command)")
    finally:
        for env in envs.values():
            subprocess.run([*LATTICE, "free", "B"], env=env, capture_output=True)
        server.stop()
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
