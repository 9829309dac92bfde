"""Static Menu checks at load (A7): unreachable Agent states, Menu entries never allowed, constant-false picks.

Each warning names the state path. The shipped notes and coder workflows load without any warning.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from pydantic import BaseModel

from jr2ray import agent, define_event, jr2_setup
from jr2ray.authoring.checks import UNKNOWN, constant_result, guard_constant


class Empty(BaseModel):
    pass


EVENTS = [define_event(name=n, description=f"Do {n}.", input=Empty) for n in ("x", "y", "z")]
AGENTS: dict[str, Any] = {"w": agent(model="local/tiny", instructions="Work.")}


def load(config: dict[str, Any], guards: dict[str, Any] | None = None, events: str = "xyz") -> Any:
    return jr2_setup(events=[e for e in EVENTS if e.name in events], actors=AGENTS,
                     guards=guards).create_machine(config)


def about(m: Any, *words: str) -> list[str]:
    return [w for w in m.warnings if all(word in w for word in words)]


# -- an Agent state no path reaches ---------------------------------------------------------------------------------


def test_warns_about_an_agent_state_no_path_from_the_initial_state_reaches() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "t", "z": "t"}},
        "t": {},
        "lost": {"invoke": {"src": "w"}, "on": {"y": "t"}}}})
    found = about(m, "no path from the initial state reaches it")
    assert len(found) == 1 and found[0].startswith("m.lost:") and "'w'" in found[0]


def test_a_transition_whose_guard_is_constant_false_reaches_nothing() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "t", "y": {"target": "u", "guard": lambda: False}}},
        "t": {},
        "u": {"invoke": {"src": "w"}, "on": {"z": "t"}}}})
    assert len(about(m, "m.u:", "no path from the initial state")) == 1


def test_no_reachability_warning_for_states_reached_through_a_chain() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "g"}},
        "g": {"invoke": {"src": "gate"}, "on": {"y": "u"}},
        "u": {"invoke": {"src": "w"}, "on": {"z": "t"}},
        "t": {}}})
    assert m.warnings == []


# -- a Menu entry every invoking state forbids with {} --------------------------------------------------------------


def test_warns_about_a_menu_entry_every_invoking_state_forbids() -> None:
    m = load({"id": "m", "initial": "s", "on": {"y": ".t"}, "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "t", "y": {}}},
        "t": {}}}, events="xy")
    found = about(m, "forbids 'y' with {}")
    assert len(found) == 1 and found[0].startswith("m.s:") and "never an Allowed pick" in found[0]


def test_no_forbid_warning_when_one_invoking_state_takes_it_or_a_mode_below_does() -> None:
    one_takes = load({"id": "m", "initial": "s", "on": {"y": ".t"}, "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "u", "y": {}}},
        "u": {"invoke": {"src": "w"}, "on": {"z": "t"}},
        "t": {}}})
    assert about(one_takes, "forbids") == []
    mode_takes = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "initial": "a", "on": {"x": "t", "y": {}},
              "states": {"a": {"on": {"y": "b"}}, "b": {"on": {"z": "a"}}}},
        "t": {}}})
    assert about(mode_takes, "forbids") == []


# -- a Menu entry whose every transition sits in unreachable states -------------------------------------------------


def test_warns_about_a_menu_entry_taken_only_in_unreachable_modes() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "initial": "a", "states": {
            "a": {"on": {"x": "#m.t"}},
            "b": {"on": {"y": "a"}},  # entered only from c, which nothing enters
            "c": {"on": {"x": "b", "z": "a"}}}},
        "t": {}}})
    found = about(m, "every state that takes 'y'")
    assert len(found) == 1 and found[0].startswith("m.s.b:") and "unreachable" in found[0]
    assert about(m, "every state that takes 'x'") == []  # m.s.a takes x and is reached


# -- a pick whose guard is the literal constant false ---------------------------------------------------------------


def _always_false(context: Any) -> bool:
    """A docstring does not make a guard depend on anything."""
    return False


@pytest.mark.parametrize("guard", [lambda: False, lambda context: False, _always_false, "never"])
def test_warns_about_a_pick_whose_guard_is_constant_false(guard: Any) -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": "t", "y": {"target": "t", "guard": guard}}},
        "t": {}}}, guards={"never": lambda: False}, events="xy")
    found = about(m, "constant false")
    assert len(found) == 1 and found[0].startswith("m.s:") and "'y'" in found[0]


def test_no_warning_for_a_guard_that_reads_the_context_and_none_calls_it() -> None:
    calls: list[int] = []

    def counted(context: Any) -> bool:
        calls.append(1)
        return False

    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": {"target": "t", "guard": lambda context: bool(context.get("ok"))},
                                              "y": {"target": "t", "guard": counted},
                                              "z": {"target": "t", "guard": lambda: True}}},
        "t": {}}})
    assert m.warnings == [] and calls == []


def test_constant_reading_of_code_objects_and_combinators() -> None:
    from jr2ray.chart.guards import AndGuard, NotGuard, OrGuard

    assert constant_result(lambda: False) is False and constant_result(lambda a, b: 0) == 0
    assert constant_result(lambda context: context) is UNKNOWN and constant_result(len) is UNKNOWN
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": [{"target": "t", "guard": lambda: False},
                                                   {"target": "t", "guard": lambda context: context}]}},
        "t": {}}}, events="x")
    false, depends = (t.guard for t in m.chart.by_path["m.s"].on["x"])
    assert guard_constant(NotGuard(false)) is True and guard_constant(AndGuard([false, depends])) is False
    assert guard_constant(OrGuard([false, depends])) is None and guard_constant(OrGuard([false, false])) is False


# -- the shipped workflows stay free of warnings --------------------------------------------------------------------


@pytest.mark.parametrize("module", ["workflows.notes", "workflows.coder"])
def test_the_notes_and_coder_workflows_load_without_warnings(module: str) -> None:
    assert importlib.import_module(module).machine.warnings == []
