"""Every refusal names its problem, has the right status, and changes nothing: the run's status, its event history
and its journal (run row, every ledger entry, the latest snapshot) are identical before and after."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import ray

from .api_helpers import LiveServer, ask_in_background, observe, run_ids, start_notes

pytestmark = pytest.mark.ray

MIB = 1024 * 1024


@dataclass
class GatedRun:
    """A notes run whose writer picked `ask`: the editor's Gate is open and the pick is outstanding."""

    id: str
    iid: str
    gate: str
    pending: Future[httpx.Response]


@pytest.fixture(scope="module")
def gated(live: LiveServer) -> Iterator[GatedRun]:
    with httpx.Client(base_url=live.url, headers=live.auth(), timeout=60) as c, ThreadPoolExecutor(1) as pool:
        rid, iid = start_notes(c)
        pending, gate = ask_in_background(c, pool, rid, iid)
        yield GatedRun(rid, iid, gate["id"], pending)
        # The refusals left the run able to go on: the editor's reply still lands and answers the pick.
        ok = c.post(f"/runs/{rid}/gates/{gate['id']}/events", json={"event": "reply", "input": {"text": "fine"}})
        assert ok.status_code == 200, ok.text
        assert pending.result(60).json()["answer"] == "The editor replied: fine"
        c.post(f"/runs/{rid}/cancel")


def _big_json(size: int) -> bytes:
    return json.dumps({"event": "reply", "input": {"text": "x" * size}}).encode()


