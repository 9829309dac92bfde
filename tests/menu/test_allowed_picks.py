"""M4-M7: the Allowed picks, read payload-blind off the live snapshot, and what delivery then decides."""

from __future__ import annotations

from typing import Any

import pytest
from menu_helpers import (
    Verdict_,
    agent_event,
    deliver,
    ev,
    gate_event,
    load,
    moved,
    pick,
    start,
    took_for,
)

from jr2ray import and_, assign, not_, sent_by
from jr2ray.chart import GuardError, can
from jr2ray.menu import Receipt, allowed_picks, gate_accepts_now, texts, verdict


def boom(context: Any) -> bool:
    raise RuntimeError("the guard broke")


def guarded_machine() -> Any:
    """Agent w at g.s, in mode a. Each event shows one kind of guard."""
    names = ["ctx_no", "ctx_yes", "payload_attr", "payload_get", "payload_in", "raises", "empty", "acts",
             "shadowed", "other_mode", "mixed"]
    evs = [ev(n, input=Verdict_) if n.startswith("payload") or n == "mixed" else ev(n) for n in names]
    return load({"id": "g", "initial": "s", "context": {"n": 0}, "states": {
        "s": {"invoke": {"src": "w"}, "initial": "a",
              "on": {"shadowed": "out", "empty": "out"},
              "states": {
                  "a": {"on": {
                      "ctx_no": {"guard": lambda context: context["n"] > 0, "target": "b"},
                      "ctx_yes": {"guard": lambda context: context["n"] == 0, "target": "b"},
                      "payload_attr": {"guard": lambda event: event.verdict == "approved", "target": "b"},
                      "payload_get": {"guard": lambda event: event.get("verdict") == "approved", "target": "b"},
                      "payload_in": {"guard": lambda event: "verdict" in event and event["verdict"] == "ok",
                                     "target": "b"},
                      "raises": {"guard": boom, "target": "b"},
                      "empty": {},
                      "acts": {"actions": assign(n=lambda context: context["n"] + 1)},
                      "shadowed": {},
                      "mixed": {"guard": and_([lambda context: context["n"] > 0,
                                               lambda event: event.verdict == "approved"]), "target": "b"},
                  }},
                  "b": {"on": {"other_mode": "a"}},
              }},
        "out": {"type": "final"}}}, evs)


def test_m4_allowed_picks_keep_menu_order_and_follow_guards() -> None:
    m = guarded_machine()
    assert allowed_picks(m, start(m), "g.s") == ["acts", "ctx_yes", "payload_attr", "payload_get", "payload_in",
                                                 "raises"]


def test_m4_a_context_guard_decides_exactly() -> None:
    m = guarded_machine()
    snap = start(m)
    assert "ctx_no" not in allowed_picks(m, snap, "g.s") and "ctx_yes" in allowed_picks(m, snap, "g.s")
    snap, _, _ = pick(m, snap, "g.s", "acts")  # n = 1: the two guards flip
    assert "ctx_no" in allowed_picks(m, snap, "g.s") and "ctx_yes" not in allowed_picks(m, snap, "g.s")


def test_m4_allowed_picks_follow_the_active_mode() -> None:
    m = guarded_machine()
    snap = start(m)
    assert "other_mode" not in allowed_picks(m, snap, "g.s")
    snap, _, _ = pick(m, snap, "g.s", "ctx_yes")
    # in b, a's `{}` no longer shadows s's `empty` and `shadowed`
    assert allowed_picks(m, snap, "g.s") == ["empty", "other_mode", "shadowed"]


def test_m4_a_targetless_pick_with_actions_moves_and_is_allowed() -> None:
    m = guarded_machine()
    snap = start(m)
    assert "acts" in allowed_picks(m, snap, "g.s")
    after, _, took = pick(m, snap, "g.s", "acts")
    assert moved(took, "acts") and after.context["n"] == 1 and after.matches("s.a")


