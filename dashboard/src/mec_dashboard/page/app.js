// The dashboard page: sign-in, one server-sent event stream, tables and uPlot charts.
// Everything it shows comes from /dashboard/v1 (docs/dashboard.md); it holds no token
// itself (the session cookie is HttpOnly).
"use strict";

const API = "/dashboard/v1";
const $ = (selector) => document.querySelector(selector);
const CHARTS = [  // [title, columns of a radio sample, colours]
  ["CQI and MCS", ["cqi", "mcs"], ["#2563eb", "#d97706"]],
  ["TBS (bytes per TTI)", ["tbs"], ["#059669"]],
  ["PRBs", ["prbs"], ["#7c3aed"]],
  ["RLC queue (bytes)", ["rlc"], ["#dc2626"]],
  ["measurement age (ms)", ["age_ms"], ["#6b7280"]],
];

let source = null;
let columns = [];
let intervalS = 0.5;
let historyS = 300;
let lastTickAt = 0;  // page clock (s) of the last tick received
let selected = null;
const series = new Map();  // UE -> one array per radio column
let charts = [];
let decisions = [];

// ---- sign-in -------------------------------------------------------------------------------

async function start() {
  const r = await fetch(`${API}/session`).catch(() => null);
  if (r && r.ok) signedIn(await r.json());
  else showSignIn(r ? "" : "the dashboard is not reachable");
}

function showSignIn(message) {
  $("#main").hidden = true;
  $("#signout").hidden = true;
  $("#who").textContent = "";
  $("#signin-error").textContent = message;
  if (!$("#signin").open) $("#signin").showModal();
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  // Sent as typed, also when empty: the server decides (and refuses), not the page.
  const r = await fetch(`${API}/session`, {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({token: $("#token").value.trim()}),
  }).catch(() => null);
  if (!r) { $("#signin-error").textContent = "the dashboard is not reachable"; return; }
  const body = await r.json();
  if (!r.ok) { $("#signin-error").textContent = `refused: ${body.detail}`; return; }
  $("#token").value = "";
  $("#signin").close();
  signedIn(body);
});

$("#signout").addEventListener("click", async () => {
  await fetch(`${API}/session`, {method: "DELETE"}).catch(() => null);
  stop("signed out");
});

function signedIn(session) {
  $("#who").textContent = `${session.subject} (${session.read_only ? "read-only" : "admin"})`;
  $("#who").dataset.readOnly = session.read_only;
  $("#signout").hidden = false;
  $("#mode-control").hidden = session.read_only;
  $("#main").hidden = false;
  connect();
}

function stop(message) {
  if (source) source.close();
  source = null;
  showSignIn(message);
}

// ---- the stream ----------------------------------------------------------------------------

function connect() {
  if (source) source.close();
  source = new EventSource(`${API}/stream`);
  source.addEventListener("snapshot", (e) => onSnapshot(JSON.parse(e.data)));
  source.addEventListener("tick", (e) => onTick(JSON.parse(e.data)));
  source.addEventListener("platform", (e) => renderPlatform(JSON.parse(e.data)));
  source.addEventListener("signed_out", (e) => stop(JSON.parse(e.data).detail));
  source.onerror = onStreamError;
}

async function onStreamError() {
  setLink(false, "connection to the dashboard lost; retrying");
  const r = await fetch(`${API}/session`).catch(() => null);
  if (r && r.status === 401) { stop("the session ended: sign in again"); return; }
  // EventSource retries network errors itself, but not an HTTP error: then reconnect here.
  if (source && source.readyState === EventSource.CLOSED) setTimeout(connect, 2000);
}

function onSnapshot(snapshot) {
  columns = snapshot.columns;
  intervalS = snapshot.interval_s;
  historyS = snapshot.history_s;
  series.clear();
  for (const [ue, samples] of Object.entries(snapshot.radio_history)) {
    const cols = columns.map(() => []);
    for (const sample of samples) sample.forEach((v, i) => cols[i].push(v));
    series.set(ue, cols);
  }
  decisions = snapshot.decisions;
  onTick(snapshot, true);
}

