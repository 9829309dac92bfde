"""A send to a Gate that is not open says why, in one line, and writes nothing: which Gates are open now when the
run is waiting, or what the run has become when it ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from jr2ray.run import LocalRun, Store
from jr2ray.run.errors import UnknownGate
from jr2ray.run.store.sqlite import journal_bytes
from workflows.notes import machine as notes

GATE = "notes.writing.asking"


async def test_a_send_to_a_closed_gate_of_a_waiting_run_names_the_gates_open_now(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = LocalRun(notes, {"changes": "fix: crash"}, store=store)
    before = journal_bytes(store.path(run.id))
    with pytest.raises(UnknownGate) as got:
        run.send(GATE, "reply", {"text": "nobody asked"}, "r1")
    assert str(got.value) == f"no open Gate {GATE!r} in run {run.id} (open now: none)"
    assert journal_bytes(store.path(run.id)) == before


async def test_a_send_to_an_ended_run_says_what_it_became(tmp_path: Path) -> None:
    store = Store(tmp_path)
    run = LocalRun(notes, {"changes": "fix: crash"}, store=store)
    run.cancel()
    before = journal_bytes(store.path(run.id))
    with pytest.raises(UnknownGate) as got:
        run.send(GATE, "reply", {"text": "too late"}, "r2")
    assert str(got.value) == f"no open Gate {GATE!r} in run {run.id}: the run is cancelled"
    assert journal_bytes(store.path(run.id)) == before
