"""`jr2ray store copy`'s core, both ways between the backends: every journal with its ledger (transcripts
included), snapshots, how a parked run stood, the timers and the lost runs are copied and verified (counts, a hash
per journal); a run goes on in the target store afterwards (its Gate takes its event, its timer fires once); a
target holding a different run of the same id is refused with nothing written; copying again writes nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jr2ray.chart import ManualClock
from jr2ray.run import LocalRun, TranscriptEntry
from jr2ray.run.store.copy import CopyRefused, copy_store, journal_counts, journal_hash
from workflows.deploy import machine as deploy


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Effects run in <home>/workspaces/<run id>."""
    monkeypatch.setenv("JR2RAY_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture(params=[("sqlite", "postgresql"), ("postgresql", "sqlite")], ids=["sqlite-to-pg", "pg-to-sqlite"])
def pair(request: pytest.FixtureRequest, make_backend: Any) -> tuple[Any, Any]:
    return make_backend(request.param[0]), make_backend(request.param[1])


async def _runs(store: Any, tmp: Path) -> dict[str, str]:
    """A run at its approval Gate (with a transcript, parked), one in its cooldown (a timer due soon), one
    cancelled, and one lost."""
    def door(name: str, cooldown_ms: int) -> dict[str, Any]:
        return {"log_path": "deploy.log", "deploy_seconds": 0.01, "cooldown_ms": cooldown_ms}

    async def to_gate(run: LocalRun) -> None:
        receipt = await run.pick("operator", "deploy", delivery_id=f"{run.id}-d")  # at Rest: the deploy ran
        assert receipt.answer == "deploy finished: deployed", receipt
        assert (await run.pick("operator", "submit", delivery_id=f"{run.id}-s")).moved

    frozen = ManualClock(time.time() * 1000.0)  # the source's runs never fire a timer of their own in this test
    gated = LocalRun(deploy, door("gated", 300), run_id="cp-gated", store=store, clock=frozen)
    await to_gate(gated)
    gated.engine.record_transcript("operator", TranscriptEntry(seq=0, at=0, messages=['{"role":"user","x":"ü"}']))
    timed = LocalRun(deploy, door("timed", 1500), run_id="cp-timed", store=store, clock=frozen)
    await to_gate(timed)
    assert timed.send("approval", "approve", {"by": "ops"}, delivery_id="t-a").ok
    assert timed.value == "cooldown"
    done = LocalRun(deploy, door("done", 10), run_id="cp-done", store=store, clock=frozen)
    done.cancel()
    store.set_parked("cp-gated", True, {"status": {"value": "approval"}, "waiting": {"gates": ["approval"]}})
    timers = store.timer_index()
    timers.set("cp-timed", 1.0e15)
    timers.close()
    store.mark_lost("cp-lost", "the journal of run cp-lost is gone (test)")
    return {"gated": "cp-gated", "timed": "cp-timed", "done": "cp-done"}


async def _quiet(store: Any, ids: list[str]) -> dict[str, str]:
    """The journals' hashes once the source's runs wrote nothing for a while (feed events staged after a step are
    written on a later step of the loop, later still on a loaded box): the copy is taken of a store nobody writes."""
    last: dict[str, str] = {}
    for _ in range(100):
        await asyncio.sleep(0.2)
        now = {rid: journal_hash(store.export_run(rid)) for rid in ids}
        if now == last:
            return now
        last = now
    raise AssertionError("the source's runs kept writing")


async def test_a_copy_carries_every_run_and_the_runs_go_on_in_the_target(pair: tuple[Any, Any],
                                                                        tmp_path: Path) -> None:
    src_b, dst_b = pair
    src, dst = src_b.make(), dst_b.make()
    ids = await _runs(src, tmp_path)
    before = await _quiet(src, list(ids.values()))

    report = copy_store(src, dst)
    assert sorted(report.copied) == sorted(ids.values()) and report.lost == ["cp-lost"]
    assert report.hashes == before  # verified: the same hash per journal in the target
    assert report.counts == {"active": 2, "cancelled": 1}
    for rid in ids.values():
        assert journal_counts(dst.export_run(rid)) == journal_counts(src.export_run(rid))
    assert len(dst.open("cp-gated").ledger("transcript")) == 1
    assert dst.standing("cp-gated") == src.standing("cp-gated")
    timers = dst.timer_index()
    assert timers.due(float("inf")) == [("cp-timed", 1.0e15)]
    timers.close()
    assert {r.id: r.status for r in dst.list_runs()} == {**{rid: r.status for rid, r in
                                                            ((r.id, r) for r in src.list_runs())}}
    assert dst.listing("cp-lost").lifecycle == "lost"

    again = copy_store(src, dst)  # a second copy finds every run there, the same: nothing is written
    assert again.copied == [] and sorted(again.already) == sorted(ids.values())

    # The runs go on from the target: the Gate takes its event, the timer fires once, nothing twice.
    gated = LocalRun(deploy, None, run_id="cp-gated", store=dst)
    assert gated.send("approval", "approve", {"by": "ops"}, delivery_id="g-a").ok
    timed = LocalRun(deploy, None, run_id="cp-timed", store=dst)
    started = time.monotonic()
    finals = await asyncio.gather(gated.wait(30), timed.wait(30))
    assert time.monotonic() - started >= 0.25  # the gated run's own cooldown (300 ms) ran on the wall clock
    assert [f.status for f in finals] == ["done", "done"] and timed.value == "released"
    assert [e.data["name"] for e in dst.open("cp-timed").ledger("admission")] == ["deploy", "submit", "approve"]
    assert [e.data["name"] for e in dst.open("cp-gated").ledger("admission")] == ["deploy", "submit", "approve"]
    assert (tmp_path / "home" / "workspaces" / "cp-gated" / "deploy.log").read_text() == "deployed\n"  # once
    assert {rid: journal_hash(src.export_run(rid)) for rid in ids.values()} == before  # the source is untouched


async def test_a_target_holding_a_different_run_of_the_same_id_is_refused_and_unchanged(
        pair: tuple[Any, Any], tmp_path: Path) -> None:
    src_b, dst_b = pair
    src, dst = src_b.make(), dst_b.make()
    await _quiet(src, list((await _runs(src, tmp_path)).values()))
    other = LocalRun(deploy, {"log_path": "other.log"}, run_id="cp-timed", store=dst)
    await other.pick("operator", "note", {"text": "not the same run"}, delivery_id="o-1")
    dump = dst_b.dump(dst, "cp-timed")
    listed = [r.id for r in dst.list_runs()]
    with pytest.raises(CopyRefused, match="cp-timed"):
        copy_store(src, dst)
    assert dst_b.dump(dst, "cp-timed") == dump and [r.id for r in dst.list_runs()] == listed
