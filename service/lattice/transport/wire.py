"""The wire protocol as the service node speaks it.

Every number and struct layout of protocol/lattice/wire.h (the one
definition; docs/protocol.md is the prose) comes from lattice.transport.wire_h, which
the build generates from the header (`make py-wire`);
tests/unit/test_service_wire.py checks it against a C compiler's view of
the header.  This module names the layouts the service node uses and builds
and parses payloads.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

try:
    from lattice.transport.wire_h import *  # noqa: F403  (every LAT_* number, without LAT_)
    from lattice.transport.wire_h import ENUMS, STRUCTS, SYS__BASE, SYS__END
except ModuleNotFoundError as e:    # a checkout that was never built
    raise ImportError("lattice/wire_h.py is generated from protocol/lattice/wire.h: run `make` "
                      "(or `make py-wire`) in the repository") from e

# shipped calls, in wire order from SYS_BASE: the names `lattice counters` prints
SYS_BASE, SYS_END = SYS__BASE, SYS__END
SYS_NAMES = tuple(n.removeprefix("SYS_").lower() for n in ENUMS["lat_type"]
                  if n.startswith("SYS_") and not n.startswith("SYS__"))
# I/O node counters (LAT_CTL_COUNTERS reply), in wire order
CTR_NAMES = tuple(n.removeprefix("CTR_").lower() for n in ENUMS["lat_ctr"] if n != "CTR__END")

# the layouts the service node packs and unpacks (little-endian, no padding)
HDR = STRUCTS["lat_hdr"]                 # magic, version, flags, type, len, seq
CHALLENGE_MSG = STRUCTS["lat_challenge"]  # ciod's nonce
HELLO_MSG = STRUCTS["lat_hello"]         # role, node, job, nonce, mac
HELLO_FIELDS = struct.Struct(HELLO_MSG.format[:4])      # role, node, job: what the mac covers
HELLO_PROC = STRUCTS["lat_hello_proc"]   # pid, flags (after a PROC hello)
HELLO_ACK = STRUCTS["lat_hello_ack"]     # err, max_io, pset, pset_size, proof
ACK_FIELDS = struct.Struct(HELLO_ACK.format[:5])        # err, max_io, pset, pset_size: what the proof covers
SYSRET = STRUCTS["lat_sysret"]           # ret, err, pad
CTL_STATUS_MSG = STRUCTS["lat_ctl_status"]  # nodes_connected, pset_size, job
JOB = STRUCTS["lat_job"]                 # job, uid, gid, ngroups, nargs, nenv, nranks, pset_size, flags
KILL = STRUCTS["lat_kill"]               # sig, pad
OUTPUT = STRUCTS["lat_output"]           # rank, stream
EXIT = STRUCTS["lat_exit"]               # job, rank, node, how, value
JOB_END = STRUCTS["lat_job_end"]         # job
JOB_EXT = STRUCTS["lat_job_ext"]         # nslots, napps, ppn, stdin_rank
SLOT = STRUCTS["lat_slot"]               # rank, node, t, app
CPUS = STRUCTS["lat_cpus"]               # ncpus, progress (then the CPUs, after every slot's lat_cpus)
FENCE = STRUCTS["lat_fence"]             # job, epoch, nkv, flags, pad
PMI_TREE = STRUCTS["lat_pmi_tree"]       # job, nchildren, pad
ABORT = STRUCTS["lat_abort"]             # job, rank, code
NAME = STRUCTS["lat_name"]               # job, rank, op, rc, pad
STDIN = STRUCTS["lat_stdin"]             # job, bytes, flags (LAT_CTL_STDIN and its ack)
DATAPATH = STRUCTS["lat_datapath"]       # eager_max, rdv_min, flags, window (after HELLO_ACK of a PROC)
COUNTERS_EXT = STRUCTS["lat_counters_ext"]  # nsys, nbuckets, nstats, pad (in the LAT_CTL_COUNTERS reply)
SIZES = {name: s.size for name, s in STRUCTS.items()}


def header(typ: int, length: int, seq: int, flags: int = 0) -> bytes:
    """A struct lat_hdr."""
    return HDR.pack(MAGIC, VERSION, flags, typ, length, seq)


def _mac(key: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes, data: bytes) -> bytes:
    if len(key) != KEY_BYTES or len(server_nonce) != NONCE_BYTES or len(client_nonce) != NONCE_BYTES:
        raise ValueError("a block key and nonces are 32 bytes")
    return hmac.new(key, label + server_nonce + client_nonce + data, hashlib.sha256).digest()


def hello_mac(key: bytes, server_nonce: bytes, client_nonce: bytes, role: int, node: int, job: int,
              proc: bytes = b"") -> bytes:
    """lat_hello.mac: over the label, both nonces, role, node, job and a
    lat_hello_proc that follows (proc, packed)."""
    return _mac(key, HELLO_LABEL, server_nonce, client_nonce, HELLO_FIELDS.pack(role, node, job) + proc)


def ack_proof(key: bytes, server_nonce: bytes, client_nonce: bytes, fields: bytes, datapath: bytes = b"") -> bytes:
    """lat_hello_ack.proof: over the label, both nonces, the ack's fields
    (ACK_FIELDS, packed) and a lat_datapath that follows."""
    return _mac(key, ACK_LABEL, server_nonce, client_nonce, fields + datapath)


def hello_payload(key: bytes, server_nonce: bytes, role: int, node: int = 0, job: int = 0,
                  proc: bytes = b"") -> tuple[bytes, bytes]:
    """A hello answering the challenge server_nonce: (payload, our nonce)."""
    nonce = secrets.token_bytes(NONCE_BYTES)
    mac = hello_mac(key, server_nonce, nonce, role, node, job, proc)
    return HELLO_MSG.pack(role, node, job, nonce, mac) + proc, nonce


def ack_payload(key: bytes, server_nonce: bytes, client_nonce: bytes, err: int, max_io: int, pset: int,
                pset_size: int, datapath: bytes = b"") -> bytes:
    """An ack with its proof (what ciod sends; for tests that play ciod)."""
    fields = ACK_FIELDS.pack(err, max_io, pset, pset_size)
    return fields + ack_proof(key, server_nonce, client_nonce, fields, datapath) + datapath


def ack_ok(key: bytes, server_nonce: bytes, client_nonce: bytes, body: bytes) -> bool:
    """Whether an ack (and a lat_datapath after it) carries ciod's proof, in constant time."""
    fields, proof, datapath = body[:ACK_FIELDS.size], body[ACK_FIELDS.size:HELLO_ACK.size], body[HELLO_ACK.size:]
    return len(proof) == MAC_BYTES and hmac.compare_digest(
        proof, ack_proof(key, server_nonce, client_nonce, fields, datapath))


