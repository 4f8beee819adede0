"""A job's environment, as srun's --export gives it.

`--export=ALL` (the default) passes the caller's whole environment to the
ranks; `--export=NONE` none of it; `--export=NAME,NAME=VALUE,...` those
names from the caller and those values; `--export=ALL,NAME=VALUE,...`
everything and those values.  What each rank gets, the first that sets a
name winning:

1. what its node sets itself, always: PMI_FD, PMI_RANK, PMI_SIZE,
   PMI_JOBID, LATTICE_RANK, LATTICE_SIZE, LATTICE_NODE, LATTICE_PERSONALITY,
   LATTICE_IO_* (and in Linux mode LD_PRELOAD begins with the client), and
   the rank's place as srun and mpiexec tell it: LATTICE_LOCALID and
   MPI_LOCALRANKID (its index among the job's ranks on its node),
   MPI_LOCALNRANKS (their count), LATTICE_NODEID (its node's index in the
   job: node_vars); for an Open MPI program also OMPI_COMM_WORLD_RANK,
   _LOCAL_RANK, _LOCAL_SIZE, _NODE_RANK and PMIX_RANK;
2. the values given with --env K=V or --export's NAME=VALUE;
3. what Lattice sets for the job: LATTICE_NNODES (node_vars), the
   mapping's and Open MPI's variables (OMPI_COMM_WORLD_SIZE among them),
   the big memory pages (LATTICE_BIGMEM_*), MPIR_CVAR_ASYNC_PROGRESS per
   node (lattice.nodes.cores);
4. the exported caller's variables, except those never exported: PMI_*,
   PMIX_* and LATTICE_* (from the caller they describe its own job or the
   service node, never this job) and MPIR_CVAR_ASYNC_PROGRESS (Lattice
   decides it per node: pass it with --env to choose).

A job message holds at most LAT_MAX_ARGS strings and LAT_MAX_PAYLOAD bytes,
and one string may not pass the kernel's 128 KiB: check_size says which
limit an environment passes, before anything boots.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

from lattice.transport import wire
from lattice.errors import LatticeError

NEVER_PREFIXES = ("PMI_", "PMIX_", "LATTICE_")
NEVER_NAMES = ("MPIR_CVAR_ASYNC_PROGRESS",)
MAX_STRING = 128 * 1024         # MAX_ARG_STRLEN: execve refuses a longer argument or variable
HEADROOM = 64 * 1024            # of the job message, for its ranks, slots and CPUs
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_export(value: str) -> tuple[bool, list[str], dict[str, str]]:
    """--export's value as (all, names, values)."""
    words = [w for w in value.split(",") if w.strip()]
    if not words:
        raise LatticeError("--export needs ALL, NONE or a list of names")
    everything = False
    names: list[str] = []
    values: dict[str, str] = {}
    for i, w in enumerate(words):
        if w.upper() in ("ALL", "NONE") and "=" not in w:
            if i != 0 or (w.upper() == "NONE" and len(words) > 1):
                raise LatticeError(f"bad --export {value!r}: ALL may only come first, NONE only alone")
            everything = w.upper() == "ALL"
            continue
        name, eq, val = w.partition("=")
        if not _NAME.fullmatch(name):
            raise LatticeError(f"bad --export {value!r}: {name!r} is not a variable name")
        if eq:
            values[name] = val
        else:
            names.append(name)
    return everything, names, values


def exportable(name: str) -> bool:
    """Whether a caller's variable of this name may reach the job."""
    return not name.startswith(NEVER_PREFIXES) and name not in NEVER_NAMES


def exported(value: str, caller: Mapping[str, str], lattice_set: set[str]) -> tuple[list[str], dict[str, str]]:
    """The caller's variables --export passes (K=V strings, without the
    names Lattice sets for the job, lattice_set, nor the never-exported
    ones) and the NAME=VALUE it gives (which win, as --env's do)."""
    everything, names, values = parse_export(value)
    chosen = list(caller) if everything else [n for n in names if n in caller]
    out = [f"{k}={caller[k]}" for k in chosen
           if exportable(k) and k not in lattice_set and k not in values]
    return out, values


def check_size(strings: list[str], env: list[str]) -> None:
    """A clear error if the job's strings (executable, directory, argv of
    every program, and env) pass a limit of the job message or of exec."""
    for s in env:
        if len(wire.cstring(s)) > MAX_STRING:
            name = s.partition("=")[0]
            raise LatticeError(f"environment variable {name} is {len(wire.cstring(s)) - 1} bytes: a program cannot be "
                               f"started with one longer than {MAX_STRING}",
                               f"leave it out with --export=NONE or --export=NAME,... (unset {name})")
    count = len(strings) + len(env)
    size = sum(len(wire.cstring(s)) for s in strings + env)
    if count > wire.MAX_ARGS or size > wire.MAX_PAYLOAD - HEADROOM:
        biggest = sorted(env, key=len, reverse=True)[:3]
        raise LatticeError(f"the job's arguments and environment are too large: {count} strings of {size} bytes "
                           f"(a job holds at most {wire.MAX_ARGS} strings and "
                           f"{wire.MAX_PAYLOAD - HEADROOM} bytes)",
                           "the largest variables: " + ", ".join(f"{b.partition('=')[0]} ({len(b)} bytes)"
                                                                 for b in biggest)
                           + "; pass less with --export=NONE or --export=NAME,...")


NODEIDS = "LATTICE_PSET_NODEIDS"    # read by the node (compute/cnode/launch.c), never passed on


def node_vars(nodes: Iterable[int], pset_size: int) -> tuple[str, dict[int, str]]:
    """The job's nodes numbered as srun's SLURM_NODEID does (0.. in machine
    order): LATTICE_NNODES=N for every rank, and for each pset the NODEIDS
    entry its I/O node passes to its compute nodes ("-" for a node without
    a rank), from which each node sets its ranks' LATTICE_NODEID."""
    ordered = sorted(set(nodes))
    index = {n: i for i, n in enumerate(ordered)}
    psets: dict[int, str] = {}
    for pset in sorted({n // pset_size for n in ordered}):
        base = pset * pset_size
        psets[pset] = f"{NODEIDS}=" + ",".join(str(index[n]) if n in index else "-"
                                                  for n in range(base, base + pset_size))
    return f"LATTICE_NNODES={len(ordered)}", psets
