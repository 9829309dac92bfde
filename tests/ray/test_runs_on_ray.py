"""Runs as Ray actors: the notes workflow through the client, and every bad input refused with nothing changed."""

from __future__ import annotations

import time

import pytest

from jr2ray.run import BadRequest, Conflict, UnknownGate, UnknownRun
from jr2ray.run.store import Store

ENV = {"JR2RAY_NOTES_DRIVER": "external", "JR2RAY_DEPLOY_DRIVER": "external"}

pytestmark = pytest.mark.ray


def _journal_counts(client, run_id):  # noqa: ANN001
    j = client.store.open(run_id)
    try:
        return j.counts(), j.latest_snapshot()
    finally:
        j.close()


def test_notes_runs_to_published_through_the_client(client) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "fix: crash on empty input\nfeat: dark mode"}, env=ENV)
    assert run.presence() == "live"  # hosted by a pooled actor from the start on (virtual runs are the default)
    assert run.surface("writer").allowed == ["ask"]
    early = run.pick("writer", "done", {"notes": "too soon"})
    assert early.delivered and not early.moved and early.allowed == ["ask"]
    ref = run.pick_async("writer", "ask", {"question": "Which change matters most?"})
    deadline = time.time() + 10
    while not run.gates() and time.time() < deadline:
        time.sleep(0.05)
    (gate,) = run.gates()
    assert gate.id == "notes.writing.asking" and gate.accepts_now == ["reply"]
    assert gate.meta == {"question": "Which change matters most?"}
    assert run.surface("writer").allowed == []
    run.send(gate.id, "reply", {"text": "The crash fix."})
    receipt = ref.result(10)
    assert receipt.moved and not receipt.turn_complete
    assert receipt.answer == "The editor replied: The crash fix."
    assert receipt.allowed == ["ask", "done"]
    final = run.pick("writer", "done", {"notes": "# Notes\n- crash fix"})
    assert final.turn_complete
    status = run.wait(10)
    assert status.status == "done" and status.value == "published"
    assert status.output == {"notes": "# Notes\n- crash fix"}
    assert any(r["id"] == run.id and r["status"] == "done" for r in client.runs())


def test_bad_input_is_refused_and_changes_nothing(client) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "a"}, env=ENV)
    before = _journal_counts(client, run.id)

    off = run.pick("writer", "publish", {"notes": "x"})
    assert off.refused == "off_menu" and not off.delivered
    bad = run.pick("writer", "ask", {"question": 42})
    assert bad.refused == "bad_args" and "question" in (bad.detail or "")
    with pytest.raises(UnknownGate):
        run.send("notes.writing.asking", "reply", {"text": "no gate is open"})
    with pytest.raises(UnknownRun):
        client.get("zzzz-no-such-run")
    assert _journal_counts(client, run.id)[1] == before[1]

    ref = run.pick_async("writer", "ask", {"question": "q?"})
    deadline = time.time() + 10
    while not run.gates() and time.time() < deadline:
        time.sleep(0.05)
    mid = _journal_counts(client, run.id)
    second = run.pick("writer", "ask", {"question": "another"})
    assert second.refused == "not_at_rest" and not second.delivered
    finishing = run.pick("writer", "done", {"notes": "x"})
    assert finishing.refused == "not_at_rest"
    with pytest.raises(Conflict) as conflict:
        run.send("notes.writing.asking", "ask", {"question": "a gate cannot ask"})
    assert conflict.value.accepts_now == ["reply"]
    with pytest.raises(BadRequest):
        run.send("notes.writing.asking", "reply", {"text": 1})
    with pytest.raises(BadRequest):
        run.send("notes.writing.asking", "reply", {"text": "hi", "sender": {"party": "agent", "id": "writer"}})
    after = _journal_counts(client, run.id)
    assert after[1] == mid[1], "a refusal wrote a snapshot"
    assert after[0].get("admission") == mid[0].get("admission")
    run.send("notes.writing.asking", "reply", {"text": "ok"})
    assert ref.result(10).moved
    run.cancel()
    assert run.status().status == "cancelled"


def test_input_is_validated_against_the_door(client) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match="changes"):
        client.start("notes", {"chnages": "typo"}, env=ENV)


def test_store_lists_one_journal_per_run(client, ray_home) -> None:  # noqa: ANN001
    run = client.start("notes", {"changes": "a"}, env=ENV)
    assert run.id in Store(ray_home / "runs").run_ids()
    run.cancel()
