// jr2ray Console: the run list (paged, filtered by status, where and workflow, found by id prefix) and the
// "Waiting for you" list of every open Gate across runs. Loaded before app.js; it uses app.js's `state`, `api`,
// `el`, `$` and `selectRun` only when called, after both have loaded.
"use strict";

const RUN_PAGE = 50;     // runs per page of the list
const GATE_PAGE = 100;   // runs whose Gates one page of "Waiting for you" holds
const FIND_HOPS = 20;    // a filtered page that comes back empty with a cursor is followed this often

const PRESENCE = {
  live: "hosted by an actor now",
  parked: "only in its journal; a Gate event, a pick or a timer wakes it",
  queued: "waiting for a free slot (max_live_runs)",
};

// A pager over an API list: the cursor of each page seen so far, so "Newer" goes back the way "Older" came.
function newPager() { return { cursors: [null], at: 0, next: null }; }
const lists = { runs: newPager(), gates: newPager(), filters: { status: "", where: "", workflow: "", prefix: "" } };

function resetRunList() {
  lists.runs = newPager();
  lists.gates = newPager();
  lists.filters = { status: "", where: "", workflow: "", prefix: "" };
  for (const id of ["#run-status-filter", "#run-where-filter", "#run-workflow-filter", "#run-prefix"]) $(id).value = "";
  $("#runs-msg").textContent = "";
  $("#gate-list").replaceChildren();
  $("#gates-pager").hidden = true;
  $("#runs-pager").hidden = true;
}

// What a parked run waits for, in a few words (as `jr2ray runs` says it in WHERE).
function waitingText(run) {
  if (run.presence === "queued") return run.place ? "queued #" + run.place : "queued";
  if (run.presence !== "parked") return run.presence || "";
  const w = run.waiting || {};
  const parts = (w.gates || []).map((g) => "gate " + g);
  for (const seat of Object.keys(w.turns || {})) parts.push("turn " + seat);
  if (w.timer_due) parts.push("timer in " + Math.max(0, Math.round(w.timer_due - Date.now() / 1000)) + "s");
  return parts.join(", ") || "parked";
}

// A page's answer can come back after a newer request's (a filter changed, a pager moved, a slow API): `stale` says
// the list it was asked for is no longer the one shown, so the caller draws nothing from it.
async function fetchPage(path, params, pager, follow) {
  const at = pager.at;
  const q = new URLSearchParams(params);
  let cursor = pager.cursors[at];
  if (cursor) q.set("cursor", cursor);
  let r = await api(path + "?" + q);
  // With filters the API may answer a short page, even an empty one, with a cursor: it looked at enough runs for
  // one request. When finding, follow it so the page shows what matched.
  for (let hops = 0; follow && r.ok && !r.body.length && r.next && hops < FIND_HOPS; hops++) {
    cursor = r.next;
    q.set("cursor", cursor);
    r = await api(path + "?" + q);
  }
  r.stale = pager.at !== at;
  if (r.ok && !r.stale) { pager.cursors[at] = cursor; pager.next = r.next; }
  return r;
}

function drawPager(box, pager, label, redraw) {
  box.hidden = pager.at === 0 && !pager.next;
  box.replaceChildren(
    el("button", { type: "button", class: "secondary newer", disabled: pager.at === 0,
                   onclick: () => { pager.cursors.pop(); pager.at--; redraw(); } }, "‹ Newer"),
    el("span", { class: "sub page", text: label + " " + (pager.at + 1) }),
    el("button", { type: "button", class: "secondary older", disabled: !pager.next,
                   onclick: () => { pager.cursors.push(pager.next); pager.at++; redraw(); } }, "Older ›"));
}

