"""A run's timeline (jr2ray.run.timeline) is built from its journal alone: the deploy workflow's Turn, Effect, Gate
wait and timer firing land on one time axis in the order they happened; parking and model requests from the feed
and telemetry rows."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jr2ray import LocalRun
from jr2ray.run.store import LedgerEntry, open_store
from jr2ray.run.timeline import Timeline, timeline
from jr2ray.testing import ScriptedAgent
from workflows.deploy import machine as deploy


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


async def _deploy_timeline(tmp_path: Path) -> tuple[str, Timeline]:
    store = open_store(str(tmp_path / "runs"))
    run = LocalRun(deploy, {"log_path": "deploy.log", "deploy_seconds": 0.1, "cooldown_ms": 150}, store=store)
    await ScriptedAgent("operator", ["deploy", ("note", {"text": "shipped"}), "submit"], timeout=20).play_async(run)
    for _ in range(200):
        if run.gates():
            break
        await asyncio.sleep(0.01)
    run.send("approval", "approve", {"by": "ops"})
    assert (await run.wait(10)).status == "done"
    j = store.open(run.id)
    try:
        return run.id, timeline(run.id, j.ledger())
    finally:
        j.close()


async def test_the_deploy_runs_turn_effect_gate_wait_and_timer_are_on_one_axis(tmp_path: Path) -> None:
    run_id, tl = await _deploy_timeline(tmp_path)
    assert tl.run_id == run_id and tl.finished
    assert tl.lanes[:2] == ["run", "steps"]
    (turn,) = [b for b in tl.bars if b.kind == "turn"]
    (eff,) = [b for b in tl.bars if b.kind == "effect"]
    (gate,) = [b for b in tl.bars if b.kind == "gate"]
    (run,) = [b for b in tl.bars if b.kind == "run"]
    assert turn.lane.startswith("turn operator") and gate.lane == "gate approval"
    assert eff.lane == "effect deploy.planning.deploying"  # the Effect's invoke id
    assert eff.detail["outcome"] == "ok" and eff.end is not None and eff.end - eff.start >= 0.1
    # The Effect ran inside the Turn; the Gate opened when the Turn ended (submit) and closed at approve.
    assert turn.end is not None and turn.start <= eff.start and eff.end <= turn.end
    assert gate.start >= turn.end - 1e-6
    steps = [m.label for m in tl.marks if m.kind == "step"]
    assert steps == ["start", "deploy", "note", "submit", "approve"]
    (approve,) = [m for m in tl.marks if m.kind == "gate_event"]
    assert approve.label == "approve" and gate.end is not None and approve.at <= gate.end
    # The cooldown timer fired after the approval (at least its 150 ms later), and the run ended then.
    (timer,) = [m for m in tl.marks if m.kind == "timer"]
    assert timer.label.startswith("xstate.after.cooldown") and timer.at - approve.at >= 0.14
    (end,) = [m for m in tl.marks if m.kind == "end"]
    assert end.label == "done" and run.end == end.at == tl.end and end.at >= timer.at
    picks = [m.label for m in tl.marks if m.kind == "pick"]
    assert picks == ["deploy", "note", "submit"]
    assert all(tl.start <= m.at <= tl.end for m in tl.marks)


def _e(seq: int, kind: str, at: float, data: dict, key: str | None = None) -> LedgerEntry:
    return LedgerEntry(seq=seq, kind=kind, key=key, digest="d", data=data, at=at)


def _feed(seq: int, at: float, kind: str, data: dict) -> LedgerEntry:
    return _e(seq, "feed", at, {"kind": kind, "at": at, "data": data}, key=str(seq))


def test_a_parked_period_lasts_until_the_next_write_and_a_request_splits_cached_from_prefilled() -> None:
    ledger = [
        _e(1, "start", 100.0, {"env": {}}),
        _feed(2, 100.0, "turn", {"iid": "r.t1", "slot": "writer", "state": "notes.writing", "active": True}),
        _e(3, "telemetry", 102.0, {"iid": "r.t1", "slot": "writer", "step": 1, "model": "local/tiny",
                                   "latency_s": 1.5, "prompt_tokens": 400, "cached_tokens": 300,
                                   "completion_tokens": 12}),
        _feed(4, 110.0, "park", {"parked": True}),
        _e(5, "admission", 170.0, {"gate": "g", "name": "reply"}, key="g:1"),
    ]
    tl = timeline("r", ledger, now=200.0)
    (parked,) = [b for b in tl.bars if b.kind == "parked"]
    assert (parked.start, parked.end, parked.lane) == (110.0, 170.0, "run")
    (req,) = [b for b in tl.bars if b.kind == "request"]
    assert (req.start, req.end) == (100.5, 102.0) and req.lane == "turn writer t1"
    assert req.detail["cached_tokens"] == 300 and req.detail["prefilled_tokens"] == 100
    assert req.detail["output_tokens"] == 12
    # Not finished: the axis runs to now, and the open Turn has no end.
    (turn,) = [b for b in tl.bars if b.kind == "turn"]
    assert not tl.finished and tl.end == 200.0 and turn.end is None


def test_a_run_still_parked_has_an_open_parked_period() -> None:
    tl = timeline("r", [_e(1, "start", 1.0, {}), _feed(2, 5.0, "park", {"parked": True})], now=9.0)
    (parked,) = [b for b in tl.bars if b.kind == "parked"]
    assert parked.end is None and tl.end == 9.0