function onTick(tick, fromSnapshot = false) {
  lastTickAt = Date.now() / 1e3;
  setLink(true, "live");
  if (!fromSnapshot) {
    for (const [ue, radio] of Object.entries(tick.radio)) appendSample(ue, radio.sample);
    const newest = decisions.length ? decisions[decisions.length - 1].seq : 0;
    decisions.push(...tick.decisions.filter((d) => d.seq > newest));
    decisions = decisions.slice(-500);
  }
  if (selected === null || !(selected in tick.radio)) selected = Object.keys(tick.radio).sort()[0] ?? null;
  if (document.hidden) return;  // a background tab keeps the data, draws nothing
  renderHealth(tick.backends);
  renderRadio(tick);
  renderPep(tick);
  renderPaths(tick.paths);
  renderServices(tick.services);
  markLost(tick.backends);
}

function appendSample(ue, sample) {
  if (!series.has(ue)) series.set(ue, columns.map(() => []));
  const cols = series.get(ue);
  const ts = cols[0];
  if (ts.length && ts[ts.length - 1] >= sample[0]) return;  // the RNIS had nothing newer
  sample.forEach((v, i) => cols[i].push(v));
  const cutoff = sample[0] - historyS;
  let drop = 0;
  while (drop < ts.length && ts[drop] < cutoff) drop++;
  if (drop) cols.forEach((c) => c.splice(0, drop));
}

// The page's own watchdog: a stream that stops delivering is shown, not a frozen chart.
setInterval(() => {
  if (!source || !lastTickAt) return;
  const silent = Date.now() / 1e3 - lastTickAt;
  if (silent > Math.max(3, 4 * intervalS)) {
    setLink(false, `no update for ${silent.toFixed(0)} s`);
    document.querySelectorAll("section").forEach((s) => s.classList.add("lost"));
  }
}, 1000);

function setLink(ok, text) {
  const link = $("#link");
  link.textContent = text;
  link.className = `badge ${ok ? "ok" : "bad"}`;
  $("#banner").hidden = ok;
  $("#banner").textContent = ok ? "" : `⚠ ${text}: the values below are not live`;
}

// ---- rendering -----------------------------------------------------------------------------

const esc = (v) => String(v ?? "–").replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const num = (v, digits = 0) => (v === null || v === undefined ? "–" : Number(v).toLocaleString("en", {maximumFractionDigits: digits}));
const clock = (t) => (t ? new Date(t * 1000).toLocaleTimeString("en-GB") : "–");
const bytes = (v) => (v === null || v === undefined ? "–" : v >= 1e6 ? `${(v / 1e6).toFixed(1)} MB` : v >= 1e3 ? `${(v / 1e3).toFixed(1)} kB` : `${v} B`);
const rate = (v) => (v === null || v === undefined ? "–" : `${(v / 1e6).toFixed(2)} Mbit/s`);

const shown = new Map();  // selector -> the HTML last put there: unchanged tables are not touched

function fill(selector, rows) {
  setHtml(`${selector} tbody`, rows.join(""));
}

function setHtml(selector, html) {
  if (shown.get(selector) === html) return;
  shown.set(selector, html);
  $(selector).innerHTML = html;
}

function cells(values, keys) {
  return values.map((v, i) => `<td data-k="${keys[i]}">${v}</td>`).join("");
}

function renderHealth(backends) {
  setHtml("#health", Object.entries(backends).map(([name, b]) => {
    const state = b.ok === true ? "ok" : b.ok === false ? "bad" : "absent";
    const checks = Object.entries(b.health?.checks ?? {}).map(([check, c]) =>
      `<span class="chip ${c.ok ? "ok" : "bad"}" title="${esc(c.detail)}">${esc(check)}</span>`).join("");
    const word = state === "ok" ? "up" : state === "bad" ? "LOST" : "absent";
    return `<div class="card ${state}" data-backend="${esc(name)}"><b>${esc(name)}</b> <span class="state">${word}</span>
      <div class="muted">${state === "ok" ? "" : esc(b.detail)} ${state === "bad" ? `since ${clock(b.since)}` : ""}</div>
      <div>${checks}</div></div>`;
  }).join(""));
}

function markLost(backends) {
  document.querySelectorAll("section[data-backend]").forEach((section) => {
    const b = backends[section.dataset.backend];
    const lost = b && b.ok === false;
    section.classList.toggle("lost", lost);
    section.classList.toggle("absent", Boolean(b) && b.ok === null);
    section.querySelector(".lost-note").textContent = lost
      ? `${section.dataset.backend} lost since ${clock(b.since)} (last good read ${clock(b.last_ok)}): ${b.detail}`
      : b && b.ok === null ? `${section.dataset.backend}: ${b.detail}` : "";
  });
  $("#health-section").classList.remove("lost");
}

