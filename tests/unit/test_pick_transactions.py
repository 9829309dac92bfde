"""How many journal transactions a pick costs, and what each holds: a pick the chart ignores (delivered, nothing
moved) is journaled with its receipt in one transaction, so no journal ever holds its admission without its
receipt (a restart would otherwise answer it as still waiting for Rest)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jr2ray.run import LocalRun, Store, UnknownTurn
from jr2ray.run.store.sqlite import journal_bytes
from workflows.notes import machine as notes

DOOR = {"changes": "fix: crash"}


def _new_entries(store: Store, run_id: str, after: int) -> list:  # noqa: ANN401 - LedgerEntry rows
    j = store.open(run_id)
    try:
        return [e for e in j.ledger() if e.seq > after]
    finally:
        j.close()


async def test_a_pick_that_moves_nothing_is_one_transaction_with_its_receipt(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = LocalRun(notes, DOOR, store=store)
    before = max(e.seq for e in _new_entries(store, run.id, -1))
    receipt = await run.pick("writer", "done", {"notes": "too soon"}, "d1")  # the guard wants a reply first
    assert receipt.delivered and not receipt.moved
    new = _new_entries(store, run.id, before)
    kinds = [(e.kind, e.data.get("kind")) for e in new]
    assert ("admission", None) in kinds and ("receipt", None) in kinds, kinds
    assert len({e.at for e in new}) == 1, "the admission and the receipt were written in two transactions"
    adm = next(e for e in new if e.kind == "admission")
    rec = next(e for e in new if e.kind == "receipt")
    assert adm.key == rec.key and adm.key.endswith("/d1") and rec.data["receipt"]["moved"] is False
    # the retry is answered from memory, the same receipt, and writes nothing
    path = store.path(run.id)
    journal = journal_bytes(path)
    assert await run.pick("writer", "done", {"notes": "too soon"}, "d1") == receipt
    assert journal_bytes(path) == journal


async def test_a_retry_after_a_restart_gets_the_receipt_of_the_pick_that_moved_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = LocalRun(notes, DOOR, store=store)
    first = await run.pick("writer", "done", {"notes": "too soon"}, "d1")
    assert run.engine.journal is not None
    run.engine.journal.close()  # the process is gone: nothing more is written by this life
    again = LocalRun(notes, DOOR, store=store, run_id=run.id)  # a new life, from the journal alone
    assert await again.pick("writer", "done", {"notes": "too soon"}, "d1") == first


def _rows(store: Store, run_id: str, table: str) -> int:
    j = store.open(run_id)
    try:
        return int(j._db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608 - a fixed name
    finally:
        j.close()


async def test_a_restore_that_changes_nothing_writes_nothing_and_the_next_step_is_written(tmp_path: Path) -> None:
    """A wake restores the run from its journal: its first step ends in the very snapshot the journal ends with,
    and used to be written again (one transaction and one snapshot row a wake, for nothing)."""
    store = Store(tmp_path)
    run = LocalRun(notes, DOOR, store=store)
    asking = asyncio.ensure_future(run.pick("writer", "ask", {"question": "Which change first?"}, "a1"))
    while "notes.writing.asking" not in [g.id for g in run.gates()]:  # the ask waits on this Gate
        await asyncio.sleep(0.01)
    assert run.engine.journal is not None
    run.engine.journal.close()  # the process is gone: nothing more is written by this life
    asking.cancel()
    await asyncio.gather(asking, return_exceptions=True)  # that life's pick ends here, before the next life starts
    snapshots, ledger = _rows(store, run.id, "snapshot"), _rows(store, run.id, "ledger")
    again = LocalRun(notes, DOOR, store=store, run_id=run.id)  # a wake, from the journal alone
    assert "notes.writing.asking" in [g.id for g in again.gates()]
    assert (_rows(store, run.id, "snapshot"), _rows(store, run.id, "ledger")) == (snapshots, ledger)
    again.send("notes.writing.asking", "reply", {"text": "the first one"}, "r1")
    assert _rows(store, run.id, "snapshot") == snapshots + 1  # what the reply changed is written


async def _finished_run(store: Store) -> tuple[LocalRun, object]:
    """A notes run taken to its end; returns it and the receipt of the pick that finished it (delivery id `d2`)."""
    run = LocalRun(notes, DOOR, store=store)
    asking = asyncio.ensure_future(run.pick("writer", "ask", {"question": "Which change first?"}, "a1"))
    while "notes.writing.asking" not in [g.id for g in run.gates()]:
        await asyncio.sleep(0.01)
    run.send("notes.writing.asking", "reply", {"text": "the first one"}, "r1")
    await asking
    done = await run.pick("writer", "done", {"notes": "# Notes"}, "d2")
    assert done.delivered and run.status().status == "done"
    return run, done


async def test_a_retry_to_a_finished_run_woken_again_gets_its_journaled_receipt(tmp_path: Path) -> None:
    """A pick sent again after its run finished and was woken from the journal: the finished run has no Turns
    left, yet the retry is answered with the receipt the journal holds, not refused as an unknown Turn, and writes
    nothing."""
    store = Store(tmp_path)
    run, done = await _finished_run(store)
    iid = next(iter(run.engine.turns))
    assert run.engine.journal is not None
    run.engine.journal.close()
    again = LocalRun(notes, DOOR, store=store, run_id=run.id)  # woken, finished, from the journal alone
    assert not again.engine.turns
    path = store.path(run.id)
    journal = journal_bytes(path)
    assert await again.pick("writer", "done", {"notes": "# Notes"}, "d2") == done  # by the Agent's slot
    assert await again.pick(iid, "done", {"notes": "# Notes"}, "d2") == done  # and by the Turn's id
    assert journal_bytes(path) == journal


async def test_a_woken_finished_run_answers_other_picks_as_it_did_while_it_held_the_turn(tmp_path: Path) -> None:
    """Only a retry of the very pick gets the journaled receipt. A new delivery id gets `turn_over` and other
    arguments on the same id `reused_id`, as the finished run answered while it still held the Turn; a slot that
    never had a Turn is an unknown Turn. Nothing is written."""
    store = Store(tmp_path)
    run, _ = await _finished_run(store)
    held = [await run.pick("writer", "done", {"notes": "# Notes"}, "d9"),
            await run.pick("writer", "done", {"notes": "other"}, "d2")]
    assert [r.refused for r in held] == ["turn_over", "reused_id"]
    assert run.engine.journal is not None
    run.engine.journal.close()
    again = LocalRun(notes, DOOR, store=store, run_id=run.id)
    path = store.path(run.id)
    journal = journal_bytes(path)
    woken = [await again.pick("writer", "done", {"notes": "# Notes"}, "d9"),
             await again.pick("writer", "done", {"notes": "other"}, "d2")]
    assert [(r.refused, r.delivered, r.turn_complete) for r in woken] == \
        [(r.refused, r.delivered, r.turn_complete) for r in held]
    with pytest.raises(UnknownTurn):
        await again.pick("reviewer", "done", {"notes": "# Notes"}, "d2")
    assert journal_bytes(path) == journal
