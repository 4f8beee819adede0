"""Running a job on a booted block, as BG/L's mpirun did.

The run sends the job to every I/O node of the block over CONTROL
connections, then multiplexes what comes back: each rank's output (in order
per rank, line by line, labelled on request), each rank's exit, and each I/O
node's end of job.  The job's exit status is 0 if every rank exited 0, else
that of the first rank to fail.

A job runs under the compute node kernel (`kernel="cnk"`, flag LAT_JOB_CNK)
or in Linux mode: in the node sandbox (`sandbox=True`, flag LAT_JOB_SANDBOX,
its file trees in LATTICE_FS_TREES: lattice.jobs.trees) or with the preload
client.  Each rank's exit carries a report line from its node
(`kernel=cnk pages=2M bigmem=... local=N shipped=N unsupported=N why=...`,
or `kernel=linux`), kept per rank with the class totals per job.  A cnk job
reserves huge pages for big memory while it runs (lattice.nodes.hugepages).

The job's ranks are mapped (lattice.jobs.mapping): each I/O node learns which of its
nodes run which ranks, as process t of the node, of which application, and
(lattice.nodes.cores) which real CPUs each rank is bound to and whether it gets
MPICH's progress thread.  The
run is also the top of the PMI tree (docs/protocol.md, section 10): each I/O
node's fence joins those of the I/O nodes below it in the job's PMI fence
tree (lattice.jobs.pmitree), and only the top k send their LAT_CTL_FENCE here;
once they have, the merged keys go back down in LAT_CTL_FENCE_OUT to those
k, which pass them on.  A broken tree (LAT_CTL_TREE_FAIL) ends the job.  A
rank's PMI abort (LAT_CTL_ABORT) ends the job with that rank's code.

While the job runs the run also forwards its own standard input to the ranks
that read it (lattice.jobs.jobinput), ends the job at its wall-clock limit
(lattice.jobs.timelimit), and writes the ranks' output to files if asked
(lattice.jobs.outfiles).
"""
from __future__ import annotations

import errno
import os
import selectors
import shlex
import signal
import struct
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, NamedTuple

from lattice.state import blocks, db, machine, ras
from lattice.nodes import boot
from lattice.jobs import jobenv, jobinput, pmitree, timelimit
from lattice.jobs.output import Output
from lattice.transport import wire
from lattice.state.busy import claim
from lattice.state.blocks import Block
from lattice.transport.ciodclient import Ciod, CiodError, sysret
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.jobs.mapping import RankMapping, process_mapping
from lattice.text import printable

if TYPE_CHECKING:           # imported when a cnk job reserves pages: a Linux-mode run needs none of it
    from lattice.nodes import hugepages
    from lattice.nodes.cores import CoreMap
    from lattice.jobs.outfiles import Plan, Routes

LAUNCH_FAILED = 126     # like a shell's "cannot execute"
OUTPUT_FAILED = 74      # EX_IOERR: the job's output could not be written (a closed pipe: 141)
NODE_LOST = 255
KEEP_EVERY = 0.25       # seconds between looks at the pages the ranks touched, when the block keeps them;
KEEP_QUIET = 8.0        # doubled up to this while they touch no new ones: a long quiet job stays quiet
INTERRUPT_GRACE = 1.5   # seconds an interrupted run waits for its I/O nodes' end of job before it leaves (2 s in all)
INTERRUPTED: int | None = None  # the signal that interrupted this process's run, if one did (lattice.jobs.launch)


class Abandoned(BaseException):
    """An interrupted run's grace is over: it leaves now, wherever it was
    (its closed connections end the job's ranks on the I/O nodes)."""


class Spec(NamedTuple):     # not a dataclass: see lattice.state.machine.Machine
    exe: str
    args: list[str]
    cwd: str
    env: list[str]
    nranks: int
    uid: int
    gid: int
    groups: list[int]
    user: str
    mapping: RankMapping            # where each rank runs: node, core, application (lattice.jobs.mapping)
    label: bool = False
    kernel: str = "cnk"             # "cnk" or "linux"
    trace: bool = False             # cnk --trace
    verbose: bool = False           # -v: kernel, big memory and call totals after the job
    hugepages: bool = True          # reserve huge pages for a cnk job's big memory
    cores: CoreMap | None = None    # each rank's real CPUs (lattice.nodes.cores); None: nodes are not bound
    exported: tuple[str, ...] = ()  # K=V from the caller's environment (lattice.jobs.jobenv), below everything else
    stdin_rank: int | None = None   # who reads the run's input (lattice.jobs.jobinput); None: nobody
    time_limit: int | None = None   # seconds of wall clock (lattice.jobs.timelimit); None: no limit
    output: Plan | None = None      # -o/-e files (lattice.jobs.outfiles); None: the run's own streams
    sandbox: bool = False           # Linux mode in the node sandbox (LAT_JOB_SANDBOX); False: the preload client
    job_id: int | None = None       # the job's record made already (queued: lattice.jobs.queue); None: a new one
    announce: bool = False          # say "lattice: job N" on stderr once the job has its id


KERNELS = ("cnk", "linux")
CLASSES = ("local", "shipped", "unsupported")


class Outcome:
    def __init__(self) -> None:
        self.status = 0
        self.first_failure: str | None = None
        self.ended: dict[int, tuple[str, int, str]] = {}   # rank -> (how, value, text)
        self.reports: dict[int, str] = {}                  # rank -> report line

    def totals(self) -> dict[str, int] | None:
        """System calls by class over every rank that reported them (cnk jobs)."""
        counted = [parse_report(r) for r in self.reports.values()]
        counted = [c for c in counted if all(k in c for k in CLASSES)]
        if not counted:
            return None
        return {k: sum(int(c[k]) for c in counted if c[k].isdigit()) for k in CLASSES}