def _chunks(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


# (id, method, path under the gated run, request kwargs, status, words the detail must contain, accepts_now)
CASES: list[tuple[str, str, str, dict[str, Any], int, list[str], list[str] | None]] = [
    ("gate-malformed-json", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply", "input": {"text": "x"', "headers": {"content-type": "application/json"}},
     400, ["malformed JSON"], None),
    ("gate-json-not-object", "POST", "/runs/{rid}/gates/{gate}/events", {"json": ["reply"]}, 400, ["JSON object"],
     None),
    ("gate-empty-body", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b"", "headers": {"content-type": "application/json"}}, 400, ["body is required"], None),
    ("gate-not-json-content-type", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply"', "headers": {"content-type": "text/plain"}}, 400, ["malformed JSON"], None),
    ("gate-sender-in-input", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x", "sender": {"party": "gate", "id": "x"}}}}, 400, ["sender"],
     None),
    ("gate-sender-top-level", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}, "sender": {"party": "agent", "id": "writer"}}}, 400,
     ["sender"], None),
    ("gate-unknown-key", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}, "urgent": True}}, 400, ["urgent"], None),
    ("gate-missing-event", "POST", "/runs/{rid}/gates/{gate}/events", {"json": {"input": {"text": "x"}}}, 400,
     ["event"], None),
    ("gate-input-not-object", "POST", "/runs/{rid}/gates/{gate}/events", {"json": {"event": "reply", "input": "x"}},
     400, ["input"], None),
    ("gate-bad-payload-type", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": 42}}}, 400, ["text"], None),
    ("gate-bad-payload-missing", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {}}}, 400, ["text"], None),
    ("gate-unknown-event", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "publish", "input": {}}}, 400, ["publish"], None),
    ("gate-not-now-ask", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "ask", "input": {"question": "?"}}}, 409, ["ask"], ["reply"]),
    ("gate-not-now-done", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "done", "input": {"notes": "n"}}}, 409, ["done"], ["reply"]),
    ("gate-unknown-gate", "POST", "/runs/{rid}/gates/notes.writing.drafting/events",
     {"json": {"event": "reply", "input": {"text": "x"}}}, 404, ["notes.writing.drafting"], None),
    ("gate-unknown-gate-2", "POST", "/runs/{rid}/gates/approval/events",
     {"json": {"event": "reply", "input": {"text": "x"}}}, 404, ["approval"], None),
    ("gate-unknown-run", "POST", "/runs/nosuchrun/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}}}, 404, ["nosuchrun"], None),
    ("gate-bad-run-id", "POST", "/runs/no.such.run/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}}}, 404, ["no run 'no.such.run'"], None),
    ("gate-body-too-big", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": _big_json(MIB), "headers": {"content-type": "application/json"}}, 413, ["body over"], None),
    ("gate-chunked-too-big", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": "chunked", "headers": {"content-type": "application/json"}}, 413, ["body over"], None),
    ("gate-no-token", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}}, "headers": {"Authorization": ""}}, 401, ["token"], None),
    ("pick-malformed-json", "POST", "/agents/{iid}/picks",
     {"content": b"{name: ask}", "headers": {"content-type": "application/json"}}, 400, ["malformed JSON"], None),
    ("pick-sender-in-args", "POST", "/agents/{iid}/picks",
     {"json": {"name": "done", "args": {"notes": "n", "sender": {"party": "gate", "id": "x"}}}}, 400, ["sender"],
     None),
    ("pick-sender-top-level", "POST", "/agents/{iid}/picks",
     {"json": {"name": "done", "args": {"notes": "n"}, "sender": {"party": "gate", "id": "x"}}}, 400, ["sender"],
     None),
    ("pick-missing-name", "POST", "/agents/{iid}/picks", {"json": {"args": {}}}, 400, ["name"], None),
    ("pick-unknown-turn", "POST", "/agents/{rid}.t999/picks", {"json": {"name": "done", "args": {"notes": "n"}}},
     404, [".t999"], None),
    ("pick-not-an-iid", "POST", "/agents/writer/picks", {"json": {"name": "done", "args": {"notes": "n"}}}, 404,
     ["writer"], None),
    ("pick-unknown-run", "POST", "/agents/nosuchrun.t1/picks", {"json": {"name": "done", "args": {"notes": "n"}}},
     404, ["nosuchrun.t1"], None),
    ("pick-body-too-big", "POST", "/agents/{iid}/picks",
     {"content": json.dumps({"name": "ask", "args": {"question": "q" * MIB}}).encode(),
      "headers": {"content-type": "application/json"}}, 413, ["body over"], None),
    # Not standard JSON: refused before anything is stored (a lone surrogate broke every later read of the run).
    ("pick-lone-surrogate", "POST", "/agents/{iid}/picks",
     {"content": b'{"name": "done", "args": {"notes": "\\ud800"}}', "headers": {"content-type": "application/json"}},
     400, ["lone surrogate"], None),
    ("pick-nan", "POST", "/agents/{iid}/picks",
     {"content": b'{"name": "done", "args": {"notes": "n", "n": NaN}}',
      "headers": {"content-type": "application/json"}}, 400, ["NaN"], None),
    ("gate-lone-surrogate", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply", "input": {"text": "\\udfff"}}', "headers": {"content-type": "application/json"}},
     400, ["lone surrogate"], None),
    ("gate-infinity", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply", "input": {"text": "t", "n": Infinity}}',
      "headers": {"content-type": "application/json"}}, 400, ["Infinity"], None),
    ("gate-1e30", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply", "input": {"text": "t", "n": 1e30}}',
      "headers": {"content-type": "application/json"}}, 400, ["1e30"], None),
    ("gate-not-utf8", "POST", "/runs/{rid}/gates/{gate}/events",
     {"content": b'{"event": "reply", "input": {"text": "\xb2"}}', "headers": {"content-type": "application/json"}},
     400, ["UTF-8"], None),
    ("events-bad-last-event-id", "GET", "/runs/{rid}/events", {"headers": {"Last-Event-ID": b"\xb2"}}, 400,
     ["Last-Event-ID"], None),
    ("events-word-last-event-id", "GET", "/runs/{rid}/events", {"headers": {"Last-Event-ID": "seven"}}, 400,
     ["Last-Event-ID"], None),
    ("gate-foreign-host", "POST", "/runs/{rid}/gates/{gate}/events",
     {"json": {"event": "reply", "input": {"text": "x"}}, "headers": {"Host": "rebound.example"}}, 400,
     ["rebound.example"], None),
    ("surface-unknown-turn", "GET", "/agents/{rid}.t999/surface", {}, 404, [".t999"], None),
    ("surface-unknown-run", "GET", "/agents/nosuchrun.t1/surface", {}, 404, ["nosuchrun.t1"], None),
    ("run-unknown", "GET", "/runs/nosuchrun", {}, 404, ["nosuchrun"], None),
    ("events-unknown", "GET", "/runs/nosuchrun/events", {}, 404, ["nosuchrun"], None),
    ("timeline-unknown", "GET", "/runs/nosuchrun/timeline", {}, 404, ["nosuchrun"], None),
    ("timeline-no-token", "GET", "/runs/{rid}/timeline", {"headers": {"Authorization": "Bearer wrong"}}, 401,
     ["token"], None),
    ("cancel-unknown", "POST", "/runs/nosuchrun/cancel", {}, 404, ["nosuchrun"], None),
    ("cancel-no-token", "POST", "/runs/{rid}/cancel", {"headers": {"Authorization": "Bearer wrong"}}, 401, ["token"],
     None),
]


