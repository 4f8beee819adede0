from __future__ import annotations

import argparse
import os
import pwd
import shutil
import sys
import time

from lattice import blocks, boot, db, job, machine, ras
from lattice.errors import LatticeError

description = "run a program on compute nodes (booting and freeing a block if none is given)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--np", dest="n", type=int, help="ranks, one per compute node (default: the block's size)")
    p.add_argument("--block", help="a block to run on (default: create, boot and free one that fits)")
    p.add_argument("--label", action="store_true", help="prefix each output line with its rank")
    p.add_argument("--cwd", help="working directory on the I/O nodes (default: the current one)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="environment variable for the job (repeatable); the job gets only these")
    p.add_argument("--user", help="run as this user (root only)")
    p.add_argument("--kernel", choices=job.KERNELS, default="cnk",
                   help="cnk: run under the compute node kernel (big memory, every system call local, shipped "
                        "or refused; the default); linux: an ordinary Linux process with the preload client")
    p.add_argument("--trace", action="store_true", help="cnk prints every system call with its class")
    p.add_argument("--hugepages", choices=("reserve", "keep"),
                   default=os.environ.get("LATTICE_HUGEPAGES") or "reserve",
                   help="reserve (default; root only): grow the huge page pools for a cnk job's big memory and "
                        "shrink them back after it; keep: leave the pools as they are "
                        "(default from $LATTICE_HUGEPAGES)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say which block, how long, the kernel, big memory's pages and the system calls by class")
    p.add_argument("exe", metavar="EXE")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")


def resolve_exe(exe: str, cwd: str) -> str:
    if "/" not in exe:
        found = shutil.which(exe)
        if not found:
            raise LatticeError(f"{exe}: command not found in PATH")
        return os.path.abspath(found)
    path = os.path.normpath(os.path.join(cwd, exe))
    if not os.path.exists(path):
        raise LatticeError(f"{exe}: no such file")
    if os.path.isdir(path):
        raise LatticeError(f"{exe}: is a directory")
    return path


def identity(user: str | None) -> tuple[str, int, int, list[int]]:
    if user is None:
        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        return name, uid, os.getgid(), [g for g in os.getgroups() if g != os.getgid()][:256]
    if os.geteuid() != 0:
        raise LatticeError("--user needs root")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise LatticeError(f"no user {user!r}") from None
    groups = [g for g in os.getgrouplist(pw.pw_name, pw.pw_gid) if g != pw.pw_gid]
    return pw.pw_name, pw.pw_uid, pw.pw_gid, groups[:256]


def need_kernel(kernel: str) -> None:
    """Fail before booting anything if the kernel the job asks for is not built."""
    cnk = machine.prefix() / "bin" / "cnk"
    if kernel == "cnk" and not os.access(cnk, os.X_OK):
        raise LatticeError(f"the compute node kernel {cnk} is not built",
                           "build it with `make`, or run in Linux mode with --kernel linux")


def run(args: argparse.Namespace) -> int:
    m = machine.load()
    con = db.connect()
    cwd = os.path.abspath(args.cwd or os.getcwd())
    exe = resolve_exe(args.exe, os.getcwd())
    for kv in args.env:
        if "=" not in kv or kv.startswith("="):
            raise LatticeError(f"bad --env {kv!r}: expected NAME=VALUE")
    if args.n is not None and args.n < 1:
        raise LatticeError("-n must be at least 1")
    if args.trace and args.kernel != "cnk":
        raise LatticeError("--trace needs --kernel cnk: the compute node kernel does the tracing")
    if args.hugepages not in ("reserve", "keep"):
        raise LatticeError(f"bad LATTICE_HUGEPAGES {args.hugepages!r}: reserve or keep")
    user, uid, gid, groups = identity(args.user)
    t0 = time.monotonic()

    owned = None          # a block this run boots, and frees afterwards
    if args.block:
        b = blocks.get(con, args.block)
        need_kernel(args.kernel)
        if b.state == "Free":
            owned = b.name
            b = boot.boot(con, m, b.name)
    else:
        n = args.n or 1
        corner, shape = blocks.smallest_fit(con, m, n)
        need_kernel(args.kernel)
        name = f"auto-{os.getpid()}-{int(time.time())}"
        b = blocks.create(con, m, name, shape, corner, auto=True)
        owned = name
        try:
            b = boot.boot(con, m, name)
        except LatticeError:
            boot.free(con, m, name)
            blocks.delete(con, name)
            raise
    if args.verbose:
        print(f"lattice: block {b.name} ({machine.shape_str(b.shape)}, {b.size} nodes) ready after "
              f"{time.monotonic() - t0:.2f} s", file=sys.stderr)
    spec = job.Spec(exe=exe, args=list(args.args), cwd=cwd, env=list(args.env), nranks=args.n or b.size,
                    uid=uid, gid=gid, groups=groups, user=user, label=args.label, kernel=args.kernel,
                    trace=args.trace, verbose=args.verbose, hugepages=args.hugepages == "reserve")
    try:
        status = job.run(con, m, b, spec)
    finally:
        ras.ingest(con)
        if owned:
            boot.free(con, m, owned)
            if blocks.get(con, owned).auto:
                blocks.delete(con, owned)
    if args.verbose:
        print(f"lattice: job ended with status {status} after {time.monotonic() - t0:.2f} s", file=sys.stderr)
    return status
