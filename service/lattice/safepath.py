"""Paths no other user can plant (docs/security.md, "No path a user can plant").

A root `lattice` that made or reused a directory another user had made
(or a symbolic link another user had pointed) would put its sockets, keys
or locks where that user can reach them.  So:

- trusted(path): every directory on the way to path, symbolic links
  followed one at a time, is one that only root or the caller can change
  (owned by one of them, not writable by group or others unless sticky,
  as /tmp is), and every link on the way is root's or the caller's;
- private_dir(path, base): each component of path below the trusted base
  is made with mkdir (mode 0700) or, if it exists, opened with
  O_NOFOLLOW|O_DIRECTORY relative to the one above (never through a link),
  and must be the caller's and writable by nobody else (a directory of the
  caller's that others may read is tightened to 0700: nobody else could
  have written in it); otherwise one clear error naming it, and it is not
  used.

Only os, stat and pwd (loaded with or built into the interpreter) and
lattice.errors are imported: the `lattice` client checks its home with
this before anything.
"""
from __future__ import annotations

import os
import stat

from lattice.errors import LatticeError

TYPE_CHECKING = False           # typing and pathlib are not imported: the client's start-up would pay for them
if TYPE_CHECKING:
    from pathlib import Path

    AnyPath = str | Path

SHARED = "/tmp"                 # where a path too long for a socket's address gets a short directory
MAX_LINKS = 40                  # as the kernel's own limit on links in one lookup


def who(uid: int) -> str:
    try:
        import pwd              # built into the interpreter
        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except (KeyError, ImportError):
        return f"uid {uid}"


def refuse(path: AnyPath, why: str, what: str = "", part: AnyPath | None = None) -> LatticeError:
    """The one line that says why path is not used (part: the component at
    fault, if another) and what to do."""
    where = f"{part} (on the way to it) is " if part is not None and str(part) != str(path) else ""
    todo = ("use a LATTICE_HOME of your own that only you can write in, as ssh wants of ~/.ssh" if what
            else "remove it (it is not this command's to use) and try again")
    return LatticeError(f"refusing {what + ' ' if what else ''}{path}: {where}{why}; {todo}")


def _loose(st: os.stat_result) -> bool:
    """Group or others may write in this directory (a sticky one keeps
    their hands off what they do not own)?"""
    return bool(st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)) and not st.st_mode & stat.S_ISVTX


def trusted(path: AnyPath, uid: int | None = None, what: str = "") -> None:
    """Raise LatticeError unless only root or uid (default: the caller's
    effective uid) can change what path names.  A missing component ends
    the walk: whoever makes it makes it in a directory already checked."""
    uid = os.geteuid() if uid is None else uid
    parts = [p for p in os.path.abspath(path).split("/") if p]
    cur = "/"
    links = 0
    while True:
        st = os.stat(cur)
        if _loose(st):
            raise refuse(path, f"mode {st.st_mode & 0o7777:04o} lets others write in it", what, cur)
        if not parts:
            return
        name = parts.pop(0)
        if name == ".":
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            return
        if st.st_uid not in (0, uid):
            raise refuse(path, f"owned by {who(st.st_uid)}, not by root or you ({who(uid)})", what, nxt)
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_LINKS:
                raise refuse(path, "too many symbolic links", what)
            target = os.readlink(nxt)
            if target.startswith("/"):
                cur = "/"
            parts = [p for p in target.split("/") if p] + parts
            continue
        if not stat.S_ISDIR(st.st_mode):
            if parts:
                raise refuse(path, "not a directory", what, nxt)
            return
        cur = nxt


def owned(path: AnyPath, uid: int | None = None, what: str = "") -> None:
    """path (if it exists) is uid's own, a directory nobody else may write in,
    and the way to it is trusted()."""
    uid = os.geteuid() if uid is None else uid
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is not None and st.st_uid != uid:
        raise refuse(path, f"owned by {who(st.st_uid)}, not by you ({who(uid)})", what)
    if st is not None and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise refuse(path, f"mode {st.st_mode & 0o7777:04o} lets others write in it", what)
    trusted(path, uid, what)


def open_private_dir(path: AnyPath, base: AnyPath | None = None, tighten: bool = True) -> int:
    """A descriptor (O_RDONLY|O_DIRECTORY) of path, a directory of the
    caller's, mode 0700, made or checked one component at a time below the
    trusted directory base (see the module's doc).  tighten=False leaves
    an existing directory others may read as it is (only made ones are 0700)."""
    uid = os.geteuid()
    base = os.path.abspath(SHARED if base is None else base)
    if not under(path, base):
        raise refuse(path, f"not below {base}")
    trusted(base, uid)
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    cur = base
    try:
        for name in os.path.relpath(os.path.abspath(path), base).split("/"):
            cur = os.path.join(cur, name)
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except OSError as e:    # a link, not a directory, or one we may not open: say which
                try:
                    st = os.lstat(name, dir_fd=fd)
                    if stat.S_ISLNK(st.st_mode):
                        e.strerror = f"a symbolic link (to {os.readlink(name, dir_fd=fd)}), not a directory"
                    elif not stat.S_ISDIR(st.st_mode):
                        e.strerror = "not a directory"
                    else:
                        _mine(st, cur, uid)
                except OSError:
                    pass
                raise refuse(cur, str(e.strerror)) from e
            os.close(fd)
            fd = sub
            st = os.fstat(fd)
            _mine(st, cur, uid)
            if tighten and st.st_mode & 0o7777 != 0o700:
                os.fchmod(fd, 0o700)    # only others' reading goes: nobody else could write in it
    except BaseException:
        os.close(fd)
        raise
    return fd


def _mine(st: os.stat_result, path: str, uid: int) -> None:
    """The directory path (as st shows it) is uid's, and nobody else may write in it."""
    if st.st_uid != uid:
        raise refuse(path, f"owned by {who(st.st_uid)}, not by you ({who(uid)})")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise refuse(path, f"mode {st.st_mode & 0o7777:04o} lets others write in it")


def private_dir(path: AnyPath, base: AnyPath | None = None, tighten: bool = True) -> None:
    """path made or found private below base (open_private_dir)."""
    os.close(open_private_dir(path, base, tighten))


def under(path: AnyPath, base: AnyPath | None = None) -> bool:
    """Is path strictly below base (default SHARED: a directory every user may write in)?"""
    p, b = os.path.abspath(path), os.path.abspath(SHARED if base is None else base)
    return p.startswith(b.rstrip("/") + "/") and p != b


def runtime_dir(home: str) -> str:
    """The directory Lattice names for a machine (its home) under SHARED:
    lattice-UID-HASH, short enough for socket addresses."""
    import hashlib
    return os.path.join(SHARED, f"lattice-{os.getuid()}-{hashlib.sha256(home.encode()).hexdigest()[:12]}")


def runtime(path: AnyPath) -> bool:
    """Is path a runtime_dir() or below one: a directory Lattice names
    itself, not a machine directory a user chose to keep under SHARED?"""
    if not under(path):
        return False
    first = os.path.relpath(os.path.abspath(path), os.path.abspath(SHARED)).split("/")[0]
    word, uid, digest = (first.split("-") + ["", ""])[:3]
    return (word == "lattice" and uid.isdigit() and len(digest) == 12
            and all(c in "0123456789abcdef" for c in digest) and first.count("-") == 2)
