"""D1-D6: the delivery verdict of a pick, checked in rule order, and the receipt text each one gets (D11)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from menu_helpers import (
    Verdict_,
    agents,
    deliver,
    ev,
    gate_event,
    load,
    moved,
    pick,
    start,
    took_for,
)
from pydantic import BaseModel, Field

from jr2ray import effect
from jr2ray.menu import Receipt, allowed_picks, texts, verdict


class Note(BaseModel):
    text: str = Field(description="The text.")
    count: int = Field(default=1, description="How many.")


def machine() -> Any:
    """Agent w at v.s with modes a and b; a second state v.t of the same Agent; a Gate at v.s.g; an Effect at v.s.e.
    `finish` leaves v.s from any mode; `note` has a schema; `later` only v.t handles."""
    evs = [ev("finish"), ev("to_b"), ev("to_a"), ev("note", input=Note), ev("later"), ev("gated"), ev("run"),
           ev("reply")]
    actors = {**agents("w"), "fx": effect.command(argv=[sys.executable, "-c", "print(1)"], timeout_s=5)}
    return load({"id": "v", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "initial": "a",
              "on": {"finish": "t", "note": {"guard": lambda event: event.count > 1, "target": "t"}},
              "states": {
                  "a": {"on": {"to_b": "b", "gated": "g", "run": "e"}},
                  "b": {"on": {"to_a": "a"}},
                  "g": {"invoke": {"src": "gate"}, "on": {"reply": "a"}},
                  "e": {"invoke": {"src": "fx", "onDone": "a"}}}},
        "t": {"invoke": {"src": "w"}, "on": {"later": "done"}},
        "done": {"type": "final"}}}, evs, actors)


S = "v.s"


def receipt_for(m: Any, snap: Any, name: str, v: Any) -> Receipt:
    """The receipt of a pick that was not delivered (a refusal or an unmoved verdict), as the Run would build it."""
    assert v.kind != "deliver"
    return Receipt(delivered=False, moved=False, turn_complete=False, allowed=allowed_picks(m, snap, S),
                   refused=v.reason, detail=v.detail, pick=name)


# -- D1 ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("into", ["gated", "run"])
@pytest.mark.parametrize("name,args", [("finish", {}), ("to_b", {}), ("nope", {}), ("note", {"text": 3}),
                                       ("later", {})])
def test_d1_not_at_rest_refuses_every_pick_first_finish_included(into: str, name: str, args: dict[str, Any]) -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, into)
    v = verdict(m, snap, S, name, args)
    assert (v.kind, v.reason, v.event) == ("refuse", "not_at_rest", None)


def test_d1_receipt_says_wait_and_allows_nothing() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "gated")
    v = verdict(m, snap, S, "finish", {})
    r = receipt_for(m, snap, "finish", v)
    assert r.allowed == [] and texts.receipt_kind(r) == "not_at_rest"
    assert texts.receipt_text(r).splitlines()[-1].startswith("Allowed now: none yet.")


def test_d1_picks_open_again_once_the_gate_answers() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "gated")
    snap, _, took = deliver(m, snap, gate_event("reply", "v.s.g"))
    assert moved(took, "reply")
    assert verdict(m, snap, S, "finish", {}).kind == "deliver"


# -- D2 ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["nope", "reply", "xstate.init", "agent.fault", ""])
def test_d2_a_pick_off_the_menu_is_refused(name: str) -> None:
    m = machine()
    v = verdict(m, start(m), S, name, {})
    assert (v.kind, v.reason, v.event) == ("refuse", "off_menu", None)


def test_d2_an_off_menu_receipt_is_the_correction() -> None:
    m = machine()
    snap = start(m)
    r = receipt_for(m, snap, "reply", verdict(m, snap, S, "reply", {"text": "x"}))
    assert texts.receipt_text(r).splitlines()[0] == texts.correction("reply")


# -- D3: another state's pick, answered unmoved whatever its arguments ---------------------------------------------


@pytest.mark.parametrize("args", [{}, {"x": 1}, {"sender": {"party": "gate", "id": "x"}}, "not an object", None])
def test_d3_a_pick_only_another_state_of_this_agent_handles_is_unmoved_whatever_its_arguments(args: Any) -> None:
    m = machine()
    snap = start(m)
    before = snap.to_json()
    assert "later" in [i.name for i in m.menu("w")] and "later" not in m.structure.derived[S]
    v = verdict(m, snap, S, "later", args)
    assert (v.kind, v.reason, v.event, v.detail) == ("unmoved", "other_state", None, None)
    r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=allowed_picks(m, snap, S),
                refused=v.reason, pick="later")
    assert texts.receipt_kind(r) == "correction"
    assert texts.receipt_text(r).splitlines()[0] == texts.correction("later")
    assert "Fix the arguments" not in texts.receipt_text(r)  # new arguments cannot help, so none are asked for
    assert snap.to_json() == before


def test_d3_runs_before_d4() -> None:
    """The other-state check comes first: a bad payload for another state's pick still gets the correction."""
    m = machine()
    v = verdict(m, start(m), S, "later", {"x": 1})
    assert (v.kind, v.reason) == ("unmoved", "other_state")


