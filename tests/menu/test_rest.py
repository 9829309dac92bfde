"""Rest (M9): read from the chart and the live snapshot, never from a state's name.

At Rest, nothing the Agent started runs below its state (an Effect, a Gate, a different Agent, a child Machine:
M9.1), and no pending timer would move the Machine to another state inside the Agent's state (M9.2).
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from menu_helpers import agents, deliver, ev, gate_event, load, moved, pick, start

from jr2ray import effect
from jr2ray.chart import Event, create_machine, fire_timer, from_promise
from jr2ray.menu import allowed_picks, at_rest, holding_timers, running_below, verdict

S = "r.s"
KICKS = ["to_gate", "to_effect", "to_child", "to_promise", "to_agent", "to_wait", "to_rest"]


async def _work() -> int:
    return 1


def machine() -> Any:
    kid = create_machine({"id": "kid", "initial": "a", "states": {"a": {}}})
    actors = {**agents("w", "v"), "fx": effect.command(argv=[sys.executable, "-c", "print(1)"], timeout_s=5),
              "kid": kid, "job": from_promise(_work)}
    evs = [ev(n) for n in [*KICKS, "back", "finish", "inner"]]
    return load({"id": "r", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "initial": "idle", "on": {"finish": "done"}, "states": {
            "idle": {"on": {"to_gate": "gate", "to_effect": "fx", "to_child": "kid", "to_promise": "job",
                            "to_agent": "agent", "to_wait": "wait", "to_rest": "rest"}},
            "gate": {"invoke": {"src": "gate"}, "on": {"back": "idle"}},
            "fx": {"invoke": {"src": "fx", "onDone": "idle"}},
            "kid": {"invoke": {"src": "kid", "onDone": "idle"}},
            "job": {"invoke": {"src": "job", "onDone": "idle"}},
            "agent": {"invoke": {"src": "v"}, "on": {"inner": "idle"}},
            "wait": {"after": {1000: "idle"}},
            # A state named "rest" means nothing special: it invokes a Gate, so the Agent is not at Rest in it.
            "rest": {"invoke": {"src": "gate"}, "on": {"back": "idle"}},
        }},
        "done": {"type": "final"}}}, evs, actors)


def test_at_rest_in_a_mode_with_only_the_agents_own_invoke_running() -> None:
    m = machine()
    snap = start(m)
    assert snap.children[S].status == "active"  # the Agent itself runs at S: that is not "below"
    assert at_rest(snap, S, S) and running_below(snap, S, S) == [] and holding_timers(snap, S) == []
    assert allowed_picks(m, snap, S) == ["finish", *sorted(KICKS)]


@pytest.mark.parametrize("kick,child", [("to_gate", "r.s.gate"), ("to_effect", "r.s.fx"), ("to_child", "r.s.kid"),
                                        ("to_promise", "r.s.job"), ("to_agent", "r.s.agent"),
                                        ("to_rest", "r.s.rest")])
def test_not_at_rest_while_something_runs_below(kick: str, child: str) -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, kick)
    assert running_below(snap, S, S) == [child]
    assert not at_rest(snap, S, S)
    assert allowed_picks(m, snap, S) == []
    assert verdict(m, snap, S, "finish", {}).reason == "not_at_rest"


@pytest.mark.parametrize("kick,done_event", [
    ("to_effect", Event("xstate.done.actor.r.s.fx", {"output": {"exit_code": 0, "stdout": "1\n", "stderr": ""}})),
    ("to_child", Event("xstate.done.actor.r.s.kid", {"output": None})),
    ("to_promise", Event("xstate.done.actor.r.s.job", {"output": 1})),
    ("to_gate", gate_event("back", "r.s.gate")),
    ("to_agent", Event("inner", {}, {"party": "agent", "id": "v"})),
])
def test_at_rest_again_once_the_work_below_is_done(kick: str, done_event: Event) -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, kick)
    snap, _, took = deliver(m, snap, done_event)
    assert took and snap.matches("s.idle")
    assert at_rest(snap, S, S) and running_below(snap, S, S) == []
    assert "finish" in allowed_picks(m, snap, S)


def test_not_at_rest_while_an_after_timer_below_is_pending() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "to_wait")
    assert holding_timers(snap, S) == ["xstate.after.1000.r.s.wait"]
    assert not at_rest(snap, S, S) and allowed_picks(m, snap, S) == []
    assert verdict(m, snap, S, "finish", {}).reason == "not_at_rest"
    snap, _, took = fire_timer(m.chart, snap, "xstate.after.1000.r.s.wait", now_ms=1000)
    assert moved(took, "xstate.after.1000.r.s.wait")
    assert snap.matches("s.idle") and holding_timers(snap, S) == []
    assert at_rest(snap, S, S) and "finish" in allowed_picks(m, snap, S)


def test_not_at_rest_when_the_run_is_over() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "finish")
    assert snap.status == "done"
    assert not at_rest(snap, S, S) and allowed_picks(m, snap, S) == []


# -- Timers (M9.2): a timer holds Rest only when it would move the Machine inside the Agent's state ----------------


def timer_machine(own_after: dict[Any, Any] | None = None, mode_after: dict[Any, Any] | None = None) -> Any:
    """Agent w at t.s with modes a and b (`go` flips between them); `finish` leaves for t.done; t.timeout is outside."""
    evs = [ev("go"), ev("finish")]
    s: dict[str, Any] = {"invoke": {"src": "w"}, "initial": "a", "on": {"finish": "#t.done"}, "states": {
        "a": {"on": {"go": "b"}}, "b": {"on": {"go": "a"}}}}
    if own_after:
        s["after"] = own_after
    if mode_after:
        s["states"]["a"]["after"] = mode_after
    return load({"id": "t", "initial": "s", "context": {"armed": False},
                 "states": {"s": s, "timeout": {}, "done": {"type": "final"}}}, evs)


T = "t.s"


def test_m9_2_a_deadline_on_the_agents_own_state_does_not_hold_rest() -> None:
    m = timer_machine(own_after={60000: "timeout"})
    snap = start(m)
    assert snap.timers  # the timer is pending...
    assert holding_timers(snap, T) == [] and at_rest(snap, T, T)  # ...but it leaves the Agent's state
    assert allowed_picks(m, snap, T) == ["finish", "go"]


def test_m9_2_a_deadline_in_a_mode_does_not_hold_rest_and_picks_are_delivered() -> None:
    m = timer_machine(mode_after={60000: "#t.timeout"})
    snap = start(m)
    assert list(snap.timers) == ["xstate.after.60000.t.s.a"]
    assert holding_timers(snap, T) == [] and at_rest(snap, T, T)
    assert allowed_picks(m, snap, T) == ["finish", "go"]
    after, _, took = pick(m, snap, T, "go")  # delivered, and it moves inside the Agent's state
    assert moved(took, "go") and after.matches("s.b") and after.timers == {}  # leaving mode a cancelled it
    assert at_rest(after, T, T) and allowed_picks(m, after, T) == ["finish", "go"]
    done, _, took = pick(m, snap, T, "finish")  # the Turn can end before the deadline, too
    assert moved(took, "finish") and done.status == "done"


def test_m9_2_when_the_deadline_fires_the_turn_ends() -> None:
    m = timer_machine(mode_after={60000: "#t.timeout"})
    snap, _, took = fire_timer(m.chart, start(m), "xstate.after.60000.t.s.a", now_ms=60000)
    assert moved(took, "xstate.after.60000.t.s.a") and snap.matches("timeout") and T not in snap.active_paths
    assert allowed_picks(m, snap, T) == []
    assert verdict(m, snap, T, "go", {}).reason == "turn_over"


def test_m9_2_a_timer_on_the_agents_own_state_that_targets_a_child_holds_rest() -> None:
    m = timer_machine(own_after={1000: ".b"})
    snap = start(m)
    assert snap.matches("s.a") and holding_timers(snap, T) == ["xstate.after.1000.t.s"]
    assert not at_rest(snap, T, T) and allowed_picks(m, snap, T) == []
    before = snap.to_json()
    for name in ("go", "finish"):
        v = verdict(m, snap, T, name, {})
        assert (v.kind, v.reason, v.event) == ("refuse", "not_at_rest", None)
    assert snap.to_json() == before
    seq = snap.children[T].seq
    snap, _, took = fire_timer(m.chart, snap, "xstate.after.1000.t.s", now_ms=1000)
    assert moved(took, "xstate.after.1000.t.s") and snap.matches("s.b") and snap.children[T].seq == seq  # same Turn
    assert at_rest(snap, T, T) and allowed_picks(m, snap, T) == ["finish", "go"]


def test_m9_2_a_timer_in_a_mode_that_moves_to_a_sibling_mode_holds_rest_until_it_fires() -> None:
    m = timer_machine(mode_after={1000: "b"})
    snap = start(m)
    assert holding_timers(snap, T) == ["xstate.after.1000.t.s.a"]
    assert not at_rest(snap, T, T)  # a timer in mode a would move the Machine to b, inside t.s
    assert verdict(m, snap, T, "go", {}).reason == "not_at_rest"
    snap, _, took = fire_timer(m.chart, snap, next(iter(snap.timers)), now_ms=1000)
    assert moved(took, "xstate.after.1000.t.s.a") and snap.matches("s.b")
    assert at_rest(snap, T, T) and allowed_picks(m, snap, T) == ["finish", "go"]


def test_m9_2_a_timer_that_reenters_the_agents_state_is_a_deadline() -> None:
    """Re-entering the Agent's state exits it first (C3), so that Turn ends: it does not hold Rest."""
    m = timer_machine(own_after={1000: {"target": ".b", "reenter": True}})
    snap = start(m)
    assert holding_timers(snap, T) == [] and allowed_picks(m, snap, T) == ["finish", "go"]
    after, _, _ = fire_timer(m.chart, snap, "xstate.after.1000.t.s", now_ms=1000)
    assert after.children[T].seq != snap.children[T].seq  # the Agent's invoke restarted: that Turn ended


@pytest.mark.parametrize("spec", [
    {"actions": lambda: None},  # targetless: it moves to no state
    {"target": "a", "reenter": True},  # a mode's self-loop: the very same state again
    {"guard": lambda context: context["armed"], "target": "b"},  # its guard says no, read on the live context
])
def test_m9_2_a_timer_that_moves_to_no_other_state_inside_does_not_hold_rest(spec: dict[str, Any]) -> None:
    m = timer_machine(mode_after={1000: spec})
    snap = start(m)
    assert snap.timers and holding_timers(snap, T) == []
    assert at_rest(snap, T, T) and allowed_picks(m, snap, T) == ["finish", "go"]