@pytest.mark.parametrize(("method", "path", "kwargs", "status", "words", "accepts_now"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_refusal_names_the_problem_and_changes_nothing(
        http: httpx.Client, live: LiveServer, gated: GatedRun, method: str, path: str, kwargs: dict[str, Any],
        status: int, words: list[str], accepts_now: list[str] | None) -> None:
    url = path.format(rid=gated.id, gate=gated.gate, iid=gated.iid)
    kwargs = dict(kwargs)
    if kwargs.get("content") == "chunked":  # a generator body goes out chunked, with no content-length
        kwargs["content"] = _chunks(_big_json(2 * MIB))
    before = observe(live.store_dir(), gated.id)
    ids_before = run_ids(live.store_dir())
    r = http.request(method, url, **kwargs)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    for w in words:
        assert w in detail, (w, detail)
    if accepts_now is not None:
        assert r.json()["accepts_now"] == accepts_now
    else:
        assert "accepts_now" not in r.json()
    assert observe(live.store_dir(), gated.id) == before
    assert run_ids(live.store_dir()) == ids_before
    assert not gated.pending.done()  # the outstanding pick is still waiting for the editor


def _named_runs() -> set[str]:
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("run:")}


@pytest.mark.parametrize(("path", "kwargs", "status", "words"), [
    ("/workflows/notes/runs",
     {"content": b'{"input": {"changes": "x"}', "headers": {"content-type": "application/json"}}, 400,
     ["malformed JSON"]),
    ("/workflows/notes/runs", {"json": {"input": {}}}, 400, ["changes", "Field required"]),
    ("/workflows/notes/runs", {"json": {"input": {"changes": 7}}}, 400, ["changes"]),
    ("/workflows/notes/runs", {"json": {"input": {"changes": "x"}, "sender": {"party": "gate", "id": "x"}}}, 400,
     ["sender"]),
    ("/workflows/notes/runs", {"json": {"changes": "x"}}, 400, ["input"]),
    ("/workflows/notes/runs", {"json": {"input": {"changes": "x" * (MIB + 1)}}}, 413, ["body over"]),
    ("/workflows/notes/runs", {"json": {"input": {"changes": "x", "extra": "y" * (300 * 1024)}}}, 413,
     ["over the limit of 262144 bytes", "JR2RAY_MAX_RUN_INPUT"]),
    ("/workflows/notes/runs", {"content": b'{"input": {"changes": "\\ud800"}}',
                               "headers": {"content-type": "application/json"}}, 400, ["lone surrogate"]),
    ("/workflows/notes/runs", {"content": b'{"input": {"changes": "x", "n": NaN}}',
                               "headers": {"content-type": "application/json"}}, 400, ["NaN"]),
    ("/workflows/notes/runs", {"content": b'{"input": {"changes": "x", "n": 1e30}}',
                               "headers": {"content-type": "application/json"}}, 400, ["1e30"]),
    ("/workflows/nope/runs", {"json": {"input": {"changes": "x"}}}, 404, ["nope"]),
    ("/workflows/os/runs", {"json": {"input": {}}}, 404, ["os"]),
    ("/workflows/notes:machine/runs", {"json": {"input": {"changes": "x"}}}, 404, ["notes:machine"]),
], ids=["malformed", "door-missing", "door-type", "sender", "no-input-key", "too-big", "input-over-limit",
        "lone-surrogate", "nan", "1e30", "unknown", "not-a-workflow", "import-path"])
def test_a_refused_start_starts_nothing(http: httpx.Client, live: LiveServer, path: str, kwargs: dict[str, Any],
                                        status: int, words: list[str]) -> None:
    ids_before, actors_before = run_ids(live.store_dir()), _named_runs()
    r = http.post(path, **kwargs)
    assert r.status_code == status, r.text
    for w in words:
        assert w in r.json()["detail"], (w, r.json())
    assert run_ids(live.store_dir()) == ids_before
    assert _named_runs() == actors_before


def test_an_oversized_chunked_body_is_413_on_the_wire(live: LiveServer, gated: GatedRun) -> None:
    """Raw HTTP/1.1 chunked upload with no content-length: refused once the limit is passed, nothing delivered."""
    before = observe(live.store_dir(), gated.id)
    host, port = live.url.removeprefix("http://").split(":")
    body = _big_json(2 * MIB)
    head = (f"POST /runs/{gated.id}/gates/{gated.gate}/events HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {live.token}\r\nContent-Type: application/json\r\n"
            f"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head)
        try:
            for chunk in _chunks(body):
                s.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may stop reading once it has refused: that is the point
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    status_line, _, rest = reply.partition(b"\r\n")
    assert status_line.split()[1] == b"413", reply[:300]
    assert b"body over" in rest
    assert observe(live.store_dir(), gated.id) == before


def test_a_body_just_under_the_limit_is_read(http: httpx.Client, gated: GatedRun, live: LiveServer) -> None:
    """The limit is the body, not the payload schema: 1 MiB minus a little still reaches the route (here a 409)."""
    body = json.dumps({"event": "ask", "input": {"question": "q" * (MIB - 200)}}).encode()
    assert len(body) <= MIB
    before = observe(live.store_dir(), gated.id)
    r = http.post(f"/runs/{gated.id}/gates/{gated.gate}/events", content=body,
                  headers={"content-type": "application/json"})
    assert r.status_code == 409 and r.json()["accepts_now"] == ["reply"]
    assert observe(live.store_dir(), gated.id) == before
