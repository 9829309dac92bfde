"""The authoring surface's refusals (A2, A3, A6), its load warnings (A7) and the digest (A8).

Every refusal must name the state path and the offending name, so an author can find the line to fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from jr2ray import agent, answer, define_event, jr2_setup, sent_by
from jr2ray.authoring import EventDefinitionError, WorkflowError
from jr2ray.chart import ChartConfigError

ROOT = Path(__file__).resolve().parents[2]


class Empty(BaseModel):
    pass


class Text(BaseModel):
    text: str = Field(description="Some text.")


class Inner(BaseModel):
    a: int


X = define_event(name="x", description="Do x.", input=Empty)
Y = define_event(name="y", description="Do y.", input=Empty)
AGENTS: dict[str, Any] = {"w": agent(model="local/tiny", instructions="Work.")}


def load(config: dict[str, Any], events: tuple[Any, ...] = (X, Y), actors: dict[str, Any] | None = None) -> Any:
    return jr2_setup(events=list(events), actors=dict(actors or AGENTS)).create_machine(config)


def two_states(agent_state: dict[str, Any]) -> dict[str, Any]:
    """A machine `m` with an Agent state `s` (given) and a plain state `t`."""
    return {"id": "m", "initial": "s", "states": {"s": agent_state, "t": {}}}


# -- A2: define_event ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["bad name", "ask!", "", "naïve"])
def test_a2_define_event_refuses_a_bad_event_name(name: str) -> None:
    with pytest.raises(EventDefinitionError) as exc:
        define_event(name=name, description="d", input=Empty)
    assert repr(name) in str(exc.value)


@pytest.mark.parametrize("name", ["agent.fault", "xstate.init", "my.event"])
def test_a2_define_event_refuses_a_dotted_name_reserved_for_the_mechanism(name: str) -> None:
    with pytest.raises(EventDefinitionError) as exc:
        define_event(name=name, description="d", input=Empty)
    assert repr(name) in str(exc.value)
    assert "dotted" in str(exc.value)


def test_a2_define_event_accepts_dashes_underscores_and_digits() -> None:
    assert define_event(name="run_tests-2", description="d", input=Empty).name == "run_tests-2"


def test_a2_define_event_refuses_a_sender_field() -> None:
    class WithSender(BaseModel):
        sender: str

    with pytest.raises(EventDefinitionError) as exc:
        define_event(name="ask", description="d", input=WithSender)
    assert "'ask'" in str(exc.value) and "'sender'" in str(exc.value)


class Nested(BaseModel):
    inner: Inner


class NestedList(BaseModel):
    inner: list[Inner]


class NestedOptional(BaseModel):
    inner: Inner | None = None


@pytest.mark.parametrize("model", [Nested, NestedList, NestedOptional])
def test_a2_define_event_refuses_a_nested_model(model: type[BaseModel]) -> None:
    with pytest.raises(EventDefinitionError) as exc:
        define_event(name="ask", description="d", input=model)
    assert "'ask'" in str(exc.value) and "'inner'" in str(exc.value)


def test_a2_a_sender_argument_is_refused_at_validation_too() -> None:
    with pytest.raises(ValueError, match="sender"):
        define_event(name="say", description="d", input=Text).validate({"text": "hi", "sender": {"id": "x"}})


# -- A3: agent ------------------------------------------------------------------------------------------------------


def test_a3_an_unknown_agent_input_key_is_refused_naming_the_state_and_the_key() -> None:
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w", "input": {"prompt": "p", "colour": "red"}},
                         "on": {"x": "t", "y": "t"}}))
    msg = str(exc.value)
    assert "m.s" in msg and "colour" in msg


def test_a3_every_turn_input_key_is_accepted() -> None:
    m = load(two_states({"invoke": {"src": "w", "input": {"prompt": "p", "continue": True, "model": "local/tiny",
                                                            "thinking": "low", "cwd": "."}},
                         "on": {"x": "t", "y": "t"}}))
    assert m.agent_slots == ["w"]


def test_a3_agent_refuses_a_bad_workspace() -> None:
    with pytest.raises(ValueError, match="workspace"):
        agent(model="local/tiny", instructions="i", workspace="all")  # type: ignore[arg-type]


# -- A6: create_machine refusals ---------------------------------------------------------------------------------------


def test_a6_an_on_key_no_listed_event_has_is_refused() -> None:
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"}, "on": {"x": "t", "y": "t", "ghost": "t"}}))
    msg = str(exc.value)
    assert "m.s" in msg and "'ghost'" in msg


def test_a6_mechanism_on_keys_are_not_refused() -> None:
    m = load({"id": "m", "initial": "s", "on": {"agent.fault": ".t"},
              "states": {"s": {"invoke": {"src": "w"}, "on": {"x": "t", "y": "t"}}, "t": {}}})
    assert m.id == "m"


def test_a6_a_listed_event_no_state_takes_is_refused() -> None:
    # No state takes it, so the only place to name is the event itself.
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"}, "on": {"x": "t"}}))
    msg = str(exc.value)
    assert "'y'" in msg and "no state takes" in msg


def test_a6_a_parallel_agent_state_is_refused() -> None:
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"}, "type": "parallel", "on": {"x": "t", "y": "t"},
                         "states": {"p1": {}, "p2": {}}}))
    msg = str(exc.value)
    assert "m.s" in msg and "'w'" in msg and "parallel" in msg


def test_a6_a_parallel_state_below_an_agent_state_is_refused() -> None:
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"}, "on": {"x": "t", "y": "t"}, "initial": "a",
                         "states": {"a": {"initial": "b", "states": {"b": {"type": "parallel",
                                                                               "states": {"p1": {}, "p2": {}}}}}}}))
    msg = str(exc.value)
    assert "m.s.a.b" in msg and "'w'" in msg


def test_a6_a_parallel_state_above_an_agent_state_is_allowed() -> None:
    m = load({"id": "m", "type": "parallel", "states": {
        "left": {"initial": "s", "states": {"s": {"invoke": {"src": "w"}, "on": {"x": "t"}}, "t": {}}},
        "right": {"initial": "g", "states": {"g": {"invoke": {"src": "gate"}, "on": {"y": "h"}}, "h": {}}}}})
    assert m.structure.derived["m.left.s"] == ["x"]


def test_a6_sent_by_naming_nobody_is_refused() -> None:
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"},
                         "on": {"x": {"guard": sent_by("nobody"), "target": "t"}, "y": "t"}}))
    msg = str(exc.value)
    assert "m.s" in msg and "'nobody'" in msg


def test_a6_sent_by_naming_a_slot_or_a_gate_id_is_accepted() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": {"guard": sent_by("w"), "target": "g"}}},
        "g": {"invoke": {"src": "gate", "id": "desk"}, "on": {"y": {"guard": sent_by("desk"), "target": "s"}}}}})
    assert m.id == "m"


def test_a6_an_unknown_src_is_refused() -> None:
    with pytest.raises(ChartConfigError) as exc:
        load(two_states({"invoke": {"src": "ghost"}, "on": {"x": "t", "y": "t"}}))
    msg = str(exc.value)
    assert "m.s" in msg and "'ghost'" in msg


def test_a6_an_agent_state_that_derives_nothing_while_a_descendant_takes_agent_events_is_refused() -> None:
    actors = {**AGENTS, "v": agent(model="local/tiny", instructions="Help.")}
    with pytest.raises(WorkflowError) as exc:
        load(two_states({"invoke": {"src": "w"}, "initial": "n",
                         "states": {"n": {"invoke": {"src": "v"}, "on": {"x": "#m.t", "y": "#m.t"}}}}),
             actors=actors)
    msg = str(exc.value)
    assert "m.s" in msg and "'w'" in msg and "m.s.n" in msg


def test_a6_an_agent_state_with_no_events_anywhere_below_is_not_refused() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w", "onDone": "g"}},
        "g": {"invoke": {"src": "gate"}, "on": {"x": "s", "y": "s"}}}})
    assert m.structure.derived["m.s"] == []


# -- A7: load warnings ---------------------------------------------------------------------------------------------


def test_a7_warns_about_a_mode_no_transition_enters() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "on": {"x": "t"}, "initial": "a",
                         "states": {"a": {}, "orphan": {"on": {"y": "a"}}}}))
    found = [w for w in m.warnings if "m.s.orphan" in w]
    assert len(found) == 1 and "mode" in found[0]
    assert not any("m.s.a" in w for w in m.warnings)  # the initial mode is entered


def test_a7_no_warning_for_a_mode_that_a_transition_enters() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "on": {"x": "t"}, "initial": "a",
                         "states": {"a": {"on": {"y": "b"}}, "b": {}}}))
    assert m.warnings == []


def test_a7_warns_about_a_gate_below_an_agent_state_whose_event_has_no_target() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "on": {"x": "t"}, "initial": "a", "states": {
        "a": {"on": {"x": "g"}},
        "g": {"invoke": {"src": "gate"}, "on": {"y": {"actions": answer("thanks")}}}}}))
    found = [w for w in m.warnings if "m.s.g" in w]
    assert len(found) == 1 and "'y'" in found[0] and "Rest" in found[0]


def test_a7_no_warning_for_a_gate_below_an_agent_state_whose_event_has_a_target() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "on": {"x": "t"}, "initial": "a", "states": {
        "a": {"on": {"x": "g"}}, "g": {"invoke": {"src": "gate"}, "on": {"y": "a"}}}}))
    assert m.warnings == []


def test_a7_warns_about_an_event_whose_description_differs_on_paths() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "initial": "a",
                         "on": {"x": {"target": "t", "description": "Leave for good."}},
                         "states": {"a": {"on": {"y": "a"}}}}))
    found = [w for w in m.warnings if "'x'" in w]
    assert len(found) == 1 and "description" in found[0]


def test_a7_warns_when_two_states_of_one_agent_describe_an_event_differently() -> None:
    m = load({"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w"}, "on": {"x": {"target": "u", "description": "Hand in the draft."}}},
        "u": {"invoke": {"src": "w"}, "on": {"x": {"target": "t", "description": "Hand in the final."},
                                             "y": "s"}},
        "t": {}}})
    assert any("'x'" in w and "description" in w for w in m.warnings)


def test_a7_no_warning_when_the_transition_description_is_the_events_own() -> None:
    m = load(two_states({"invoke": {"src": "w"}, "initial": "a",
                         "on": {"x": {"target": "t", "description": X.description}},
                         "states": {"a": {"on": {"y": "a"}}}}))
    assert m.warnings == []


def test_a7_the_notes_workflow_loads_without_warnings() -> None:
    from workflows.notes import machine

    assert machine.warnings == []


# -- A8: digest --------------------------------------------------------------------------------------------------


def digest_config(target: str = "t", guard: Any = None, description: str | None = None,
                  prompt: str = "Work.") -> dict[str, Any]:
    x: dict[str, Any] = {"target": target}
    if guard is not None:
        x["guard"] = guard
    if description is not None:
        x["description"] = description
    return {"id": "m", "initial": "s", "states": {
        "s": {"invoke": {"src": "w", "input": lambda context: {"prompt": prompt}}, "on": {"x": x, "y": "t"},
              "initial": "a", "states": {"a": {}}},
        "t": {}, "u": {}}}


def test_a8_digest_is_12_hex_digits() -> None:
    assert re.fullmatch(r"[0-9a-f]{12}", load(digest_config()).digest)


def test_a8_digest_is_stable_across_loads() -> None:
    assert load(digest_config()).digest == load(digest_config()).digest


def test_a8_digest_is_stable_across_processes() -> None:
    code = "from workflows.notes import machine; print(machine.digest)"
    seen = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        seen.add(out.stdout.strip())
    from workflows.notes import machine

    assert seen == {machine.digest}


def test_a8_digest_changes_when_a_transition_target_changes() -> None:
    assert load(digest_config(target="t")).digest != load(digest_config(target="u")).digest


def test_a8_digest_is_unchanged_when_only_a_lambda_body_changes() -> None:
    a = load(digest_config(guard=lambda context: True, prompt="Work."))
    b = load(digest_config(guard=lambda context: len(context) > 99, prompt="Work harder, and differently."))
    assert a.digest == b.digest


def test_a8_digest_is_unchanged_when_only_a_text_changes() -> None:
    a = load(digest_config(description="Leave."))
    b = load(digest_config(description="Leave, and say why."))
    other_def = define_event(name="x", description="Do x, described otherwise.", input=Text)
    c = load(digest_config(), events=(other_def, Y))
    assert a.digest == b.digest == c.digest == load(digest_config()).digest
