"""`jr2ray down` and `up` as an operator runs them, with 20 runs in every state (issue 12, case 3).

Runs are started and driven over the instance's HTTP API; `up` and `down` are the real CLI, as subprocesses. After
the second `up` every run does what its journal says: timers fire with the time they had left (at once if overdue),
Gates accept, a waiting pick is answered when retried with its delivery id, an Effect cut off by `down` is not run
again, cancel works, finished runs stay finished, and the run whose journal was damaged lists as corrupt.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from up_instance import PickInBackground, UpInstance, start_instance, stop_instance, wait_for

from jr2ray.run.store import Store

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

ENV = {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_DEPLOY_DRIVER": "external"}


class Api:
    """The few calls this test makes, on whichever instance is up now."""

    def __init__(self, up: UpInstance) -> None:
        self.up = up

    def _http(self) -> httpx.Client:
        return self.up.http()

    def start(self, workflow: str, data: dict[str, Any]) -> str:
        with self._http() as h:
            r = h.post(f"/workflows/{workflow}/runs", json={"input": data})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def view(self, rid: str) -> dict[str, Any]:
        with self._http() as h:
            r = h.get(f"/runs/{rid}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def iid(self, rid: str, slot: str) -> str:
        return next(t["iid"] for t in self.view(rid)["turns"] if t["slot"] == slot and t["active"])

    def pick(self, rid: str, slot: str, name: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        with self._http() as h:
            r = h.post(f"/agents/{self.iid(rid, slot)}/picks", json={"name": name, "args": args or {}})
        assert r.status_code == 200, r.text
        return dict(r.json())

    def send(self, rid: str, gate: str, event: str, data: dict[str, Any],
             delivery_id: str | None = None) -> httpx.Response:
        with self._http() as h:
            return h.post(f"/runs/{rid}/gates/{gate}/events",
                          json={"event": event, "input": data, "delivery_id": delivery_id})

    def cancel(self, rid: str) -> dict[str, Any]:
        with self._http() as h:
            r = h.post(f"/runs/{rid}/cancel")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def listing(self) -> dict[str, dict[str, Any]]:
        with self._http() as h:
            r = h.get("/runs", params={"limit": 1000})
        assert r.status_code == 200, r.text
        return {row["id"]: row for row in r.json()}

    def until(self, what: str, rid: str, check: Any, timeout_s: float = 60.0) -> dict[str, Any]:
        def ready() -> dict[str, Any] | None:
            v = self.view(rid)
            return v if check(v) else None

        return dict(wait_for(f"{what} in run {rid}", ready, timeout_s=timeout_s))


def _ledger(store: Store, rid: str, kind: str) -> list[Any]:
    j = store.open(rid)
    try:
        return j.ledger(kind)
    finally:
        j.close()


def _deploy_to_gate(api: Api, cooldown_ms: int) -> str:
    rid = api.start("deploy", {"deploy_seconds": 0.05, "cooldown_ms": cooldown_ms})
    assert api.pick(rid, "operator", "deploy")["answer"] == "deploy finished: deployed"
    assert api.pick(rid, "operator", "submit")["turn_complete"]
    api.until("the approval Gate", rid, lambda v: [g["id"] for g in v["gates"]] == ["approval"])
    return rid


def _in_background(fn: Any) -> threading.Thread:
    """A call that `down` cuts off: whatever it raises is expected and ignored."""
    def go() -> None:
        try:
            fn()
        except Exception:  # noqa: BLE001, S110 - the instance went down under it
            pass

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _setup(api: Api, store: Store, short_ms: int, long_ms: int) -> dict[str, list[str]]:
    """20 runs: 4 at a Gate, 4 with a waiting pick, 4 with a pending timer, 3 in an Effect, 3 finished, 1 idle and
    1 whose journal will be damaged while the instance is down."""
    runs: dict[str, list[str]] = {"gated": [_deploy_to_gate(api, 100) for _ in range(4)]}
    runs["asking"] = [api.start("notes", {"changes": f"fix {i}"}) for i in range(4)]
    for i, rid in enumerate(runs["asking"]):
        PickInBackground(api.up, api.iid(rid, "writer"), "ask", {"question": f"q{i}?"}, delivery_id=f"ask-{i}")
        api.until("the editor's Gate", rid, lambda v: bool(v["gates"]))
    runs["timed"] = [_deploy_to_gate(api, ms) for ms in (short_ms, short_ms, long_ms, long_ms)]
    runs["effect"] = [api.start("deploy", {"deploy_seconds": 60.0}) for _ in range(3)]
    for rid in runs["effect"]:
        _in_background(lambda rid=rid: api.pick(rid, "operator", "deploy"))
        wait_for(f"the deploy Effect to start in {rid}", lambda rid=rid: _ledger(store, rid, "effect_started"))
    runs["finished"] = [api.start("notes", {"changes": "x"}) for _ in range(2)] + [_deploy_to_gate(api, 10)]
    for rid in runs["finished"][:2]:
        assert api.cancel(rid)["status"] == "cancelled"
    assert api.send(runs["finished"][2], "approval", "approve", {"by": "ops"}).status_code == 200
    api.until("the release", runs["finished"][2], lambda v: v["status"] == "done")
    runs["damaged"] = [api.start("notes", {"changes": "x"})]
    runs["idle"] = [api.start("notes", {"changes": "x"})]
    assert sum(len(v) for v in runs.values()) == 20
    return runs


def test_twenty_runs_in_every_state_go_on_after_down_and_up(tmp_path_factory: pytest.TempPathFactory) -> None:
    home = tmp_path_factory.mktemp("downup-home")
    store = Store(home / "runs")
    t0 = time.monotonic()
    first = start_instance(home, ENV)
    temp_dirs = [first.temp_dir]
    up_s = time.monotonic() - t0
    # Outlasts down (about 2 s since it stops the GCS last) and a second up (about one up_s); a loaded box that
    # takes longer makes the long timers overdue too, which the checks after up allow for.
    long_ms = int(max(25.0, 1.5 * up_s + 10) * 1000)
    # Outlasts the approvals and `down` (a timer that fires before the instance is down ends its run early, and
    # `up` then counts one active run less), yet is overdue once the second `up` (about one up_s) is done.
    short_ms = int(max(8.0, 0.6 * up_s) * 1000)
    env = first.env
    try:
        api = Api(first)
        runs = _setup(api, store, short_ms, long_ms)
        approved_at = time.time()
        for rid in runs["timed"]:
            assert api.send(rid, "approval", "approve", {"by": "ops"}, delivery_id="ok-1").status_code == 200
        assert all(api.view(rid)["value"] == "cooldown" for rid in runs["timed"])

        down = first.cli("down")
        assert down.code == 0, down.explain()
        # What `up` must count is what the journals say at the down: a short timer may already have released its
        # run while `down` ran (a loaded box), and the damaged one is corrupt, not active, once it is damaged.
        at_down = {r.id for r in store.list_runs(status="active")} - set(runs["damaged"])
        assert at_down >= {rid for kind in ("gated", "asking", "effect", "idle") for rid in runs[kind]}
        with open(store.path(runs["damaged"][0]), "r+b") as f:
            f.write(b"not a journal at all")
        again = start_instance(home, ENV)
        temp_dirs.append(again.temp_dir)
        resumed_at = time.time()
        active = len(at_down)
        assert f"resumed {active} active run(s)" in again.up.stdout + again.up.stderr, again.up.explain()
        _check_after_up(Api(again), store, runs, approved_at, resumed_at, long_ms / 1000, home)
    finally:
        stop_instance(home, env)
        for d in temp_dirs:
            if d and d.startswith("/tmp/jr2ray-"):
                shutil.rmtree(d, ignore_errors=True)


def _check_after_up(api: Api, store: Store, runs: dict[str, list[str]], approved_at: float, resumed_at: float,
                    long_s: float, home: Path) -> None:
    def log(rid: str) -> Path:
        return home / "workspaces" / rid / "deploy.log"

    # Every active run goes on: live again, parked (read from the store as it stood, `live` false: reading it wakes
    # nothing; the Gate events below wake it), or (an overdue timer fires at once after up) already at its end,
    # which a finished virtual run answers from its journal.
    # On a loaded machine `down` and the second `up` may outlast even the long cooldown: then it is overdue too,
    # and only "not early, not from zero" below is checked for it.
    def late() -> bool:  # the long cooldown is so near its end that a read now may see it fire: decided per read
        return time.time() - approved_at >= long_s - 5.0

    for kind in ("gated", "asking", "timed", "effect", "idle"):
        for rid in runs[kind]:
            v = api.view(rid)
            overdue = rid in runs["timed"][:2] or (rid in runs["timed"] and late())
            assert v["status"] == "active" or (overdue and v["status"] == "done"), \
                f"{kind} run {rid} was not resumed: {v}"
    # Timers: the overdue ones fire at once, the others with the time they had left (not from zero, not early).
    for rid in runs["timed"][:2]:
        api.until("the overdue release", rid, lambda v: v["value"] == "released", timeout_s=20)
    for rid in runs["timed"][2:]:
        assert late() or api.view(rid)["value"] == "cooldown"
    for rid in runs["timed"][2:]:
        api.until("the release", rid, lambda v: v["value"] == "released", timeout_s=long_s + 30)
    assert time.time() - approved_at >= long_s - 0.1, "a timer fired early"
    assert time.time() < resumed_at + long_s - 0.5, "a timer started over from zero after up"
    for rid in runs["timed"]:
        assert [e.data["name"] for e in _ledger(store, rid, "admission")] == ["deploy", "submit", "approve"]
        assert log(rid).read_text() == "deployed\n"
    # Gates accept, and nothing is applied twice.
    for rid in runs["gated"]:
        assert api.send(rid, "approval", "approve", {"by": "ops"}).status_code == 200
        api.until("the release", rid, lambda v: v["status"] == "done", timeout_s=20)
        assert log(rid).read_text() == "deployed\n"
    # A waiting pick, retried with its delivery id, gets the receipt the editor's reply makes; counted once.
    for i, rid in enumerate(runs["asking"]):
        retry = PickInBackground(api.up, api.iid(rid, "writer"), "ask", {"question": f"q{i}?"}, f"ask-{i}")
        time.sleep(0.2)
        assert api.send(rid, "notes.writing.asking", "reply", {"text": f"r{i}"}).status_code == 200
        assert retry.join(30)["answer"] == f"The editor replied: r{i}"
        assert api.view(rid)["context"]["replies"] == 1
    # An Effect cut off by `down` is not run again (it is not idempotent); its Turn is open again and goes on.
    for rid in runs["effect"]:
        view = api.until("the interrupted deploy", rid, lambda v: v["value"] == {"planning": "idle"})
        assert view["context"]["deploys"] == 0 and not log(rid).exists()
        assert len(_ledger(store, rid, "effect_started")) == 1
        assert api.pick(rid, "operator", "note", {"text": "after up"})["moved"]
    # Cancel works; finished runs stay finished; the damaged one lists as corrupt and took nothing down with it.
    assert api.cancel(runs["idle"][0])["status"] == "cancelled"
    rows = api.listing()
    assert [rows[rid]["status"] for rid in runs["finished"]] == ["cancelled", "cancelled", "done"]
    assert rows[runs["damaged"][0]]["status"] == "corrupt"
