"""The wire protocol's numbers and layouts, generated from protocol/lattice/wire.h
by `python3 -m pluggen.pywire` at build time (make py-wire).  Do not edit:
change the header.  service/lattice/transport/wire.py builds on it."""
from __future__ import annotations

import struct

MAGIC = 0x5454414c
VERSION = 6
MAX_IO = 0x100000
MAX_PAYLOAD = 0x102000
MAX_PATH = 0x1000
MAX_FDS = 0x400
KEY_BYTES = 32
NONCE_BYTES = 32
MAC_BYTES = 32
MAX_PSET = 128
MAX_ARGS = 0x1000
MAX_IMAGE = 0x80000000
MAX_PPN = 0x1000
MAX_APPS = 64
CPU_LIMIT = 0x10000
PMI_KVSNAME_MAX = 0x100
PMI_KEY_MAX = 64
PMI_VAL_MAX = 0x400
PMI_LINE_MAX = 0x1000
REPLY = 0x8000
HF_RDV = 1
HF_PIPE_FIRST = 2
HF_PIPE_NEXT = 4
HF_ALL = 7
HELLO = 1
DP_SHARE = 2
MBOX_SHARE = 3
MBOX_RING = 4
CHALLENGE = 5
ERROR = 255
CTL_STATUS = 0x100
CTL_JOB = 0x101
CTL_KILL = 0x102
CTL_SHUTDOWN = 0x103
CTL_COUNTERS = 0x104
CTL_FENCE_OUT = 0x105
CTL_STDIN = 0x106
CTL_PMI_TREE = 0x107
CTL_NAME_OUT = 0x110
CTL_OUTPUT = 0x180
CTL_EXIT = 0x181
CTL_JOB_END = 0x182
CTL_FENCE = 0x183
CTL_ABORT = 0x184
CTL_STDIN_ACK = 0x185
CTL_TREE_FAIL = 0x186
CTL_JOB_FAIL = 0x187
CTL_NAME = 0x190
NODE_JOB = 0x200
NODE_IMAGE = 0x201
NODE_START = 0x202
NODE_KILL = 0x203
NODE_SHUTDOWN = 0x204
NODE_PMI_REPLY = 0x205
NODE_OUTPUT = 0x280
NODE_EXIT = 0x281
NODE_PMI = 0x282
SYS__BASE = 0x300
SYS_OPENAT = 0x300
SYS_CLOSE = 0x301
SYS_READ = 0x302
SYS_WRITE = 0x303
SYS_PREAD = 0x304
SYS_PWRITE = 0x305
SYS_LSEEK = 0x306
SYS_FSTATAT = 0x307
SYS_STATX = 0x308
SYS_FACCESSAT = 0x309
SYS_UNLINKAT = 0x30a
SYS_RENAMEAT = 0x30b
SYS_MKDIRAT = 0x30c
SYS_GETDENTS64 = 0x30d
SYS_READLINKAT = 0x30e
SYS_TRUNCATE = 0x30f
SYS_FTRUNCATE = 0x310
SYS_FSYNC = 0x311
SYS_FDATASYNC = 0x312
SYS_DUP = 0x313
SYS_FCNTL = 0x314
SYS_CHDIR = 0x315
SYS_FCHDIR = 0x316
SYS_GETCWD = 0x317
SYS_UMASK = 0x318
SYS_FCHMODAT = 0x319
SYS_FCHMOD = 0x31a
SYS_UTIMENSAT = 0x31b
SYS_STATFS = 0x31c
SYS_FSTATFS = 0x31d
SYS_SOCKET = 0x31e
SYS_CONNECT = 0x31f
SYS_BIND = 0x320
SYS_SENDMSG = 0x321
SYS_RECVMSG = 0x322
SYS_SHUTDOWN = 0x323
SYS_SETSOCKOPT = 0x324
SYS_GETSOCKOPT = 0x325
SYS_GETSOCKNAME = 0x326
SYS_GETPEERNAME = 0x327
SYS_POLL = 0x328
SYS_SEND_RDV = 0x329
SYS_RECV_RDV = 0x32a
SYS_LOCK = 0x32b
SYS_FLOCK = 0x32c
SYS_SYMLINKAT = 0x32d
SYS_LINKAT = 0x32e
SYS_FCHOWNAT = 0x32f
SYS_MKNODAT = 0x330
SYS_FALLOCATE = 0x331
SYS_OPENAT_STAT = 0x332
SYS__END = 0x333
PLUG_CALL = 0x400
MBOX_MAP = 0x7e0003fffffff
BULK_MAP = 60
MAX_SOCKADDR = 128
MAX_SOCKOPT = 0x400
ERR_WAIT = 0x10000
AT_FDCWD = -100
ROLE_CONTROL = 1
ROLE_NODE = 2
ROLE_PROC = 3
ROLE_PMI = 4
ROLE_TREE = 5
SEAL_UP = 0
SEAL_DOWN = 1
SEAL_LEN_BYTES = 4
SEAL_TAG_BYTES = 16
SEAL_MAX = 0x102010
DP_VM = 1
DP_SHM = 2
PIPE_DEPTH = 4
MBOX_SIZE = 0x4000
MBOX_REQ_SLOT = 0x1f80
MBOX_REP_SLOT = 0x2000
MBOX_REQ_MAX = 0x1f70
MBOX_REP_MAX = 0x1ff0
RDV_MAXSEG = 0x400
HIST_BUCKETS = 32
CTR_EAGER = 0
CTR_EAGER_BYTES = 1
CTR_RDV = 2
CTR_RDV_BYTES = 3
CTR_RDV_FAULT = 4
CTR_RDV_BUF_MAX = 5
CTR_COLL_OPEN_REQ = 6
CTR_COLL_OPEN_FS = 7
CTR_COLL_STAT_REQ = 8
CTR_COLL_STAT_FS = 9
CTR_COLL_READ_REQ = 10
CTR_COLL_READ_FS = 11
CTR_COLL_REVALIDATE = 12
CTR_COLL_INVALIDATE = 13
CTR_COLL_BYTES = 14
CTR_EAGER_MAX = 15
CTR_RDV_MIN = 16
CTR_COLLECTIVE = 17
CTR_SHM = 18
CTR_SHM_BYTES = 19
CTR_SHM_SHARES = 20
CTR_SHM_REFUSED = 21
CTR_PIPE_SERIES = 22
CTR_PIPE_CHUNKS = 23
CTR_PIPE_CANCELLED = 24
CTR_DATAPATH = 25
CTR_MBOX_SHARES = 26
CTR_MBOX_CALLS = 27
CTR_MBOX_RINGS = 28
CTR_MBOX_BAD = 29
CTR_SOCK_RDV = 30
CTR_SOCK_RDV_BYTES = 31
CTR_SOCK_SHM = 32
CTR_SOCK_SHM_BYTES = 33
CTR_OUT_MSGS = 34
CTR_EXITS_HELD = 35
CTR__END = 36
JOB_CNK = 1
JOB_TRACE = 2
JOB_VN = 4
JOB_PLACED = 8
JOB_CPUS = 16
JOB_STDIN = 32
JOB_TREE = 64
JOB_SANDBOX = 128
PROC_FS = 0xffff
JOB_FLAGS_ALL = 255
STDIN_ALL = 0xffffffff
STDIN_MAX = 0x10000
STDIN_WINDOW = 0x100000
STDIN_EOF = 1
PROGRESS_UNSET = -1
STDOUT = 1
STDERR = 2
EXIT_CODE = 1
EXIT_SIGNAL = 2
EXIT_LAUNCH = 3
EXIT_LOST = 4
FENCE_MORE = 1
NAME_PUBLISH = 1
NAME_UNPUBLISH = 2
NAME_LOOKUP = 3
HELLO_LABEL = b'lattice hello v2'
ACK_LABEL = b'lattice ack v2'
SEAL_LABEL = b'lattice seal v1'

