"""ciod's socket calls (docs/protocol.md section 6.1) against malformed and
hostile requests: bad descriptors, bad socket address lengths, sizes past
the limits, domains that belong to the compute node; a wait that runs out
answers LAT_ERR_WAIT and the connection keeps serving."""
from __future__ import annotations

import errno
import os
import socket
import struct
import time
from pathlib import Path

from test_ciod import SYS, Ciod, Job, Proc, ciod, ciod_bin, recv, send  # noqa: F401  (fixtures)

SOCK = dict(socket=0x31E, connect=0x31F, bind=0x320, sendmsg=0x321, recvmsg=0x322, shutdown=0x323,
            setsockopt=0x324, getsockopt=0x325, getsockname=0x326, getpeername=0x327, poll=0x328,
            send_rdv=0x329, recv_rdv=0x32A)
SYS.update(SOCK)
ERR_WAIT = 0x10000
MAX_IO = 1 << 20


def sockaddr(port: int, host: str = "127.0.0.1") -> bytes:
    return struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + socket.inet_aton(host) + bytes(8)


def test_malformed_socket_calls_get_errors_and_ciod_keeps_serving(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path)
    p: Proc = job.proc(0)
    # descriptors: not open, out of range, a standard stream
    for fd in (999, 5000, -1):
        assert p.fails("sendmsg", fd, 0, 0, -1, data=b"x") == errno.EBADF
        assert p.fails("connect", fd, -1, 0, data=sockaddr(1)) == errno.EBADF
    assert p.fails("recvmsg", 1, 0, 10, 0) == errno.ENOTSOCK
    # a file is not a socket: the kernel says so
    fd, _ = p.ok("openat", -100, 0, 0, data=b"/etc/hostname\0")
    assert p.fails("getsockname", fd) == errno.ENOTSOCK
    # domains of the compute node, and raw sockets for other users
    assert p.fails("socket", socket.AF_UNIX, socket.SOCK_STREAM, 0) == errno.EAFNOSUPPORT
    assert p.fails("socket", socket.AF_NETLINK, socket.SOCK_RAW, 0) == errno.EAFNOSUPPORT
    s, _ = p.ok("socket", socket.AF_INET, socket.SOCK_DGRAM, 0)
    # socket address lengths: too short, too long, longer than the data
    assert p.fails("connect", s, -1, 0, data=b"\x02") == errno.EINVAL
    assert p.fails("connect", s, -1, 0, data=sockaddr(1) + bytes(200)) == errno.EINVAL
    assert p.fails("bind", s, data=b"") == errno.EINVAL
    assert p.fails("sendmsg", s, 0, 64, -1, data=sockaddr(1)) == errno.EINVAL
    assert p.fails("sendmsg", s, 0, -5, -1, data=b"x") == errno.EINVAL
    # sizes and waits past the limits, flags it does not pass on
    assert p.fails("recvmsg", s, 0, MAX_IO + 1, 0) == errno.EINVAL
    assert p.fails("recvmsg", s, 0, 10, -2) == errno.EINVAL
    assert p.fails("recvmsg", s, 0x100000, 10, 0) == errno.EOPNOTSUPP
    assert p.fails("getsockopt", s, socket.SOL_SOCKET, socket.SO_TYPE, 5000) == errno.EINVAL
    assert p.fails("setsockopt", s, socket.SOL_SOCKET, socket.SO_RCVBUF, data=bytes(2000)) == errno.EINVAL
    assert p.fails("poll", 2, 0, data=struct.pack("<ihh", s, 1, 0)) == errno.EINVAL   # 1 entry sent
    assert p.fails("poll", 5000, 0, data=b"") == errno.EINVAL
    # poll: a bad descriptor is POLLNVAL, as on Linux
    n, out = p.ok("poll", 2, 0, data=struct.pack("<ihhihh", 777, 1, 0, s, 4, 0))
    assert n == 2 and struct.unpack("<ihhihh", out)[2] == 0x20 and struct.unpack("<ihhihh", out)[5] & 4
    # a blocking receive whose wait runs out: LAT_ERR_WAIT, nothing done
    p.ok("bind", s, data=sockaddr(0))
    ret, err, _ = p.call("recvmsg", s, 0, 100, 30)
    assert (ret, err) == (-1, ERR_WAIT)
    # and the connection still serves: a datagram to ourselves comes back
    ln, name = p.ok("getsockname", s)
    port = struct.unpack(">H", name[2:4])[0]
    assert p.ok("sendmsg", s, 0, 16, -1, data=sockaddr(port) + b"ping")[0] == 4
    n, out = p.ok("recvmsg", s, 0, 100, -1)
    assert n == 4 and out[136:] == b"ping" and struct.unpack_from("<I", out)[0] == 16
    p.ok("close", s)


