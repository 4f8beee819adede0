// The Lattice console: reads /api/ and redraws what /api/events says changed.
// Every text from the machine (a job's command line, a RAS message) goes in
// as textContent, never as markup.
"use strict";

const STATE_ALPHA = { Initialized: 1.0, Booting: 0.6, Allocated: 0.6, Terminating: 0.45, Free: 0.3, Error: 1.0 };
const PALETTE = [[31, 119, 180], [255, 127, 14], [44, 160, 44], [148, 103, 189], [140, 86, 75], [227, 119, 194],
                 [23, 190, 207], [188, 189, 34], [57, 59, 121], [99, 121, 57], [140, 109, 49], [123, 65, 115]];
const NO_BLOCK = [215, 219, 224];
const MAX_RANK_ROWS = 1024;     // a job's rank ends shown; the rest are counted
const ERROR_RGB = [200, 30, 30];
const state = { machine: null, blocks: [], jobs: [], ras: [], selectedJob: null, layout: null, owner: null };

function $(id) { return document.getElementById(id); }

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function when(iso) { return iso ? iso.replace("T", " ").slice(0, 19) : "-"; }

function elapsed(s) {
  if (s === null || s === undefined) return "-";
  s = Math.floor(s);
  const d = Math.floor(s / 86400); s %= 86400;
  const p = (n) => String(n).padStart(2, "0");
  return (d ? d + "-" : "") + p(Math.floor(s / 3600)) + ":" + p(Math.floor(s / 60) % 60) + ":" + p(s % 60);
}

async function get(url) {
  const r = await fetch(url, { credentials: "same-origin", cache: "no-store" });
  const body = await r.json().catch(() => ({ error: r.status + " " + r.statusText }));
  if (!r.ok) throw new Error(body.error || String(r.status));
  return body;
}

// one fetch of each kind at a time; a change meanwhile fetches once more after it
const loading = {};
function reload(kind) {
  const job = { machine: loadMachine, blocks: loadBlocks, jobs: loadJobs, ras: loadRas, counters: loadCounters }[kind];
  if (loading[kind]) { loading[kind] = "again"; return; }
  loading[kind] = true;
  job().catch((e) => console.error(kind, e)).finally(() => {
    const again = loading[kind] === "again";
    loading[kind] = false;
    if (again) reload(kind);
  });
}

// ---- the machine ---------------------------------------------------------

function blockColour(name) {
  const i = state.blocks.findIndex((b) => b.name === name);
  return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
}

// the colour a node of block b is drawn in: the block's, lighter as its state is further from booted
function nodeRGB(b) {
  if (!b) return NO_BLOCK;
  if (b.state === "Error") return ERROR_RGB;
  const c = blockColour(b.name), a = STATE_ALPHA[b.state] ?? 0.5;
  return c.map((v) => Math.round(v * a + 255 * (1 - a)));
}

function css(rgb) { return "rgb(" + rgb.join(",") + ")"; }

async function loadMachine() {
  state.machine = await get("/api/machine/summary");
  const m = state.machine;
  $("machine-line").textContent = m.shape.join("x") + " torus, " + m.compute_nodes + " compute nodes, " + m.io_nodes +
    " I/O nodes (psets of " + m.pset_size + "), placement " + m.placement;
  renderPsets();
  draw();
}

async function loadBlocks() {
  const doc = await get("/api/blocks");
  state.blocks = doc.blocks;
  renderBlocks();
  draw();
  fillCountersChoice();
  reload("machine");      // hosts and lost nodes follow the blocks
}

function renderBlocks() {
  const tb = $("blocks").tBodies[0];
  tb.replaceChildren();
  for (const b of state.blocks) {
    const tr = el("tr");
    tr.dataset.block = b.name;
    tr.dataset.state = b.state;
    const sw = el("span", "", "swatch");
    sw.style.background = css(nodeRGB(b));
    const first = el("td");
    first.append(sw);
    tr.append(first, el("td", b.name), el("td", b.state, "state-" + b.state), el("td", b.shape.join("x")),
              el("td", b.corner.join(",")), el("td", b.nodes, "num"), el("td", b.io_nodes, "num"),
              el("td", b.hosts.join(", ")), el("td", when(b.changed)), el("td", b.message || ""));
    tb.append(tr);
  }
}

