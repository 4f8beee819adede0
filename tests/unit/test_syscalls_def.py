"""compute/include/lattice/syscalls.def, the one list of system calls: cnk's
table made from it is the hand-written table it replaced, number by number
(golden dump); its wire names are real LAT_SYS_ messages that cnk sends and
every message is some call's; what it records of Linux mode is what
libcnclient.so exports; the table in compute/cnk/README.md is current."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "protocol"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from pluggen import pywire, syscalls  # noqa: E402
from systab_dump import dump  # noqa: E402

GOLDEN = Path(__file__).resolve().parent / "syscalls" / "cnk_systab.golden"
CNK_SRC = ROOT / "compute" / "cnk"
# LAT_SYS_ messages no line of the list names, and why (a message ciod
# serves before the compute side sends it, or that no system call maps to).
# Issue 14's locks, links, owners, nodes and fallocate are all named by their lines.
ELSEWHERE: dict[str, str] = {
    "OPENAT_STAT": "lattice-fs's open and create (compute/cnfs/ops.c): an openat and an fstat in one round trip",
}


@pytest.fixture(scope="module")
def calls() -> list[syscalls.Syscall]:
    return syscalls.load()


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_cnk_table_is_the_one_it_replaced(built: Path) -> None:
    """Name, class, handler and trace letters of every number, as before the list."""
    got, want = dump(CNK_SRC / "systab.c"), GOLDEN.read_text()
    assert got.splitlines() == want.splitlines()


def test_the_table_follows_the_list(calls: list[syscalls.Syscall], built: Path) -> None:
    """Each line is the row of its number: a changed line changes cnk's table."""
    rows = {r.split(" ", 4)[1]: r.split(" ", 4) for r in dump(CNK_SRC / "systab.c").splitlines()}
    assert sorted(rows) == sorted(s.name for s in calls)
    for s in calls:
        _, _, cls, fn, args = rows[s.name]
        assert cls == s.cnk_class, s
        assert args == (s.trace if s.trace is not None else "-"), s
        if s.cls in ("LOCAL",) or s.op == "0":
            assert fn == "-", s
        elif s.cls == "OWN":
            assert fn == s.op, s
        else:
            x = re.fullmatch(r"(?:OP|BY_FD)\((\w+)\)", s.op)
            assert x and fn == ("sock_" if s.cls == "SOCKET" else "sys_") + x[1], s


def test_readme_table_is_current(calls: list[syscalls.Syscall]) -> None:
    readme = ROOT / "compute" / "cnk" / "README.md"
    assert syscalls.update_readme(readme, calls, check=True), "compute/cnk/README.md: run make syscalls-md"
    block = syscalls.readme_block(calls)
    assert "fsync (FSYNC)" in block and "| local, by cnk's own handler | brk, mmap," in block


def test_wire_names_are_messages_cnk_sends(calls: list[syscalls.Syscall]) -> None:
    header = pywire.parse((ROOT / "protocol" / "lattice" / "wire.h").read_text())
    messages = {n.removeprefix("LAT_SYS_") for n in header.values
                if n.startswith("LAT_SYS_") and not n.startswith("LAT_SYS__")}
    # cnk's own code and the shipping core it links (compute/shipc/)
    cnk_code = "".join(p.read_text() for d in (CNK_SRC, ROOT / "compute" / "shipc") for p in d.glob("*.c"))
    named = set()
    for s in calls:
        for w in s.wire:
            assert w in messages, f"{s.name}: LAT_SYS_{w} is not in wire.h"
            assert s.cls in ("SHIPPED", "SOCKET"), f"{s.name}: a {s.cls} call sends no message"
            # cnk (its core) sends it through its stub, or builds the request itself
            assert f"fwd_{w.lower()}" in cnk_code or f"LAT_SYS_{w}" in cnk_code, w
            named.add(w)
    assert set(ELSEWHERE) <= messages
    assert not named & set(ELSEWHERE), "a message a line names is still listed in ELSEWHERE"
    assert messages - named == set(ELSEWHERE), "a shipped message no line of syscalls.def names"


def test_linux_mode_is_recorded_as_it_is(calls: list[syscalls.Syscall], built: Path) -> None:
    """GEN: libcnclient.so interposes the call under its own name; NO: it does not."""
    names = exported(built / "lib" / "libcnclient.so")
    for s in calls:
        if s.linux == "GEN":
            assert s.name in names, f"{s.name}: GEN, but libcnclient.so does not export it"
        if s.linux == "NO":
            assert s.name not in names, f"{s.name}: NO, but libcnclient.so interposes it"
    assert {"open", "fcntl", "ioctl"} <= names & {s.name for s in calls if s.linux == "HAND"}


def test_by_fd_lines_need_no_handler_of_their_own(calls: list[syscalls.Syscall], built: Path) -> None:
    """A BY_FD(f) line is all a one-descriptor call needs: cnk's sys_f and the
    interposer f are made from it (compute/shipc/file.c, libcnclient/interpose.c)."""
    by_fd = [s for s in calls if s.by_fd]
    assert {s.name for s in by_fd} >= {"fsync", "fdatasync"}
    hand = "".join(p.read_text() for p in [*CNK_SRC.glob("*.c"), *(ROOT / "compute" / "libcnclient").glob("*.c")])
    cnk_syms = subprocess.run(["nm", built / "bin" / "cnk"], check=True, capture_output=True, text=True).stdout
    lcn = exported(built / "lib" / "libcnclient.so")
    for s in by_fd:
        assert s.cls == "SHIPPED" and s.gen == ("int", "(int fd)", "(fd)"), s
        assert re.search(rf"\bsys_{s.name}\b", cnk_syms) and s.name in lcn, s
        assert not re.search(rf"\b(long sys_{s.name}|int {s.name})\s*\(", hand), f"{s.name}: written by hand"


def test_malformed_lines_are_refused() -> None:
    good = 'SYS(fsync, SHIPPED, BY_FD(fsync), FSYNC, "d", GEN(int, (int fd), (fd)))\n'
    (s,) = syscalls.parse(good)
    assert (s.name, s.cls, s.wire, s.trace, s.gen) == ("fsync", "SHIPPED", ("FSYNC",), "d", ("int", "(int fd)", "(fd)"))
    for bad, why in [('SYS(a, SHIPED, OP(a), NONE, "d", NO)', "class"),
                     ('SYS(a, LOCAL, sys_a, NONE, "d", NO)', "op"),
                     ('SYS(a, SHIPPED, sys_a, NONE, "d", NO)', "neither"),
                     ('SYS(a, LOCAL, 0, NONE, "q", NO)', "trace"),
                     ('SYS(a, LOCAL, 0, NONE, "d")', "6 fields"),
                     ('SYS(a, LOCAL, 0, NONE, "d", MAYBE)', "linux"),
                     ('SYS(a, LOCAL, 0, NONE, "", NO)\nSYS(a, LOCAL, 0, NONE, "", NO)', "twice")]:
        with pytest.raises(syscalls.SyscallsDefError, match=why):
            syscalls.parse("/* a\n comment */\n" + bad)


def test_the_docs_example_is_the_real_line() -> None:
    """docs/protocol.md 6.5 shows fsync's line as it is in the list."""
    docs = (ROOT / "docs" / "protocol.md").read_text()
    lines = [l.strip() for l in syscalls.DEF.read_text().splitlines() if l.startswith("SYS(fsync,")]
    assert len(lines) == 1 and lines[0] in docs
