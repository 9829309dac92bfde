// jr2ray Console: plain JS, no dependencies. The page carries the workflows' seats and graphs; everything about runs
// comes from the API with the instance token, and live updates come from the run's SSE feed (read with fetch, so the
// token travels in the Authorization header, never in a URL).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const n = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") n.className = v;
    else if (k === "text") n.textContent = v;
    else if (k.startsWith("on")) n.addEventListener(k.slice(2), v);
    else n.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) n.append(kid);
  return n;
};

const state = {
  catalogue: JSON.parse($("#catalogue").textContent || "[]") || [],
  token: sessionStorage.getItem("jr2ray.token") || "",
  workflow: null,   // selected workflow name
  run: null,        // selected run id
  feed: null,       // AbortController of the SSE fetch
  gateSig: "",      // what the gate cards were last drawn from
  picks: {},        // iid -> last pick args, to show beside its receipt
  runsTimer: null,
  runsSig: "",      // what the runs list was last drawn from
  gatesSig: "",     // what the "Waiting for you" list was last drawn from
  startSeq: 0,      // the newest start-form request; older answers are dropped
  timelineTimer: null, // the pending redraw of the timeline (feed events come in bursts)
};

// ---- API -----------------------------------------------------------------------------------------------------
async function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  if (state.token) headers["Authorization"] = "Bearer " + state.token;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(opts.json);
  }
  const res = await fetch(path, { method: opts.method || "GET", headers, body: opts.body, signal: opts.signal });
  let body = null;
  const text = await res.text();
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = text; }
  if (res.status === 401 && state.token) lock("The token was refused.");
  return { status: res.status, ok: res.ok, body, next: res.headers.get("x-next-cursor") };
}

// ---- token / mode ------------------------------------------------------------------------------------------------
async function unlock(token) {
  const candidate = token.trim();
  if (!candidate) return;
  state.token = candidate;
  const r = await api("/runs?limit=1");
  if (!r.ok) { lock(r.status === 401 ? "That token was refused." : "Could not check the token."); return; }
  sessionStorage.setItem("jr2ray.token", state.token);
  document.body.classList.replace("locked", "unlocked");
  $("#token-msg").textContent = "";
  $("#token").value = "";
  clearInterval(state.runsTimer);
  await refreshRuns();
  state.runsTimer = setInterval(refreshRuns, 2000);
  const linked = runFromHash();
  if (linked && linked !== state.run) await selectRun(linked);
  if (state.workflow && !state.run) await renderStart(state.workflow);
  $("#mode").textContent = "unlocked";  // last: from here on the page is ready to drive
}

function lock(message) {
  state.token = "";
  sessionStorage.removeItem("jr2ray.token");
  document.body.classList.replace("unlocked", "locked");
  $("#mode").textContent = "read-only";
  $("#token-msg").textContent = message || "";
  clearInterval(state.runsTimer);
  if (state.feed) state.feed.abort();
  state.feed = null;
  state.run = null;
  state.runsSig = "";
  state.gatesSig = "";
  resetRunList();
  delete $("#start-form").dataset.workflow;
  $("#run-list").replaceChildren();
  $("#run-detail").hidden = true;
  $("#start").hidden = true;
  $("#start-form").replaceChildren();
  $("#run-title").textContent = "";
  $("#gates").replaceChildren();
  $("#allowed-now").hidden = true;
  $("#allowed-turns").replaceChildren();
}

// ---- workflows ---------------------------------------------------------------------------------------------------
function renderWorkflows() {
  const ul = $("#workflow-list");
  ul.replaceChildren(...state.catalogue.map((w) =>
    el("li", { "data-workflow": w.name, class: w.name === state.workflow ? "selected" : "",
               onclick: () => { selectRun(null); selectWorkflow(w.name); } },
       el("span", { text: w.name }), el("span", { class: "sub", text: w.digest }))));
}

function selectWorkflow(name) {
  const w = state.catalogue.find((x) => x.name === name);
  if (!w) return;
  state.workflow = name;
  renderWorkflows();
  $("#wf-title").textContent = name;
  $("#graph").innerHTML = w.svg;
  renderSeats(w);
  $("#warnings").replaceChildren(...(w.warnings.length ? w.warnings.map((t) => el("li", { text: t }))
                                     : [el("li", { class: "notice", text: "none" })]));
  if (state.token && !state.run) renderStart(name);
  else $("#start").hidden = true;
}