function renderPsets() {
  const tb = $("psets").tBodies[0];
  tb.replaceChildren();
  for (const p of state.machine.psets) {
    const tr = el("tr");
    tr.dataset.pset = p.pset;
    tr.append(el("td", p.pset, "num"), el("td", p.io_node), el("td", p.host || "-"), el("td", p.compute_host || "-"),
              el("td", p.block || ""), el("td", p.state, "state-" + p.state), el("td", p.lost || "", "num"));
    tb.append(tr);
  }
}

// where each z plane, node and I/O node goes on the canvas
function layout() {
  const m = state.machine, [X, Y, Z] = m.shape;
  const width = Math.max(320, Math.min(1100, $("torus-section").clientWidth - 300));
  const gap = 10, least = X * Y * Z > 4096 ? 3 : 12;     // a cell's least size in pixels
  const perRow = Math.max(1, Math.min(Z, Math.floor((width + gap) / (X * least + gap))));
  const cell = Math.max(1, Math.min(28, Math.floor((width - gap * (perRow - 1)) / (perRow * X))));
  const rows = Math.ceil(Z / perRow);
  const planeW = X * cell, planeH = Y * cell + 14;
  const ioTop = rows * (planeH + gap) + 6;
  const ioCell = Math.max(2, Math.min(18, Math.floor(width / Math.min(m.io_nodes, 64))));
  const ioPerRow = Math.max(1, Math.floor(width / ioCell));
  const ioRows = Math.ceil(m.io_nodes / ioPerRow);
  return { X, Y, Z, cell, gap, perRow, planeW, planeH, ioTop, ioCell, ioPerRow,
           w: Math.max(perRow * (planeW + gap), Math.min(m.io_nodes, ioPerRow) * ioCell) + 2,
           h: ioTop + 16 + ioRows * ioCell + 2 };
}

function planeOrigin(L, z) {
  return [(z % L.perRow) * (L.planeW + L.gap), Math.floor(z / L.perRow) * (L.planeH + L.gap) + 14];
}

function cellCenter(x, y, z) {
  const L = state.layout, [ox, oy] = planeOrigin(L, z);
  return [Math.floor(ox + x * L.cell + L.cell / 2), Math.floor(oy + y * L.cell + L.cell / 2)];
}

function ioCenter(p) {
  const L = state.layout;
  return [Math.floor((p % L.ioPerRow) * L.ioCell + L.ioCell / 2),
          Math.floor(L.ioTop + 16 + Math.floor(p / L.ioPerRow) * L.ioCell + L.ioCell / 2)];
}

function draw() {
  const m = state.machine;
  if (!m) return;
  const L = state.layout = layout(), [X, Y, Z] = m.shape, P = m.pset_size;
  const owner = state.owner = new Int32Array(X * Y * Z).fill(-1);
  state.blocks.forEach((b, bi) => {
    const [x0, y0, z0] = b.corner, [sx, sy, sz] = b.shape;
    for (let z = z0; z < z0 + sz; z++) for (let y = y0; y < y0 + sy; y++) for (let x = x0; x < x0 + sx; x++)
      owner[x + X * (y + Y * z)] = bi;
  });
  const cv = $("torus");
  cv.width = L.w; cv.height = L.h;
  const ctx = cv.getContext("2d");
  ctx.fillStyle = "#fbfbfc";
  ctx.fillRect(0, 0, L.w, L.h);
  const rgbs = state.blocks.map(nodeRGB).map(css), none = css(NO_BLOCK);
  ctx.font = "11px system-ui, sans-serif";
  for (let z = 0; z < Z; z++) {
    const [ox, oy] = planeOrigin(L, z);
    ctx.fillStyle = "#5b6570";
    ctx.fillText("z=" + z, ox, oy - 3);
    const inset = L.cell >= 6 ? 1 : 0;
    for (let y = 0; y < Y; y++) for (let x = 0; x < X; x++) {
      const o = owner[x + X * (y + Y * z)];
      ctx.fillStyle = o < 0 ? none : rgbs[o];
      ctx.fillRect(ox + x * L.cell + inset, oy + y * L.cell + inset, L.cell - 2 * inset, L.cell - 2 * inset);
    }
    if (L.cell >= 4) {      // pset borders: between neighbours of different psets
      ctx.strokeStyle = "#1d232a";
      ctx.lineWidth = 1;
      ctx.beginPath();
      for (let y = 0; y < Y; y++) for (let x = 0; x < X; x++) {
        const p = Math.floor((x + X * (y + Y * z)) / P);
        if (x + 1 < X && Math.floor((x + 1 + X * (y + Y * z)) / P) !== p) {
          ctx.moveTo(ox + (x + 1) * L.cell + .5, oy + y * L.cell); ctx.lineTo(ox + (x + 1) * L.cell + .5, oy + (y + 1) * L.cell);
        }
        if (y + 1 < Y && Math.floor((x + X * (y + 1 + Y * z)) / P) !== p) {
          ctx.moveTo(ox + x * L.cell, oy + (y + 1) * L.cell + .5); ctx.lineTo(ox + (x + 1) * L.cell, oy + (y + 1) * L.cell + .5);
        }
      }
      ctx.stroke();
      ctx.strokeRect(ox + .5, oy + .5, L.planeW - 1, Y * L.cell - 1);
    }
  }
  ctx.fillStyle = "#5b6570";
  ctx.fillText("I/O nodes (one per pset)", 0, L.ioTop + 10);
  for (let p = 0; p < m.io_nodes; p++) {
    const o = owner[p * P];     // a block holds whole psets
    const [cx, cy] = ioCenter(p), half = L.ioCell / 2;
    ctx.fillStyle = o < 0 ? none : rgbs[o];
    ctx.beginPath();
    ctx.arc(cx, cy, Math.max(1, half - 1), 0, 2 * Math.PI);
    ctx.fill();
  }
  cv.dataset.drawn = String(Date.now());
}

