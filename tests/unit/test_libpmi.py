"""Lattice's PMI-1 client library (build/lib/libpmi.so) against a small PMI-1
server written here, over a socketpair given to the client as PMI_FD.

The client is a Python child that calls the library through ctypes, one
operation per argument, and prints one JSON line per operation (its PMI
return code and result); the server is a thread of the test answering
each request line, from a KVS or from a script of deliberately bad replies.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from tests.conftest import BUILD

LIB = BUILD / "lib" / "libpmi.so"

CLIENT = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
def out(op, rc, val=None):
    print(json.dumps([op, rc, val]), flush=True)
for a in sys.argv[2:]:
    op, *args = a.split("|")
    i = ctypes.c_int(-7)
    if op == "init":
        out(op, lib.PMI_Init(ctypes.byref(i)), i.value)
    elif op in ("size", "rank", "universe_size", "appnum", "clique_size"):
        out(op, getattr(lib, "PMI_Get_" + op)(ctypes.byref(i)), i.value)
    elif op in ("name_length_max", "key_length_max", "value_length_max"):
        out(op, getattr(lib, "PMI_KVS_Get_" + op)(ctypes.byref(i)), i.value)
    elif op == "initialized":
        out(op, lib.PMI_Initialized(ctypes.byref(i)), i.value)
    elif op == "kvsname":
        b = ctypes.create_string_buffer(int(args[0]) if args else 256)
        rc = lib.PMI_KVS_Get_my_name(b, len(b))
        out(op, rc, b.value.decode())
    elif op == "put":
        out(op, lib.PMI_KVS_Put(args[0].encode(), args[1].encode(), args[2].encode()))
    elif op == "commit":
        out(op, lib.PMI_KVS_Commit(args[0].encode()))
    elif op == "get":
        b = ctypes.create_string_buffer(int(args[2]) if len(args) > 2 else 1024)
        rc = lib.PMI_KVS_Get(args[0].encode(), args[1].encode(), b, len(b))
        out(op, rc, b.value.decode() if rc == 0 else None)
    elif op == "clique_ranks":
        arr = (ctypes.c_int * 16)()
        rc = lib.PMI_Get_clique_ranks(arr, int(args[0]))
        out(op, rc, list(arr)[:int(args[0])] if rc == 0 else None)
    elif op == "barrier":
        out(op, lib.PMI_Barrier())
    elif op == "abort":
        out("abort-called", 0)
        lib.PMI_Abort(int(args[0]), args[1].encode())
        out("abort-returned", 0)
    elif op == "finalize":
        out(op, lib.PMI_Finalize())
"""

Handler = Callable[[str, dict[str, str]], str | None]
CLOSE = "<close>"       # a handler's answer: hang up instead of replying


class Server:
    """A PMI-1 server on one end of a socketpair: replies come from `handler`
    (request name, fields -> reply line, or None for no reply)."""

    def __init__(self, sock: socket.socket, handler: Handler) -> None:
        self.sock, self.handler = sock, handler
        self.requests: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        f = self.sock.makefile("rwb", buffering=0)
        for raw in f:
            line = raw.decode().rstrip("\n")
            self.requests.append(line)
            fields = dict(t.split("=", 1) for t in line.split(" ") if "=" in t)
            reply = self.handler(fields.get("cmd", ""), fields)
            if reply == CLOSE:
                self.sock.shutdown(socket.SHUT_RDWR)
                return
            if reply is not None:
                f.write(reply.encode() + b"\n")