function renderSeats(w) {
  $("#seats").replaceChildren(...w.seats.map((s) =>
    el("div", { class: "seat", "data-state": s.state },
       el("span", { class: "state", text: s.state }),
       el("span", { class: "party " + s.party, text: s.label }),
       el("div", { class: "events" }, s.events.map((e) => el("code", { text: e }))))));
}

async function renderStart(name) {
  const box = $("#start-form");
  if (box.dataset.workflow === name && box.firstChild) { $("#start").hidden = false; return; }  // keep what is typed
  const seq = ++state.startSeq;
  const r = await api("/workflows/" + encodeURIComponent(name));
  if (!r.ok || seq !== state.startSeq || state.workflow !== name || state.run || !state.token) return;
  const schema = r.body.door_schema || { type: "object", properties: {} };
  const form = schemaForm(schema, {
    id: "start-run", legend: "input", submit: "Start run", disabled: false,
    onsubmit: async (input, msg) => {
      const res = await api("/workflows/" + encodeURIComponent(name) + "/runs", { method: "POST", json: { input } });
      if (res.status === 201) { await refreshRuns(); selectRun(res.body.id); }
      else msg(res.body && res.body.detail ? res.body.detail : "HTTP " + res.status, true);
    },
  });
  box.dataset.workflow = name;
  box.replaceChildren(form);
  $("#start").hidden = false;
}

// ---- forms from JSON schema ----------------------------------------------------------------------------------------
function fieldType(prop) {
  if (prop.enum) return "enum";
  if (prop.type) return prop.type;
  const alts = (prop.anyOf || []).filter((a) => a.type !== "null");
  if (alts.length === 1 && alts[0].type) return alts[0].type;
  return "json";
}

function schemaForm(schema, { id, legend, why, submit, disabled, onsubmit, event, gate }) {
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const inputs = [];
  const fs = el("fieldset", { disabled: disabled }, el("legend", { text: legend }));
  if (why) fs.append(el("p", { class: "why", text: why }));
  for (const [name, prop] of Object.entries(props)) {
    const kind = fieldType(prop);
    let input;
    if (kind === "boolean") input = el("input", { type: "checkbox", name });
    else if (kind === "integer" || kind === "number") input = el("input", { type: "number", name, step: kind === "integer" ? "1" : "any" });
    else if (kind === "enum") input = el("select", { name }, prop.enum.map((v) => el("option", { value: JSON.stringify(v), text: String(v) })));
    else if (kind === "string") input = el("textarea", { name, rows: "2" });
    else input = el("textarea", { name, rows: "2", placeholder: "JSON" });
    if (prop.default !== undefined && kind !== "boolean") input.value = typeof prop.default === "string" ? prop.default : JSON.stringify(prop.default);
    if (kind === "boolean" && prop.default) input.checked = true;
    input.dataset.kind = kind;
    inputs.push([name, input, kind]);
    fs.append(el("label", {}, el("span", { text: (prop.title || name) + (required.has(name) ? " *" : "") }),
                 prop.description ? el("span", { class: "desc", text: prop.description }) : null, input));
  }
  const msgEl = el("span", { class: "form-msg" });
  fs.append(el("button", { type: "submit", text: submit }), msgEl);
  const msg = (text, err) => { msgEl.textContent = text; msgEl.className = "form-msg " + (err ? "err" : "ok"); };
  const form = el("form", { class: "schema-form", id, "data-event": event, "data-gate": gate }, fs);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const out = {};
    for (const [name, input, kind] of inputs) {
      if (kind === "boolean") { out[name] = input.checked; continue; }
      const raw = input.value;
      if (raw === "" && !required.has(name)) continue;
      try {
        if (kind === "integer" || kind === "number") out[name] = Number(raw);
        else if (kind === "enum") out[name] = JSON.parse(raw);
        else if (kind === "string") out[name] = raw;
        else out[name] = JSON.parse(raw);
      } catch (_) { msg(name + ": not valid JSON", true); return; }
    }
    msg("sending…", false);
    await onsubmit(out, msg);
  });
  return form;
}

