"""No path another user can plant (docs/security.md): the directories a root
`lattice` makes outside the machine directory (lattice.safepath), the
host-wide huge-page book and its lock (lattice.nodes.hugepages), the client's
home and its warm server's credentials (lattice.cli.client)."""
from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from lattice.nodes import hugepages
from lattice.state import machine
from lattice import safepath
from lattice.errors import LatticeError
from test_hugepages import MIB, FakeKernel
from test_service_machine import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: directories of another user")
OTHER = 65534           # nobody: the other user
LATTICE = [sys.executable, "-m", "lattice"]


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may write in, as /tmp (sticky)."""
    d = Path(tempfile.mkdtemp(prefix="lattice-t-shared-"))
    os.chmod(d, 0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory of root's every user may enter (so a refusal is the file's mode, not the way to it)."""
    d = Path(tempfile.mkdtemp(prefix="lattice-t-open-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kdir(tmp_path: Path) -> Path:
    """Where a fake kernel's huge page files go."""
    (tmp_path / "kernel").mkdir()
    return tmp_path / "kernel"


def as_other(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", "--reuid", str(OTHER), "--regid", str(OTHER), "--clear-groups",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# ---- lattice.safepath ----

def test_a_fresh_directory_is_made_private(shared: Path) -> None:
    d = shared / "lattice-0-abc" / "host" / "block"
    safepath.private_dir(d, shared)
    for p in (d, d.parent, d.parent.parent):
        st = p.lstat()
        assert st.st_uid == 0 and st.st_mode & 0o7777 == 0o700


def test_a_planted_directory_is_refused_and_left_alone(shared: Path) -> None:
    d = shared / "lattice-0-abc"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    os.chown(d, OTHER, OTHER)
    with pytest.raises(LatticeError) as e:
        safepath.private_dir(d / "host", shared)
    assert f"refusing {d}: owned by " in e.value.message and "uid 65534" in e.value.message
    assert d.stat().st_mode & 0o7777 == 0o777 and not (d / "host").exists()


def test_a_planted_symbolic_link_is_refused_and_its_target_untouched(shared: Path, open_dir: Path) -> None:
    target = open_dir / "theirs"
    target.mkdir()
    os.chmod(target, 0o777)
    os.chown(target, OTHER, OTHER)
    link = shared / "lattice-0-abc"
    link.symlink_to(target)
    with pytest.raises(LatticeError) as e:
        safepath.private_dir(link, shared)
    assert f"refusing {link}: a symbolic link (to {target})" in e.value.message
    st = target.stat()
    assert st.st_mode & 0o7777 == 0o777 and st.st_uid == OTHER and not list(target.iterdir())


def test_an_own_directory_others_may_write_in_is_refused(shared: Path) -> None:
    d = shared / "mine"
    d.mkdir()
    os.chmod(d, 0o775)
    with pytest.raises(LatticeError, match="mode 0775 lets others write in it"):
        safepath.private_dir(d, shared)


def test_an_own_directory_others_may_read_is_tightened(shared: Path) -> None:
    d = shared / "mine"
    d.mkdir()
    os.chmod(d, 0o755)
    safepath.private_dir(d, shared)
    assert d.stat().st_mode & 0o7777 == 0o700


def test_a_base_others_could_swap_is_refused(open_dir: Path) -> None:
    theirs = open_dir / "theirs"
    theirs.mkdir()
    os.chown(theirs, OTHER, OTHER)
    with pytest.raises(LatticeError, match=f"{theirs} \\(on the way to it\\) is owned by"):
        safepath.private_dir(theirs / "a" / "b", theirs / "a")


def test_the_socket_directory_of_a_deep_home_refuses_a_planted_one(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """machine.socket_dir: /tmp/lattice-UID-HASH made by root or refused, never reused."""
    home = tmp_path / ("d" * 90) / "home"
    monkeypatch.setenv("LATTICE_HOME", str(home))
    planted = Path(f"/tmp/lattice-{os.getuid()}-{hashlib.sha256(str(home).encode()).hexdigest()[:12]}")
    try:
        planted.mkdir(mode=0o777)
        os.chmod(planted, 0o777)
        os.chown(planted, OTHER, OTHER)
        with pytest.raises(LatticeError, match=f"refusing {planted}: owned by"):
            machine.socket_dir()
        assert planted.stat().st_mode & 0o777 == 0o777 and planted.stat().st_uid == OTHER
        planted.rmdir()
        assert machine.socket_dir() == planted
        assert planted.stat().st_mode & 0o7777 == 0o700 and planted.stat().st_uid == 0
    finally:
        shutil.rmtree(planted, ignore_errors=True)


# ---- the huge-page book ----

def test_the_book_and_its_lock_are_roots_alone(open_dir: Path, kdir: Path) -> None:
    book = open_dir / "book"
    old = os.umask(0)           # whatever the caller's umask
    try:
        res = hugepages.reserve(book, "job-1", 2, 512 * MIB, pools=FakeKernel(kdir), root=True)  # type: ignore[arg-type]
    finally:
        os.umask(old)
    assert res.recorded, res.warning
    assert book.stat().st_mode & 0o7777 == 0o700 and book.stat().st_uid == 0
    for name in ("hugepages.lock", "hugepages.json"):
        assert (book / name).stat().st_mode & 0o7777 == 0o600, name
    p = as_other(f"import fcntl\nf = open({str(book / 'hugepages.lock')!r})\nfcntl.flock(f, fcntl.LOCK_EX)\n"
                 "print('HELD')")
    assert "PermissionError" in p.stderr and "HELD" not in p.stdout, (p.stdout, p.stderr)
    assert hugepages.release(res) == []


def test_an_older_books_modes_are_tightened(open_dir: Path, kdir: Path) -> None:
    book = open_dir / "book"
    book.mkdir()
    os.chmod(book, 0o755)
    for name in ("hugepages.lock", "hugepages.json"):
        (book / name).write_text("{}\n" if name.endswith("json") else "")
        os.chmod(book / name, 0o644)
    res = hugepages.reserve(book, "job-1", 2, 512 * MIB, pools=FakeKernel(kdir), root=True)  # type: ignore[arg-type]
    assert res.recorded and hugepages.release(res) == []
    assert book.stat().st_mode & 0o7777 == 0o700
    for name in ("hugepages.lock", "hugepages.json"):
        assert (book / name).stat().st_mode & 0o7777 == 0o600, name


def test_a_planted_book_is_refused_with_a_warning(open_dir: Path, kdir: Path) -> None:
    book = open_dir / "book"
    book.mkdir(mode=0o777)
    os.chmod(book, 0o777)
    os.chown(book, OTHER, OTHER)
    k = FakeKernel(kdir)
    res = hugepages.reserve(book, "job-1", 2, 512 * MIB, pools=k, root=True)  # type: ignore[arg-type]
    assert not res.recorded and res.warning is not None
    assert f"refusing {book}: owned by" in res.warning and "cnk falls back" in res.warning
    assert not list(book.iterdir())


# ---- the client: its home, its warm server ----

def lattice(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LATTICE_HOME=str(home), PYTHONPATH=str(ROOT / "service"))
    env.pop("LATTICE_WARM", None)
    return subprocess.run([*LATTICE, *args], env=env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def fake_server(path: Path, uid: int) -> tuple[int, int]:
    """A process of uid listening on path (bound here as root: its peer
    credentials are the listener's); (its pid, a pipe's read end where it
    writes how many bytes its first client sent before closing)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, 0o777)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            s.listen(1)
            os.write(w, b"L")
            conn, _ = s.accept()
            conn.settimeout(120)
            n = 0
            try:
                while got := conn.recv(65536):
                    n += len(got)
            except OSError:
                pass
            os.write(w, str(n).encode())
        finally:
            os._exit(0)
    os.close(w)
    s.close()
    assert os.read(r, 1) == b"L"
    return pid, r


def received(pid: int, r: int) -> int:
    data = b""
    while chunk := os.read(r, 64):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return int(data)


def test_a_warm_server_of_another_user_gets_nothing(tmp_path: Path) -> None:
    """A home of the caller's with a listener of another uid on warm.sock (it
    can only be there if the home was planted): refused before a byte is sent."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    pid, r = fake_server(home / "warm.sock", OTHER)
    p = lattice(home, "blocks")
    assert received(pid, r) == 0
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert p.stderr == (f"lattice: error: refusing the warm server at {home / 'warm.sock'}: it runs as uid {OTHER}, "
                        f"not as you (uid 0); nothing was sent to it (remove {home / 'warm.sock'})\n")


@pytest.mark.parametrize("how", ["owner", "mode", "parent"])
def test_a_home_another_user_controls_is_refused(open_dir: Path, how: str) -> None:
    parent = open_dir / "p"
    parent.mkdir()
    home = parent / "home"
    home.mkdir(mode=0o700)
    if how == "owner":
        os.chown(home, OTHER, OTHER)
        why = f"refusing LATTICE_HOME {home}: owned by nobody, uid {OTHER}, not by you (root, uid 0)"
    elif how == "mode":
        os.chmod(home, 0o777)
        why = f"refusing LATTICE_HOME {home}: mode 0777 lets others write in it"
    else:
        os.chown(parent, OTHER, OTHER)
        why = f"refusing LATTICE_HOME {home}: {parent} (on the way to it) is owned by nobody, uid {OTHER}"
    p = lattice(home, "init", "--shape", "1x1x2", "--pset-size", "2")
    assert p.returncode == 1 and p.stdout == ""
    assert p.stderr.startswith(f"lattice: error: {why}") and p.stderr.count("\n") == 1, p.stderr
    assert not (home / "machine.toml").exists()


def test_ones_own_home_is_used(open_dir: Path) -> None:
    home = open_dir / "home"
    p = lattice(home, "init", "--shape", "1x1x2", "--pset-size", "2")
    assert p.returncode == 0, p.stderr
    assert lattice(home, "blocks").returncode == 0


def test_an_agents_directories_under_tmp_are_checked_and_others_made_as_before(shared: Path, open_dir: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The host agent (lattice.nodes.agent): a block's directories under /tmp on
    another host, and the logs of a home under /tmp, are refused if planted;
    a log directory's readable parents (a home's) are left as they are."""
    from lattice.nodes import agent
    monkeypatch.setattr(safepath, "SHARED", str(shared))
    planted = Path(safepath.runtime_dir("/some/home"))
    assert planted.parent == shared and safepath.runtime(planted / "h1" / "A")
    assert not safepath.runtime(shared / "lattice-test-secrets-x1" / "home")     # a home kept there: the user's
    planted.mkdir()
    os.chown(planted, OTHER, OTHER)
    with pytest.raises(LatticeError, match=f"refusing {planted}: owned by"):
        agent.private_dir(planted / "h1" / "A")
    assert not (planted / "h1").exists()
    home = shared / "home"
    home.mkdir()
    os.chmod(home, 0o755)
    agent.private_dir(home / "blocks" / "A" / "log" / "h1", tighten=False)
    assert home.stat().st_mode & 0o7777 == 0o755 and (home / "blocks/A/log/h1").stat().st_mode & 0o7777 == 0o700
    mine = open_dir / "machine" / "blocks" / "A"            # not under the shared directory: made as before
    agent.private_dir(mine)
    assert mine.stat().st_mode & 0o7777 == 0o700


def test_a_planted_directory_a_user_cannot_even_open_is_refused_clearly(shared: Path) -> None:
    """Not root: a 0700 directory of another user's in its place is named, not a traceback."""
    planted = shared / "lattice-65534-abc"
    planted.mkdir(mode=0o700)
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'service')!r})\n"
            f"from lattice import safepath\nfrom lattice.errors import LatticeError\n"
            f"try:\n safepath.private_dir({str(planted)!r}, {str(shared)!r})\n"
            f"except LatticeError as e:\n print(e.message)\n")
    p = as_other(code)
    assert p.stdout.startswith(f"refusing {planted}: owned by root, uid 0, not by you (nobody, uid {OTHER})"), \
        (p.stdout, p.stderr)
