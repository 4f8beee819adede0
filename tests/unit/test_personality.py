"""The personality API: LATTICE_PERSONALITY, the C library, `lattice personality`.

The C library (compute/libpersonality, header compute/include/lattice/
personality.h) is built here from source into a probe program.  The probe
parses the environment and prints the canonical text with
lattice_personality_print(), or the errno name; the tests compare that with
what the service node prints for the same node, feed it malformed variables,
and check that the compute node supervisor (build/bin/cnode) hands its job
exactly the variable the service node's model describes.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from lattice.nodes import boot
from lattice.state import db, personality
from lattice.transport import wire
from lattice.state import machine as model
from lattice.state.blocks import Block
from lattice.state.machine import Machine

from cli_inprocess import home, lattice

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
SRC = ROOT / "compute" / "libpersonality" / "personality.c"
INCLUDE = ROOT / "compute" / "include"

PROBE = r"""
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <lattice/personality.h>

int main(int argc, char **argv)
{
    struct lattice_personality p;
    memset(&p, 0xa5, sizeof p);
    if (lattice_personality(&p) != 0) {
        printf("ERR %s\n", errno == ENOENT ? "ENOENT" : errno == EINVAL ? "EINVAL" : strerror(errno));
        return 1;
    }
    if (argc > 1 && !strcmp(argv[1], "fields")) {   /* the struct, field by field */
        printf("%s|%s|%u|%u|%u|%u|%u|%u|%u|%u|%u|%s|%" PRIu64 "|%u|%s|%u\n", p.block, p.location, p.x, p.y,
               p.z, p.torus_x, p.torus_y, p.torus_z, p.pset, p.pset_size, p.rank_in_pset, p.ionode, p.memory,
               p.cores, p.mode, p.t);
        return 0;
    }
    int n = lattice_personality_print(stdout, &p);
    fflush(stdout);
    fprintf(stderr, "%d\n", n);
    return n > 0 ? 0 : 2;
}
"""

KEYS = ["block", "location", "coords", "torus", "pset", "pset_size", "rank_in_pset", "ionode", "memory",
        "cores", "mode", "t"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pers")
    (d / "probe.c").write_text(PROBE)
    exe = d / "probe"
    cc = subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
                         f"-I{INCLUDE}", "-o", str(exe), str(d / "probe.c"), str(SRC)],
                        capture_output=True, text=True)
    assert cc.returncode == 0, cc.stderr
    return exe


def run_probe(probe: Path, value: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_PERSONALITY"}
    if value is not None:
        env["LATTICE_PERSONALITY"] = value
    return subprocess.run([str(probe), *args], env=env, capture_output=True, text=True, timeout=10)


def good(**change: object) -> str:
    fields: dict[str, object] = dict(block="R00", location="R00-M0-N00-C:J05", coords="1,0,1", torus="2,2,4",
                                     pset=0, pset_size=8, rank_in_pset=5, ionode="R00-M0-N00-I:J00",
                                     memory=1 << 30, cores=2, mode="co", t=0)
    fields.update(change)
    return ";".join(f"{k}={v}" for k, v in fields.items())


MACHINES = [
    (Machine(), (0, 0, 0), (2, 2, 4)),
    (Machine(shape=(4, 2, 2), pset_size=4, memory=3 << 30, cores=4), (0, 0, 1), (4, 2, 1)),
    (Machine(shape=(1, 1, 2), pset_size=2, memory=512 << 20), (0, 0, 0), (1, 1, 2)),
    (Machine(shape=(8, 8, 2), pset_size=128, cores=1), (0, 0, 0), (8, 8, 2)),
]


# --- the C API ------------------------------------------------------------------

@pytest.mark.parametrize("m, corner, shape", MACHINES, ids=["default", "4x2x2", "1x1x2", "128-pset"])
def test_c_api_prints_what_the_service_node_prints(probe: Path, m: Machine, corner: tuple[int, int, int],
                                                   shape: tuple[int, int, int]) -> None:
    """For every node of a block: parse the env the node gets, print it in C,
    and get the service node's canonical text back, byte for byte."""
    b = Block("B-" + "x" * 62, corner, shape, "Free", False, None)   # the longest block name
    for i in b.nodes(m):
        p = personality.of_node(m, b.name, i)
        r = run_probe(probe, p.env())
        assert r.returncode == 0, (p.env(), r.stdout)
        assert r.stdout == p.text()
        assert int(r.stderr) == len(p.text().encode()), "print returns the bytes written"
        # and the struct really holds the values (not just text passed through)
        f = run_probe(probe, p.env(), "fields").stdout.strip().split("|")
        assert f == [p.block, p.location, *map(str, p.coords), *map(str, m.shape), str(p.pset),
                     str(m.pset_size), str(i % m.pset_size), m.io_location(m.pset_of(i)), str(m.memory),
                     str(m.cores), "co", "0"]


