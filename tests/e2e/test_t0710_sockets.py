"""Client sockets shipped to the I/O node (issue 5, compute/cnk/README.md
"Sockets"): a program on the compute nodes talks TCP and UDP to servers this
test runs on 127.0.0.1, outside the block; the I/O node's counters show the
calls were shipped; a blocking recv waits while the other threads and ranks
keep doing file I/O; poll/select/epoll and getaddrinfo work on compute nodes;
a connection to a compute node's address stays local; large sends and
receives are a rendezvous (ciod sends from and receives into the program's
memory: on its mapping of cnk's big memory, through its window in Linux
mode or from cnk's private big memory), byte-exact, with peeks, MSG_WAITALL and non-blocking partial sends.
Every test runs under cnk and in Linux mode (the preload client,
compute/libcnclient/sock.c).

One 1x1x2 machine (one pset of 2, 256 MiB per node) with block K.
"""
from __future__ import annotations

import json
import re
import shutil
import socket
import socketserver
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, make_machine
from cnk_helpers import by_rank

N = 2
PROG = EXAMPLES / "sockets"
KERNELS = ["cnk", "linux"]
PRELOAD = {"cnk": (), "linux": ("--no-sandbox",)}   # Linux mode here is the preload client's (issue 25)


@pytest.fixture(scope="module")
def sk(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert PROG.exists(), f"{PROG} missing: run make"
    m = make_machine(tmp_path_factory.mktemp("sockets"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M", "--cores", "2")
    m.run("block", "create", "K", "--shape", "1x1x2")
    m.run("boot", "K")
    yield m
    m.run("free", "K", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


class Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(65536):
            self.request.sendall(data)


class TCP(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class UDPEcho(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        data, s = self.request
        s.sendto(data, self.client_address)


def serve(server: socketserver.BaseServer) -> socketserver.BaseServer:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def run(m: Machine, kernel: str, *args: str, n: int = N, pages: str = "keep", env: tuple[str, ...] = ()):
    return m.run("run", "--block", "K", "-n", str(n), "--label", "--kernel", kernel, *PRELOAD[kernel], "--hugepages", pages,
                 *[f"--env={e}" for e in env], "--cwd", str(m.work), str(PROG), *args, timeout=120)


def counters(m: Machine) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in m.run("counters", "K").stdout.splitlines():
        f = line.split()
        if len(f) >= 3 and f[-1].isdigit():
            out[f[-2]] = out.get(f[-2], 0) + int(f[-1])
    return out


@pytest.mark.parametrize("kernel", KERNELS)
def test_tcp_to_a_server_outside_the_block(sk: Machine, kernel: str) -> None:
    with serve(TCP(("127.0.0.1", 0), Echo)) as srv:
        before = counters(sk)
        p = run(sk, kernel, "tcp", str(srv.server_address[1]))
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert "tcp ok" in " ".join(out.get(r, [])), p.stdout + p.stderr
    after = counters(sk)
    for call in ("socket", "connect", "sendmsg", "recvmsg", "shutdown", "getpeername", "setsockopt",
                 "getsockopt"):
        assert after.get(call, 0) - before.get(call, 0) >= N, (call, after)


def stats(m: Machine) -> dict[str, int]:
    """The I/O node's data path counters and calls (`lattice counters --json`)."""
    (ion,) = json.loads(m.run("counters", "K", "--json").stdout)["ionodes"]
    out: dict[str, int] = dict(ion["stats"])
    out.update({f"calls.{k}": v for k, v in ion["calls"].items()})
    return out


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


BIG = 6 * (1 << 20) + 12345         # several MiB, not a multiple of anything


def pat(n: int, k: int) -> bytes:
    """examples/sockets.c's pattern k: byte i = (i % 4093) * (13 if k else 7) + i // 4093 + k."""
    base = bytes(((j * (13 if k else 7)) + k) & 0xFF for j in range(4093))
    shift = [bytes((x + b) & 0xFF for x in range(256)) for b in range(256)]
    return b"".join(base.translate(shift[b & 0xFF]) for b in range(n // 4093 + 1))[:n]


def recv_exact(c: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n and (r := c.recv_into(view[got:])) > 0:
        got += r
    return bytes(buf[:got])


class BigEcho(socketserver.BaseRequestHandler):
    """Reads BIG bytes, records whether they are pattern 0, answers BIG bytes of pattern 1."""
    checked: list[bool] = []

    def handle(self) -> None:
        self.checked.append(recv_exact(self.request, BIG) == pat(BIG, 0))
        self.request.sendall(pat(BIG, 1))


def big_exchange(sk: Machine, kernel: str, env: tuple[str, ...] = ()) -> dict[str, int]:
    """Every rank sends BIG bytes to an echo server and receives them back
    (the `big` mode of examples/sockets.c); checks both directions byte for
    byte and returns the I/O node's counter deltas."""
    BigEcho.checked = []
    with serve(TCP(("127.0.0.1", 0), BigEcho)) as srv:
        before = stats(sk)
        p = run(sk, kernel, "big", str(srv.server_address[1]), str(BIG), pages="reserve", env=env)  # hugetlb: shared
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert f"rank {r}: big ok sent={BIG} got={BIG}" in " ".join(out.get(r, [])), p.stdout + p.stderr
    assert BigEcho.checked == [True] * N, BigEcho.checked
    return delta(before, stats(sk))


@pytest.mark.parametrize("kernel", KERNELS)
def test_large_send_and_recv_are_rendezvous_and_exact(sk: Machine, kernel: str) -> None:
    """One send() of BIG bytes and the answer received with a peek, a
    MSG_WAITALL half and large recvs: byte for byte both ways, and every
    one of those calls a rendezvous -- on the shared mapping of big memory
    under cnk (one copy), through ciod's window in Linux mode."""
    d = big_exchange(sk, kernel)
    assert d["calls.send_rdv"] == N and d["calls.sendmsg"] == 0, d        # one request per send, no messages
    assert d["calls.recv_rdv"] >= 3 * N and d["rdv_fault"] == 0, d       # peek, MSG_WAITALL, the rest
    assert d["sock_rdv_bytes"] >= 2 * N * BIG, d
    if kernel == "cnk":     # the buffers are in big memory: where ciod maps it (hugetlb), one copy
        # each rank whose pages came from the pool (reserve grows it; a box
        # short of memory may leave a rank on private pages) shared them
        assert d["shm_shares"] >= 1, ("no rank got hugetlb pages", d)
        assert d["sock_shm"] >= 4 * d["shm_shares"] and d["sock_shm_bytes"] >= 2 * BIG * d["shm_shares"], d
    else:                   # a Linux process's memory is its own: through the window
        assert d["sock_shm"] == 0, d


def test_large_send_and_recv_from_private_big_memory_go_through_the_window(sk: Machine) -> None:
    """LATTICE_BIGMEM_SHARED=0 keeps cnk's big memory private: the same
    transfers are rendezvous through ciod's window (process_vm_readv and
    writev on the cnk process), still byte for byte."""
    d = big_exchange(sk, "cnk", env=("LATTICE_BIGMEM_SHARED=0",))
    assert d["shm_shares"] == 0 and d["sock_shm"] == 0 and d["rdv_fault"] == 0, d
    assert d["calls.send_rdv"] == N and d["sock_rdv_bytes"] >= 2 * N * BIG, d


@pytest.fixture(scope="module")
def sk_messages(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """Block M, whose ciod runs with LATTICE_DATAPATH=messages: what a
    process on another host gets (no rendezvous, no shared memory)."""
    m = make_machine(tmp_path_factory.mktemp("sockets-msg"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M", "--cores", "2")
    m.env = dict(m.env, LATTICE_DATAPATH="messages")
    m.run("block", "create", "M", "--shape", "1x1x2")
    m.run("boot", "M")
    yield m
    m.run("free", "M", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


@pytest.mark.parametrize("kernel", KERNELS)
def test_large_send_and_recv_without_rendezvous_travel_in_messages(sk_messages: Machine, kernel: str) -> None:
    """Between hosts the same transfers go in SENDMSG/RECVMSG messages of
    at most 1 MiB, byte for byte, and no SEND_RDV/RECV_RDV is even tried."""
    m = sk_messages
    BigEcho.checked = []
    (ion,) = json.loads(m.run("counters", "M", "--json").stdout)["ionodes"]
    with serve(TCP(("127.0.0.1", 0), BigEcho)) as srv:
        p = m.run("run", "--block", "M", "-n", str(N), "--label", "--kernel", kernel, *PRELOAD[kernel], "--hugepages", "reserve",
                  "--cwd", str(m.work), str(PROG), "big", str(srv.server_address[1]), str(BIG), timeout=120)
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert f"rank {r}: big ok sent={BIG} got={BIG}" in " ".join(out.get(r, [])), p.stdout + p.stderr
    assert BigEcho.checked == [True] * N, BigEcho.checked
    (after,) = json.loads(m.run("counters", "M", "--json").stdout)["ionodes"]
    calls = {k: v - ion["calls"].get(k, 0) for k, v in after["calls"].items()}
    assert calls["send_rdv"] == 0 and calls["recv_rdv"] == 0, calls
    assert calls["sendmsg"] >= N * (BIG >> 20) and calls["recvmsg"] >= N * (BIG >> 20), calls
    assert after["stats"]["sock_rdv"] == 0, after["stats"]


class HeldSink(socketserver.BaseRequestHandler):
    """Reads nothing until every rank's sent.RANK file exists in `where`, then
    reads to end of file and answers the count if the bytes are pattern 0."""
    where = Path("/nonexistent")

    def handle(self) -> None:
        deadline = time.monotonic() + 600               # a hang guard: the files are the event
        while not all((self.where / f"sent.{r}").exists() for r in range(N)) and time.monotonic() < deadline:
            time.sleep(0.05)
        data = recv_exact(self.request, 1 << 30)
        self.request.sendall(str(len(data)).encode() if data == pat(len(data), 0) else b"garbled")


@pytest.mark.parametrize("kernel", KERNELS)
def test_nonblocking_large_send_goes_in_part(sk: Machine, kernel: str) -> None:
    """O_NONBLOCK: a 64 MiB send() to a server that reads nothing yet returns
    the part the buffers took, the next send EAGAIN, a large recv with
    nothing there EAGAIN; the server then gets exactly the bytes counted."""
    work = sk.work / f"nb-{kernel}"
    work.mkdir(exist_ok=True)
    work.chmod(0o777)
    HeldSink.where = work
    size = 64 << 20
    with serve(TCP(("127.0.0.1", 0), HeldSink)) as srv:
        before = stats(sk)
        p = run(sk, kernel, "nb", str(srv.server_address[1]), str(size), str(work))
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        line = " ".join(out.get(r, []))
        m = re.search(r"nb ok first=(\d+) sent=(\d+)", line)
        assert m, p.stdout + p.stderr
        assert 0 < int(m[1]) <= int(m[2]) < size, line
    d = delta(before, stats(sk))
    assert d["calls.send_rdv"] >= 2 * N and d["calls.recv_rdv"] >= N, d


class Closer(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.close()


@pytest.mark.parametrize("kernel", KERNELS)
def test_large_send_to_a_closed_peer_is_epipe(sk: Machine, kernel: str) -> None:
    """Rendezvous sends to a server that closed: ECONNRESET or EPIPE, then
    EPIPE; SIGPIPE is raised by the client only without MSG_NOSIGNAL."""
    with serve(TCP(("127.0.0.1", 0), Closer)) as srv:
        before = stats(sk)
        p = run(sk, kernel, "pipe", str(srv.server_address[1]), str(1 << 20))
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert f"rank {r}: epipe ok sigpipe=1" in out.get(r, []), p.stdout + p.stderr
    assert delta(before, stats(sk))["calls.send_rdv"] >= 2 * N


@pytest.mark.parametrize("kernel", KERNELS)
def test_udp_bind_sendto_recvfrom(sk: Machine, kernel: str) -> None:
    with serve(socketserver.ThreadingUDPServer(("127.0.0.1", 0), UDPEcho)) as srv:
        before = counters(sk)
        port = srv.server_address[1]
        p = run(sk, kernel, "udp", str(port))
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert f"udp ok from port {port}" in " ".join(out.get(r, [])), p.stdout + p.stderr
    after = counters(sk)
    for call in ("socket", "bind", "sendmsg", "recvmsg", "getsockname"):
        assert after.get(call, 0) - before.get(call, 0) >= N, (call, after)


@pytest.mark.parametrize("kernel", KERNELS)
def test_poll_select_epoll_on_shipped_sockets(sk: Machine, kernel: str) -> None:
    with serve(TCP(("127.0.0.1", 0), Echo)) as srv:
        before = counters(sk)
        p = run(sk, kernel, "poll", str(srv.server_address[1]))
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert "poll select epoll ok" in " ".join(out.get(r, [])), p.stdout + p.stderr
    assert counters(sk).get("poll", 0) - before.get("poll", 0) >= 3 * N


@pytest.mark.parametrize("room", [15, 1 << 20], ids=["messages", "rendezvous"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_blocking_recv_does_not_stall_file_io(sk: Machine, kernel: str, room: int) -> None:
    """Rank 0's main thread blocks in recv on a shipped socket (into 15
    bytes, in messages, or into 1 MiB, a rendezvous); its own second thread
    and rank 1 do 400 shipped file calls each meanwhile.  The server answers
    only once every rank's done file exists: if the blocked recv held rank
    0's connection, its thread could never finish."""
    work = sk.work / f"wait-{kernel}-{room}"
    work.mkdir(exist_ok=True)
    work.chmod(0o777)
    lsn = socket.create_server(("127.0.0.1", 0))
    port = lsn.getsockname()[1]
    order: list[str] = []

    def server() -> None:
        c, _ = lsn.accept()
        assert c.recv(16) == b"waiting"
        deadline = time.monotonic() + 600               # a hang guard: the files are the event
        while not all((work / f"done.{r}").exists() for r in range(N)) and time.monotonic() < deadline:
            time.sleep(0.05)
        order.append("all done")
        time.sleep(0.3)         # the blocked rank really waits
        c.sendall(b"go")
        c.close()

    t = threading.Thread(target=server, daemon=True)
    t.start()
    before = stats(sk)
    p = run(sk, kernel, "wait", str(port), str(work), str(room))
    t.join(600)
    lsn.close()
    out = by_rank(p.stdout)
    assert order == ["all done"], p.stdout
    assert "rank 0: recv got go" in out.get(0, []), p.stdout + p.stderr
    for r in range(N):
        assert f"rank {r}: io done" in out.get(r, []), p.stdout
    # rank 0's io thread finished before its recv returned
    lines = p.stdout.splitlines()
    assert [i for i, l in enumerate(lines) if "rank 0: io done" in l][0] < \
        [i for i, l in enumerate(lines) if "recv got go" in l][0], p.stdout
    rdv = delta(before, stats(sk))["calls.recv_rdv"]
    assert rdv >= 1 if room >= 65536 else rdv == 0, rdv


def node_address() -> str | None:
    """A non-loopback IPv4 address of this host: a compute node's address."""
    for fam, _, _, _, sa in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
        if not sa[0].startswith("127."):
            return sa[0]
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))      # no packet: just picks the source address
            a = s.getsockname()[0]
            return None if a.startswith("127.") else a
    except OSError:
        return None


@pytest.mark.parametrize("kernel", KERNELS)
def test_tcp_to_a_compute_node_address_stays_local(sk: Machine, kernel: str) -> None:
    addr = node_address()
    if addr is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    with serve(TCP((addr, 0), Echo)) as srv:
        before = counters(sk)
        p = run(sk, kernel, "tcp", str(srv.server_address[1]), addr)
        srv.shutdown()
    out = by_rank(p.stdout)
    for r in range(N):
        assert "tcp ok" in " ".join(out.get(r, [])), p.stdout + p.stderr
    after = counters(sk)
    for call in ("socket", "connect", "sendmsg", "recvmsg"):
        assert after.get(call, 0) == before.get(call, 0), (call, before, after)


def hosts_name() -> str | None:
    """A name /etc/hosts gives an IPv4 address other than localhost."""
    for line in Path("/etc/hosts").read_text().splitlines():
        f = line.split("#")[0].split()
        if len(f) >= 2 and re.fullmatch(r"\d+\.\d+\.\d+\.\d+", f[0]):
            for name in f[1:]:
                if name != "localhost":
                    return name
    return None


@pytest.mark.parametrize("kernel", KERNELS)
def test_getaddrinfo_on_compute_nodes(sk: Machine, kernel: str) -> None:
    names = ["localhost"] + ([n] if (n := hosts_name()) else [])
    p = run(sk, kernel, "resolve", *names)
    out = by_rank(p.stdout)
    for r in range(N):
        text = " ".join(out.get(r, []))
        assert "resolve localhost -> 127.0.0.1" in text, p.stdout + p.stderr
        for name in names[1:]:
            want = socket.gethostbyname(name)
            assert f"resolve {name} -> {want}" in text, p.stdout + p.stderr
