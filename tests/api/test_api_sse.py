"""GET /runs/{id}/events over real HTTP: status, picks, admissions and telemetry as Server-Sent Events, with
keep-alive comments, ids to resume from, and an `end` when the run ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import ray

from .api_helpers import LiveServer, ask_in_background, sse_events, start_notes

pytestmark = pytest.mark.ray

Event = tuple[str, str | None, Any]
# Events that say where the stream has got to (their id is that point) rather than being history events.
POINTS = ("status", "gap", "end", "comment")


class Feed:
    """Reads one SSE stream on a thread; the test waits for the events it expects."""

    def __init__(self, live: LiveServer, run_id: str, headers: dict[str, str] | None = None,
                 params: dict[str, Any] | None = None) -> None:
        self.events: list[Event] = []
        self.content_type = ""
        self.closed = False
        self._cv = threading.Condition()
        self._args = (live, run_id, headers or {}, params or {})
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        live, run_id, headers, params = self._args
        with httpx.stream("GET", f"{live.url}/runs/{run_id}/events", headers={**live.auth(), **headers},
                          params=params, timeout=httpx.Timeout(60, read=60)) as r:
            self.content_type = r.headers.get("content-type", "")
            for ev in sse_events(r.iter_lines()):
                with self._cv:
                    self.events.append(ev)
                    self._cv.notify_all()
        with self._cv:
            self.closed = True
            self._cv.notify_all()

    def wait(self, pred: Callable[[Event], bool], timeout: float = 60, what: str = "") -> Event:
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                hit = next((e for e in self.events if pred(e)), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                assert left > 0 and not self.closed, f"no {what or pred} in {[e[0] for e in self.events]}"
                self._cv.wait(min(left, 0.5))

    def wait_closed(self, timeout: float = 60) -> None:
        self._thread.join(timeout)
        assert self.closed, "the feed did not end"

    def of(self, kind: str) -> list[Any]:
        with self._cv:
            return [d for k, _, d in self.events if k == kind]


def test_a_pick_through_the_api_shows_up_in_the_stream(http: httpx.Client, live: LiveServer) -> None:
    rid, iid = start_notes(http)
    feed = Feed(live, rid)
    first = feed.wait(lambda e: e[0] == "status", what="the first status")
    assert "text/event-stream" in feed.content_type
    assert first[2]["id"] == rid and first[2]["value"] == {"writing": "drafting"}
    feed.wait(lambda e: e[0] == "turn" and e[2]["iid"] == iid and e[2]["active"], what="the Turn starting")

    # A pick that the guard refuses: the pick and its receipt are in the feed, and nothing was admitted.
    http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "too soon"}})
    feed.wait(lambda e: e[0] == "pick" and e[2]["name"] == "done", what="the done pick")
    rec = feed.wait(lambda e: e[0] == "receipt" and e[2]["pick"] == "done", what="the done receipt")[2]
    assert rec["iid"] == iid and rec["delivered"] and not rec["moved"] and rec["allowed"] == ["ask"]

    with ThreadPoolExecutor(1) as pool:
        pending, gate = ask_in_background(http, pool, rid, iid, question="Which one?")
        pick = feed.wait(lambda e: e[0] == "pick" and e[2]["name"] == "ask", what="the ask pick")[2]
        assert pick == {"iid": iid, "slot": "writer", "name": "ask", "args": {"question": "Which one?"},
                        "at": pick["at"]}
        adm = feed.wait(lambda e: e[0] == "admission" and e[2]["name"] == "ask", what="the ask admission")[2]
        assert adm["party"] == "agent" and adm["id"] == "writer" and adm["iid"] == iid
        assert adm["args"] == {"question": "Which one?"}
        # The admission is live, while the pick is still outstanding (not derived later from its receipt).
        assert not pending.done()
        opened = feed.wait(lambda e: e[0] == "gate" and e[2].get("open") is True, what="the Gate opening")[2]
        assert opened["id"] == gate["id"] and opened["meta"] == {"question": "Which one?"}
        asking = feed.wait(lambda e: e[0] == "status" and e[2]["value"] == {"writing": "asking"}, what="asking")[2]
        assert asking["gates"][0]["accepts_now"] == ["reply"] and "notes.writing.asking" in asking["active"]

        http.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "The fix."}})
        gadm = feed.wait(lambda e: e[0] == "admission" and e[2]["party"] == "gate", what="the Gate's admission")[2]
        assert gadm["id"] == gate["id"] and gadm["name"] == "reply" and gadm["args"] == {"text": "The fix."}
        receipt = pending.result(60).json()
    answered = feed.wait(lambda e: e[0] == "receipt" and e[2]["pick"] == "ask", what="the ask receipt")[2]
    assert answered["answer"] == "The editor replied: The fix." == receipt["answer"]
    assert answered["delivery_id"] == adm["delivery_id"] == receipt["delivery_id"]
    feed.wait(lambda e: e[0] == "status" and e[2]["context"].get("replies") == 1, what="the reply counted")

    # Telemetry a Harness pushes to its Run shows up too.
    actor = ray.get_actor(f"run:{rid}", namespace="jr2ray")
    ray.get(actor.record_telemetry.remote({"iid": iid, "slot": "writer", "state": "notes.writing",
                                           "prompt_tokens": 321, "cached_tokens": 288}))
    tel = feed.wait(lambda e: e[0] == "telemetry", what="telemetry")[2]
    assert tel["prompt_tokens"] == 321 and tel["cached_tokens"] == 288 and tel["iid"] == iid

    # Idle: keep-alive comments hold the connection open.
    n = len(feed.of("comment"))
    feed.wait(lambda e: e[0] == "comment" and e[2] == "keep-alive" and len(feed.of("comment")) > n + 1,
              what="keep-alives")

    http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "# Notes"}})
    end = feed.wait(lambda e: e[0] == "end", what="the end")[2]
    assert end == {"status": "done"}
    feed.wait_closed()
    last_status = feed.of("status")[-1]
    assert last_status["status"] == "done" and last_status["output"] == {"notes": "# Notes"}
    ids = [int(i) for k, i, _ in feed.events if k not in POINTS]
    assert ids == sorted(set(ids)) and ids[0] == 1  # every history event once, numbered in order
    kinds = [k for k, _, _ in feed.events]
    assert kinds.index("end") == len(kinds) - 1


def test_the_feed_resumes_after_last_event_id(http: httpx.Client, live: LiveServer) -> None:
    rid, iid = start_notes(http)
    for q in ("one", "two"):  # two picks the guard refuses: each is a pick, an admission and a receipt
        http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": q}})
    feed = Feed(live, rid)
    feed.wait(lambda e: len([x for x in feed.events if x[0] not in POINTS]) >= 7, what="seven history events")
    numbered = [(k, i, d) for k, i, d in feed.events if k not in POINTS]
    assert [k for k, _, _ in numbered[:7]] == ["turn", "pick", "admission", "receipt", "pick", "admission", "receipt"]
    assert [i for _, i, _ in numbered[:7]] == ["1", "2", "3", "4", "5", "6", "7"]
    http.post(f"/runs/{rid}/cancel")
    feed.wait_closed()

    resumed = Feed(live, rid, headers={"Last-Event-ID": "4"})
    resumed.wait_closed()
    got = [(k, i, d) for k, i, d in resumed.events if k not in POINTS]
    assert got[:3] == numbered[4:7]  # right after event 4: the second pick, its admission and receipt, once
    assert got[0][2]["args"] == {"notes": "two"}
    assert resumed.of("end") == [{"status": "cancelled"}]
    by_query = Feed(live, rid, params={"since": 6})
    by_query.wait_closed()
    assert [(k, i) for k, i, _ in by_query.events if k not in POINTS][0] == ("receipt", "7")


def test_every_event_has_an_id_so_a_reconnect_after_any_of_them_resumes(http: httpx.Client,
                                                                       live: LiveServer) -> None:
    """The first status used to have no id: a client that broke off right after it replayed from the start. Now a
    status, gap or end says the point reached, so Last-Event-ID after any event resumes just after it."""
    rid, iid = start_notes(http)
    http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "early"}})
    feed = Feed(live, rid)
    feed.wait(lambda e: len([x for x in feed.events if x[0] not in POINTS]) >= 4, what="four history events")
    first = feed.events[0]
    assert first[0] == "status" and first[1] == "0"  # the point it started from: nothing delivered yet
    from_4 = Feed(live, rid, headers={"Last-Event-ID": "4"})
    status_4 = from_4.wait(lambda e: e[0] == "status", what="the resumed stream's status")
    assert status_4[1] == "4"
    http.post(f"/runs/{rid}/cancel")
    feed.wait_closed()
    from_4.wait_closed()
    for f in (feed, from_4):
        assert all(i is not None and i.isdigit() for k, i, _ in f.events if k != "comment"), f.events
        points = [int(i) for k, i, _ in f.events if k != "comment" and i is not None]
        assert points == sorted(points)  # ids never go back, whatever the kind
    last = [i for k, i, _ in feed.events if k not in POINTS][-1]
    (end,) = [i for k, i, _ in feed.events if k == "end"]
    assert end is not None and int(end) >= int(last)  # the end says how far the stream got
    after_end = Feed(live, rid, headers={"Last-Event-ID": end})
    after_end.wait_closed()
    assert [k for k, _, _ in after_end.events if k not in POINTS] == []  # nothing replayed twice
    assert after_end.of("end") == [{"status": "cancelled"}]
    assert [i for k, i, _ in after_end.events if k == "status"] == [end]


def test_the_feed_keeps_its_numbers_when_old_history_is_trimmed(http: httpx.Client, live: LiveServer) -> None:
    """The Run keeps the newest events only (it drops 1000 once it holds over 2000); ids must not shift."""
    rid, iid = start_notes(http)
    feed = Feed(live, rid)
    feed.wait(lambda e: e[0] == "turn", what="the Turn starting")
    actor = ray.get_actor(f"run:{rid}", namespace="jr2ray")
    row = {"iid": iid, "slot": "writer", "state": "notes.writing", "prompt_tokens": 1, "cached_tokens": 0}
    ray.get([actor.record_telemetry.remote({**row, "n": n}) for n in range(2005)], timeout=300)
    hist: list[dict[str, Any]] = ray.get(actor.history.remote(0))
    assert hist[0]["seq"] == 1000 and hist[-1]["seq"] == 2005 and len(hist) == 1006  # 1 turn + 2005 rows, trimmed
    assert [h["seq"] for h in ray.get(actor.history.remote(2000))] == list(range(2000, 2006))
    http.post(f"/agents/{iid}/picks", json={"name": "done", "args": {"notes": "after the trim"}})
    # The open feed follows on past the trim: the pick after it arrives with the next number.
    pick = feed.wait(lambda e: e[0] == "pick", timeout=120, what="the pick after the trim")
    assert pick[1] == "2007" and pick[2]["args"] == {"notes": "after the trim"}
    # Whatever the Run trimmed before the feed read it is announced as a gap, never skipped silently.
    missed = sum(g["missed"] for g in feed.of("gap"))
    assert len(feed.of("telemetry")) + missed == 2005
    ids = [int(i) for k, i, _ in feed.events if k not in POINTS]
    assert ids == sorted(set(ids))
    # A new feed from 0 starts at the oldest event still held, numbered as before.
    http.post(f"/runs/{rid}/cancel")
    feed.wait_closed()
    late = Feed(live, rid)
    late.wait_closed()
    ids = [int(i) for k, i, _ in late.events if k not in POINTS]
    assert ids[0] == 1001 and ids == list(range(1001, 1001 + len(ids))) and ids[-1] >= 2009


def test_the_feed_needs_the_instance_token(live: LiveServer) -> None:
    rid = "nosuchrun"
    assert httpx.get(f"{live.url}/runs/{rid}/events").status_code == 401
    assert httpx.get(f"{live.url}/runs/{rid}/events", headers=live.auth()).status_code == 404
