"""The worked notes example of docs/design.md, checked line by line against workflows/notes.py."""

from __future__ import annotations

from typing import Any

import pytest
from menu_helpers import deliver, gate_event, moved, pick, took_for

from jr2ray.chart import Snapshot, initial_transition
from jr2ray.menu import (
    Receipt,
    allowed_picks,
    gate_accepts_now,
    menu_items,
    seats,
    seats_text,
    texts,
    tools_bytes,
    verdict,
)
from workflows.notes import machine as notes

WRITING = "notes.writing"
ASKING = "notes.writing.asking"

ADR_CORRECTION = ("done is not allowed in the workflow's current state, whatever its arguments. Your turn is not "
                  "over. Do not repeat this call — pick one of the allowed tools.")


def fresh() -> Snapshot:
    snap, _ = initial_transition(notes.chart, notes.validate_input({"changes": "Fixed a crash.\nAdded a flag."}),
                                 now_ms=0)
    return snap


def ask(snap: Snapshot, question: str = "Is the flag public?") -> Snapshot:
    snap, _, _ = pick(notes, snap, WRITING, "ask", {"question": question})
    return snap


def reply(snap: Snapshot, text: str = "Yes.") -> tuple[Snapshot, list[Any]]:
    snap, effects, took = deliver(notes, snap, gate_event("reply", ASKING, {"text": text}))
    assert moved(took, "reply")
    return snap, effects


def after_one_reply() -> Snapshot:
    snap, _ = reply(ask(fresh()))
    return snap


# -- The Menu and the seats ----------------------------------------------------------------------------------------


def test_the_writers_menu_is_ask_and_done() -> None:
    assert [i.name for i in menu_items(notes, "writer")] == ["ask", "done"]


def test_each_menu_tool_carries_its_events_description_and_schema() -> None:
    items = {i.name: i for i in menu_items(notes, "writer")}
    assert items["ask"].description == ("Ask the editor one question. The editor's reply is the answer to this "
                                        "call.")
    assert items["done"].description == "Call this once, with the finished release notes. Then stop."
    assert items["ask"].parameters["properties"]["question"]["description"] == "One question for the editor."
    assert items["ask"].parameters["required"] == ["question"]
    assert items["done"].parameters["properties"]["notes"]["type"] == "string"


def test_reply_belongs_to_the_gate_and_is_on_no_agent_menu() -> None:
    for slot in notes.agent_slots:
        assert "reply" not in [i.name for i in menu_items(notes, slot)]
    assert notes.structure.derived[ASKING] == ["reply"]


def test_m3_seats_text_has_one_line_per_party_state() -> None:
    lines = seats_text(notes).splitlines()
    assert lines[0].startswith('seats: workflow "notes" — who may send what, per state')
    assert lines[1:] == ["  notes.writing agent:writer: [ask, done]",
                         "  notes.writing.asking gate: [reply]"]
    assert notes.seats_text() == seats_text(notes)


def test_seats_name_each_party_and_its_events() -> None:
    got = [(s.state, s.party, s.id, s.events) for s in seats(notes)]
    assert got == [(WRITING, "agent", "writer", ["ask", "done"]), (ASKING, "gate", ASKING, ["reply"])]


# -- The Allowed-picks table -----------------------------------------------------------------------------------------


def test_allowed_picks_table_drafting_before_a_reply_is_ask() -> None:
    snap = fresh()
    assert snap.matches("writing.drafting")
    assert allowed_picks(notes, snap, WRITING) == ["ask"]


def test_allowed_picks_table_asking_is_none() -> None:
    snap = ask(fresh())
    assert snap.matches("writing.asking")
    assert allowed_picks(notes, snap, WRITING) == []


def test_allowed_picks_table_drafting_after_one_reply_is_ask_and_done() -> None:
    snap = after_one_reply()
    assert snap.matches("writing.drafting") and snap.context["replies"] == 1
    assert allowed_picks(notes, snap, WRITING) == ["ask", "done"]


def test_the_gate_accepts_reply_now_only_while_asking() -> None:
    assert gate_accepts_now(notes, fresh(), ASKING) == []
    assert gate_accepts_now(notes, ask(fresh()), ASKING) == ["reply"]


def test_the_menu_is_byte_identical_across_every_step_of_a_run() -> None:
    """M2, M4: the Allowed picks follow the mode and the guards; the tools block never changes."""
    want = {d: tools_bytes(menu_items(notes, "writer"), d) for d in ("openai", "anthropic")}
    snap = fresh()
    seen_allowed = []
    steps = [lambda s: s, ask, lambda s: reply(s)[0], ask, lambda s: reply(s, "No.")[0]]
    for step in steps:
        snap = step(snap)
        seen_allowed.append(tuple(allowed_picks(notes, snap, WRITING)))
        for d, b in want.items():
            assert tools_bytes(menu_items(notes, "writer"), d) == b
            assert tools_bytes(notes.menu("writer"), d) == b
    assert len(set(seen_allowed)) == 3  # the Allowed picks did change: ask / none / ask, done


# -- done before a reply: on the Menu, outside the Allowed picks ---------------------------------------------------


def test_done_before_a_reply_is_delivered_and_moves_nothing() -> None:
    snap = fresh()
    v = verdict(notes, snap, WRITING, "done", {"notes": "- Fixed a crash."})
    assert v.kind == "deliver" and v.event.sender == {"party": "agent", "id": "writer"}
    after, effects, took = deliver(notes, snap, v.event)
    assert took_for(took, "done") == []
    assert not moved(took, "done")
    assert after.matches("writing.drafting") and effects == []
    assert "notes" not in after.context


def test_done_before_a_reply_gets_the_correction_text() -> None:
    snap = fresh()
    v = verdict(notes, snap, WRITING, "done", {"notes": "- Fixed a crash."})
    after, _, took = deliver(notes, snap, v.event)
    allowed = allowed_picks(notes, after, WRITING)
    assert "done" not in allowed
    receipt = Receipt(delivered=True, moved=moved(took, "done"), turn_complete=False, allowed=allowed, pick="done")
    assert texts.receipt_kind(receipt) == "correction"
    text = texts.receipt_text(receipt)
    assert text.splitlines()[0] == ADR_CORRECTION == texts.correction("done")
    assert text.splitlines()[-1] == "Allowed now: ask."


def test_done_after_a_reply_ends_the_turn() -> None:
    snap = after_one_reply()
    after, _, took = pick(notes, snap, WRITING, "done", {"notes": "- Fixed a crash."})
    assert moved(took, "done")
    assert WRITING not in after.active_paths  # the Agent's state exited: the Turn is complete
    assert after.status == "done" and after.output == {"notes": "- Fixed a crash."}


def test_the_reply_route_answers_the_ask_pick() -> None:
    from jr2ray.authoring import AnswerEffect

    _, effects = reply(ask(fresh()), "Yes, it is public.")
    answers = [e for e in effects if isinstance(e, AnswerEffect)]
    assert [a.text for a in answers] == ["The editor replied: Yes, it is public."]


@pytest.mark.parametrize("name,args", [("ask", {"question": "again?"}), ("done", {"notes": "n"})])
def test_every_writer_pick_is_refused_while_the_gate_is_open(name: str, args: dict[str, Any]) -> None:
    snap = reply(ask(fresh()))[0]
    snap = ask(snap)  # replies == 1, so done's guard would pass: still refused, not at Rest
    v = verdict(notes, snap, WRITING, name, args)
    assert (v.kind, v.reason, v.event) == ("refuse", "not_at_rest", None)