class SealError(ValueError):
    """A sealed frame that is not authentic (altered, replayed, reordered or
    injected on the way), or that cannot be a frame of this link."""


def seal_keys(key: bytes, server_nonce: bytes, client_nonce: bytes, role: int, node: int = 0,
              job: int = 0) -> tuple[bytes, bytes]:
    """The session keys of a link between hosts (docs/protocol.md 3.3), (up,
    down): HKDF-SHA256 (RFC 5869) of the block key, salted with both
    handshake nonces, one per direction."""
    if len(key) != KEY_BYTES or len(server_nonce) != NONCE_BYTES or len(client_nonce) != NONCE_BYTES:
        raise ValueError("a block key and nonces are 32 bytes")
    prk = hmac.new(server_nonce + client_nonce, key, hashlib.sha256).digest()
    info = SEAL_LABEL + struct.pack("<IIQ", role, node, job)
    return tuple(hmac.new(prk, info + bytes([d, 1]), hashlib.sha256).digest()  # type: ignore[return-value]
                 for d in (SEAL_UP, SEAL_DOWN))


class Sealer:
    """Both directions of a sealed link: AES-256-GCM, the nonce each way a
    frame counter that never travels, the frame's length authenticated."""

    def __init__(self, tx_key: bytes, rx_key: bytes) -> None:
        # imported here: only a link between hosts pays for it
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        self._tx, self._rx = AESGCM(tx_key), AESGCM(rx_key)
        self.tx_n = self.rx_n = 0

    @staticmethod
    def _nonce(n: int) -> bytes:
        return struct.pack("<IQ", 0, n)

    def seal(self, plain: bytes) -> bytes:
        """One frame (a header and its payload) as it travels."""
        if not HDR.size <= len(plain) <= SEAL_MAX:
            raise ValueError(f"a sealed frame holds {HDR.size} to {SEAL_MAX} bytes, not {len(plain)}")
        lenbuf = struct.pack("<I", len(plain))
        out = lenbuf + self._tx.encrypt(self._nonce(self.tx_n), plain, lenbuf)
        self.tx_n += 1
        return out

    def open(self, buf: bytes | bytearray, at: int = 0) -> tuple[bytes, int] | None:
        """The first frame of buf from offset at opened: (plain bytes, bytes
        of buf it took), None if it is not all there yet; SealError if not authentic."""
        if len(buf) - at < SEAL_LEN_BYTES:
            return None
        (length,) = struct.unpack_from("<I", buf, at)
        if not HDR.size <= length <= SEAL_MAX:
            raise SealError(f"sealed frame {self.rx_n} announces {length} bytes: not this link's")
        end = at + SEAL_LEN_BYTES + length + SEAL_TAG_BYTES
        if len(buf) < end:
            return None
        from cryptography.exceptions import InvalidTag
        n, self.rx_n = self.rx_n, self.rx_n + 1
        try:
            plain = self._rx.decrypt(self._nonce(n), bytes(buf[at + SEAL_LEN_BYTES:end]),
                                     bytes(buf[at:at + SEAL_LEN_BYTES]))
        except InvalidTag:
            raise SealError(f"sealed frame {n} of {length} bytes failed authentication (altered, replayed, "
                            "reordered or injected on the way)") from None
        return plain, end - at


