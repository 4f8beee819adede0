"""A job's PMI fence tree at one real ciod (docs/protocol.md section 10):
this test plays the service node, the job's compute nodes (their PMI
relayed as LAT_NODE_PMI) and a child I/O node below the ciod.  A child
needs the block key and a place below this ciod in that job; its fence
joins the pset's on the way up, the FENCE_OUT comes back down to it,
numbered; a malformed fence, a replayed message or a child lost in the
middle of a fence ends the job with LAT_CTL_TREE_FAIL and a RAS event, and
ciod goes on serving.  Two real ciods make a tree over TCP; a 'parent'
that cannot prove it holds the key gets no fence.  Whole jobs through
trees of ciods: tests/e2e/test_t0605_pmi_tree.py."""
from __future__ import annotations

import errno
import shutil
import socket
import struct
import tempfile
from pathlib import Path

from lattice.transport import wire
from test_ciod import (Ciod, Job, ciod, ciod_bin, closed, recv, request, send)  # noqa: F401 (fixtures)

JOB = 42
CHILD = 7                           # the child's pset (this ciod's is 1)
INIT = "cmd=init pmi_version=1 pmi_subversion=1\n"


def tree_job(c: Ciod, cwd: Path, children: list[int]) -> Job:
    """A job of ranks 0, 1 on this pset's two nodes, sent as a tree job,
    this ciod at the top of the tree with children below."""
    j = Job(c, cwd, JOB, flags=wire.JOB_TREE)
    ret, err, text = request(j.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, children, ""))
    assert (ret, err) == (0, 0), text
    return j


def pmi(j: Job, node: int, text: str) -> None:
    """What rank `node` writes on its PMI_FD, relayed by its node."""
    send(j.nodes[node], wire.NODE_PMI, struct.pack("<II", node, 0) + text.encode())


def answer(j: Job, node: int) -> str:
    t, _, body = recv(j.nodes[node])
    assert t == wire.NODE_PMI_REPLY, hex(t)
    return body[8:].decode()


def fence(job: int, epoch: int, kvs: dict[str, str], flags: int = 0) -> bytes:
    return wire.FENCE.pack(job, epoch, len(kvs), flags, 0) + b"".join(
        k.encode() + b"\0" + v.encode() + b"\0" for k, v in kvs.items())


def pset_in_fence(j: Job) -> None:
    for node in (0, 1):
        pmi(j, node, INIT)
        assert answer(j, node).startswith("cmd=response_to_init rc=0")
        pmi(j, node, f"cmd=put kvsname=lattice-{JOB} key=card-{node} value=at-{node}\n")
        assert answer(j, node) == "cmd=put_result rc=0\n"
        pmi(j, node, "cmd=barrier_in\n")


def tree_fail(j: Job) -> str:
    """The LAT_CTL_TREE_FAIL that must come to the job's owner: its text."""
    while True:
        t, _, body = recv(j.ctl)
        if t == wire.CTL_TREE_FAIL:
            assert wire.JOB_END.unpack_from(body) == (JOB,)
            return body[wire.JOB_END.size:].decode()


def test_a_child_needs_the_key_and_a_place_below(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD])
    s, err = ciod.hello(wire.ROLE_TREE, CHILD, JOB, key=bytes(32))
    assert err == errno.EACCES and closed(s)                    # not the block key
    s, err = ciod.hello(wire.ROLE_TREE, 8, JOB)
    assert err == errno.EACCES and closed(s)                    # not a child of this one
    s, err = ciod.hello(wire.ROLE_TREE, CHILD, JOB - 1)
    assert err == errno.EACCES and closed(s)                    # an earlier job, ended
    child, err = ciod.hello(wire.ROLE_TREE, CHILD, JOB)
    assert err == 0
    s, err = ciod.hello(wire.ROLE_TREE, CHILD, JOB)
    assert err == errno.EACCES and closed(s)                    # connected already
    ras = ciod.rastext()
    assert "refused: the hello's mac is wrong" in ras
    assert f"PMI tree connection from" in ras and f"for pset 8 of job {JOB} refused" in ras
    # a PMI_TREE that is malformed closes the control connection; one for another job is refused
    assert request(j.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [CHILD], ""))[:2] == (-1, errno.EINVAL)
    other = ciod.connect(wire.ROLE_CONTROL)
    assert request(other, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB + 5, [], ""))[:2] == (-1, errno.ESRCH)
    assert request(other, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [1], ""))[:2] == (-1, errno.EINVAL)
    assert request(other, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [], "http://x"))[:2] == (-1, errno.EINVAL)
    send(other, wire.CTL_PMI_TREE, wire.PMI_TREE.pack(JOB, 1000, 0) + b"\0")
    assert closed(other)
    assert "cannot hold 1000 children" in ciod.rastext()
    child.close()