function nodeAt(px, py) {
  const L = state.layout, m = state.machine;
  if (!L) return null;
  if (py >= L.ioTop + 16) {
    const p = Math.floor((py - L.ioTop - 16) / L.ioCell) * L.ioPerRow + Math.floor(px / L.ioCell);
    return p >= 0 && p < m.io_nodes && px < L.ioPerRow * L.ioCell ? { io: p } : null;
  }
  const col = Math.floor(px / (L.planeW + L.gap)), row = Math.floor(py / (L.planeH + L.gap));
  const z = row * L.perRow + col, [ox, oy] = planeOrigin(L, z);
  const x = Math.floor((px - ox) / L.cell), y = Math.floor((py - oy) / L.cell);
  if (z >= L.Z || x < 0 || y < 0 || x >= L.X || y >= L.Y) return null;
  return { x, y, z };
}

function nodeLocation(kind, n) { return "R00-M0-N00-" + kind + ":J" + String(n).padStart(2, "0"); }

function describe(hit) {
  const m = state.machine, [X, Y] = m.shape;
  if (!hit) return "Point at a node.";
  const pset = hit.io !== undefined ? hit.io : Math.floor((hit.x + X * (hit.y + Y * hit.z)) / m.pset_size);
  const p = m.psets[pset];
  if (hit.io !== undefined)
    return [nodeLocation("I", pset), "I/O node of pset " + pset, "host    " + (p.host || "-"),
            "block   " + (p.block || "-"), "state   " + p.state].join("\n");
  const i = hit.x + X * (hit.y + Y * hit.z), o = state.owner[i], b = o < 0 ? null : state.blocks[o];
  return [nodeLocation("C", i), "x,y,z   " + [hit.x, hit.y, hit.z].join(","), "pset    " + pset + " (I/O node " +
          nodeLocation("I", pset) + ")", "host    " + (p.compute_host || "-"), "block   " + (b ? b.name : "-"),
          "state   " + (b ? b.state : m.psets[pset].state)].join("\n");
}

// ---- jobs ----------------------------------------------------------------

async function loadJobs() {
  const doc = await get("/api/jobs?limit=200");
  state.jobs = doc.jobs.slice().reverse();
  const tb = $("jobs").tBodies[0];
  tb.replaceChildren();
  for (const j of state.jobs) {
    const tr = el("tr");
    tr.dataset.job = j.id;
    tr.dataset.state = j.state;
    if (j.id === state.selectedJob) tr.className = "selected";
    tr.append(el("td", j.id, "num"), el("td", j.block || "-"), el("td", j.user), el("td", j.ranks, "num"),
              el("td", j.kernel || "-"), el("td", j.state, "state-" + j.state),
              el("td", j.status === null ? "-" : j.status, "num"), el("td", when(j.started || j.submitted)),
              el("td", elapsed(j.elapsed), "num"), el("td", j.command + (j.message ? "  # " + j.message : "") + (j.reason ? "  # " + j.reason : ""), "cmd"));
    tr.addEventListener("click", () => { state.selectedJob = j.id; loadJobs(); });
    tb.append(tr);
  }
  if (state.selectedJob !== null) await loadJob(state.selectedJob);
}