def kvs_handler(size: int = 2, rank: int = 0, mapping: str | None = "(vector,(0,1,2))") -> Handler:
    """A well-behaved one-process view of a job: the barrier completes at once."""
    kvs: dict[str, str] = {} if mapping is None else {"PMI_process_mapping": mapping}

    def handle(cmd: str, f: dict[str, str]) -> str | None:
        if cmd == "init":
            return "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
        if cmd == "get_maxes":
            return "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024"
        if cmd == "get_my_kvsname":
            return "cmd=my_kvsname rc=0 kvsname=job-7"
        if cmd == "get_appnum":
            return "cmd=appnum rc=0 appnum=3"
        if cmd == "get_universe_size":
            return f"cmd=universe_size rc=0 size={size}"
        if cmd == "put":
            kvs[f["key"]] = f["value"]
            return "cmd=put_result rc=0"
        if cmd == "get":
            if f["key"] in kvs:
                return f"cmd=get_result rc=0 msg=success value={kvs[f['key']]}"
            return "cmd=get_result rc=1 msg=key_not_found"
        if cmd == "barrier_in":
            return "cmd=barrier_out rc=0"
        if cmd == "finalize":
            return "cmd=finalize_ack rc=0"
        return CLOSE    # abort: no reply; the process manager ends the job
    return handle


@pytest.fixture(scope="module")
def lib() -> Path:
    assert LIB.exists(), f"{LIB} missing: run make"
    return LIB


def run_client(lib: Path, handler: Handler, *ops: str, env: dict[str, str] | None = None,
               size: int = 2, rank: int = 0) -> tuple[list[list[object]], subprocess.CompletedProcess[str], Server]:
    ours, theirs = socket.socketpair()
    server = Server(ours, handler)
    e = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PMI_FD": str(theirs.fileno()),
         "PMI_RANK": str(rank), "PMI_SIZE": str(size)}
    e.update(env or {})
    try:
        p = subprocess.run([sys.executable, "-c", CLIENT, str(lib), *ops], env=e, pass_fds=(theirs.fileno(),),
                           capture_output=True, text=True, timeout=30)
    finally:
        theirs.close()
    ours.shutdown(socket.SHUT_RDWR)
    server.thread.join(5)
    ours.close()
    return [json.loads(l) for l in p.stdout.splitlines()], p, server


def results(out: list[list[object]]) -> dict[str, tuple[object, object]]:
    return {str(o[0]): (o[1], o[2]) for o in out}


def test_init_constants_and_finalize(lib: Path) -> None:
    out, p, srv = run_client(lib, kvs_handler(size=2), "initialized", "init", "initialized", "size", "rank",
                             "universe_size", "appnum", "kvsname", "name_length_max", "key_length_max",
                             "value_length_max", "finalize")
    r = results(out)
    assert p.returncode == 0, p.stderr
    assert r["init"] == (0, 0) and r["size"] == (0, 2) and r["rank"] == (0, 0)
    assert r["universe_size"] == (0, 2) and r["appnum"] == (0, 3) and r["kvsname"] == (0, "job-7")
    assert r["name_length_max"] == (0, 256) and r["key_length_max"] == (0, 64) and r["value_length_max"] == (0, 1024)
    assert r["finalize"] == (0, None) and out[0] == ["initialized", 0, 0] and out[2] == ["initialized", 0, 1]
    assert srv.requests[0] == "cmd=init pmi_version=1 pmi_subversion=1" and srv.requests[-1] == "cmd=finalize"


def test_put_commit_barrier_get(lib: Path) -> None:
    # Open MPI's encoded values carry '=', '/', '+' and space padding; spaces
    # and backslashes travel escaped and come back as they were.
    val = "cG1peC5=/+AAA  -"
    out, p, srv = run_client(lib, kvs_handler(), "init", "put|job-7|1-0-key0|" + val, "put|job-7|b|x\\y",
                             "commit|job-7", "barrier", "get|job-7|1-0-key0", "get|job-7|b",
                             "get|job-7|missing", "get|job-7|1-0-key0|4", "put|other|k|v", "get|other|k",
                             "put|job-7|bad key|v", "put|job-7|k|", "put|job-7|k|" + "v" * 1025, "finalize")
    assert p.returncode == 0, p.stderr
    got = [(o[0], o[1], o[2]) for o in out]
    assert got[1:8] == [("put", 0, None), ("put", 0, None), ("commit", 0, None), ("barrier", 0, None),
                        ("get", 0, val), ("get", 0, "x\\y"), ("get", 4, None)]       # 4: PMI_ERR_INVALID_KEY
    assert got[8] == ("get", 8, None)               # PMI_ERR_INVALID_LENGTH: buffer of 4
    assert got[9][1] == 3 and got[10][1] == 3       # PMI_ERR_INVALID_ARG: not our kvsname
    assert got[11][1] == 4 and got[12][1] == 6 and got[13][1] == 6
    assert "value=cG1peC5=/+AAA\\s\\s-" in " ".join(srv.requests)
    assert "put of key k" in p.stderr and "empty" in p.stderr and "longer than vallen_max" in p.stderr


