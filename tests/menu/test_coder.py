"""workflows/coder.py: the cross-state continue case of a fixed Menu (M2, H7).

One coder conversation (`continue: True`) spans `implement` and `fix`. Its Menu is the union of both derived sets
and stays byte-identical across the two states; `dispute` is on it everywhere, allowed only in `fix`.
"""

from __future__ import annotations

from typing import Any

import pytest
from menu_helpers import deliver, gate_event, moved, pick, took_for

from jr2ray.authoring import AgentSpec, AnswerEffect, CommandEffect
from jr2ray.chart import Event, StartChild, initial_transition
from jr2ray.menu import (
    Receipt,
    allowed_picks,
    gate_accepts,
    gate_accepts_now,
    menu_items,
    texts,
    tools_bytes,
    verdict,
)
from workflows.coder import machine as coder

IMPLEMENT, FIX, CHECKER = "coder.implement", "coder.fix", "checker"
TEST_OUTPUT = {"exit_code": 0, "stdout": "tests ran\n", "stderr": ""}


def fresh() -> tuple[Any, list[Any]]:
    return initial_transition(coder.chart, coder.validate_input({"task": "Add a --verbose flag."}), now_ms=0)


def to_review(snap: Any, state: str = IMPLEMENT) -> Any:
    snap, _, took = pick(coder, snap, state, "finish", {"summary": "Added the flag."})
    assert moved(took, "finish") and snap.matches("review")
    return snap


def to_fix(snap: Any, notes: str = "Document the flag.") -> tuple[Any, list[Any]]:
    snap, effects, took = deliver(coder, snap, gate_event("request_changes", CHECKER, {"notes": notes}))
    assert moved(took, "request_changes") and snap.matches("fix.working")
    return snap, effects


def in_fix() -> Any:
    return to_fix(to_review(fresh()[0]))[0]


def menu_bytes() -> dict[str, bytes]:
    return {d: tools_bytes(menu_items(coder, "coder"), d) for d in ("openai", "anthropic")}


# -- Shape ---------------------------------------------------------------------------------------------------------


def test_the_coder_workflow_loads_clean() -> None:
    assert coder.id == "coder" and coder.warnings == []
    spec = coder.actors["coder"]
    assert isinstance(spec, AgentSpec) and spec.workspace == "write" and spec.masking is True
    assert isinstance(coder.actors["tests"], CommandEffect) and coder.actors["tests"].timeout_s == 30


def test_seats_of_the_coder_workflow() -> None:
    assert coder.seats_text().splitlines()[1:] == [
        "  coder.implement agent:coder: [finish, run_tests]",
        "  coder.review gate:checker: [approve, request_changes]",
        "  coder.fix agent:coder: [dispute, finish, run_tests]",
    ]


def test_the_coders_menu_is_the_union_of_both_states() -> None:
    assert [i.name for i in menu_items(coder, "coder")] == ["dispute", "finish", "run_tests"]
    assert coder.structure.agent_states["coder"] == [IMPLEMENT, FIX]


def test_both_turns_continue_one_conversation() -> None:
    snap, effects = fresh()
    [start] = [e for e in effects if isinstance(e, StartChild) and e.src == "coder"]
    assert start.input["continue"] is True and "Add a --verbose flag." in start.input["prompt"]
    _, effects = to_fix(to_review(snap), "Document the flag in the README.")
    [start] = [e for e in effects if isinstance(e, StartChild) and e.src == "coder"]
    assert start.state == FIX and start.input["continue"] is True
    assert "Document the flag in the README." in start.input["prompt"]
    assert set(start.input) <= {"prompt", "continue", "model", "thinking", "cwd"}


# -- The Menu is identical in implement and fix ----------------------------------------------------------------------


def test_the_menu_is_byte_identical_in_implement_and_fix_while_the_allowed_picks_differ() -> None:
    want = menu_bytes()
    snap, _ = fresh()
    assert allowed_picks(coder, snap, IMPLEMENT) == ["finish", "run_tests"]
    assert menu_bytes() == want
    snap = to_fix(to_review(snap))[0]
    assert allowed_picks(coder, snap, FIX) == ["dispute", "finish", "run_tests"]
    assert menu_bytes() == want
    # The menu layer alone knows no model prefix (providers declare theirs from the harness), so name the format.
    assert coder.tools("coder", "openai") == coder.tools("coder", "openai")


# -- dispute: on the Menu in implement, never allowed there ---------------------------------------------------------


def test_dispute_is_on_the_menu_but_not_allowed_in_implement() -> None:
    snap, _ = fresh()
    assert "dispute" in [i.name for i in menu_items(coder, "coder")]
    assert "dispute" not in allowed_picks(coder, snap, IMPLEMENT)


