"""Plug-ins know their caller (docs/plugins.md, docs/security.md "Plug-ins
know their caller").

On a booted 1x1x2 block whose ciod loads two plug-ins: tests/e2e/plugwho/
(who.h) tells a job of a user this test creates what zoid_caller() says of
it (job, uid, gid, supplementary groups, zoid_caller_in_group) and what a
thread of the plug-in that serves no call sees (zoid_running_job; and
zoid_caller() there names no user, not root), under cnk
and in Linux mode; the LOFAR example (plugins/lofar/) takes its stream on an
abstract unix datagram socket, and another local user who sends datagrams
into a running job's stream, before it starts and while it runs, is refused
(RAS events with a count) while the job's own data arrive complete and in
order.  A plug-in built for the older plug-in ABI is refused at boot with a
RAS line."""
from __future__ import annotations

import grp
import os
import pwd
import re
import secrets
import shutil
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, ROOT, Machine, make_machine, local_users

PRELOAD = {"cnk": (), "linux": ("--no-sandbox",)}   # Linux mode's plugin calls are the preload client's (issue 25)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: users of its own")

SRC = Path(__file__).with_name("plugwho")
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror"]
N = 10                  # the LOFAR job's own datagrams; each of the 2 ranks takes N / 2
SEND = ("import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        "for p in sys.argv[2:]:\n"
        "    s.sendto(p.encode(), '\\0' + sys.argv[1])\n")


@pytest.fixture(scope="module")
def users() -> Iterator[tuple[pwd.struct_passwd, pwd.struct_passwd, int]]:
    """owner (in a supplementary group of its own) and other, an ordinary local user."""
    tag = os.getpid() % 100000
    with local_users(f"latpo{tag}", f"latpx{tag}", group=f"latpg{tag}") as (owner, other):
        yield owner, other, grp.getgrnam(f"latpg{tag}").gr_gid