def test_m4_allowed_picks_are_empty_when_the_agents_state_is_not_active_or_the_run_is_over() -> None:
    m = guarded_machine()
    snap, _, _ = deliver(m, start(m), agent_event("shadowed", slot="w"))
    assert snap.status == "active"
    after, _, _ = deliver(m, snap, agent_event("ctx_yes"))
    assert after.matches("s.b")
    done, _, _ = deliver(m, after, agent_event("empty"))  # s's own `empty` (a's `{}` is not active in b)
    assert done.status == "done"
    assert allowed_picks(m, done, "g.s") == []


def test_m4_allowed_picks_refuse_a_state_that_invokes_no_agent() -> None:
    m = guarded_machine()
    with pytest.raises(KeyError):
        allowed_picks(m, start(m), "g.out")


# -- M5: payload-blind ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["payload_attr", "payload_get", "payload_in"])
def test_m5_a_guard_that_reads_the_payload_stays_allowed(name: str) -> None:
    m = guarded_machine()
    assert name in allowed_picks(m, start(m), "g.s")


@pytest.mark.parametrize("name,good,bad", [
    ("payload_attr", "approved", "rejected"), ("payload_get", "approved", "rejected"), ("payload_in", "ok", "no")])
def test_m5_a_guard_that_reads_the_payload_is_decided_at_delivery(name: str, good: str, bad: str) -> None:
    m = guarded_machine()
    snap = start(m)
    after, _, took = pick(m, snap, "g.s", name, {"verdict": bad})
    assert not moved(took, name) and after.matches("s.a")
    after, _, took = pick(m, snap, "g.s", name, {"verdict": good})
    assert moved(took, name) and after.matches("s.b")


def test_m5_a_payload_guard_that_says_no_gets_the_change_your_arguments_text() -> None:
    m = guarded_machine()
    snap = start(m)
    after, _, took = pick(m, snap, "g.s", "payload_get", {"verdict": "rejected"})
    receipt = Receipt(delivered=True, moved=moved(took, "payload_get"), turn_complete=False,
                      allowed=allowed_picks(m, after, "g.s"), pick="payload_get")
    assert texts.receipt_kind(receipt) == "guard"
    assert "Change the arguments" in texts.receipt_text(receipt)


def test_m5_a_compound_guard_whose_context_part_is_false_first_is_decided_exactly() -> None:
    m = guarded_machine()
    snap = start(m)
    assert "mixed" not in allowed_picks(m, snap, "g.s")  # n > 0 is false and read no payload
    snap, _, _ = pick(m, snap, "g.s", "acts")
    assert "mixed" in allowed_picks(m, snap, "g.s")  # now the payload part decides, at delivery


def test_m5_the_guard_sees_the_very_recording_event_not_a_copy() -> None:
    """xstate hands a guard the object given to can(); the payload-blind reading rests on it (M5, C8)."""
    from jr2ray.chart import RecordingEvent

    m = guarded_machine()
    rec = RecordingEvent("payload_get", {}, {"party": "agent", "id": "w"})
    assert not can(start(m), rec)
    assert rec.reads == {"verdict"}


# -- M6: fail-open --------------------------------------------------------------------------------------------------


def test_m6_a_guard_that_raises_stays_allowed() -> None:
    m = guarded_machine()
    assert "raises" in allowed_picks(m, start(m), "g.s")


def test_m6_a_guard_that_raises_is_reported_at_delivery_naming_the_guard_event_and_state() -> None:
    m = guarded_machine()
    snap = start(m)
    v = verdict(m, snap, "g.s", "raises", {})
    assert v.kind == "deliver"
    with pytest.raises(GuardError) as exc:
        deliver(m, snap, v.event)
    assert "boom" in str(exc.value) and "raises" in str(exc.value) and "g.s.a" in str(exc.value)


# -- M7: {} is never allowed and never moves ----------------------------------------------------------------------