def test_a_fence_goes_up_with_the_child_and_comes_back_down(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD])
    child = ciod.connect(wire.ROLE_TREE, CHILD, JOB)
    pset_in_fence(j)
    child.settimeout(0.5)
    send(child, wire.CTL_FENCE, fence(JOB, 0, {"card-2": "at-2"}, wire.FENCE_MORE))
    send(child, wire.CTL_FENCE, fence(JOB, 0, {"card-3": "at-3"}))
    t, _, body = recv(j.ctl)                    # ONE fence up, with the child's keys
    assert t == wire.CTL_FENCE
    job, epoch, nkv, flags, _ = wire.FENCE.unpack_from(body)
    assert (job, epoch, flags) == (JOB, 0, 0)
    assert dict(wire.parse_kvs(body[wire.FENCE.size:], nkv)) == {
        "card-0": "at-0", "card-1": "at-1", "card-2": "at-2", "card-3": "at-3"}
    merged = {f"card-{r}": f"at-{r}" for r in range(4)}
    send(j.ctl, wire.CTL_FENCE_OUT, fence(JOB, 0, merged))
    t, seq1, body = recv(child)                 # passed on down, numbered
    assert t == wire.CTL_FENCE_OUT and body == fence(JOB, 0, merged) and seq1 > 0
    assert answer(j, 0) == answer(j, 1) == "cmd=barrier_out rc=0\n"
    pmi(j, 0, f"cmd=get kvsname=lattice-{JOB} key=card-3\n")
    assert answer(j, 0) == "cmd=get_result rc=0 msg=success value=at-3\n"
    # the next fence: the child first this time
    send(child, wire.CTL_FENCE, fence(JOB, 1, {}))
    for node in (0, 1):
        pmi(j, node, "cmd=barrier_in\n")
    t, _, body = recv(j.ctl)
    assert t == wire.CTL_FENCE and wire.FENCE.unpack_from(body)[:2] == (JOB, 1)
    send(j.ctl, wire.CTL_FENCE_OUT, fence(JOB, 1, {}))
    t, seq2, _ = recv(child)
    assert t == wire.CTL_FENCE_OUT and seq2 > seq1
    assert answer(j, 0) == answer(j, 1) == "cmd=barrier_out rc=0\n"


def test_a_malformed_fence_from_a_child_ends_the_job(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD])
    child = ciod.connect(wire.ROLE_TREE, CHILD, JOB)
    send(child, wire.CTL_FENCE, wire.FENCE.pack(JOB, 0, 3, 0, 0) + b"k\0v\0")    # says 3 pairs, has 1
    assert "from the I/O node of pset 7 below" in tree_fail(j)
    assert closed(child)
    assert f"job {JOB}: PMI fence tree broken" in ciod.rastext()
    assert ciod.alive()


def test_a_replayed_message_from_a_child_ends_the_job(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD])
    child = ciod.connect(wire.ROLE_TREE, CHILD, JOB)
    seq = send(child, wire.CTL_FENCE, fence(JOB, 0, {"a": "1"}, wire.FENCE_MORE))
    send(child, wire.CTL_FENCE, fence(JOB, 0, {"a": "1"}, wire.FENCE_MORE), seq)
    assert "not after the last one" in tree_fail(j)
    assert closed(child)


def test_a_child_lost_in_the_middle_of_a_fence_ends_the_job(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD, CHILD + 1])
    first = ciod.connect(wire.ROLE_TREE, CHILD, JOB)
    second = ciod.connect(wire.ROLE_TREE, CHILD + 1, JOB)
    pset_in_fence(j)
    send(first, wire.CTL_FENCE, fence(JOB, 0, {"x": "1"}))
    second.close()                              # its I/O node died before it joined
    # the close itself is the cause (no fence timeout): the failure names it
    assert "connection of I/O node 1 below this one ended before it joined" in tree_fail(j)
    assert ciod.alive()


