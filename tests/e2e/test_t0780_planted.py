"""What another local user can plant for a root `lattice`, and what a job
can send to root's terminal (docs/security.md: "No path a user can plant",
"The warm server's peer", "Untrusted text").

A user of this test's own makes: the short socket directory a machine with
a deep LATTICE_HOME uses under /tmp (a directory of theirs, then a link to
one); a home they can write in with their own warm.sock listener.  A job
calls PMI abort with a message of terminal escapes, a newline and a record
separator.  Root's boot refuses the planted directory with one line and
puts no socket there; root's client refuses the home before it sends a
byte; the huge-page book is root's alone; the abort text reaches
`lattice run`'s stderr, `lattice ras` and `lattice jobs` escaped, as one
record."""
from __future__ import annotations

import hashlib
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, ROOT, Machine, make_machine, local_users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another user's directories")

ABORT_MSG = b"\x1b]0;pwned\x07\x1b[2J\nforged\x1eRAS\xc2\x85line"         # as the job sends it
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x0aforged\\x1eRAS\\x85line"           # as root is shown it
ABORT = f"""import os
fd = int(os.environ["PMI_FD"])
def v2(s):
    os.write(fd, b"%-6d" % len(s) + s)
    os.read(fd, 4096)
os.write(fd, b"cmd=init pmi_version=2 pmi_subversion=0\\n")
os.read(fd, 4096)
v2(b"cmd=fullinit;pmirank=0;")
v2(b"cmd=abort;exitcode=3;msg=" + {ABORT_MSG.replace(b";", b";;")!r} + b";")
"""
FAKE_WARM = """import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1])
s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept()
    got = b""
    while len(got) < 8 and (chunk := c.recv(8 - len(got))):
        got += chunk
    if got != b"SENTINEL" and len(got) == 8:     # a warm request: its length, then the request
        size = int.from_bytes(got, "big")
        while len(got) < 8 + size and (chunk := c.recv(65536)):
            got += chunk
    print(len(got), got[:8].decode(errors="replace"), flush=True)
    c.close()
    if got == b"SENTINEL":
        break
"""


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    with local_users(f"latpl{os.getpid() % 100000}") as (u,):
        yield u


@pytest.fixture(scope="module")
def deep(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """A machine whose home is too deep for a socket path: its I/O node's
    socket goes in /tmp/lattice-UID-HASH."""
    m = make_machine(tmp_path_factory.mktemp("t0780") / ("d" * 90), "--shape", "1x1x2", "--pset-size", "2")
    m.run("block", "create", "A", "--shape", "1x1x2")
    yield m
    m.run("free", "A", check=False)
    shutil.rmtree(socket_dir(m), ignore_errors=True)
    shutil.rmtree(m.work, ignore_errors=True)


def socket_dir(m: Machine) -> Path:
    return Path(f"/tmp/lattice-{os.getuid()}-{hashlib.sha256(str(m.home).encode()).hexdigest()[:12]}")


def theirs(user: pwd.struct_passwd, d: Path, mode: int = 0o777) -> Path:
    os.chmod(d, mode)
    os.chown(d, user.pw_uid, user.pw_gid)
    return d


def booted(m: Machine) -> None:
    """Block A booted, its I/O node's socket where the boot put it."""
    if re.search(r"^A\s+Initialized", m.run("blocks").stdout, re.M):
        if all(Path(a.removeprefix("unix:")).exists() for a in m.ciod_addresses("A")):
            return
        m.run("free", "A")
    m.run("boot", "A")


def test_a_planted_socket_directory_or_link_is_refused_and_never_used(deep: Machine,
                                                                      user: pwd.struct_passwd) -> None:
    planted = socket_dir(deep)
    shutil.rmtree(planted, ignore_errors=True)
    theirs(user, Path(tempfile.mkdtemp(dir="/tmp")), 0o777).rename(planted)
    try:
        p = deep.run("boot", "A", check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
        assert p.stderr.startswith(f"lattice: error: refusing {planted}: owned by {user.pw_name}, uid {user.pw_uid}, "
                                   f"not by you (root, uid 0)"), p.stderr
        st = planted.lstat()
        assert (st.st_uid, st.st_mode & 0o7777) == (user.pw_uid, 0o777) and not list(planted.iterdir())
        assert not deep.processes("ciod")
    finally:
        shutil.rmtree(planted, ignore_errors=True)

    target = theirs(user, Path(tempfile.mkdtemp(prefix="lattice-t0780-target-", dir="/tmp")), 0o777)
    try:
        planted.symlink_to(target)
        os.lchown(planted, user.pw_uid, user.pw_gid)
        p = deep.run("boot", "A", check=False)
        assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
        assert f"refusing {planted}: " in p.stderr, p.stderr
        st = target.stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (user.pw_uid, 0o777) and not list(target.iterdir())
        assert not deep.processes("ciod")
    finally:
        planted.unlink(missing_ok=True)
        shutil.rmtree(target, ignore_errors=True)

    # gone: the next boot makes it afresh, root's, 0700, and its socket is there
    assert re.search(r"^A\s+Free", deep.run("blocks").stdout, re.M)
    deep.run("boot", "A")
    st = planted.lstat()
    assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o700)
    assert deep.ciod_addresses("A") == [f"unix:{planted}/A-0.sock"]


def test_a_jobs_abort_text_reaches_root_escaped_and_as_one_record(deep: Machine) -> None:
    booted(deep)
    script = deep.work / "abort.py"
    script.write_text(ABORT)
    script.chmod(0o755)
    p = deep.run("run", "--block", "A", "-n", "1", "--kernel", "linux", "--cwd", str(deep.work),
                  sys.executable, str(script), check=False)    # the script's directory: a tree of the sandbox
    assert p.returncode == 3, p.stderr
    assert f"lattice: rank 0 (R00-M0-N00-C:J00) called abort with code 3: {SHOWN}\n" in p.stderr, p.stderr
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", p.stderr), p.stderr
    job = deep.run("jobs").stdout.splitlines()[-1].split()[0]
    for args in (("ras", "--job", job), ("ras",), ("jobs",), ("jobs", "--ranks", job)):
        out = deep.run(*args).stdout
        assert SHOWN in out, (args, out)
        assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]", out), (args, out)
        assert not any(line.startswith(("forged", "RAS")) for line in out.splitlines()), (args, out)
    ras = deep.run("ras").stdout        # the I/O node's record (spooled: not filed under the job)
    assert ras.count(f"CIOD    R00-M0-N00-C:J00   job {job} rank 0 called PMI abort with code 3: {SHOWN}\n") == 1, ras
    assert "unreadable RAS line" not in ras, ras
    # the I/O node's spool itself: one line, nothing a terminal obeys (ionode/ciod/ras.c ras_escape)
    spool = b"".join(f.read_bytes() for f in (deep.home / "ras").glob("*.log"))
    lines = [ln for ln in spool.split(b"\n") if f"job {job} rank 0 called PMI abort".encode() in ln]
    assert lines == [lines[0]] and lines[0].endswith(SHOWN.encode()), spool
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", spool), spool