def test_canonical_text_format(probe: Path) -> None:
    r = run_probe(probe, good())
    lines = r.stdout.splitlines()
    assert [l.split(": ", 1)[0] for l in lines] == KEYS
    assert dict(l.split(": ", 1) for l in lines) == {
        "block": "R00", "location": "R00-M0-N00-C:J05", "coords": "1,0,1", "torus": "2x2x4", "pset": "0",
        "pset_size": "8", "rank_in_pset": "5", "ionode": "R00-M0-N00-I:J00", "memory": str(1 << 30),
        "cores": "2", "mode": "co", "t": "0"}


def test_not_run_by_lattice_is_enoent(probe: Path) -> None:
    r = run_probe(probe, None)
    assert (r.returncode, r.stdout) == (1, "ERR ENOENT\n")


@pytest.mark.parametrize("value", [
    "",                                                   # set but empty
    good().replace(";cores=2", ""),                       # a field missing
    good() + ";pset=1",                                   # a field twice
    good(memory="12x"), good(memory="-1"), good(memory=""), good(memory=0),
    good(memory="99999999999999999999999"),               # overflows 64 bits
    good(cores=0), good(cores="4294967296"),              # beyond 32 bits
    good(pset_size=0),
    good(coords="1,0"), good(coords="1,0,1,2"), good(coords="2,0,0"),   # x outside the 2x2x4 torus
    good(torus="2,2,0"), good(rank_in_pset=8),            # rank in pset beyond the pset size
    good(t=1),                                            # co mode runs one process per node: t=0
    good(mode="vn", t=2), good(mode="vn", t="-1"), good(mode="vn", t=""), good(t="1x"),   # t below cores
    good() + ";t=0",                                      # t twice
    good(mode="xx"), good(location="R00 M0"), good(location="x" * 32),  # a space; too long for the struct
    good(block="b" * 80),
    good() + ";;", "=1;" + good(), good().replace("mode=co", "mode"),
    "garbage",
])
def test_malformed_is_einval(probe: Path, value: str) -> None:
    r = run_probe(probe, value)
    assert (r.returncode, r.stdout) == (1, "ERR EINVAL\n"), value


@pytest.mark.parametrize("value", [
    good() + ";future_field=something",                   # a newer node's extra field is skipped
    "future=1;" + good(),
    good() + ";",                                         # a trailing separator
    good(mode="vn"),
    good(block="b" * 79, location="l" * 31, memory=(1 << 63) - 1, cores=4096),  # largest that fit
])
def test_accepted_variants(probe: Path, value: str) -> None:
    r = run_probe(probe, value)
    assert r.returncode == 0, (value, r.stdout)
    assert r.stdout.splitlines()[-2] == f"mode: {'vn' if 'mode=vn' in value else 'co'}"


@pytest.mark.parametrize("value, t", [
    (good().replace(";t=0", ""), "0"),                    # the format before t: still read, core 0
    (good(mode="vn", t=1), "1"),
    ("t=1;" + good(mode="vn").replace(";t=0", ""), "1"),  # by key, wherever it stands
    (good(mode="vn", cores=64, t=63), "63"),
])
def test_t_is_optional_and_read(probe: Path, value: str, t: str) -> None:
    r = run_probe(probe, value)
    assert r.returncode == 0, (value, r.stdout)
    assert r.stdout.splitlines()[-1] == f"t: {t}"
    assert run_probe(probe, value, "fields").stdout.strip().split("|")[-1] == t


def test_every_core_of_a_vn_node(probe: Path) -> None:
    """Each process of a virtual node mode node reads its own core; C and
    the service node print the same text."""
    m = Machine(shape=(2, 1, 2), pset_size=2, cores=4)
    for t in range(4):
        p = personality.of_node(m, "V", 3, "vn", t)
        assert p.env().endswith(f";memory={m.memory // 4};cores=4;mode=vn;t={t}"), "a quarter of the memory"
        r = run_probe(probe, p.env())
        assert r.returncode == 0 and r.stdout == p.text()


