"""The host's library cache under cnk (compute/cnk/README.md "Library cache"):
a dynamic program's shared libraries are fetched once per pset into the
user's cache directory on the compute host and mapped from there by every
rank, instead of being copied into each rank's big memory; the directory
(one per machine, host and user: protocol/lattice/libcache_name.h) is kept
for the same user's next job, in this block or the next one, and goes when
another user's job starts.

Programs report where their libraries are mapped from (examples/libmaps.h,
read from /proc/self/maps inside the rank), cnk's report line counts the
mappings served and the bytes fetched, and the I/O nodes' counters show the
shipped pread bytes.  One 1x2x4 machine (two psets of 4, 256 MiB and 2 cores
per node) with block L over all of it serves the file.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import EXAMPLES, booted_block, Machine
from cnk_helpers import by_rank, last_job, rank_rows

PREFIX = "/dev/shm/lattice-libcache-"
LIBMAPS = EXAMPLES / "libmaps"
MPI_LIBMAPS = EXAMPLES / "mpi" / "libmaps"
LINE = re.compile(r"^libmaps: (\S+) (-?\d+) (.*)$")


def wait_for(cond: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"still waiting for {what}"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def lc(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpicc.mpich"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
    assert LIBMAPS.exists() and MPI_LIBMAPS.exists(), "examples/libmaps missing: run make"
    try:
        yield from booted_block(tmp_path_factory.mktemp("libcache"), "L", "1x2x4", "--pset-size", "4", "--memory", "256M", "--cores", "2")
    finally:        # the machine's caches outlive its blocks: this machine is gone
        for d in SEEN:
            for c in Path("/dev/shm").glob(os.path.basename(d).rpartition("-")[0] + "-*"):
                shutil.rmtree(c, ignore_errors=True)


SEEN: set[str] = set()      # the cache directories the tests named


def machine_key(sock: str) -> int:
    """protocol/lattice/libcache_name.h's key of a ciod's socket path: the
    machine's runtime directory under /tmp, or the socket's directory."""
    rt = "/tmp/lattice-"
    base = sock[:sock.index("/", len(rt))] if sock.startswith(rt) else sock[:sock.rindex("/")]
    h = 14695981039346656037
    for c in base.encode():
        h = ((h ^ c) * 1099511628211) % 2**64
    h = (h ^ (h >> 32)) & 0xFFFFFFFF
    return h or 1


def cache_dirs(m: Machine, uid: int = 0) -> set[str]:
    """The cache directory block L's I/O nodes make for uid: one for the
    machine on this host, which both psets share."""
    out = set()
    for pid in m.processes("ciod", "L"):
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        sock = argv[argv.index(b"--listen") + 1].decode().removeprefix("unix:")
        out.add(f"{PREFIX}m{machine_key(sock):08x}-{uid}")
    assert len(out) == 1, out
    SEEN.update(out)
    return out


def run_as_nobody(m: Machine) -> subprocess.CompletedProcess[str]:
    """A small job of another user: root's caches on block L go."""
    return m.run("run", "--block", "L", "-n", "2", "--label", "--user", "nobody", "--cwd", "/tmp", str(LIBMAPS))


def maps_of(lines: list[str]) -> dict[str, tuple[int, str]]:
    """libmaps lines of one rank: library path -> (file size, where it is mapped from)."""
    out = {}
    for line in lines:
        mt = LINE.match(line)
        if mt and mt.group(1) != "dir" and mt.group(1) != "allreduce":
            out[mt.group(1)] = (int(mt.group(2)), mt.group(3))
    return out


def reports(m: Machine, job: int) -> dict[int, dict[str, str]]:
    """Each rank's report line (kernel=cnk ... libcache=... libmaps=N ...) as fields."""
    out = {}
    for row in rank_rows(m, job):
        rank, _, rest = row.strip().partition(" ")
        head = rest.partition(" why=")[0]
        out[int(rank)] = dict(f.split("=", 1) for f in head.split() if "=" in f)
    return out


