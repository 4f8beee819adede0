"""`lattice serve` without a booted block: its routes, what it refuses, and
who may read it (docs/security.md, "The web console's door").  The app runs
in-process under Starlette's TestClient; the command itself as a process."""
from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from lattice.errors import LatticeError
from lattice.state import db, ras
from lattice.web import app as webapp
from lattice.web import auth
from lattice.web.watch import Watcher
from test_service_machine import Home, assert_clean_error, finish, home  # noqa: F401 - fixture

TOKEN = "t0ken-for-the-tests-0123456789abcdef"
LOCAL = "http://127.0.0.1:8080"
# every route, the console's files included: none answers without the token
ROUTES = ["/", "/static/console.js", "/static/console.css", "/metrics", "/api/machine", "/api/machine/summary",
          "/api/blocks", "/api/jobs", "/api/jobs/1", "/api/ras", "/api/counters/A", "/api/events",
          "/api/personality/R00-M0-N00-C:J00", "/no/such/page"]


@pytest.fixture
def machine(home: Home) -> Iterator[Home]:
    """A 2x2x4 machine with block A (Free, 8 nodes) and one ended job of 2 ranks."""
    home.ok("init")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    with home.active():
        con = db.connect()          # the machine's own database, whichever its backend
        con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, status, submitted, started, "
                    "ended, kernel) VALUES ('A', 'root', 0, '/bin/true', 'true', '/', 2, 'Terminated', 0, 100.0, "
                    "100.5, 101.0, 'cnk')")
        con.executemany("INSERT INTO ranks (job, rank, location, how, value) VALUES (1, ?, ?, 'exit', 0)",
                        [(0, "R00-M0-N00-C:J00"), (1, "R00-M0-N00-C:J01")])
        con.close()
        yield home


def client(token: str | None = None, base: str = LOCAL) -> TestClient:
    app, _ = webapp.build(token, watch=False)
    return TestClient(app, base_url=base)


def test_api_answers_from_the_views(machine: Home) -> None:
    c = client()
    blocks = c.get("/api/blocks").json()
    assert blocks["schema"] == "lattice.blocks/1"
    assert [(b["name"], b["state"], b["nodes"]) for b in blocks["blocks"]] == [("A", "Free", 8)]
    jobs = c.get("/api/jobs").json()["jobs"]
    assert [(j["id"], j["state"], j["status"]) for j in jobs] == [(1, "Terminated", 0)]
    one = c.get("/api/jobs/1").json()
    assert one["job"]["id"] == 1 and [(r["rank"], r["how"], r["value"]) for r in one["ranks"]] == [
        (0, "exit", 0), (1, "exit", 0)]
    summary = c.get("/api/machine/summary").json()
    assert summary["compute_nodes"] == 16 and summary["by_state"] == {"Unassigned": 8, "Free": 8}
    nodes = c.get("/api/machine").json()["nodes"]
    assert sum(n["kind"] == "compute" for n in nodes) == 16 and sum(n["block"] == "A" for n in nodes) == 9
    assert c.get("/api/personality/R00-M0-N00-C:J05").json()["location"] == "R00-M0-N00-C:J05"
    assert "<canvas id=\"torus\"" in c.get("/").text
    assert c.get("/static/console.js").headers["content-type"].startswith("text/javascript")


def test_ras_filters(machine: Home) -> None:
    con = db.connect()
    ras.record(con, "INFO", "MMCS", "A", "block A something")
    ras.record(con, "ERROR", "APP", "R00-M0-N00-C:J00", "job 1 rank 0 went wrong", 1)
    ras.record(con, "WARNING", "MMCS", "R00-M0-N00-C:J15", "elsewhere")
    con.close()
    c = client()
    msgs = lambda q: [e["message"] for e in c.get("/api/ras" + q).json()["events"]]  # noqa: E731
    assert msgs("?severity=ERROR") == ["job 1 rank 0 went wrong"]
    assert msgs("?job=1") == ["job 1 rank 0 went wrong"]
    assert msgs("?block=A") == ["block A something", "job 1 rank 0 went wrong"]
    assert msgs("?limit=1") == ["elsewhere"]


@pytest.mark.parametrize("path, status, words", [
    ("/api/ras?limit=many", 400, "bad limit"), ("/api/ras?severity=LOUD", 400, "bad severity"),
    ("/api/ras?job=-1", 400, "bad job"), ("/api/ras?block=NOPE", 400, "no block named"),
    ("/api/jobs?limit=x", 400, "bad limit"), ("/api/jobs/nine", 400, "bad job id"), ("/api/jobs/99", 404, "no job 99"),
    ("/api/counters/NOPE", 404, "no block named"), ("/api/counters/A", 404, "block A is Free"),
    ("/api/personality/R99-X", 404, ""),
])
def test_bad_requests_get_one_json_error(machine: Home, path: str, status: int, words: str) -> None:
    r = client().get(path)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]


