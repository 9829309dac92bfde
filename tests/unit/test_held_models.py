"""Standings unpickled in a driver (every Ray answer is) share what equal ones hold: pydantic's set of given field
names, and interned short texts. Sharing never shows: an instance assigned to takes its own set first."""

from __future__ import annotations

import pickle
import tracemalloc

import pytest
from pydantic import BaseModel

from jr2ray.run.models import GateView, Held, RunStatus, Standing, TurnView, Waiting


def _standing(run_id: str) -> Standing:
    return Standing(
        status=RunStatus(id=run_id, workflow="notes", digest="fdab369547d6", status="active", version="b7" * 32,
                         value={"writing": "asking"}, context={"changes": f"change {run_id}"},
                         gates=[GateView(id="notes.writing.asking", state="notes.writing.asking", meta=None,
                                         accepts=[{"name": "reply", "schema": {"type": "object"}}],
                                         accepts_now=["reply"])],
                         turns=[TurnView(iid=f"{run_id}.t1", slot="writer", state="notes.writing", active=True,
                                         conversation=f"{run_id}.t1", outstanding="ask",
                                         allowed_now="Allowed now: none yet.", allowed=[])]),
        waiting=Waiting(gates=["notes.writing.asking"]), version=4, epoch=1)


def test_unpickled_standings_are_equal_to_what_was_sent_and_share_their_field_sets_and_texts() -> None:
    a, b = (pickle.loads(pickle.dumps(_standing(r))) for r in ("r1", "r2"))
    assert a == _standing("r1") and b == _standing("r2")
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    assert a.status.__pydantic_fields_set__ is b.status.__pydantic_fields_set__
    assert a.status.version is b.status.version and a.status.turns[0].allowed_now is b.status.turns[0].allowed_now
    assert a.status.gates[0].state is b.status.gates[0].state
    assert a.status.context is not b.status.context  # only texts are shared, never a mutable value


def test_an_assigned_standing_takes_its_own_field_set_and_the_others_do_not_see_it() -> None:
    a, b = (pickle.loads(pickle.dumps(Standing(status=_standing(r).status, waiting=Waiting()))) for r in ("r1", "r2"))
    assert "parked" not in b.model_fields_set
    a.parked = True
    assert "parked" in a.model_fields_set and "parked" not in b.model_fields_set
    c = pickle.loads(pickle.dumps(Standing(status=_standing("r3").status, waiting=Waiting())))
    assert "parked" not in c.model_fields_set  # the shared set was never written
    assert b.model_copy(update={"version": 9}).version == 9 and "parked" not in b.model_fields_set


def test_a_thousand_unpickled_standings_hold_less_than_they_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a driver holds per waiting run: measured against the same bytes unpickled the plain pydantic way."""
    blob = pickle.dumps(_standing("r1"))

    def held(load: object) -> float:
        tracemalloc.start()
        try:
            kept = [load() for _ in range(1000)]  # type: ignore[operator]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(kept) == 1000
        return size / 1000

    shared = held(lambda: pickle.loads(blob))
    monkeypatch.setattr(Held, "__setstate__", BaseModel.__setstate__)
    plain = held(lambda: pickle.loads(blob))
    assert shared < 0.75 * plain, (shared, plain)


def test_a_shared_set_changed_in_place_is_not_handed_out_again() -> None:
    """`model_fields_set` is the live set: a caller that adds to it changes it for every standing sharing it, so a
    later standing gets a fresh shared set with what was sent, and an assignment still stays with its instance."""
    blob = pickle.dumps(Standing(status=_standing("r1").status, waiting=Waiting()))
    a = pickle.loads(blob)
    a.model_fields_set.add("epoch")  # in place: not through an assignment
    b, c = pickle.loads(blob), pickle.loads(blob)
    assert "epoch" not in b.model_fields_set and b.__pydantic_fields_set__ is c.__pydantic_fields_set__
    b.parked = True
    assert "parked" not in c.model_fields_set