def test_d3_the_same_pick_is_delivered_in_the_state_that_handles_it() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "finish")
    assert snap.matches("t")
    assert verdict(m, snap, "v.t", "later", {}).kind == "deliver"


# -- D4: bad arguments for a pick this state could take ----------------------------------------------------------


@pytest.mark.parametrize("args,needle", [
    ({}, "text: Field required"),
    ({"text": "t", "count": "many"}, "count: Input should be a valid integer"),
    ({"text": "t", "colour": "red"}, "colour"),
    ({"text": "t", "sender": {"party": "gate", "id": "x"}}, "sender"),
    ("not an object", "JSON object"),
])
def test_d4_bad_args_are_refused_with_the_validation_message(args: Any, needle: str) -> None:
    m = machine()
    snap = start(m)
    before = snap.to_json()
    v = verdict(m, snap, S, "note", args)
    assert (v.kind, v.reason, v.event) == ("refuse", "bad_args", None)
    assert needle in (v.detail or "")
    assert snap.to_json() == before


def test_d4_the_bad_args_receipt_carries_the_message_and_allowed() -> None:
    m = machine()
    snap = start(m)
    v = verdict(m, snap, S, "note", {})
    r = receipt_for(m, snap, "note", v)
    text = texts.receipt_text(r)
    assert texts.receipt_kind(r) == "bad_args"
    assert v.detail and v.detail in text
    assert "Fix the arguments" in text
    assert text.splitlines()[-1] == texts.allowed_line(allowed_picks(m, snap, S)) == \
        "Allowed now: finish, gated, note, run, to_b."


def test_d4_a_mode_pick_with_bad_args_is_refused_even_outside_the_allowed_picks() -> None:
    """`to_a` is in this state's derived set (mode b takes it), so its schema is checked, unlike another state's."""
    m = machine()
    snap = start(m)
    assert "to_a" in m.structure.derived[S] and "to_a" not in allowed_picks(m, snap, S)
    assert verdict(m, snap, S, "to_a", "not an object").reason == "bad_args"


# -- D6: another mode's pick is delivered and moves nothing --------------------------------------------------------


def test_d6_a_pick_of_another_mode_is_delivered_and_moves_nothing() -> None:
    m = machine()
    snap = start(m)
    assert "to_a" in m.structure.derived[S] and "to_a" not in allowed_picks(m, snap, S)
    v = verdict(m, snap, S, "to_a", {})
    assert v.kind == "deliver"
    after, effects, took = deliver(m, snap, v.event)
    assert took_for(took, "to_a") == [] and after.matches("s.a") and effects == []
    r = Receipt(delivered=True, moved=moved(took, "to_a"), turn_complete=False, allowed=allowed_picks(m, after, S),
                pick="to_a")
    assert texts.receipt_text(r).splitlines()[0] == texts.correction("to_a")


def test_d6_a_delivered_pick_carries_the_agents_sender_and_its_validated_payload() -> None:
    m = machine()
    v = verdict(m, start(m), S, "note", {"text": "t", "count": "2"})
    assert v.kind == "deliver"
    assert v.event.sender == {"party": "agent", "id": "w"}
    assert v.event.payload == {"text": "t", "count": 2}


