"""Naming a process so that a recycled pid is never taken for it."""
from __future__ import annotations

import os

_client: tuple[int, int] | None = None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of
    /proc/PID/stat); None if it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def me() -> tuple[int, int]:
    """The `lattice` command as (pid, start time), as records of what it
    owns name it: this process, or, when a warm server's copy runs the
    command (lattice.cli.warm), the client the user started, which is the pid
    the user knows and which ends when the command does."""
    if _client is not None:
        return _client
    pid = os.getpid()
    return pid, start_time(pid) or 0


def run_for(pid: int, start: int) -> None:
    """This process runs the command of the client (pid, start)."""
    global _client
    _client = (pid, start)
