"""Naming a process so that a recycled pid is never taken for it."""
from __future__ import annotations


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks after boot (field 22 of
    /proc/PID/stat); None if it is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])
