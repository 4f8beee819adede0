"""A reader of compute/include/lattice/syscalls.def, the one list of system
calls (its header says what a line means), for Python: name -> class for
tests and the service node, and the "System call classes" table of
compute/cnk/README.md, which it writes between the markers

    <!-- syscalls.def -->  ...  <!-- /syscalls.def -->

    python3 -m pluggen.syscalls [--def FILE] --readme compute/cnk/README.md [--check]

(`make syscalls-md`; --check only says whether the block is current).
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

DEF = Path(__file__).resolve().parents[2] / "compute" / "include" / "lattice" / "syscalls.def"
CLASSES = ("LOCAL", "OWN", "SHIPPED", "SOCKET", "REFUSED")
BEGIN, END = "<!-- syscalls.def -->", "<!-- /syscalls.def -->"


class SyscallsDefError(Exception):
    pass


@dataclass(frozen=True)
class Syscall:
    name: str
    cls: str                                # one of CLASSES
    op: str                                 # "0", "sys_mmap", "OP(read)", "BY_FD(fsync)"
    wire: tuple[str, ...]                   # LAT_SYS_ suffixes; () for NONE
    trace: str | None                       # argument letters; None: six hex words
    linux: str                              # GEN, HAND or NO
    gen: tuple[str, str, str] | None        # GEN's (ret, (params), (args))

    @property
    def by_fd(self) -> bool:
        return self.op.startswith("BY_FD(")

    @property
    def cnk_class(self) -> str:
        """The class cnk's table starts the call in (its census before a handler corrects it)."""
        if self.cls == "SHIPPED" or (self.cls == "REFUSED" and self.op != "0"):
            return "shipped"
        return "unsupported" if self.cls == "REFUSED" else "local"


def _split_args(text: str) -> list[str]:
    """Top-level comma-separated arguments of a macro call's body."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    out.append(cur.strip())
    return out


def _calls(code: str) -> list[tuple[int, str]]:
    """(line, body) of every SYS(...) in the comment-free text."""
    found = []
    for m in re.finditer(r"\bSYS\(", code):
        depth, i = 1, m.end()
        while depth and i < len(code):
            depth += {"(": 1, ")": -1}.get(code[i], 0)
            i += 1
        if depth:
            raise SyscallsDefError(f"line {code.count(chr(10), 0, m.start()) + 1}: unbalanced SYS(")
        found.append((code.count("\n", 0, m.start()) + 1, code[m.end():i - 1]))
    return found


def parse(text: str) -> list[Syscall]:
    code = re.sub(r"/\*.*?\*/", lambda m: "\n" * m[0].count("\n"), text, flags=re.S)
    out: list[Syscall] = []
    for line, body in _calls(code):
        args = _split_args(body)
        if len(args) != 6:
            raise SyscallsDefError(f"line {line}: SYS() takes 6 fields, got {len(args)}")
        name, cls, op, wire, trace, linux = args
        if cls not in CLASSES:
            raise SyscallsDefError(f"line {line}: {name}: class {cls!r} is none of {', '.join(CLASSES)}")
        if (op == "0") != (cls == "LOCAL" or (cls == "REFUSED" and op == "0")):
            raise SyscallsDefError(f"line {line}: {name}: op {op!r} does not fit class {cls}")
        if cls in ("SHIPPED", "SOCKET", "REFUSED") and op != "0" and not re.fullmatch(r"(OP|BY_FD)\(\w+\)", op):
            raise SyscallsDefError(f"line {line}: {name}: op {op!r} is neither OP(x) nor BY_FD(f)")
        if trace != "0" and not re.fullmatch(r'"[dlxs]{0,6}"', trace):
            raise SyscallsDefError(f"line {line}: {name}: trace {trace!r} is not a string of d, l, x, s")
        gen = None
        m = re.fullmatch(r"GEN\((.*)\)", linux, flags=re.S)
        if m:
            g = _split_args(m[1])
            if len(g) != 3:
                raise SyscallsDefError(f"line {line}: {name}: GEN(ret, (params), (args))")
            gen = (g[0], " ".join(g[1].split()), " ".join(g[2].split()))
            linux = "GEN"
        elif linux not in ("HAND", "NO"):
            raise SyscallsDefError(f"line {line}: {name}: linux {linux!r} is none of GEN(...), HAND, NO")
        wires = () if wire == "NONE" else tuple(w.strip() for w in wire.split("|"))
        if any(not re.fullmatch(r"[A-Z0-9_]+", w) for w in wires):
            raise SyscallsDefError(f"line {line}: {name}: wire {wire!r}")
        if any(s.name == name for s in out):
            raise SyscallsDefError(f"line {line}: {name} is listed twice")
        out.append(Syscall(name, cls, op, wires, None if trace == "0" else trace.strip('"'), linux, gen))
    return out


def load(path: Path = DEF) -> list[Syscall]:
    return parse(path.read_text())


def classes(calls: list[Syscall]) -> dict[str, str]:
    """name -> class (LOCAL, OWN, SHIPPED, SOCKET, REFUSED)."""
    return {s.name: s.cls for s in calls}


ROWS: tuple[tuple[str, Callable[[Syscall], bool]], ...] = (  # README row title, which lines
    ("local, as it is (the seccomp filter lets these through without `--trace`)", lambda s: s.cls == "LOCAL"),
    ("local, by cnk's own handler", lambda s: s.cls == "OWN"),
    ("shipped (`LAT_SYS_` messages), unless the path or descriptor is node-local", lambda s: s.cls == "SHIPPED"),
    ("sockets, poll, select, epoll: local, or shipped by the destination rule ("
     "\"Sockets\")", lambda s: s.cls == "SOCKET"),
    ("unsupported (ENOSYS) on shipped paths and descriptors, local on node-local ones",
     lambda s: s.cls == "REFUSED" and s.op != "0"),
    ("unsupported (ENOSYS), named for `--trace`; so is every number not listed",
     lambda s: s.cls == "REFUSED" and s.op == "0"),
)


def readme_block(calls: list[Syscall]) -> str:
    def show(s: Syscall) -> str:
        return f"{s.name} ({'/'.join(s.wire)})" if s.cls == "SHIPPED" and s.wire else s.name
    lines = [BEGIN, "", "| class | calls |", "| --- | --- |"]
    for title, pick in ROWS:
        names = [show(s) for s in calls if pick(s)]
        if names:           # a class no call has today is left out
            lines.append(f"| {title} | {', '.join(names)} |")
    return "\n".join(lines + ["", END])


def update_readme(readme: Path, calls: list[Syscall], check: bool = False) -> bool:
    """Rewrite the block; True if it was current.  check: only compare."""
    text = readme.read_text()
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, flags=re.S)
    if not m:
        raise SyscallsDefError(f"{readme}: no {BEGIN} ... {END} block")
    new = text[:m.start()] + readme_block(calls) + text[m.end():]
    if new != text and not check:
        readme.write_text(new)
    return new == text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m pluggen.syscalls", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--def", dest="deffile", type=Path, default=DEF, help="the list (default: %(default)s)")
    ap.add_argument("--readme", type=Path, required=True, help="the README whose block to write")
    ap.add_argument("--check", action="store_true", help="only say whether the block is current (exit 1 if not)")
    a = ap.parse_args(argv)
    try:
        current = update_readme(a.readme, load(a.deffile), a.check)
    except (SyscallsDefError, OSError) as e:
        print(f"pluggen.syscalls: {e}", file=sys.stderr)
        return 1
    if a.check and not current:
        print(f"pluggen.syscalls: {a.readme} is not current: make syscalls-md", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
