"""The journal over HTTP: a damaged journal lists as `corrupt` without breaking the list, a gone one is `lost`, and
a delivery id reused with another payload is a 409 that leaves the journal byte-identical."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import ray

from jr2ray.run.store import journal_bytes

from .api_helpers import LiveServer, ask_in_background, start_notes, wait_for

pytestmark = pytest.mark.ray


def test_a_damaged_journal_lists_as_corrupt_and_the_others_list_and_work(http: httpx.Client,
                                                                         live: LiveServer) -> None:
    bad, _ = start_notes(http)
    good, iid = start_notes(http)
    ray.kill(ray.get_actor(f"run:{bad}", namespace="jr2ray"), no_restart=True)
    path = live.store_dir() / f"{bad}.sqlite"
    with open(path, "r+b") as f:
        f.write(b"this is no journal")
    listing = http.get("/runs")
    assert listing.status_code == 200, listing.text
    rows = {r["id"]: r for r in listing.json()}
    assert rows[bad]["status"] == "corrupt" and rows[good]["status"] == "active"
    one = http.get(f"/runs/{bad}")
    assert one.status_code == 409 and "damaged" in one.json()["detail"]
    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, good, iid)
        assert http.post(f"/runs/{good}/gates/{gate['id']}/events",
                         json={"event": "reply", "input": {"text": "ok"}}).status_code == 200
        assert pending.result(60).json()["moved"]


def test_a_lost_journal_is_reported_lost(http: httpx.Client, live: LiveServer) -> None:
    rid, _ = start_notes(http)
    ray.kill(ray.get_actor(f"run:{rid}", namespace="jr2ray"), no_restart=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(live.store_dir() / f"{rid}.sqlite") + suffix).unlink(missing_ok=True)
    live_store = live.store_dir()
    from jr2ray.run.store import Store

    Store(live_store).mark_lost(rid, f"the journal of run {rid} is gone")
    assert {r["id"]: r for r in http.get("/runs").json()}[rid]["status"] == "lost"
    r = http.get(f"/runs/{rid}")
    assert r.status_code == 410 and "gone" in r.json()["detail"]


def test_a_reused_gate_delivery_id_with_another_payload_is_409_and_writes_nothing(http: httpx.Client,
                                                                                  live: LiveServer) -> None:
    rid, iid = start_notes(http)
    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid)
        url = f"/runs/{rid}/gates/{gate['id']}/events"
        assert http.post(url, json={"event": "reply", "input": {"text": "A"}, "delivery_id": "r-1"}).status_code == 200
        pending.result(60)
    path = live.store_dir() / f"{rid}.sqlite"
    before = journal_bytes(path)
    r = http.post(url, json={"event": "reply", "input": {"text": "B"}, "delivery_id": "r-1"})
    assert r.status_code == 409 and "r-1" in r.json()["detail"]
    again = http.post(url, json={"event": "reply", "input": {"text": "A"}, "delivery_id": "r-1"})
    assert again.status_code == 200 and again.json()["delivery_id"] == "r-1"
    assert journal_bytes(path) == before
    assert http.get(f"/runs/{rid}").json()["context"]["replies"] == 1


POINTS = ("status", "gap", "end")  # events whose id is the point the stream reached, not a history number


def _sse_ids(text: str, points: bool = False) -> list[tuple[str, int]]:
    """(kind, id) of the history events (with `points`: of every event) in an SSE body."""
    out, ident = [], None
    for line in text.splitlines():
        if line.startswith("id: "):
            ident = int(line[4:])
        elif line.startswith("event: ") and ident is not None:
            if points or line[7:] not in POINTS:
                out.append((line[7:], ident))
            ident = None
    return out


def test_a_finished_runs_feed_is_read_from_its_journal_and_resumes_by_last_event_id(http: httpx.Client) -> None:
    rid, iid = start_notes(http)
    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid)
        http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "A"}})
        pending.result(60)
    assert http.post(f"/runs/{rid}/cancel").status_code == 200

    def gone() -> bool:
        try:
            ray.get_actor(f"run:{rid}", namespace="jr2ray")
        except ValueError:
            return True
        return False

    wait_for(gone, timeout=60, what="the finished run's actor to exit")
    everything = _sse_ids(http.get(f"/runs/{rid}/events").text)
    kinds = [k for k, _ in everything]
    assert kinds.count("admission") == 2 and "receipt" in kinds and "gate" in kinds
    ids = [i for _, i in everything]
    assert ids == sorted(set(ids))
    cut = ids[2]
    resumed_text = http.get(f"/runs/{rid}/events", headers={"Last-Event-ID": str(cut)}).text
    resumed = _sse_ids(resumed_text)
    assert [i for _, i in resumed] == [i for i in ids if i > cut]
    every = _sse_ids(resumed_text, points=True)  # a journal-only feed gives its status and end ids too
    assert every[0] == ("status", cut) and every[-1][0] == "end" and every[-1][1] >= ids[-1]