def pread_bytes(m: Machine) -> dict[str, int]:
    """Bytes of shipped preads each I/O node of block L executed so far."""
    return {loc["location"]: int(loc["bytes"]["pread"])
            for loc in json.loads(m.run("counters", "L", "--json").stdout)["ionodes"]}


def libc_of(maps: dict[str, tuple[int, str]]) -> tuple[int, str]:
    (name,) = [k for k in maps if "/libc.so" in k]
    return maps[name]


def test_c_program_maps_its_libraries_from_the_cache_fetched_once_per_host(lc: Machine) -> None:
    dirs = cache_dirs(lc)
    run_as_nobody(lc)
    assert not any(os.path.lexists(d) for d in dirs)
    p = lc.run("run", "--block", "L", "-n", "8", "--label", "-v", str(LIBMAPS))
    ranks = by_rank(p.stdout)
    assert sorted(ranks) == list(range(8)), p.stdout
    used: dict[str, set[int]] = {}
    for r, lines in ranks.items():
        size, src = libc_of(maps_of(lines))
        d, _, name = src.rpartition("/")
        assert d in dirs, f"rank {r}: libc mapped from {src}, not from a cache directory of {sorted(dirs)}"
        assert f"-{size:x}-" in name, f"the cache file {name} is named by libc's size {size}"
        used.setdefault(d, set()).add(r)
    assert len(used) == 1, f"the psets on a host share the machine's cache: {used}"
    rep = reports(lc, last_job(lc))
    libc_size = libc_of(maps_of(ranks[0]))[0]
    for d, rs in used.items():
        assert all(rep[r]["libcache"] == d for r in rs), rep
        # ld.so maps its cache and libc, the only library: their bytes travelled
        # once for the host's eight ranks (two psets)
        want = libc_size + os.path.getsize("/etc/ld.so.cache")
        assert sum(int(rep[r]["libfetched"]) for r in rs) == want, (d, rep)
        assert all(int(rep[r]["libmaps"]) >= 1 and rep[r]["libcopied"] == "0" for r in rs), rep
    assert re.search(r"library cache \(all ranks\): \d+ mappings from the cache", p.stderr), p.stderr
    # the user's next job finds every library fetched: nothing travels again
    p = lc.run("run", "--block", "L", "-n", "8", "--label", str(LIBMAPS))
    rep = reports(lc, last_job(lc))
    assert all(v["libfetched"] == "0" and int(v["libmaps"]) >= 1 for v in rep.values()), rep
    for r, lines in by_rank(p.stdout).items():
        assert libc_of(maps_of(lines))[1].rpartition("/")[0] in dirs, (r, lines)
    # another user's job: root's caches go, that user's are made
    run_as_nobody(lc)
    assert not any(os.path.lexists(d) for d in dirs)
    assert all(os.path.isdir(d) for d in cache_dirs(lc, pwd.getpwnam("nobody").pw_uid))