# every struct lat_*: little-endian, no padding (wire.h's _Static_asserts)
STRUCTS: dict[str, struct.Struct] = {
    "lat_hdr": struct.Struct("<IBBHII"),
    "lat_sockname": struct.Struct("<II128s"),
    "lat_pollfd": struct.Struct("<ihh"),
    "lat_challenge": struct.Struct("<32s"),
    "lat_hello": struct.Struct("<IIQ32s32s"),
    "lat_hello_ack": struct.Struct("<iIII32s"),
    "lat_hello_proc": struct.Struct("<II"),
    "lat_datapath": struct.Struct("<IIII"),
    "lat_mbox": struct.Struct("<II14III14I8064s8192s"),
    "lat_rdv_seg": struct.Struct("<QQ"),
    "lat_counters_ext": struct.Struct("<IIII"),
    "lat_sysret": struct.Struct("<qiI"),
    "lat_sysreq": struct.Struct("<4q"),
    "lat_ctl_status": struct.Struct("<IIQ"),
    "lat_job": struct.Struct("<QIIIIIIII"),
    "lat_job_ext": struct.Struct("<IIII"),
    "lat_stdin": struct.Struct("<QII"),
    "lat_slot": struct.Struct("<IIII"),
    "lat_cpus": struct.Struct("<Ii"),
    "lat_kill": struct.Struct("<QiI"),
    "lat_output": struct.Struct("<II"),
    "lat_exit": struct.Struct("<QIIIi"),
    "lat_job_end": struct.Struct("<Q"),
    "lat_node_job": struct.Struct("<QQIIIIIIII"),
    "lat_node_app": struct.Struct("<QII"),
    "lat_pmi": struct.Struct("<II"),
    "lat_fence": struct.Struct("<QIIII"),
    "lat_pmi_tree": struct.Struct("<QII"),
    "lat_abort": struct.Struct("<QIi"),
    "lat_name": struct.Struct("<QIIiI"),
    "lat_timespec": struct.Struct("<qq"),
    "lat_stat": struct.Struct("<QQQIIIIQqqqqqqqqq"),
    "lat_statfs": struct.Struct("<qqQQQQQQqqq"),
    "lat_flock": struct.Struct("<hhiqq"),
}
FIELDS: dict[str, tuple[str, ...]] = {
    "lat_hdr": ('magic', 'version', 'flags', 'type', 'len', 'seq',),
    "lat_sockname": ('len', 'flags', 'addr',),
    "lat_pollfd": ('fd', 'events', 'revents',),
    "lat_challenge": ('nonce',),
    "lat_hello": ('role', 'node', 'job', 'nonce', 'mac',),
    "lat_hello_ack": ('err', 'max_io', 'pset', 'pset_size', 'proof',),
    "lat_hello_proc": ('pid', 'flags',),
    "lat_datapath": ('eager_max', 'rdv_min', 'flags', 'window',),
    "lat_mbox": ('req_seq', 'srv_spin', 'pad0', 'rep_seq', 'cli_wait', 'pad1', 'req', 'rep',),
    "lat_rdv_seg": ('addr', 'len',),
    "lat_counters_ext": ('nsys', 'nbuckets', 'nstats', 'pad',),
    "lat_sysret": ('ret', 'err', 'pad',),
    "lat_sysreq": ('a',),
    "lat_ctl_status": ('nodes_connected', 'pset_size', 'job',),
    "lat_job": ('job', 'uid', 'gid', 'ngroups', 'nargs', 'nenv', 'nranks', 'pset_size', 'flags',),
    "lat_job_ext": ('nslots', 'napps', 'ppn', 'stdin_rank',),
    "lat_stdin": ('job', 'bytes', 'flags',),
    "lat_slot": ('rank', 'node', 't', 'app',),
    "lat_cpus": ('ncpus', 'progress',),
    "lat_kill": ('job', 'sig', 'pad',),
    "lat_output": ('rank', 'stream',),
    "lat_exit": ('job', 'rank', 'node', 'how', 'value',),
    "lat_job_end": ('job',),
    "lat_node_job": ('job', 'image_size', 'rank', 'size', 'uid', 'gid', 'ngroups', 'nargs', 'nenv', 'flags',),
    "lat_node_app": ('image_size', 'nargs', 'pad',),
    "lat_pmi": ('rank', 'pad',),
    "lat_fence": ('job', 'epoch', 'nkv', 'flags', 'pad',),
    "lat_pmi_tree": ('job', 'nchildren', 'pad',),
    "lat_abort": ('job', 'rank', 'code',),
    "lat_name": ('job', 'rank', 'op', 'rc', 'pad',),
    "lat_timespec": ('sec', 'nsec',),
    "lat_stat": ('dev', 'ino', 'nlink', 'mode', 'uid', 'gid', 'pad', 'rdev', 'size', 'blksize', 'blocks', 'atime_sec', 'atime_nsec', 'mtime_sec', 'mtime_nsec', 'ctime_sec', 'ctime_nsec',),
    "lat_statfs": ('type', 'bsize', 'blocks', 'bfree', 'bavail', 'files', 'ffree', 'fsid', 'namelen', 'frsize', 'flags',),
    "lat_flock": ('type', 'whence', 'pid', 'start', 'len',),
}
# each enum's names, in order (without LAT_)
ENUMS: dict[str, tuple[str, ...]] = {
    "lat_type": (
        'HELLO', 'DP_SHARE', 'MBOX_SHARE', 'MBOX_RING', 'CHALLENGE', 'ERROR', 'CTL_STATUS',
        'CTL_JOB', 'CTL_KILL', 'CTL_SHUTDOWN', 'CTL_COUNTERS', 'CTL_FENCE_OUT', 'CTL_STDIN',
        'CTL_PMI_TREE', 'CTL_NAME_OUT', 'CTL_OUTPUT', 'CTL_EXIT', 'CTL_JOB_END', 'CTL_FENCE',
        'CTL_ABORT', 'CTL_STDIN_ACK', 'CTL_TREE_FAIL', 'CTL_JOB_FAIL', 'CTL_NAME', 'NODE_JOB',
        'NODE_IMAGE', 'NODE_START', 'NODE_KILL', 'NODE_SHUTDOWN', 'NODE_PMI_REPLY', 'NODE_OUTPUT',
        'NODE_EXIT', 'NODE_PMI', 'SYS__BASE', 'SYS_OPENAT', 'SYS_CLOSE', 'SYS_READ', 'SYS_WRITE',
        'SYS_PREAD', 'SYS_PWRITE', 'SYS_LSEEK', 'SYS_FSTATAT', 'SYS_STATX', 'SYS_FACCESSAT',
        'SYS_UNLINKAT', 'SYS_RENAMEAT', 'SYS_MKDIRAT', 'SYS_GETDENTS64', 'SYS_READLINKAT',
        'SYS_TRUNCATE', 'SYS_FTRUNCATE', 'SYS_FSYNC', 'SYS_FDATASYNC', 'SYS_DUP', 'SYS_FCNTL',
        'SYS_CHDIR', 'SYS_FCHDIR', 'SYS_GETCWD', 'SYS_UMASK', 'SYS_FCHMODAT', 'SYS_FCHMOD',
        'SYS_UTIMENSAT', 'SYS_STATFS', 'SYS_FSTATFS', 'SYS_SOCKET', 'SYS_CONNECT', 'SYS_BIND',
        'SYS_SENDMSG', 'SYS_RECVMSG', 'SYS_SHUTDOWN', 'SYS_SETSOCKOPT', 'SYS_GETSOCKOPT',
        'SYS_GETSOCKNAME', 'SYS_GETPEERNAME', 'SYS_POLL', 'SYS_SEND_RDV', 'SYS_RECV_RDV',
        'SYS_LOCK', 'SYS_FLOCK', 'SYS_SYMLINKAT', 'SYS_LINKAT', 'SYS_FCHOWNAT', 'SYS_MKNODAT',
        'SYS_FALLOCATE', 'SYS_OPENAT_STAT', 'SYS__END', 'PLUG_CALL',
    ),
    "lat_role": (
        'ROLE_CONTROL', 'ROLE_NODE', 'ROLE_PROC', 'ROLE_PMI', 'ROLE_TREE',
    ),
    "lat_ctr": (
        'CTR_EAGER', 'CTR_EAGER_BYTES', 'CTR_RDV', 'CTR_RDV_BYTES', 'CTR_RDV_FAULT',
        'CTR_RDV_BUF_MAX', 'CTR_COLL_OPEN_REQ', 'CTR_COLL_OPEN_FS', 'CTR_COLL_STAT_REQ',
        'CTR_COLL_STAT_FS', 'CTR_COLL_READ_REQ', 'CTR_COLL_READ_FS', 'CTR_COLL_REVALIDATE',
        'CTR_COLL_INVALIDATE', 'CTR_COLL_BYTES', 'CTR_EAGER_MAX', 'CTR_RDV_MIN', 'CTR_COLLECTIVE',
        'CTR_SHM', 'CTR_SHM_BYTES', 'CTR_SHM_SHARES', 'CTR_SHM_REFUSED', 'CTR_PIPE_SERIES',
        'CTR_PIPE_CHUNKS', 'CTR_PIPE_CANCELLED', 'CTR_DATAPATH', 'CTR_MBOX_SHARES',
        'CTR_MBOX_CALLS', 'CTR_MBOX_RINGS', 'CTR_MBOX_BAD', 'CTR_SOCK_RDV', 'CTR_SOCK_RDV_BYTES',
        'CTR_SOCK_SHM', 'CTR_SOCK_SHM_BYTES', 'CTR_OUT_MSGS', 'CTR_EXITS_HELD', 'CTR__END',
    ),
    "lat_job_flags": (
        'JOB_CNK', 'JOB_TRACE', 'JOB_VN', 'JOB_PLACED', 'JOB_CPUS', 'JOB_STDIN', 'JOB_TREE',
        'JOB_SANDBOX',
    ),
    "lat_stream": (
        'STDOUT', 'STDERR',
    ),
    "lat_exit_how": (
        'EXIT_CODE', 'EXIT_SIGNAL', 'EXIT_LAUNCH', 'EXIT_LOST',
    ),
    "lat_name_op": (
        'NAME_PUBLISH', 'NAME_UNPUBLISH', 'NAME_LOOKUP',
    ),
}

