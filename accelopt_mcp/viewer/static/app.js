// accelopt view: the front end. Plain JavaScript and SVG, no build step, nothing from the network.
// Everything that comes from the database (kernel source, plans, prompts, replies, names) is
// untrusted: it is only ever written as text (textContent, createTextNode, setAttribute on
// data-/class/title attributes), never as markup.
//
// The token: the URL `accelopt view` printed carries it once (?token=). It is kept in this
// origin's localStorage (scoped by port, unlike a cookie), taken out of the address bar, and
// sent as `Authorization: Bearer` on every data request; the server takes it in no other way.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const POLL_LIVE_MS = 2000;
const POLL_IDLE_MS = 10000;
const LETTER = {
  COMPILE_ERROR: "C", RUNTIME_ERROR: "R", INCORRECT_NUMERICAL: "N", INCORRECT_SHAPE: "S",
  INCORRECT_DTYPE: "D", TIMEOUT: "T", NO_CODE: "∅", LLM_FAILED: "L",
};

const TOKEN_KEY = "accelopt_view_token";
const NEED_TOKEN = "Open the URL `accelopt view` printed (the one with ?token=) in this browser to see this viewer.";

let pollTimer = null;
let current = { page: null };
let tokenHere = null; // where localStorage cannot be used (storage disabled): this page only

// ----------------------------------------------------------------------------- the token

function takeTokenFromAddress() {
  const params = new URLSearchParams(location.search);
  const given = params.get("token");
  if (given === null) return;
  tokenHere = given;
  try { localStorage.setItem(TOKEN_KEY, given); } catch (e) { /* kept for this page only */ }
  params.delete("token");
  const rest = params.toString();
  history.replaceState(history.state, "", location.pathname + (rest ? `?${rest}` : "") + location.hash);
}

function storedToken() {
  try { return localStorage.getItem(TOKEN_KEY) || tokenHere; } catch (e) { return tokenHere; }
}

function forgetToken(sent) {
  // Only the token this request sent: another tab may have stored a newer one meanwhile.
  if (tokenHere === sent) tokenHere = null;
  try { if (localStorage.getItem(TOKEN_KEY) === sent) localStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing stored */ }
}

class NeedToken extends Error {
  constructor() { super(NEED_TOKEN); this.name = "NeedToken"; }
}

function showNeedToken() {
  clearTimeout(pollTimer);
  setLive("");
  setMain(h("p", { class: "error", "data-need-token": "" }, NEED_TOKEN));
}

// ----------------------------------------------------------------------------- helpers

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setAttrs(el, attrs);
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "on") {
      for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    } else {
      el.setAttribute(key, String(value));
    }
  }
}

function short(id) { return id ? String(id).slice(0, 8) : "-"; }
function ms(v) { return v === null || v === undefined ? "-" : `${Number(v).toPrecision(4)} ms`; }
function num(v, d = 2) { return v === null || v === undefined ? "-" : Number(v).toFixed(d); }
function pct(v) { return v === null || v === undefined ? "-" : `${Number(v).toFixed(1)}%`; }
function secs(v) {
  if (v === null || v === undefined) return "-";
  if (v < 120) return `${v.toFixed(0)} s`;
  if (v < 7200) return `${(v / 60).toFixed(1)} min`;
  return `${(v / 3600).toFixed(1)} h`;
}
function when(iso) {
  if (!iso) return "-";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? "-" : date.toLocaleString();
}
function runPath(id) { return `/run/${encodeURIComponent(id)}`; }

async function getJSON(url, etag) {
  const token = storedToken();
  if (!token) throw new NeedToken();
  const headers = { Authorization: `Bearer ${token}` };
  if (etag) headers["If-None-Match"] = etag;
  const response = await fetch(url, { headers, credentials: "omit" });
  if (response.status === 401) { forgetToken(token); throw new NeedToken(); }
  if (response.status === 304) return { unchanged: true, etag };
  let body = null;
  try { body = await response.json(); } catch (e) { body = { error: `${response.status} ${response.statusText}` }; }
  if (!response.ok) throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
  return { data: body, etag: response.headers.get("ETag") };
}

function problems(list) {
  if (!list || !list.length) return null;
  return h("ul", { class: "problems", "data-problems": "" }, list.map((p) => h("li", {}, p)));
}

function setMain(...children) {
  const main = document.getElementById("main");
  main.replaceChildren(...children.flat().filter(Boolean));
}

function showError(err) {
  if (err instanceof NeedToken) { showNeedToken(); return; }
  setMain(h("p", { class: "error" }, String(err && err.message ? err.message : err)));
}

