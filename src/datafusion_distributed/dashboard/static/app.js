// The dashboard page: three views (queries, one query, workers) drawn from the coordinator's
// JSON, polled every second. No framework and no build step: plain DOM and an SVG stage graph.
"use strict";

const POLL_MS = 1000;
const main = document.getElementById("main");
const status = document.getElementById("status");
let lastBody = "";
let lastRoute = "";
let timer = null;
const openDetails = new Set(); // task metrics the reader opened, kept open across redraws

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

function seconds(s) {
  if (s === null || s === undefined) return "–";
  if (s >= 60) return `${Math.floor(s / 60)}m ${Math.round(s % 60)}s`;
  if (s >= 1) return `${s.toFixed(2)}s`;
  return `${(s * 1000).toFixed(1)}ms`;
}

function count(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en");
}

function clock(t) {
  if (!t) return "–";
  const d = new Date(t * 1000);
  return d.toLocaleTimeString("en-GB", { hour12: false });
}

function preview(sql) {
  // the list shows a query's statement, not its leading comments
  const text = sql.replace(/^\s*--.*$/gm, "").replace(/\s+/g, " ").trim();
  return text || sql.replace(/\s+/g, " ");
}

function badge(state) {
  return `<span class="badge ${esc(String(state).replace(/ /g, "-"))}">${esc(state)}</span>`;
}

function route() {
  const hash = location.hash || "#/";
  if (hash.startsWith("#/query/")) return { view: "query", id: decodeURIComponent(hash.slice(8)) };
  if (hash.startsWith("#/workers")) return { view: "workers" };
  return { view: "queries" };
}

function apiPath(r) {
  if (r.view === "query") return `/api/queries/${encodeURIComponent(r.id)}`;
  if (r.view === "workers") return "/api/workers";
  return "/api/queries";
}

// -- queries ---------------------------------------------------------------------------------
function renderQueries(data) {
  const rows = data.queries.map((q) => `
    <tr class="link" data-query-id="${esc(q.query_id)}" data-state="${esc(q.state)}">
      <td>${badge(q.state)}</td>
      <td class="sql" title="${esc(q.sql)}">${esc(preview(q.sql))}</td>
      <td class="num hide-small">${clock(q.started)}</td>
      <td class="num">${seconds(q.seconds)}</td>
      <td class="num">${stageCount(q)}</td>
      <td class="num">${count(q.rows)}</td>
      <td class="num hide-small">${bytes(q.bytes_exchanged)}</td>
      <td class="error hide-small">${esc(q.error.split("\n")[0].slice(0, 160))}</td>
    </tr>`).join("");
  return `<h1>Queries</h1>
    ${data.queries.length === 0 ? '<p class="muted">No query has run yet.</p>' : `
    <div class="scroll"><table id="queries-table">
      <thead><tr><th>state</th><th>query</th><th class="num hide-small">started</th><th class="num">time</th>
      <th class="num">stages</th><th class="num">rows</th><th class="num hide-small">exchanged</th>
      <th class="hide-small">error</th></tr></thead>
      <tbody>${rows}</tbody></table></div>`}`;
}

// -- one query -------------------------------------------------------------------------------
function levels(stages) {
  const byId = new Map(stages.map((s) => [s.stage, s]));
  const level = new Map();
  const visit = (s, depth) => {
    if (level.has(s.stage)) return level.get(s.stage);
    if (depth > stages.length) return 0; // a cycle: never in a real plan
    let l = 0;
    for (const p of s.inputs) {
      const producer = byId.get(p);
      if (producer) l = Math.max(l, visit(producer, depth + 1) + 1);
    }
    level.set(s.stage, l);
    return l;
  };
  stages.forEach((s) => visit(s, 0));
  return level;
}

