"""The host agent's side of the jobs' kernel containers (compute/cnode/container.c).

Each compute node puts its job's processes in a cgroup of their own,
`<root>/<name>/<job>-<location>`, and kills and removes it when the job
ends.  A cnode that was killed outright (SIGKILL, or the agent's own stop
after its grace) cannot: what its job left runs on in that cgroup.  The
agent sweeps its block's directory before it starts the daemons and after
they have ended: every process in it is killed, each cgroup waited for until
empty (cgroup.events, an event) and removed.

`name(block_dir)` is the block's directory below the hierarchy's root, the
same on every boot of that block on this host and distinct for every
machine and host (their block directories differ); `root()` finds the
hierarchy as cnode does (LATTICE_CGROUP=v1|v2|/a/v2/directory, else v2 if
mounted, else the v1 freezer).
"""
from __future__ import annotations

import hashlib
import os
import select
import signal
import time
from pathlib import Path

SWEEP_WAIT = 30.0       # seconds a swept cgroup may take to empty after SIGKILL (a failure guard)


def name(block: str, block_dir: Path) -> str:
    """The block's container directory: lattice/BLOCK-HASH (HASH of the block's directory on this host)."""
    digest = hashlib.sha256(str(block_dir.resolve()).encode()).hexdigest()[:12]
    return f"lattice/{block}-{digest}"


def _mounts() -> list[tuple[str, str, str]]:
    """(fstype, mount point, super options) of each mount."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if sep and len(fields) >= 5 and len(rest) >= 3:
            point = fields[4].encode().decode("unicode_escape")
            out.append((rest[0], point, rest[2]))
    return out


def root(want: str | None = None) -> tuple[Path, bool] | None:
    """The hierarchy's root and whether it is v2 (want: LATTICE_CGROUP as the
    cnodes have it, else this process's); None if the host has neither."""
    want = os.environ.get("LATTICE_CGROUP", "") if want is None else want
    if want.startswith("/"):
        return Path(want), True
    mounts = _mounts()
    if want != "v1":
        for fstype, point, _ in mounts:
            if fstype == "cgroup2":
                return Path(point), True
    if want != "v2":
        for fstype, point, opts in mounts:
            if fstype == "cgroup" and "freezer" in opts.split(","):
                return Path(point), False
    return None


def _pids(cg: Path) -> list[int]:
    try:
        return [int(p) for p in (cg / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _wait_empty_v2(cg: Path, deadline: float) -> bool:
    """Until cgroup.events says populated 0 (a POLLPRI event on it)."""
    try:
        fd = os.open(cg / "cgroup.events", os.O_RDONLY)
    except OSError:
        return not _pids(cg)
    try:
        p = select.poll()
        p.register(fd, select.POLLPRI)
        while True:
            if b"populated 0" in os.pread(fd, 256, 0):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            p.poll(left * 1000)
    finally:
        os.close(fd)


def _wait_pids(pids: list[int], deadline: float) -> None:
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            continue
        try:
            select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        finally:
            os.close(fd)


def _write(path: Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _kill(cg: Path, v2: bool, deadline: float) -> bool:
    """Every process in cg killed and gone; False if some outlived the deadline."""
    if v2 and (cg / "cgroup.kill").exists():
        _write(cg / "cgroup.kill", "1")
        return _wait_empty_v2(cg, deadline)
    freeze, on, off = ("cgroup.freeze", "1", "0") if v2 else ("freezer.state", "FROZEN", "THAWED")
    while True:
        _write(cg / freeze, on)
        pids = _pids(cg)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _write(cg / freeze, off)        # a frozen process dies only once thawed
        if not pids:
            return True
        _wait_pids(pids, deadline)
        if time.monotonic() > deadline:
            return False


def _remove(cg: Path, deadline: float) -> None:
    while True:
        try:
            cg.rmdir()
            return
        except OSError as e:
            if e.errno != 16 or time.monotonic() > deadline:     # EBUSY: a process still on its way out
                raise
            time.sleep(0.001)


def sweep(block_name: str, want: str | None = None) -> list[str]:
    """Kill and remove every job's cgroup under the block's directory, then
    it (and `lattice/` if that is empty now): what could not be done, one
    line each (want: as for root())."""
    found = root(want)
    if found is None:
        return []
    top, v2 = found
    base = top / block_name
    if not base.is_dir():
        return []
    problems = []
    deadline = time.monotonic() + SWEEP_WAIT
    try:
        cgroups = sorted(p for p in base.iterdir() if p.is_dir())
    except OSError as e:
        return [f"{base}: {e.strerror or e}"]
    for cg in cgroups:
        try:
            left = _pids(cg)
            if not _kill(cg, v2, deadline):
                problems.append(f"{cg}: processes {' '.join(map(str, _pids(cg)))} outlived SIGKILL")
                continue
            _remove(cg, deadline)
            if left:
                problems.append(f"{cg}: killed {len(left)} process(es) a job left")
        except OSError as e:
            problems.append(f"{cg}: {e.strerror or e}")
    rel = Path(block_name)
    for d in (rel, *rel.parents[:-1]):
        try:
            (top / d).rmdir()
        except OSError:
            break               # not empty (another block's, or one left above), or gone
    return problems