def test_clique_from_mapping(lib: Path) -> None:
    # 5 ranks, blocks of 2 per node over nodes 0-1, repeated: node 0 has 0,1,4
    out, p, _ = run_client(lib, kvs_handler(size=5, mapping="(vector,(0,2,2))"), "init", "clique_size",
                           "clique_ranks|3", "clique_ranks|2", size=5, rank=4)
    r = [(o[0], o[1], o[2]) for o in out]
    assert r[1:] == [("clique_size", 0, 3), ("clique_ranks", 0, [0, 1, 4]), ("clique_ranks", 8, None)], p.stderr
    out, p, _ = run_client(lib, kvs_handler(size=4, mapping="(vector,(0,4,1))"), "init", "clique_ranks|1",
                           size=4, rank=2)
    assert out[1] == ["clique_ranks", 0, [2]]
    # No mapping published: the rank is alone on its node.
    out, p, _ = run_client(lib, kvs_handler(size=4, mapping=None), "init", "clique_size", size=4, rank=1)
    assert out[1] == ["clique_size", 0, 1]
    out, p, _ = run_client(lib, kvs_handler(size=4, mapping="(vector,(0,x,1))"), "init", "clique_size",
                           size=4, rank=1)
    assert out[1] == ["clique_size", 0, 1] and "PMI_process_mapping '(vector,(0,x,1))' is malformed" in p.stderr


def test_clique_from_host_mapping(lib: Path) -> None:
    """LATTICE_HOST_MAPPING (which ranks share a host) wins over the nodes of
    PMI_process_mapping, and is read without asking the server."""
    # 8 ranks on 4 nodes (XYZT), all on one host: the clique is every rank
    h = kvs_handler(size=8, mapping="(vector,(0,4,1),(0,4,1))")
    out, p, srv = run_client(lib, h, "init", "clique_size", "clique_ranks|8", size=8, rank=5,
                             env={"LATTICE_HOST_MAPPING": "(vector,(0,1,8))"})
    assert out[1:] == [["clique_size", 0, 8], ["clique_ranks", 0, list(range(8))]], p.stderr
    assert not any("PMI_process_mapping" in r for r in srv.requests), srv.requests
    # two hosts of 3 ranks each: rank 4 shares host 1 with 3 and 5
    out, p, _ = run_client(lib, kvs_handler(size=6), "init", "clique_ranks|3", size=6, rank=4,
                           env={"LATTICE_HOST_MAPPING": "(vector,(0,2,3))"})
    assert out[1] == ["clique_ranks", 0, [3, 4, 5]], p.stderr
    # no cap but the job's size: 2,048 ranks placed irregularly over 3 hosts, one block per rank
    host = [r * r % 3 for r in range(2048)]
    irregular = "(vector," + ",".join(f"({h},1,1)" for h in host) + ")"
    out, p, _ = run_client(lib, kvs_handler(size=2048), "init", "clique_size", size=2048, rank=5,
                           env={"LATTICE_HOST_MAPPING": irregular})
    assert out[1] == ["clique_size", 0, host.count(host[5])], p.stderr
    out, p, _ = run_client(lib, kvs_handler(size=4), "init", "clique_size", size=4, rank=1,
                           env={"LATTICE_HOST_MAPPING": "(vector"})
    assert out[1] == ["clique_size", 0, 1] and "LATTICE_HOST_MAPPING '(vector' is malformed" in p.stderr


