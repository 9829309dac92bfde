"""A Harness's scoped token against live runs: its own Turn's surface and picks work (200); everything else is 403
and changes nothing. An Agent can never answer a Gate, neither through the Gate route nor by picking its event."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from serve.auth import harness_token

from .api_helpers import LiveServer, observe, run_ids, start_notes, wait_for

pytestmark = pytest.mark.ray


def test_a_harness_token_works_for_its_own_turn_only(http: httpx.Client, live: LiveServer) -> None:
    rid, iid = start_notes(http)
    other_rid, other_iid = start_notes(http, "another run")
    minted = http.post(f"/agents/{iid}/token")  # the operator mints the Turn's token for its Harness
    assert minted.status_code == 200 and minted.json() == {"iid": iid, "token": harness_token(live.token, iid)}
    assert http.post(f"/agents/{rid}.t9/token").status_code == 404  # no such Turn: no token
    scoped = {"Authorization": f"Bearer {minted.json()['token']}"}
    store = live.store_dir()

    with httpx.Client(base_url=live.url, headers=scoped, timeout=60) as harness, ThreadPoolExecutor(1) as pool:
        # 200 on its own Turn.
        s = harness.get(f"/agents/{iid}/surface")
        assert s.status_code == 200 and s.json()["allowed"] == ["ask"]
        early = harness.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "x"}})
        assert early.status_code == 200 and early.json()["delivered"] and not early.json()["moved"]

        def refused(method: str, url: str, status: int = 403, **kw: object) -> None:
            before = {r: observe(store, r) for r in (rid, other_rid)}
            ids = run_ids(store)
            r = harness.request(method, url, **kw)  # type: ignore[arg-type]
            assert r.status_code == status, (method, url, r.status_code, r.text)
            assert iid in r.json()["detail"]
            assert {r: observe(store, r) for r in (rid, other_rid)} == before
            assert run_ids(store) == ids

        # 403 for another Turn: of another run, and of its own run.
        refused("GET", f"/agents/{other_iid}/surface")
        refused("POST", f"/agents/{other_iid}/picks", json={"name": "ask", "args": {"question": "?"}})
        refused("POST", f"/agents/{rid}.t2/picks", json={"name": "ask", "args": {"question": "?"}})
        # 403 for starting a run, reading runs, cancelling its own run, its feed, the workflows.
        refused("POST", "/workflows/notes/runs", json={"input": {"changes": "x"}})
        refused("GET", "/runs")
        refused("GET", f"/runs/{rid}")
        refused("POST", f"/runs/{rid}/cancel")
        refused("GET", f"/runs/{rid}/events")
        refused("GET", f"/runs/{rid}/telemetry")
        refused("GET", "/workflows")
        refused("POST", f"/agents/{iid}/token")  # a Harness cannot mint tokens, not even its own

        # Its own pick opens the editor's Gate; the Agent may not answer it.
        pending = pool.submit(harness.post, f"/agents/{iid}/picks", json={"name": "ask", "args": {"question": "?"}})
        gate = wait_for(lambda: http.get(f"/runs/{rid}").json()["gates"], what="the Gate")[0]
        assert gate["accepts_now"] == ["reply"]
        refused("POST", f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "me"}})
        # Picking the Gate's event is not a way around it: `reply` is not on the writer's Menu.
        before = observe(store, rid)["status"]
        # (a second pick while `ask` is outstanding is refused before anything else: D1)
        r = harness.post(f"/agents/{iid}/picks", json={"name": "reply", "args": {"text": "me"}}).json()
        assert not r["delivered"] and r["refused"] == "not_at_rest"
        assert observe(store, rid)["status"] == before
        assert not pending.done()

        ok = http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "ed"}})
        assert ok.status_code == 200
        assert pending.result(60).json()["answer"] == "The editor replied: ed"
        off = harness.post(f"/agents/{iid}/picks", json={"name": "reply", "args": {"text": "me"}}).json()
        assert off["refused"] == "off_menu" and not off["delivered"]
        assert http.get(f"/runs/{rid}").json()["context"]["replies"] == 1

        done = harness.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "# N"}})
        assert done.status_code == 200 and done.json()["turn_complete"]

        # The Turn is over: its token stops working, with the reason, and changes nothing.
        before, ids = observe(store, rid), run_ids(store)
        # The pick first: it learns the end from the run itself (no status call before it), the surface after.
        for method, url, kw in (("POST", f"/agents/{iid}/picks", {"json": {"name": "ask", "args": {"question": "?"}}}),
                                ("GET", f"/agents/{iid}/surface", {})):
            late = harness.request(method, url, **kw)  # type: ignore[arg-type]
            assert late.status_code == 401, (method, late.text)
            assert iid in late.json()["detail"] and "Turn has ended" in late.json()["detail"]
        assert observe(store, rid) == before and run_ids(store) == ids
    assert http.get(f"/runs/{rid}").json()["status"] == "done"
    assert http.get(f"/runs/{other_rid}").json()["status"] == "active"
    http.post(f"/runs/{other_rid}/cancel")
