"""`lattice serve` on a booted machine, driven in a real browser (Debian's
chromium through selenium and chromedriver): the torus shows the booted
block's nodes in its colour, a job started from the CLI appears and ends on
the page without a reload, a RAS event appears, the I/O node counters show
the calls, /metrics parses with Prometheus' own parser and the JSON API
answers.  Every wait is on an element, a line or a process, with a long guard."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from conftest import EXAMPLES, LATTICE, Machine, build_probe, make_machine

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
GUARD = 180         # seconds: a hang guard only, every wait ends on an event
NO_BLOCK = [215, 219, 224]      # console.js: a node no block holds


@pytest.fixture(scope="module")
def m(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """A 2x2x4 machine whose block R00 (2x2x2: pset 0) is booted; pset 1 is in no block."""
    mach = make_machine(tmp_path_factory.mktemp("serve"), "--shape", "2x2x4")
    mach.run("block", "create", "R00", "--shape", "2x2x2")
    mach.run("boot", "R00")
    yield mach
    mach.run("free", "R00", check=False)
    shutil.rmtree(mach.work, ignore_errors=True)


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_probe(tmp_path_factory, "cancel_probe")


@pytest.fixture(scope="module")
def url(m: Machine) -> Iterator[str]:
    """`lattice serve` on a free loopback port, as a user starts it."""
    p = m.popen("serve", "--listen", "127.0.0.1:0")
    assert p.stdout is not None and p.stderr is not None
    line = p.stdout.readline()
    found = re.search(r"listening on (http://127\.0\.0\.1:\d+/)", line)
    assert found, line + p.stderr.read()
    yield found[1]
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=GUARD)
    assert p.returncode == 0, err
    assert "stopped" in err


@pytest.fixture(scope="module")
def browser(url: str) -> Iterator[webdriver.Chrome]:
    assert os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER), \
        "chromium and chromium-driver are missing: run scripts/setup.sh"
    opts = webdriver.ChromeOptions()
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1300,1600"):
        opts.add_argument(a)
    opts.binary_location = CHROMIUM
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)     # no Selenium Manager: both named
    try:
        d.get(url)
        d.execute_script("window.notReloaded = true")
        yield d
    finally:
        d.quit()


def wait(d: webdriver.Chrome, what: Any, message: str) -> Any:
    return WebDriverWait(d, GUARD, poll_frequency=0.1).until(what, message)


def css(d: webdriver.Chrome, selector: str) -> Any:
    """A function for wait(): the first element matching selector, or False."""
    def find(_: Any) -> Any:
        found = d.find_elements(By.CSS_SELECTOR, selector)
        return found[0] if found else False
    return find


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=GUARD) as r:
        body: bytes = r.read()
        return body


def pixel(d: webdriver.Chrome, where: str) -> list[int]:
    """The torus canvas's colour at a point the console computes (cellCenter/ioCenter)."""
    rgb: list[int] = d.execute_script(
        f"const [x, y] = window.latticeConsole.{where};"
        "return Array.from(document.getElementById('torus').getContext('2d').getImageData(x, y, 1, 1).data.slice(0, 3));")
    return rgb


def test_torus_shows_the_booted_block(browser: webdriver.Chrome) -> None:
    d = browser
    wait(d, css(d, "#live[data-state='live']"), "the event stream never opened")
    wait(d, css(d, "#blocks tr[data-block='R00'][data-state='Initialized']"), "block R00 not listed as booted")
    wait(d, lambda _: d.execute_script("return !!document.getElementById('torus').dataset.drawn && "
                                       "window.latticeConsole.state.blocks.length === 1"), "torus not drawn")
    colour = d.execute_script("return window.latticeConsole.nodeRGB('R00')")
    assert colour != NO_BLOCK
    for x, y, z in ((0, 0, 0), (1, 1, 1), (1, 0, 1)):          # R00's nodes: z 0 and 1
        assert pixel(d, f"cellCenter({x}, {y}, {z})") == colour, (x, y, z)
    for x, y, z in ((0, 0, 2), (1, 1, 3)):                      # pset 1: in no block
        assert pixel(d, f"cellCenter({x}, {y}, {z})") == NO_BLOCK, (x, y, z)
    assert pixel(d, "ioCenter(0)") == colour and pixel(d, "ioCenter(1)") == NO_BLOCK
    psets = d.find_elements(By.CSS_SELECTOR, "#psets tbody tr")
    assert len(psets) == 2
    # a click on node 1,1,0 (index 3) shows its personality, from the API
    x, y = d.execute_script("return window.latticeConsole.cellCenter(1, 1, 0)")
    d.execute_script("const cv = document.getElementById('torus'), r = cv.getBoundingClientRect();"
                     "cv.dispatchEvent(new MouseEvent('click', {clientX: r.left + arguments[0] * r.width / cv.width,"
                     " clientY: r.top + arguments[1] * r.height / cv.height, bubbles: true}));", x, y)
    info = wait(d, css(d, "#node-info[data-location='R00-M0-N00-C:J03']"), "no personality shown")
    wait(d, lambda _: "coords  1,1,0" in info.text, "the personality never came")
    assert "block   R00" in info.text and "ionode  R00-M0-N00-I:J00" in info.text


