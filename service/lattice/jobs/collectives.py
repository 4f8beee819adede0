"""Which collectives a job's MPI uses: MPICH's own (`mpi`, the default) or
Lattice's torus collectives (`torus`: compute/libtorus, build/lib/libtorus.so,
docs/architecture.md "Collectives"), chosen by `lattice run --collectives`
or the machine's default (machine.toml `[mpi] collectives`).

The library is a PMPI layer built against MPICH: it is preloaded
(LD_PRELOAD, before any the job gives) into programs linked with MPICH, under
cnk (its loader runs ld.so, which reads LD_PRELOAD) and in Linux mode (the
node sandbox shows Lattice's library directory at its host path).  Open MPI
programs and programs that do not link MPI keep their own collectives; asked
for explicitly, torus with an Open MPI program is an error.
"""
from __future__ import annotations

from lattice.errors import LatticeError
from lattice.jobs import mpienv
from lattice.jobs.mapping import App
from lattice.state.machine import prefix

CHOICES = ("mpi", "torus")
DEFAULT = "mpi"        # bench/RESULTS.md, "Issue 27: torus collectives": it wins nowhere on one host yet
LIBRARY = "libtorus.so"
PRELOAD = "LD_PRELOAD"


def choice(given: str | None, machine_default: str) -> str:
    """The job's collectives: --collectives if given, else the machine's."""
    c = given or machine_default or DEFAULT
    if c not in CHOICES:
        raise LatticeError(f"bad collectives {c!r}: {' or '.join(CHOICES)}")
    return c


def is_mpich(exe: str) -> bool:
    return mpienv.links_mpi(exe) and not mpienv.is_open_mpi(exe)


def add_preload(given: str | None, machine_default: str, apps: list[App], user_env: dict[str, str],
                lattice_env: dict[str, str], exported: list[str]) -> str | None:
    """Put libtorus.so first in the job's LD_PRELOAD when its collectives are
    torus and it runs an MPICH program: in the user's --env value if it gave
    one, else in Lattice's variables (ahead of an exported caller's value,
    taken out of exported).
    Returns the library's path, or None when it is not loaded."""
    if choice(given, machine_default) != "torus":
        return None
    ompi = [a.exe for a in apps if mpienv.is_open_mpi(a.exe)]
    if ompi and given == "torus":
        raise LatticeError(f"--collectives torus works with MPICH programs only: {ompi[0]} is an Open MPI program",
                           "run it with --collectives mpi")
    if ompi or not any(is_mpich(a.exe) for a in apps):
        return None
    lib = prefix() / "lib" / LIBRARY
    if not lib.is_file():
        raise LatticeError(f"the torus collectives library {lib} is missing",
                           "build it with `make libtorus` in the repository (it needs mpicc.mpich)")
    if PRELOAD in user_env:
        user_env[PRELOAD] = f"{lib}:{user_env[PRELOAD]}" if user_env[PRELOAD] else str(lib)
        return str(lib)
    theirs = [kv for kv in exported if kv.startswith(PRELOAD + "=")]
    for kv in theirs:
        exported.remove(kv)     # one LD_PRELOAD in the job: ours, then the caller's
    rest = theirs[0].partition("=")[2] if theirs else ""
    lattice_env[PRELOAD] = f"{lib}:{rest}" if rest else str(lib)
    return str(lib)