// ---- runs (the list and its pages are in runlist.js) ------------------------------------------------------------
async function selectRun(id) {
  if (state.feed) { state.feed.abort(); state.feed = null; }
  state.run = id;
  state.gateSig = "";
  state.picks = {};
  $("#history tbody").replaceChildren();
  $("#gates").replaceChildren();
  $("#run-title").textContent = id ? "run " + id : "";
  $("#run-detail").hidden = !id;
  $("#allowed-now").hidden = !id;
  $("#allowed-turns").replaceChildren();
  document.querySelectorAll("#run-list li").forEach((li) => li.classList.toggle("selected", li.dataset.run === id));
  if (!id) {
    if (runFromHash()) history.replaceState(null, "", location.pathname + location.search);
    if (state.workflow) selectWorkflow(state.workflow);
    return;
  }
  $("#start").hidden = true;
  const r = await api("/runs/" + encodeURIComponent(id));
  if (!r.ok || state.run !== id) return;
  if (r.body.workflow !== state.workflow) selectWorkflow(r.body.workflow);
  $("#start").hidden = true;
  // The run's own version's chart, not the file's now: an edit after its start does not redraw it.
  const g = await api("/runs/" + encodeURIComponent(id) + "/graph.svg");
  if (state.run !== id) return;
  if (g.ok && typeof g.body === "string") $("#graph").innerHTML = g.body;
  renderStatus(r.body);
  refreshTelemetry(id);
  refreshTimeline(id);
  openFeed(id);
}

function renderStatus(run) {
  if (run.id !== state.run) return;
  const lit = new Set(run.active || []);
  document.querySelectorAll("#graph .state").forEach((g) => g.classList.toggle("lit", lit.has(g.dataset.path)));
  document.querySelectorAll("#seats .seat").forEach((s) => s.classList.toggle("lit", lit.has(s.dataset.state)));
  const value = typeof run.value === "string" ? run.value : JSON.stringify(run.value);
  const parts = [el("span", { class: "badge " + run.status, id: "run-status-badge", text: run.status }),
                 el("span", { text: "  value " + value })];
  if (run.version) parts.push(el("span", { id: "run-version", title: run.version, text: "  version " + run.version.slice(0, 12) }));
  if (run.output !== null && run.output !== undefined) parts.push(el("span", { text: "  output " + JSON.stringify(run.output) }));
  if (run.error) parts.push(el("span", { text: "  error " + JSON.stringify(run.error) }));
  $("#run-status").replaceChildren(...parts);
  renderGates(run);
  renderAllowed(run);
  const li = document.querySelector(`#run-list li[data-run="${CSS.escape(run.id)}"] .badge`);
  if (li) { li.className = "badge " + run.status; li.textContent = run.status; }
}

// The Run's own line for each live Agent Turn (jr2ray/menu/texts.py via the surface), never rebuilt here.
function renderAllowed(run) {
  const live = (run.turns || []).filter((t) => t.active && t.allowed_now);
  $("#allowed-turns").replaceChildren(...(live.length ? live.map((t) =>
    el("div", { class: "allowed-turn", "data-iid": t.iid, "data-slot": t.slot },
       el("span", { class: "slot", text: t.slot }), el("span", { class: "sub", text: " " + t.state }),
       el("pre", { text: t.allowed_now })))
    : [el("p", { class: "notice", text: "No Agent Turn is live." })]));
}

function renderGates(run) {
  const gates = run.gates || [];
  const sig = JSON.stringify(gates.map((g) => [g.id, g.accepts_now, g.meta]));
  if (sig === state.gateSig) return;  // keep what the user is typing
  state.gateSig = sig;
  $("#gates").replaceChildren(...gates.map((g) => {
    const now = new Set(g.accepts_now);
    return el("div", { class: "card gate-card", "data-gate": g.id },
      el("h3", {}, "Gate ", el("code", { text: g.id })),
      g.meta !== null && g.meta !== undefined ? el("div", { class: "meta", text: JSON.stringify(g.meta, null, 2) }) : null,
      g.accepts.map((a) => schemaForm(a.schema || { properties: {} }, {
        legend: a.name, why: a.description + (now.has(a.name) ? "" : " (not accepted now)"), submit: "Send " + a.name,
        disabled: !now.has(a.name), event: a.name, gate: g.id,
        onsubmit: async (input, msg) => {
          const res = await api(`/runs/${encodeURIComponent(run.id)}/gates/${g.id.split("/").map(encodeURIComponent).join("/")}/events`,
                                { method: "POST", json: { event: a.name, input } });
          if (res.ok) msg("sent", false);
          else if (res.status === 409) msg(res.body.detail + " — accepts now: " + (res.body.accepts_now.join(", ") || "nothing"), true);
          else msg((res.body && res.body.detail) || "HTTP " + res.status, true);
        },
      })));
  }));
}