def test_a_job_appears_and_ends_without_reload(m: Machine, probe: str, browser: webdriver.Chrome) -> None:
    d = browser
    run = m.popen("run", "-n", "2", "--block", "R00", probe, "graceful")
    try:
        assert run.stdout is not None
        assert "ready" in run.stdout.readline()                  # rank 0 or 1 runs
        row = wait(d, css(d, "#jobs tr[data-state='Running']"), "the running job never showed")
        job = row.get_attribute("data-job")
        assert probe in row.text
        row.click()
        wait(d, css(d, f"#job-detail[data-job='{job}'][data-state='Running']"), "the job's detail did not open")
        m.run("cancel", job)
        out, err = run.communicate(timeout=GUARD)
        assert "cancelled" in err, err
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    wait(d, css(d, f"#jobs tr[data-job='{job}'][data-state='Terminated']"), "the job never ended on the page")
    wait(d, css(d, f"#job-detail[data-job='{job}'][data-state='Terminated']"), "the detail never ended")
    ranks = wait(d, lambda _: [(r.get_attribute("data-rank"), r.get_attribute("data-how"))
                               for r in d.find_elements(By.CSS_SELECTOR, "#ranks tbody tr[data-rank]")] or False,
                 "no rank ends shown")
    assert sorted(ranks) == [("0", "exit"), ("1", "exit")]
    assert d.execute_script("return window.notReloaded") is True


def test_a_ras_event_appears(m: Machine, browser: webdriver.Chrome) -> None:
    d = browser
    Select(d.find_element(By.ID, "ras-severity")).select_by_visible_text("ERROR")
    r = m.run("run", "-n", "2", "--block", "R00", str(EXAMPLES / "exit_code"), "1", "3", check=False)
    assert r.returncode == 3, r.stderr
    job = max(int(j) for j in re.findall(r"^\s*(\d+) ", m.run("jobs").stdout, re.M))
    row = wait(d, lambda _: next((e for e in d.find_elements(By.CSS_SELECTOR, "#ras tbody tr")
                                  if f"job {job} rank 1" in e.text), False), "the job's RAS event never showed")
    assert row.get_attribute("data-severity") == "ERROR"
    assert {e.get_attribute("data-severity") for e in d.find_elements(By.CSS_SELECTOR, "#ras tbody tr")} == {"ERROR"}
    assert d.execute_script("return window.notReloaded") is True