function renderDag(stages) {
  if (!stages.length) return "";
  const W = 174, H = 104, GX = 40, GY = 18, PAD = 12;
  const level = levels(stages);
  const columns = [];
  for (const s of stages) {
    const l = level.get(s.stage);
    (columns[l] = columns[l] || []).push(s);
  }
  const pos = new Map();
  columns.forEach((column, l) => column.forEach((s, i) => {
    pos.set(s.stage, { x: PAD + l * (W + GX), y: PAD + i * (H + GY) });
  }));
  const width = PAD * 2 + columns.length * W + (columns.length - 1) * GX;
  let height = PAD * 2 + Math.max(...columns.map((c) => c.length)) * (H + GY) - GY;
  const edges = [];
  let lanes = 0; // edges that skip a column run below it, each on a lane of its own
  for (const s of stages) {
    for (const p of s.inputs) {
      const a = pos.get(p), b = pos.get(s.stage);
      if (!a || !b) continue;
      const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
      const producer = stages.find((t) => t.stage === p);
      const label = esc(producer ? producer.output : "");
      const skipped = columns.slice(level.get(p) + 1, level.get(s.stage));
      if (!skipped.length) {
        const mx = (x1 + x2) / 2;
        edges.push(`<path class="edge" d="M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2 - 4},${y2}"
          marker-end="url(#arrow)"/>
          <text class="edge-label" x="${mx}" y="${(y1 + y2) / 2 - 4}" text-anchor="middle">${label}</text>`);
        continue;
      }
      const below = Math.max(...skipped.map((c) => PAD + c.length * (H + GY) - GY));
      const lane = Math.max(below, y1, y2) + 14 + lanes * 14;
      lanes += 1;
      height = Math.max(height, lane + PAD);
      const ax = x1 + GX / 2, bx = x2 - GX / 2;
      edges.push(`<path class="edge" d="M${x1},${y1} C${ax},${y1} ${x1},${lane} ${ax + 6},${lane} L${bx - 6},${lane}
          C${x2},${lane} ${bx},${y2} ${x2 - 4},${y2}" marker-end="url(#arrow)"/>
        <text class="edge-label" x="${(ax + bx) / 2}" y="${lane - 3}" text-anchor="middle">${label}</text>`);
    }
  }
  const boxes = stages.map((s) => {
    const { x, y } = pos.get(s.stage);
    const tasks = Math.max(1, s.tasks);
    const done = Math.min(s.tasks_done, tasks);
    const fill = s.state === "finished" ? W - 20 : Math.round((W - 20) * done / tasks);
    const name = s.name.length > 25 ? `${s.name.slice(0, 24)}…` : s.name;
    const extra = [s.tasks_retried ? `${s.tasks_retried} retried` : "", s.tasks_failed ? `${s.tasks_failed} failed` : ""]
      .filter(Boolean).join(" · ");
    const line1 = s.state === "folded" ? "runs inside another stage"
      : `${done}/${s.tasks} done · ${s.tasks_running} running`;
    return `<g class="stage ${esc(s.state.replace(/ /g, "-"))}" data-stage="${s.stage}" data-state="${esc(s.state)}"
        data-done="${s.tasks_done}" data-tasks="${s.tasks}" data-running="${s.tasks_running}">
      <title>${esc(`Stage ${s.stage}: ${s.name} (${s.state})\n${s.reason}\n${s.adaptive}`)}</title>
      <rect class="box" x="${x}" y="${y}" width="${W}" height="${H}" rx="6"/>
      <text class="title" x="${x + 10}" y="${y + 18}">Stage ${s.stage} · ${esc(s.state)}</text>
      <text x="${x + 10}" y="${y + 34}">${esc(name)}</text>
      <rect class="bar" x="${x + 10}" y="${y + 42}" width="${W - 20}" height="8" rx="3"/>
      <rect class="fill" x="${x + 10}" y="${y + 42}" width="${fill}" height="8" rx="3"/>
      <text x="${x + 10}" y="${y + 66}">${esc(line1)}</text>
      ${extra ? `<text x="${x + W - 10}" y="${y + 98}" text-anchor="end" class="warn">${esc(extra)}</text>` : ""}
      <text x="${x + 10}" y="${y + 82}">${count(s.rows)} rows · ${bytes(s.bytes)}</text>
      <text x="${x + 10}" y="${y + 98}">${seconds(s.seconds)}</text>
    </g>`;
  }).join("");
  return `<div class="dag" id="stage-graph"><svg width="${width}" height="${height}" viewBox="0 0 ${width} ${height}"
      role="img" aria-label="stage graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto">
      <path d="M0,0 L10,5 L0,10 z" fill="#98a2b3"/></marker></defs>
    ${edges.join("")}${boxes}</svg></div>`;
}