function historyTime(at) {
  return new Date((at || Date.now() / 1000) * 1000).toLocaleTimeString();
}

function pickCell(name, args) {
  return el("td", {}, el("code", { text: name }), args ? el("span", { class: "sub", text: " " + JSON.stringify(args) }) : null);
}

// A pick gets its row at once; an outstanding one (a Gate, an Effect, ...) shows "waiting" until its receipt.
function addPickRow(data) {
  $("#history tbody").append(el("tr", { "data-pick": data.name, "data-iid": data.iid, "data-pending": "1" },
    el("td", { class: "mono", text: historyTime(data.at) }), el("td", { class: "mono", text: data.iid }),
    pickCell(data.name, data.args), el("td", { class: "wait", text: "…" }), el("td", { class: "wait", text: "…" }),
    el("td", { class: "wait", text: "waiting for the receipt" })));
}

function addReceiptRow(data) {
  const yes = (b) => el("td", { class: b ? "yes" : "no", text: b ? "yes" : "no" });
  const answer = data.refused ? el("td", { class: "refused", text: "refused: " + data.refused + (data.detail ? " — " + data.detail : "") })
                              : el("td", { class: "answer", text: data.answer || "" });
  const pending = [...document.querySelectorAll("#history tbody tr[data-pending]")]
    .find((tr) => tr.dataset.iid === data.iid && tr.dataset.pick === data.pick);
  const cells = [yes(data.moved), yes(data.turn_complete), answer];
  if (pending) {
    pending.removeAttribute("data-pending");
    pending.replaceChildren(...[...pending.children].slice(0, 3), ...cells);
    return;
  }
  const args = state.picks[data.iid + ":" + data.pick];
  $("#history tbody").append(el("tr", { "data-pick": data.pick, "data-iid": data.iid },
    el("td", { class: "mono", text: historyTime(data.at) }), el("td", { class: "mono", text: data.iid }),
    pickCell(data.pick, args), ...cells));
}

// ---- SSE feed ----------------------------------------------------------------------------------------------------
async function openFeed(id, since = 0) {
  const ctrl = new AbortController();
  state.feed = ctrl;
  let lastId = since, ended = false;
  try {
    const res = await fetch(`/runs/${encodeURIComponent(id)}/events?since=${since}`,
                            { headers: { Authorization: "Bearer " + state.token }, signal: ctrl.signal });
    if (res.status === 401) { lock("The token was refused."); return; }
    if (!res.ok || !res.body) return;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let kind = "message", data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) continue;  // keep-alive comment
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data += line.slice(5).trim();
          else if (line.startsWith("id:")) lastId = Number(line.slice(3).trim()) || lastId;
        }
        if (!data || state.run !== id) continue;
        if (kind === "end") ended = true;
        onFeed(kind, JSON.parse(data));
      }
    }
  } catch (_) {
    if (ctrl.signal.aborted) return;  // another run was selected, or the Console was locked
  }
  // The stream dropped before the run ended (a proxy timeout, a replica restart): pick up where it stopped.
  if (!ended && state.run === id && state.feed === ctrl && state.token) {
    setTimeout(() => { if (state.run === id && state.feed === ctrl) openFeed(id, lastId); }, 2000);
  }
}

function onFeed(kind, data) {
  if (kind === "status") renderStatus(data);
  else if (kind === "pick") { state.picks[data.iid + ":" + data.name] = data.args; addPickRow(data); }
  else if (kind === "receipt") addReceiptRow(data);
  else if (kind === "telemetry") refreshTelemetry(state.run);
  else if (kind === "end") { refreshRuns(); refreshTelemetry(state.run); }
  if (kind !== "message") soonTimeline(state.run);
}

// ---- cache chart ---------------------------------------------------------------------------------------------------
// One SVG element with its attributes (and text): what the cache chart and the timeline draw with.
function svgEl(tag, attrs, text) {
  const n = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
  if (text !== undefined) n.textContent = text;
  return n;
}