__all__ = [
    'MAGIC', 'VERSION', 'MAX_IO', 'MAX_PAYLOAD', 'MAX_PATH', 'MAX_FDS', 'KEY_BYTES', 'NONCE_BYTES',
    'MAC_BYTES', 'MAX_PSET', 'MAX_ARGS', 'MAX_IMAGE', 'MAX_PPN', 'MAX_APPS', 'CPU_LIMIT',
    'PMI_KVSNAME_MAX', 'PMI_KEY_MAX', 'PMI_VAL_MAX', 'PMI_LINE_MAX', 'REPLY', 'HF_RDV',
    'HF_PIPE_FIRST', 'HF_PIPE_NEXT', 'HF_ALL', 'HELLO', 'DP_SHARE', 'MBOX_SHARE', 'MBOX_RING',
    'CHALLENGE', 'ERROR', 'CTL_STATUS', 'CTL_JOB', 'CTL_KILL', 'CTL_SHUTDOWN', 'CTL_COUNTERS',
    'CTL_FENCE_OUT', 'CTL_STDIN', 'CTL_PMI_TREE', 'CTL_NAME_OUT', 'CTL_OUTPUT', 'CTL_EXIT',
    'CTL_JOB_END', 'CTL_FENCE', 'CTL_ABORT', 'CTL_STDIN_ACK', 'CTL_TREE_FAIL', 'CTL_JOB_FAIL',
    'CTL_NAME', 'NODE_JOB', 'NODE_IMAGE', 'NODE_START', 'NODE_KILL', 'NODE_SHUTDOWN',
    'NODE_PMI_REPLY', 'NODE_OUTPUT', 'NODE_EXIT', 'NODE_PMI', 'SYS__BASE', 'SYS_OPENAT',
    'SYS_CLOSE', 'SYS_READ', 'SYS_WRITE', 'SYS_PREAD', 'SYS_PWRITE', 'SYS_LSEEK', 'SYS_FSTATAT',
    'SYS_STATX', 'SYS_FACCESSAT', 'SYS_UNLINKAT', 'SYS_RENAMEAT', 'SYS_MKDIRAT', 'SYS_GETDENTS64',
    'SYS_READLINKAT', 'SYS_TRUNCATE', 'SYS_FTRUNCATE', 'SYS_FSYNC', 'SYS_FDATASYNC', 'SYS_DUP',
    'SYS_FCNTL', 'SYS_CHDIR', 'SYS_FCHDIR', 'SYS_GETCWD', 'SYS_UMASK', 'SYS_FCHMODAT', 'SYS_FCHMOD',
    'SYS_UTIMENSAT', 'SYS_STATFS', 'SYS_FSTATFS', 'SYS_SOCKET', 'SYS_CONNECT', 'SYS_BIND',
    'SYS_SENDMSG', 'SYS_RECVMSG', 'SYS_SHUTDOWN', 'SYS_SETSOCKOPT', 'SYS_GETSOCKOPT',
    'SYS_GETSOCKNAME', 'SYS_GETPEERNAME', 'SYS_POLL', 'SYS_SEND_RDV', 'SYS_RECV_RDV', 'SYS_LOCK',
    'SYS_FLOCK', 'SYS_SYMLINKAT', 'SYS_LINKAT', 'SYS_FCHOWNAT', 'SYS_MKNODAT', 'SYS_FALLOCATE',
    'SYS_OPENAT_STAT', 'SYS__END', 'PLUG_CALL', 'MBOX_MAP', 'BULK_MAP', 'MAX_SOCKADDR',
    'MAX_SOCKOPT', 'ERR_WAIT', 'AT_FDCWD', 'ROLE_CONTROL', 'ROLE_NODE', 'ROLE_PROC', 'ROLE_PMI',
    'ROLE_TREE', 'SEAL_UP', 'SEAL_DOWN', 'SEAL_LEN_BYTES', 'SEAL_TAG_BYTES', 'SEAL_MAX', 'DP_VM',
    'DP_SHM', 'PIPE_DEPTH', 'MBOX_SIZE', 'MBOX_REQ_SLOT', 'MBOX_REP_SLOT', 'MBOX_REQ_MAX',
    'MBOX_REP_MAX', 'RDV_MAXSEG', 'HIST_BUCKETS', 'CTR_EAGER', 'CTR_EAGER_BYTES', 'CTR_RDV',
    'CTR_RDV_BYTES', 'CTR_RDV_FAULT', 'CTR_RDV_BUF_MAX', 'CTR_COLL_OPEN_REQ', 'CTR_COLL_OPEN_FS',
    'CTR_COLL_STAT_REQ', 'CTR_COLL_STAT_FS', 'CTR_COLL_READ_REQ', 'CTR_COLL_READ_FS',
    'CTR_COLL_REVALIDATE', 'CTR_COLL_INVALIDATE', 'CTR_COLL_BYTES', 'CTR_EAGER_MAX', 'CTR_RDV_MIN',
    'CTR_COLLECTIVE', 'CTR_SHM', 'CTR_SHM_BYTES', 'CTR_SHM_SHARES', 'CTR_SHM_REFUSED',
    'CTR_PIPE_SERIES', 'CTR_PIPE_CHUNKS', 'CTR_PIPE_CANCELLED', 'CTR_DATAPATH', 'CTR_MBOX_SHARES',
    'CTR_MBOX_CALLS', 'CTR_MBOX_RINGS', 'CTR_MBOX_BAD', 'CTR_SOCK_RDV', 'CTR_SOCK_RDV_BYTES',
    'CTR_SOCK_SHM', 'CTR_SOCK_SHM_BYTES', 'CTR_OUT_MSGS', 'CTR_EXITS_HELD', 'CTR__END', 'JOB_CNK',
    'JOB_TRACE', 'JOB_VN', 'JOB_PLACED', 'JOB_CPUS', 'JOB_STDIN', 'JOB_TREE', 'JOB_SANDBOX',
    'PROC_FS', 'JOB_FLAGS_ALL', 'STDIN_ALL', 'STDIN_MAX', 'STDIN_WINDOW', 'STDIN_EOF',
    'PROGRESS_UNSET', 'STDOUT', 'STDERR', 'EXIT_CODE', 'EXIT_SIGNAL', 'EXIT_LAUNCH', 'EXIT_LOST',
    'FENCE_MORE', 'NAME_PUBLISH', 'NAME_UNPUBLISH', 'NAME_LOOKUP', 'HELLO_LABEL', 'ACK_LABEL',
    'SEAL_LABEL', 'STRUCTS', 'FIELDS', 'ENUMS',
]