def build_who(out: Path) -> tuple[Path, Path]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "protocol"))
    p = subprocess.run([sys.executable, "-m", "pluggen", str(SRC / "who.h"), "--id", "9", "--out", str(out)],
                       env=env, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    so, prog = out / "libwho_ciod.so", out / "who_prog"
    subprocess.run(["gcc", *CFLAGS, "-fPIC", "-shared", "-pthread", "-I", "ionode/include", "-I", str(SRC),
                    "-o", str(so), str(out / "who_ciod.c"), str(SRC / "who_impl.c")], check=True, cwd=ROOT)
    subprocess.run(["gcc", *CFLAGS, "-I", "compute/include", "-I", str(SRC), "-o", str(prog),
                    str(SRC / "who_prog.c"), str(out / "who_stubs.c")], check=True, cwd=ROOT)
    return so, prog


class Plugged:
    def __init__(self, m: Machine, who: Path, lofar_test: Path, lofar_gap: Path, stream: str,
                 collector: socket.socket) -> None:
        self.m, self.who, self.stream, self.collector = m, who, stream, collector
        self.lofar_test, self.lofar_gap = lofar_test, lofar_gap


@pytest.fixture(scope="module")
def pm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugged]:
    assert (BUILD / "plugins" / "liblofar_ciod.so").exists(), "build/plugins missing: run make"
    m = make_machine(tmp_path_factory.mktemp("caller"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M")
    so, who = build_who(m.work)
    lofar_test, lofar_gap = m.work / "lofar_test", m.work / "lofar_gap"   # where the job's user may run them
    shutil.copy(BUILD / "plugins" / "lofar_test", lofar_test)
    subprocess.run(["gcc", *CFLAGS, "-I", "plugins/lofar", "-o", str(lofar_gap),
                    str(ROOT / "tests" / "e2e" / "lofar_gap.c"), str(BUILD / "plugins" / "liblofar.a")],
                   check=True, cwd=ROOT)
    collector = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    collector.bind(("127.0.0.1", 0))
    collector.settimeout(120)
    name = f"lattice-lofar-test-{secrets.token_hex(4)}"
    lofar = (f"build/plugins/liblofar_ciod.so:64K;unix=@{name} "
             f"dest=127.0.0.1:{collector.getsockname()[1]} slots=8")
    with open(m.home / "machine.toml", "a") as f:
        f.write(f'\n[ionode]\nplugins = ["{so}", "{lofar}"]\n')
    m.run("block", "create", "W", "--shape", "1x1x2")
    m.run("boot", "W")
    yield Plugged(m, who, lofar_test, lofar_gap, f"{name}.0", collector)
    m.run("free", "W", check=False)
    collector.close()
    shutil.rmtree(m.work, ignore_errors=True)


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_a_call_sees_the_job_owner(pm: Plugged, users: tuple[pwd.struct_passwd, pwd.struct_passwd, int],
                                   kernel: str) -> None:
    owner, other, group = users
    r = pm.m.run("run", "--block", "W", "-n", "2", "--kernel", kernel, *PRELOAD[kernel], "--hugepages", "keep", "--user",
                 owner.pw_name, "--cwd", str(pm.m.work), str(pm.who), str(group), str(owner.pw_gid),
                 str(other.pw_gid), "0", check=False, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for rank in (0, 1):
        env_job = re.search(rf"^rank {rank} env job lattice-(\d+)$", out, re.M)
        caller = re.search(rf"^rank {rank} caller job (\d+) uid (\d+) gid (\d+) groups(( \d+)*)$", out, re.M)
        assert env_job and caller, out
        assert int(caller[1]) == int(env_job[1]), out
        assert (int(caller[2]), int(caller[3])) == (owner.pw_uid, owner.pw_gid), out
        assert [int(g) for g in caller[4].split()] == [group], out
        assert f"rank {rank} in group {group}: 1" in out, out             # supplementary
        assert f"rank {rank} in group {owner.pw_gid}: 1" in out, out      # primary
        assert f"rank {rank} in group {other.pw_gid}: 0" in out, out
        assert f"rank {rank} in group 0: 0" in out, out
        assert f"rank {rank} running rc 0 job {env_job[1]} uid {owner.pw_uid}" in out, out
        assert f"rank {rank} no caller uid 4294967295" in out, out     # nobody's, not root's 0


def send_as(user: pwd.struct_passwd, stream: str, payloads: list[str]) -> None:
    """The payloads, one datagram each, from a process of user (the kernel names it to the receiver)."""
    subprocess.run(["/usr/bin/python3", "-c", SEND, stream, *payloads], user=user.pw_uid, group=user.pw_gid,
                   extra_groups=[], check=True, timeout=120, cwd="/")


def ciod_threads(m: Machine) -> int:
    pids = m.processes("ciod", "W")
    assert len(pids) == 1, pids
    return len(list(Path(f"/proc/{pids[0]}/task").iterdir()))


def test_lofar_refuses_another_users_datagrams(pm: Plugged,
                                               users: tuple[pwd.struct_passwd, pwd.struct_passwd, int]) -> None:
    owner, other, _ = users
    tag = secrets.token_hex(4)
    own = [f"own {i:03d} {tag} " + "y" * (i * 53 % 400) for i in range(N)]
    # before the job: the intruder's datagrams wait in the ring with the owner's
    send_as(other, pm.stream, [f"intruder early 0 {tag}"])
    send_as(owner, pm.stream, own[:1])
    send_as(other, pm.stream, [f"intruder early 1 {tag}"])
    send_as(owner, pm.stream, own[1:2])
    before = ciod_threads(pm.m)
    run = pm.m.popen("run", "--block", "W", "-n", "2", "--kernel", "cnk", "--hugepages", "keep", "--user",
                     owner.pw_name, "--cwd", str(pm.m.work), str(pm.lofar_test), str(N // 2))
    try:
        # its processes are connected (a plug-in line each): the job runs
        deadline = time.monotonic() + 120
        while ciod_threads(pm.m) < before + 2 and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        send_as(other, pm.stream, [f"intruder late {i} {tag}" for i in range(3)])
        send_as(owner, pm.stream, own[2:6])
        send_as(other, pm.stream, [f"intruder late {i} {tag}" for i in range(3, 6)])
        send_as(owner, pm.stream, own[6:])
        stdout, stderr = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    out = stdout + stderr
    assert run.returncode == 0, out
    assert "intruder" not in out, out
    got = re.findall(r"^rank (\d+) piece (\d+): (.*)$", stdout, re.M)
    assert [text for _, _, text in sorted(got, key=lambda g: int(g[1]))] == own, out
    assert all(int(piece) % 2 == int(rank) for rank, piece, _ in got), out
    data, _ = pm.collector.recvfrom(4096)
    assert struct.unpack("<3q", data) == (sum(len(p) for p in own), 1 + 2, N), out
    ras = pm.m.run("ras").stdout
    refused = re.findall(rf"lofar: (.*) from uid {other.pw_uid} refused: job \d+ is uid {owner.pw_uid}'s "
                         r"\((\d+) datagrams of other users refused so far\)", ras)
    # 8 refused: the 2 early ones dropped at the job's first call (or as they came, if the
    # receiver took them in only once the job ran), the 6 late ones as they came; a line each
    # time the count passes a power of two, not one per datagram
    counts = [int(n) for _, n in refused]
    assert counts[-1] == 8 and len(counts) <= 4 and all(n & (n - 1) == 0 for n in counts), ras
    assert any(what == "a datagram" for what, _ in refused), ras
    assert all(what in ("a datagram", "datagrams waiting since before the job (the last)") for what, _ in refused), ras


def test_lofar_pieces_left_behind_do_not_wedge_the_next_job(
        pm: Plugged, users: tuple[pwd.struct_passwd, pwd.struct_passwd, int]) -> None:
    """A job whose rank 1 takes none of its pieces leaves one in the ring
    between two rank 0 took; the next job's stream goes past its slot (before,
    the receiver waited for that slot for ever and the next job hung)."""
    owner, _, _ = users
    tag = secrets.token_hex(4)
    send_as(owner, pm.stream, [f"first {i} {tag}" for i in range(3)])
    r = pm.m.run("run", "--block", "W", "-n", "2", "--user", owner.pw_name, "--cwd", str(pm.m.work),
                 str(pm.lofar_gap), "2", check=False, timeout=120)
    assert r.returncode == 0 and re.findall(r"^rank 0 piece (\d+): first (\d)", r.stdout, re.M) \
        == [("0", "0"), ("2", "2")], r.stdout + r.stderr
    # 10 more: 6 fill the free slots, the 7th comes to the left piece's slot, 3 wait in the socket
    second = [f"second {i:02d} {tag}" for i in range(N)]
    send_as(owner, pm.stream, second)
    r = pm.m.run("run", "--block", "W", "-n", "2", "--kernel", "cnk", "--hugepages", "keep", "--user",
                 owner.pw_name, "--cwd", str(pm.m.work), str(pm.lofar_test), str(N // 2), check=False,
                 timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    got = re.findall(r"^rank (\d+) piece (\d+): (.*)$", r.stdout, re.M)
    assert [text for _, _, text in sorted(got, key=lambda g: int(g[1]))] == second, out
    pm.collector.recvfrom(4096)         # its gathered sum


def test_lofar_stream_is_announced_authenticated(pm: Plugged) -> None:
    ras = pm.m.run("ras").stdout
    assert f"lofar: stream on unix @{pm.stream} (authenticated: only the job owner's datagrams), 8 slots" \
        in ras, ras


OLD_ABI = r"""
#include <errno.h>
#include <stddef.h>
#include <lattice/zoid_ion.h>

const struct zoid_api *zoid_api;

static int dispatch(uint32_t fn, const char *req, size_t len, size_t limit, struct zoid_reply *rep)
{
    (void)fn, (void)req, (void)len, (void)limit, (void)rep;
    return ENOSYS;
}

/* what lattice-pluggen emitted before the caller's owner was in zoid_caller */
const struct zoid_plugin zoid_plugin = { 1u, 11u, "old", 0u, 0u, dispatch, NULL, NULL, &zoid_api };
"""


def test_a_plugin_of_the_older_abi_is_refused(built: Path, tmp_path: Path) -> None:
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    src, so = m.work / "old.c", m.work / "libold_ciod.so"
    src.write_text(OLD_ABI)
    subprocess.run(["gcc", *CFLAGS, "-fPIC", "-shared", "-I", "ionode/include", "-o", str(so), str(src)],
                   check=True, cwd=ROOT)
    with open(m.home / "machine.toml", "a") as f:
        f.write(f'\n[ionode]\nplugins = ["{so}"]\n')
    m.run("block", "create", "O", "--shape", "1x1x2")
    r = m.run("boot", "O", check=False, timeout=120)
    m.run("free", "O", check=False)
    assert r.returncode != 0 and "exited during boot" in r.stderr, r.stderr
    line = f"plug-in {so} was built for plug-in ABI 1, this ciod serves ABI 2: rebuild it with lattice-pluggen"
    log = (m.home / "blocks" / "O" / "log" / "ciod-0.log").read_text()
    shutil.rmtree(m.work, ignore_errors=True)
    assert line in log, log


def test_a_squatted_stream_name_fails_the_boot(built: Path, tmp_path: Path,
                                               users: tuple[pwd.struct_passwd, pwd.struct_passwd, int]) -> None:
    """Another user who holds the stream's abstract name first gets no stream of
    anyone's: the boot fails and says why."""
    _, other, _ = users
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    name = f"lattice-lofar-squat-{secrets.token_hex(4)}"
    squatter = subprocess.Popen(["/usr/bin/python3", "-c", "import socket, sys\n"
                                 "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                                 "s.bind('\\0' + sys.argv[1])\nprint('bound', flush=True)\nsys.stdin.read()\n",
                                 f"{name}.0"], user=other.pw_uid, group=other.pw_gid, extra_groups=[],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
    try:
        assert squatter.stdout and squatter.stdout.readline() == "bound\n"
        with open(m.home / "machine.toml", "a") as f:
            f.write(f'\n[ionode]\nplugins = ["build/plugins/liblofar_ciod.so;unix=@{name} dest=127.0.0.1:9 slots=8"]\n')
        m.run("block", "create", "S", "--shape", "1x1x2")
        r = m.run("boot", "S", check=False, timeout=120)
        m.run("free", "S", check=False)
    finally:
        squatter.kill()
        squatter.wait()
    assert r.returncode != 0 and "exited during boot" in r.stderr, r.stderr
    log = (m.home / "blocks" / "S" / "log" / "ciod-0.log").read_text()
    assert f"lofar: cannot take the stream on unix @{name}.0: Address already in use" in log, log
    shutil.rmtree(m.work, ignore_errors=True)