function renderTasks(q) {
  if (!q.tasks.length) return '<p class="muted">No task has started yet.</p>';
  const rows = q.tasks.map((t) => {
    const key = `${q.query_id}/${t.stage}/${t.task}/${t.attempt}`;
    const metrics = t.metrics ? `<details data-key="${esc(key)}"${openDetails.has(key) ? " open" : ""}>
      <summary>metrics</summary><pre>${esc(t.metrics)}</pre></details>` : "";
    return `<tr data-stage="${t.stage}" data-task="${t.task}" data-state="${esc(t.state)}">
      <td class="num">${t.stage}</td><td class="num">${t.task}</td><td class="num">${t.attempt}</td>
      <td>${badge(t.state)}</td><td>${esc(t.worker)}</td>
      <td class="num">${seconds(t.seconds)}</td>
      <td class="num hide-small">${t.queue_seconds === null ? "–" : seconds(t.queue_seconds)}</td>
      <td class="num">${bytes(t.input_bytes)}</td>
      <td class="num hide-small">${bytes(t.fetched_bytes)}</td>
      <td class="num">${count(t.output_rows)}</td>
      <td class="num">${bytes(t.output_bytes)}</td>
      <td>${metrics}${t.error ? `<div class="error">${esc(t.error)}</div>` : ""}</td></tr>`;
  }).join("");
  return `<div class="scroll"><table id="task-table"><thead><tr>
    <th class="num">stage</th><th class="num">task</th><th class="num">attempt</th><th>state</th><th>worker</th>
    <th class="num">duration</th><th class="num hide-small">queue</th><th class="num">input</th>
    <th class="num hide-small">fetched</th><th class="num">rows out</th><th class="num">bytes out</th>
    <th>DataFusion metrics</th></tr></thead><tbody>${rows}</tbody></table></div>`;
}

function renderQuery(q) {
  const notes = [];
  if (q.single_node) notes.push(`Runs on one node: ${esc(q.single_node)}`);
  for (const d of q.decisions) notes.push(`Adaptive: ${esc(d)}`);
  for (const w of q.lost_workers) notes.push(`Worker lost: ${esc(w)}`);
  for (const s of q.stages) if (s.reason) notes.push(`Stage ${s.stage} tasks: ${esc(s.reason)}`);
  if (q.settings.length) notes.push(`Settings: ${esc(q.settings.join(", "))}`);
  return `<h1>Query <span class="muted">${esc(q.query_id)}</span> ${badge(q.state)}</h1>
    <pre class="sql" id="query-sql">${esc(q.sql)}</pre>
    <div class="facts">
      <div><span>started</span><b>${clock(q.started)}</b></div>
      <div><span>time</span><b>${seconds(q.seconds)}</b></div>
      <div><span>stages</span><b id="stages-done">${stageCount(q)}</b></div>
      <div><span>tasks running</span><b>${q.tasks_running}</b></div>
      <div><span>tasks done</span><b>${q.tasks_done}</b></div>
      <div><span>result rows</span><b>${count(q.rows)}</b></div>
      <div><span>rows written</span><b>${count(q.rows_written)}</b></div>
      <div><span>exchanged</span><b>${bytes(q.bytes_exchanged)}</b></div>
    </div>
    ${q.error ? `<p class="error" id="query-error">${esc(q.error)}</p>` : ""}
    <h2>Stages</h2>${renderDag(q.stages)}
    ${notes.length ? `<ul class="notes">${notes.map((n) => `<li>${n}</li>`).join("")}</ul>` : ""}
    <h2>Tasks</h2>${renderTasks(q)}
    ${q.explain ? `<h2>explain(analyze=True)</h2><pre id="explain">${esc(q.explain)}</pre>` : ""}`;
}