def test_m7_an_empty_transition_is_never_allowed() -> None:
    m = guarded_machine()
    assert "empty" not in allowed_picks(m, start(m), "g.s")


def test_m7_an_empty_transition_never_moves_and_shadows_its_ancestor() -> None:
    m = guarded_machine()
    snap = start(m)
    assert "shadowed" not in allowed_picks(m, snap, "g.s")  # a's {} shadows s's `shadowed: out`
    after, _, took = pick(m, snap, "g.s", "shadowed")
    assert not moved(took, "shadowed") and after.matches("s.a") and after.status == "active"


# -- sent_by: it narrows, and the next candidate or an ancestor takes the event ------------------------------------


def sent_by_machine() -> Any:
    """Root `x` is unowned (both parties): the Gate's send goes to `ga`, the Agent's falls to the next candidate.
    In mode a, `y` is kept for the Gate by sent_by, so the Agent's `y` falls to the Agent state's own `y`."""
    evs = [ev("x"), ev("y"), ev("z"), ev("back")]
    return load({"id": "q", "initial": "s",
                 "on": {"x": [{"guard": sent_by("q.g"), "target": ".ga"}, {"target": ".ag"}]},
                 "states": {
                     "s": {"invoke": {"src": "w"}, "initial": "a",
                           "on": {"y": "ay", "z": "g"},
                           "states": {"a": {"on": {"y": {"guard": sent_by("q.g"), "target": "#q.gy"}}}}},
                     "g": {"invoke": {"src": "gate"}, "on": {"back": "s"}},
                     "ga": {}, "ag": {}, "ay": {}, "gy": {}}}, evs)


def test_sent_by_lets_the_next_candidate_take_an_agents_event() -> None:
    m = sent_by_machine()
    snap = start(m)
    assert "x" in allowed_picks(m, snap, "q.s")
    after, _, took = pick(m, snap, "q.s", "x")
    assert [t.targets for t in took_for(took, "x")] == [("q.ag",)]
    assert after.matches("ag")


def test_sent_by_lets_the_ancestor_take_an_agents_event() -> None:
    m = sent_by_machine()
    snap = start(m)
    assert "y" in allowed_picks(m, snap, "q.s")
    after, _, took = pick(m, snap, "q.s", "y")
    assert [(t.source, t.targets) for t in took_for(took, "y")] == [("q.s", ("q.ay",))]
    assert after.matches("ay")


def test_sent_by_takes_the_named_partys_event_on_the_first_candidate() -> None:
    m = sent_by_machine()
    snap, _, _ = pick(m, start(m), "q.s", "z")
    assert snap.matches("g")
    assert gate_accepts_now(m, snap, "q.g") == ["back", "x"]
    after, _, took = deliver(m, snap, gate_event("x", "q.g"))
    assert [t.targets for t in took_for(took, "x")] == [("q.ga",)]
    assert after.matches("ga")


def test_sent_by_never_grants_an_event_to_a_party() -> None:
    """sent_by('w') on a Gate's key does not put it on w's Menu: only position does."""
    evs = [ev("go"), ev("ok")]
    m = load({"id": "n", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"go": "g"}},
        "g": {"invoke": {"src": "gate"}, "on": {"ok": {"guard": sent_by("w"), "target": "s"}}}}}, evs)
    assert m.structure.derived["n.s"] == ["go"]
    snap, _, _ = pick(m, start(m), "n.s", "go")
    v = verdict(m, snap, "n.s", "ok", {})
    assert v.kind == "refuse"


def test_sent_by_on_a_not_guard_reads_no_payload() -> None:
    """A sender check is not a payload read: its False is trusted."""
    evs = [ev("go"), ev("back")]
    m = load({"id": "k", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"go": {"guard": not_(sent_by("w")), "target": "g"}}},
        "g": {"invoke": {"src": "gate"}, "on": {"back": "s"}}}}, evs)
    assert allowed_picks(m, start(m), "k.s") == []
