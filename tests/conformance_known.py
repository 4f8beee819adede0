"""The differences from native that tests/e2e/test_t0800_conformance.py
expects, each with the exact line a kernel prints instead of the native
one and why.  docs/architecture.md "Differences from native" lists every
one of them (tests/unit/test_conformance_docs.py checks that it does)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Known:
    native: str     # the line the program prints natively
    got: str        # the line the kernel prints instead
    why: str


def known(why: str, *pairs: tuple[str, str]) -> list[Known]:
    return [Known(n, g, why) for n, g in pairs]


# Issue 14's conformance bugs, and those this test found, in both kernels.
BOTH = [
    *known("a second connect() of a socket connected through the I/O node returns 0, not EISCONN: ciod "
           "completes the connect with poll and SO_ERROR, so the kernel's socket is still connecting",
           ("connect again = -1 EISCONN", "connect again = 0")),
    *known("listen() of a shipped descriptor is EOPNOTSUPP even when it is not a socket (Linux: ENOTSOCK)",
           ("listen(a file) = -1 ENOTSOCK", "listen(a file) = -1 EOPNOTSUPP")),
    *known("/dev/fd/N of a shipped descriptor names the local placeholder (/dev/null): the path rule keeps "
           "/dev/fd on the node",
           ("stat(/dev/fd/N of s.dat) = 0 type=reg mode=0644 size=5 nlink=1",
            "stat(/dev/fd/N of s.dat) = 0 type=chr mode=0666 size=0 nlink=1")),
    *known("a shared writable mapping of an I/O-node file is ENODEV: the compute node holds a copy, which "
           "could not be kept in step with the file that other nodes and ciod change (compute/cnk/README.md)",
           ('mmap(O_RDWR, PROT_WRITE, MAP_SHARED) maps = 5 "vecto"', "mmap(O_RDWR, PROT_WRITE, MAP_SHARED) = MAP_FAILED ENODEV")),
    *known("ioctl of a shipped descriptor is ENOTTY, FIONREAD included",
           ("ioctl(s.dat, FIONREAD) = 0", "ioctl(s.dat, FIONREAD) = -1 ENOTTY")),
    *known("the client reads the socket address itself instead of answering EFAULT: the rank dies (stat "
           "buffers, paths, utimensat times and iovec arrays go through compute/shipc/usercopy.c)",
           ("connect(TCP socket, bad address) = -1 EFAULT", "connect(TCP socket, bad address) = killed by SIGSEGV")),
]

# by run (RUNS): what each kernel's line is instead of the native one
KNOWN: dict[str, list[Known]] = {
    "cnk": [
        *BOTH,
        *known("cnk runs one process: fork is unsupported (compute/cnk/README.md), as on Blue Gene; popen's "
               "posix_spawn cannot start its child either",
               ("fork, child _exit(7), waitpid = exit status 7", "fork, child _exit(7), waitpid = -1 ENOSYS"),
               ("popen(echo, r) reads = from-the-child, second line", "popen(echo, r) = NULL ENOMEM"),
               ("pclose = exit status 0", "pclose = not run")),
        *known("cnk runs at most a rank's cores' threads (2 here) and 2 for its MPI library, as CNK ran one thread "
               "per core: the next pthread_create is EAGAIN, said once on stderr (`lattice run --threads N` "
               "raises it)",
               ("pthread_create x8, all alive at once = 8 created",
                "pthread_create x8, all alive at once = 3 created, then EAGAIN")),
    ],
    "linux": [
        *BOTH,
    ],
}


KNOWN["cnk-socket"] = KNOWN["cnk"]
KNOWN["linux-socket"] = KNOWN["linux"]