async function refreshTelemetry(id) {
  const r = await api("/runs/" + encodeURIComponent(id) + "/telemetry");
  if (!r.ok || state.run !== id) return;
  const turns = r.body.turns;
  const box = $("#cache-chart");
  if (!turns.length) { box.replaceChildren(el("p", { class: "notice", text: "No model requests recorded yet." })); return; }
  const s = svgEl;
  const max = Math.max(1, ...turns.map((t) => t.prompt_tokens));
  const barW = 34, gap = 22, h = 150, left = 46, top = 26;
  const svg = s("svg", { width: left + turns.length * (barW + gap) + 150, height: h + top + 44, id: "cache-svg" });
  svg.append(s("text", { x: 4, y: top + 4 }, String(max)), s("text", { x: 4, y: top + h }, "0"));
  turns.forEach((t, i) => {
    const x = left + i * (barW + gap);
    const ch = (t.cached_tokens / max) * h, ph = (t.prefilled_tokens / max) * h;
    const g = s("g", { class: "turn-bar", "data-iid": t.iid });
    g.append(s("title", {}, `${t.iid} (${t.state}): ${t.cached_tokens} cached, ${t.prefilled_tokens} prefilled, ${t.requests} requests`));
    g.append(s("rect", { x, y: top + h - ch, width: barW, height: ch, fill: "#3d9a5d", class: "cached" }));
    g.append(s("rect", { x, y: top + h - ch - ph, width: barW, height: ph, fill: "#b7c0d3", class: "prefilled" }));
    g.append(s("text", { x: x + barW / 2, y: top + h + 14, "text-anchor": "middle" }, t.iid.split(".").pop()));
    const pct = t.prompt_tokens ? Math.round((100 * t.cached_tokens) / t.prompt_tokens) + "%" : "-";
    g.append(s("text", { x: x + barW / 2, y: top + h - ch - ph - 4, "text-anchor": "middle", class: "pct" }, pct));
    svg.append(g);
  });
  const lx = left + turns.length * (barW + gap) + 6;
  svg.append(s("rect", { x: lx, y: top, width: 12, height: 12, fill: "#3d9a5d" }), s("text", { x: lx + 18, y: top + 10 }, "cached"),
             s("rect", { x: lx, y: top + 20, width: 12, height: 12, fill: "#b7c0d3" }), s("text", { x: lx + 18, y: top + 30 }, "prefilled"));
  box.replaceChildren(svg);
}

// ---- timeline (GET /runs/{id}/timeline: built from the journal) ---------------------------------------------------
const TL_COLORS = { run: "#e6eaf2", parked: "#f2d49b", turn: "#cfe8d6", gate: "#f7c6a8", effect: "#d9cdf0",
                    cached: "#3d9a5d", prefilled: "#b7c0d3" };
const TL_MARKS = { step: "#1f2a44", pick: "#2f5fd0", gate_event: "#d0632a", timer: "#b83232", end: "#2c8a4b" };

function soonTimeline(id) {
  clearTimeout(state.timelineTimer);
  state.timelineTimer = setTimeout(() => refreshTimeline(id), 300);
}

