// The gpushare dashboard: reads v1/status every few seconds and redraws
// the page's tables in place (no reload). All text goes in through
// textContent, never as HTML.
"use strict";

const refreshMillis = 3000;

// Columns of each table: a title and how to get the cell from a row of
// the status. num marks right-aligned amounts.
const columns = {
  projects: [
    { title: "Project", value: p => p.department_row ? departmentTitle(p.department_row)
      : (p.department ? "\u2514 " : "") + p.project + (p.quota_error ? " (quota document rejected: " + p.quota_error + ")" : "") },
    { title: "Namespace", value: p => p.department_row ? "" : p.namespace || p.project },
    { title: "Guaranteed", value: p => p.guaranteed, num: true },
    { title: "Limit", value: p => p.partial ? "" : p.limit || "none", num: true },
    { title: "Deserved", value: p => p.deserved + (p.surplus_factor ? " (surplus x" + p.surplus_factor.toFixed(2) + ")" : ""), num: true },
    { title: "Allocated", value: p => p.allocated, num: true },
    { title: "Over quota", value: p => p.over_quota, num: true, over: true },
    { title: "Pending", value: p => p.department_row ? "" : p.pending, num: true },
    { title: "Suspended jobs", value: p => p.department_row ? "" : String(p.suspended_jobs), num: true },
    { title: "Priority", value: p => p.partial ? "" : String(p.priority), num: true },
    { title: "Updated", value: p => p.department_row ? "" : clock(p.updated) },
  ],
  utilization: [
    { title: "Project", value: p => p.project },
    { title: "Guaranteed", value: p => p.guaranteed || "none", num: true },
    { title: "Allocated", value: p => p.allocated_gpus.toFixed(2), num: true },
    { title: "Used memory", value: p => p.used_memory_gpus.toFixed(2), num: true },
    { title: "Used compute", value: p => p.used_compute_gpus.toFixed(2), num: true },
    { title: "Idle", value: p => p.idle_gpus.toFixed(2), num: true, over: true },
    { title: "Borrowed", value: p => p.borrowed_gpus.toFixed(2), num: true },
    { title: "Tenants", value: p => String(p.tenants), num: true },
  ],
  suspended: [
    { title: "Job", value: j => j.namespace + "/" + j.job },
    { title: "Project", value: j => j.project },
    { title: "Since", value: j => clock(j.since) },
    { title: "Reason", value: j => j.reason, reason: true },
  ],
  recent: [
    { title: "Time", value: e => clock(e.time) },
    { title: "Action", value: e => e.event },
    { title: "Job", value: e => e.namespace + "/" + e.job },
    { title: "Project", value: e => e.project || "" },
    { title: "Reason", value: e => e.reason || "", reason: true },
    { title: "By", value: e => e.by || "" },
  ],
};

// departmentTitle names a department's row; a token that cannot read all
// of its projects gets the name only (the service leaves its totals out).
function departmentTitle(d) {
  let title = "Department " + d.name;
  if (d.partial) {
    title += " (totals hidden: your token cannot read all of its projects)";
  }
  if (d.error) {
    title += " (" + d.error + ")";
  }
  return title;
}

// projectRows orders the projects as a tree: each department's row, then
// its projects; projects on their own at the top level, after them. A
// department row carries the department's totals in the projects'
// columns.
function projectRows(st) {
  const rows = [];
  const inDepartment = new Set();
  const byName = new Map((st.projects || []).map(p => [p.project, p]));
  (st.departments || []).forEach(d => {
    const over = d.partial ? "" : Math.max(0, Number(d.allocated) - Number(d.guaranteed)).toFixed(2);
    rows.push({ department_row: d, partial: d.partial, guaranteed: d.guaranteed || "", limit: d.limit,
      deserved: d.deserved || "", allocated: d.allocated || "", over_quota: over, priority: d.priority });
    (d.projects || []).forEach(name => {
      const p = byName.get(name);
      if (p) {
        rows.push(p);
        inDepartment.add(name);
      }
    });
  });
  (st.projects || []).forEach(p => {
    if (!inDepartment.has(p.project)) {
      rows.push(p);
    }
  });
  return rows;
}

function clock(t) {
  const d = new Date(t);
  if (!t || isNaN(d) || d.getFullYear() < 2000) {
    return "";
  }
  return d.toLocaleTimeString([], { hour12: false });
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined) {
    e.textContent = text;
  }
  if (cls) {
    e.className = cls;
  }
  return e;
}

