"""`lattice run`: its options, parsed into a RunRequest for lattice.jobs.launch."""
from __future__ import annotations

import argparse
import os

from lattice.jobs import job, launch, mapping, threads, timelimit
from lattice.jobs.request import RunRequest

description = ("run a program on compute nodes (without --block: on a booted idle block, else on one it boots "
               "and frees)")
epilog = ("MPMD: `lattice run [OPTIONS] -n 4 a.out ARGS : -n 4 b.out ARGS` runs several programs as one job; "
          "options before the first program apply to the job, each program after ':' takes only -n N. "
          "Ranks are numbered consecutively across programs; the application number is the program's index. "
          f"At its --time limit a job ends with status {timelimit.TIME_LIMIT}. docs/cli.md maps srun's and "
          "mpiexec's options to these.")


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.epilog = epilog
    p.add_argument("-n", "-np", "--np", "--ntasks", dest="n", type=int,
                   help="ranks of the (first) program (default: -N x --ntasks-per-node, else one per process slot "
                        "of --block, else 1)")
    p.add_argument("-N", "--nodes", type=int,
                   help="run on exactly this many compute nodes, consecutive ranks on the same node (srun's block "
                        "distribution); more than one rank per node means --mode vn")
    p.add_argument("--ntasks-per-node", type=int, metavar="K",
                   help="K ranks on each node (more than 1: --mode vn, at most one per core)")
    p.add_argument("--mode", choices=mapping.MODES,
                   help="co (default): one rank per compute node, MPICH's progress thread on a second real core "
                        "where the node has one to spare; vn: one rank per core, the node's memory split evenly")
    p.add_argument("--mapping", metavar="ORDER|FILE",
                   help="where ranks go, as BGLMPI_MAPPING: a permutation of X, Y, Z, T (first letter fastest; "
                        "default XYZT) or a file of one `x y z t` line per rank, relative to the block's corner")
    p.add_argument("--print-map", action="store_true",
                   help="print rank -> x y z t -> location -> host -> CPUs and exit without booting or running "
                        "anything (EXE may be left out)")
    p.add_argument("--block", help="a block to run on (default: the smallest booted idle block that holds the job, "
                                     "else a Free one or a new one, booted and freed)")
    p.add_argument("--wait", action="store_true",
                   help="if the block is busy with another job (without --block: if no place holds the job), "
                        "wait until it is idle (default: refuse the run)")
    p.add_argument("-l", "--label", action="store_true", help="prefix each output line with its rank")
    p.add_argument("-D", "--chdir", "--cwd", dest="cwd",
                   help="working directory on the I/O nodes (default: the current one); a relative EXE is found "
                        "there first, else in the current directory")
    p.add_argument("--export", default="ALL", metavar="ALL|NONE|NAME[=VALUE],...",
                   help="the caller's environment the ranks get: ALL (default), NONE, or these names (and values); "
                        "PMI_*, PMIX_* and LATTICE_* are never passed, Lattice's own job variables win "
                        "(docs/cli.md, \"Environment of a job\")")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="environment variable for the job (repeatable); wins over exported and Lattice's values")
    p.add_argument("--stdin", default="0", metavar="all|none|RANK",
                   help="who reads the run's standard input: rank 0 (default), that rank, every rank (all, each a "
                        "copy) or none (end of file at once)")
    p.add_argument("-t", "--time", metavar="LIMIT",
                   help=f"wall-clock limit ({timelimit.FORMS}); the job is ended on every node at it and the run "
                        f"exits {timelimit.TIME_LIMIT}")
    p.add_argument("-o", "--output", metavar="PATTERN",
                   help="standard output (and standard error without -e) to files: %%j job id, %%t rank, "
                        "%%n node number in the job, %%N node location, %%u user, %%%% a percent sign")
    p.add_argument("-e", "--error", metavar="PATTERN", help="standard error to files (patterns as -o)")
    p.add_argument("--user", help="run as this user (root only)")
    p.add_argument("--kernel", choices=job.KERNELS, default="cnk",
                   help="cnk: run under the compute node kernel (big memory, every system call local, shipped "
                        "or refused; the default); linux: an ordinary Linux process in its node's sandbox, its "
                        "files only through the I/O node")
    p.add_argument("--no-sandbox", dest="sandbox", action="store_false",
                   help="--kernel linux without the node sandbox: the host's view, file calls shipped by the "
                        "LD_PRELOAD client (static binaries, raw system calls, io_uring and Go escape it; "
                        "docs/cli.md)")
    p.add_argument("--tree", action="append", default=[], metavar="PATH",
                   help="a directory a sandboxed --kernel linux job sees besides its working directory and the "
                        "machine's default trees (repeatable; `lattice init --linux-trees`, default the owner's "
                        "home)")
    p.add_argument("--trace", action="store_true", help="cnk prints every system call with its class")
    p.add_argument("--threads", metavar="N",
                   help=f"cnk: each rank may run N threads, the main one included (default: its cores; an MPI "
                        f"rank 2 more for its library; 1..{threads.MAX}, within what the rank's memory holds); "
                        f"sets {threads.VAR} (docs/cli.md)")
    p.add_argument("--hugepages", choices=("reserve", "keep"),
                   default=os.environ.get("LATTICE_HUGEPAGES") or "reserve",
                   help="reserve (default; root only): grow the huge page pools for a cnk job's big memory and "
                        "shrink them back after it; keep: leave the pools as they are "
                        "(default from $LATTICE_HUGEPAGES)")
    p.add_argument("--collectives", choices=("mpi", "torus"),
                   help="torus: Lattice's torus collectives in an MPICH program (a pipelined broadcast along the "
                        "mapping's torus dimensions, host-first reduction trees; compute/libtorus); mpi: MPICH's "
                        "own (default: the machine's [mpi] collectives, else mpi)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="say which block, how long, each node's CPUs and progress thread, the kernel, big memory's "
                        "pages and the system calls by class")
    p.add_argument("exe", metavar="EXE", nargs="?")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS")


def run(args: argparse.Namespace) -> int:
    return launch.run(RunRequest.from_args(args))
