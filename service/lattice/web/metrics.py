"""/metrics: the machine's state in Prometheus' exposition format, read at
scrape time by a custom collector (nothing is kept between scrapes).  Every
name is documented in docs/cli.md, "lattice serve"."""
from __future__ import annotations

import json
import re
from typing import Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.exposition import generate_latest

from lattice.web import Connection
from lattice import views
from lattice.errors import LatticeError
from lattice.nodes import boot, hugepages
from lattice.state import blocks, db, machine
from lattice.transport.ciodclient import CiodError

BLOCK_STATES = ("Free", "Allocated", "Booting", "Initialized", "Terminating", "Error")
JOB_STATES = ("Queued", "Starting", "Running", "Dying", "Terminated", "Error")
SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")
NO_BLOCK = views.NO_BLOCK      # a node's state label when no block holds it
# seconds from a job's submission to its ranks running; from then to its end
LAUNCH_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
BOOT_BUCKETS = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
BOOTED = re.compile(r"block \S+ initialized \(.*\) in ([0-9.]+) s")   # lattice.nodes.boot's RAS event
RUN_BUCKETS = (0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 36000.0, 86400.0)
COUNTERS_TIMEOUT = 3.0      # a scrape waits this long at most for a booted block's I/O node


def histogram(name: str, doc: str, values: Iterable[float], bounds: tuple[float, ...]) -> HistogramMetricFamily:
    vals = list(values)
    buckets = [(str(float(b)), sum(1 for v in vals if v <= b)) for b in bounds] + [("+Inf", len(vals))]
    h = HistogramMetricFamily(name, doc)
    h.add_metric([], buckets, sum(vals))
    return h


class StateCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        m = machine.load()
        con = db.connect()
        try:
            yield from self.machine_metrics(con, m)
            yield from self.job_metrics(con)
            yield from self.ionode_metrics(con, m)
            yield from self.hugepage_metrics(con)
        finally:
            con.close()

    def machine_metrics(self, con: Connection, m: machine.Machine) -> Iterator[Metric]:
        bl = blocks.all_blocks(con)
        nodes = {(k, s): 0 for k in ("compute", "io") for s in (*BLOCK_STATES, NO_BLOCK)}
        pset_state = {p: NO_BLOCK for p in range(m.psets)}
        for b in bl:
            nodes["compute", b.state] += b.size
            for p in b.psets(m):
                pset_state[p] = b.state
        nodes["compute", NO_BLOCK] = m.nodes - sum(b.size for b in bl)
        for s in pset_state.values():
            nodes["io", s] += 1
        g = GaugeMetricFamily("lattice_nodes", "Nodes by kind and by the state of the block holding them "
                              f"({NO_BLOCK}: in no block)", labels=["kind", "state"])
        for (k, s), n in nodes.items():
            g.add_metric([k, s], n)
        yield g
        g = GaugeMetricFamily("lattice_blocks", "Blocks by state", labels=["state"])
        for s in BLOCK_STATES:
            g.add_metric([s], sum(1 for b in bl if b.state == s))
        yield g
        g = GaugeMetricFamily("lattice_block_nodes", "Compute nodes of each block, with its state",
                              labels=["block", "state"])
        for b in bl:
            g.add_metric([b.name, b.state], b.size)
        yield g
        took = [float(t[1]) for r in con.execute("SELECT message FROM ras WHERE component = 'MMCS' AND severity = "
                                                 "'INFO' AND message LIKE 'block % initialized (%) in % s'")
                if (t := BOOTED.fullmatch(r["message"]))]
        yield histogram("lattice_block_boot_seconds", "Seconds each boot of a block took, from Booting to "
                        "Initialized (the boots the RAS log records)", took, BOOT_BUCKETS)
        c = CounterMetricFamily("lattice_ras_events", "RAS events recorded, by severity", labels=["severity"])
        counts = dict(con.execute("SELECT severity, count(*) FROM ras GROUP BY severity").fetchall())
        for s in SEVERITIES:
            c.add_metric([s], counts.get(s, 0))
        yield c

    def job_metrics(self, con: Connection) -> Iterator[Metric]:
        counts = dict(con.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
        g = GaugeMetricFamily("lattice_jobs", "Jobs in the record, by state", labels=["state"])
        for s in JOB_STATES:
            g.add_metric([s], counts.get(s, 0))
        yield g
        rows = con.execute("SELECT submitted, started, ended FROM jobs WHERE started IS NOT NULL").fetchall()
        yield histogram("lattice_job_launch_seconds", "Seconds from a job's submission to its ranks running "
                        "(a queued job's wait included)", (r["started"] - r["submitted"] for r in rows), LAUNCH_BUCKETS)
        yield histogram("lattice_job_run_seconds", "Seconds from a job's ranks running to its end (ended jobs)",
                        (r["ended"] - r["started"] for r in rows if r["ended"] is not None), RUN_BUCKETS)

    def ionode_metrics(self, con: Connection, m: machine.Machine) -> Iterator[Metric]:
        """The shipped calls of every booted block's I/O nodes, asked of them now."""
        calls = CounterMetricFamily("lattice_ionode_calls", "Calls an I/O node executed for its compute nodes, "
                                    "by operation", labels=["block", "ionode", "op"])
        nbytes = CounterMetricFamily("lattice_ionode_bytes", "Bytes those calls moved", labels=["block", "ionode", "op"])
        latency = HistogramMetricFamily("lattice_ionode_call_seconds", "Time an I/O node took to execute a call",
                                        labels=["block", "ionode", "op"])
        up = GaugeMetricFamily("lattice_ionode_up", "1 if the I/O node answered this scrape's counters request",
                               labels=["block", "ionode"])
        for b in blocks.all_blocks(con):
            if b.state != "Initialized":
                continue
            try:
                conns = boot.ciods(con, b, m, timeout=COUNTERS_TIMEOUT)
            except (LatticeError, OSError):
                for p in b.psets(m):
                    up.add_metric([b.name, m.io_location(p)], 0)
                continue
            for c in conns:
                with c:
                    try:
                        full = c.counters_full()
                    except (CiodError, LatticeError, OSError):
                        up.add_metric([b.name, c.location], 0)
                        continue
                up.add_metric([b.name, c.location], 1)
                for op, n in full.calls.items():
                    if not n:
                        continue
                    labels = [b.name, c.location, op]
                    calls.add_metric(labels, n)
                    nbytes.add_metric(labels, full.bytes.get(op, 0))
                    hist = full.hist.get(op, [])
                    if hist:        # bucket i holds calls of [2^i, 2^(i+1)) ns
                        seen, buckets = 0, []
                        for i, k in enumerate(hist):
                            seen += k
                            buckets.append((str((2 << i) / 1e9), seen))
                        buckets.append(("+Inf", n))
                        latency.add_metric(labels, buckets, full.ns.get(op, 0) / 1e9)
        yield from (calls, nbytes, latency, up)

    def hugepage_metrics(self, con: Connection) -> Iterator[Metric]:
        """Huge pages this machine's blocks and jobs hold (the host's book,
        lattice.nodes.hugepages), and the host's pools."""
        mine = f"{machine.home().resolve()}:"
        held = GaugeMetricFamily("lattice_hugepages_held", "Huge pages held by this machine's blocks (kept for "
                                 "their jobs) and running jobs (added to a pool), by holder and page size in bytes",
                                 labels=["holder", "page_bytes"])
        try:
            book = json.loads((hugepages.book_dir() / "hugepages.json").read_text())
        except (OSError, ValueError):
            book = {}
        for key, entry in book.items() if isinstance(book, dict) else ():
            if not key.startswith(mine) or not isinstance(entry, dict):
                continue
            pages = entry.get("pages")
            for kb, n in (pages.items() if isinstance(pages, dict) else ()):
                if str(kb).isdigit() and isinstance(n, int) and n:
                    held.add_metric([key[len(mine):], str(int(kb) * 1024)], n)
        yield held
        pools = GaugeMetricFamily("lattice_host_hugepages", "The host's huge page pools: total, free and surplus "
                                  "pages by page size in bytes", labels=["page_bytes", "pool"])
        try:
            sizes = sorted(int(d.name[len("hugepages-"):-2]) for d in hugepages.SYSFS.iterdir()
                           if d.name.startswith("hugepages-") and d.name.endswith("kB"))
        except OSError:
            sizes = []
        p = hugepages.Pools()
        for kb in sizes:
            for name, f in (("total", "nr_hugepages"), ("free", "free_hugepages"), ("surplus", "surplus_hugepages")):
                try:
                    pools.add_metric([str(kb * 1024), name], p.read(kb, f))
                except (OSError, ValueError):
                    pass
        yield pools


def registry() -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=False)
    r.register(StateCollector())
    return r


def exposition(reg: CollectorRegistry) -> bytes:
    return generate_latest(reg)