def test_metrics_parse_and_count_the_state(machine: Home) -> None:
    con = db.connect()
    ras.record(con, "WARNING", "MMCS", "A", "one warning")
    ras.record(con, "INFO", "MMCS", "A", "block A initialized (8 compute nodes, 1 I/O nodes) in 0.400 s")
    ras.record(con, "INFO", "MMCS", "A", "block A initialized (8 compute nodes, 1 I/O nodes) in 3.000 s")
    con.close()
    text = client().get("/metrics").text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    val = lambda fam, **labels: next(s.value for s in fams[fam].samples  # noqa: E731
                                     if all(s.labels.get(k) == v for k, v in labels.items()))
    assert val("lattice_nodes", kind="compute", state="Free") == 8
    assert val("lattice_nodes", kind="compute", state="Unassigned") == 8
    assert val("lattice_nodes", kind="io", state="Free") == 1
    assert val("lattice_blocks", state="Free") == 1 and val("lattice_blocks", state="Initialized") == 0
    assert val("lattice_block_nodes", block="A", state="Free") == 8
    assert val("lattice_jobs", state="Terminated") == 1 and val("lattice_jobs", state="Running") == 0
    assert fams["lattice_ras_events"].type == "counter" and val("lattice_ras_events", severity="WARNING") >= 1
    launch = {s.labels.get("le"): s.value for s in fams["lattice_job_launch_seconds"].samples
              if s.name.endswith("_bucket")}
    assert launch["0.25"] == 0 and launch["0.5"] == 1 and launch["+Inf"] == 1     # submitted 100.0, started 100.5
    boot = {s.labels.get("le", s.name): s.value for s in fams["lattice_block_boot_seconds"].samples}
    assert boot["0.5"] == 1 and boot["5.0"] == 2 and boot["lattice_block_boot_seconds_sum"] == 3.4
    for name in ("lattice_ionode_calls", "lattice_ionode_bytes", "lattice_ionode_call_seconds",
                 "lattice_hugepages_held", "lattice_host_hugepages", "lattice_job_run_seconds"):
        assert name in fams, name


def test_nothing_changes_state(machine: Home) -> None:
    """Read-only: a write method is refused on every route, with the token."""
    c = client(TOKEN)
    h = {"authorization": f"Bearer {TOKEN}"}
    for path in ("/api/blocks", "/api/jobs/1", "/metrics", "/"):
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert c.request(method, path, headers=h).status_code == 405, (method, path)


@pytest.mark.parametrize("path", ROUTES)
def test_no_token_no_answer(machine: Home, path: str) -> None:
    c = client(TOKEN)
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {TOKEN}"},
                    {"authorization": f"Bearer {TOKEN[:-1]}"}, {"cookie": f"{auth.COOKIE}=nope"}):
        r = c.get(path, headers=headers)
        assert r.status_code == 401, (path, headers, r.status_code)
        assert "lattice" not in r.text.lower() or "token" in r.text    # nothing of the machine
    r = c.get(path + ("&" if "?" in path else "?") + "token=wrong")
    assert r.status_code == 401 and "set-cookie" not in r.headers