def cstring(s: str) -> bytes:
    """A string as the job message carries it: its bytes as the OS gave them
    (an environment value that is not UTF-8 comes back as it was), NUL-terminated."""
    return s.encode(errors="surrogateescape") + b"\0"


def job_payload(job: int, uid: int, gid: int, groups: list[int], ranks: list[int], nranks: int,
                exe: str, cwd: str, argv: list[str], env: list[str], flags: int = 0) -> bytes:
    """LAT_CTL_JOB payload: struct lat_job, ranks, groups, then the strings."""
    head = JOB.pack(job, uid, gid, len(groups), len(argv), len(env), nranks, len(ranks), flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    strings = b"".join(cstring(s) for s in [exe, cwd, *argv, *env])
    return head + tail + strings


def placed_job_payload(job: int, uid: int, gid: int, groups: list[int], ranks: list[int], nranks: int,
                       cwd: str, env: list[str], flags: int, ppn: int,
                       slots: list[tuple[int, int, int, int]], apps: list[tuple[str, list[str]]],
                       mapping: str, cpus: list[tuple[tuple[int, ...], int]] | None = None,
                       stdin_rank: int | None = None) -> bytes:
    """LAT_CTL_JOB payload of a placed job (flag JOB_PLACED): ranks[node] is
    the rank of each pset-local node's process 0 (-1 idle), slots are this
    pset's (rank, node, t, app), apps are (exe, argv) in application order;
    cpus (flag JOB_CPUS) gives each slot's (CPUs, progress), in slot order;
    stdin_rank (flag JOB_STDIN) the rank that reads the job's input, or
    STDIN_ALL."""
    exe0, argv0 = apps[0]
    flags |= JOB_PLACED | (JOB_CPUS if cpus is not None else 0) | (JOB_STDIN if stdin_rank is not None else 0)
    head = JOB.pack(job, uid, gid, len(groups), len(argv0), len(env), nranks, len(ranks), flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    tail += JOB_EXT.pack(len(slots), len(apps), ppn, stdin_rank or 0) + b"".join(SLOT.pack(*s) for s in slots)
    tail += struct.pack(f"<{len(apps)}I", *(len(a[1]) for a in apps))
    if cpus is not None:
        tail += b"".join(CPUS.pack(len(c), progress) for c, progress in cpus)
        every = [cpu for c, _ in cpus for cpu in c]
        tail += struct.pack(f"<{len(every)}I", *every)
    strs = [exe0, cwd, *argv0, *env, mapping]
    for exe, argv in apps[1:]:
        strs += [exe, *argv]
    return head + tail + b"".join(cstring(s) for s in strs)


def pmi_tree_payload(job: int, child_psets: list[int], parent: str) -> bytes:
    """LAT_CTL_PMI_TREE: the psets below an I/O node in the job's PMI fence
    tree and the address of the one above ("" : the service node)."""
    return (PMI_TREE.pack(job, len(child_psets), 0) + struct.pack(f"<{len(child_psets)}I", *child_psets)
            + cstring(parent))


def fence_messages(job: int, epoch: int, kvs: dict[str, str]) -> list[bytes]:
    """LAT_CTL_FENCE_OUT payloads carrying kvs, split to fit LAT_MAX_PAYLOAD."""
    out: list[bytes] = []
    chunk: list[bytes] = []
    size = 0
    for k, v in kvs.items():
        pair = k.encode() + b"\0" + v.encode() + b"\0"
        if chunk and size + len(pair) > MAX_PAYLOAD - FENCE.size:
            out.append(FENCE.pack(job, epoch, len(chunk), FENCE_MORE, 0) + b"".join(chunk))
            chunk, size = [], 0
        chunk.append(pair)
        size += len(pair)
    out.append(FENCE.pack(job, epoch, len(chunk), 0, 0) + b"".join(chunk))
    return out


def parse_kvs(body: bytes, nkv: int) -> list[tuple[str, str]]:
    """The nkv key/value string pairs after a lat_fence; ValueError if malformed."""
    parts = body.split(b"\0")
    if len(parts) != 2 * nkv + 1 or parts[-1] != b"":
        raise ValueError(f"fence announces {nkv} pairs, carries {(len(parts) - 1) / 2}")
    pairs = [(parts[2 * i].decode(), parts[2 * i + 1].decode()) for i in range(nkv)]
    for k, v in pairs:
        if not k or len(k) > PMI_KEY_MAX or len(v) > 2 * PMI_VAL_MAX:
            raise ValueError(f"fence key {k[:80]!r} or its value out of bounds")
    return pairs
