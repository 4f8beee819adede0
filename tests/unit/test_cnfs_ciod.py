"""ciod and the node's file client (docs/protocol.md 3, "The node's file
client"): a PROC hello for process slot LAT_PROC_FS is a sandboxed job's,
one per node that runs the job, served by the job's I/O worker."""
from __future__ import annotations

import errno
from pathlib import Path

from lattice.transport import wire
from test_ciod import (AT_FDCWD, CTL_EXIT, CTL_JOB_END, O_CREAT, O_EXCL, O_RDONLY, O_WRONLY, ROLE_PROC,  # noqa: F401
                       STAT, Ciod, Job, Proc, ciod, ciod_bin, path)


def fs_node(node: int) -> int:
    return node | wire.PROC_FS << 16


def test_the_file_client_of_a_sandboxed_job_is_served_one_per_node(ciod: Ciod, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"1234567")
    j = Job(ciod, tmp_path, flags=wire.JOB_SANDBOX)
    s, err = ciod.hello(ROLE_PROC, fs_node(0), j.id)
    assert err == 0
    fs = Proc(s)
    ret, out = fs.ok("fstatat", AT_FDCWD, 0, data=path(tmp_path / "f"))
    assert STAT.unpack(out)[8] == 7                     # st_size: the worker did it
    assert ciod.hello(ROLE_PROC, fs_node(0), j.id)[1] == errno.EBUSY     # one per node
    assert ciod.hello(ROLE_PROC, fs_node(1), j.id)[1] == 0              # the other node's own
    assert ciod.hello(ROLE_PROC, fs_node(0), j.id + 1)[1] == errno.EACCES   # another job
    assert "node 0 process 65535 refused: that process is already connected" in ciod.rastext()
    s.close()
    ciod.connect(ROLE_PROC, fs_node(0), j.id)           # its place is free again


def test_no_file_client_for_a_job_not_sandboxed_or_a_node_without_it(ciod: Ciod, tmp_path: Path) -> None:
    j = Job(ciod, tmp_path, ranks=(0, -1))
    assert ciod.hello(ROLE_PROC, fs_node(0), j.id)[1] == errno.EACCES     # preload and cnk jobs have none
    j.exit(0)
    j.next_ctl(CTL_EXIT)
    j.next_ctl(CTL_JOB_END)
    k = Job(ciod, tmp_path, job_id=43, ranks=(0, -1), reuse=j, flags=wire.JOB_SANDBOX)
    assert ciod.hello(ROLE_PROC, fs_node(1), k.id)[1] == errno.EACCES     # node 1 runs none of it
    assert ciod.hello(ROLE_PROC, fs_node(0), k.id)[1] == 0


def test_openat_stat_opens_and_says_what_it_opened_in_one_call(ciod: Ciod, tmp_path: Path) -> None:
    """LAT_SYS_OPENAT_STAT (docs/protocol.md 5): lattice-fs's open and
    create are one round trip, the descriptor and the file's lat_stat."""
    (tmp_path / "f").write_bytes(b"1234567")
    j = Job(ciod, tmp_path, flags=wire.JOB_SANDBOX)
    fs = Proc(ciod.connect(ROLE_PROC, fs_node(0), j.id))
    fd, out = fs.ok("openat_stat", AT_FDCWD, O_RDONLY, 0, data=path(tmp_path / "f"))
    st = STAT.unpack(out)
    assert fd >= 3 and st[8] == 7 and st[1] == (tmp_path / "f").stat().st_ino
    assert fs.ok("pread", fd, 3, 2) == (3, b"345")      # the descriptor is open
    nfd, out = fs.ok("openat_stat", AT_FDCWD, O_WRONLY | O_CREAT | O_EXCL, 0o640, data=path(tmp_path / "new"))
    assert STAT.unpack(out)[8] == 0 and STAT.unpack(out)[1] == (tmp_path / "new").stat().st_ino
    assert fs.fails("openat_stat", AT_FDCWD, O_WRONLY | O_CREAT | O_EXCL, 0o640,
                    data=path(tmp_path / "new")) == errno.EEXIST
    assert fs.fails("openat_stat", AT_FDCWD, O_RDONLY, 0, data=path(tmp_path / "missing")) == errno.ENOENT
    assert fs.ok("close", nfd)[0] == 0 and fs.ok("close", fd)[0] == 0
