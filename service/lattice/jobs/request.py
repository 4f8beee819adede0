"""What a run asks for: the RunRequest that `lattice run` builds from its
arguments and `lattice submit` stores in the queue (as JSON, in the job's
record), with the caller's working directory and environment taken when it
was made, so that a queued job starts later as it would have started then.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from lattice.errors import LatticeError


@dataclass
class RunRequest:
    exe: str | None                             # the first program, as given (resolved at launch)
    args: list[str] = field(default_factory=list)   # its arguments, then `: -n N EXE ARGS` for MPMD
    n: int | None = None
    nodes: int | None = None
    ntasks_per_node: int | None = None
    mode: str | None = None
    mapping: str | None = None
    print_map: bool = False
    block: str | None = None                    # --block; None: a booted idle block, else one booted for the run
    wait: bool = False
    label: bool = False
    cwd: str | None = None                      # -D as given; None: workdir
    export: str = "ALL"
    env: list[str] = field(default_factory=list)
    stdin: str = "0"
    time: str | None = None
    output: str | None = None
    error: str | None = None
    user: str | None = None
    kernel: str = "cnk"
    sandbox: bool = True
    tree: list[str] = field(default_factory=list)
    trace: bool = False
    threads: str | None = None                  # --threads as given (lattice.jobs.threads checks it)
    hugepages: str = "reserve"
    collectives: str | None = None              # --collectives; None: the machine's default (lattice.jobs.collectives)
    verbose: bool = False
    workdir: str = "/"                          # the caller's working directory
    environ: dict[str, str] = field(default_factory=dict)    # the caller's environment (--export takes from it)

    @classmethod
    def from_args(cls, args: argparse.Namespace, workdir: str | None = None,
                  environ: Mapping[str, str] | None = None) -> RunRequest:
        """The request `lattice run`'s (or `submit`'s) options make, in the caller's directory and environment."""
        names = {f.name for f in dataclasses.fields(cls)} - {"workdir", "environ"}
        given = {k: v for k, v in vars(args).items() if k in names}
        return cls(**given, workdir=workdir or os.getcwd(),
                   environ=dict(os.environ if environ is None else environ))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunRequest:
        try:
            data: dict[str, Any] = json.loads(text)
            known = {f.name for f in dataclasses.fields(cls)}
            return cls(**{k: v for k, v in data.items() if k in known})
        except (ValueError, TypeError) as e:
            raise LatticeError(f"a queued job's request cannot be read: {e}") from None

    def work_dir(self) -> str:
        """The ranks' working directory: -D DIR (relative to the caller's), else the caller's."""
        return os.path.normpath(os.path.join(self.workdir, self.cwd)) if self.cwd else self.workdir


def segments(req: RunRequest) -> list[tuple[int | None, list[str]]]:
    """The job's programs as (-n, [EXE, ARGS...]): argv split on each lone
    ':'; the first program's -n is the job's, later ones give their own."""
    words = [req.exe, *req.args] if req.exe is not None else []
    parts: list[list[str]] = [[]]
    for w in words:
        if w == ":":
            parts.append([])
        else:
            parts[-1].append(w)
    out: list[tuple[int | None, list[str]]] = [(req.n, parts[0])]
    for part in parts[1:]:
        n: int | None = None
        while part and part[0].startswith("-"):
            opt = part.pop(0)
            value: str | None = None
            if opt in ("-n", "--np", "-np"):
                value = part.pop(0) if part else None
            elif opt.startswith("--np="):
                value = opt[5:]
            elif opt.startswith("-n") and opt != "-n":
                value = opt[2:]
            else:
                raise LatticeError(f"{opt}: a program after ':' takes only -n N "
                                   f"(options for the whole job go before the first program)")
            if value is None or not value.lstrip("-").isdigit():
                raise LatticeError(f"{opt} needs a number of ranks")
            n = int(value)
        out.append((n, part))
    if len(out) > 1:
        for i, (n, words) in enumerate(out):
            if not words:
                raise LatticeError(f"program {i} of the MPMD job has no executable (a ':' with nothing after it, "
                                   f"or before it)")
            if n is None:
                raise LatticeError(f"{words[0]}: every program of an MPMD job needs -n N")
    return out


def resolve_exe(exe: str, cwd: str, fallback: str | None = None) -> str:
    """A program's absolute path: a bare name from PATH; a relative path in
    cwd (the job's -D directory, as srun and Hydra find it), else in
    fallback (the caller's directory, where the same words found it before -D)."""
    if "/" not in exe:
        import shutil      # here: a path (the usual case) needs no search, and shutil's imports are many
        found = shutil.which(exe)
        if not found:
            raise LatticeError(f"{exe}: command not found in PATH")
        return os.path.abspath(found)
    path = os.path.normpath(os.path.join(cwd, exe))
    if not os.path.exists(path) and fallback is not None and not os.path.isabs(exe):
        other = os.path.normpath(os.path.join(fallback, exe))
        if os.path.exists(other):
            path = other
    if not os.path.exists(path):
        where = f" in {cwd} (-D) or {fallback}" if fallback is not None and fallback != cwd else ""
        raise LatticeError(f"{exe}: no such file{where}")
    if os.path.isdir(path):
        raise LatticeError(f"{exe}: is a directory")
    return path
