"""Rest (SPEC §0, the-menu.md "One pick at a time"): read from the chart, never from a state's name.

At Rest, no state below the Agent's state runs something (an Effect, a Gate, a different Agent, a child Machine),
and no timer is set that moves the Machine to a different state inside the Agent's state.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from menu_helpers import agents, deliver, ev, gate_event, load, moved, pick, start

from jr2ray import effect
from jr2ray.chart import Event, create_machine, fire_timer, from_promise
from jr2ray.menu import allowed_picks, at_rest, running_below, timers_below, verdict

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
    assert at_rest(snap, S, S) and running_below(snap, S, S) == [] and timers_below(snap, S) == []
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
    assert timers_below(snap, S) == ["xstate.after.1000.r.s.wait"]
    assert not at_rest(snap, S, S) and allowed_picks(m, snap, S) == []
    assert verdict(m, snap, S, "finish", {}).reason == "not_at_rest"
    snap, _, took = fire_timer(m.chart, snap, "xstate.after.1000.r.s.wait", now_ms=1000)
    assert moved(took, "xstate.after.1000.r.s.wait")
    assert snap.matches("s.idle") and timers_below(snap, S) == []
    assert at_rest(snap, S, S) and "finish" in allowed_picks(m, snap, S)


def test_not_at_rest_when_the_run_is_over() -> None:
    m = machine()
    snap, _, _ = pick(m, start(m), S, "finish")
    assert snap.status == "done"
    assert not at_rest(snap, S, S) and allowed_picks(m, snap, S) == []


# -- Timers: the seeds count a timer that moves the Machine inside the Agent's state --------------------------------


def timer_machine(own_after: dict[Any, Any] | None = None, mode_after: dict[Any, Any] | None = None) -> Any:
    evs = [ev("go"), ev("finish")]
    s: dict[str, Any] = {"invoke": {"src": "w"}, "initial": "a", "on": {"finish": "#t.done"}, "states": {
        "a": {"on": {"go": "b"}}, "b": {"on": {"go": "a"}}}}
    if own_after:
        s["after"] = own_after
    if mode_after:
        s["states"]["a"]["after"] = mode_after
    return load({"id": "t", "initial": "s", "states": {"s": s, "timeout": {}, "done": {"type": "final"}}}, evs)


def test_at_rest_with_a_timer_on_the_agents_state_that_leaves_it() -> None:
    m = timer_machine(own_after={60000: "timeout"})
    snap = start(m)
    assert snap.timers  # the timer is pending...
    assert at_rest(snap, "t.s", "t.s")  # ...but it moves the Machine out of the Agent's state, not inside it
    assert allowed_picks(m, snap, "t.s") == ["finish", "go"]


def test_a_timer_on_the_agents_own_state_does_not_hold_rest() -> None:
    """SPEC §0: Rest means no `after` timer is pending *below* the Agent's state. The seeds word it by where the
    timer goes; where the two disagree, SPEC.md wins. A timer on the Agent's state itself is not below it."""
    m = timer_machine(own_after={1000: ".b"})
    snap = start(m)
    assert snap.matches("s.a") and snap.timers
    assert at_rest(snap, "t.s", "t.s")
    assert allowed_picks(m, snap, "t.s") == ["finish", "go"]


def test_a_pending_timer_in_a_mode_holds_rest_even_if_it_leaves() -> None:
    """SPEC §0 (which wins over the seeds' wording): any `after` timer pending below the Agent's state holds Rest,
    a mode's timeout that would leave the Agent's state included."""
    m = timer_machine(mode_after={60000: "#t.timeout"})
    snap = start(m)
    assert snap.timers
    assert not at_rest(snap, "t.s", "t.s")
    assert allowed_picks(m, snap, "t.s") == []


def test_rest_comes_back_once_a_timer_that_moves_inside_has_fired() -> None:
    m = timer_machine(mode_after={1000: "b"})
    snap = start(m)
    assert not at_rest(snap, "t.s", "t.s")  # a timer in mode a would move the Machine to b, inside t.s
    assert verdict(m, snap, "t.s", "go", {}).reason == "not_at_rest"
    snap, _, took = fire_timer(m.chart, snap, next(iter(snap.timers)), now_ms=1000)
    assert moved(took, "xstate.after.1000.t.s.a") and snap.matches("s.b")
    assert at_rest(snap, "t.s", "t.s") and allowed_picks(m, snap, "t.s") == ["finish", "go"]
