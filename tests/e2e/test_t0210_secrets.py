"""Secrets are their owner's: a booted block's key lives only in files of the
machine directory that only its owner (root here) can read, never in the
database, a daemon's command line or environment, or a job's environment.
The attacker is user `nobody`: a local process, and a job (`--user nobody`)
in cnk and in Linux mode."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, ON_POSTGRES, Machine, make_machine

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as user nobody")

PROBE_SRC = Path(__file__).with_name("secrets_probe.c")
NOBODY = pwd.getpwnam("nobody")

# the SQLite database's files (none when the machine's database is PostgreSQL)
DB_FILES = () if ON_POSTGRES else ("lattice.db", "lattice.db-wal", "lattice.db-shm")

# what each path of the machine directory must be; the socket directory is
# run/ unless the home is too deep for unix socket paths
MODES = {
    **{f: 0o600 for f in DB_FILES},
    "blocks": 0o700, "blocks/S": 0o700, "blocks/S/key": 0o600,
    "blocks/S/node-0.json": 0o600, "blocks/S/node-3.json": 0o600,
    "ras": 0o700, "ras/S-ionode0.log": 0o600, "ras/S-ionode1.log": 0o600, "run": 0o700,
}


@pytest.fixture(scope="module")
def sm(built: Path) -> Iterator[Machine]:
    """A 1x1x4 machine (two psets of 2), block S booted, in a directory every
    user can reach: pytest's own are private, which would hide the home from
    nobody whatever its modes."""
    top = Path(tempfile.mkdtemp(prefix="lattice-test-secrets-"))
    os.chmod(top, 0o755)
    m = make_machine(top, "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "S", "--shape", "1x1x4")
    m.run("boot", "S")
    yield m
    m.run("free", "S", check=False)
    shutil.rmtree(top, ignore_errors=True)
    shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture(scope="module")
def key(sm: Machine) -> str:
    text = (sm.home / "blocks/S/key").read_text().strip()
    assert len(text) == 64
    return text


@pytest.fixture(scope="module")
def probe(sm: Machine) -> Path:
    exe = sm.work / "secrets_probe"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(PROBE_SRC)], check=True)
    os.chmod(exe, 0o755)
    return exe


def as_nobody(paths: list[Path]) -> dict[str, str]:
    """What a local process of user nobody gets opening (or listing) each path."""
    code = ("import json, os, sys\n"
            "out = {}\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        if os.path.isdir(p): os.listdir(p)\n"
            "        else: open(p, 'rb').read()\n"
            "        out[p] = 'ok'\n"
            "    except OSError as e:\n"
            "        out[p] = os.strerror(e.errno)\n"
            "print(json.dumps(out))\n")

    def drop() -> None:
        os.setgroups([])
        os.setgid(NOBODY.pw_gid)
        os.setuid(NOBODY.pw_uid)

    p = subprocess.run(["/usr/bin/python3", "-c", code, *map(str, paths)], preexec_fn=drop, cwd="/",
                       capture_output=True, text=True, check=True, timeout=600)   # a hang guard
    return dict(json.loads(p.stdout))


def secrets(m: Machine) -> list[Path]:
    h = m.home
    return [*(h / f for f in DB_FILES), h / "blocks", h / "blocks/S",
            h / "blocks/S/key", h / "blocks/S/node-0.json", h / "blocks/S/node-3.json", h / "ras",
            h / "ras/S-ionode0.log"]


def holding(m: Machine, needle: bytes) -> list[Path]:
    """Every file under the machine directory whose bytes contain needle."""
    found = []
    for dirpath, _, files in os.walk(m.home):
        for f in files:
            p = Path(dirpath) / f
            if p.is_file() and needle in p.read_bytes():
                found.append(p)
    return found


@pytest.fixture
def running(sm: Machine) -> Iterator[None]:
    """A job runs: `lattice run` holds the database open, so its -wal and -shm
    files exist (SQLite removes them when the last connection closes)."""
    # long enough to outlast the tests however loaded the host: ended below
    job = sm.popen("run", "--block", "S", "-n", "1", str(EXAMPLES / "sleeper"), "3600")
    try:
        assert job.stdout is not None
        assert "sleeping" in job.stdout.readline()
        assert all((sm.home / f).exists() for f in DB_FILES)
        yield
    finally:
        job.terminate()
        job.communicate(timeout=600)     # a hang guard


def test_modes_of_the_machine_directory(sm: Machine, running: None) -> None:
    m = sm
    for rel, mode in MODES.items():
        st = os.stat(m.home / rel)
        assert stat.S_IMODE(st.st_mode) == mode, f"{rel}: {stat.S_IMODE(st.st_mode):04o}, want {mode:04o}"
        assert st.st_uid == 0, rel


def test_nobody_cannot_read_keys_personalities_or_the_database(sm: Machine, key: str, running: None) -> None:
    m = sm
    got = as_nobody([m.home / "machine.toml", *secrets(m)])
    # the probe is not refused merely because the home is out of reach
    assert got.pop(str(m.home / "machine.toml")) == "ok"
    assert got == {str(p): "Permission denied" for p in secrets(m)}
    # and every file that holds the key is among those it cannot read
    files = holding(m, key.encode()) + holding(m, bytes.fromhex(key))
    assert {p.name for p in files} == {"key", "node-0.json", "node-1.json", "node-2.json", "node-3.json"}
    assert set(as_nobody(files).values()) == {"Permission denied"}


def test_database_never_holds_the_key(sm: Machine, key: str) -> None:
    m = sm
    m.run("run", "--block", "S", "-n", "1", "/bin/true", check=False)   # writes after the boot
    m.run("ras")
    from lattice.state import db
    assert "key" not in m.rows("SELECT * FROM blocks")[0].keys()
    for table in db.tables():           # no row of any table holds it, whichever the backend
        text = repr([tuple(r) for r in m.rows(f"SELECT * FROM {table}")])
        assert key not in text and key.upper() not in text, table
    for name in DB_FILES:               # nor a byte of SQLite's files (a PostgreSQL server's are not ours)
        f = m.home / name
        if f.exists():
            data = f.read_bytes()
            assert key.encode() not in data and key.upper().encode() not in data, f.name
            assert bytes.fromhex(key) not in data, f.name


def run_probe(m: Machine, probe: Path, kernel: str) -> list[str]:
    p = m.run("run", "--block", "S", "-n", "1", "--user", "nobody", "--kernel", kernel, "--cwd", "/tmp",
              str(probe), *map(str, secrets(m)))
    return p.stdout.splitlines()


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_job_of_nobody_sees_no_key(sm: Machine, key: str, probe: Path, kernel: str) -> None:
    m = sm
    lines = run_probe(m, probe, kernel)
    assert lines[0] == f"uid {NOBODY.pw_uid}"
    opens = [ln for ln in lines if ln.startswith("open ")]
    assert opens == [f"open {p}: Permission denied" for p in secrets(m)]
    env = [ln[4:] for ln in lines if ln.startswith("env ")]
    pers = [e for e in env if e.startswith("LATTICE_PERSONALITY=")]
    assert len(pers) == 1 and "block=S;" in pers[0], env
    assert "key" not in pers[0].lower()
    for e in env:
        assert key not in e.lower(), e


def test_daemons_command_lines_and_environments_hold_no_key(sm: Machine, key: str) -> None:
    m = sm
    ciods, cnodes = m.processes("ciod", "S"), m.processes("cnode", "S")
    assert len(ciods) == 2 and len(cnodes) == 4, (ciods, cnodes)
    for pid in ciods + cnodes:
        for what in ("cmdline", "environ"):
            data = Path(f"/proc/{pid}/{what}").read_bytes()
            assert key.encode() not in data and key.upper().encode() not in data, (pid, what)
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert str(m.home / "blocks/S").encode() in b" ".join(argv)   # a path to the secret, not the secret


def test_free_removes_the_key_and_personalities(sm: Machine, key: str) -> None:
    m = sm
    m.run("free", "S")
    assert not (m.home / "blocks/S/key").exists()
    assert list((m.home / "blocks/S").glob("*.json")) == []
    assert holding(m, key.encode()) == [] and holding(m, bytes.fromhex(key)) == []
    p = m.run("counters", "S", check=False)     # needs the key: there is none to read
    assert p.returncode == 1 and "block S is Free: boot it first" in p.stderr, p
