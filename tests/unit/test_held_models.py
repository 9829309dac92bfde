"""Standings a driver holds, unpickled (every Ray answer is) or validated (a parked run's, read from the store), share
what equal ones hold: pydantic's set of given field names, interned short texts, and a Gate's events with their
schemas. Sharing never shows: an instance assigned to takes its own set first."""

from __future__ import annotations

import json
import pickle
import tracemalloc
from typing import Any

import pytest
from pydantic import BaseModel

from jr2ray.run import models
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


# How a notes run parked at its Gate stood, as the store kept it (taken from a run on this code).
_PARKED = {
    "status": {"id": "", "workflow": "notes", "digest": "fdab369547d6", "status": "active", "version": "b7" * 32,
               "value": {"writing": "asking"},
               "context": {"changes": "change 0", "replies": 0, "question": "Which change first?"},
               "output": None, "error": None,
               "gates": [{"id": "notes.writing.asking", "state": "notes.writing.asking",
                          "meta": {"question": "Which change first?"},
                          "accepts": [{"name": "reply", "description": "Answer the writer's question.",
                                       "schema": {"properties": {"text": {"description": "The answer, in prose.",
                                                                          "title": "Text", "type": "string"}},
                                                  "required": ["text"], "title": "ReplyInput", "type": "object"}}],
                          "accepts_now": ["reply"]}],
               "turns": [{"iid": "", "slot": "writer", "state": "notes.writing", "active": True, "conversation": "",
                          "outstanding": "ask",
                          "allowed_now": "Allowed now: none yet. Stop for now; a later message will tell you when a "
                                         "pick opens.",
                          "allowed": [], "unread_notices": False}]},
    "waiting": {"gates": ["notes.writing.asking"], "turns": {}, "timer_due": None},
    "version": 4, "parked": False, "epoch": 1}


def _stored(run_id: str) -> dict[str, Any]:
    """A standing as the store keeps it for a parked run (JSON), read back."""
    st = json.loads(json.dumps(_PARKED))
    st["status"]["id"] = run_id
    st["status"]["turns"][0]["iid"] = st["status"]["turns"][0]["conversation"] = f"{run_id}.t1"
    return dict(st)


def test_standings_validated_from_the_store_share_sets_texts_and_a_gates_events() -> None:
    a, b = (Standing.model_validate(_stored(r)) for r in ("r1", "r2"))
    assert a.model_dump(mode="json") == _stored("r1") and b.status.id == "r2"
    assert a.status.__pydantic_fields_set__ is b.status.__pydantic_fields_set__
    assert a.status.version is b.status.version and a.status.turns[0].slot is b.status.turns[0].slot
    assert a.status.gates[0].accepts is b.status.gates[0].accepts  # one a Gate of a workflow version
    assert all(m.__pydantic_private__ is None for m in (a, a.status, a.status.gates[0], a.status.turns[0]))
    assert a.status.context is not b.status.context and a.status.gates[0].meta is not b.status.gates[0].meta
    changed = _stored("r3")
    changed["status"]["gates"][0]["accepts"][0]["schema"]["required"] = []
    c = Standing.model_validate(changed)
    assert c.status.gates[0].accepts is not a.status.gates[0].accepts  # other content, other value
    assert c.status.gates[0].accepts[0]["schema"]["required"] == []
    assert a.status.gates[0].accepts[0]["schema"]["required"] == ["text"]
    reordered = _stored("r4")
    schema = reordered["status"]["gates"][0]["accepts"][0]["schema"]
    reordered["status"]["gates"][0]["accepts"][0]["schema"] = dict(reversed(list(schema.items())))
    d = Standing.model_validate(reordered)  # the same schema, its keys in another order: kept in its own order
    assert d.status.gates[0].accepts is not a.status.gates[0].accepts
    assert list(d.status.gates[0].accepts[0]["schema"]) == list(reversed(list(schema)))


def test_a_made_gate_view_that_is_assigned_to_takes_its_own_set() -> None:
    a, b = (GateView(id="g", state="s", accepts=[], accepts_now=[]) for _ in range(2))
    assert a.__pydantic_fields_set__ is b.__pydantic_fields_set__
    a.meta = {"question": "which?"}
    assert "meta" in a.model_fields_set and "meta" not in b.model_fields_set


def test_a_value_that_is_not_json_or_past_the_tables_bound_is_kept_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    odd = [{"name": "reply", "schema": {"default": object()}}]
    assert models._by_content(odd) is odd
    monkeypatch.setattr(models, "_BY_CONTENT", {})
    monkeypatch.setattr(models, "_BY_CONTENT_UP_TO", 1)
    first, second = [{"name": "a"}], [{"name": "b"}]
    assert models._by_content(first) is first and models._by_content([{"name": "a"}]) is first
    assert models._by_content(second) is second and models._by_content([{"name": "b"}]) is not second
    assert len(models._BY_CONTENT) == 1


def test_a_thousand_standings_read_from_the_store_hold_less_than_they_did(monkeypatch: pytest.MonkeyPatch) -> None:
    """A parked run's standing, validated from the store's JSON, against the same JSON validated the plain pydantic
    way: 3.6 KB against 9.2 KB a standing here, measured."""
    text = json.dumps(_stored("r1"))

    def held() -> float:
        tracemalloc.start()
        try:
            kept = [Standing.model_validate(json.loads(text)) for _ in range(1000)]
            size = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(kept) == 1000
        return size / 1000

    shared = held()
    monkeypatch.setattr(models, "_shared_set", lambda given: given)  # each keeps pydantic's own set
    monkeypatch.setattr(Held, "_share_values", classmethod(lambda cls, values: None))
    plain = held()
    assert shared < 0.6 * plain, (shared, plain)
