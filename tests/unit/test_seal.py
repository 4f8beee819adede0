"""Sealed frames (docs/protocol.md 3.3), the frame layer alone: the C
implementation (protocol/peer/seal.c, which ciod and cnode use) and the
service node's (lattice.transport.wire.seal_keys, Sealer) both reproduce the shared
vectors in seal_vectors.json (made with the `cryptography` package's own
HKDF and AESGCM), open each other's frames, and refuse a frame that was
flipped, replayed, reordered, cut or given another length."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest

from lattice.transport import wire

ROOT = Path(__file__).resolve().parents[2]
VECTORS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "seal_vectors.json").read_text())["cases"]


class Harness:
    def __init__(self, binary: Path) -> None:
        self.p = subprocess.Popen([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, *words: object) -> list[str]:
        assert self.p.stdin and self.p.stdout
        self.p.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.p.stdin.flush()
        return self.p.stdout.readline().split()


@pytest.fixture(scope="module")
def c_seal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    d = tmp_path_factory.mktemp("seal")
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-I", str(ROOT / "protocol"),
                    "-o", str(d / "seal"), str(ROOT / "tests/unit/seal_harness.c"),
                    str(ROOT / "protocol/peer/seal.c"), "-lcrypto"], check=True)
    h = Harness(d / "seal")
    yield h
    assert h.p.stdin
    h.p.stdin.close()
    h.p.wait(10)


def flip(frame: bytes, at: int, bit: int = 0x01) -> bytes:
    return frame[:at] + bytes([frame[at] ^ bit]) + frame[at + 1:]


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"role{v['role']}")
def test_both_derive_the_vector_keys(v: dict[str, Any], c_seal: Harness) -> None:
    up, down = wire.seal_keys(bytes.fromhex(v["key"]), bytes.fromhex(v["server_nonce"]),
                              bytes.fromhex(v["client_nonce"]), v["role"], v["node"], v["job"])
    assert (up.hex(), down.hex()) == (v["up"], v["down"])
    assert c_seal.ask("derive", v["key"], v["server_nonce"], v["client_nonce"], v["role"], v["node"],
                      v["job"]) == [v["up"], v["down"]]
    # every input counts: another nonce, role, node or job gives other keys
    other = wire.seal_keys(bytes.fromhex(v["key"]), bytes.fromhex(v["server_nonce"]),
                           bytes.fromhex(v["client_nonce"]), v["role"], v["node"], v["job"] + 1)
    assert up not in other and down not in other and up != down


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"role{v['role']}")
def test_both_seal_the_vector_frames_and_open_them(v: dict[str, Any], c_seal: Harness) -> None:
    py = wire.Sealer(bytes.fromhex(v["up"]), bytes.fromhex(v["up"]))
    frames = v["frames_up"]
    for f in frames:
        assert py.seal(bytes.fromhex(f["plain"])).hex() == f["sealed"]
        assert c_seal.ask("seal", v["up"], f["n"], f["plain"]) == [f["sealed"]]
    # C opens the stream in order; so does Python
    assert c_seal.ask("open", v["up"], *(f["sealed"] for f in frames)) == [f["plain"] for f in frames]
    buf = bytes.fromhex("".join(f["sealed"] for f in frames))
    for f in frames:
        opened = py.open(buf)
        assert opened is not None and opened[0].hex() == f["plain"]
        buf = buf[opened[1]:]
    assert buf == b""


@pytest.mark.parametrize("impl", ["c", "python"])
def test_a_frame_altered_replayed_reordered_or_cut_is_refused(impl: str, c_seal: Harness) -> None:
    v = VECTORS[2]
    f0, f1, f2 = (bytes.fromhex(f["sealed"]) for f in v["frames_up"])
    # each attack: the frames as they arrive, and which of them must fail
    attacks = {
        "bit flipped in the ciphertext": ([flip(f0, 20)], 0),
        "bit flipped in the tag": ([flip(f0, len(f0) - 1)], 0),
        "length made shorter": ([flip(f1, 0, 0x02)], 0),
        "replayed": ([f0, f1, f1], 2),
        "the first again": ([f0, f0], 1),
        "reordered": ([f1, f0], 0),
        "one dropped": ([f0, f2], 1),
        "cut short, length fixed": ([(len(f1) - 5 - 4 - 16).to_bytes(4, "little") + f1[4:-5]], 0),
        "sealed with the other direction's key": ([wire.Sealer(bytes.fromhex(v["down"]), b"\0" * 32).seal(
            bytes.fromhex(v["frames_up"][0]["plain"]))], 0),
    }
    for what, (frames, bad) in attacks.items():
        if impl == "c":
            got = c_seal.ask("open", v["up"], *(f.hex() for f in frames))
            assert got == [v["frames_up"][i]["plain"] for i in range(bad)] + ["FAIL"], what
        else:
            py = wire.Sealer(b"\0" * 32, bytes.fromhex(v["up"]))
            for f in frames[:bad]:
                assert py.open(f) is not None, what
            with pytest.raises(wire.SealError, match="failed authentication"):
                py.open(frames[bad])


def test_lengths_out_of_bounds_are_refused_before_reading() -> None:
    py = wire.Sealer(b"\0" * 32, b"\1" * 32)
    for n in (0, wire.HDR.size - 1, wire.SEAL_MAX + 1, 0xFFFFFFFF):
        with pytest.raises(wire.SealError, match="not this link's"):
            py.open(n.to_bytes(4, "little"))
    assert py.open((wire.HDR.size).to_bytes(4, "little")) is None      # a frame's start: wait for the rest
    with pytest.raises(ValueError):
        py.seal(b"short")