async function refreshTimeline(id) {
  const r = await api("/runs/" + encodeURIComponent(id) + "/timeline");
  if (!r.ok || state.run !== id) return;
  const tl = r.body, box = $("#timeline");
  const s = svgEl;
  const left = 170, right = 72, rowH = 26, top = 24;
  const width = Math.max(640, box.clientWidth || 900);
  const span = Math.max(tl.end - tl.start, 0.001);
  const x = (t) => left + ((t - tl.start) / span) * (width - left - right);
  const rows = new Map(tl.lanes.map((l, i) => [l, i]));
  const y = (lane) => top + rows.get(lane) * rowH;
  const height = top + tl.lanes.length * rowH + 40;
  const svg = s("svg", { width, height, id: "timeline-svg", "data-finished": tl.finished ? "1" : "0" });
  // axis: about six ticks, in seconds from the run's start
  const step = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 600, 1800, 3600].find((d) => span / d <= 7) || 3600;
  const axis = s("g", { class: "axis" });
  for (let t = 0; t <= span + 1e-9; t += step) {
    axis.append(s("line", { x1: x(tl.start + t), x2: x(tl.start + t), y1: top - 4, y2: height - 36, stroke: "#eef1f6" }),
                s("text", { x: x(tl.start + t), y: top - 8, "text-anchor": "middle" }, (step < 1 ? t.toFixed(2) : Math.round(t)) + "s"));
  }
  svg.append(axis);
  tl.lanes.forEach((lane, i) => {
    if (i % 2) svg.append(s("rect", { x: 0, y: top + i * rowH, width, height: rowH, fill: "#fafbfd" }));
    svg.append(s("text", { x: 6, y: top + i * rowH + 17, class: "lane-label" }, lane));
  });
  const title = (g, text) => g.append(s("title", {}, text));
  for (const b of tl.bars) {
    const end = b.end === null ? tl.end : b.end;
    const x0 = x(b.start), w = Math.max(2, x(end) - x0);
    const g = s("g", { class: "tl-bar " + b.kind, "data-kind": b.kind, "data-lane": b.lane });
    const dur = (end - b.start).toFixed(3) + "s";
    if (b.kind === "request") {
      const d = b.detail, prompt = Math.max(1, d.prompt_tokens), cw = w * (d.cached_tokens / prompt);
      g.append(s("rect", { x: x0, y: y(b.lane) + 9, width: cw, height: 12, fill: TL_COLORS.cached, class: "cached" }),
               s("rect", { x: x0 + cw, y: y(b.lane) + 9, width: Math.max(1, w - cw), height: 12, fill: TL_COLORS.prefilled, class: "prefilled" }));
      title(g, `${b.label} (${d.model}): ${dur}, ${d.cached_tokens} cached + ${d.prefilled_tokens} prefilled tokens` +
               (d.output_tokens !== null && d.output_tokens !== undefined ? `, ${d.output_tokens} out` : ""));
    } else {
      const inset = b.kind === "turn" || b.kind === "gate" || b.kind === "effect" ? 3 : 5;
      g.append(s("rect", { x: x0, y: y(b.lane) + inset, width: w, height: rowH - 2 * inset, rx: 3,
                           fill: TL_COLORS[b.kind] || "#ddd", stroke: b.end === null ? "#9aa5bb" : "none", "stroke-dasharray": "3 2" }));
      if (b.kind === "parked" && w > 48) g.append(s("text", { x: x0 + 4, y: y(b.lane) + 17 }, "parked"));
      title(g, `${b.label}: ${dur}${b.end === null ? " so far" : ""}`);
    }
    svg.append(g);
  }
  for (const m of tl.marks) {
    const cx = x(m.at), cy = y(m.lane) + rowH / 2, color = TL_MARKS[m.kind] || "#333";
    const g = s("g", { class: "tl-mark " + m.kind, "data-kind": m.kind, "data-lane": m.lane, "data-x": cx.toFixed(1) });
    g.append(m.kind === "timer"
      ? s("circle", { cx, cy, r: 5, fill: "#fff", stroke: color, "stroke-width": 2 })
      : s("path", { d: `M${cx} ${cy - 6} L${cx + 5} ${cy} L${cx} ${cy + 6} L${cx - 5} ${cy} Z`, fill: color }));
    g.append(s("text", { x: cx + 7, y: cy - 3, class: "mark-label", fill: color }, m.label));
    title(g, `${m.kind.replace("_", " ")} ${m.label} at +${(m.at - tl.start).toFixed(3)}s`);
    svg.append(g);
  }
  // legend
  const ly = height - 18;
  let lx = 6;
  for (const [label, color] of [["Turn", TL_COLORS.turn], ["cached", TL_COLORS.cached], ["prefilled", TL_COLORS.prefilled],
                                ["Gate wait", TL_COLORS.gate], ["Effect", TL_COLORS.effect], ["parked", TL_COLORS.parked]]) {
    svg.append(s("rect", { x: lx, y: ly - 10, width: 12, height: 12, fill: color }), s("text", { x: lx + 16, y: ly }, label));
    lx += 28 + label.length * 7;
  }
  for (const [label, kind] of [["step", "step"], ["pick", "pick"], ["Gate event", "gate_event"], ["timer", "timer"]]) {
    const c = TL_MARKS[kind];
    svg.append(kind === "timer" ? s("circle", { cx: lx + 5, cy: ly - 4, r: 5, fill: "#fff", stroke: c, "stroke-width": 2 })
                                : s("path", { d: `M${lx + 5} ${ly - 10} L${lx + 10} ${ly - 4} L${lx + 5} ${ly + 2} L${lx} ${ly - 4} Z`, fill: c }),
               s("text", { x: lx + 14, y: ly }, label));
    lx += 26 + label.length * 7;
  }
  box.replaceChildren(svg);
}

// ---- boot ----------------------------------------------------------------------------------------------------------
$("#token-form").addEventListener("submit", (ev) => { ev.preventDefault(); unlock($("#token").value); });
$("#lock").addEventListener("click", () => lock(""));
renderWorkflows();
initRunList(state.catalogue);
if (state.catalogue.length) selectWorkflow(state.catalogue[0].name);
if (state.token) unlock(state.token);