async function refreshRuns() {
  if (!state.token) return;
  const f = lists.filters;
  const params = { limit: String(RUN_PAGE) };
  for (const k of ["status", "where", "workflow", "prefix"]) if (f[k]) params[k] = f[k];
  const pager = lists.runs;
  const r = await fetchPage("/runs", params, pager, Boolean(f.prefix || f.where || f.workflow));
  if (!state.token || r.stale || lists.filters !== f || lists.runs !== pager) return;
  if (!r.ok) { $("#runs-msg").textContent = (r.body && r.body.detail) || "HTTP " + r.status; return; }
  $("#runs-msg").textContent = r.body.length ? "" : (f.prefix ? "No run id starts with " + f.prefix + "." : "No runs here.");
  const sig = JSON.stringify([lists.runs.at, lists.runs.next,
                              r.body.map((run) => [run.id, run.workflow, run.status, run.presence, waitingText(run)])]);
  if (sig !== state.runsSig) {  // nothing new: keep the DOM (and whatever is being clicked) stable
    state.runsSig = sig;
    $("#run-list").replaceChildren(...r.body.map((run) =>
      el("li", { "data-run": run.id, class: run.id === state.run ? "selected" : "", onclick: () => openRun(run.id) },
         el("span", {}, el("code", { text: run.id }), el("span", { class: "sub", text: " " + run.workflow })),
         el("span", { class: "where" },
            ...(run.presence ? [el("span", { class: "presence " + run.presence, text: run.presence,
                                             title: waitingText(run) + " — " + (PRESENCE[run.presence] || "") })] : []),
            el("span", { class: "badge " + run.status, text: run.status })))));
    drawPager($("#runs-pager"), lists.runs, "page", () => { state.runsSig = ""; refreshRuns(); });
  }
  await refreshWaiting();
}

// "Waiting for you": every open Gate across runs, each with a link to its run, where the Gate is answered.
async function refreshWaiting() {
  const params = { limit: String(GATE_PAGE) };
  const f = lists.filters, pager = lists.gates;
  if (f.workflow) params.workflow = f.workflow;
  const r = await fetchPage("/gates", params, pager, false);
  if (!r.ok || !state.token || r.stale || lists.filters !== f || lists.gates !== pager) return;
  const sig = JSON.stringify([lists.gates.at, lists.gates.next, r.body.map((g) => [g.run_id, g.gate, g.accepts_now])]);
  if (sig === state.gatesSig) return;
  state.gatesSig = sig;
  $("#waiting-count").textContent = r.body.length ? r.body.length + (lists.gates.next ? "+" : "") : "";
  $("#gate-list").replaceChildren(...(r.body.length ? r.body.map((g) =>
    el("li", { "data-run": g.run_id, "data-gate": g.gate, onclick: () => openRun(g.run_id) },
       el("span", {}, el("code", { text: g.gate }),
          el("span", { class: "sub", text: " " + g.workflow + " " + g.run_id.slice(0, 8) +
                                           (g.accepts_now ? " accepts " + (g.accepts_now.join(", ") || "nothing now") : "") })),
       el("a", { class: "open-run", href: "#run=" + encodeURIComponent(g.run_id), text: "answer ›",
                 onclick: (ev) => { ev.stopPropagation(); } })))
    : [el("li", { class: "notice empty", text: "Nothing is waiting for you." })]));
  drawPager($("#gates-pager"), lists.gates, "page", () => { state.gatesSig = ""; refreshWaiting(); });
}

// A run page: its address is #run=<id>, so a run beyond the listed page is reachable (and a link can be shared).
function openRun(id) {
  if (location.hash !== "#run=" + encodeURIComponent(id)) location.hash = "run=" + encodeURIComponent(id);
  else selectRun(id);
}

function runFromHash() {
  const m = /^#run=([A-Za-z0-9_%-]+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : null;
}

function initRunList(catalogue) {
  $("#run-workflow-filter").append(...catalogue.map((w) => el("option", { value: w.name, text: w.name })));
  const apply = () => {
    lists.filters = { status: $("#run-status-filter").value, where: $("#run-where-filter").value,
                      workflow: $("#run-workflow-filter").value, prefix: $("#run-prefix").value.trim() };
    lists.runs = newPager();
    lists.gates = newPager();
    state.runsSig = "";
    state.gatesSig = "";
    refreshRuns();
  };
  for (const id of ["#run-status-filter", "#run-where-filter", "#run-workflow-filter"]) $(id).addEventListener("change", apply);
  $("#find-run").addEventListener("submit", (ev) => { ev.preventDefault(); apply(); });
  window.addEventListener("hashchange", () => {
    const id = runFromHash();
    if (id && state.token && id !== state.run) selectRun(id);
  });
}