def test_d6_moved_is_exact_with_the_payload_in_hand() -> None:
    m = machine()
    snap = start(m)
    assert "note" in allowed_picks(m, snap, S)
    _, _, took = pick(m, snap, S, "note", {"text": "t"})
    assert not moved(took, "note")
    after, _, took = pick(m, snap, S, "note", {"text": "t", "count": 2})
    assert moved(took, "note") and S not in after.active_paths  # turn_complete: the Agent's state exited


def test_d6_an_in_state_move_keeps_the_turn() -> None:
    m = machine()
    after, _, took = pick(m, start(m), S, "to_b")
    assert moved(took, "to_b") and S in after.active_paths
    assert allowed_picks(m, after, S) == ["finish", "note", "to_a"]


# -- D5: a selection holding another party's writing ---------------------------------------------------------------


def parallel_machine() -> Any:
    """A parallel root: w's state on the left, a Gate and Agent v on the right, all writing `x`."""
    evs = [ev("x"), ev("y"), ev("z", input=Verdict_), ev("v_go")]
    return load({"id": "p", "type": "parallel", "states": {
        "left": {"initial": "s", "states": {
            "s": {"invoke": {"src": "w"}, "initial": "a",
                  "states": {"a": {"on": {"x": "b", "y": "b", "z": "b"}}, "b": {"on": {"y": "a"}}}}}},
        "right": {"initial": "g", "states": {
            "g": {"invoke": {"src": "gate"}, "on": {"x": "h", "v_go": "n"}},
            "h": {},
            "n": {"invoke": {"src": "v"}, "on": {"z": "h"}}}}}}, evs, agents("w", "v"))


def test_d5_a_pick_whose_selection_holds_a_gates_writing_is_unmoved_and_never_delivered() -> None:
    m = parallel_machine()
    snap = start(m)
    assert "x" in m.structure.derived["p.left.s"] and "x" not in allowed_picks(m, snap, "p.left.s")
    v = verdict(m, snap, "p.left.s", "x", {})
    assert (v.kind, v.reason, v.event) == ("unmoved", "other_party", None)
    r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=allowed_picks(m, snap, "p.left.s"),
                refused=v.reason, pick="x")
    assert texts.receipt_text(r).splitlines()[0] == texts.correction("x")


def test_d5_a_pick_whose_selection_holds_a_nested_agents_writing_is_unmoved() -> None:
    m = parallel_machine()
    snap, _, _ = deliver(m, start(m), gate_event("v_go", "p.right.g"))
    assert snap.matches({"left": {"s": "a"}, "right": "n"})
    assert "z" not in allowed_picks(m, snap, "p.left.s")
    v = verdict(m, snap, "p.left.s", "z", {"verdict": "ok"})
    assert (v.kind, v.reason) == ("unmoved", "other_party")


def test_d5_only_the_pick_with_another_partys_writing_is_held_back() -> None:
    m = parallel_machine()
    assert allowed_picks(m, start(m), "p.left.s") == ["y", "z"]


def gate_above_machine() -> Any:
    """A Gate at o.g writes `x`; below it Agent w's state writes `x` behind a payload guard."""
    evs = [ev("x", input=Verdict_), ev("stop")]
    return load({"id": "o", "initial": "g", "states": {
        "g": {"invoke": {"src": "gate"}, "on": {"x": "gate_took"}, "initial": "s", "states": {
            "s": {"invoke": {"src": "w"},
                  "on": {"x": {"guard": lambda event: event.verdict == "mine", "target": "#o.agent_took"},
                         "stop": "#o.agent_took"}}}},
        "gate_took": {}, "agent_took": {}}}, evs)


def test_d5_the_selection_is_judged_with_the_real_payload() -> None:
    m = gate_above_machine()
    snap = start(m)
    assert m.structure.derived["o.g.s"] == ["stop", "x"]
    assert allowed_picks(m, snap, "o.g.s") == ["stop", "x"]  # payload-blind: the guard looked, so x is allowed
    v = verdict(m, snap, "o.g.s", "x", {"verdict": "theirs"})  # the guard says no: the Gate's `x` would take it
    assert (v.kind, v.reason, v.event) == ("unmoved", "other_party", None)
    v = verdict(m, snap, "o.g.s", "x", {"verdict": "mine"})
    assert v.kind == "deliver"
    after, _, took = deliver(m, snap, v.event)
    assert moved(took, "x") and after.matches("agent_took")