def test_print_to_a_closed_stream_fails(probe: Path) -> None:
    """lattice_personality_print reports an output error (here: stdout closed)."""
    r = subprocess.run(f"exec {probe} >&-", shell=True, env={**os.environ, "LATTICE_PERSONALITY": good()},
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "-1", (r.returncode, r.stderr)


# --- the node hands the job the variable ------------------------------------------

@pytest.fixture
def fake_ciod(tmp_path: Path) -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(tmp_path / "ciod.sock"))
    s.listen(4)
    s.settimeout(20)
    yield s
    s.close()


def _recv(c: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = c.recv(n - len(buf))
        assert chunk, "connection closed"
        buf += chunk
    return buf


def _frame(c: socket.socket) -> tuple[int, bytes]:
    _, _, _, typ, ln, _ = wire.HDR.unpack(_recv(c, 16))
    return typ, _recv(c, ln)


def _send(c: socket.socket, typ: int, payload: bytes) -> None:
    c.sendall(wire.HDR.pack(wire.MAGIC, wire.VERSION, 0, typ, len(payload), 0) + payload)


def _hello(lst: socket.socket, key: bytes) -> socket.socket:
    """The handshake, as ciod does it (docs/protocol.md section 3)."""
    c, _ = lst.accept()
    c.settimeout(20)
    nonce = os.urandom(32)
    _send(c, wire.CHALLENGE, nonce)
    typ, body = _frame(c)
    assert typ == wire.HELLO
    r, n, job, cnonce, mac = wire.HELLO_MSG.unpack(body[:80])
    assert mac == wire.hello_mac(key, nonce, cnonce, r, n, job, body[80:])
    dp = struct.pack("<IIII", 1 << 20, 0, 0, 1 << 20) if r == 3 else b""
    _send(c, 0x8001, wire.ack_payload(key, nonce, cnonce, 0, 1 << 20, 0, 2, dp))
    return c


def test_cnode_exports_the_model_s_variable(fake_ciod: socket.socket, tmp_path: Path) -> None:
    """boot.personality() writes the node's file; the job cnode starts from it
    sees LATTICE_PERSONALITY == the model's env() (and no key in it)."""
    for p in ("bin/cnode", "lib/libcnclient.so"):
        assert (BUILD / p).exists(), f"{BUILD / p} missing: run make"
    m = Machine(shape=(2, 2, 2), pset_size=2, memory=768 << 20, cores=3)
    b = Block("P", (0, 0, 0), (2, 2, 2), "Booting", False, None)
    key, node = bytes(range(32)), 5
    data = boot.personality(m, b, key, node, f"unix:{tmp_path / 'ciod.sock'}")
    data["hide"] = []
    pfile = tmp_path / "p.json"
    pfile.write_text(json.dumps(data))
    prog = tmp_path / "show"
    (tmp_path / "show.c").write_text(
        '#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\n#include <sys/syscall.h>\n'
        'int main(void) { const char *v = getenv("LATTICE_PERSONALITY"); if (!v) return 3;\n'
        '  syscall(SYS_write, 1, v, strlen(v)); return 0; }\n')
    subprocess.run(["gcc", "-O2", "-o", str(prog), str(tmp_path / "show.c")], check=True)
    cnode = subprocess.Popen([str(BUILD / "bin/cnode"), "--personality", str(pfile),
                              "--client", str(BUILD / "lib/libcnclient.so")], stderr=subprocess.DEVNULL)
    try:
        nodec = _hello(fake_ciod, key)
        image = prog.read_bytes()
        env = [b"LATTICE_PERSONALITY=forged"]      # the job cannot bring its own
        strings = b"show\0" + b"".join(e + b"\0" for e in env)
        _send(nodec, 0x0200, struct.pack("<QQIIIIIIII", 9, len(image), 1, 2, os.getuid(), os.getgid(), 0, 1,
                                         len(env), 0) + strings)
        _send(nodec, 0x0201, image)
        _send(nodec, 0x0202, struct.pack("<Q", 9))
        pmi = _hello(fake_ciod, key)                   # its own PMI connection, opened first: unused here
        proc = _hello(fake_ciod, key)                  # its PROC connection: nothing is shipped here
        out = b""
        while True:
            typ, body = _frame(nodec)
            if typ == 0x0280:
                out += body[8:]
            else:
                assert typ == 0x0281
                break
        proc.close()
        pmi.close()
        job, rank, _, how, value = struct.unpack_from("<QIIIi", body)
        assert (job, how, value) == (9, 1, 0), body
        assert body[24:].decode() == "kernel=linux", "a Linux-mode job's report line"
        # t is optional (default 0): a co job's node may leave it out
        want = personality.of_node(m, "P", node).env()
        assert out.decode() in (want, want.removesuffix(";t=0")), out

        assert key.hex() not in out.decode()
    finally:
        cnode.kill()
        cnode.wait()


# --- `lattice personality` ------------------------------------------------------

def test_cli_matches_the_c_api_for_every_node(probe: Path, tmp_path: Path) -> None:
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x2x4", "--pset-size", "4", "--memory", "2G", "--cores", "4")[0] == 0
        assert lattice("block", "create", "L", "--shape", "2x2x2")[0] == 0
        assert lattice("block", "create", "U", "--shape", "2x2x2")[0] == 0
        m = model.load()
        assert m.cores == 4
        con = db.connect()
        for name in ("L", "U"):
            b = Block.from_row(con.execute("SELECT * FROM blocks WHERE name = ?", (name,)).fetchone())
            for i in b.nodes(m):
                status, text, _ = lattice("personality", m.compute_location(i))
                assert status == 0
                status, env, _ = lattice("personality", m.compute_location(i), "--env")
                assert status == 0
                r = run_probe(probe, env.strip())
                assert r.stdout == text, (m.compute_location(i), env)
                fields = dict(l.split(": ", 1) for l in text.splitlines())
                assert fields["block"] == name and fields["cores"] == "4" and fields["memory"] == str(2 << 30)
                assert fields["rank_in_pset"] == str(i % 4) and fields["coords"] == ",".join(map(str, m.coord(i)))
                # what boot would write for the node agrees with what is printed
                data = boot.personality(m, b, bytes(32), i, "unix:/x")
                assert (data["cores"], data["memory"], data["node"], data["pset"]) == \
                    (4, 2 << 30, i % 4, m.pset_of(i))
        # locations are matched without regard to case
        assert lattice("personality", m.compute_location(3).lower())[1] == lattice("personality",
                                                                                    m.compute_location(3))[1]


def test_cli_errors(tmp_path: Path) -> None:
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "1x1x4", "--pset-size", "2")[0] == 0
        assert lattice("block", "create", "A", "--shape", "1x1x2")[0] == 0
        status, out, err = lattice("personality", "R00-M0-N00-C:J03")
        assert status == 1 and out == "" and "in no block" in err
        status, _, err = lattice("personality", "R00-M0-N00-I:J00")
        assert status == 1 and "I/O node" in err
        status, _, err = lattice("personality", "R00-M0-N00-C:J04")
        assert status == 1 and "no compute node" in err
        status, out, _ = lattice("personality", "R00-M0-N00-C:J01")
        assert status == 0 and "block: A\n" in out and "cores: 2\n" in out    # the default, as on BG/L
        assert out.endswith("mode: co\nt: 0\n")
        status, out, _ = lattice("personality", "R00-M0-N00-C:J01", "--mode", "vn", "--t", "1")
        assert status == 0 and out.endswith(f"memory: {1 << 28}\ncores: 2\nmode: vn\nt: 1\n")   # half of the default 512 MiB
        status, out, _ = lattice("personality", "R00-M0-N00-C:J01", "--mode", "vn", "--t", "1", "--env")
        assert status == 0 and out.endswith(";mode=vn;t=1\n")
        status, _, err = lattice("personality", "R00-M0-N00-C:J01", "--t", "1")
        assert status == 1 and "t must be 0 in coprocessor mode" in err
        status, _, err = lattice("personality", "R00-M0-N00-C:J01", "--mode", "vn", "--t", "2")
        assert status == 1 and "0..1" in err
        status, _, err = lattice("personality", "R00-M0-N00-C:J01", "--mode", "xx")
        assert status == 2 and "invalid choice" in err
    with home(tmp_path / "n"):
        status, _, err = lattice("init", "--cores", "0")
        assert status == 1 and "cores" in err
