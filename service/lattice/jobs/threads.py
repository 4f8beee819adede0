"""A cnk job's thread limit (`lattice run --threads N`, or the job's own
LATTICE_THREADS): how many threads each rank may run, the main one
included, instead of its cores; an MPI process has 2 more for its library
(compute/cnk/thread.c).  cnk reads it from the job's environment.

Bounds: 1 to MAX (cnk's table of threads), and no more than the rank's
memory can give the smallest stacks: every thread's stack comes out of the
rank's big memory, and MIN_THREAD_BYTES is the least one takes there
(glibc's PTHREAD_STACK_MIN of 16 KiB, its guard page, the thread's
descriptor and static TLS, rounded up to 64 KiB).  With glibc's default
stacks (RLIMIT_STACK, 8 MiB) far fewer fit: a thread past what memory holds
fails with EAGAIN, as on Linux under a memory limit (docs/cli.md)."""
from __future__ import annotations

from lattice.errors import LatticeError

VAR = "LATTICE_THREADS"
MAX = 4096
MIN_THREAD_BYTES = 64 << 10


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def parse(text: str, what: str) -> int:
    """A thread count as given (--threads N, LATTICE_THREADS=N)."""
    if not text.isdigit() or not 1 <= int(text) <= MAX:
        raise LatticeError(f"bad {what} {text!r}: a rank's thread limit is a whole number from 1 to {MAX} "
                           f"(the main thread included; an MPI rank has 2 more for its library)")
    return int(text)


def limit(given: str | None, env: dict[str, str], kernel: str, rank_memory: int) -> int | None:
    """The job's limit from --threads (given) or the user's --env (env),
    checked; None: the ranks' cores (cnk's default)."""
    if given is not None and kernel != "cnk":
        raise LatticeError(f"--threads is cnk's thread limit; under --kernel {kernel} Lattice limits no threads")
    n = parse(given, "--threads") if given is not None else None
    said = f"--threads {given}"
    if VAR in env and kernel == "cnk":
        own = parse(env[VAR], f"--env {VAR}")
        if n is not None and own != n:
            raise LatticeError(f"--threads {n} and --env {VAR}={env[VAR]} disagree: give one of them")
        n, said = own, f"--env {VAR}={env[VAR]}"
    if n is not None and n * MIN_THREAD_BYTES > rank_memory:
        raise LatticeError(f"{said}: each rank has {_mib(rank_memory)} of memory, which holds the stacks of "
                           f"at most {max(1, rank_memory // MIN_THREAD_BYTES)} threads (at least "
                           f"{MIN_THREAD_BYTES >> 10} KiB each); ask for fewer, or give the nodes more memory "
                           f"(lattice init --memory) or each rank more of it (--mode co)")
    return n
