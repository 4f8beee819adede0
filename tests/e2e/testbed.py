"""The multi-host testbed (scripts/testbed.sh) for tests: bring it up, use its hosts, take it down.

Tests that need several hosts use `cluster_up()` in a module fixture; it needs root.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "testbed.sh"
STATE_DIR = Path("/run/lattice-testbed")  # the script's default
TESTS_LOCK = "/run/lock/lattice-testbed-tests.lock"


@dataclass
class Cluster:
    hosts: list[str]
    dir: Path
    env: dict[str, str]  # ours plus testbed.env: SLURM_CONF, the ssh config, the host list

    @property
    def ssh_config(self) -> str:
        return self.env["LATTICE_TESTBED_SSH_CONFIG"]

    def run(self, *cmd: str, timeout: float = 60, check: bool = True,
            cwd: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs a command in the root namespace with the testbed's environment (srun, sbatch...)."""
        p = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def ssh(self, host: str, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("ssh", "-F", self.ssh_config, host, command, check=check)

    def in_host(self, host: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a command inside a host's namespaces directly (no ssh): what the host really is."""
        return self.run(str(SCRIPT), "exec", host, *cmd, check=check)


def source_env(path: Path) -> dict[str, str]:
    """os.environ plus what `source path` exports."""
    out = subprocess.run(["bash", "-c", '. "$1" && env -0', "-", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


def script(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@contextmanager
def cluster_up(n: int = 4) -> Iterator[Cluster]:
    """A testbed of n hosts for the duration; taken down afterwards even on failure.

    Test runs on this machine (other worktrees' too) take turns: the hosts' names
    are the machine's. Refuses to take over a testbed brought up by hand (taking
    it down afterwards would surprise whoever is using it)."""
    with open(TESTS_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if script("status").returncode == 0:
            raise RuntimeError("a testbed is already up: run scripts/testbed.sh down first")
        try:
            p = script("up", str(n))
            if p.returncode != 0:
                raise AssertionError(f"testbed.sh up {n} exited {p.returncode}\n{p.stderr}")
            env = source_env(STATE_DIR / "testbed.env")
            yield Cluster(hosts=env["LATTICE_TESTBED_HOSTS"].split(), dir=STATE_DIR, env=env)
        finally:
            script("down")


def daemon_pids(tb: Cluster) -> dict[str, int]:
    """The daemons the testbed started, by name (slurmctld, munged, sshd-hX, slurmd-hX)."""
    return {f.name: int(f.read_text()) for f in (tb.dir / "pids").iterdir()}


def alive(pid: int) -> bool:
    """Whether pid still runs a program the testbed started: each names the state dir
    in its arguments (so a pid reused by another program does not count)."""
    try:
        return str(STATE_DIR).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def running(pid: int) -> bool:
    """Whether pid is a live process: a zombie (ended, waiting for init to reap it) is not."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def namespace_pids(host: str) -> list[int]:
    p = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split()]


def leftovers(hosts: list[str]) -> list[str]:
    """What of a testbed remains on this machine: namespaces, links, mounts, names, files."""
    found = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {h}" for h in hosts if h in netns]
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    found += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
              if line.split(":")[1].strip().startswith("ltb")]
    found += [f"mount {line.split()[4]}" for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if str(STATE_DIR) in line.split()[4]]
    names = set(hosts) | {"tbhead"}
    found += [f"/etc/hosts: {line}" for line in Path("/etc/hosts").read_text().splitlines()
              if "lattice-testbed" in line or names & set(line.split()[1:])]
    if STATE_DIR.exists():
        found.append(f"directory {STATE_DIR}")
    if os.path.exists("/run/netns") and any(h in os.listdir("/run/netns") for h in hosts):
        found.append("/run/netns entries")
    return found


def build_hosts_probe(d: Path) -> str:
    """tests/e2e/mpi/hosts_probe.c built into d (readable by the testbed's hosts): the MPI program
    that says which host each rank ran on."""
    os.chmod(d, 0o755)
    exe = d / "hosts_probe"
    subprocess.run(["mpicc.mpich", "-O2", "-o", str(exe), str(ROOT / "tests/e2e/mpi/hosts_probe.c")], check=True)
    return str(exe)