function fillTable(id, rows, empty) {
  const table = document.getElementById(id);
  const cols = columns[id];
  const head = el("tr");
  cols.forEach(c => head.appendChild(el("th", c.title)));
  table.tHead.replaceChildren(head);
  const body = [];
  (rows || []).forEach(r => {
    const tr = el("tr");
    cols.forEach(c => {
      const cls = [c.num ? "num" : "", c.reason ? "reason" : "", c.over ? "over" : ""].join(" ").trim();
      tr.appendChild(el("td", c.value(r), cls));
    });
    if (id === "projects" && r.over_quota && Number(r.over_quota) > 0) {
      tr.className = "over";
    }
    if (id === "projects" && r.department_row) {
      tr.classList.add("department");
    } else if (id === "projects" && r.department) {
      tr.classList.add("in-department");
    }
    body.push(tr);
  });
  if (body.length === 0) {
    const tr = el("tr");
    const td = el("td", empty, "empty");
    td.colSpan = cols.length;
    tr.appendChild(td);
    body.push(tr);
  }
  table.tBodies[0].replaceChildren(...body);
}

function fillList(id, items, empty) {
  const list = document.getElementById(id);
  const section = document.getElementById(id + "-section");
  if (section) {
    section.hidden = !items || items.length === 0;
  }
  const lis = (items || []).map(i => el("li", i));
  if (lis.length === 0 && empty) {
    lis.push(el("li", empty, "empty"));
  }
  list.replaceChildren(...lis);
}

function summary(st) {
  const parts = ["Instance " + st.instance + " (" + (st.leader ? "leader" : "standby") + ")"];
  if (clock(st.last_cycle)) {
    parts.push("last cycle " + clock(st.last_cycle));
  }
  parts.push("refreshed " + clock(new Date().toISOString()));
  if (st.access && !st.access.all) {
    const ns = st.access.namespaces || [];
    parts.push("your token reads " + (ns.length ? "namespaces " + ns.join(", ") : "no namespace"));
  }
  return parts.join(" · ");
}

// gpuBox draws one GPU: its index and family, a bar of the shares held,
// and its tenants.
function gpuBox(g) {
  const box = el("div", undefined, "gpu " + (g.unavailable ? "unavailable" : g.family));
  box.appendChild(el("div", "GPU " + g.index + " · " + (g.unavailable ? "unavailable" : g.family), "gpu-title"));
  const bar = el("div", undefined, "bar");
  const fill = el("div", undefined, "fill");
  const held = g.capacity > 0 ? Math.min(100, Math.round(100 * g.held / g.capacity)) : 0;
  fill.style.width = held + "%";
  bar.appendChild(fill);
  box.appendChild(bar);
  box.appendChild(el("div", held + "% held", "gpu-held"));
  if (g.memory) {
    box.appendChild(memoryBar(g.memory));
  }
  (g.tenants || []).forEach(t => {
    box.appendChild(el("div", tenantLine(t) + " " + t.shares + "%" + tenantMemory(t.memory), "tenant"));
  });
  (g.guests || []).forEach(t => {
    const from = t.memory && t.memory.home !== undefined ? " from GPU " + t.memory.home : "";
    box.appendChild(el("div", "guest: " + tenantLine(t) + from + tenantMemory(t.memory), "tenant guest"));
  });
  if (g.unavailable) {
    box.title = g.unavailable;
  }
  return box;
}

function gib(mib) {
  return (mib / 1024).toFixed(1) + " GiB";
}

function tenantLine(t) {
  return (t.namespace ? t.namespace + "/" + t.job : t.job) + " (" + t.project + ")";
}

// tenantMemory says what a share tenant uses against its request and
// limit, what it borrows, and where it runs when it is a guest.
function tenantMemory(m) {
  if (!m) {
    return "";
  }
  let s = " · uses " + gib(m.used_mib) + " (request " + gib(m.request_mib) + ", limit " + gib(m.limit_mib) + ")";
  if (m.borrowed_mib > 0) {
    s += " · borrows " + gib(m.borrowed_mib);
  }
  if (m.guest_on !== undefined) {
    s += " · runs as a guest on GPU " + m.guest_on;
  }
  return s;
}

// memoryBar draws a GPU's memory in use as the device plugin reports it.
function memoryBar(mem) {
  const wrap = el("div", undefined, "gpu-memory");
  const bar = el("div", undefined, "bar memory");
  const fill = el("div", undefined, "fill");
  const pct = mem.total_mib > 0 ? Math.min(100, Math.round(100 * mem.used_mib / mem.total_mib)) : 0;
  fill.style.width = pct + "%";
  bar.appendChild(fill);
  wrap.appendChild(bar);
  wrap.appendChild(el("div", "memory " + gib(mem.used_mib) + " of " + gib(mem.total_mib), "gpu-held"));
  return wrap;
}

function fillGPUMap(nodes) {
  document.getElementById("gpu-map-section").hidden = !nodes || nodes.length === 0;
  const rows = (nodes || []).map(n => {
    const row = el("div", undefined, "node");
    row.appendChild(el("div", n.node + (n.unavailable ? " (out of planning: " + n.unavailable + ")" : ""), "node-name"));
    const gpus = el("div", undefined, "gpus");
    (n.gpus || []).forEach(g => gpus.appendChild(gpuBox(g)));
    row.appendChild(gpus);
    return row;
  });
  document.getElementById("gpu-map").replaceChildren(...rows);
}

const svgNS = "http://www.w3.org/2000/svg";