function renderRadio(tick) {
  const ues = Object.keys(tick.radio).sort();
  $("#radio-count").textContent = `${ues.length} UE(s), ${Object.keys(tick.cells).length} cell(s)`;
  fill("#cell-table", Object.entries(tick.cells).map(([cell, c]) =>
    `<tr>${cells([esc(cell), num(c.prbs), num(c.allocated), c.usage === null ? "–" : `${(100 * c.usage).toFixed(0)} %`, num(c.ues)],
      ["cell", "prbs", "allocated", "usage", "ues"])}</tr>`));
  const idx = Object.fromEntries(columns.map((c, i) => [c, i]));
  fill("#ue-table", ues.map((ue) => {
    const r = tick.radio[ue];
    const s = r.sample;
    return `<tr data-ue="${esc(ue)}" class="${ue === selected ? "selected" : ""}${r.gone ? " gone" : ""}">${cells(
      [esc(ue), esc(r.cell), esc(r.rnti), esc(r.imsi), num(s[idx.cqi]), num(s[idx.mcs]), num(s[idx.tbs]),
        num(s[idx.prbs]), num(s[idx.rlc]), num(s[idx.age_ms], 1)],
      ["ue", "cell", "rnti", "imsi", "cqi", "mcs", "tbs", "prbs", "rlc", "age_ms"])}</tr>`;
  }));
  $("#selected-ue").textContent = selected ?? "-";
  drawCharts();
}

$("#ue-table").addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-ue]");
  if (!row) return;
  selected = row.dataset.ue;
  document.querySelectorAll("#ue-table tr").forEach((r) => r.classList.toggle("selected", r === row));
  $("#selected-ue").textContent = selected;
  drawCharts();
});

let drawn = [null, 0];  // UE and newest sample time last drawn

function drawCharts() {
  const cols = series.get(selected);
  if (!cols || !window.uPlot) return;
  const newest = cols[0][cols[0].length - 1];
  if (drawn[0] === selected && drawn[1] === newest) return;
  drawn = [selected, newest];
  const width = Math.max(280, Math.floor(($("#charts").clientWidth - 24) / 2));
  if (!charts.length) {
    charts = CHARTS.map(([title, keys, colours]) => new uPlot({
      title, width, height: 170,
      scales: {x: {time: true}},
      axes: [{}, {size: 64}],  // room for "200,000"
      legend: {show: keys.length > 1},
      series: [{}, ...keys.map((k, i) => ({label: k, stroke: colours[i], width: 1.5, points: {show: false}}))],
    }, [[], ...keys.map(() => [])], $("#charts")));
  }
  const idx = Object.fromEntries(columns.map((c, i) => [c, i]));
  CHARTS.forEach(([, keys], i) => charts[i].setData([cols[0], ...keys.map((k) => cols[idx[k]])]));
}

window.addEventListener("resize", () => {
  const width = Math.max(280, Math.floor(($("#charts").clientWidth - 24) / 2));
  charts.forEach((c) => c.setSize({width, height: 170}));
});