def test_socket_rendezvous_requests_are_checked(ciod: Ciod, tmp_path: Path) -> None:
    """SEND_RDV / RECV_RDV name segments of the process's memory: their
    encoding is checked, and a connection not granted LAT_DP_VM in its hello
    (this one offered nothing) is told to send the bytes instead."""
    job = Job(ciod, tmp_path)
    p: Proc = job.proc(0)
    s, _ = p.ok("socket", socket.AF_INET, socket.SOCK_DGRAM, 0)
    seg = struct.pack("<QQ", 0x10000, 100)
    assert p.fails("send_rdv", s, 0, 0, -1, data=b"") == errno.EINVAL               # no segment
    assert p.fails("send_rdv", s, 0, 0, -1, data=seg[:12]) == errno.EINVAL          # part of one
    assert p.fails("recv_rdv", s, 0, -1, data=seg * 1025) == errno.EINVAL           # past LAT_RDV_MAXSEG
    assert p.fails("send_rdv", s, 0, 64, -1, data=sockaddr(1) + seg) == errno.EINVAL    # name past the data
    assert p.fails("recv_rdv", 999, 0, -1, data=seg) == errno.EBADF
    assert p.fails("recv_rdv", 1, 0, -1, data=seg) == errno.ENOTSOCK
    assert p.fails("recv_rdv", s, 0, -2, data=seg) == errno.EINVAL                  # a wait below -1
    assert p.fails("send_rdv", s, 0, 16, -1, data=sockaddr(1) + seg) == errno.EOPNOTSUPP
    assert p.fails("recv_rdv", s, 0, 0, data=seg) == errno.EOPNOTSUPP
    # and the connection still serves
    assert p.ok("getsockname", s)[0] == 16
    p.ok("close", s)


def test_stream_recv_with_msg_trunc_never_returns_stale_bytes(ciod: Ciod, tmp_path: Path) -> None:
    """MSG_TRUNC on a stream drops the bytes; the reply still carries a
    buffer's worth, which must be those bytes, not what ciod's buffer held
    from an earlier receive."""
    job = Job(ciod, tmp_path)
    p: Proc = job.proc(0)
    with socket.create_server(("127.0.0.1", 0)) as srv:
        s, _ = p.ok("socket", socket.AF_INET, socket.SOCK_STREAM, 0)
        p.ok("connect", s, -1, 0, data=sockaddr(srv.getsockname()[1]))
        peer, _ = srv.accept()
        with peer:
            peer.sendall(b"A" * 64)
            n, out = p.ok("recvmsg", s, socket.MSG_WAITALL, 64, -1)
            assert n == 64 and out[136:] == b"A" * 64
            peer.sendall(b"bbbbcccc")
            n, out = p.ok("recvmsg", s, socket.MSG_TRUNC | socket.MSG_WAITALL, 4, -1)
            assert n == 4 and out[136:] in (b"", b"bbbb")       # never the stale "AAAA"
            n, out = p.ok("recvmsg", s, 0, 64, -1)               # the dropped bytes are gone
            assert out[136:] == b"cccc"
        p.ok("close", s)