function setLive(text) { document.getElementById("live").textContent = text; }

function schedule(fn, ms) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(() => { if (!document.hidden) fn(); else schedule(fn, ms); }, ms);
}

// ----------------------------------------------------------------------------- routing

function navigate(path, replace) {
  if (replace) history.replaceState({}, "", path); else history.pushState({}, "", path);
  route();
}

// Goes to `page` with one parameter of the address set (dropped when empty), the others kept.
function navigateWith(page, name, value) {
  const next = new URLSearchParams(location.search);
  if (value) next.set(name, value); else next.delete(name);
  navigate(`${page}?${next}`);
}

// The query of a page's data request: those of the page's parameters it passes on, if given.
function apiQuery(params, keys) {
  const query = new URLSearchParams();
  for (const key of keys) if (params.get(key)) query.set(key, params.get(key));
  return query;
}

document.addEventListener("click", (event) => {
  const link = event.target.closest && event.target.closest("a[data-nav]");
  if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
  event.preventDefault();
  navigate(link.getAttribute("href"));
});
window.addEventListener("popstate", route);

function route() {
  clearTimeout(pollTimer);
  if (!storedToken()) return showNeedToken();
  const path = location.pathname;
  const params = new URLSearchParams(location.search);
  if (path.startsWith("/run/")) return runPage(decodeURIComponent(path.slice(5)), params.get("node"));
  if (path === "/memory") return memoryPage(params);
  if (path === "/suites") return suitesPage(params);
  return runsPage(params);
}

// ----------------------------------------------------------------------------- runs page

async function runsPage(params) {
  current = { page: "runs" };
  const query = apiQuery(params, ["task", "status"]);
  let etag = null;
  const load = async () => {
    try {
      const got = await getJSON(`/api/runs?${query}`, etag);
      if (current.page !== "runs") return;
      if (!got.unchanged) { etag = got.etag; renderRuns(got.data, params); }
      setLive(`updated ${new Date().toLocaleTimeString()}`);
    } catch (err) { showError(err); }
    schedule(load, POLL_IDLE_MS / 2);
  };
  await load();
}

function filterSelect(name, options, chosen) {
  const select = h("select", { name, "data-filter": name },
    h("option", { value: "" }, `any ${name}`),
    options.map((o) => h("option", { value: o, selected: o === chosen ? "selected" : null }, o)));
  select.addEventListener("change", () => navigateWith("/", name, select.value));
  return select;
}

