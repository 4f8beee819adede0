"""The wire protocol as the service node speaks it.

A mirror of protocol/lattice/wire.h (the one definition; docs/protocol.md is
the prose).  tests/unit/test_service_wire.py checks every number here against
the header, so the two cannot drift apart.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct

MAGIC = 0x5454414C
VERSION = 2              # 2: challenge-response hello, seq checked (docs/protocol.md 3)
REPLY = 0x8000

MAX_IO = 1 << 20
MAX_PAYLOAD = MAX_IO + 8192
KEY_BYTES = 32           # the block key: never on the wire
NONCE_BYTES = 32
MAC_BYTES = 32           # HMAC-SHA256
MAX_PSET = 128
MAX_PPN = 64              # processes per compute node
MAX_APPS = 64             # MPMD applications per job
CPU_LIMIT = 65536         # CPU numbers (OS indexes) are below this
PROGRESS_UNSET = -1       # lat_cpus.progress: add no MPIR_CVAR_ASYNC_PROGRESS
PMI_KVSNAME_MAX = 256
PMI_KEY_MAX = 64
PMI_VAL_MAX = 1024
PMI_LINE_MAX = 4096

# message types
HELLO = 0x0001
CHALLENGE = 0x0005       # one-way ciod->peer, first on every connection: a fresh nonce
ERROR = 0x00FF
CTL_STATUS = 0x0100
CTL_JOB = 0x0101
CTL_KILL = 0x0102
CTL_SHUTDOWN = 0x0103
CTL_COUNTERS = 0x0104
CTL_FENCE_OUT = 0x0105   # one-way sn->ciod: a fence is complete, with what it published
CTL_OUTPUT = 0x0180
CTL_EXIT = 0x0181
CTL_JOB_END = 0x0182
CTL_FENCE = 0x0183       # one-way ciod->sn: every rank of the pset entered the fence, with its puts
CTL_ABORT = 0x0184       # one-way ciod->sn: a rank called PMI abort

ROLE_CONTROL = 1

PLUG_CALL = 0x0400       # compute process -> ciod: a call to a plug-in (docs/plugins.md)

# shipped calls, in wire order from LAT_SYS__BASE: the names `lattice counters` prints
SYS_BASE = 0x0300
SYS_NAMES = (
    "openat", "close", "read", "write", "pread", "pwrite", "lseek", "fstatat", "statx",
    "faccessat", "unlinkat", "renameat", "mkdirat", "getdents64", "readlinkat", "truncate",
    "ftruncate", "fsync", "fdatasync", "dup", "fcntl", "chdir", "fchdir", "getcwd", "umask",
    "fchmodat", "fchmod", "utimensat", "statfs", "fstatfs",
    # sockets (protocol.md 6.1)
    "socket", "connect", "bind", "sendmsg", "recvmsg", "shutdown", "setsockopt", "getsockopt",
    "getsockname", "getpeername", "poll", "send_rdv", "recv_rdv",
)
SYS_END = SYS_BASE + len(SYS_NAMES)

# job flags (lat_job.flags, passed on in lat_node_job.flags)
JOB_CNK = 1              # run under the compute node kernel, not Linux mode
JOB_TRACE = 2            # cnk --trace; needs JOB_CNK
JOB_VN = 4               # virtual node mode (personality mode=vn)
JOB_PLACED = 8           # the job carries slots and applications (lat_job_ext)
JOB_CPUS = 16            # each slot's CPUs (lat_cpus); needs JOB_PLACED
JOB_FLAGS_ALL = JOB_CNK | JOB_TRACE | JOB_VN | JOB_PLACED | JOB_CPUS
FENCE_MORE = 1           # lat_fence.flags: more messages of this fence follow

# data path (lat_datapath) and I/O node counters (LAT_CTL_COUNTERS reply)
DP_VM = 1                # ciod reaches the compute process's memory: rendezvous moves data once
DP_SHM = 2               # ciod maps memory the process shares (LAT_DP_SHARE): one copy
HIST_BUCKETS = 32        # latency histogram: bucket b counts calls of [2^b, 2^(b+1)) ns
CTR_NAMES = (
    "eager", "eager_bytes", "rdv", "rdv_bytes", "rdv_fault", "rdv_buf_max",
    "coll_open_req", "coll_open_fs", "coll_stat_req", "coll_stat_fs", "coll_read_req", "coll_read_fs",
    "coll_revalidate", "coll_invalidate", "coll_bytes",
    "eager_max", "rdv_min", "collective",
    "shm", "shm_bytes", "shm_shares", "shm_refused", "pipe_series", "pipe_chunks", "pipe_cancelled", "datapath",
    "mbox_shares", "mbox_calls", "mbox_rings", "mbox_bad",
    "sock_rdv", "sock_rdv_bytes", "sock_shm", "sock_shm_bytes",
)
CTR__END = len(CTR_NAMES)

STDOUT, STDERR = 1, 2
EXIT_CODE, EXIT_SIGNAL, EXIT_LAUNCH, EXIT_LOST = 1, 2, 3, 4

# struct layouts (little-endian, no padding)
HDR = struct.Struct("<IHHII")            # magic, version, type, len, seq
CHALLENGE_MSG = struct.Struct("<32s")    # ciod's nonce
HELLO_FIELDS = struct.Struct("<IIQ")     # role, node, job: what lat_hello starts with
HELLO_MSG = struct.Struct("<IIQ32s32s")  # role, node, job, nonce, mac
HELLO_PROC = struct.Struct("<II")        # pid, flags (after a PROC hello)
ACK_FIELDS = struct.Struct("<iIII")      # err, max_io, pset, pset_size: what lat_hello_ack starts with
HELLO_ACK = struct.Struct("<iIII32s")    # err, max_io, pset, pset_size, proof
SYSRET = struct.Struct("<qiI")           # ret, err, pad
CTL_STATUS_MSG = struct.Struct("<IIQ")   # nodes_connected, pset_size, job
JOB = struct.Struct("<QIIIIIIII")        # job, uid, gid, ngroups, nargs, nenv, nranks, pset_size, flags
KILL = struct.Struct("<iI")              # sig, pad
OUTPUT = struct.Struct("<II")            # rank, stream
EXIT = struct.Struct("<QIIIi")           # job, rank, node, how, value
JOB_END = struct.Struct("<Q")            # job
JOB_EXT = struct.Struct("<IIII")         # nslots, napps, ppn, pad
SLOT = struct.Struct("<IIII")            # rank, node, t, app
CPUS = struct.Struct("<Ii")              # ncpus, progress (then the CPUs, after every slot's lat_cpus)
FENCE = struct.Struct("<QIIII")          # job, epoch, nkv, flags, pad
ABORT = struct.Struct("<QIi")            # job, rank, code
DATAPATH = struct.Struct("<IIII")        # eager_max, rdv_min, flags, window (after HELLO_ACK of a PROC)
COUNTERS_EXT = struct.Struct("<IIII")    # nsys, nbuckets, nstats, pad (in the LAT_CTL_COUNTERS reply)

SIZES = {
    "lat_hdr": HDR.size, "lat_challenge": CHALLENGE_MSG.size, "lat_hello_proc": HELLO_PROC.size,
    "lat_hello": HELLO_MSG.size, "lat_hello_ack": HELLO_ACK.size,
    "lat_sysret": SYSRET.size, "lat_ctl_status": CTL_STATUS_MSG.size, "lat_job": JOB.size,
    "lat_kill": KILL.size, "lat_output": OUTPUT.size, "lat_exit": EXIT.size,
    "lat_job_end": JOB_END.size, "lat_job_ext": JOB_EXT.size, "lat_slot": SLOT.size, "lat_cpus": CPUS.size,
    "lat_fence": FENCE.size, "lat_abort": ABORT.size, "lat_datapath": DATAPATH.size,
    "lat_counters_ext": COUNTERS_EXT.size,
}

# the handshake's MACs (lattice/hello_mac.h): labels without their NUL
HELLO_LABEL = b"lattice hello v2"
ACK_LABEL = b"lattice ack v2"


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


def job_payload(job: int, uid: int, gid: int, groups: list[int], ranks: list[int], nranks: int,
                exe: str, cwd: str, argv: list[str], env: list[str], flags: int = 0) -> bytes:
    """LAT_CTL_JOB payload: struct lat_job, ranks, groups, then the strings."""
    head = JOB.pack(job, uid, gid, len(groups), len(argv), len(env), nranks, len(ranks), flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    strings = b"".join(s.encode() + b"\0" for s in [exe, cwd, *argv, *env])
    return head + tail + strings


def placed_job_payload(job: int, uid: int, gid: int, groups: list[int], ranks: list[int], nranks: int,
                       cwd: str, env: list[str], flags: int, ppn: int,
                       slots: list[tuple[int, int, int, int]], apps: list[tuple[str, list[str]]],
                       mapping: str, cpus: list[tuple[tuple[int, ...], int]] | None = None) -> bytes:
    """LAT_CTL_JOB payload of a placed job (flag JOB_PLACED): ranks[node] is
    the rank of each pset-local node's process 0 (-1 idle), slots are this
    pset's (rank, node, t, app), apps are (exe, argv) in application order;
    cpus (flag JOB_CPUS) gives each slot's (CPUs, progress), in slot order."""
    exe0, argv0 = apps[0]
    flags |= JOB_PLACED | (JOB_CPUS if cpus is not None else 0)
    head = JOB.pack(job, uid, gid, len(groups), len(argv0), len(env), nranks, len(ranks), flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    tail += JOB_EXT.pack(len(slots), len(apps), ppn, 0) + b"".join(SLOT.pack(*s) for s in slots)
    tail += struct.pack(f"<{len(apps)}I", *(len(a[1]) for a in apps))
    if cpus is not None:
        tail += b"".join(CPUS.pack(len(c), progress) for c, progress in cpus)
        every = [cpu for c, _ in cpus for cpu in c]
        tail += struct.pack(f"<{len(every)}I", *every)
    strs = [exe0, cwd, *argv0, *env, mapping]
    for exe, argv in apps[1:]:
        strs += [exe, *argv]
    return head + tail + b"".join(s.encode() + b"\0" for s in strs)


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