async function loadJob(id) {
  const doc = await get("/api/jobs/" + id);
  const j = doc.job, box = $("job-detail");
  box.hidden = false;
  box.dataset.job = j.id;
  box.dataset.state = j.state;
  $("job-title").textContent = "Job " + j.id + ": " + j.command;
  $("job-message").textContent = [j.state + (j.status === null ? "" : " (status " + j.status + ")"),
    j.ranks + " ranks on " + (j.block || "-"), "submitted " + when(j.submitted), "ended " + when(j.ended),
    j.message || ""].filter(Boolean).join(" · ");
  const tb = $("ranks").tBodies[0];
  tb.replaceChildren();
  for (const r of doc.ranks.slice(0, MAX_RANK_ROWS)) {
    const tr = el("tr");
    tr.dataset.rank = r.rank;
    tr.dataset.how = r.how || "";
    tr.append(el("td", r.rank, "num"), el("td", r.location), el("td", r.how || ""),
              el("td", r.value === null ? "" : r.value, "num"),
              el("td", [r.message, r.report].filter(Boolean).join("  "), "cmd"));
    tb.append(tr);
  }
  if (doc.ranks.length > MAX_RANK_ROWS) {
    const tr = el("tr"), td = el("td", (doc.ranks.length - MAX_RANK_ROWS) + " more ranks: lattice jobs --ranks " + j.id);
    td.colSpan = 5;
    tr.append(td);
    tb.append(tr);
  }
  if (!doc.ranks.length) {
    const tr = el("tr");
    const td = el("td", j.ended ? "no rank ends recorded" : "ranks are recorded as they end");
    td.colSpan = 5;
    tr.append(td);
    tb.append(tr);
  }
}

// ---- RAS -----------------------------------------------------------------

async function loadRas() {
  const q = new URLSearchParams({ limit: "200" });
  const sev = $("ras-severity").value, block = $("ras-block").value.trim(), job = $("ras-job").value.trim();
  if (sev) q.set("severity", sev);
  if (block) q.set("block", block);
  if (job) q.set("job", job);
  let doc;
  try {
    doc = await get("/api/ras?" + q);
    $("ras-error").hidden = true;
  } catch (e) {
    $("ras-error").textContent = e.message;
    $("ras-error").hidden = false;
    return;
  }
  const tb = $("ras").tBodies[0];
  tb.replaceChildren();
  for (const e of doc.events.slice().reverse()) {
    const tr = el("tr");
    tr.dataset.id = e.id;
    tr.dataset.severity = e.severity;
    tr.append(el("td", when(e.time)), el("td", e.severity, "sev-" + e.severity), el("td", e.component),
              el("td", e.location), el("td", e.job === null ? "" : e.job, "num"), el("td", e.message));
    tb.append(tr);
  }
}

// ---- counters --------------------------------------------------------------

function fillCountersChoice() {
  const sel = $("counters-block"), was = sel.value;
  const booted = state.blocks.filter((b) => b.state === "Initialized").map((b) => b.name);
  sel.replaceChildren(...booted.map((n) => el("option", n)));
  if (booted.includes(was)) sel.value = was;
  reload("counters");
}

function fmtNs(ns) { return ns < 1e6 ? (ns / 1000).toFixed(1) + " µs" : (ns / 1e6).toFixed(2) + " ms"; }

function percentile(hist, q) {
  const total = hist.reduce((a, b) => a + b, 0);
  let seen = 0;
  for (let b = 0; b < hist.length; b++) { seen += hist[b]; if (total && seen >= q * total) return 2 ** (b + 1); }
  return 0;
}

function histCanvas(hist) {
  const cv = el("canvas", null, "hist"), cols = hist.slice(8, 29), top = Math.max(1, ...cols);
  cv.width = cols.length * 4; cv.height = 20;
  const ctx = cv.getContext("2d");
  ctx.fillStyle = "#1f77b4";
  cols.forEach((n, i) => { if (n) { const h = Math.max(1, Math.round(19 * n / top)); ctx.fillRect(i * 4, 20 - h, 3, h); } });
  return cv;
}

