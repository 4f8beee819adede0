"""A job's PMI connections end with it, and a lost I/O worker ends its job,
at one real ciod (issue 24; docs/security.md "A connection belongs to its
job").  The test plays the service node and the compute nodes, and holds a
process's own PMI connection as a process left behind would: it is closed
when the job ends, and the next job (even one with the same id) never hears
it; relayed PMI of a rank whose exit was reported is refused; the I/O worker
killed mid-job brings LAT_CTL_JOB_FAIL and the job's kill.  The same attacks
on a booted machine: tests/e2e/test_t0770_pmi_sealed.py."""
from __future__ import annotations

import os
import signal
import socket
import struct
import time
from pathlib import Path

from lattice.transport import wire
from test_ciod import Ciod, Job, ciod, ciod_bin, closed, recv, send  # noqa: F401 (fixtures)

JOB = 42
INIT = "cmd=init pmi_version=1 pmi_subversion=1\n"
GUARD = 120                         # seconds: a failure guard, never a window relied on


def own(c: Ciod, node: int, job: int) -> socket.socket:
    """Process 0 of node's own PMI connection (LAT_ROLE_PMI), as its compute node opens it."""
    s = c.connect(wire.ROLE_PMI, node, job)
    s.settimeout(GUARD)
    return s


def line(s: socket.socket) -> str:
    got = b""
    while not got.endswith(b"\n"):
        b = s.recv(1)
        assert b, f"connection closed after {got!r}"
        got += b
    return got.decode()


def relay(j: Job, node: int, text: str) -> None:
    """What the rank of node writes on its PMI_FD, relayed by its node."""
    send(j.nodes[node], wire.NODE_PMI, struct.pack("<II", node, 0) + text.encode())


def answer(j: Job, node: int) -> str:
    while True:
        t, _, body = recv(j.nodes[node])
        if t == wire.NODE_PMI_REPLY:
            return body[8:].decode()


def until_job_end(j: Job) -> None:
    while recv(j.ctl)[0] != wire.CTL_JOB_END:
        pass


def wait_ras(c: Ciod, text: str) -> None:
    deadline = time.monotonic() + GUARD
    while text not in c.rastext():
        assert time.monotonic() < deadline, c.rastext()
        time.sleep(0.02)


def test_a_pmi_connection_ends_with_its_job_and_the_next_never_hears_it(ciod: Ciod, tmp_path: Path) -> None:
    j = Job(ciod, tmp_path, JOB, image=b"x")
    s = own(ciod, 0, JOB)
    s.sendall(INIT.encode())
    assert line(s).startswith("cmd=response_to_init rc=0")
    s.sendall(b"cmd=finalize\n")
    assert line(s) == "cmd=finalize_ack rc=0\n"
    j.exit(0)
    j.exit(1)
    until_job_end(j)
    assert closed(s)                    # by ciod, though this end is still held
    # the next job, with the same id even (ids may come again): the old connection is not its
    j2 = Job(ciod, tmp_path, JOB, image=b"x", reuse=j)
    try:
        s.sendall(f"cmd=put kvsname=lattice-{JOB} key=leftover value=forged\n"
                  "cmd=abort exitcode=9 message=hijacked\n".encode())
    except OSError:
        pass                            # refused at once: the socket is shut
    relay(j2, 0, INIT)
    assert answer(j2, 0).startswith("cmd=response_to_init rc=0")
    relay(j2, 0, f"cmd=get kvsname=lattice-{JOB} key=leftover\n")
    assert answer(j2, 0) == "cmd=get_result rc=1 msg=key_not_found\n"
    relay(j2, 0, "cmd=finalize\n")
    assert answer(j2, 0) == "cmd=finalize_ack rc=0\n"
    j2.exit(0)
    j2.exit(1)
    until_job_end(j2)                   # its own ranks' exits end it: no abort came
    assert "hijacked" not in ciod.rastext()


def test_relayed_pmi_of_an_exited_rank_is_refused(ciod: Ciod, tmp_path: Path) -> None:
    j = Job(ciod, tmp_path, JOB, image=b"x")
    relay(j, 0, INIT)
    assert answer(j, 0).startswith("cmd=response_to_init rc=0")
    relay(j, 0, "cmd=finalize\n")
    assert answer(j, 0) == "cmd=finalize_ack rc=0\n"
    j.exit(0)                           # rank 0 is gone; rank 1 runs on
    relay(j, 0, f"cmd=put kvsname=lattice-{JOB} key=leftover value=forged\n")
    wait_ras(ciod, f"PMI data for rank 0 of job {JOB}, which has ended: refused")
    relay(j, 1, INIT)
    assert answer(j, 1).startswith("cmd=response_to_init rc=0")
    relay(j, 1, f"cmd=get kvsname=lattice-{JOB} key=leftover\n")
    assert answer(j, 1) == "cmd=get_result rc=1 msg=key_not_found\n"
    # and a new PMI connection for the exited process is refused
    assert ciod.hello(wire.ROLE_PMI, 0, JOB)[1] != 0
    j.exit(1)
    until_job_end(j)


def test_a_killed_io_worker_fails_its_job(ciod: Ciod, tmp_path: Path) -> None:
    j = Job(ciod, tmp_path, JOB, image=b"x")
    (worker,) = [int(p) for t in Path(f"/proc/{ciod.proc.pid}/task").iterdir()
                 for p in (t / "children").read_text().split()]       # forked by a connection's thread
    assert Path(f"/proc/{worker}/comm").read_text().strip() == "ciod-worker"
    os.kill(worker, signal.SIGKILL)
    while True:                         # the cause comes first, then the kill of its ranks
        t, _, body = recv(j.ctl)
        if t == wire.CTL_JOB_FAIL:
            break
    assert wire.JOB_END.unpack_from(body) == (JOB,)
    text = body[wire.JOB_END.size:].decode()
    assert f"the I/O worker of job {JOB}" in text and "was killed by signal 9 while the job ran" in text, text
    for n in j.nodes:
        t, _, body = recv(n)
        assert t == wire.NODE_KILL and wire.KILL.unpack(body)[:2] == (JOB, 9)
    assert f"job {JOB} ended with an error: the I/O worker" in ciod.rastext()
    j.exit(0, wire.EXIT_SIGNAL, 9)
    j.exit(1, wire.EXIT_SIGNAL, 9)
    until_job_end(j)