def split_text(text: str) -> tuple[str, str | None]:
    """An exit message's text as (message, report line): the node ends the
    text with a line starting "kernel=" (docs/protocol.md, section 5)."""
    lines = text.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("kernel="):
            return "\n".join(lines[:i] + lines[i + 1:]).strip(), lines[i].strip()
    return text, None


def split_unsealed(text: str) -> tuple[str, str | None]:
    """An exit message's text without its "unsealed: WHY" line (the node's
    last exit of a job whose container it could not empty), and WHY."""
    lines = text.split("\n")
    why = [line[len("unsealed:"):].strip() for line in lines if line.startswith("unsealed:")]
    if not why:
        return text, None
    return "\n".join(line for line in lines if not line.startswith("unsealed:")).strip(), "; ".join(why)


def parse_report(line: str) -> dict[str, str]:
    """`k=v k=v ... why=free text` -> {k: v}; why (if any) is the rest of the line."""
    head, sep, why = line.partition(" why=")
    if not sep and line.startswith("why="):
        head, why, sep = "", line[4:], "why="
    out = dict(f.split("=", 1) for f in head.split() if "=" in f)
    if sep:
        out["why"] = why
    return out


def pages_words(value: str) -> str:
    """cnode's page size ("1G", "2M", "4K") in words."""
    units = {"G": "GiB", "M": "MiB", "K": "KiB"}
    if value[:-1].isdigit() and value[-1:] in units:
        return f"{value[:-1]} {units[value[-1]]}"
    return value


def mode_words(kernel: str, sandbox: bool) -> str:
    """Which mode a job ran in, as `lattice jobs` and -v say it."""
    return kernel if kernel != "linux" else f"linux/{'sandbox' if sandbox else 'preload'}"


def summary(kernel: str, reports: dict[int, str], totals: dict[str, int] | None,
            sandbox: bool = False) -> list[str]:
    """What -v says after a job: the kernel (and in Linux mode whether the
    node sandbox or the preload client ran it); for cnk rank 0's big memory
    and pages (with why), and the system calls by class over all ranks."""
    if kernel != "cnk" and sandbox:
        return [f"kernel {mode_words(kernel, sandbox)}: the program ran as a Linux process in its node's "
                f"sandbox, its files only through the I/O node (FUSE)"]
    if kernel != "cnk":
        return [f"kernel {mode_words(kernel, sandbox)}: the program ran as a Linux process, its file calls "
                f"shipped by the preload client (--no-sandbox)"]
    lines = []
    r0 = parse_report(reports[0]) if 0 in reports else {}
    if "pages" in r0 and r0.get("bigmem", "").isdigit():
        lines.append(f"kernel cnk: big memory {int(r0['bigmem']) >> 20} MiB per rank on "
                     f"{pages_words(r0['pages'])} pages ({r0.get('why', '-')}) [rank 0]")
    else:
        lines.append("kernel cnk: no report from rank 0")
    if totals is not None:
        lines.append("system calls (all ranks): " + ", ".join(f"{totals[k]} {k}" for k in CLASSES))
    lib = libcache_line(reports)
    if lib:
        lines.append(lib)
    return lines


def libcache_line(reports: dict[int, str]) -> str | None:
    """The host's library cache over all ranks (compute/cnk/README.md "Library cache")."""
    parsed = [parse_report(r) for r in reports.values()]
    parsed = [p for p in parsed if "libcache" in p]
    if not parsed:
        return None
    maps, fetched, copied = (sum(int(p.get(k, "0")) for p in parsed if p.get(k, "").isdigit())
                             for k in ("libmaps", "libfetched", "libcopied"))
    where = sorted({p["libcache"] for p in parsed})
    off = [w for w in where if w.startswith("off:")]
    text = (f"library cache (all ranks): {maps} mappings from the cache, {fetched / 2**20:.1f} MiB fetched "
            f"into it, {copied} file mappings copied into big memory")
    if off:
        text += " (cache off: " + ", ".join(w[4:] for w in off) + ")"
    return text


def describe(how: int, value: int, text: str) -> tuple[str, int, str]:
    """(kind, status, words) for an exit report."""
    if how == wire.EXIT_CODE:
        return "exit", value, f"exited with status {value}"
    if how == wire.EXIT_SIGNAL:
        try:
            name = signal.Signals(value).name
        except ValueError:
            name = "?"
        return "signal", 128 + value, f"killed by signal {value} ({name})"
    if how == wire.EXIT_LAUNCH:
        return "launch", LAUNCH_FAILED, f"could not start: {text or os.strerror(value)}"
    return "lost", NODE_LOST, text or "compute node lost"