def test_the_server_starts_a_queued_job_when_no_command_runs(m: Machine, probe: str, url: str,
                                                             browser: webdriver.Chrome) -> None:
    """A run killed outright leaves its job Running in the record and its
    block busy; a job queued behind it starts once the server's loop has
    swept the dead run and dispatched the queue, with no command run."""
    d = browser
    env = dict(m.env, LATTICE_WARM="0")         # the run's own process, to kill
    run = subprocess.Popen([*LATTICE, "run", "-n", "2", "--block", "R00", probe, "graceful"], env=env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and "ready" in run.stdout.readline()
        queued = m.run("submit", "-n", "2", "--block", "R00", "-o", str(m.work / "q-%j.out"),
                       str(EXAMPLES / "exit_code"), "0", "0").stdout.strip()
        assert queued.isdigit()
        wait(d, css(d, f"#jobs tr[data-job='{queued}'][data-state='Queued']"), "the queued job never showed")
        run.kill()
        run.communicate(timeout=GUARD)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    wait(d, css(d, f"#jobs tr[data-job='{queued}'][data-state='Terminated']"),
         "the queued job never ran: nothing dispatched it")
    job = json.loads(get(url + f"api/jobs/{queued}"))
    assert job["job"]["status"] == 0 and [r["how"] for r in job["ranks"]] == ["exit", "exit"]


def test_counters_show_the_shipped_calls(m: Machine, browser: webdriver.Chrome) -> None:
    d = browser
    m.run("run", "-n", "2", "--block", "R00", str(EXAMPLES / "hello"))     # its output is shipped: write calls
    wait(d, css(d, "#counters .ionode[data-ionode='R00-M0-N00-I:J00'] tr[data-op='write']"),
         "the I/O node's write calls never showed")
    assert d.find_elements(By.CSS_SELECTOR, "#counters canvas.hist")


def test_metrics_parse(m: Machine, url: str) -> None:
    m.run("run", "-n", "2", "--block", "R00", str(EXAMPLES / "hello"))     # calls shipped, a job ended
    fams = {f.name: f for f in text_string_to_metric_families(get(url + "metrics").decode())}

    def val(fam: str, **labels: str) -> float:
        return next(s.value for s in fams[fam].samples if all(s.labels.get(k) == v for k, v in labels.items()))
    assert val("lattice_nodes", kind="compute", state="Initialized") == 8
    assert val("lattice_nodes", kind="compute", state="Unassigned") == 8
    assert val("lattice_nodes", kind="io", state="Initialized") == 1
    assert val("lattice_block_nodes", block="R00", state="Initialized") == 8
    assert val("lattice_blocks", state="Initialized") == 1
    assert val("lattice_ionode_up", block="R00", ionode="R00-M0-N00-I:J00") == 1
    assert val("lattice_ionode_calls", block="R00", ionode="R00-M0-N00-I:J00", op="write") > 0
    buckets = [s for s in fams["lattice_ionode_call_seconds"].samples
               if s.name.endswith("_bucket") and s.labels["op"] == "write"]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == val(
        "lattice_ionode_calls", block="R00", ionode="R00-M0-N00-I:J00", op="write")
    assert val("lattice_jobs", state="Terminated") >= 1
    assert val("lattice_host_hugepages", page_bytes=str(2 << 20), pool="total") >= 0     # the host's pools, read
    boots = {s.name: s.value for s in fams["lattice_block_boot_seconds"].samples if not s.labels.get("le")}
    assert boots["lattice_block_boot_seconds_count"] == 1 and 0 < boots["lattice_block_boot_seconds_sum"] < GUARD
    assert val("lattice_ras_events", severity="INFO") >= 1


def test_json_api(m: Machine, url: str) -> None:
    m.run("run", "-n", "2", "--block", "R00", str(EXAMPLES / "hello"))
    blocks = json.loads(get(url + "api/blocks"))["blocks"]
    assert [(b["name"], b["state"]) for b in blocks] == [("R00", "Initialized")]
    jobs = json.loads(get(url + "api/jobs"))["jobs"]
    last = json.loads(get(url + f"api/jobs/{jobs[-1]['id']}"))
    assert last["job"]["state"] == "Terminated" and last["job"]["status"] == 0
    assert [(r["rank"], r["how"], r["value"]) for r in last["ranks"]] == [(0, "exit", 0), (1, "exit", 0)]
    counters = json.loads(get(url + "api/counters/R00"))
    assert [io["location"] for io in counters["ionodes"]] == ["R00-M0-N00-I:J00"]


def test_events_stream_over_plain_http(m: Machine, url: str) -> None:
    """A client other than a browser: hello at once, then a change when a block changes."""
    port = int(url.rsplit(":", 1)[1].strip("/"))
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD) as c:
        c.sendall(b"GET /api/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
        f = c.makefile("rb")
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += f.readline()
        assert b"text/event-stream" in head
        assert wait_line(f, b"event: hello")
        m.run("block", "create", "B", "--shape", "2x2x2")
        try:
            while True:
                line = wait_line(f, b"data: ")
                if b'"blocks"' in line and b"changed" in line:
                    break
        finally:
            m.run("block", "delete", "B")


def wait_line(f: Any, start: bytes) -> bytes:
    while True:
        line: bytes = f.readline()
        assert line, "the stream ended"
        if line.startswith(start):
            return line


def test_a_browser_logs_in_with_the_token(m: Machine, browser: webdriver.Chrome) -> None:
    """With --token the console works from the login link's cookie alone: the
    page, its script, the API and the event stream (which cannot send a header)."""
    p = m.popen("serve", "--listen", "127.0.0.1:0", "--token")
    try:
        assert p.stdout is not None and p.stderr is not None
        found = re.search(r"listening on (http://127\.0\.0\.1:\d+/)", p.stdout.readline())
        assert found, p.stderr.read()
        base = found[1]
        assert "token" in p.stdout.readline()
        try:
            get(base + "api/blocks")
            raise AssertionError("answered without the token")
        except urllib.error.HTTPError as e:
            assert e.code == 401
        d = browser
        d.delete_all_cookies()
        d.get(base + "?token=" + (m.home / "serve-token").read_text().strip())
        assert "token=" not in d.current_url
        wait(d, css(d, "#live[data-state='live']"), "the event stream never opened with the cookie")
        wait(d, css(d, "#blocks tr[data-block='R00'][data-state='Initialized']"), "the API never answered")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=GUARD)
    assert p.returncode == 0
