"""`GET /runs` filters and `GET /gates`, without Ray: the app reads a store the test fills directly (a batch of starts,
runs parked with how they stood), through a stand-in client that says where each active run is, as the registry
would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from jr2ray.run.store import NewRun, Store, journal_bytes
from serve.api import ApiConfig, build_app
from serve.api.schemas import RunView
from serve.auth import ensure_token

from .api_helpers import TEST_HOSTS

GATE = "notes.writing.asking"


class StoreClient:
    """`Client.runs` over a real store, with presence from a dict instead of the registry (active runs not named
    there are parked) and each queued run's place in line, oldest first."""

    virtual = True

    def __init__(self, store: Store, live: set[str]) -> None:
        self.store, self.live = store, live

    def runs(self, limit: int | None = None, after: str | None = None,
             status: str | list[str] | None = None) -> list[dict[str, Any]]:
        line = self.store.queued_runs()
        rows = [r.model_dump() | {"cursor": self.store.cursor(r), "presence": None}
                for r in self.store.list_runs(limit, after, status)]
        for r in rows:
            if r["status"] == "queued":
                r["presence"], r["place"] = "queued", line.index(r["id"]) + 1
            elif r["status"] == "active":
                r["presence"] = "live" if r["id"] in self.live else "parked"
        return rows


def _standing(value: Any, gates: list[str] = (), turns: dict[str, list[str]] | None = None,  # type: ignore[assignment]
              timer_due: float | None = None) -> dict[str, Any]:
    return {"status": {"id": "x", "workflow": "notes", "digest": "d", "status": "active", "value": value},
            "waiting": {"gates": list(gates), "turns": turns or {}, "timer_due": timer_due}}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, Store, list[str]]:
    """60 runs of notes and deploy: every third parked at a Gate, a few queued, a few done, two live."""
    token, _ = ensure_token(tmp_path)
    store = Store(tmp_path / "runs")
    ids = [f"r{i:03d}{'abcdef'[i % 6]}" for i in range(60)]
    status = ["queued" if i % 10 == 1 else "done" if i % 10 == 2 else "active" for i in range(60)]
    store.create_runs([NewRun(id=rid, workflow="deploy" if i % 2 else "notes", digest="d", input={"i": i},
                              status=status[i]) for i, rid in enumerate(ids)])
    for i, rid in enumerate(ids):
        if status[i] == "active" and i not in (0, 3):
            store.set_parked(rid, True, _standing({"writing": "asking"}, gates=[GATE]) if i % 3 == 0
                             else _standing("drafting", turns={"writer": ["ask", "done"]}))
    app = build_app(ApiConfig(home=str(tmp_path), store=str(tmp_path / "runs"), launcher="none", hosts=TEST_HOSTS))
    ctx = app.state.ctx
    ctx._client = StoreClient(store, live={ids[0], ids[3]})

    async def live_view(run_id: str) -> RunView:  # what a live run answers when asked
        return RunView(id=run_id, workflow="notes", digest="d", status="active", value="drafting",
                       gates=[{"id": "review", "state": "x.review", "accepts": [], "accepts_now": ["approve"]}]
                       if run_id == ids[3] else [])

    monkeypatch.setattr(ctx, "live_or_journal", live_view)
    http = TestClient(app)
    http.headers["Authorization"] = f"Bearer {token}"
    return http, store, ids


