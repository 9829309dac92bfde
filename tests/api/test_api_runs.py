"""Runs end to end over real HTTP: start, read, pick, Gate events, cancel, telemetry, journal-only reads."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
import ray

from jr2ray.menu import texts
from jr2ray.run.store import Store
from jr2ray.run.store.sqlite import journal_bytes

from .api_helpers import (
    NOTES_INPUT,
    LiveServer,
    ask_in_background,
    history,
    holds_no_actor,
    kill_run_actor,
    run_actor,
    start_notes,
    wait_for,
)

pytestmark = pytest.mark.ray


def test_notes_runs_to_published_over_http(http: httpx.Client, live: LiveServer) -> None:
    r = http.post("/workflows/notes/runs", json={"input": NOTES_INPUT})
    assert r.status_code == 201, r.text
    run = r.json()
    rid = run["id"]
    assert r.headers["location"] == f"/runs/{rid}"
    assert run["status"] == "active" and run["live"] is True
    assert run["value"] == {"writing": "drafting"}
    assert run["active"] == ["notes", "notes.writing", "notes.writing.drafting"]
    assert run["context"]["changes"] == NOTES_INPUT["changes"] and run["gates"] == []
    (turn,) = run["turns"]
    iid = turn["iid"]
    assert iid == f"{rid}.t{iid.rsplit('.t', 1)[1]}" and turn["slot"] == "writer" and turn["active"]

    surface = http.get(f"/agents/{iid}/surface").json()
    assert [m["name"] for m in surface["menu"]] == ["ask", "done"]
    assert surface["allowed"] == ["ask"] and surface["turn_over"] is False

    early = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "too soon"}}).json()
    assert early["delivered"] and not early["moved"] and early["allowed"] == ["ask"]

    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid)
        assert gate["id"] == "notes.writing.asking"
        assert gate["meta"] == {"question": "Which change matters most?"}
        assert [a["name"] for a in gate["accepts"]] == ["reply"] and gate["accepts_now"] == ["reply"]
        assert gate["accepts"][0]["schema"]["required"] == ["text"]
        assert not pending.done()  # the pick is outstanding: its receipt waits for the editor
        assert http.get(f"/agents/{iid}/surface").json()["allowed"] == []
        view = http.get(f"/runs/{rid}").json()
        assert view["turns"][0]["outstanding"] == "ask" and "notes.writing.asking" in view["active"]

        sent = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply",
                                                                        "input": {"text": "The crash fix."}})
        assert sent.status_code == 200, sent.text
        assert sent.json()["ok"] and sent.json()["value"] == {"writing": "drafting"}
        assert sent.json()["active"] == ["notes", "notes.writing", "notes.writing.drafting"]
        receipt = pending.result(60)
    assert receipt.status_code == 200
    assert receipt.json()["answer"] == "The editor replied: The crash fix."
    assert receipt.json()["allowed"] == ["ask", "done"] and not receipt.json()["turn_complete"]

    final = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "# Notes"}}).json()
    assert final["turn_complete"] and final["moved"]
    done = wait_for(lambda: (v := http.get(f"/runs/{rid}").json())["status"] == "done" and v, what="done")
    assert done["value"] == "published" and done["output"] == {"notes": "# Notes"} and done["gates"] == []
    assert http.get(f"/agents/{iid}/surface").json() == {**surface, "allowed": [], "turn_over": True,
                                                         "allowed_now": texts.allowed_line([])}
    late = http.post(f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": "?"}}).json()
    assert late["refused"] == "turn_over" and not late["delivered"]

    listed = {r["id"]: r for r in http.get("/runs").json()}
    assert listed[rid]["status"] == "done" and listed[rid]["workflow"] == "notes"
    # A listing summarises the input (its size and keys), never carries it.
    size = len(json.dumps(NOTES_INPUT, ensure_ascii=False, separators=(",", ":")).encode())
    assert listed[rid]["input"] == {"bytes": size, "keys": ["changes"]} and listed[rid]["value"] == "published"


def test_runs_list_is_newest_first_and_limited(http: httpx.Client) -> None:
    a, _ = start_notes(http, "a")
    b, _ = start_notes(http, "b")
    rows = http.get("/runs").json()
    ids = [r["id"] for r in rows]
    assert ids.index(b) < ids.index(a)
    assert [r["created_at"] for r in rows] == sorted((r["created_at"] for r in rows), reverse=True)
    live = {r["id"]: r for r in rows}
    assert live[b]["status"] == "active" and live[b]["turns"][0]["slot"] == "writer"
    assert live[b]["active"][-1] == "notes.writing.drafting"
    assert [r["id"] for r in http.get("/runs", params={"limit": 1}).json()] == [b]
    for bad in (0, -1, 1001, "many"):
        r = http.get("/runs", params={"limit": bad})
        assert r.status_code == 400 and "limit" in r.json()["detail"], bad
    r = http.get(f"/runs/{b}/events", params={"since": -1})
    assert r.status_code == 400 and "since" in r.json()["detail"]


def test_runs_list_pages_by_cursor_visits_each_run_once_and_says_where_each_is(http: httpx.Client) -> None:
    mine = {start_notes(http, f"page {i}")[0] for i in range(3)}
    done = http.post(f"/runs/{sorted(mine)[0]}/cancel").json()["id"]
    seen: list[dict] = []
    cursor = None
    while True:
        r = http.get("/runs", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200 and len(r.json()) <= 2
        seen += r.json()
        cursor = r.headers.get("x-next-cursor")
        if cursor is None:
            assert "link" not in r.headers
            break
        assert 'rel="next"' in r.headers["link"]
    ids = [row["id"] for row in seen]
    assert len(ids) == len(set(ids)) and mine <= set(ids)
    assert len(ids) == len(http.get("/runs", params={"limit": 1000}).json())
    assert [row["created_at"] for row in seen] == sorted((row["created_at"] for row in seen), reverse=True)
    for row in seen:  # an unfinished run is live, parked or queued; a finished one is nowhere
        assert (row["presence"] in ("live", "parked", "queued")) == (row["status"] in ("active", "queued")), row
    assert {row["id"]: row["presence"] for row in seen}[done] is None
    active = http.get("/runs", params={"status": "active", "limit": 1000}).json()
    assert active and {row["status"] for row in active} == {"active"} and done not in {row["id"] for row in active}
    r = http.get("/runs", params={"cursor": "not-a-cursor"})
    assert r.status_code == 400 and "cursor" in r.json()["detail"]


def test_cancel_ends_the_run_and_its_turn(http: httpx.Client) -> None:
    rid, iid = start_notes(http)
    r = http.post(f"/runs/{rid}/cancel")
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["turns"][0]["active"] is False
    assert http.get(f"/runs/{rid}").json()["status"] == "cancelled"
    assert http.get(f"/agents/{iid}/surface").json()["turn_over"] is True
    after = http.post(f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": "?"}}).json()
    assert after["refused"] == "turn_over"
    again = http.post(f"/runs/{rid}/cancel")  # a run already over comes back unchanged
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert {r["id"]: r["status"] for r in http.get("/runs").json()}[rid] == "cancelled"


def test_cancel_while_a_gate_is_open_answers_the_outstanding_pick(http: httpx.Client) -> None:
    rid, iid = start_notes(http)
    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid)
        assert http.post(f"/runs/{rid}/cancel").json()["status"] == "cancelled"
        receipt = pending.result(60).json()
    assert receipt["turn_complete"] and receipt["refused"] == "unfinished"
    r = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "late"}})
    assert r.status_code == 404, r.text  # the Gate closed with the run


def test_telemetry_route_sums_cache_use_per_turn(http: httpx.Client) -> None:
    rid, iid = start_notes(http)
    actor = run_actor(rid)
    for prompt, cached in ((400, 0), (450, 384)):
        ray.get(actor.record_telemetry.remote({"iid": iid, "slot": "writer", "state": "notes.writing",
                                               "prompt_tokens": prompt, "cached_tokens": cached}))
    t = http.get(f"/runs/{rid}/telemetry").json()
    assert [row["prompt_tokens"] for row in t["rows"]] == [400, 450]
    assert t["turns"] == [{"iid": iid, "slot": "writer", "state": "notes.writing", "requests": 2,
                           "prompt_tokens": 850, "cached_tokens": 384, "prefilled_tokens": 466}]
    assert http.get("/runs/nope123/telemetry").status_code == 404


def test_a_run_without_its_actor_is_read_from_the_journal(http: httpx.Client, live: LiveServer) -> None:
    """Its actor's process ends for good. A virtual run (the default) is adopted again from its journal by the next
    request and goes on; a run with its own actor (JR2RAY_VIRTUAL_RUNS=0) is readable, not drivable."""
    rid, iid = start_notes(http)
    assert http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "x"}}).json()["moved"] is False
    before = http.get(f"/runs/{rid}").json()
    kill_run_actor(rid)
    wait_for(lambda: holds_no_actor(rid), what="the Run actor to be gone")
    view = http.get(f"/runs/{rid}")
    assert view.status_code == 200
    body = view.json()
    if live.app.state.ctx.client().virtual:
        assert body["live"] is True and body["status"] == "active"
        assert (body["value"], body["context"], body["active"]) == (before["value"], before["context"],
                                                                    before["active"])
        again = http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "x"}})
        assert again.status_code == 200 and again.json()["moved"] is False  # the same Turn, driven again
        assert http.post(f"/runs/{rid}/cancel").json()["status"] == "cancelled"
        return
    assert body["live"] is False and body["status"] == "active"
    assert body["value"] == before["value"] and body["context"] == before["context"]
    assert body["active"] == before["active"]
    # Readable, not drivable: a write says so (409), and the feed replays the status and ends.
    r = http.post(f"/runs/{rid}/gates/notes.writing.asking/events", json={"event": "reply", "input": {"text": "x"}})
    assert r.status_code == 409 and "journal" in r.json()["detail"] and r.json()["accepts_now"] == []
    assert http.post(f"/runs/{rid}/cancel").status_code == 409
    events = http.get(f"/runs/{rid}/events").text
    assert "event: status" in events and 'event: end\ndata: {"status":"active"}' in events
    assert rid in {r["id"] for r in http.get("/runs").json()}
    assert Store(live.store_dir()).exists(rid)


def test_a_gate_event_is_idempotent_by_delivery_id(http: httpx.Client) -> None:
    rid, iid = start_notes(http)
    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid)
        body = {"event": "reply", "input": {"text": "once"}, "delivery_id": "d-1"}
        first = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json=body)
        assert first.status_code == 200 and first.json()["delivery_id"] == "d-1"
        pending.result(60)
    # The Gate is closed now; the same delivery is answered from the ledger, not refused and not applied again.
    again = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json=body)
    assert again.status_code == 200 and again.json()["delivery_id"] == "d-1"
    assert http.get(f"/runs/{rid}").json()["context"]["replies"] == 1
    assert sum(1 for e in history(rid) if e["kind"] == "admission" and e["data"].get("party") == "gate") == 1




def test_a_start_retried_with_its_idempotency_key_starts_one_run(http: httpx.Client, live: LiveServer) -> None:
    key = {"Idempotency-Key": f"start-notes-{id(http)}"}
    first = http.post("/workflows/notes/runs", json={"input": NOTES_INPUT}, headers=key)
    assert first.status_code == 201, first.text
    rid = first.json()["id"]
    before = {r["id"] for r in http.get("/runs", params={"limit": 1000}).json()}
    again = http.post("/workflows/notes/runs", json={"input": NOTES_INPUT}, headers=key)  # the client's retry
    assert again.status_code == 200, again.text
    assert again.json()["id"] == rid and again.headers["location"] == f"/runs/{rid}"
    assert {r["id"] for r in http.get("/runs", params={"limit": 1000}).json()} == before  # nothing new started
    path = Store(live.store_dir()).path(rid)
    journal = journal_bytes(path)
    other = http.post("/workflows/notes/runs", json={"input": {**NOTES_INPUT, "changes": "another"}}, headers=key)
    assert other.status_code == 409 and rid in other.json()["detail"], other.text
    assert journal_bytes(path) == journal  # refused, and nothing written
    bad = http.post("/workflows/notes/runs", json={"input": NOTES_INPUT}, headers={"Idempotency-Key": "a b"})
    assert bad.status_code == 400, bad.text
    assert {r["id"] for r in http.get("/runs", params={"limit": 1000}).json()} == before
    assert http.post(f"/runs/{rid}/cancel").status_code == 200