def test_mpi_program_under_the_cache_and_without_it(lc: Machine) -> None:
    dirs = cache_dirs(lc)
    run_as_nobody(lc)           # root's cache starts empty
    before = pread_bytes(lc)
    p = lc.run("run", "--block", "L", "-n", "8", "--label", "-v", str(MPI_LIBMAPS), timeout=300)
    assert "libmaps: allreduce ok (36)" in p.stdout, p.stdout
    on = pread_bytes(lc)
    ranks = by_rank(p.stdout)
    rep = reports(lc, last_job(lc))
    listed: dict[str, dict[str, int]] = {}
    for r, lines in ranks.items():
        maps = maps_of(lines)
        (mpich,) = [k for k in maps if "/libmpich.so" in k]
        assert maps[mpich][1].rpartition("/")[0] in dirs, f"rank {r}: {mpich} mapped from {maps[mpich][1]}"
        for name, (size, src) in maps.items():
            d = src.rpartition("/")[0]
            if d in dirs:
                listed.setdefault(d, {})[name] = size
    assert len(listed) == 1, listed
    for d, libs in listed.items():
        fetched = sum(int(v["libfetched"]) for v in rep.values() if v["libcache"] == d)
        # every library the host's ranks show mapped from the cache was fetched
        # once (ld.so also fetches UCX modules it then drops for missing libraries)
        assert sum(libs.values()) <= fetched < 2 * sum(libs.values()), (d, fetched, sum(libs.values()))

    # the same job copying into big memory: every rank ships every library
    p = lc.run("run", "--block", "L", "-n", "8", "--label", "-v", "--env", "LATTICE_LIBCACHE=0",
               str(MPI_LIBMAPS), timeout=300)
    assert "libmaps: allreduce ok (36)" in p.stdout, p.stdout
    assert "cache off: switched-off" in p.stderr, p.stderr
    for r, lines in by_rank(p.stdout).items():
        maps = maps_of(lines)
        assert not any(src.startswith(PREFIX) for _, src in maps.values()), (r, maps)
    off = pread_bytes(lc)
    for loc in on:
        with_cache, copying = on[loc] - before.get(loc, 0), off[loc] - on[loc]
        assert copying > 3 * with_cache, f"{loc}: {copying} pread bytes copying vs {with_cache} with the cache"


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_mpi_ranks_do_not_load_hwlocs_idle_plugins(lc: Machine, kernel: str) -> None:
    """MPI_Init asks hwloc for the topology: without the job's say-so its idle plug-ins
    (and the X11 and libxml2 libraries they need) stay out of every rank."""
    def libraries(*env: str) -> set[str]:
        p = lc.run("run", "--block", "L", "-n", "2", "--label", "--kernel", kernel, *env, str(MPI_LIBMAPS))
        assert "libmaps: allreduce ok (3)" in p.stdout, p.stdout
        return {os.path.basename(name) for lines in by_rank(p.stdout).values() for name in maps_of(lines)}

    plugins = {"hwloc_gl.so", "hwloc_xml_libxml.so", "libX11.so.6", "libxml2.so.2"}
    assert not plugins & libraries()
    assert plugins <= libraries("--env", "HWLOC_PLUGINS_BLACKLIST="), "loaded when the job asks for them"


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_mpi_ranks_do_not_load_ucxs_idle_modules(lc: Machine, kernel: str) -> None:
    """MPI_Init loads UCX's transport modules: on a host without an RDMA device
    its ib and rdmacm modules (and libibverbs and librdmacm under them) stay
    out of every rank, and under cnk their library searches are not shipped;
    a job that names UCX_MODULES itself gets them."""
    if any(Path("/sys/class/infiniband").glob("*")):
        pytest.skip("this host has an RDMA device: UCX's ib modules find it")

    def run(*env: str) -> tuple[set[str], str]:
        p = lc.run("run", "--block", "L", "-n", "2", "--label", "-v", "--kernel", kernel, *env, str(MPI_LIBMAPS))
        assert "libmaps: allreduce ok (3)" in p.stdout, p.stdout
        return {os.path.basename(name) for lines in by_rank(p.stdout).values() for name in maps_of(lines)}, p.stderr

    idle = {"libuct_ib.so.0", "libuct_rdmacm.so.0", "libibverbs.so.1", "librdmacm.so.1"}
    libs, err = run()
    assert not idle & libs, libs
    assert "libuct_cma.so.0" in libs, "the modules that find something still load"
    assert "left out: UCX_MODULES=^ib,rdmacm" in err, err
    libs_all, err_all = run("--env", "UCX_MODULES=all")
    assert idle <= libs_all and "UCX_MODULES=^" not in err_all, "loaded when the job asks for them"
    if kernel == "cnk":
        shipped = [int(re.search(r"(\d+) shipped", e).group(1)) for e in (err, err_all)]  # type: ignore[union-attr]
        assert shipped[0] < shipped[1] - 50, f"their opens were shipped calls: {shipped}"


