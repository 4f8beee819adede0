"""Placement over several hosts (issue 15): the testbed's four hosts (network
namespaces with their own addresses, hostnames, sshd and slurmd) run the
psets of one block, placed over ssh from a hostfile and by Slurm (salloc,
sbatch, srun); an MPICH job spans them, its file I/O goes to each host's
I/O node, its output and exit status come back; a host whose daemons are
killed mid-job ends the job everywhere at once."""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import LATTICE, ROOT, Machine, make_machine, wait_for
from testbed import Cluster, build_hosts_probe, cluster_up, namespace_pids

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the testbed's namespaces and daemons"),
    pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH (mpicc.mpich) not installed"),
]

HOSTS = ["h1", "h2", "h3", "h4"]
SHAPE = ("--shape", "2x2x2", "--pset-size", "2")       # 4 psets of 2: one a host
RANK_LINE = re.compile(r"rank (\d+) of 8 on (h\d) sum 28")


@pytest.fixture(scope="module")
def tb() -> Iterator[Cluster]:
    with cluster_up(4) as t:
        yield t


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_hosts_probe(tmp_path_factory.mktemp("hosts_probe"))


def machine_on(tb: Cluster, tmp: Path, *placement: str) -> Machine:
    m = make_machine(tmp, *SHAPE, *placement)
    m.env.update({k: v for k, v in tb.env.items() if k.startswith(("SLURM_CONF", "LATTICE_TESTBED"))})
    return m