// sparkline draws values (oldest first) as a polyline scaled to top.
function sparkline(values, top, cls) {
  const w = 240, h = 40;
  if (values.length === 1) {
    values = [values[0], values[0]]; // one sample: a flat line
  }
  const line = document.createElementNS(svgNS, "polyline");
  const n = values.length;
  line.setAttribute("points", values.map((v, i) =>
    (i * w / (n - 1)).toFixed(1) + "," + (h - (top > 0 ? v / top : 0) * (h - 2) - 1).toFixed(1)).join(" "));
  line.setAttribute("class", cls);
  return line;
}

function fillTrend(trend) {
  const points = trend || [];
  const last = points.length ? points[points.length - 1].projects : {};
  const names = Object.keys(last).sort();
  document.getElementById("trend-section").hidden = names.length === 0;
  const rows = names.map(name => {
    const alloc = points.map(p => (p.projects[name] || {}).allocated || 0);
    const used = points.map(p => (p.projects[name] || {}).used);
    const hasUsed = used.some(u => u !== undefined && u !== null);
    const top = Math.max(1, ...alloc, ...used.map(u => u || 0));
    const row = el("div", undefined, "trend-row");
    row.appendChild(el("span", name, "trend-name"));
    const svg = document.createElementNS(svgNS, "svg");
    svg.setAttribute("width", "240");
    svg.setAttribute("height", "40");
    svg.setAttribute("class", "trend");
    svg.appendChild(sparkline(alloc, top, "allocated"));
    if (hasUsed) {
      svg.appendChild(sparkline(used.map(u => u || 0), top, "used"));
    }
    row.appendChild(svg);
    const now = last[name];
    row.appendChild(el("span", "allocated " + now.allocated.toFixed(2) + (now.used !== undefined && now.used !== null ? ", used " + now.used.toFixed(2) : "") + " (scale 0 to " + top.toFixed(2) + ")", "trend-now"));
    return row;
  });
  document.getElementById("trend").replaceChildren(...rows);
}

function render(st) {
  document.getElementById("summary").textContent = summary(st);
  document.getElementById("logout").hidden = !(st.access && st.access.login);
  const error = document.getElementById("error");
  error.hidden = !st.last_error;
  error.textContent = st.last_error ? "The last cycle took no action: " + st.last_error : "";
  fillTable("projects", projectRows(st), "No project has a quota or GPU work yet.");
  fillGPUMap(st.nodes);
  fillTrend(st.trend);
  fillTable("suspended", st.suspended, "None.");
  fillList("shrunk", (st.shrunk || []).map(j => j.namespace + "/" + j.job + " (" + j.project + "): " +
    Object.entries(j.groups || {}).map(([g, c]) => g + " runs " + c.now + " of " + c.count).join(", ") + " since " + clock(j.since) + ": " + j.reason));
  fillList("gangs", (st.gangs || []).map(g =>
    g.namespace + "/" + g.job + " (" + g.project + "): " + g.placed + " of " + g.wanted + " running since " + clock(g.since) + "; waits for " + g.waits_for));
  fillList("waiting", st.unplaced, "None.");
  fillList("unplaceable", st.unplaceable);
  fillList("out-of-planning", st.out_of_planning);
  fillList("record-errors", (st.record_errors || []).map(e => e.key + ": " + e.reason));
  fillList("warnings", st.warnings);
  fillTable("recent", st.recent_actions, "None yet.");
}

// refreshUtilization shows the utilization table when the service reads
// the GPU nodes' usage (404 otherwise: the section stays hidden).
async function refreshUtilization() {
  const section = document.getElementById("utilization-section");
  const resp = await fetch("/v1/utilization", { credentials: "same-origin", cache: "no-store" });
  if (!resp.ok) {
    section.hidden = true;
    return;
  }
  const u = await resp.json();
  section.hidden = false;
  fillTable("utilization", u.projects, "No GPU task reported yet.");
  let note = "GPU nodes read " + (clock(u.at) || "not yet") + ": " + u.nodes;
  if (u.failed && Object.keys(u.failed).length) {
    note += ", " + Object.keys(u.failed).length + " not answering";
  }
  if (u.outside_processes) {
    note += "; GPU processes of no task: " + u.outside_processes + " (" + u.outside_mib + " MiB)";
  }
  document.getElementById("utilization-note").textContent = note;
}

async function refresh() {
  const error = document.getElementById("error");
  try {
    const resp = await fetch("/v1/status", { credentials: "same-origin", cache: "no-store" });
    if (resp.status === 401 || resp.status === 403) {
      window.location.assign("/login");
      return;
    }
    if (!resp.ok) {
      throw new Error("HTTP " + resp.status + ": " + (await resp.text()).trim());
    }
    render(await resp.json());
    await refreshUtilization();
  } catch (e) {
    error.hidden = false;
    error.className = "stale";
    error.textContent = "Cannot read the status (" + e.message + "); showing the last one read.";
    return;
  }
  error.className = "err";
}

refresh();
setInterval(refresh, refreshMillis);
