"""A queued job's runner: `python -m lattice.jobs.runner JOB`.

Started by lattice.jobs.queue.dispatch once the job (Starting, its block
chosen) may start.  The first process forks the runner proper, records it as
the job's process (and the owner of a block the queue made for it), and
exits: the dispatcher waits only for that.  The runner, in a session of its
own with no terminal, writes its own lines to the job's output file (-e,
else -o, else lattice-%j.out in the submitter's directory, named as for rank
0), runs the stored RunRequest through lattice.jobs.launch, as `lattice run`
would have run it when it was submitted, as the job's owner (a root
dispatcher keeps root, as `lattice run --user OWNER` does: the database and
the block's daemons are root's; the ranks and the files are the owner's),
makes sure the record ends, and moves the queue on.  If it dies (killed, or
the host went down), lattice.state.reclaim ends the record, as for any run
that is gone.
"""
from __future__ import annotations

import os
import sys

from lattice import procs
from lattice.errors import LatticeError
from lattice.jobs import launch, outfiles, queue
from lattice.jobs.request import RunRequest
from lattice.state import db, machine, reclaim


def hand_over(job: int, child: int) -> None:
    """The first process: the runner proper (child) owns the job from now on."""
    start = procs.start_time(child) or 0
    con = db.connect()
    with db.transaction(con):
        con.execute("UPDATE jobs SET client_pid = ?, client_start = ? WHERE id = ? AND state = 'Starting'",
                    (child, start, job))
        con.execute("UPDATE blocks SET owner_pid = ?, owner_start = ? WHERE auto = 1 AND state = 'Free' AND "
                    "name = (SELECT block FROM jobs WHERE id = ?)", (child, start, job))
    con.close()


def streams(req: RunRequest, job: int, user: str, uid: int, gid: int, groups: list[int]) -> None:
    """The runner's own lines (errors, -v) go where the job's standard error goes, for rank 0."""
    pattern = req.error or req.output or queue.DEFAULT_OUTPUT
    name = os.path.join(req.workdir, outfiles.expand(pattern, job, 0, 0, "-", user))
    with outfiles.as_owner(outfiles.Owner(user, uid, gid, groups)):
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def end(con: db.Connection, job: int, status: int, message: str) -> None:
    """The record ends if the launch left it open: Terminated if it was
    cancelled (its message stays), else Error with message."""
    with db.transaction(con):
        con.execute("UPDATE jobs SET state = CASE WHEN state = 'Dying' THEN 'Terminated' ELSE 'Error' END, "
                    "status = ?, message = CASE WHEN state = 'Dying' THEN message ELSE ? END, ended = ? "
                    "WHERE id = ? AND state IN ('Queued', 'Starting', 'Running', 'Dying')",
                    (status, message, db.now(), job))


def run(job: int) -> int:
    con = reclaim.connect()
    row = con.execute("SELECT * FROM jobs WHERE id = ?", (job,)).fetchone()
    if row is None or row["state"] != "Starting" or row["request"] is None:
        return 0                # cancelled, or taken by another runner, meanwhile
    status = 1
    try:
        req = RunRequest.from_json(row["request"])
        if os.geteuid() != 0 and os.getuid() != row["uid"]:
            raise LatticeError(f"job {job} is {row['user']}'s: only root or its owner may start it")
        user, uid, gid, groups = queue.owner_of(row["uid"], row["user"])
        if row["gid"] is not None:      # the submitter's own ids at submit time
            gid, groups = row["gid"], [int(g) for g in (row["group_ids"] or "").split(",") if g]
        streams(req, job, user, uid, gid, groups)
        os.chdir(req.workdir)           # the submitter's directory, as sbatch runs a batch job there
        if os.geteuid() == 0 and uid != 0:
            req.user = user
        req.wait = True         # for I/O nodes still ending a job whose run was killed, as `--wait` does
        status = launch.run(req, job_id=job, target=row["block"], owner=(user, uid, gid, groups))
    except LatticeError as e:
        print(f"lattice: error: {e.message}", file=sys.stderr, flush=True)
        if e.long_message:
            print(e.long_message, file=sys.stderr, flush=True)
        end(con, job, e.status, e.message)
        status = e.status
    except Exception as e:      # one line in the job's file and its record, never a traceback
        line = db.failure_line(e) or f"{type(e).__name__}: {e}"
        print(f"lattice: error: {line}", file=sys.stderr, flush=True)
        end(con, job, 1, line)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    queue.dispatch_quietly(con, machine.load())
    return status


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m lattice.jobs.runner JOB", file=sys.stderr)
        return 2
    job = int(argv[0])
    child = os.fork()
    if child:
        failures: tuple[type[Exception], ...] = (LatticeError, OSError, *db.errors())
        try:
            hand_over(job, child)
        except failures as e:
            print(f"lattice: error: job {job}: {getattr(e, 'message', e)}", file=sys.stderr)
            return 1
        return 0
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):        # not the dispatcher's pipe: it waits only for the first process
        os.dup2(null, fd)
    os.close(null)
    try:
        run(job)
    finally:
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