def _tasks_and_fds(c: Ciod) -> tuple[int, int]:
    pid = c.proc.pid
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def test_read_or_write_on_a_silent_socket_does_not_outlive_the_process(ciod: Ciod, tmp_path: Path) -> None:
    """Found by the fuzzer (tests/fuzz/ciodfuzz.py): READ on a connected
    socket whose peer never sends held ciod's thread in read(2) for ever,
    with the socket and the process's connection, after the process hung
    up.  READ/WRITE on a socket now wait with the connection: a process
    that goes away frees them, and the calls still work as before."""
    job = Job(ciod, tmp_path, image=b"x")  # noqa: F841 (keeps it running)
    time.sleep(0.2)
    base = _tasks_and_fds(ciod)
    with socket.socket() as srv, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as dgram:
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        dgram.bind(("127.0.0.1", 0))
        for how in ("tcp read", "udp read", "tcp write"):
            p = job.proc(0)
            kind = socket.SOCK_DGRAM if how == "udp read" else socket.SOCK_STREAM
            fd, _ = p.ok("socket", socket.AF_INET, kind, 0)
            port = (dgram if kind == socket.SOCK_DGRAM else srv).getsockname()[1]
            p.ok("connect", fd, -1, data=sockaddr(port))
            peer = srv.accept()[0] if kind == socket.SOCK_STREAM else None
            if how == "tcp write":      # more than the socket buffers hold: the peer never reads
                p.s.settimeout(1)
                try:                    # until ciod stops reading: it waits on the socket
                    for _ in range(64):
                        p.seq += 1
                        send(p.s, SYS["write"], struct.pack("<4q", fd, 0, 0, 0) + bytes(MAX_IO), p.seq)
                except TimeoutError:
                    pass
            else:
                p.seq += 1
                send(p.s, SYS["read"], struct.pack("<4q", fd, 100, 0, 0), p.seq)
            time.sleep(0.3)
            p.s.close()                 # the process is gone while ciod waits on its socket
            deadline = time.time() + 600    # a hang guard: the counts back are the event
            while _tasks_and_fds(ciod) != base:
                assert time.time() < deadline, (how, _tasks_and_fds(ciod), base)
                time.sleep(0.05)
            if peer:
                peer.close()
        # the calls as they were: data that arrives is read, a write goes out whole
        p = job.proc(0)
        fd, _ = p.ok("socket", socket.AF_INET, socket.SOCK_STREAM, 0)
        p.ok("connect", fd, -1, data=sockaddr(srv.getsockname()[1]))
        peer = srv.accept()[0]
        p.seq += 1
        send(p.s, SYS["read"], struct.pack("<4q", fd, 100, 0, 0), p.seq)
        time.sleep(0.2)
        peer.sendall(b"late bytes")
        t, _, body = recv(p.s)
        assert struct.unpack_from("<qi", body) == (10, 0) and body[16:] == b"late bytes"
        data = bytes(range(256)) * 4096
        assert p.ok("write", fd, data=data)[0] == len(data)
        got = b""
        while len(got) < len(data):
            got += peer.recv(1 << 20)
        assert got == data
        # a non-blocking socket answers EAGAIN at once, as read(2) would
        p.ok("fcntl", fd, 4, os.O_RDWR | os.O_NONBLOCK)      # F_SETFL
        assert p.fails("read", fd, 100) == errno.EAGAIN
        peer.close()
    assert ciod.alive()


def test_read_on_a_shut_down_datagram_socket_is_end_of_file(ciod: Ciod, tmp_path: Path) -> None:
    """Found by the fuzzer (seed 1125, case 2604): a datagram socket shut
    down for reading polls ready (POLLIN|POLLHUP) while a non-blocking
    receive says EAGAIN, so READ spun for ever.  A blocking read(2) on it
    returns 0 at once on Linux; so does the shipped one, and the connection
    goes on."""
    job = Job(ciod, tmp_path, image=b"x")  # noqa: F841 (keeps it running)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        p = job.proc(0)
        fd, _ = p.ok("socket", socket.AF_INET, socket.SOCK_DGRAM, 0)
        p.ok("connect", fd, -1, data=sockaddr(sink.getsockname()[1]))
        p.ok("shutdown", fd, socket.SHUT_RDWR)
        p.s.settimeout(5)
        assert p.ok("read", fd, 100) == (0, b"")
        assert p.ok("getcwd", 4096)[0] > 0                 # still in step
    assert ciod.alive()
