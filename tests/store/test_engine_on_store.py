"""The Run engine on each backend, in-process: a run's picks are journaled, and a rebuild from the store alone has
them, with nothing applied twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jr2ray.run import LocalRun
from workflows.deploy import machine as deploy


async def test_a_run_rebuilt_from_the_store_has_every_pick_once(store: Any, tmp_path: Path) -> None:
    door = {"log_path": str(tmp_path / "deploy.log")}
    run = LocalRun(deploy, door, run_id="dep-1", store=store)
    first = await run.pick("operator", "note", {"text": "changelog reviewed"}, delivery_id="n-1")
    await run.pick("operator", "note", {"text": "migration checked"}, delivery_id="n-2")
    assert first.moved

    again = LocalRun(deploy, door, run_id="dep-1", store=store)
    assert again.context["notes"] == ["changelog reviewed", "migration checked"]
    assert again.value == {"planning": "idle"}
    repeat = await again.pick("operator", "note", {"text": "changelog reviewed"}, delivery_id="n-1")
    assert repeat == first  # the receipt came from the journal; the note is not added twice
    assert again.context["notes"] == ["changelog reviewed", "migration checked"]
    admissions = store.open("dep-1").ledger("admission")
    assert [e.data["name"] for e in admissions] == ["note", "note"]
    listed = {r.id: r for r in store.list_runs()}
    assert listed["dep-1"].workflow == "deploy" and listed["dep-1"].lifecycle == "active"


async def test_a_conversation_transcript_comes_back_byte_for_byte_after_a_rebuild(store: Any, tmp_path: Path) -> None:
    """Messages are kept as the texts the Harness wrote, so key order, spacing and unicode survive either backend."""
    from jr2ray.run import TranscriptEntry

    door = {"log_path": str(tmp_path / "deploy.log")}
    run = LocalRun(deploy, door, run_id="dep-t", store=store)
    texts = ['{"role":"user","content":"z first, then a","extra":{"z":1,"a":[2, 3]}}',
             '{"role": "assistant",  "content": "ünïcode ✓"}']
    run.engine.record_transcript("operator", TranscriptEntry(seq=0, at=0, messages=texts[:1]))
    run.engine.record_transcript("operator", TranscriptEntry(seq=1, at=1, messages=texts[1:]))
    count = len(store.open("dep-t").ledger("transcript"))
    run.engine.record_transcript("operator", TranscriptEntry(seq=0, at=0, messages=texts))  # a retry: nothing new
    assert len(store.open("dep-t").ledger("transcript")) == count == 2

    again = LocalRun(deploy, door, run_id="dep-t", store=store)
    got = again.engine.transcript("operator")
    assert got.messages == texts and got.recorded == 2


async def test_a_transcript_entry_with_a_gap_is_refused_and_changes_nothing(store: Any, tmp_path: Path) -> None:
    from jr2ray.run import BadRequest, TranscriptEntry, UnknownTurn

    run = LocalRun(deploy, {"log_path": str(tmp_path / "deploy.log")}, run_id="dep-g", store=store)
    run.engine.record_transcript("operator", TranscriptEntry(seq=0, at=0, messages=['{"role":"user"}']))

    def journal() -> list[Any]:
        return [e.model_dump() for e in store.open("dep-g").ledger()]

    before = journal()
    with pytest.raises(BadRequest, match="starts at message 5"):
        run.engine.record_transcript("operator", TranscriptEntry(seq=5, at=1, messages=["{}"]))
    with pytest.raises(BadRequest, match="leaves a gap"):
        run.engine.record_transcript("operator", TranscriptEntry(seq=1, at=7, messages=["{}"]))
    with pytest.raises(UnknownTurn):
        run.engine.record_transcript("nobody", TranscriptEntry(seq=0, at=0, messages=["{}"]))
    assert journal() == before
    run.cancel()
    after_cancel = journal()
    run.engine.record_transcript("operator", TranscriptEntry(seq=1, at=1, messages=["{}"]))  # finished: kept no more
    assert journal() == after_cancel


async def test_an_empty_transcript_entry_at_zero_starts_the_conversation_over(store: Any, tmp_path: Path) -> None:
    from jr2ray.run import TranscriptEntry

    run = LocalRun(deploy, {"log_path": str(tmp_path / "deploy.log")}, run_id="dep-r", store=store)
    run.engine.record_transcript("operator", TranscriptEntry(seq=0, at=0, messages=["a", "b"]))
    run.engine.record_transcript("operator", TranscriptEntry(seq=2, at=0, attempt=1, messages=[]))  # a re-roll
    again = LocalRun(deploy, {"log_path": str(tmp_path / "deploy.log")}, run_id="dep-r", store=store)
    got = again.engine.transcript("operator")
    assert got.messages == [] and got.recorded == 2 and got.attempt == 1


async def test_a_cancelled_run_reads_the_same_after_a_rebuild(store: Any, tmp_path: Path) -> None:
    """A cancelled run is never started again, yet its status, read after its host let it go and a new activation
    loaded it, shows the same value and context as right after the cancel."""
    door = {"log_path": str(tmp_path / "deploy.log")}
    run = LocalRun(deploy, door, run_id="dep-c", store=store)
    await run.pick("operator", "note", {"text": "kept"}, delivery_id="n-1")
    ended = run.cancel().model_dump(mode="json")
    assert ended["status"] == "cancelled" and ended["context"]["notes"] == ["kept"]
    again = LocalRun(deploy, door, run_id="dep-c", store=store)
    reread = again.status().model_dump(mode="json")
    assert reread.pop("turns") == [] and ended.pop("turns")  # its Turns are in its history, not rebuilt
    assert reread == ended