def _all(http: TestClient, path: str, **params: Any) -> tuple[list[dict[str, Any]], int]:
    """Every row, following x-next-cursor; and how many requests it took. No page is longer than its limit."""
    rows: list[dict[str, Any]] = []
    cursor, requests = None, 0
    while True:
        r = http.get(path, params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        requests += 1
        if path == "/runs":
            assert len(r.json()) <= params.get("limit", 200)
        rows += r.json()
        cursor = r.headers.get("x-next-cursor")
        if not cursor:
            return rows, requests


def test_parked_rows_carry_their_value_and_where_they_wait(world: tuple[TestClient, Store, list[str]]) -> None:
    http, _, ids = world
    rows = {r["id"]: r for r in http.get("/runs", params={"limit": 100}).json()}
    assert len(rows) == 60
    at_gate, at_turn, queued, done, live = rows[ids[6]], rows[ids[4]], rows[ids[11]], rows[ids[12]], rows[ids[3]]
    assert at_gate["presence"] == "parked" and at_gate["value"] == {"writing": "asking"}
    assert at_gate["waiting"] == {"gates": [GATE], "turns": {}, "timer_due": None}
    assert at_turn["waiting"]["turns"] == {"writer": ["ask", "done"]} and at_turn["value"] == "drafting"
    assert queued["presence"] == "queued" and queued["place"] == 2 and queued["waiting"] is None
    assert done["presence"] is None and done["waiting"] is None and done["place"] is None
    assert live["presence"] == "live" and live["waiting"] is None and live["gates"][0]["id"] == "review"


@pytest.mark.parametrize("params, expect", [
    ({"where": "queued"}, lambda i: i % 10 == 1),
    ({"where": "live"}, lambda i: i in (0, 3)),
    ({"where": "parked"}, lambda i: i % 10 not in (1, 2) and i not in (0, 3)),
    ({"where": "parked", "workflow": "deploy"}, lambda i: i % 10 not in (1, 2) and i not in (0, 3) and i % 2),
    ({"status": "done", "workflow": "notes"}, lambda i: i % 10 == 2 and not i % 2),
    ({"status": "done", "where": "live"}, lambda i: False),
    ({"prefix": "r04"}, lambda i: 40 <= i < 50),
])
def test_filters_page_through_every_match_and_only_matches(world: tuple[TestClient, Store, list[str]],
                                                           params: dict[str, str], expect: Any) -> None:
    http, _, ids = world
    rows, requests = _all(http, "/runs", limit=4, **params)
    want = [rid for i, rid in reversed(list(enumerate(ids))) if expect(i)]
    assert sorted(r["id"] for r in rows) == sorted(want)
    assert len({r["id"] for r in rows}) == len(rows)  # no run twice across pages
    assert requests >= len(want) // 4


def test_a_prefix_finds_one_run(world: tuple[TestClient, Store, list[str]]) -> None:
    http, _, ids = world
    r = http.get("/runs", params={"prefix": ids[42][:4] + ids[42][4:]})
    assert [row["id"] for row in r.json()] == [ids[42]] and "x-next-cursor" not in r.headers


def test_a_scan_that_stops_early_still_names_the_next_page(world: tuple[TestClient, Store, list[str]],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from serve.api import listing

    http, _, ids = world
    monkeypatch.setattr(listing, "SCAN_BUDGET", 10)
    rows, requests = _all(http, "/runs", limit=50, prefix=ids[5])
    assert [r["id"] for r in rows] == [ids[5]] and requests >= 3


def test_paging_past_the_first_page_reaches_every_run(world: tuple[TestClient, Store, list[str]]) -> None:
    http, _, ids = world
    first = http.get("/runs", params={"limit": 50})
    assert len(first.json()) == 50 and "cursor=" in first.headers["link"]
    rest = http.get("/runs", params={"limit": 50, "cursor": first.headers["x-next-cursor"]})
    assert {r["id"] for r in first.json()} | {r["id"] for r in rest.json()} == set(ids)
    assert "x-next-cursor" not in rest.headers


def test_gates_lists_every_open_gate_across_runs(world: tuple[TestClient, Store, list[str]]) -> None:
    http, _, ids = world
    gates, requests = _all(http, "/gates", limit=5)
    parked = [rid for i, rid in enumerate(ids) if i % 3 == 0 and i % 10 not in (1, 2) and i not in (0, 3)]
    assert sorted(g["run_id"] for g in gates if g["gate"] == GATE) == sorted(parked)
    assert all(g["presence"] == "parked" and g["accepts_now"] is None for g in gates if g["gate"] == GATE)
    live = [g for g in gates if g["presence"] == "live"]
    assert live == [{"run_id": ids[3], "workflow": "deploy", "gate": "review", "presence": "live",
                     "accepts_now": ["approve"], "created_at": live[0]["created_at"],
                     "updated_at": live[0]["updated_at"]}]
    assert requests > 1
    newest_first = [g["created_at"] for g in gates]
    assert newest_first == sorted(newest_first, reverse=True)
    only_deploy, _ = _all(http, "/gates", workflow="deploy")
    assert {g["run_id"] for g in only_deploy} == {ids[3]} | {rid for rid in parked if int(rid[1:4]) % 2}


@pytest.mark.parametrize("path, params, words", [
    ("/runs", {"where": "somewhere"}, "where must be one of live, parked, queued"),
    ("/runs", {"prefix": "../etc"}, "prefix must be 1 to 64 of"),
    ("/runs", {"workflow": "no such;"}, "workflow must be a workflow's name"),
    ("/gates", {"workflow": "a b"}, "workflow must be a workflow's name"),
    ("/gates", {"cursor": "garbage"}, "cursor is not one this instance made"),
])
def test_a_bad_filter_is_refused_400_and_changes_nothing(world: tuple[TestClient, Store, list[str]], path: str,
                                                        params: dict[str, str], words: str) -> None:
    http, store, ids = world
    before = {rid: journal_bytes(store.path(rid)) for rid in ids}
    r = http.get(path, params=params)
    assert r.status_code == 400 and words in r.json()["detail"], r.text
    assert {rid: journal_bytes(store.path(rid)) for rid in ids} == before