def test_a_file_changed_in_place_is_not_served_stale(lc: Machine) -> None:
    work = Path(tempfile.mkdtemp(dir=lc.work))
    os.chmod(work, 0o755)
    for v in ("one", "two"):
        (work / f"v{v}.c").write_text(f'const char *version(void) {{ return "{v}"; }}\n')
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(work / f"lib{v}.so"), str(work / f"v{v}.c")],
                       check=True)
    lib = work / "libver.so"
    shutil.copyfile(work / "libone.so", lib)
    assert lib.stat().st_size == (work / "libtwo.so").stat().st_size, "same size: only mtime tells them apart"
    # in one job: load it, overwrite it in place (same inode, same size), load it again
    p = lc.run("run", "--block", "L", "-n", "1", "-v", str(LIBMAPS), str(lib),
               f"={work / 'libtwo.so'}:{lib}", str(lib))
    assert re.findall(r"^version: \S+ (\w+)$", p.stdout, re.M) == ["one", "two"], p.stdout
    assert (reports(lc, last_job(lc))[0]["libcopied"]) == "0"
    # and in the next job, after the file is replaced again
    shutil.copyfile(work / "libone.so", lib)
    p = lc.run("run", "--block", "L", "-n", "2", "--label", str(LIBMAPS), str(lib))
    assert sorted(re.findall(r"version: \S+ (\w+)", p.stdout)) == ["one", "one"], p.stdout


def test_the_directory_belongs_to_the_jobs_user(lc: Machine) -> None:
    nobody = pwd.getpwnam("nobody")
    p = lc.run("run", "--block", "L", "-n", "2", "--label", "--user", "nobody", "--cwd", "/tmp", str(LIBMAPS))
    for r, lines in by_rank(p.stdout).items():
        (d,) = [l.split() for l in lines if l.startswith("libmaps: dir ")]
        assert d[2] in cache_dirs(lc, nobody.pw_uid), d
        assert (d[3], int(d[4]), int(d[5])) == ("700", nobody.pw_uid, nobody.pw_gid), d
        assert libc_of(maps_of(lines))[1].startswith(d[2] + "/")


def test_killed_job_leaves_a_complete_cache_which_the_next_block_finds_warm(lc: Machine) -> None:
    dirs = cache_dirs(lc)
    run_as_nobody(lc)
    job = lc.popen("run", "--block", "L", "-n", "8", "--label", str(EXAMPLES / "sleeper"), "600")
    assert job.stdout is not None
    for _ in range(8):
        assert "sleeping" in job.stdout.readline()
    for d in dirs:     # each pset's ranks are in main(): libc is cached, complete
        names = os.listdir(d)
        assert any(not n.endswith((".lock", ".part")) for n in names), (d, names)
        st = os.lstat(d)
        assert (st.st_mode & 0o7777, st.st_uid) == (0o700, 0), (d, oct(st.st_mode))
    job.send_signal(signal.SIGINT)
    job.communicate(timeout=600)
    assert job.returncode == 130
    assert not [n for d in dirs for n in os.listdir(d) if n.endswith(".part")], "no half-fetched file is left"
    # the next job of the user is served what the killed one fetched
    lc.run("run", "--block", "L", "-n", "8", "--label", str(EXAMPLES / "sleeper"), "0")
    rep = reports(lc, last_job(lc))
    assert all(v["libfetched"] == "0" and v["libcache"] in dirs for v in rep.values()), rep
    # the cache is the machine's, not the block's: it outlives the free, and
    # the user's job in the next block (new ciods) fetches nothing
    lc.run("free", "L")
    try:
        assert all(os.path.isdir(d) for d in dirs), f"{dirs} went with the block"
    finally:
        lc.run("boot", "L")
    assert cache_dirs(lc) == dirs
    p = lc.run("run", "--block", "L", "-n", "8", "--label", "-v", str(EXAMPLES / "sleeper"), "0")
    rep = reports(lc, last_job(lc))
    assert all(v["libfetched"] == "0" and v["libcache"] in dirs and int(v["libmaps"]) >= 1
               for v in rep.values()), rep
    # another user's job in that block empties it: root's cache goes
    run_as_nobody(lc)
    assert not any(os.path.lexists(d) for d in dirs)