@pytest.mark.parametrize("reason", ["The notes are wrong.", "Another reason entirely."])
def test_dispute_in_implement_is_unmoved_other_state_and_never_delivered(reason: str) -> None:
    snap, _ = fresh()
    v = verdict(coder, snap, IMPLEMENT, "dispute", {"reason": reason})
    assert (v.kind, v.reason, v.event) == ("unmoved", "other_state", None)
    r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=allowed_picks(coder, snap, IMPLEMENT),
                refused=v.reason, pick="dispute")
    text = texts.receipt_text(r)
    assert text.splitlines()[0] == texts.correction("dispute")
    assert text.splitlines()[-1] == "Allowed now: finish, run_tests."


@pytest.mark.parametrize("args", [{}, {"reason": 3}, {"reason": "x", "sender": {"party": "gate", "id": "checker"}},
                                  "not an object"])
def test_d3_dispute_in_implement_is_unmoved_whatever_its_arguments(args: Any) -> None:
    """Bad arguments do not turn the correction into "fix the arguments": no arguments make `implement` take it."""
    snap, _ = fresh()
    before = snap.to_json()
    v = verdict(coder, snap, IMPLEMENT, "dispute", args)
    assert (v.kind, v.reason, v.event, v.detail) == ("unmoved", "other_state", None, None)
    r = Receipt(delivered=False, moved=False, turn_complete=False, allowed=allowed_picks(coder, snap, IMPLEMENT),
                refused=v.reason, pick="dispute")
    assert texts.receipt_text(r).splitlines() == [texts.correction("dispute"), "Allowed now: finish, run_tests."]
    assert snap.to_json() == before


def test_dispute_is_allowed_in_fix_and_ends_the_turn() -> None:
    snap = in_fix()
    assert "dispute" in allowed_picks(coder, snap, FIX)
    after, _, took = pick(coder, snap, FIX, "dispute", {"reason": "The flag is documented already."})
    assert moved(took, "dispute") and after.matches("review")
    assert FIX not in after.active_paths  # turn_complete
    assert after.context["dispute"] == "The flag is documented already."
    assert gate_accepts_now(coder, after, CHECKER) == ["approve", "request_changes"]


# -- run_tests: an Effect child, answered at Rest ------------------------------------------------------------------


@pytest.mark.parametrize("state", [IMPLEMENT, FIX])
def test_run_tests_starts_the_effect_and_holds_every_pick_until_it_is_done(state: str) -> None:
    snap = fresh()[0] if state == IMPLEMENT else in_fix()
    snap, effects, took = pick(coder, snap, state, "run_tests")
    assert moved(took, "run_tests") and snap.matches(f"{state.split('.')[1]}.testing")
    [start] = [e for e in effects if isinstance(e, StartChild)]
    assert (start.src, start.state) == ("tests", f"{state}.testing")
    assert allowed_picks(coder, snap, state) == []
    assert verdict(coder, snap, state, "finish", {"summary": "done"}).reason == "not_at_rest"
    snap, effects, took = deliver(coder, snap, Event(f"xstate.done.actor.{state}.testing", {"output": TEST_OUTPUT}))
    assert snap.matches(f"{state.split('.')[1]}.working")
    answers = [e.text for e in effects if isinstance(e, AnswerEffect)]
    assert len(answers) == 1 and "tests ran" in answers[0] and "exit code 0" in answers[0]
    assert snap.context["test_output"] == TEST_OUTPUT
    assert "finish" in allowed_picks(coder, snap, state)


def test_a_tests_effect_error_is_answered_and_the_coder_can_go_on() -> None:
    snap, _, _ = pick(coder, fresh()[0], IMPLEMENT, "run_tests")
    snap, effects, _ = deliver(coder, snap, Event("xstate.error.actor.coder.implement.testing", {"error": "timeout"}))
    assert snap.status == "active" and snap.matches("implement.working")
    assert [e.text for e in effects if isinstance(e, AnswerEffect)] == ["The tests could not run: timeout"]


# -- The checker's Gate ----------------------------------------------------------------------------------------------


def test_the_checker_gate_accepts_approve_and_request_changes() -> None:
    assert [(a.name, sorted(a.schema_["properties"])) for a in gate_accepts(coder, CHECKER)] == [
        ("approve", ["comment"]), ("request_changes", ["notes"])]
    assert gate_accepts_now(coder, fresh()[0], CHECKER) == []
    assert gate_accepts_now(coder, to_review(fresh()[0]), CHECKER) == ["approve", "request_changes"]


def test_the_checkers_events_are_on_no_coder_menu() -> None:
    snap, _ = fresh()
    for name in ("approve", "request_changes"):
        assert verdict(coder, snap, IMPLEMENT, name, {"notes": "x"}).reason == "off_menu"


def test_a_full_round_implement_review_fix_review_merged() -> None:
    snap = in_fix()
    assert snap.context["notes"] == "Document the flag." and snap.context["rounds"] == 1
    snap = to_review(snap, FIX)
    snap, _, took = deliver(coder, snap, gate_event("approve", CHECKER, {}))
    assert took_for(took, "approve") and snap.status == "done"
    assert snap.output == {"summary": "Added the flag.", "rounds": 1}
