"""Naming a process so that a recycled pid is never taken for it, nor a
process of another host for one of this host's.

A start time carries its host: the clock ticks after boot (field 22 of
/proc/PID/stat) in the low TAG_SHIFT bits, and above them a tag of the
host's name.  Login hosts that share a machine's database (docs/cli.md
"Sharing a machine between login hosts") record their commands' pids
there; a command judges only the pids its own host recorded (here()), so
one host never takes another's running job or block for vanished.  The
name, not the boot, makes the tag: after a reboot the host judges its
own old records (their processes are gone).  A start time recorded before
tags (its tag 0) is taken for this host's and compared by ticks alone.
"""
from __future__ import annotations

import os
import zlib

_client: tuple[int, int] | None = None
_tag: int | None = None

TAG_SHIFT = 40              # 2**40 clock ticks: 348 years of uptime at 100 Hz
TICKS = (1 << TAG_SHIFT) - 1


def host_tag() -> int:
    """23 bits of this host's name (never 0: untagged records have 0)."""
    global _tag
    if _tag is None:
        _tag = (zlib.crc32(os.uname().nodename.encode()) & 0x7FFFFF) or 1
    return _tag


def ticks(pid: int) -> int | None:
    """The process's start time in clock ticks after boot, untagged: for
    this kernel's own books (lattice.nodes.hugepages, blocknet), which every
    process on it reads alike, whatever its host name; None if it is gone
    (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def start_time(pid: int) -> int | None:
    """The process's start time tagged with this host, as the machine's
    database records it; None if it is gone (or a zombie)."""
    t = ticks(pid)
    return None if t is None else t | host_tag() << TAG_SHIFT


def here(recorded: int | None) -> bool:
    """Whether a recorded start time was taken on this host (an untagged one: yes)."""
    return recorded is None or recorded >> TAG_SHIFT in (0, host_tag())


def same(now: int | None, recorded: int | None) -> bool:
    """Whether start_time() now names the process recorded."""
    if now is None or recorded is None:
        return False
    return now == recorded or (recorded >> TAG_SHIFT == 0 and now & TICKS == recorded)


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