class Run:
    def __init__(self, con: db.Connection, m: Machine, b: Block, spec: Spec, job_id: int) -> None:
        self.con, self.m, self.b, self.spec, self.job = con, m, b, spec, job_id
        self.nodes = [s.node for s in spec.mapping.slots]   # rank r runs on nodes[r]
        self.pmi_ciods: set[Ciod] = set()    # I/O nodes that run ranks: each takes part in every fence
        self.pmi_top: set[Ciod] = set()      # those at the top of the PMI fence tree: the fences come from them
        self.tree_broken = False
        self.fence_bytes_out = 0             # FENCE_OUT payload bytes this run sent (-v)
        self.epoch = 0
        self.fence_in: set[Ciod] = set()     # entered the current fence (their last chunk arrived)
        self.fence_kvs: dict[str, str] = {}
        self.aborts: dict[int, str] = {}     # rank -> what it said when it called abort
        self.names: dict[bytes, bytes] = {}  # the job's published names: service -> port (MPI_Publish_name)
        self.outcome = Outcome()
        self.output = Output(spec.label)
        self.killed = False
        self.ended_by: str | None = None     # why lattice killed the job's ranks
        self.interrupted: int | None = None
        self.leaving = False                 # the run is past its job: no more Abandoned
        self.abandoned = False               # the run left before every I/O node said the job ended
        self.ciods: list[Ciod] = []
        self.lost_ionode = False
        self.freed: str | None = None        # why the job was cancelled, if its block was freed under it
        self.rank_rows: list[tuple[int, int, str, str, int, str | None, str | None]] = []   # not yet recorded
        self.input: jobinput.Forward | None = None      # the run's stdin on its way to the ranks
        self.deadline: float | None = None              # time.monotonic() of the time limit
        self.timed_out = False
        self.pages: hugepages.Reservation | None = None  # the job's huge pages (lattice.nodes.hugepages)
        self.next_keep = 0.0                            # time.monotonic() of the next keep_touched
        self.keep_every = KEEP_EVERY

    def location(self, rank: int) -> str:
        return self.m.compute_location(self.nodes[rank])

    def start(self) -> None:
        self.ciods = boot.ciods(self.con, self.b, self.m)
        s, p = self.spec, self.spec.mapping
        flags = ((wire.JOB_CNK if s.kernel == "cnk" else 0) | (wire.JOB_TRACE if s.trace else 0)
                 | (wire.JOB_VN if p.mode == "vn" else 0) | (wire.JOB_SANDBOX if s.sandbox else 0))
        apps = [(a.exe, [a.exe, *a.args]) for a in p.apps]
        env = [*s.exported, *(f"{k}={v}" for k, v in p.env.items()), *s.env]
        nnodes, nodeids = jobenv.node_vars((sl.node for sl in p.slots), self.m.pset_size)
        mapping = process_mapping(p)    # in full: the I/O node serves it if it fits in a PMI value
        k = pmitree.fanout()
        progress = {n.node: n.progress for n in s.cores.nodes} if s.cores is not None else {}
        by_pset: dict[int, list[tuple[int, int, int, int]]] = {c.pset: [] for c in self.ciods}
        for sl in p.slots:
            pset = self.m.pset_of(sl.node)
            by_pset[pset].append((sl.rank, sl.node - pset * self.m.pset_size, sl.t, sl.app))
        # Every I/O node gets the job before any reply is awaited, those with
        # ranks first: they read the executable and start their nodes at once.
        sent: list[tuple[Ciod, int]] = []
        error: LatticeError | None = None
        for c in sorted(self.ciods, key=lambda c: not by_pset[c.pset]):
            mine = by_pset[c.pset]
            ranks = [-1] * self.m.pset_size
            for rank, local, t, _ in mine:
                if t == 0:
                    ranks[local] = rank
            if mine:
                self.pmi_ciods.add(c)
            cpus = None
            if s.cores is not None:     # each slot's CPUs and its node's progress thread
                cpus = [(s.cores.ranks[rank], progress[p.slots[rank].node]) for rank, _, _, _ in mine]
            here = [nnodes, nodeids[c.pset]] if c.pset in nodeids else []    # the rank's place: LATTICE_NODEID...
            payload = wire.placed_job_payload(self.job, s.uid, s.gid, s.groups, ranks, s.nranks, s.cwd, [*here, *env],
                                              flags | (wire.JOB_TREE if mine else 0), p.ppn, mine, apps,
                                              mapping, cpus, s.stdin_rank)
            if len(payload) > wire.MAX_PAYLOAD:
                error = LatticeError(f"the job does not fit in one job message: {len(payload)} bytes, at most "
                                     f"{wire.MAX_PAYLOAD}", "its environment is the likely cause: "
                                     "pass less of it (--export=NONE or --export=NAME,...)")
                break
            try:
                sent.append((c, c.send(wire.CTL_JOB, payload)))
            except OSError as e:
                error = CiodError(f"lost I/O node {c.location}: {e.strerror or e}")
                break
        accepted: list[Ciod] = []
        answers, lost = await_replies(sent, wire.CTL_JOB)
        error = error or lost
        for c, ret, err, text in answers:
            if ret >= 0:
                accepted.append(c)
            elif error is None:
                error = LatticeError(f"job refused by I/O node {c.location}: {text or os.strerror(err)}",
                                     status=LAUNCH_FAILED)
        if error is None:
            error = self.send_tree(k)
        if error is not None:
            self.abandon(accepted, error.message)
            raise error
        if s.stdin_rank is not None:
            readers = [c for c in self.ciods if any(s.stdin_rank in (r, wire.STDIN_ALL) for r, _, _, _ in
                                                    by_pset[c.pset])]
            self.input = jobinput.Forward(self.job, 0, readers)     # descriptor 0, even if sys.stdin is None
        if s.time_limit is not None:
            self.deadline = time.monotonic() + s.time_limit

    def send_tree(self, k: int) -> LatticeError | None:
        """Tell each I/O node that runs ranks where it sits in the job's PMI
        fence tree (all at once; a child waits for its parent to know it)."""
        tree = sorted(self.pmi_ciods, key=lambda c: c.pset)
        places = pmitree.layout(len(tree), k)
        self.pmi_top = {tree[i] for i in pmitree.top(len(tree), k)}
        sent: list[tuple[Ciod, int]] = []
        for c, place in zip(tree, places):
            parent = "" if place.parent is None else tree[place.parent].address
            try:
                sent.append((c, c.send(wire.CTL_PMI_TREE, wire.pmi_tree_payload(
                    self.job, [tree[i].pset for i in place.children], parent))))
            except OSError as e:
                return CiodError(f"lost I/O node {c.location}: {e.strerror or e}")
        answers, error = await_replies(sent, wire.CTL_PMI_TREE)
        for c, ret, err, text in answers:
            if ret < 0 and err != errno.ESRCH and error is None:     # ESRCH: the job ended there already
                error = LatticeError(f"I/O node {c.location} cannot join the job's PMI fence tree: "
                                     f"{text or os.strerror(err)}", status=LAUNCH_FAILED)
        if self.spec.verbose and error is None:
            for line in tree_lines(tree, places, k):
                print(f"lattice: {line}", file=sys.stderr, flush=True)
        return error

    def abandon(self, accepted: list[Ciod], why: str) -> None:
        """The job could not start everywhere: end it on the I/O nodes that
        took it and wait for their end of job, so the block is free again
        when the run returns."""
        self.killed = True
        self.ended_by = f"ended by lattice: {why}"
        self.kill(signal.SIGKILL, accepted)
        self.wait(accepted)

    def kill(self, sig: int, ciods: list[Ciod] | None = None) -> None:
        """sig to this job's ranks: the message names the job, so an I/O node
        running any other job refuses it."""
        for c in self.ciods if ciods is None else ciods:
            try:
                c.send(wire.CTL_KILL, wire.KILL.pack(self.job, sig, 0))
            except OSError:
                pass

    def on_exit(self, body: bytes) -> None:
        _, rank, _, how, value = wire.EXIT.unpack_from(body)
        text, report = split_text(body[wire.EXIT.size:].decode(errors="replace").rstrip("\0"))
        text, report = printable(text), report and printable(report)     # the node's words may carry the job's
        if rank >= len(self.nodes) or rank in self.outcome.ended:
            return
        text, unsealed = split_unsealed(text)
        if unsealed:
            self.on_unsealed(rank, unsealed)
        self.output.flush(rank)
        signalled = how == wire.EXIT_SIGNAL
        killed = signalled and value == signal.SIGKILL
        if (signalled or how == wire.EXIT_LOST) and not self.ended_by:
            # killed, or its node shut down, by `lattice free --force` or `lattice cancel`?
            self.notice_freed(value if signalled else signal.SIGKILL)
        collateral = self.ended_by is not None and (
            killed or (self.freed is not None and (signalled or how == wire.EXIT_LOST)))
        if collateral and self.ended_by is not None:
            text = self.ended_by            # collateral of ending the job, not a fault of its own
        if rank in self.aborts:
            text = f"called abort: {self.aborts[rank]}"
            collateral = False
        kind, status, words = describe(how, value, text)
        self.outcome.ended[rank] = (kind, value, text)
        if report is not None:
            self.outcome.reports[rank] = report
            self.thread_limit(rank, parse_report(report))
        self.rank_rows.append((self.job, rank, self.location(rank), kind, value, text or None, report))
        if status != 0:
            message = f"rank {rank} ({self.location(rank)}) {words}"
            if self.outcome.first_failure is None:
                self.outcome.status = status
                self.outcome.first_failure = message
            if not collateral and (not self.killed or kind != "signal"):
                print(f"lattice: {message}", file=sys.stderr, flush=True)
            if kind == "lost" and not collateral:
                self.node_lost(rank, text)
            ends_job = kind in ("signal", "lost", "launch") and not self.killed
            if collateral:      # the cause was logged already: this rank only went with it
                ras.record(self.con, "INFO", "MMCS", self.location(rank),
                           f"job {self.job} rank {rank} ended by lattice, not by a fault of its own: {text}", self.job)
            else:
                severity = "FATAL" if kind == "lost" else "ERROR"
                cause = " (root cause: lattice ends the job's other ranks)" if ends_job else ""
                ras.record(self.con, severity, "APP" if kind != "lost" else "KERNEL", self.location(rank),
                           f"job {self.job} {message}{cause}", self.job)
            if ends_job:
                # one rank can no longer take part: end the job everywhere
                self.killed = True
                self.ended_by = f"ended by lattice because rank {rank} {words}"
                self.kill(signal.SIGKILL)

    def thread_limit(self, rank: int, said: dict[str, str]) -> None:
        """cnk refused threads at the node's limit (it said so on the rank's stderr): a RAS WARNING."""
        refused, limit = said.get("threadsrefused", "0"), said.get("threads", "?")
        if refused.isdigit() and int(refused) > 0:
            ras.record(self.con, "WARNING", "KERNEL", self.location(rank),
                       f"job {self.job} rank {rank}: cnk refused {refused} thread(s) at its limit of {limit} "
                       "(lattice run --mode co, fewer ranks per node, or lattice init --cores)", self.job)

    def on_unsealed(self, rank: int, why: str) -> None:
        """The node could not empty the job's container (compute/cnode/container.c):
        something of the job may still run there.  Said, logged and recorded."""
        message = f"processes of the job outlived it on {self.location(rank)}: {why}"
        print(f"lattice: warning: {message}", file=sys.stderr, flush=True)
        ras.record(self.con, "ERROR", "KERNEL", self.location(rank), f"job {self.job} {message}", self.job)
        if self.outcome.first_failure is None:
            self.outcome.first_failure = message

    def on_fence(self, c: Ciod, body: bytes) -> None:
        """One I/O node's part of a fence; the last one completes it."""
        job, epoch, nkv, flags, _ = wire.FENCE.unpack_from(body)
        if job != self.job or epoch != self.epoch or c not in self.pmi_top or c in self.fence_in:
            raise ValueError(f"fence {epoch} of job {job} not expected (job {self.job} is at fence {self.epoch})")
        self.fence_kvs.update(wire.parse_kvs(body[wire.FENCE.size:], nkv))
        if flags & wire.FENCE_MORE:
            return
        self.fence_in.add(c)
        if self.fence_in != self.pmi_top:
            return
        for msg in wire.fence_messages(self.job, self.epoch, self.fence_kvs):
            for other in self.pmi_top:      # they pass it on down the tree
                try:
                    other.send(wire.CTL_FENCE_OUT, msg)
                    self.fence_bytes_out += len(msg)
                except OSError:
                    pass                    # its loss shows as a closed connection
        self.epoch += 1
        self.fence_in.clear()
        self.fence_kvs = {}

    def on_abort(self, body: bytes) -> None:
        """A rank called PMI abort (MPI_Abort): the job ends with its code."""
        _, rank, code = wire.ABORT.unpack_from(body)
        text = printable(body[wire.ABORT.size:].decode(errors="replace").replace("\\ ", " ").strip()) or "(no message)"
        if rank >= len(self.nodes) or rank in self.aborts:
            return
        self.aborts[rank] = f"code {code}: {text}"
        status = code if 0 < code < 256 else (code & 0xFF) or 1
        message = f"rank {rank} ({self.location(rank)}) called abort with code {code}: {text}"
        print(f"lattice: {message}", file=sys.stderr, flush=True)
        ras.record(self.con, "ERROR", "APP", self.location(rank), f"job {self.job} {message}", self.job)
        if self.outcome.first_failure is None:
            self.outcome.status = status
            self.outcome.first_failure = message
        if not self.killed:
            self.killed = True
            self.ended_by = f"ended by lattice because rank {rank} called abort with code {code}"
            self.kill(signal.SIGKILL)

    def on_name(self, c: Ciod, body: bytes) -> None:
        """A rank publishes, unpublishes or looks up a name: the job's names live
        here, at the top of the PMI tree, so every rank of the job sees them."""
        job, rank, op, _, _ = wire.NAME.unpack_from(body)
        strings = body[wire.NAME.size:].split(b"\0")
        if job != self.job or rank >= len(self.nodes) or len(strings) != 3 or strings[2] or not strings[0] \
                or op not in (wire.NAME_PUBLISH, wire.NAME_UNPUBLISH, wire.NAME_LOOKUP) \
                or self.m.pset_of(self.nodes[rank]) != c.pset:
            raise ValueError(f"name request of rank {rank} of job {job} is malformed or not this I/O node's")
        service, port = strings[0], strings[1]
        rc, answer = 0, b""
        if op == wire.NAME_PUBLISH:
            if service in self.names:
                rc = 1
            else:
                self.names[service] = port
        elif op == wire.NAME_UNPUBLISH:
            rc = 0 if self.names.pop(service, None) is not None else 1
        elif service in self.names:
            answer = self.names[service] + b"\0"
        else:
            rc = 1
        try:
            c.send(wire.CTL_NAME_OUT, wire.NAME.pack(self.job, rank, op, rc, 0) + answer)
        except OSError:
            pass                        # its loss shows as a closed connection

    def on_tree_fail(self, c: Ciod, body: bytes) -> None:
        """An I/O node saw the job's PMI fence tree break (a peer lost, a bad
        fence): no fence can complete, so the job ends now, not at a hang."""
        job, = wire.JOB_END.unpack_from(body)
        if job == self.job and not self.tree_broken:     # the first to see it says why; the rest follow
            self.tree_broken = True
            text = printable(body[wire.JOB_END.size:].decode(errors="replace"))
            self.end_for(c, f"I/O node {c.location}: PMI fence tree broken during job {self.job}: {text}")

    def on_job_fail(self, c: Ciod, body: bytes) -> None:
        """An I/O node cannot go on with the job (its I/O worker was lost):
        its ranks are killed there; the job ends with that error."""
        job, = wire.JOB_END.unpack_from(body)
        if job == self.job:
            text = body[wire.JOB_END.size:].decode(errors="replace")
            self.end_for(c, f"I/O node {c.location}: {text}")

    def bad_message(self, c: Ciod, why: str) -> None:
        """An I/O node sent something the run cannot use: end the job, say why."""
        self.end_for(c, f"I/O node {c.location} sent a bad message during job {self.job}: {why}")

    def end_for(self, c: Ciod, message: str) -> None:
        """End the job because of what I/O node c said: print it, record it."""
        message = printable(message)
        print(f"lattice: {message}", file=sys.stderr, flush=True)
        ras.record(self.con, "ERROR", "MMCS", c.location, message, self.job)
        if self.outcome.first_failure is None:
            self.outcome.status = NODE_LOST
            self.outcome.first_failure = message
        if not self.killed:
            self.killed = True
            self.ended_by = f"ended by lattice: {message}"
            self.kill(signal.SIGKILL)

    def output_lost(self, why: str) -> None:
        """The job's output has nowhere to go: end the job, as a closed pipe
        ends a shell pipeline (status 141) or a write error ends a program
        (EX_IOERR, 74)."""
        message = f"{why}: ending job {self.job}"
        try:
            print(f"lattice: {message}", file=sys.stderr, flush=True)
        except OSError:
            pass                # stderr is what failed
        ras.record(self.con, "WARNING", "MMCS", self.b.name, f"job {self.job} ended by lattice: {why}", self.job)
        if self.outcome.first_failure is None:
            self.outcome.status = 128 + signal.SIGPIPE if self.output.failed_errno == errno.EPIPE else OUTPUT_FAILED
            self.outcome.first_failure = message
        self.killed = True
        self.ended_by = f"ended by lattice: {why}"
        self.kill(signal.SIGKILL)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGINT or SIGTERM to the run: end the job, and leave within
        INTERRUPT_GRACE whatever the I/O nodes do (on_grace_over).  The
        interrupt is the job's recorded cause, not the ranks' SIGKILL."""
        global INTERRUPTED
        if self.interrupted is not None:
            return
        self.interrupted = INTERRUPTED = signum
        name = signal.Signals(signum).name
        signal.signal(signal.SIGALRM, self.on_grace_over)
        signal.setitimer(signal.ITIMER_REAL, INTERRUPT_GRACE)
        if self.outcome.first_failure is None or not self.killed:
            self.outcome.first_failure = f"job {self.job} interrupted: its lattice run got {name} and ended it"
        if not self.killed:
            self.killed = True
            self.ended_by = f"ended by lattice on {name} to its lattice run"
            try:        # not print(): the handler may run inside another write to stderr
                os.write(2, f"lattice: {name}: ending job {self.job}\n".encode())
            except OSError:
                pass
            self.kill(signal.SIGKILL)

    def on_grace_over(self, signum: int, frame: FrameType | None) -> None:
        if not self.leaving:
            raise Abandoned()

    def wait(self, ciods: list[Ciod] | None = None) -> None:
        """Until each of ciods (default: the block's) ended the job or was lost."""
        ciods = self.ciods if ciods is None else ciods
        sel = selectors.DefaultSelector()
        open_ciods = set(ciods)
        ready: list[tuple[Ciod, list[tuple[int, bytes]] | None]] = [(c, c.buffered()) for c in ciods]
        for c in ciods:
            sel.register(c, selectors.EVENT_READ, c)
        while open_ciods:
            for c, frames in ready:
                if c not in open_ciods:
                    continue
                if frames is None:
                    sel.unregister(c)
                    open_ciods.discard(c)
                    self.ionode_lost(c)
                    continue
                for typ, body in frames:
                    if typ == wire.CTL_OUTPUT:
                        rank, which = wire.OUTPUT.unpack_from(body)
                        if rank < len(self.nodes):
                            self.output.write(rank, which, body[wire.OUTPUT.size:])
                        continue
                    self.output.drain()     # the ranks' output so far goes before what the run says
                    if typ == wire.CTL_EXIT:
                        self.on_exit(body)
                    elif typ in (wire.CTL_FENCE, wire.CTL_ABORT, wire.CTL_NAME):
                        try:
                            if typ == wire.CTL_FENCE:
                                self.on_fence(c, body)
                            elif typ == wire.CTL_NAME:
                                self.on_name(c, body)
                            else:
                                self.on_abort(body)
                        except (ValueError, struct.error, UnicodeDecodeError) as e:
                            self.bad_message(c, str(e))
                    elif typ in (wire.CTL_TREE_FAIL, wire.CTL_JOB_FAIL):
                        try:
                            if typ == wire.CTL_TREE_FAIL:
                                self.on_tree_fail(c, body)
                            else:
                                self.on_job_fail(c, body)
                        except struct.error as e:
                            self.bad_message(c, str(e))
                    elif typ == wire.CTL_STDIN_ACK and self.input is not None:
                        self.input.acked(c, body)
                    elif typ == wire.CTL_JOB_END:
                        sel.unregister(c)
                        open_ciods.discard(c)
                        if self.input is not None:
                            self.input.gone(c)
                        break
                if self.output.failed and not self.killed:
                    self.output_lost(self.output.failed)
            self.output.drain()             # before waiting: written output does not wait with us
            if self.output.failed and not self.killed:
                self.output_lost(self.output.failed)
            ready = self.next_ready(sel) if open_ciods else []
        if self.input is not None:
            self.input.close(sel)
        sel.close()
        self.output.flush()
        if self.output.failed and not self.killed:
            self.output_lost(self.output.failed)

    def notice_freed(self, sig: int = signal.SIGKILL) -> bool:
        """Whether the job was cancelled (`lattice cancel`) or its block freed
        under it (`lattice free --force`): then that is why its ranks die (of
        sig) and its I/O nodes go, said once."""
        if self.freed is None:
            mine = self.con.execute("SELECT state, message FROM jobs WHERE id = ?", (self.job,)).fetchone()
            row = self.con.execute("SELECT state, message FROM blocks WHERE name = ?", (self.b.name,)).fetchone()
            if mine["state"] == "Dying" and mine["message"]:
                self.freed = f"job {self.job} {mine['message']}"        # lattice.cli.cmd.free says why
            elif row is None or row["state"] in ("Terminating", "Free"):
                how = row["message"] if row is not None and row["message"] else "freed"
                self.freed = f"job {self.job} cancelled: its block {self.b.name} was {how}"
            if self.freed is not None:
                print(f"lattice: {self.freed}", file=sys.stderr, flush=True)
                if self.outcome.first_failure is None:
                    self.outcome.status = 128 + sig
                    self.outcome.first_failure = self.freed
                self.killed = True
                self.ended_by = self.ended_by or self.freed
        return self.freed is not None

    def node_lost(self, rank: int, text: str) -> None:
        """A compute node died under the job: the block says so until it is booted again."""
        where = self.location(rank)
        try:
            blocks.set_state(self.con, self.b.name, "Error",
                             f"compute node {where} lost during job {self.job}: free and boot the block",
                             expect=("Initialized",))
        except LatticeError:
            pass                # Error already, or being freed

    def next_ready(self, sel: selectors.BaseSelector) -> list[tuple[Ciod, list[tuple[int, bytes]] | None]]:
        """What the I/O nodes sent next; meanwhile the run's input goes on
        to the ranks and the time limit is kept."""
        input_ready = self.input is not None and self.input.watch(sel)
        timeout = 0.0 if input_ready else 1.0
        if self.deadline is not None and not self.timed_out:
            timeout = max(0.0, min(timeout, self.deadline - time.monotonic()))
        keeping = self.pages is not None and self.pages.block is not None and self.pages.kept_2m < self.pages.keep_2m
        if keeping:
            timeout = max(0.0, min(timeout, self.next_keep - time.monotonic()))
        ready = []
        for key, _ in sel.select(timeout=timeout):
            if key.data is self.input and self.input is not None:
                self.input.pump()
            else:
                ready.append((key.data, key.data.frames()))
        if input_ready and self.input is not None:
            self.input.pump()
        if keeping and time.monotonic() >= self.next_keep:
            from lattice.nodes import hugepages
            assert self.pages is not None
            got = hugepages.keep_touched(self.pages)
            self.keep_every = KEEP_EVERY if got else min(KEEP_QUIET, self.keep_every * 2)
            self.next_keep = time.monotonic() + self.keep_every
        if self.deadline is not None and not self.timed_out and time.monotonic() >= self.deadline:
            self.on_time_limit()
        return ready

    def on_time_limit(self) -> None:
        """The job ran its wall-clock limit: end it everywhere, say so once."""
        self.timed_out = True
        limit = timelimit.words(self.spec.time_limit or 0)
        message = f"job {self.job} reached its time limit of {limit}: ended on every node"
        print(f"lattice: {message}", file=sys.stderr, flush=True)
        ras.record(self.con, "ERROR", "MMCS", self.b.name, message, self.job)
        if self.outcome.first_failure is None:
            self.outcome.status = timelimit.TIME_LIMIT
            self.outcome.first_failure = message
        if not self.killed:
            self.killed = True
            self.ended_by = f"ended by lattice at the job's time limit of {limit}"
            self.kill(signal.SIGKILL)

    def ionode_lost(self, c: Ciod) -> None:
        """An I/O node closed its connection mid-job: its ranks are lost."""
        if self.notice_freed():
            for r, n in enumerate(self.nodes):
                if self.m.pset_of(n) == c.pset and r not in self.outcome.ended:
                    self.on_exit(wire.EXIT.pack(self.job, r, 0, wire.EXIT_SIGNAL, signal.SIGKILL))
            return
        self.lost_ionode = True
        if self.input is not None:
            self.input.gone(c)
        how = c.broken or (f"connection failed: {c.lost}" if c.lost else "connection closed")
        kind, _, where = c.address.partition(":")
        if kind == "tcp":       # the I/O node runs on another host: name it (its link may be what failed)
            how += f", host {where.rpartition(':')[0]}"
        message = f"I/O node {c.location} lost ({how}) during job {self.job}"
        print(f"lattice: {message}", file=sys.stderr, flush=True)
        ras.record(self.con, "FATAL", "CIOD", c.location, message, self.job)
        blocks.set_state(self.con, self.b.name, "Error", message)
        for r, n in enumerate(self.nodes):
            if self.m.pset_of(n) == c.pset and r not in self.outcome.ended:
                text = f"lost with I/O node {c.location}"
                self.on_exit(wire.EXIT.pack(self.job, r, 0, wire.EXIT_LOST, 0) + text.encode())

    def record_ranks(self) -> None:
        """How each rank ended, into the job record: one transaction for the
        ranks that ended so far, not one per rank while the others still run."""
        if self.rank_rows:
            with db.transaction(self.con):
                self.con.executemany("INSERT INTO ranks (job, rank, location, how, value, message, report) "
                                     "VALUES (?,?,?,?,?,?,?) ON CONFLICT (job, rank) DO UPDATE SET "
                                     "location = excluded.location, how = excluded.how, value = excluded.value, "
                                     "message = excluded.message, report = excluded.report", self.rank_rows)
            self.rank_rows = []

    def close(self) -> None:
        for c in self.ciods:
            c.close()


def run(con: db.Connection, m: Machine, b: Block, spec: Spec, wait: bool = False) -> int:
    """Run spec on booted block b; record it; return the exit status.  A
    block busy with another job refuses the run, or with `wait` the run
    waits until the block is idle (lattice.state.busy)."""
    if spec.nranks > b.size * spec.mapping.ppn:
        raise LatticeError(f"{spec.nranks} ranks do not fit in block {b.name} of {b.size} compute nodes "
                           f"x {spec.mapping.ppn} per node")
    if spec.kernel not in KERNELS:
        raise LatticeError(f"unknown kernel {spec.kernel!r}: {' or '.join(KERNELS)}")
    if spec.trace and spec.kernel != "cnk":
        raise LatticeError("--trace needs --kernel cnk: the compute node kernel does the tracing")
    if spec.sandbox and spec.kernel != "linux":
        raise LatticeError("the node sandbox is for --kernel linux")
    job_id = claim(con, m, b, spec, wait)
    r = Run(con, m, b, spec, job_id)
    pages: hugepages.Reservation | None = None
    handlers = {s: signal.signal(s, r.on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            if spec.kernel == "cnk" and spec.hugepages and local_ranks(spec):
                pages = r.pages = reserve_pages(con, m, b, spec, job_id)
                r.spec = spec._replace(env=[*spec.env, *pages.env])    # tells cnk which pages to take
            if spec.output is not None:
                r.output.files = open_outputs(m, spec, job_id)
            if r.interrupted is None and not r.notice_freed(signal.SIGTERM):    # cancelled before it started?
                r.start()
        except LatticeError as e:
            finish(con, job_id, "Error", e.status, e.message)
            raise
        # a `lattice cancel` meanwhile made it Dying: that stays, and names the cause
        con.execute("UPDATE jobs SET state = 'Running', started = ? WHERE id = ? AND state != 'Dying'",
                    (db.now(), job_id))
        if r.freed is None and r.notice_freed(signal.SIGTERM):
            r.kill(signal.SIGKILL)      # cancelled while it started: its cancel's signals may have found no job
        r.wait()
    except Abandoned:
        r.abandoned = True
    finally:
        r.leaving = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in handlers.items():
            signal.signal(s, h)
        if r.abandoned:     # the rest must not wait on a busy database either
            db.set_wait(con, 0.5)
        r.close()
        if r.output.files is not None:
            r.output.files.close()
        r.record_ranks()
        if pages is not None and r.interrupted is not None:
            pass            # out at once: the next run on the host reaps the reservation of a run that is gone
        elif pages is not None:
            from lattice.nodes import hugepages
            for problem in hugepages.release(pages):
                print(f"lattice: warning: {problem}", file=sys.stderr, flush=True)
    if r.freed is None and r.interrupted is None:
        r.notice_freed(signal.SIGTERM)      # cancelled, its ranks ending by themselves after SIGTERM?
    status = r.outcome.status
    if r.timed_out:
        status = timelimit.TIME_LIMIT
    if r.interrupted is not None:
        status = 128 + r.interrupted
    state = "Error" if r.lost_ionode else "Terminated"
    finish(con, job_id, state, status, r.outcome.first_failure, r.outcome.totals())
    if spec.verbose:
        for line in summary(spec.kernel, r.outcome.reports, r.outcome.totals(), spec.sandbox):
            print(f"lattice: {line}", file=sys.stderr, flush=True)
        if r.epoch:
            print(f"lattice: PMI: {r.epoch} fence(s); the service node sent {r.fence_bytes_out} bytes of "
                  f"FENCE_OUT to {len(r.pmi_top)} of {len(r.pmi_ciods)} I/O nodes", file=sys.stderr, flush=True)
    return status


def await_replies(sent: list[tuple[Ciod, int]], typ: int) -> tuple[list[tuple[Ciod, int, int, str]],
                                                                    LatticeError | None]:
    """The lat_sysret answers (I/O node, ret, errno, text) to requests of
    type typ sent to several I/O nodes at once, and the first I/O node lost
    meanwhile, if any."""
    answers: list[tuple[Ciod, int, int, str]] = []
    lost: LatticeError | None = None
    for c, seq in sent:
        try:
            answers.append((c, *sysret(c.reply(typ, seq))))
        except LatticeError as e:
            lost = lost or e
    return answers, lost


def tree_lines(tree: list[Ciod], places: list[pmitree.Place], k: int) -> list[str]:
    """`lattice run -v`: who sends each fence to whom."""
    top = pmitree.top(len(tree), k)
    lines = [f"PMI fence tree, fan-out {k}, {pmitree.depth(len(tree), k)} level(s) of I/O nodes: "
             f"the service node sends to {len(top)} of {len(tree)}: {', '.join(tree[i].location for i in top)}"]
    for c, place in zip(tree, places):
        if place.children:
            lines.append(f"PMI fence tree: {c.location} sends to {', '.join(tree[i].location for i in place.children)}")
    return lines


def open_outputs(m: Machine, spec: Spec, job_id: int) -> Routes:
    """The -o/-e files of every rank, created before any rank starts."""
    assert spec.output is not None
    p = spec.mapping
    number = {n: i for i, n in enumerate(p.nodes())}
    return spec.output.open(job_id, [number[sl.node] for sl in p.slots],
                            [m.compute_location(sl.node) for sl in p.slots])


def local_ranks(spec: Spec) -> int:
    """The job's ranks on this host: the pools here are this host's, and a
    rank on another host takes what its own host's pools give (cnk falls
    back to smaller pages there when they give none)."""
    cm = spec.cores
    if cm is None:
        return spec.nranks
    from lattice.nodes import host
    return sum(1 for sl in spec.mapping.slots if cm.hosts.get(sl.node, cm.host).name == host.LOCAL)


def holder(con: db.Connection, m: Machine, b: Block) -> tuple[str, int] | None:
    """The block's entry in the host's huge page book and the pid of a daemon
    of it here that lives as long as it is booted, when the block keeps the
    pages its jobs touch (Machine.block_holds_pages)."""
    if not m.block_holds_pages():
        return None
    row = con.execute("SELECT pid FROM daemons WHERE block = ? AND host IS NULL ORDER BY kind, node LIMIT 1",
                      (b.name,)).fetchone()
    from lattice.nodes import hugepages
    return None if row is None else (hugepages.block_entry(machine.home(), b.name), int(row["pid"]))


def reserve_pages(con: db.Connection, m: Machine, b: Block, spec: Spec, job_id: int) -> hugepages.Reservation:
    """Huge pages for the job's big memory, sized to the node (lattice.nodes.hugepages);
    the page size a user's --env LATTICE_BIGMEM_PAGES=1G|2M|4K allows at most."""
    from lattice.nodes import hugepages
    largest = hugepages.GIB_KB
    for kv in spec.env:
        k, _, v = kv.partition("=")
        if k == hugepages.ENV_PAGES:
            try:
                largest = hugepages.parse_page(v)
            except ValueError as e:
                raise LatticeError(str(e)) from None
    # one book per host: name the run by its machine too, job ids repeat across machines
    res = hugepages.reserve(hugepages.book_dir(), f"{machine.home().resolve()}:job-{job_id}", local_ranks(spec),
                            m.memory // spec.mapping.ppn, fixed_address=hugepages.fixed_below_1g(spec.exe),
                            largest=largest, block=holder(con, m, b))
    user = {kv.partition("=")[0] for kv in spec.env}
    res.env = [kv for kv in res.env if kv.partition("=")[0] not in user]     # the user's --env wins
    if spec.verbose:
        for note in res.notes:
            print(f"lattice: {note}", file=sys.stderr, flush=True)
    if res.warning:
        print(f"lattice: warning: {res.warning}", file=sys.stderr, flush=True)
    return res


def finish(con: db.Connection, job_id: int, state: str, status: int, message: str | None,
           totals: dict[str, int] | None = None) -> None:
    t = totals or {}
    con.execute("UPDATE jobs SET state = ?, status = ?, message = ?, ended = ?, calls_local = ?, "
                "calls_shipped = ?, calls_unsupported = ? WHERE id = ?",
                (state, status, message, db.now(), t.get("local"), t.get("shipped"), t.get("unsupported"),
                 job_id))