def test_the_huge_page_book_is_roots_alone(deep: Machine, user: pwd.struct_passwd) -> None:
    if not Path("/sys/kernel/mm/hugepages/hugepages-2048kB").is_dir():
        pytest.skip("no 2 MiB huge pages on this kernel: cnk jobs keep no book")
    booted(deep)
    book = Path(tempfile.mkdtemp(prefix="lattice-t0780-book-", dir="/run"))
    os.rmdir(book)              # made by the run, as /run/lattice is
    try:
        env = deep.env
        deep.env = dict(env, LATTICE_HUGEPAGES_BOOK=str(book))
        try:
            p = deep.run("run", "--block", "A", "-n", "2", "--kernel", "cnk", str(ROOT / "build/examples/hello"))
        finally:
            deep.env = env
        assert "cannot reserve huge pages" not in p.stderr, p.stderr
        st = book.stat()
        assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o700)
        for name in ("hugepages.lock", "hugepages.json"):
            st = (book / name).stat()
            assert (st.st_uid, st.st_mode & 0o7777) == (0, 0o600), name
        code = f"open({str(book / 'hugepages.lock')!r})"
        q = subprocess.run(["setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--clear-groups",
                            "/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=120)
        assert q.returncode != 0 and "PermissionError" in q.stderr, q.stderr
    finally:
        shutil.rmtree(book, ignore_errors=True)


def test_a_fake_warm_server_in_a_home_another_user_can_write_gets_nothing(built: Path,
                                                                          user: pwd.struct_passwd) -> None:
    home = theirs(user, Path(tempfile.mkdtemp(prefix="lattice-t0780-home-", dir="/tmp")), 0o755)
    sock = home / "warm.sock"
    fake = subprocess.Popen(["setpriv", "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--clear-groups",
                             "/usr/bin/python3", "-c", FAKE_WARM, str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        assert fake.stdout is not None and fake.stdout.readline() == "listening\n"
        env = dict(os.environ, LATTICE_HOME=str(home), PYTHONPATH=str(ROOT / "service"))
        env.pop("LATTICE_WARM", None)
        p = subprocess.run([*LATTICE, "blocks"], env=env, capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 1 and p.stdout == "", (p.returncode, p.stdout, p.stderr)
        assert p.stderr == (f"lattice: error: refusing LATTICE_HOME {home}: owned by {user.pw_name}, "
                            f"uid {user.pw_uid}, not by you (root, uid 0); use a LATTICE_HOME of your own that "
                            f"only you can write in, as ssh wants of ~/.ssh\n"), p.stderr
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:     # the last connection it sees
            s.connect(str(sock))
            s.sendall(b"SENTINEL")
        seen = fake.stdout.read().splitlines()
        fake.wait(timeout=120)
        assert seen == ["8 SENTINEL"], seen     # root's command sent nothing: not its environment, stdio or cwd
    finally:
        fake.kill()
        fake.wait()
        shutil.rmtree(home, ignore_errors=True)