async function loadCounters() {
  const name = $("counters-block").value, box = $("counters");
  if (!name) { box.replaceChildren(el("p", "No booted block.", "hint")); return; }
  const doc = await get("/api/counters/" + encodeURIComponent(name));
  const parts = [];
  for (const io of doc.ionodes) {
    const div = el("div", null, "ionode");
    div.dataset.ionode = io.location;
    div.append(el("h3", io.location));
    const t = el("table"), head = el("tr");
    for (const h of ["op", "calls", "bytes", "mean", "p50 <", "p99 <", "latency"]) head.append(el("th", h));
    t.append(head);
    for (const [op, n] of Object.entries(io.calls)) {
      if (!n) continue;
      const hist = io.hist[op] || [];
      const tr = el("tr");
      tr.dataset.op = op;
      const hc = el("td");
      hc.append(histCanvas(hist));
      tr.append(el("td", op), el("td", n, "num"), el("td", io.bytes[op] || 0, "num"),
                el("td", fmtNs((io.ns[op] || 0) / n), "num"), el("td", fmtNs(percentile(hist, .5)), "num"),
                el("td", fmtNs(percentile(hist, .99)), "num"), hc);
      t.append(tr);
    }
    if (t.rows.length === 1) div.append(el("p", "No calls yet.", "hint"));
    else div.append(t);
    parts.push(div);
  }
  box.replaceChildren(...parts);
}

// ---- live updates ----------------------------------------------------------

function connect() {
  const es = new EventSource("/api/events");
  es.addEventListener("hello", (ev) => {
    $("live").dataset.state = "live";
    $("live").textContent = "live";
    document.body.dataset.seq = JSON.parse(ev.data).seq;
    for (const k of ["blocks", "jobs", "ras"]) reload(k);
  });
  es.addEventListener("change", (ev) => {
    const d = JSON.parse(ev.data);
    document.body.dataset.seq = d.seq;
    for (const k of d.changed) reload(k);
    if (d.changed.includes("jobs") && $("counters-block").value) reload("counters");
  });
  es.onerror = () => { $("live").dataset.state = "down"; $("live").textContent = "reconnecting"; };
}

window.latticeConsole = { cellCenter, ioCenter, nodeRGB: (name) => nodeRGB(state.blocks.find((b) => b.name === name)),
                          state };

document.addEventListener("DOMContentLoaded", () => {
  const cv = $("torus");
  cv.addEventListener("mousemove", (ev) => {
    const r = cv.getBoundingClientRect();
    $("node-info").textContent = describe(nodeAt((ev.clientX - r.left) * cv.width / r.width,
                                                 (ev.clientY - r.top) * cv.height / r.height));
  });
  cv.addEventListener("click", async (ev) => {     // a compute node's personality, as a program on it reads it
    const r = cv.getBoundingClientRect();
    const hit = nodeAt((ev.clientX - r.left) * cv.width / r.width, (ev.clientY - r.top) * cv.height / r.height);
    if (!hit || hit.io !== undefined) return;
    const [X, Y] = state.machine.shape, loc = nodeLocation("C", hit.x + X * (hit.y + Y * hit.z));
    let text;
    try {
      const p = await get("/api/personality/" + encodeURIComponent(loc));
      text = ["personality:", "  block   " + p.block, "  coords  " + p.coords.join(","), "  torus   " + p.torus.join(","),
              "  pset    " + p.pset + " (rank " + p.rank_in_pset + " of " + p.pset_size + ")", "  ionode  " + p.ionode,
              "  memory  " + (p.memory / 1048576) + " MiB, " + p.cores + " cores"].join("\n");
    } catch (e) {
      text = "personality: " + e.message;
    }
    const box = $("node-info");
    box.textContent = describe(hit) + "\n\n" + text;
    box.dataset.location = loc;
  });
  for (const id of ["ras-severity", "ras-block", "ras-job"]) $(id).addEventListener("change", () => reload("ras"));
  $("ras-filter").addEventListener("submit", (ev) => { ev.preventDefault(); reload("ras"); });
  $("counters-block").addEventListener("change", () => reload("counters"));
  window.addEventListener("resize", draw);
  reload("machine");
  connect();
});