@pytest.fixture
def ssh_machine(tb: Cluster, tmp_path: Path) -> Iterator[Machine]:
    m = machine_on(tb, tmp_path, "--placement", "ssh", "--hostfile", tb.env["LATTICE_TESTBED_HOSTFILE"],
                   "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
    m.run("block", "create", "all", "--shape", "2x2x2")
    yield m
    m.run("free", "all", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def expected_host(rank: int) -> str:
    """Rank r runs on compute node r (one a node), in pset r // 2, on host h(pset + 1)."""
    return HOSTS[rank // 2]


def check_job(out: str, work: Path) -> None:
    """Every rank ran on its pset's host, and its file, written through that
    host's I/O node, says so."""
    seen = {int(r): h for r, h in RANK_LINE.findall(out)}
    assert seen == {r: expected_host(r) for r in range(8)}, out
    for r in range(8):
        assert (work / f"rank-{r}.txt").read_text() == f"{r} {expected_host(r)}\n"


def lattice_processes(host: str) -> list[tuple[int, str]]:
    """Lattice's processes inside a testbed host: agents, daemons and ranks."""
    out = []
    for pid in namespace_pids(host):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if re.search(r"lattice\.nodes\.agent|/ciod |/cnode |^cnk |ciod-worker|hosts_probe", argv):
            out.append((pid, argv))
    return out


def test_ssh_placement_spans_four_hosts(tb: Cluster, ssh_machine: Machine, probe: str) -> None:
    m = ssh_machine
    # chosen at init, recorded, shown by `lattice machine`
    listing = m.run("machine").stdout
    for p, h in enumerate(HOSTS):
        assert re.search(rf"R00-M0-N00-I:J0{p}\s+io\s+-\s+{p}\s+-\s+{h}\b", listing), listing
    assert "placement ssh" in listing
    m.run("boot", "all")
    # each host runs its own pset's daemons, in its own namespace
    for h in HOSTS:
        progs = " ".join(a for _, a in lattice_processes(h))
        assert "lattice.nodes.agent" in progs and progs.count("/cnode ") == 2 and progs.count("/ciod ") == 1, (h, progs)
        # its agent said which cores it has and which hwloc plug-ins and UCX modules find nothing there
        cache = (m.home / "hosts" / h).read_text()
        assert re.search(r"^hwloc-idle .*hwloc_pci\.so", cache, re.M) and "\ncore " in cache, cache
        assert re.search(r"^ucx-idle ib rdmacm$", cache, re.M), cache
    for kernel in ("cnk", "linux"):
        for f in m.work.glob("rank-*"):
            f.unlink()
        # Linux mode across hosts is the preload client's here: sandboxed MPICH across hosts can hang in
        # MPI_Finalize (open: docs/architecture.md "Linux nodes: the sandbox"); the sandbox across hosts
        # is t0830's
        mode = ["--no-sandbox"] if kernel == "linux" else []
        r = m.run("run", "-n", "8", "--kernel", kernel, *mode, "--block", "all", "--cwd", str(m.work), probe,
                  str(m.work), "5", check=False)
        assert r.returncode == 3, r.stderr
        assert "rank 5 (R00-M0-N00-C:J05) exited with status 3" in r.stderr
        check_job(r.stdout, m.work)
    # the PMI fence through a chain of I/O nodes on four hosts, ciod to ciod over TCP
    env = dict(m.env, LATTICE_PMI_FANOUT="1")
    r = subprocess.run([*LATTICE, "run", "-v", "-n", "8", "--block", "all", probe, str(m.work), "-1"], env=env,
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert r.returncode == 0, r.stderr
    check_job(r.stdout, m.work)
    for p in range(3):
        assert f"PMI fence tree: R00-M0-N00-I:J0{p} sends to R00-M0-N00-I:J0{p + 1}" in r.stderr, r.stderr
    assert "FENCE_OUT to 1 of 4 I/O nodes" in r.stderr
    # every host's I/O node did the I/O of its own ranks
    counters = json.loads(m.run("counters", "all", "--json").stdout)["ionodes"]
    assert sorted(c["location"] for c in counters) == [f"R00-M0-N00-I:J0{p}" for p in range(4)]
    for c in counters:
        assert any("open" in k.lower() and v > 0 for k, v in c["calls"].items()), c
        assert any("write" in k.lower() and v > 0 for k, v in c["calls"].items()), c


def test_io_hosts_serve_compute_nodes_on_other_hosts_over_tcp(tb: Cluster, tmp_path: Path, probe: str) -> None:
    """role=io: the I/O nodes on h1, each pset's compute nodes on h2..h4,
    shipping their calls over TCP with the same protocol."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1 role=io\nh2\nh3\nh4\n")
    m = machine_on(tb, tmp_path, "--placement", "ssh", "--hostfile", str(hostfile),
                   "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
    try:
        rows = [line.split() for line in m.run("machine").stdout.splitlines()[2:]]
        assert {r[5] for r in rows if r[1] == "io"} == {"h1"}
        compute_host = {int(r[3]): r[5] for r in rows if r[1] == "compute"}
        assert set(compute_host.values()) == {"h2", "h3", "h4"}
        m.run("block", "create", "all", "--shape", "2x2x2")
        m.run("boot", "all")
        assert [a for _, a in lattice_processes("h1") if "/cnode " in a] == []
        # both ends of every compute node's TCP connection send keepalive probes: the
        # heartbeat that ends a node whose I/O node's host vanished (and the reverse)
        # (ss shows one timer: a connection with data in flight shows its
        # retransmit timer, "on", until acknowledged; so each is awaited)
        h1_addr = tb.run("getent", "hosts", "h1").stdout.split()[0]

        conns: dict[str, list[str]] = {}

        def keepalive(h: str, ours: Callable[[str], bool], n: int) -> bool:
            """Whether h's n or more connections of ours all show keepalive now,
            or fewer than n are there (both end the wait); conns[h]: them."""
            conns[h] = [ln for ln in tb.in_host(h, "ss", "-tno").stdout.splitlines() if ours(ln)]
            return len(conns[h]) < n or all("timer:(keepalive" in ln for ln in conns[h])
        for h in ("h2", "h3", "h4"):
            wait_for(lambda: keepalive(h, lambda ln: f" {h1_addr}:" in ln, 2))
            assert len(conns[h]) >= 2 and all("timer:(keepalive" in ln for ln in conns[h]), conns[h]
        wait_for(lambda: keepalive("h1", lambda ln: re.search(r"10\.213\.15\.[234]:\d+\s", ln) is not None, 8))
        assert len(conns["h1"]) >= 8 and all("timer:(keepalive" in ln for ln in conns["h1"]), conns["h1"]
        r = m.run("run", "-n", "8", "--block", "all", probe, str(m.work), "-1")
        seen = {int(rank): h for rank, h in RANK_LINE.findall(r.stdout)}
        assert seen == {rank: compute_host[rank // 2] for rank in range(8)}, r.stdout
        for rank in range(8):       # written by the I/O node on h1, for a rank elsewhere
            assert (m.work / f"rank-{rank}.txt").read_text() == f"{rank} {compute_host[rank // 2]}\n"
        for p in range(4):
            log = (m.home / "blocks" / "all" / "log" / "h1" / f"ciod-{p}.log").read_text()
            peers = re.findall(r"compute node \S+ \(node \d\) connected from (\S+):\d+", log)
            assert len(peers) == 2 and all(a.startswith("10.213.15.") and a != h1_addr for a in peers), log
    finally:
        m.run("free", "all", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


def test_the_key_reaches_hosts_only_through_the_channel(tb: Cluster, ssh_machine: Machine) -> None:
    m = ssh_machine
    m.run("boot", "all")
    key = (m.home / "blocks" / "all" / "key").read_text().strip()
    assert len(key) == 64
    for h in HOSTS:
        for pid, argv in lattice_processes(h):
            assert key not in argv
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert key not in environ, (h, argv)
    # the launchers on this host hold no key in their command lines either
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                assert key not in (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                pass
    # each host's directory is private, and the key never touches its disk:
    # its daemons read it (and their personalities) on their standard input
    digest = hashlib.sha256(str(m.home.absolute()).encode()).hexdigest()[:12]
    dirs = [Path(f"/tmp/lattice-{os.getuid()}-{digest}/{h}/all") for h in HOSTS]
    for d in dirs:
        assert d.is_dir() and d.stat().st_mode & 0o077 == 0
        assert not list(d.glob("key")) and not list(d.glob("node-*.json")), list(d.iterdir())
    m.run("free", "all")
    for h in HOSTS:
        assert lattice_processes(h) == []


def test_killing_a_hosts_daemons_ends_the_job_everywhere(tb: Cluster, ssh_machine: Machine, probe: str) -> None:
    m = ssh_machine
    m.run("boot", "all")
    job = subprocess.Popen([*LATTICE, "run", "-n", "8", "--block", "all", probe, str(m.work), "-1", "spin"],
                           env=m.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    started: list[str] = []
    reader = threading.Thread(target=lambda: started.extend(job.stdout), daemon=True)   # type: ignore[arg-type]
    reader.start()
    wait_for(lambda: sum("started" in s for s in started) == 8)
    victims = lattice_processes("h3")
    assert any("/ciod " in a for _, a in victims) and any(a.startswith("cnk ") for _, a in victims)
    for pid, _ in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    status = job.wait(timeout=600)     # a hang guard: the ranks spin for ever
    err = job.stderr.read()   # type: ignore[union-attr]
    assert status == 255, err
    assert "R00-M0-N00-I:J02 lost" in err, err
    # every other host's ranks are gone (they spin for ever: only the job's end stops them)
    wait_for(lambda: not [a for h in HOSTS for _, a in lattice_processes(h) if "hosts_probe" in a])
    ras = m.run("ras").stdout
    assert re.search(r"FATAL\s+CIOD\s+R00-M0-N00-I:J02\s+I/O node R00-M0-N00-I:J02 lost", ras), ras
    blocks = m.run("blocks").stdout
    assert re.search(r"all\s+Error", blocks), blocks
    # the lost host is named; freeing and booting again brings the block back
    listing = m.run("machine").stdout
    assert "LOST" in listing, listing
    m.run("free", "all")
    m.run("boot", "all")
    r = m.run("run", "-n", "8", "--block", "all", probe, str(m.work), "-1")
    check_job(r.stdout, m.work)


def test_a_host_that_cannot_hold_the_ranks_is_named_before_launch(tb: Cluster, tmp_path: Path, probe: str) -> None:
    """Each host's agent reads its limits at boot; `lattice run` checks that
    host's ranks against them and refuses before anything starts."""
    m = machine_on(tb, tmp_path, "--placement", "ssh", "--hostfile", tb.env["LATTICE_TESTBED_HOSTFILE"],
                   "--ssh-command", tb.env["LATTICE_TESTBED_SSH"], "--memory", "64T")
    try:
        m.run("block", "create", "all", "--shape", "2x2x2")
        m.run("boot", "all")
        for h in HOSTS:
            facts = json.loads((m.home / "hosts" / f"{h}.capacity").read_text())
            assert facts["name"] == h and facts["pid_max"] > 0 and facts["mem_available"] > 0
        jobs_before = m.run("jobs").stdout
        r = m.run("run", "-n", "8", "--block", "all", probe, str(m.work), "-1", check=False)
        assert r.returncode != 0
        assert re.search(r"host h\d cannot hold 2 ranks", r.stderr), r.stderr
        assert not list(m.work.glob("rank-*")) and m.run("jobs").stdout == jobs_before
        # the block is untouched: a job that asks no big memory up front runs
        r = m.run("run", "-n", "8", "--block", "all", "--kernel", "linux", "--no-sandbox", "--cwd", str(m.work),
                  probe, str(m.work), "-1")
        check_job(r.stdout, m.work)
    finally:
        m.run("free", "all", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


def test_an_unreachable_host_fails_the_boot_clearly(tb: Cluster, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1\nh2\nh3\nnosuchhost\n")
    m = machine_on(tb, tmp_path, "--placement", "ssh", "--hostfile", str(hostfile),
                   "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
    m.run("block", "create", "all", "--shape", "2x2x2")
    r = m.run("boot", "all", check=False)
    assert r.returncode != 0
    assert "nosuchhost" in r.stderr and "ended before it was ready" in r.stderr, r.stderr
    assert re.search(r"all\s+Error", m.run("blocks").stdout)
    m.run("free", "all")
    for h in HOSTS:
        assert lattice_processes(h) == []


def test_bad_hostfiles_are_refused_at_init(tmp_path: Path) -> None:
    for text, why in (("h1 slots=x\n", "slots=N"), ("", "names no host"), ("h1\nh1\n", "listed twice"),
                      ("h1 slots=1\n", "cannot hold")):
        f = tmp_path / "hosts"
        f.write_text(text)
        home = tmp_path / f"home{abs(hash(text))}"
        env = dict(os.environ, LATTICE_HOME=str(home), PYTHONPATH=str(ROOT / "service"))
        p = subprocess.run([*LATTICE, "init", *SHAPE, "--placement", "ssh", "--hostfile", str(f)], env=env,
                           capture_output=True, text=True)
        assert p.returncode != 0 and why in p.stderr, (text, p.stderr)
        assert not (home / "machine.toml").exists()


@pytest.fixture
def slurm_machine(tb: Cluster, tmp_path: Path) -> Iterator[Machine]:
    m = machine_on(tb, tmp_path, "--placement", "slurm")
    yield m
    shutil.rmtree(m.work, ignore_errors=True)


def test_slurm_placement_in_salloc(tb: Cluster, slurm_machine: Machine, probe: str) -> None:
    m = slurm_machine
    p = subprocess.run(["salloc", "-N", "4", *LATTICE, "run", "-n", "8", probe, str(m.work), "6"], env=m.env,
                       capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert p.returncode == 3, p.stderr
    assert "rank 6 (R00-M0-N00-C:J06) exited with status 3" in p.stderr
    check_job(p.stdout, m.work)
    # the run booted and freed its block: nothing is left on any host
    for h in HOSTS:
        assert lattice_processes(h) == []


def test_slurm_placement_in_sbatch_and_srun(tb: Cluster, slurm_machine: Machine, probe: str) -> None:
    m = slurm_machine
    out = m.work / "batch.out"
    script = m.work / "job.sh"
    script.write_text(f"#!/bin/sh\nexec {' '.join(LATTICE)} run -n 8 {probe} {m.work} -1\n")
    script.chmod(0o755)
    p = subprocess.run(["sbatch", "--wait", "-N", "4", "-o", str(out), str(script)], env=m.env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr + out.read_text() if out.exists() else p.stderr
    check_job(out.read_text(), m.work)
    for f in m.work.glob("rank-*"):
        f.unlink()
    # lattice run itself as a job step (on the allocation's first host)
    p = subprocess.run(["salloc", "-N", "4", "srun", "-N", "1", "-n", "1", *LATTICE, "run", "-n", "8", probe,
                        str(m.work), "-1"], env=m.env, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    check_job(p.stdout, m.work)


def test_slurm_placement_outside_an_allocation_is_a_clear_error(tb: Cluster, slurm_machine: Machine) -> None:
    env = {k: v for k, v in slurm_machine.env.items() if not k.startswith("SLURM_JOB") and k != "SLURM_NODELIST"}
    p = subprocess.run([*LATTICE, "run", "-n", "2", "/bin/true"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode != 0
    assert "needs a Slurm allocation" in p.stderr and "salloc" in p.stderr, p.stderr
