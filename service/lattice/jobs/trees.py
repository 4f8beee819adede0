"""The file trees of a sandboxed Linux-mode job (docs/cli.md, "File trees").

A job in the node sandbox sees no host file outside its trees: the working
directory, the machine's default trees (`lattice init --linux-trees`,
default the job owner's home) and each `lattice run --tree PATH`.  The
service node hands them to cnode in the job variable LATTICE_FS_TREES,
colon-separated, the working directory first; cnode strips the variable
from the processes' environment.

Each tree is absolute and normalised (relative ones are taken from the
caller's directory); a path holding ':' cannot be said in the list and is
refused; "/" is refused (it would be the host's whole tree); a tree given
twice, or inside another tree, is dropped, as its files are already there.
The working directory always stays first, even inside another tree: it names
where the job starts.
"""
from __future__ import annotations

import os
from collections.abc import Iterable

from lattice.errors import LatticeError

VAR = "LATTICE_FS_TREES"
HOME = "~"                      # in the machine's default list: the job owner's home
DEFAULT: tuple[str, ...] = (HOME,)


def parse_setting(text: str) -> tuple[str, ...]:
    """`lattice init --linux-trees A:B:~` as a tuple; "" means none."""
    words = tuple(w for w in text.split(":") if w)
    for w in words:
        if w != HOME and not os.path.isabs(w):
            raise LatticeError(f"--linux-trees {text!r}: {w!r} is neither absolute nor {HOME} (the job owner's home)")
    return words


def normal(path: str, base: str, what: str) -> str:
    """path as an absolute normalised tree, or one clear error."""
    if ":" in path:
        raise LatticeError(f"{what} {path!r}: a tree's path may not hold ':' (LATTICE_FS_TREES is colon-separated)",
                           "rename the directory, or use --no-sandbox")
    if "\0" in path or "\n" in path:
        raise LatticeError(f"{what} {path!r}: a tree's path may not hold a newline or NUL byte")
    out = os.path.normpath(os.path.join(base, path))
    if out.startswith("//"):
        out = "/" + out.lstrip("/")         # POSIX's implementation-defined '//' is just '/' on Linux
    if out == "/":
        raise LatticeError(f"{what} {path!r}: the root directory cannot be a tree (it would be the host's whole "
                           f"file system)", "name the directories the job needs, or use --no-sandbox")
    return out


def inside(path: str, tree: str) -> bool:
    return path == tree or path.startswith(tree + "/")


def job_trees(cwd: str, given: Iterable[str], defaults: Iterable[str], home: str | None, base: str,
              check: bool = True) -> list[str]:
    """The job's trees, the working directory first: cwd, then the machine's
    defaults (HOME: the owner's home, skipped if it is not a directory),
    then --tree's, each normalised (relative to base), duplicates and trees
    inside an earlier one dropped.  check: --tree's paths must be
    directories here (a local machine's I/O nodes see this host's files)."""
    first = normal(cwd, base, "--cwd")
    wanted: list[str] = []
    for d in defaults:
        if d == HOME:
            if home and os.path.isabs(home) and os.path.isdir(home) and ":" not in home:
                wanted.append(os.path.normpath(home))
            continue
        wanted.append(normal(d, base, "the machine's default tree"))
    for g in given:
        t = normal(g, base, "--tree")
        if check and not os.path.isdir(t):
            raise LatticeError(f"--tree {g!r}: {t} is not a directory")
        wanted.append(t)
    uniq = list(dict.fromkeys(wanted))
    kept = [t for t in uniq if not inside(t, first) and not any(o != t and inside(t, o) for o in uniq)]
    return [first, *kept]


def env_value(trees: list[str]) -> str:
    return ":".join(trees)
