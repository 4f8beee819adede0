"""lattice-fs's inode table (compute/cnfs/node.c): one node per file of the
I/O node, reached by the names it was looked up by; hard links, unlink and
rename keep every node on a name that still stands for it."""
from __future__ import annotations

import errno
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


class Table:
    def __init__(self, exe: Path) -> None:
        self.p = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def __call__(self, *words: object) -> str:
        assert self.p.stdin is not None and self.p.stdout is not None
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().rstrip("\n")

    def close(self) -> None:
        assert self.p.stdin is not None
        self.p.stdin.close()
        assert self.p.wait(timeout=600) == 0


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("cnfs")
    flags = (subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True,
                            check=True).stdout.split() if shutil.which("pkg-config")
             else ["-I/usr/include/fuse3", "-lfuse3"])     # the Makefile's fallback
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-pthread",
                    "-I", str(ROOT / "protocol"), "-I", str(ROOT / "compute/cnfs"), "-o", str(d / "node"),
                    str(ROOT / "tests/unit/cnfs_node_harness.c"), str(ROOT / "compute/cnfs/node.c"), *flags],
                   check=True)
    return d / "node"


@pytest.fixture
def t(harness: Path) -> Iterator[Table]:
    table = Table(harness)
    yield table
    table.close()


def test_hard_links_are_one_node_and_unlink_drops_only_its_name(t: Table) -> None:
    a = t("ref", "/w/a", 1, 10)
    assert t("ref", "/w/b", 1, 10) == a          # link(2): the same file, the same inode to the kernel
    assert t("ref", "/w/c", 1, 11) != a
    assert t("path", a) == "/w/b"                 # the latest name
    assert t("unlink", "/w/b") == "ok"
    assert t("path", a) == "/w/a"                 # reached by the name that is left
    t("unlink", "/w/a")
    assert t("path", a) == str(-errno.ESTALE)


def test_a_rename_moves_the_names_below_it_and_no_others(t: Table) -> None:
    d, x, y = t("ref", "/d", 1, 1), t("ref", "/d/x", 1, 2), t("ref", "/d/x/y", 1, 3)
    sib = t("ref", "/dx", 1, 4)
    t("rename", "/d", "/e")
    assert [t("path", n) for n in (d, x, y, sib)] == ["/e", "/e/x", "/e/x/y", "/dx"]
    assert t("ref", "/e/x", 1, 2) == x


def test_a_rename_over_a_name_leaves_its_file_without_it(t: Table) -> None:
    a, b = t("ref", "/a", 1, 1), t("ref", "/b", 1, 2)
    t("rename", "/a", "/b")
    assert t("path", a) == "/b"
    assert t("path", b) == str(-errno.ESTALE)    # the replaced file has no name now
    assert t("ref", "/b", 1, 1) == a


def test_an_exchange_swaps_the_names(t: Table) -> None:
    a, b = t("ref", "/a", 1, 1), t("ref", "/b", 1, 2)
    for frm, to in (("/a", "\x01"), ("/b", "/a"), ("\x01", "/b")):    # ops.c's RENAME_EXCHANGE
        t("rename", frm, to)
    assert (t("path", a), t("path", b)) == ("/b", "/a")


def test_a_node_goes_when_the_kernel_forgets_every_lookup(t: Table) -> None:
    a = t("ref", "/a", 1, 1)
    t("ref", "/a", 1, 1)
    t("forget", a, 1)
    assert t("count") == "1" and t("path", a) == "/a"
    t("forget", a, 1)
    assert t("count") == "0"
    assert t("ref", "/b", 1, 1) == t("ref", "/b", 1, 1)     # made anew: one node, two lookups


def test_children_are_plain_names_under_their_parent(t: Table) -> None:
    d = t("ref", "/d", 1, 1)
    assert t("child", "root", "x") == "/x"
    assert t("child", d, "x") == "/d/x"
    for bad in ("..", "."):
        assert t("child", d, bad) == str(-errno.EINVAL)
    assert t("child", d, "n" * 4095) == str(-errno.ENAMETOOLONG)


def test_thousands_of_nodes(t: Table) -> None:
    ids = [t("ref", f"/f{i}", 7, i) for i in range(5000)]
    assert len(set(ids)) == 5000 and t("count") == "5000"
    assert all(t("path", ids[i]) == f"/f{i}" for i in range(0, 5000, 97))


def test_the_cache_is_kept_at_an_open_only_while_the_file_is_the_version_it_holds(t: Table) -> None:
    """node.c's stamps (docs/architecture.md "The FUSE file client"): an
    open keeps the page cache when the I/O node's size, mtime and ctime are
    those of the version the cache holds, close-to-open; the kernel's
    attributes are dropped too when the file is another version, or
    another size than the kernel was told (its size would cut reads short)."""
    a = t("ref", "/w/f", 1, 10)
    t("told", a, 100)                                 # the lookup's reply
    assert t("open", a, 100, 5, 5) == "drop 0"        # first open: nothing cached yet
    assert t("open", a, 100, 5, 5) == "keep 0"        # unchanged
    for changed in ((100, 6, 5), (100, 6, 7), (101, 6, 7)):    # mtime, ctime or size (another node)
        assert t("open", a, *changed) == "drop 1"
        t("told", a, changed[0])                      # the kernel's getattr after it
        assert t("open", a, *changed) == "keep 0"
    b = t("ref", "/w/g", 1, 11)
    t("told", b, 5)
    assert t("open", b, 7, 1, 1) == "drop 1"          # grown since the lookup, never opened here
    assert t("open", b, 7, 1, 1) == "keep 1"          # not told since: still dropped until a getattr
    t("told", b, 7)
    assert t("open", b, 7, 1, 1) == "keep 0"
    assert t("open", "root", 1, 1, 1) == "drop 0"     # the root has no stamp


def test_own_writes_are_stamped_after_them_and_a_write_past_the_cache_drops_it(t: Table) -> None:
    a = t("ref", "/w/h", 1, 20)
    t("told", a, 0)
    t("open", a, 0, 1, 1)
    assert t("wrote", a) == "ok"                      # write-through: the cache follows, the stamp is stale
    assert t("open", a, 4096, 2, 2)[:4] == "drop"     # not stamped since: dropped, not trusted
    t("wrote", a)
    t("stamp", a, 8192, 3, 3)                         # fsync's stat after the writes
    t("told", a, 8192)
    assert t("open", a, 8192, 3, 3) == "keep 0"
    t("dropped", a)                                   # a direct_io write: the cache missed it
    t("stamp", a, 9000, 4, 4)                         # ... so a stamp after it is refused
    t("told", a, 9000)
    assert t("open", a, 9000, 4, 4) == "drop 0"
    assert t("open", a, 9000, 4, 4) == "keep 0"
