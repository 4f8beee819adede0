"""The wire protocol as the service node speaks it.

A mirror of protocol/lattice/wire.h (the one definition; docs/protocol.md is
the prose).  tests/unit/test_service_wire.py checks every number here against
the header, so the two cannot drift apart.
"""
from __future__ import annotations

import struct

MAGIC = 0x5454414C
VERSION = 1
REPLY = 0x8000

MAX_IO = 1 << 20
MAX_PAYLOAD = MAX_IO + 8192
KEY_BYTES = 32
MAX_PSET = 128

# message types
HELLO = 0x0001
ERROR = 0x00FF
CTL_STATUS = 0x0100
CTL_JOB = 0x0101
CTL_KILL = 0x0102
CTL_SHUTDOWN = 0x0103
CTL_COUNTERS = 0x0104
CTL_OUTPUT = 0x0180
CTL_EXIT = 0x0181
CTL_JOB_END = 0x0182

ROLE_CONTROL = 1

# shipped calls, in wire order from LAT_SYS__BASE: the names `lattice counters` prints
SYS_BASE = 0x0300
SYS_NAMES = (
    "openat", "close", "read", "write", "pread", "pwrite", "lseek", "fstatat", "statx",
    "faccessat", "unlinkat", "renameat", "mkdirat", "getdents64", "readlinkat", "truncate",
    "ftruncate", "fsync", "fdatasync", "dup", "fcntl", "chdir", "fchdir", "getcwd", "umask",
    "fchmodat", "fchmod", "utimensat", "statfs", "fstatfs",
)
SYS_END = SYS_BASE + len(SYS_NAMES)

# job flags (lat_job.flags, passed on in lat_node_job.flags)
JOB_CNK = 1              # run under the compute node kernel, not Linux mode
JOB_TRACE = 2            # cnk --trace; needs JOB_CNK
JOB_FLAGS_ALL = JOB_CNK | JOB_TRACE

STDOUT, STDERR = 1, 2
EXIT_CODE, EXIT_SIGNAL, EXIT_LAUNCH, EXIT_LOST = 1, 2, 3, 4

# struct layouts (little-endian, no padding)
HDR = struct.Struct("<IHHII")            # magic, version, type, len, seq
HELLO_MSG = struct.Struct("<IIQ32s")     # role, node, job, key
HELLO_ACK = struct.Struct("<iIII")       # err, max_io, pset, pset_size
SYSRET = struct.Struct("<qiI")           # ret, err, pad
CTL_STATUS_MSG = struct.Struct("<IIQ")   # nodes_connected, pset_size, job
JOB = struct.Struct("<QIIIIIIII")        # job, uid, gid, ngroups, nargs, nenv, nranks, pset_size, flags
KILL = struct.Struct("<iI")              # sig, pad
OUTPUT = struct.Struct("<II")            # rank, stream
EXIT = struct.Struct("<QIIIi")           # job, rank, node, how, value
JOB_END = struct.Struct("<Q")            # job

SIZES = {
    "lat_hdr": HDR.size, "lat_hello": HELLO_MSG.size, "lat_hello_ack": HELLO_ACK.size,
    "lat_sysret": SYSRET.size, "lat_ctl_status": CTL_STATUS_MSG.size, "lat_job": JOB.size,
    "lat_kill": KILL.size, "lat_output": OUTPUT.size, "lat_exit": EXIT.size,
    "lat_job_end": JOB_END.size,
}


def job_payload(job: int, uid: int, gid: int, groups: list[int], ranks: list[int], nranks: int,
                exe: str, cwd: str, argv: list[str], env: list[str], flags: int = 0) -> bytes:
    """LAT_CTL_JOB payload: struct lat_job, ranks, groups, then the strings."""
    head = JOB.pack(job, uid, gid, len(groups), len(argv), len(env), nranks, len(ranks), flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    strings = b"".join(s.encode() + b"\0" for s in [exe, cwd, *argv, *env])
    return head + tail + strings
