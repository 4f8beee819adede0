"""`lattice run -o/-e`: the ranks' output in files named by srun's patterns.

A pattern may hold %j (the job id), %t (the rank), %n (the node's number
within the job, 0 for the first node a rank runs on), %N (the node's
location), %u (the job owner's name) and %% (a %).  Several ranks whose
pattern gives the same name share one file, whole lines at a time.  -o
without -e sends standard error to the -o files too, as srun does.  Relative
names are taken from the caller's working directory; the files are created
(truncated) by the job owner (so with --user, as that user) with mode 0666
less the caller's umask, before any rank starts.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import BinaryIO, Iterator, NamedTuple

from lattice.transport import wire
from lattice.errors import LatticeError

_FIELD = re.compile(r"%(.|$)")
KNOWN = "jtnNu%"


class Owner(NamedTuple):
    user: str
    uid: int
    gid: int
    groups: list[int]


def check(pattern: str, option: str) -> str:
    """The pattern, or a LatticeError naming an unknown %x."""
    for m in _FIELD.finditer(pattern):
        if m.group(1) == "" or m.group(1) not in KNOWN:
            raise LatticeError(f"bad {option} {pattern!r}: %{m.group(1)} is not a pattern",
                               "patterns: %j job id, %t rank, %n node number in the job, %N node location, "
                               "%u user, %% a percent sign")
    if not pattern:
        raise LatticeError(f"{option} needs a file name")
    return pattern


def expand(pattern: str, job: int, rank: int, node: int, location: str, user: str) -> str:
    values = {"j": str(job), "t": str(rank), "n": str(node), "N": location, "u": user, "%": "%"}
    return _FIELD.sub(lambda m: values[m.group(1)], pattern)


@contextlib.contextmanager
def as_owner(owner: Owner) -> Iterator[None]:
    """Root acting for another owner: that owner's ids while files are made,
    so the kernel checks the owner's rights and the files are the owner's."""
    if os.geteuid() != 0 or owner.uid == 0:
        yield
        return
    groups, egid = os.getgroups(), os.getegid()
    os.setgroups(owner.groups)
    os.setegid(owner.gid)
    os.seteuid(owner.uid)
    try:
        yield
    finally:
        os.seteuid(0)           # first: only root may set the rest back
        os.setegid(egid)
        os.setgroups(groups)


class Routes:
    """Each rank's open files for standard output and standard error."""

    def __init__(self) -> None:
        self.files: dict[str, BinaryIO] = {}
        self.route: dict[tuple[int, int], BinaryIO] = {}

    def stream(self, rank: int, which: int) -> BinaryIO | None:
        """The file for this rank's stream; None: the run's own stream."""
        return self.route.get((rank, which))

    def close(self) -> None:
        for f in self.files.values():
            try:
                f.close()
            except OSError:
                pass
        self.files.clear()


class Plan(NamedTuple):
    """What -o and -e asked for, resolved against the caller's directory."""
    out: str | None
    err: str | None
    cwd: str
    owner: Owner

    def open(self, job: int, nodes: list[int], locations: list[str]) -> Routes:
        """Every rank's files for job (nodes[r]: rank r's node number in the
        job, locations[r] its location), created now."""
        routes = Routes()
        err = self.err or self.out          # srun: -o alone takes standard error too
        try:
            with as_owner(self.owner):
                for rank, (node, loc) in enumerate(zip(nodes, locations)):
                    for which, pattern in ((wire.STDOUT, self.out), (wire.STDERR, err)):
                        if pattern is None:
                            continue
                        name = os.path.join(self.cwd, expand(pattern, job, rank, node, loc, self.owner.user))
                        if name not in routes.files:
                            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
                            routes.files[name] = os.fdopen(fd, "wb")
                        routes.route[(rank, which)] = routes.files[name]
        except OSError as e:
            routes.close()
            raise LatticeError(f"cannot create output file {e.filename}: {e.strerror}") from None
        return routes