function renderPep(tick) {
  const st = tick.pep_state;
  $("#pep-state").textContent = !st ? "" : `kernel program ${st.kernel.loaded ? "loaded" : `NOT loaded (${st.kernel.reason})`}` +
    ` · global mode ${st.global_mode} · RAN-leg CC ${st.ran_leg_cca ?? "–"}` +
    (st.rnis ? ` · RNIS feed: ${num(st.rnis.received)} received, ${num(st.rnis.applied)} applied` : " · no RNIS feed");
  if (st && document.activeElement !== $("#mode")) $("#mode").value = st.global_mode;
  fill("#meld-table", Object.entries(tick.meld).sort().map(([ue, m]) => `<tr data-ue="${esc(ue)}">${cells(
    [esc(ue), esc(m.mode), num(m.flows), num(m.counters.losses), num(m.counters.suppressed), num(m.counters.notified),
      num(m.counters.stale), m.radio_stale ? "stale" : num(m.radio_age_ms, 1)],
    ["ue", "mode", "flows", "losses", "kept", "cut", "stale", "age"])}</tr>`));
  fill("#decisions", decisions.slice(-20).reverse().map((d) => {
    const why = [d.stale ? `${d.stale} stale radio` : "", d.no_data ? `${d.no_data} no radio` : ""].filter(Boolean).join(", ");
    return `<tr data-seq="${d.seq}" class="${d.kept ? "kept" : "cut"}">${cells(
      [clock(d.t), esc(d.ue), esc(d.mode), num(d.losses), num(d.kept), num(d.cut), esc(why || "")],
      ["t", "ue", "mode", "losses", "kept", "cut", "why"])}</tr>`;
  }));
  fill("#flows", tick.flows.slice(0, 100).map((f) => `<tr data-flow="${f.id}">${cells(
    [f.id, esc(f.ue), esc(f.destination), esc(f.stage), num(f.ran?.cwnd), num(f.ran?.rtt_ms, 1), esc(f.ran?.cc),
      num(f.wan?.cwnd), num(f.wan?.rtt_ms, 1), bytes(f.bytes_to_ue), bytes(f.buffered_toward_ue), bytes(f.buffered_toward_server)],
    ["id", "ue", "destination", "stage", "ran_cwnd", "ran_rtt", "ran_cc", "wan_cwnd", "wan_rtt", "to_ue", "buf_ue", "buf_server"])}</tr>`));
  $("#rapid-absent").textContent = tick.rapid.absent ? `RAPID: ${tick.rapid.absent}` : "";
  fill("#rapid", tick.rapid.flows.map((f) => `<tr>${cells(
    [f.flow_id, esc(f.ue), esc(f.class), bytes(f.window_bytes), rate(f.allocated_bps), rate(f.arrival_bps), num(f.wan_rtt_ms, 1)],
    ["flow", "ue", "class", "window", "allocated", "arrival", "wan_rtt"])}</tr>`));
}

function renderPaths(paths) {
  $("#pm-absent").textContent = paths.absent ? `not available: ${paths.absent}` : paths.ues.length ? "" : "no UE under control";
  setHtml("#pm", paths.ues.map((ue) => `
    <h3>UE ${esc(ue.ue)} — ${esc(ue.mode)}, queue ${num(ue.queue_packets, 1)} packets</h3>
    <table><thead><tr><th>path</th><th>cell</th><th>active</th><th>LoS</th><th>capacity LoS</th><th>sample age s</th></tr></thead><tbody>
    ${ue.path_states.map((p) => `<tr>${cells([esc(p.path), esc(p.cell), p.active ? "active" : "backup", p.in_los ? "LoS" : "NLoS",
      rate(p.capacity_los_bps), num(p.last_sample_age_s, 2)], ["path", "cell", "active", "los", "capacity", "age"])}</tr>`).join("")}
    </tbody></table>
    <table><thead><tr><th>decision</th></tr></thead><tbody>
    ${ue.decisions.slice(-10).reverse().map((d) => `<tr><td>${esc(JSON.stringify(d))}</td></tr>`).join("")}
    </tbody></table>`).join(""));
}

function renderServices(services) {
  fill("#services", services.map((s) => `<tr>${cells([esc(s.name), esc(s.state), esc(s.transport), esc(s.uri)],
    ["name", "state", "transport", "uri"])}</tr>`));
}

function renderPlatform(view) {
  $("#platform-absent").textContent = view.absent ? `not shown: ${view.absent}` : "";
  fill("#packages", view.packages.map((p) => `<tr>${cells([esc(p.name), esc(p.appDId), esc(p.version), esc(p.state)],
    ["name", "appdid", "version", "state"])}</tr>`));
  fill("#instances", view.instances.map((i) => `<tr>${cells([esc(i.id), esc(i.name), esc(i.state)],
    ["id", "name", "state"])}</tr>`));
}

// ---- the one control (admin tokens only; the server checks too) ----------------------------

$("#mode-apply").addEventListener("click", async () => {
  const r = await fetch(`${API}/pep/mode`, {
    method: "PUT",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({mode: $("#mode").value}),
  }).catch(() => null);
  const body = r ? await r.json() : {detail: "the dashboard is not reachable"};
  $("#mode-result").textContent = r && r.ok ? `now ${body.mode ?? $("#mode").value}` : `refused: ${body.detail}`;
});

start();