function renderRuns(data, params) {
  const rows = data.runs.map((r) => h("tr", { "data-run-id": r.id },
    h("td", {}, h("a", { href: runPath(r.id), "data-nav": "" }, short(r.id))),
    h("td", { class: "num" }, when(r.created_at)),
    h("td", {}, r.definition_name),
    h("td", { class: `state-${r.state}` }, r.state),
    h("td", {}, r.ended || ""),
    h("td", { class: "num" }, `${r.iteration}/${r.iterations_total ?? "?"}`),
    h("td", { class: "num" }, ms(r.best_latency_ms)),
    h("td", {}, r.best_over_reference || "-"),
    h("td", { class: "num" }, pct(r.percent_of_peak)),
    h("td", { class: "num" }, r.llm_calls),
    h("td", { class: "num" }, `${r.tokens_in}+${r.tokens_out}`),
    h("td", { class: "num" }, `$${num(r.cost_usd, 4)}`),
    h("td", { class: "num" }, secs(r.wall_s)),
    h("td", {}, r.backend || "-"),
    h("td", {}, r.hardware || "-"),
    h("td", {}, r.problems.length ? h("span", { class: "error", title: r.problems.join("\n") }, `${r.problems.length} problem(s)`) : ""),
  ));
  const head = ["run", "started", "task", "state", "how it ended", "iter", "best", "best over the reference",
    "% of peak", "LLM calls", "tokens", "cost", "wall", "backend", "hardware", ""];
  setMain(
    h("h2", {}, "Runs"),
    h("div", { class: "filters" }, "filter:",
      filterSelect("task", data.tasks, params.get("task")),
      filterSelect("status", data.statuses, params.get("status"))),
    data.runs.length
      ? h("table", { id: "runs" }, h("thead", {}, h("tr", {}, head.map((c) => h("th", {}, c)))), h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No runs in this database yet: start one with `accelopt optimize`."),
  );
}

// ----------------------------------------------------------------------------- run page

async function runPage(runId, selected) {
  current = { page: "run", runId, selected, etag: null, data: null };
  const state = current;
  const load = async () => {
    try {
      const started = performance.now();
      const got = await getJSON(`/api/run/${encodeURIComponent(runId)}`, state.etag);
      if (current !== state) return;
      const fetched = performance.now();
      if (!got.unchanged) {
        state.etag = got.etag;
        state.data = got.data;
        renderRun(state);
        window.__viewerTimings = { fetch_ms: fetched - started, render_ms: performance.now() - fetched, nodes: got.data.nodes.length };
      }
      setLive(`${got.data ? got.data.run.state : state.data.run.state} · updated ${new Date().toLocaleTimeString()}`);
    } catch (err) { if (current === state) showError(err); }
    if (current !== state) return;
    const live = state.data && ["running", "pending"].includes(state.data.run.state);
    schedule(load, live ? POLL_LIVE_MS : POLL_IDLE_MS);
  };
  await load();
}

function renderRun(state) {
  const d = state.data;
  const r = d.run;
  const settings = Object.entries(d.settings).map(([k, v]) => `${k}=${v}`).join(" ");
  const summary = h("div", { class: "card", id: "run-summary" },
    h("h3", {}, `run ${r.id} · ${r.definition_name}`),
    h("dl", { class: "kv" },
      h("dt", {}, "state"), h("dd", { class: `state-${r.state}`, "data-run-state": r.state }, r.state),
      r.ended ? [h("dt", {}, "how it ended"), h("dd", {}, r.ended)] : null,
      h("dt", {}, "iteration"), h("dd", {}, `${r.iteration}/${r.iterations_total ?? "?"}`),
      h("dt", {}, "best"), h("dd", {}, `${ms(r.best_latency_ms)} ${r.best_solution_id ? short(r.best_solution_id) : ""}`),
      h("dt", {}, "over the reference"), h("dd", {}, r.best_over_reference || "-"),
      h("dt", {}, "over the initial kernel"), h("dd", {}, r.best_over_initial || "-"),
      h("dt", {}, "% of peak"), h("dd", {}, pct(r.percent_of_peak)),
      h("dt", {}, "LLM"), h("dd", {}, `${r.llm_calls} calls, ${r.tokens_in}+${r.tokens_out} tokens, $${num(r.cost_usd, 4)}`),
      h("dt", {}, "wall"), h("dd", {}, secs(r.wall_s)),
      h("dt", {}, "backend / hardware"), h("dd", {}, `${r.backend || "-"} / ${r.hardware || "-"}`),
      settings ? [h("dt", {}, "settings"), h("dd", {}, settings)] : null,
    ),
    problems(d.problems));
  const noKernel = d.no_kernel.length
    ? h("details", {}, h("summary", {}, `${d.no_kernel.length} attempt(s) produced no kernel`),
      h("ul", {}, d.no_kernel.map((a) => h("li", {}, `${a.slot}: ${a.status}${a.error ? " — " + a.error : ""}`))))
    : null;
  const ties = d.ties.length
    ? h("details", { id: "ties" }, h("summary", {}, `${d.ties.length} tie(s) in the beam`),
      h("ul", {}, d.ties.map((t) => h("li", { "data-tie": t.kept }, t.text))))
    : null;
  const left = h("div", {},
    summary,
    h("div", { class: "card" }, h("h3", {}, "Best latency per iteration (log scale)"), chart(d)),
    h("div", { class: "card" }, h("h3", {}, "Kernels by iteration"), legend(), h("div", { class: "tree-wrap" }, tree(d, state)), noKernel, ties),
  );
  // A refresh of a live run keeps the open node panel as it is (its tab, its open calls).
  const kept = state.rendered ? document.getElementById("node-panel") : null;
  const panel = kept || h("div", { id: "node-panel" }, h("p", { class: "muted" }, "Click a kernel to see its code, diff, profile, LLM calls and lessons."));
  setMain(h("div", { class: "layout" }, left, panel));
  if (state.selected && !kept) openNode(state, state.selected, false);
  state.rendered = true;
}

function legend() {
  const item = (label) => h("span", { "data-legend": label, class: "legend-item" }, label);
  const el = h("div", { class: "legend" },
    item("passed"), item("failed (letter: C compile, R runtime, N numerical, S shape, D dtype, T timeout)"),
    item("untrusted (flagged)"), item("pending / unprofiled"), item("outside the run"),
    item("blue ring: in the beam"), item("gold ring: best"), item("dashed orange: tie"));
  const colours = ["var(--pass)", "var(--fail)", "var(--untrusted)", "var(--pending)", "#fff", "#fff", "#fff", "#fff"];
  const borders = [null, null, null, null, "var(--outside)", "var(--beam)", "var(--best)", "var(--untrusted)"];
  [...el.children].forEach((child, i) => {
    child.style.setProperty("--c", colours[i]);
    if (borders[i]) child.style.setProperty("--b", borders[i]);
  });
  return el;
}

function chart(d) {
  const width = 620, height = 200, left = 56, right = 90, top = 14, bottom = 26;
  const points = d.iterations.filter((p) => p.best_latency_ms > 0);
  const values = points.map((p) => p.best_latency_ms);
  if (d.reference_latency_ms > 0) values.push(d.reference_latency_ms);
  const svg = s("svg", { width, height, id: "latency-chart", role: "img", "aria-label": "best latency per iteration" });
  if (!values.length) {
    svg.appendChild(s("text", { x: left, y: height / 2 }, "no latency yet"));
    return svg;
  }
  let lo = Math.log10(Math.min(...values)), hi = Math.log10(Math.max(...values));
  if (hi - lo < 0.2) { lo -= 0.1; hi += 0.1; }
  lo -= 0.05; hi += 0.05;
  const maxIt = Math.max(1, ...d.iterations.map((p) => p.iteration));
  const x = (i) => left + (i / maxIt) * (width - left - right);
  const y = (v) => top + (hi - Math.log10(v)) / (hi - lo) * (height - top - bottom);
  svg.appendChild(s("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
  svg.appendChild(s("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }));
  // Ticks at 1, 2 and 5 of each decade (only 1 when the range spans many decades).
  const steps = hi - lo > 3 ? [1] : [1, 2, 5];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of steps) {
      const v = m * Math.pow(10, e);
      if (Math.log10(v) < lo || Math.log10(v) > hi) continue;
      svg.appendChild(s("line", { class: "axis", x1: left - 3, y1: y(v), x2: width - right, y2: y(v) }));
      svg.appendChild(s("text", { x: 4, y: y(v) + 3 }, `${Number(v.toPrecision(3))} ms`));
    }
  }
  for (let i = 0; i <= maxIt; i++) svg.appendChild(s("text", { x: x(i) - 3, y: height - 8 }, String(i)));
  if (d.reference_latency_ms > 0) {
    const ry = y(d.reference_latency_ms);
    svg.appendChild(s("line", { class: "reference", x1: left, y1: ry, x2: width - right, y2: ry, "data-reference": d.reference_latency_ms }));
    svg.appendChild(s("text", { x: width - right - 110, y: ry - 3 }, `reference ${ms(d.reference_latency_ms)}`));
  }
  if (points.length > 1) {
    svg.appendChild(s("polyline", { class: "series", points: points.map((p) => `${x(p.iteration)},${y(p.best_latency_ms)}`).join(" ") }));
  }
  for (const p of points) {
    svg.appendChild(s("circle", { class: "point", cx: x(p.iteration), cy: y(p.best_latency_ms), r: 3.5, "data-iteration": p.iteration },
      s("title", {}, `iteration ${p.iteration}: ${ms(p.best_latency_ms)}${p.percent_of_peak != null ? `, ${pct(p.percent_of_peak)} of peak` : ""}`)));
    const label = p.percent_of_peak != null ? `${ms(p.best_latency_ms)} · ${pct(p.percent_of_peak)}` : ms(p.best_latency_ms);
    svg.appendChild(s("text", { x: x(p.iteration) + 5, y: y(p.best_latency_ms) - 5 }, label));
  }
  return svg;
}

function tree(d, state) {
  const colWidth = 150, rowHeight = 30, pad = 30;
  const columns = new Map();
  for (const n of d.nodes) {
    if (!columns.has(n.column)) columns.set(n.column, []);
    columns.get(n.column).push(n);
  }
  const order = [...columns.keys()].sort((a, b) => a - b);
  const where = new Map();
  let tallest = 0;
  order.forEach((c, ci) => {
    const list = columns.get(c);
    list.forEach((n, ri) => where.set(n.id, { x: pad + ci * colWidth, y: pad + 14 + ri * rowHeight }));
    tallest = Math.max(tallest, list.length);
  });
  const width = pad * 2 + Math.max(1, order.length) * colWidth;
  const height = pad * 2 + 14 + tallest * rowHeight;
  const svg = s("svg", { width, height, id: "tree" });
  order.forEach((c, ci) => svg.appendChild(s("text", { x: pad + ci * colWidth - 10, y: 16, class: "col-label" },
    c < 0 ? "outside the run" : c === 0 ? "initial" : `iteration ${c}`)));
  const edges = s("g", { class: "edges" });
  for (const e of d.edges) {
    const a = where.get(e.parent), b = where.get(e.child);
    if (!a || !b) continue;
    const mid = (a.x + b.x) / 2;
    // Parent and child in one column (a failed try and its repair): bow out to the left.
    const shape = a.x === b.x
      ? `M${a.x},${a.y} C${a.x - 28},${a.y} ${b.x - 28},${b.y} ${b.x},${b.y}`
      : `M${a.x},${a.y} C${mid},${a.y} ${mid},${b.y} ${b.x},${b.y}`;
    const path = s("path", {
      class: `edge ${e.verdict || ""}`, d: shape,
      "data-parent": e.parent, "data-child": e.child,
      on: { click: () => openNode(state, e.parent, true) },
    }, s("title", {}, `${short(e.parent)} → ${short(e.child)}${e.over_parent_x ? `: ${num(e.over_parent_x)}x over the parent` : ""}${e.verdict ? ` (${e.verdict})` : ""}`));
    edges.appendChild(path);
  }
  svg.appendChild(edges);
  const tiesLayer = s("g", { class: "ties" });
  for (const t of d.ties) {
    const a = where.get(t.placed), b = where.get(t.challenger);
    if (!a || !b) continue;
    const bend = Math.max(a.x, b.x) + 40;
    tiesLayer.appendChild(s("path", { class: "tie", d: `M${a.x + 12},${a.y} Q${bend},${(a.y + b.y) / 2} ${b.x + 12},${b.y}`, "data-tie-kept": t.kept },
      s("title", {}, t.text)));
    const verdict = t.verdict ? `h2h: ${t.verdict}` : "not re-measured";
    tiesLayer.appendChild(s("text", { class: "tie-label", x: bend - 14, y: (a.y + b.y) / 2 + 3 }, `tie · ${verdict}`,
      s("title", {}, t.text)));
  }
  svg.appendChild(tiesLayer);
  const nodes = s("g", { class: "nodes" });
  for (const n of d.nodes) {
    const p = where.get(n.id);
    const classes = ["node", n.outcome];
    if (n.outside_run) classes.push("outside");
    if (n.missing) classes.push("missing");
    if (n.id === state.selected) classes.push("selected");
    const g = s("g", {
      class: classes.join(" "), transform: `translate(${p.x},${p.y})`,
      "data-solution-id": n.missing ? null : n.id, "data-missing-id": n.missing ? n.id : null,
      "data-outcome": n.outcome, "data-in-beam": n.in_beam ? "1" : null, "data-best": n.best ? "1" : null,
      tabindex: 0, role: "button", "aria-label": `kernel ${short(n.id)}: ${n.outcome}`,
      on: {
        click: () => openNode(state, n.id, true),
        keydown: (event) => { if (event.key === "Enter" || event.key === " ") { event.preventDefault(); openNode(state, n.id, true); } },
      },
    });
    if (n.best) g.appendChild(s("circle", { class: "ring-best", r: 14 }));
    if (n.in_beam) g.appendChild(s("circle", { class: "ring-beam", r: 11.5 }));
    g.appendChild(s("circle", { class: "body", r: 9 }));
    const letter = n.outcome === "failed" ? (LETTER[n.status] || "×") : n.outcome === "untrusted" ? "!" : n.initial ? "0" : "";
    if (letter) g.appendChild(s("text", { class: "letter", y: 3.5 }, letter));
    const label = `${short(n.id)} ${n.latency_ms ? ms(n.latency_ms) : n.status || ""}`;
    g.appendChild(s("text", { class: "label", x: 14, y: 3 }, label));
    g.appendChild(s("title", {}, nodeTitle(n)));
    nodes.appendChild(g);
  }
  svg.appendChild(nodes);
  return svg;
}

function nodeTitle(n) {
  const parts = [`${n.name} (${n.id})`, `${n.outcome}${n.status ? " · " + n.status : ""}`];
  if (n.latency) parts.push(`median ${n.latency}`);
  if (n.over_parent) parts.push(n.over_parent);
  if (n.over_reference) parts.push(n.over_reference);
  if (n.untrusted_flags.length) parts.push(`untrusted: ${n.untrusted_flags.join(", ")}`);
  if (n.in_beam) parts.push("in the beam");
  if (n.best) parts.push("the run's best");
  if (n.outside_run) parts.push("outside the run");
  if (n.missing) parts.push("not stored");
  if (n.error) parts.push(n.error.slice(0, 300));
  return parts.join("\n");
}

// ----------------------------------------------------------------------------- node panel

async function openNode(state, id, push) {
  state.selected = id;
  document.querySelectorAll("#tree .node.selected").forEach((el) => el.classList.remove("selected"));
  const el = document.querySelector(`#tree .node[data-solution-id="${CSS.escape(id)}"]`);
  if (el) el.classList.add("selected");
  if (push) history.replaceState({}, "", `${runPath(state.runId)}?node=${encodeURIComponent(id)}`);
  const panel = document.getElementById("node-panel");
  const known = state.data && state.data.nodes.find((n) => n.id === id);
  if (known && known.missing) {
    panel.replaceChildren(h("div", { class: "card" }, h("h3", {}, `kernel ${id}`), h("p", { class: "error" }, "named as a parent, but not stored in this database")));
    return;
  }
  panel.replaceChildren(h("p", { class: "muted" }, `loading ${short(id)}…`));
  try {
    const got = await getJSON(`/api/node/${encodeURIComponent(id)}?run=${encodeURIComponent(state.runId)}`);
    if (state.selected !== id) return;
    panel.replaceChildren(...nodePanel(state, got.data, known));
  } catch (err) {
    panel.replaceChildren(h("p", { class: "error" }, String(err.message || err)));
  }
}

function tabs(sections) {
  const bar = h("div", { class: "tabs" });
  const body = h("div", {});
  const show = (name) => {
    [...bar.children].forEach((b) => b.classList.toggle("on", b.dataset.tab === name));
    body.replaceChildren(sections.find((x) => x[0] === name)[1]());
  };
  for (const [name] of sections) bar.appendChild(h("button", { type: "button", "data-tab": name, on: { click: () => show(name) } }, name));
  show(sections[0][0]);
  return [bar, body];
}

function nodePanel(state, n, known) {
  const head = h("div", { class: "card", id: "node-head", "data-node-id": n.id },
    h("h3", {}, `${n.name}`),
    h("dl", { class: "kv" },
      h("dt", {}, "id"), h("dd", { "data-field": "id" }, n.id),
      h("dt", {}, "parent"), h("dd", {}, n.parent_id
        ? h("a", { "data-parent-link": n.parent_id, on: { click: () => openNode(state, n.parent_id, true) } }, `${short(n.parent_id)}${n.parent_missing ? " (not stored)" : ""}`)
        : "none (a root kernel)"),
      known ? [h("dt", {}, "outcome"), h("dd", {}, `${known.outcome}${known.status ? " · " + known.status : ""}${known.in_beam ? " · in the beam" : ""}${known.best ? " · best" : ""}${known.outside_run ? " · outside the run" : ""}`)] : null,
      known && known.over_parent ? [h("dt", {}, "speedup"), h("dd", {}, known.over_parent)] : null,
      n.slot ? [h("dt", {}, "slot"), h("dd", {}, `${n.slot.iteration}/${n.slot.beam_index}/${n.slot.plan_index}/${n.slot.attempt_index} · ${n.slot.status}${n.slot.repairs ? ` · ${n.slot.repairs} repair(s)` : ""}`)] : null,
      n.slot && n.slot.error ? [h("dt", {}, "error"), h("dd", {}, h("pre", { class: "wrap" }, n.slot.error))] : null,
      h("dt", {}, "language"), h("dd", {}, `${n.language} · ${n.entry_point} · by ${n.author}`),
    ),
    problems(n.problems));
  const [bar, body] = tabs([
    ["diff", () => diffView(n)],
    ["code", () => h("div", {}, n.files.map((f) => [h("div", { class: "muted" }, f.path), h("pre", { "data-code": f.path }, f.content)]))],
    ["plan", () => n.plan ? h("pre", { class: "wrap", id: "plan" }, n.plan) : h("p", { class: "muted" }, "no plan stored (an initial or imported kernel)")],
    ["profile", () => profileView(n)],
    [`LLM calls (${n.calls.length})`, () => callsView(n)],
    [`lessons (${n.lessons_produced.length}/${n.lessons_shown.length})`, () => lessonsView(n)],
  ]);
  return [head, h("div", { class: "card" }, bar, body)];
}

function diffView(n) {
  if (!n.parent_id) return h("p", { class: "muted" }, "no parent: nothing to diff against");
  if (n.parent_missing) return h("p", { class: "error" }, "its parent is not stored: no diff");
  if (!n.diff.length) return h("p", { class: "muted", id: "diff" }, "identical to its parent");
  const cls = { "+": "add", "-": "del", " ": "ctx", "@": "hunk", file: "file" };
  const prefix = { "+": "+", "-": "-", " ": " ", "@": "", file: "" };
  return h("pre", { class: "diff", id: "diff" }, n.diff.map((l) => h("span", { class: cls[l.kind] }, prefix[l.kind] + l.text)));
}

function profileView(n) {
  if (!n.profiles.length) return h("p", { class: "muted", id: "profile" }, "no profile stored");
  return h("div", { id: "profile" }, n.profiles.map((p) => h("div", { class: "card", "data-profile-id": p.id },
    h("dl", { class: "kv" },
      h("dt", {}, "status"), h("dd", {}, `${p.status}${p.trusted ? "" : " (untrusted)"} on ${p.hardware}`),
      h("dt", {}, "median"), h("dd", { "data-field": "median" }, p.latency || "-"),
      h("dt", {}, "over the reference"), h("dd", {}, p.over_reference || "-"),
      p.comparisons.length ? [h("dt", {}, "timed beside"), h("dd", {}, p.comparisons.map((c) => h("div", {}, `${c.text}${c.baseline_id ? ` [${short(c.baseline_id)}]` : ""}`)))] : null,
      h("dt", {}, "roofline"), h("dd", {}, p.roofline || "-"),
      h("dt", {}, "samples"), h("dd", {}, `${p.runs ?? "-"} samples, ${p.measurements} measurement(s)${p.contended ? ", host busy" : ""}`),
      h("dt", {}, "flags"), h("dd", {}, p.flags.length ? p.flags.map((f) => h("span", { class: `flag ${p.untrusted_flags.includes(f) ? "bad" : ""}` }, f)) : "none"),
    ),
    p.breakdown.length ? h("table", { class: "breakdown" },
      h("thead", {}, h("tr", {}, ["where", "ms", "share", "calls"].map((c) => h("th", {}, c)))),
      h("tbody", {}, p.breakdown.map((b) => h("tr", {},
        h("td", {}, b.what), h("td", { class: "num" }, Number(b.ms).toPrecision(3)),
        h("td", {}, bar(b.share), ` ${(b.share * 100).toFixed(0)}%`),
        h("td", { class: "num" }, b.calls))))) : null,
    Object.keys(p.counters).length ? h("details", {}, h("summary", {}, "counters"),
      h("pre", {}, Object.entries(p.counters).map(([k, v]) => `${k} = ${v}`).join("\n"))) : null,
    p.log_tail ? h("details", {}, h("summary", {}, "log (its end)"), h("pre", { class: "wrap" }, p.log_tail)) : null,
  )));
}

function bar(share) {
  // Set through the DOM: the page's policy allows no inline style attributes.
  const el = h("span", { class: "bar", "data-share": share });
  el.style.width = `${Math.round(Number(share) * 120)}px`;
  return el;
}

function callsView(n) {
  if (!n.calls.length) return h("p", { class: "muted" }, "no LLM call recorded for it");
  return h("div", { id: "calls" }, n.calls.map((c) => {
    const box = h("div", {});
    const details = h("details", { "data-call-id": c.id },
      h("summary", {}, `${c.role} · ${c.purpose || "-"} · ${c.model} · ${c.status} · ${c.tokens_in}+${c.tokens_out} tok · $${num(c.cost_usd, 4)} · ${num(c.latency_s)} s`),
      box);
    details.addEventListener("toggle", async () => {
      if (!details.open || box.childNodes.length) return;
      box.appendChild(h("p", { class: "muted" }, "loading…"));
      try {
        const got = await getJSON(`/api/call/${encodeURIComponent(c.id)}`);
        const call = got.data;
        box.replaceChildren(
          c.error ? h("p", { class: "error" }, c.error) : null,
          ...(call.messages || []).map((m) => [h("div", { class: "muted" }, `— ${m.role} —`), h("pre", { class: "wrap" }, m.content)]),
          call.messages ? null : h("p", { class: "muted" }, "no prompt stored"),
          h("div", { class: "muted" }, "— reply —"),
          h("pre", { class: "wrap" }, call.reply ?? "(no reply)"));
      } catch (err) { box.replaceChildren(h("p", { class: "error" }, String(err.message || err))); }
    });
    return details;
  }));
}

function lessonItem(l) {
  return h("details", { "data-lesson-id": l.id },
    h("summary", {}, `${l.title}${l.speedup ? ` (${num(l.speedup)}x)` : ""}${l.removed ? " [removed]" : ""}`),
    h("pre", { class: "wrap" }, l.strategy),
    l.pseudocode ? h("pre", {}, l.pseudocode) : null,
    h("div", { class: "muted" }, `namespace ${l.namespace}${l.iteration != null ? ` · iteration ${l.iteration}` : ""} · ${short(l.slow_solution_id)} → ${short(l.fast_solution_id)}`));
}

function lessonsView(n) {
  return h("div", {},
    h("h3", {}, "Produced (it was the slow or the fast kernel of the pair)"),
    n.lessons_produced.length ? n.lessons_produced.map(lessonItem) : h("p", { class: "muted" }, "none"),
    h("h3", {}, "Shown to its planner (the memory its iteration started with)"),
    n.lessons_shown.length ? n.lessons_shown.map(lessonItem) : h("p", { class: "muted" }, "none"));
}

// ----------------------------------------------------------------------------- memory, suites

async function memoryPage(params) {
  current = { page: "memory" };
  const query = apiQuery(params, ["namespace", "q"]);
  try {
    const { data } = await getJSON(`/api/memory?${query}`);
    const search = h("input", { type: "search", name: "q", placeholder: "search lessons", value: params.get("q") || "" });
    const form = h("form", { class: "filters", on: { submit: (e) => {
      e.preventDefault();
      navigateWith("/memory", "q", search.value);
    } } }, search, h("button", { type: "submit" }, "search"));
    const spaces = h("div", { class: "filters" }, "namespaces:",
      h("a", { href: "/memory", "data-nav": "" }, "all"),
      Object.entries(data.namespaces).map(([ns, count]) => h("a", { href: `/memory?namespace=${encodeURIComponent(ns)}`, "data-nav": "", "data-namespace": ns }, `${ns} (${count})`)));
    setMain(h("h2", {}, "Memory"), spaces, form,
      data.error ? h("p", { class: "error" }, data.error) : null,
      h("p", { class: "muted" }, `${data.items.length} item(s)${data.namespace ? ` in ${data.namespace}` : ""}${data.text ? ` matching “${data.text}”` : ""}`),
      h("div", { id: "memory-items" }, data.items.map(lessonItem)));
    setLive(`updated ${new Date().toLocaleTimeString()}`);
  } catch (err) { showError(err); }
}

async function suitesPage(params) {
  current = { page: "suites" };
  const query = apiQuery(params, ["a", "b"]);
  try {
    const { data } = await getJSON(`/api/suites?${query}`);
    if (!data.suites.length) { setMain(h("h2", {}, "Suites"), h("p", { class: "muted" }, "No suites in this database: `accelopt suite run` makes one.")); return; }
    const pick = (name) => {
      const select = h("select", { name, "data-suite-pick": name },
        h("option", { value: "" }, name === "a" ? "newest" : "(none: one suite)"),
        data.suites.map((x) => h("option", { value: x.id, selected: params.get(name) === x.id ? "selected" : null }, `${x.name} · ${short(x.id)} · ${x.status}`)));
      select.addEventListener("change", () => navigateWith("/suites", name, select.value));
      return select;
    };
    const table = data.table ? h("table", { id: "suite-table" },
      h("thead", {}, h("tr", {}, data.table.columns.map((c) => h("th", {}, c)))),
      h("tbody", {}, data.table.rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c)))),
        h("tr", {}, data.table.geomeans.map((c) => h("td", {}, h("strong", {}, c)))))) : null;
    const cmp = data.comparison ? h("div", { class: "card", id: "suite-comparison" },
      h("h3", {}, `A ${short(data.comparison.a)} vs B ${short(data.comparison.b)}`),
      h("table", {}, h("thead", {}, h("tr", {}, ["task", "A % of peak", "B % of peak", "A speedup", "B speedup"].map((c) => h("th", {}, c)))),
        h("tbody", {}, data.comparison.rows.map((r) => h("tr", {}, h("td", {}, r.task), h("td", {}, r.a_percent), h("td", {}, r.b_percent), h("td", {}, r.a_speedup), h("td", {}, r.b_speedup))))),
      h("p", {}, data.comparison.summary)) : null;
    setMain(h("h2", {}, "Suites"), h("div", { class: "filters" }, "A:", pick("a"), "B (side by side):", pick("b")),
      data.error ? h("p", { class: "error" }, data.error) : null, table, cmp);
  } catch (err) { showError(err); }
}

takeTokenFromAddress();
route();