// stages done of those that run, and how many planned ones run inside another (folded)
function stageCount(q) {
  if (!q.stages_folded) return `${q.stages_done}/${q.stages_total}`;
  return `${q.stages_done}/${q.stages_total} (${q.stages_total + q.stages_folded} planned, ${q.stages_folded} folded)`;
}

// -- workers ---------------------------------------------------------------------------------
function renderWorkers(data) {
  const rows = data.workers.map((w) => `<tr data-url="${esc(w.url)}" data-health="${esc(w.health)}">
    <td>${esc(w.url)}</td><td>${badge(w.health)}${w.error ? `<div class="error">${esc(w.error)}</div>` : ""}</td>
    <td class="num">${w.running_tasks}</td>
    <td class="num">${bytes(w.spool_bytes)}</td>
    <td class="num hide-small">${count(w.spool_files)}</td>
    <td class="num">${w.in_process ? `${bytes(w.memory_bytes)}<div class="note">this process, shared</div>` : bytes(w.memory_bytes)}</td>
    <td class="num">${bytes(w.served_bytes)}</td>
    <td class="num hide-small">${w.lost_at ? clock(w.lost_at) : "–"}</td>
    <td class="num hide-small">${clock(w.checked_at)}</td></tr>`).join("");
  return `<h1>Workers</h1><div class="scroll"><table id="workers-table"><thead><tr>
    <th>URL</th><th>health</th><th class="num">running tasks</th><th class="num">spool</th>
    <th class="num hide-small">spool files</th><th class="num">memory</th><th class="num">served</th>
    <th class="num hide-small">last lost</th><th class="num hide-small">checked</th></tr></thead>
    <tbody>${rows}</tbody></table></div>`;
}

// -- polling -----------------------------------------------------------------------------------
async function refresh() {
  const r = route();
  const key = JSON.stringify(r);
  try {
    const response = await fetch(apiPath(r), { cache: "no-store", credentials: "same-origin" });
    const body = await response.text();
    status.textContent = `updated ${clock(Date.now() / 1000)}`;
    status.classList.remove("stale");
    if (body === lastBody && key === lastRoute) return;
    lastBody = body;
    lastRoute = key;
    if (!response.ok) {
      main.innerHTML = `<p class="error">${esc(JSON.parse(body).error || response.statusText)}</p>`;
      return;
    }
    const data = JSON.parse(body);
    if (r.view === "query") main.innerHTML = renderQuery(data);
    else if (r.view === "workers") main.innerHTML = renderWorkers(data);
    else main.innerHTML = renderQueries(data);
  } catch (err) {
    status.textContent = "not updating: the coordinator does not answer";
    status.classList.add("stale");
  }
}

function schedule() {
  clearTimeout(timer);
  refresh().finally(() => { timer = setTimeout(schedule, POLL_MS); });
}

function navigate() {
  const r = route();
  document.querySelectorAll("[data-nav]").forEach((a) => {
    a.classList.toggle("active", a.dataset.nav === (r.view === "workers" ? "workers" : "queries"));
  });
  lastBody = "";
  schedule();
}

main.addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-query-id]");
  if (row) location.hash = `#/query/${encodeURIComponent(row.dataset.queryId)}`;
});
main.addEventListener("toggle", (event) => {
  const details = event.target;
  if (!details.dataset || !details.dataset.key) return;
  if (details.open) openDetails.add(details.dataset.key); else openDetails.delete(details.dataset.key);
}, true);
window.addEventListener("hashchange", navigate);
navigate();
