"""Files are accessed with the job owner's identity (run as root with --user)."""
from __future__ import annotations

import os
import pwd

import pytest

from conftest import EXAMPLES, Machine

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a job as another user")


def test_unprivileged_job_cannot_read_protected_file(default_machine: Machine) -> None:
    m = default_machine
    work = m.work / "identity-read"
    work.mkdir()
    os.chmod(work, 0o777)
    secret = work / "secret"
    secret.write_text("root only\n")
    os.chmod(secret, 0o600)
    open_file = work / "public"
    open_file.write_text("everyone\n")
    os.chmod(open_file, 0o644)

    p = m.run("run", "--block", "R00", "-n", "1", "--user", "nobody", "--cwd", str(work),
              str(EXAMPLES / "catfile"), "secret", check=False)
    assert p.returncode == 1, p
    assert "secret: Permission denied" in p.stdout
    assert "root only" not in p.stdout

    p = m.run("run", "--block", "R00", "-n", "1", "--user", "nobody", "--cwd", str(work),
              str(EXAMPLES / "catfile"), "public")
    assert p.stdout == "everyone\n"

    # the same job as root reads it: the refusal above came from the identity
    p = m.run("run", "--block", "R00", "-n", "1", "--cwd", str(work), str(EXAMPLES / "catfile"), "secret")
    assert p.stdout == "root only\n"


def test_files_created_belong_to_the_job_owner(default_machine: Machine) -> None:
    m = default_machine
    work = m.work / "identity-write"
    work.mkdir()
    os.chmod(work, 0o777)
    nobody = pwd.getpwnam("nobody")
    m.run("run", "--block", "R00", "-n", "1", "--user", "nobody", "--cwd", str(work),
          str(EXAMPLES / "writefile"), "made-by-nobody", "hello\n")
    st = (work / "made-by-nobody").stat()
    assert (st.st_uid, st.st_gid) == (nobody.pw_uid, nobody.pw_gid)
    assert (work / "made-by-nobody").read_text() == "hello\n"


def test_unreadable_executable_is_refused(default_machine: Machine) -> None:
    m = default_machine
    exe = m.work / "private-hello"
    exe.write_bytes((EXAMPLES / "hello").read_bytes())
    os.chmod(exe, 0o700)
    p = m.run("run", "--block", "R00", "-n", "1", "--user", "nobody", "--cwd", "/tmp", str(exe), check=False)
    assert p.returncode != 0
    assert "Permission denied" in p.stderr + p.stdout