def test_hydra_style_replies(lib: Path) -> None:
    """Hydra leaves rc out of maxes and answers universe size -1 (unknown)."""
    base = kvs_handler(size=3)

    def handle(cmd: str, f: dict[str, str]) -> str | None:
        if cmd == "get_maxes":
            return "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024"
        if cmd == "get_universe_size":
            return "cmd=universe_size size=-1"
        return base(cmd, f)
    out, p, _ = run_client(lib, handle, "init", "universe_size", size=3)
    assert out == [["init", 0, 0], ["universe_size", 0, 3]], p.stderr


def test_abort_sends_code_and_message_and_exits(lib: Path) -> None:
    out, p, srv = run_client(lib, kvs_handler(), "init", "abort|7|it went wrong")
    assert p.returncode == 7
    assert [o[0] for o in out] == ["init", "abort-called"]
    assert srv.requests[-1] == "cmd=abort exitcode=7 message=it\\ went\\ wrong"


@pytest.mark.parametrize("reply,why", [
    ("cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024", "expected cmd=response_to_init"),
    ("cmd=response_to_init rc=zero pmi_version=1 pmi_subversion=1", "its rc is not an integer"),
    ("cmd=response_to_init rc=0 pmi_version=", "a field has an empty value"),
    ("rc=0 cmd=response_to_init", "it does not start with cmd="),
    ("cmd=response_to_init rc=0 garbage", "a field is not key=value"),
    ("cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0", "pmi_version=2, not a number in 1..1"),
    ("cmd=response_to_init rc=-1 msg=go_away", "rc=-1 msg=go_away"),
    (None, "the PMI server closed the connection"),
])
def test_malformed_init_reply(lib: Path, reply: str | None, why: str) -> None:
    def handle(cmd: str, f: dict[str, str]) -> str | None:
        return CLOSE if reply is None else reply
    out, p, _ = run_client(lib, handle, "init", "initialized")
    assert out == [["init", -1, 0], ["initialized", 0, 0]]
    assert "lattice libpmi: " in p.stderr and why in p.stderr, p.stderr


def test_malformed_replies_after_init(lib: Path) -> None:
    base = kvs_handler()

    def handle(cmd: str, f: dict[str, str]) -> str | None:
        if cmd == "get":
            return "cmd=get_result rc=0 msg=success"            # found, but no value
        if cmd == "barrier_in":
            return "cmd=put_result rc=0"                        # the wrong reply
        if cmd == "put":
            return "cmd=put_result rc=oops"
        return base(cmd, f)
    out, p, _ = run_client(lib, handle, "init", "get|job-7|k", "barrier", "put|job-7|k|v")
    assert [o[1] for o in out] == [0, -1, -1, -1]
    assert "has rc=0 but no value" in p.stderr
    assert "is cmd=put_result, expected cmd=barrier_out" in p.stderr
    assert "its rc is not an integer" in p.stderr


@pytest.mark.parametrize("env,why", [
    ({"PMI_FD": ""}, "PMI_FD is not set"),
    ({"PMI_SIZE": "0"}, "PMI_SIZE=0 is not a number"),
    ({"PMI_RANK": "2"}, "PMI_RANK=2 is not a number in 0..1"),
])
def test_bad_environment(lib: Path, env: dict[str, str], why: str) -> None:
    out, p, srv = run_client(lib, kvs_handler(), "init", "size", env=env)
    assert out == [["init", -1, 0], ["size", 1, -7]]       # 1: PMI_ERR_INIT
    assert why in p.stderr and srv.requests == []


def test_calls_before_init(lib: Path) -> None:
    out, _, srv = run_client(lib, kvs_handler(), "size", "barrier", "put|job-7|k|v", "get|job-7|k", "finalize")
    assert [o[1] for o in out] == [1, 1, 1, 1, 0] and srv.requests == []
