"""Writes tests/unit/seal_vectors.json, the sealed-frame vectors that both
implementations are checked against (tests/unit/test_seal.py), with the
`cryptography` package's own HKDF and AESGCM: independent of protocol/peer/
seal.c and of lattice.transport.wire.  Run from the repository root:

    .venv/bin/python tests/unit/make_seal_vectors.py
"""
from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

LABEL = b"lattice seal v1"                      # LAT_SEAL_LABEL
HEADER = struct.Struct("<IBBHII")              # struct lat_hdr
MAGIC, VERSION = 0x5454414C, 6


def fixed(seed: str) -> bytes:
    """32 bytes that are the same on every run."""
    return hashlib.sha256(seed.encode()).digest()


def case(i: int, role: int, node: int, job: int) -> dict[str, Any]:
    key, sn, cn = fixed(f"key{i}"), fixed(f"sn{i}"), fixed(f"cn{i}")
    info = LABEL + struct.pack("<IIQ", role, node, job)
    up, down = (HKDF(hashes.SHA256(), 32, sn + cn, info + bytes([d])).derive(key) for d in (0, 1))
    frames = []
    for n, payload in enumerate([b"", b"hello sealed world", bytes(range(256)) * 5]):
        plain = HEADER.pack(MAGIC, VERSION, 0, 0x0101 + n, len(payload), n + 1) + payload
        lenbuf = struct.pack("<I", len(plain))
        sealed = lenbuf + AESGCM(up).encrypt(struct.pack("<IQ", 0, n), plain, lenbuf)
        frames.append({"n": n, "plain": plain.hex(), "sealed": sealed.hex()})
    return {"key": key.hex(), "server_nonce": sn.hex(), "client_nonce": cn.hex(), "role": role, "node": node,
            "job": job, "up": up.hex(), "down": down.hex(), "frames_up": frames}


def main() -> None:
    cases = [case(i, *c) for i, c in enumerate([(1, 0, 0), (2, 5, 0), (3, 7 | 2 << 16, 0x123456789), (5, 3, 42)])]
    about = ("docs/protocol.md 3.3: HKDF-SHA256 session keys and AES-256-GCM sealed frames; made with the "
             "cryptography package's HKDF and AESGCM, independent of both implementations under test")
    with open("tests/unit/seal_vectors.json", "w") as f:
        json.dump({"about": about, "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