def test_bearer_and_login_link(machine: Home) -> None:
    c = client(TOKEN)
    assert c.get("/api/blocks", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    r = c.get(f"/?token={TOKEN}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/"       # the token leaves the address bar
    assert "HttpOnly" in r.headers["set-cookie"] and "SameSite=Strict" in r.headers["set-cookie"]
    assert c.get("/metrics").status_code == 200                        # the cookie now
    assert c.get("/static/console.js").status_code == 200
    for path in ("/%2Fevil.example/", "/%5Cevil.example/"):
        r = client(TOKEN).get(f"{path}?token={TOKEN}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/", path      # never off the site


def test_no_token_means_loopback_names_only(machine: Home) -> None:
    """Without a token a page elsewhere could reach the server through DNS
    rebinding (its own name, this host's 127.0.0.1): only loopback names pass."""
    assert client().get("/api/blocks").status_code == 200
    assert client(base="http://localhost:8080").get("/api/blocks").status_code == 200
    assert client(base="http://[::1]:8080").get("/api/blocks").status_code == 200
    for base in ("http://evil.example:8080", "http://127.0.0.1.evil.example:8080", "http://10.1.2.3:8080"):
        assert client(base=base).get("/api/blocks").status_code == 403, base


@pytest.mark.parametrize("path", ["/static/..%2fapi.py", "/static/%2e%2e/app.py", "/static/%2e%2e%2fauth.py",
                                  "/static/..%5capp.py", "/static//etc/passwd", "/static/%2fetc%2fpasswd"])
def test_static_files_stay_in_their_directory(machine: Home, path: str) -> None:
    r = client().get(path)
    assert r.status_code == 404, (path, r.status_code)
    assert "import" not in r.text and "root:" not in r.text


def test_console_headers(machine: Home) -> None:
    r = client().get("/")
    assert "script-src 'self'" in r.headers["content-security-policy"]    # no inline script can run
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"


def test_watcher_tells_what_changed(machine: Home) -> None:
    async def go() -> list[set[str]]:
        w = Watcher()
        s = w.subscribe()
        seen = []
        await w.step()
        seen.append(s.take())
        await w.step()
        seen.append(s.take())
        con = db.connect()
        con.execute("UPDATE blocks SET state = 'Booting', changed = changed + 1 WHERE name = 'A'")
        con.close()
        await w.step()
        seen.append(s.take())
        con = db.connect()
        con.execute("INSERT INTO jobs (user, uid, exe, args, cwd, nranks, state, submitted) "
                    "VALUES ('root', 0, '/bin/true', 'true', '/', 1, 'Queued', 200.0)")
        ras.record(con, "INFO", "MMCS", "A", "hello")
        con.close()
        await w.step()
        seen.append(s.take())
        return seen
    assert asyncio.run(go()) == [{"blocks", "jobs", "ras"}, set(), {"blocks"}, {"jobs", "ras"}]


def test_watcher_imports_the_ras_spool(machine: Home) -> None:
    """An I/O node's spooled event reaches the console with no command run."""
    spool = ras.spool_dir()
    spool.mkdir(mode=0o700, exist_ok=True)
    (spool / "A-ionode0.log").write_text("2026-01-01T00:00:00Z\tWARNING\tCIOD\tR00-M0-N00-I:J00\tspooled one\n")

    async def go() -> None:
        w = Watcher()
        await w.step()
    asyncio.run(go())
    assert [e["message"] for e in client().get("/api/ras").json()["events"]] == ["spooled one"]


@pytest.mark.sqlite_file        # the pg branch's mark (tests/conftest.py): about the SQLite file itself
def test_a_damaged_database_is_one_line_and_the_loop_goes_on(machine: Home, capsys: pytest.CaptureFixture[str]) -> None:
    c = client()
    assert c.get("/api/blocks").status_code == 200
    for suffix in ("-wal", "-shm"):
        (machine.path / f"lattice.db{suffix}").unlink(missing_ok=True)
    (machine.path / "lattice.db").write_bytes(b"not a database, not at all " * 200)
    r = c.get("/api/jobs")
    assert r.status_code == 503 and "cannot open the database" in r.json()["error"]

    async def go() -> None:
        w = Watcher()
        s = w.subscribe()
        await w.step()
        await w.step()
        assert not s.changed
    asyncio.run(go())
    err = capsys.readouterr().err
    assert err.count("lattice serve: warning: reading the machine's state: cannot open the database") == 1, err


def test_token_file(tmp_path: Path) -> None:
    t = auth.load_token(tmp_path)
    f = auth.token_file(tmp_path)
    assert stat.S_IMODE(f.stat().st_mode) == 0o600 and len(t) >= 32
    assert auth.load_token(tmp_path) == t                       # kept
    f.chmod(0o644)
    with pytest.raises(LatticeError, match="readable by others"):
        auth.load_token(tmp_path)
    f.unlink()
    os.symlink(tmp_path / "elsewhere", f)                       # a planted link is not followed
    with pytest.raises(LatticeError):
        auth.load_token(tmp_path)


@pytest.mark.parametrize("args, words", [
    (["--listen", "nowhere"], "bad --listen"), (["--listen", "127.0.0.1:99999"], "bad --listen"),
    (["--listen", "unix:"], "bad --listen"), (["--socket-mode", "999"], "bad --socket-mode"),
    (["--listen", "no.such.host.invalid:80"], "cannot listen"),
])
def test_serve_bad_options(machine: Home, args: list[str], words: str) -> None:
    assert_clean_error(machine.call("serve", *args), words, status=1)


def test_serve_without_machine(home: Home) -> None:
    assert_clean_error(home.call("serve"), "no machine", status=1)


def test_serve_refuses_a_busy_address(machine: Home) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        r = machine.call("serve", "--listen", f"127.0.0.1:{s.getsockname()[1]}")
    finally:
        s.close()
    assert_clean_error(r, "cannot listen on 127.0.0.1", "in use", status=1)


def started(p: "subprocess.Popen[str]") -> str:
    """The server's first line (its address), once it listens."""
    assert p.stdout is not None
    line = p.stdout.readline()
    assert line.startswith("lattice serve: listening on"), line + (p.stderr.read() if p.stderr else "")
    return line


def stop(p: "subprocess.Popen[str]") -> None:
    p.send_signal(signal.SIGTERM)
    r = finish(p, timeout=120)
    assert r.status == 0, r.err
    assert "stopped" in r.err


def test_unix_socket_is_its_owners(machine: Home, tmp_path: Path) -> None:
    sock = tmp_path / "serve.sock"
    p = machine.popen("serve", "--listen", f"unix:{sock}", LATTICE_WARM="0")
    try:
        started(p)
        assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
        c = socket.socket(socket.AF_UNIX)
        c.connect(str(sock))
        c.sendall(b"GET /api/blocks HTTP/1.0\r\nHost: x\r\n\r\n")
        got = b""
        while chunk := c.recv(65536):
            got += chunk
        c.close()
        assert got.startswith(b"HTTP/1.1 200") and b'"name":"A"' in got
    finally:
        stop(p)
    assert not sock.exists()


def test_beyond_loopback_a_token_is_required(machine: Home) -> None:
    """--listen on every address: it says so, makes the 0600 token file and asks for it."""
    p = machine.popen("serve", "--listen", "0.0.0.0:0", LATTICE_WARM="0")
    try:
        line = started(p)
        assert p.stdout is not None
        told = p.stdout.readline()
        token_file = machine.path / "serve-token"
        assert str(token_file) in told and "token" in told
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        port = int(re.search(r":(\d+)/", line)[1])    # type: ignore[index]
        token = token_file.read_text().strip()
        for headers in ("", f"Authorization: Bearer {token}\r\n"):
            c = socket.create_connection(("127.0.0.1", port))
            c.sendall(f"GET /api/jobs HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
            got = b""
            while chunk := c.recv(65536):
                got += chunk
            c.close()
            status = int(got.split()[1])
            assert status == (200 if headers else 401), got[:200]
            if headers:
                assert json.loads(got.split(b"\r\n\r\n", 1)[1])["jobs"][0]["id"] == 1
    finally:
        stop(p)


def test_event_streams_are_bounded(machine: Home) -> None:
    """A client cannot open event streams without end: past the bound, 503."""
    from lattice.web import api
    app, watcher = webapp.build(None, watch=False)
    for _ in range(api.MAX_STREAMS):
        watcher.subscribe()
    r = TestClient(app, base_url=LOCAL).get("/api/events")
    assert r.status_code == 503 and "event streams are open" in r.json()["error"]


def test_huge_pages_held_are_this_machines(machine: Home, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's book (lattice.nodes.hugepages) lists every machine's holders:
    /metrics counts this machine's blocks and jobs only."""
    book = tmp_path / "book"
    book.mkdir(mode=0o700)
    mine = machine.path.resolve()
    (book / "hugepages.json").write_text(json.dumps({
        f"{mine}:block-A": {"pid": 1, "start": "1", "pages": {"2048": 12}, "block": True},
        f"{mine}:job-7": {"pid": 1, "start": "1", "pages": {"1048576": 2}, "overcommit": {"2048": 256}},
        "/elsewhere/home:block-A": {"pid": 1, "start": "1", "pages": {"2048": 99}, "block": True},
    }))
    monkeypatch.setenv("LATTICE_HUGEPAGES_BOOK", str(book))
    fams = {f.name: f for f in text_string_to_metric_families(client().get("/metrics").text)}
    held = {(s.labels["holder"], s.labels["page_bytes"]): s.value for s in fams["lattice_hugepages_held"].samples}
    assert held == {("block-A", str(2 << 20)): 12, ("job-7", str(1 << 30)): 2}


def test_no_websocket(machine: Home) -> None:
    from starlette.websockets import WebSocketDisconnect
    for token in (None, TOKEN):
        with pytest.raises(WebSocketDisconnect) as e:
            with client(token).websocket_connect("/api/events"):
                pass
        assert e.value.code == 1008