def test_a_child_that_says_nothing_but_fences_is_refused(ciod: Ciod, tmp_path: Path) -> None:
    j = tree_job(ciod, tmp_path, [CHILD])
    child = ciod.connect(wire.ROLE_TREE, CHILD, JOB)
    send(child, wire.CTL_KILL, wire.KILL.pack(JOB, 9, 0))       # a child may not act as the service node
    assert "message type 0x0102, not a fence" in tree_fail(j)
    assert closed(child)


def test_a_parent_without_the_key_is_refused(ciod: Ciod, tmp_path: Path) -> None:
    """ciod as a child: it connects to the address it is given with a
    LAT_ROLE_TREE hello; a 'parent' that cannot prove it holds the block
    key gets nothing, and the first fence that needs it ends the job."""
    path = tmp_path / "parent.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(1)
    j = Job(ciod, tmp_path, JOB, flags=wire.JOB_TREE)
    ret, err, text = request(j.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [], f"unix:{path}"))
    assert (ret, err) == (0, 0), text
    srv.settimeout(10)
    conn, _ = srv.accept()
    conn.settimeout(10)
    nonce = bytes(range(32))
    conn.sendall(wire.header(wire.CHALLENGE, 32, 0) + nonce)
    magic, version, flags, typ, length, seq = wire.HDR.unpack(conn.recv(16, socket.MSG_WAITALL))
    body = conn.recv(length, socket.MSG_WAITALL)
    role, node, job, cnonce, mac = wire.HELLO_MSG.unpack(body)
    assert (typ, seq, role, node, job) == (wire.HELLO, 1, wire.ROLE_TREE, 1, JOB)
    assert mac == wire.hello_mac(ciod.key, nonce, cnonce, role, node, job)          # it holds the key
    conn.sendall(wire.header(wire.HELLO | wire.REPLY, wire.HELLO_ACK.size, seq) +
                 wire.ack_payload(bytes(32), nonce, cnonce, 0, 1 << 20, 0, 2))     # we do not
    pset_in_fence(j)
    assert "does not hold the block key" in tree_fail(j)
    conn.close()
    srv.close()


def test_two_ciods_over_tcp(ciod_bin: Path, tmp_path: Path) -> None:
    """A child ciod (pset 2, on a unix socket) below a parent on TCP (pset
    1): the child's pset's fence reaches the service node through the
    parent, the FENCE_OUT comes back to both psets' ranks."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dirs = [Path(tempfile.mkdtemp(prefix="ciod-tree-", dir="/tmp")) for _ in range(2)]
    parent = Ciod(ciod_bin, dirs[0], tcp_port=port, pset=1)
    child = Ciod(ciod_bin, dirs[1], pset=2)
    try:
        jp = Job(parent, tmp_path, JOB, flags=wire.JOB_TREE)
        jc = Job(child, tmp_path, JOB, flags=wire.JOB_TREE)
        assert request(jp.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [2], ""))[:2] == (0, 0)
        assert request(jc.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [], f"tcp:127.0.0.1:{port}"))[:2] \
            == (0, 0)
        for j in (jc, jp):
            pset_in_fence(j)
        t, _, body = recv(jp.ctl)               # one fence, at the top, with both psets' keys
        assert t == wire.CTL_FENCE
        job, epoch, nkv, flags, _ = wire.FENCE.unpack_from(body)
        pairs = sorted(wire.parse_kvs(body[wire.FENCE.size:], nkv))     # each pset's ranks 0 and 1 (two jobs' views)
        assert (job, epoch, flags) == (JOB, 0, 0)
        assert pairs == [("card-0", "at-0")] * 2 + [("card-1", "at-1")] * 2
        send(jp.ctl, wire.CTL_FENCE_OUT, fence(JOB, 0, {"merged": "yes"}))
        for j in (jp, jc):
            assert answer(j, 0) == answer(j, 1) == "cmd=barrier_out rc=0\n"
            pmi(j, 1, f"cmd=get kvsname=lattice-{JOB} key=merged\n")
            assert answer(j, 1) == "cmd=get_result rc=0 msg=success value=yes\n"
        assert f"job {JOB}: PMI tree: pset 2 below connected" in parent.logtext()
        assert f"job {JOB}: PMI tree: above tcp:127.0.0.1:{port}, 0 below" in child.logtext()
        assert parent.alive() and child.alive()
    finally:
        for c, d in ((parent, dirs[0]), (child, dirs[1])):
            if c.alive():
                c.proc.terminate()
            c.proc.wait(10)
            c.log.close()
            shutil.rmtree(d, ignore_errors=True)
