"""M3 (seats: who may send what, per state, and `audience`) and M8 (a Gate's accepts and accepts_now)."""

from __future__ import annotations

from typing import Any

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
)

from jr2ray.menu import (
    allowed_picks,
    gate_accepts,
    gate_accepts_now,
    menu_items,
    seats_text,
    verdict,
)


def audience_machine(done_audience: Any = None, cancel_audience: Any = None) -> Any:
    """Agent w at a.w asks a Gate below it; `done` sits at w's state, `cancel` at the root, `reply` at the Gate."""
    evs = [ev("ask"), ev("done", audience=done_audience), ev("reply"), ev("cancel", audience=cancel_audience)]
    return load({"id": "a", "initial": "w", "on": {"cancel": ".cancelled"}, "states": {
        "w": {"invoke": {"src": "w"}, "initial": "d", "on": {"done": "finished"}, "states": {
            "d": {"on": {"ask": "q"}},
            "q": {"invoke": {"src": "gate"}, "on": {"reply": "d"}}}},
        "finished": {"type": "final"}, "cancelled": {"type": "final"}}}, evs)


def test_m3_a_key_belongs_to_the_party_its_state_or_the_nearest_above_invokes() -> None:
    m = audience_machine()
    assert m.structure.derived["a.w"] == ["ask", "cancel", "done"]
    assert m.structure.derived["a.w.q"] == ["cancel", "reply"]


def test_m3_an_unowned_root_event_belongs_to_both_parties() -> None:
    m = audience_machine()
    snap = start(m)
    assert "cancel" in allowed_picks(m, snap, "a.w")
    snap, _, _ = pick(m, snap, "a.w", "ask")
    assert gate_accepts_now(m, snap, "a.w.q") == ["cancel", "reply"]
    after, _, took = deliver(m, snap, gate_event("cancel", "a.w.q"))
    assert moved(took, "cancel") and after.matches("cancelled")


def test_m3_audience_any_adds_the_other_party() -> None:
    m = audience_machine(done_audience="any")
    assert m.structure.derived["a.w"] == ["ask", "cancel", "done"]  # still w's
    assert m.structure.derived["a.w.q"] == ["cancel", "done", "reply"]  # and now the Gate's too
    snap, _, _ = pick(m, start(m), "a.w", "ask")
    assert "done" in gate_accepts_now(m, snap, "a.w.q")
    after, _, took = deliver(m, snap, gate_event("done", "a.w.q"))
    assert moved(took, "done") and after.matches("finished")


def test_m3_audience_gate_on_an_agents_key_adds_the_gate() -> None:
    m = audience_machine(done_audience="gate")
    assert "done" in m.structure.derived["a.w"] and "done" in m.structure.derived["a.w.q"]


def test_m3_audience_keeps_a_root_event_from_the_agent() -> None:
    m = audience_machine(cancel_audience="gate")
    assert "cancel" not in [i.name for i in menu_items(m, "w")]
    assert "cancel" in m.structure.derived["a.w.q"]
    assert verdict(m, start(m), "a.w", "cancel", {}).reason == "off_menu"


def test_m3_audience_keeps_a_root_event_from_the_gate() -> None:
    m = audience_machine(cancel_audience="agent")
    assert "cancel" in [i.name for i in menu_items(m, "w")]
    assert "cancel" not in m.structure.derived["a.w.q"]
    assert [g.name for g in gate_accepts(m, "a.w.q")] == ["reply"]


def test_m3_audience_agent_on_a_gates_key_gives_it_to_the_agent_below() -> None:
    evs = [ev("ok", audience="agent"), ev("stop"), ev("go")]
    m = load({"id": "b", "initial": "g", "states": {
        "g": {"invoke": {"src": "gate"}, "on": {"ok": "done", "stop": "done"}, "initial": "s",
              "states": {"s": {"invoke": {"src": "w"}, "on": {"go": "s"}}}},
        "done": {"type": "final"}}}, evs)
    assert m.structure.derived["b.g.s"] == ["go", "ok"]  # `stop` stays the Gate's
    assert m.structure.derived["b.g"] == ["ok", "stop"]


def test_m3_audience_never_gives_one_agents_key_to_another_agent() -> None:
    evs = [ev("mine", audience="agent"), ev("theirs"), ev("start")]
    m = load({"id": "c", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"mine": "done", "start": ".n"}, "initial": "i", "states": {
            "i": {}, "n": {"invoke": {"src": "v"}, "on": {"theirs": "i"}}}},
        "done": {"type": "final"}}}, evs, agents("w", "v"))
    assert m.structure.derived["c.s.n"] == ["theirs"]
    assert m.structure.derived["c.s"] == ["mine", "start"]


def test_m3_seats_text_labels_a_gate_by_its_id() -> None:
    evs = [ev("go"), ev("ok")]
    m = load({"id": "d", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"go": "g"}},
        "g": {"invoke": {"src": "gate", "id": "desk"}, "on": {"ok": "s"}}}}, evs)
    assert seats_text(m).splitlines()[1:] == ["  d.s agent:w: [go]", "  d.g gate:desk: [ok]"]


# -- M8 --------------------------------------------------------------------------------------------------------------


def gate_machine() -> Any:
    evs = [ev("submit"), ev("approve", input=Verdict_), ev("reject"), ev("escalate")]
    return load({"id": "m8", "initial": "s", "context": {"tries": 0}, "states": {
        "s": {"invoke": {"src": "w"}, "on": {"submit": "g"}},
        "g": {"invoke": {"src": "gate"}, "on": {
            "approve": {"guard": lambda event: event.verdict == "approved", "target": "done"},
            "reject": "s",
            "escalate": {"guard": lambda context: context["tries"] > 3, "target": "done"}}},
        "done": {"type": "final"}}}, evs)


def test_m8_accepts_is_every_event_the_gate_may_take_with_its_schema() -> None:
    m = gate_machine()
    acc = gate_accepts(m, "m8.g")
    assert [a.name for a in acc] == ["approve", "escalate", "reject"]
    approve = acc[0]
    assert approve.description == "Pick approve." and approve.schema_ == Verdict_.model_json_schema()


def test_m8_accepts_now_is_the_payload_blind_question_asked_as_the_gate() -> None:
    m = gate_machine()
    snap, _, _ = pick(m, start(m), "m8.s", "submit")
    # escalate's context guard is false; approve's guard reads the payload, so it stays
    assert gate_accepts_now(m, snap, "m8.g") == ["approve", "reject"]
    assert [a.name for a in gate_accepts(m, "m8.g")] == ["approve", "escalate", "reject"]  # never filtered


def test_m8_accepts_now_is_empty_while_the_gate_is_not_open_and_accepts_stays_whole() -> None:
    m = gate_machine()
    snap = start(m)
    assert gate_accepts_now(m, snap, "m8.g") == []
    assert len(gate_accepts(m, "m8.g")) == 3


def test_m8_the_gates_events_are_on_no_agent_menu() -> None:
    m = gate_machine()
    assert [i.name for i in menu_items(m, "w")] == ["submit"]