@pytest.mark.parametrize("plant", ["symlink", "foreign-directory"])
def test_a_planted_cache_path_is_refused_and_the_job_copies(lc: Machine, plant: str) -> None:
    target = Path(tempfile.mkdtemp(prefix="lattice-planted-"))
    os.chmod(target, 0o777)
    nobody = pwd.getpwnam("nobody")
    dirs = cache_dirs(lc)
    run_as_nobody(lc)           # root's caches gone: the names are free to plant
    try:
        for d in dirs:
            if plant == "symlink":
                os.symlink(target, d)
            else:
                os.mkdir(d)
                os.chmod(d, 0o777)
                os.chown(d, nobody.pw_uid, nobody.pw_gid)
        p = lc.run("run", "--block", "L", "-n", "8", "--label", "-v", str(LIBMAPS))
        ranks = by_rank(p.stdout)
        assert sorted(ranks) == list(range(8))
        for r, lines in ranks.items():
            src = libc_of(maps_of(lines))[1]
            assert not src.startswith(PREFIX), f"rank {r} used a planted {plant}: {src}"
        word = "refused-not-a-directory" if plant == "symlink" else "refused-owner-or-mode"
        assert f"cache off: {word}" in p.stderr, p.stderr
        assert "library cache" in lc.run("ras").stdout
        assert os.listdir(target) == [], "nothing was written through the planted path"
        for d in dirs:
            assert os.path.islink(d) == (plant == "symlink"), f"{d}: somebody else's, left alone"
    finally:
        for d in dirs:
            if os.path.islink(d):
                os.unlink(d)
            elif os.path.isdir(d):
                shutil.rmtree(d)
        shutil.rmtree(target)
    p = lc.run("run", "--block", "L", "-n", "2", "--label", str(LIBMAPS))
    assert all(libc_of(maps_of(ls))[1].startswith(PREFIX) for ls in by_rank(p.stdout).values()), p.stdout


def test_a_new_ciod_removes_the_caches_of_one_that_is_gone(lc: Machine) -> None:
    dead = int(Path("/proc/sys/kernel/pid_max").read_text())
    while os.path.exists(f"/proc/{dead}") or any(Path("/dev/shm").glob(f"lattice-libcache-{dead}*")):
        dead -= 1
    ours = next(iter(cache_dirs(lc)))
    other = next(f"{PREFIX}m{k:08x}-0" for k in range(1, 1 << 16) if f"{PREFIX}m{k:08x}-0" != ours
                 and not os.path.lexists(f"{PREFIX}m{k:08x}-0"))
    # an older ciod's per-job name, two users' caches of an older ciod, and
    # an unused cache of another machine (gone, as far as anyone knows)
    left = [Path(f"{PREFIX}{dead}"), Path(f"{PREFIX}{dead}-0"), Path(f"{PREFIX}{dead}-65534"), Path(other)]
    busy = Path(f"{PREFIX}m{int(other[-10:-2], 16) ^ 0x5a5a5a5a:08x}-0")
    for d in left + [busy]:
        d.mkdir(mode=0o700)
        (d / "sub").mkdir()
        (d / "sub" / "file").write_text("left over\n")
    import fcntl
    lock = os.open(busy, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(lock, fcntl.LOCK_SH)        # a job of that machine runs in it
    lc.run("run", "--block", "L", "-n", "2", str(LIBMAPS))      # this machine's own cache exists
    assert os.path.isdir(ours)
    try:
        lc.run("free", "L")
        lc.run("boot", "L")
        wait_for(lambda: not any(d.exists() for d in left), f"{left} to be removed by the new I/O nodes")
        assert os.path.isdir(ours), "this machine's cache is kept for its next block"
        assert (busy / "sub" / "file").exists(), "a cache a job runs in is left alone"
    finally:
        os.close(lock)
        for d in left + [busy]:
            shutil.rmtree(d, ignore_errors=True)
