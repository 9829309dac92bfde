"""can(snapshot, event): true when the selected transitions have a target or actions."""
import pytest
from chart_helpers import pure

from jr2ray.chart import Event, GuardError, assign, can, create_machine, initial_transition, raise_, transition


def snap(config, events=(), **opts):
    return pure(config, events, **opts)[1]


def test_can_true_for_a_targeted_transition():
    s = snap({"initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}})
    assert can(s, "GO") is True


def test_can_false_for_an_event_nobody_takes():
    s = snap({"initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}})
    assert can(s, "OTHER") is False


def test_can_false_when_the_only_guard_fails():
    s = snap({"initial": "a", "context": {"ok": False},
              "states": {"a": {"on": {"GO": {"target": "b", "guard": lambda context: context["ok"]}}}, "b": {}}})
    assert can(s, "GO") is False


def test_can_true_when_a_later_candidate_passes():
    s = snap({"initial": "a",
              "states": {"a": {"on": {"GO": [{"target": "b", "guard": lambda: False}, {"target": "c"}]}},
                         "b": {}, "c": {}}})
    assert can(s, "GO") is True


def test_can_true_for_targetless_transition_with_actions():
    s = snap({"initial": "a", "context": {"n": 0},
              "states": {"a": {"on": {"INC": {"actions": assign(n=lambda context: context["n"] + 1)}}}}})
    assert can(s, "INC") is True


def test_can_true_for_targetless_transition_with_only_a_raise():
    s = snap({"initial": "a", "states": {"a": {"on": {"E": {"actions": raise_({"type": "F"})}}}}})
    assert can(s, "E") is True


def test_can_false_for_empty_transition():
    s = snap({"initial": "a", "states": {"a": {"on": {"E": {}}}}})
    assert can(s, "E") is False


def test_can_false_when_empty_transition_shadows_a_targeted_ancestor():
    s = snap({"initial": "p", "states": {
        "p": {"on": {"E": "q"}, "initial": "a", "states": {"a": {"on": {"E": {}}}}},
        "q": {}}})
    assert can(s, "E") is False


def test_can_true_for_reentering_self_transition():
    s = snap({"initial": "a", "states": {"a": {"on": {"E": {"target": "a", "reenter": True}}}}})
    assert can(s, "E") is True


def test_can_runs_no_action():
    side = []

    def bump(context):
        side.append("assign-ran")
        return context["n"] + 1

    s = snap({"initial": "a", "context": {"n": 0},
              "states": {"a": {"on": {"E": {"target": "b",
                                            "actions": [assign(n=bump), lambda: side.append("custom")]}}},
                         "b": {"entry": lambda: side.append("entry")}}})
    assert can(s, "E") is True
    assert side == []
    assert s.context == {"n": 0} and s.value == "a"


def test_can_gives_guards_the_very_event_object():
    seen = []

    def guard(event):
        seen.append(event)
        return True

    s = snap({"initial": "a", "states": {"a": {"on": {"E": {"target": "b", "guard": guard}}}, "b": {}}})
    ev = Event("E", {"k": 1})
    assert can(s, ev) is True
    assert seen and seen[-1] is ev


def test_can_reads_the_event_payload_in_guards():
    s = snap({"initial": "a", "states": {
        "a": {"on": {"E": {"target": "b", "guard": lambda event: event.k > 2}}}, "b": {}}})
    assert can(s, {"type": "E", "k": 3}) is True
    assert can(s, {"type": "E", "k": 1}) is False


def test_can_propagates_guard_error():
    def boom():
        raise RuntimeError("nope")

    s = snap({"initial": "a", "states": {"a": {"on": {"E": {"target": "b", "guard": boom}}}, "b": {}}})
    with pytest.raises(GuardError):
        can(s, "E")


def test_can_in_parallel_one_region_enough():
    s = snap({"type": "parallel", "states": {
        "x": {"initial": "x1", "states": {"x1": {"on": {"E": "x2"}}, "x2": {}}},
        "y": {"initial": "y1", "states": {"y1": {}}}}})
    assert can(s, "E") is True
    assert can(s, "F") is False


def test_can_with_wildcard():
    s = snap({"initial": "a", "states": {"a": {"on": {"*": "b"}}, "b": {}}})
    assert can(s, "ANYTHING") is True


def test_can_with_prefix_wildcard():
    s = snap({"initial": "a", "states": {"a": {"on": {"foo.*": "b"}}, "b": {}}})
    assert can(s, "foo.bar") is True
    assert can(s, "bar.foo") is False


def test_snapshot_can_method_agrees():
    s = snap({"initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {}}})
    assert s.can("GO") is True and s.can({"type": "X"}) is False


def test_can_after_moving():
    m = create_machine({"initial": "a", "states": {"a": {"on": {"GO": "b"}}, "b": {"on": {"BACK": "a"}}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "GO")
    assert can(s, "GO") is False and can(s, "BACK") is True


def test_can_uses_current_context_in_guard():
    m = create_machine({"initial": "a", "context": {"n": 0},
                        "states": {"a": {"on": {
                            "INC": {"actions": assign(n=lambda context: context["n"] + 1)},
                            "GO": {"target": "b", "guard": lambda context: context["n"] >= 2}}}, "b": {}}})
    s, _ = initial_transition(m)
    assert not can(s, "GO")
    s, _ = transition(m, s, "INC")
    assert not can(s, "GO")
    s, _ = transition(m, s, "INC")
    assert can(s, "GO")


def test_can_with_named_guard_and_params():
    s = snap({"initial": "a", "context": {"n": 5},
              "states": {"a": {"on": {"GO": {"target": "b", "guard": {"type": "atLeast", "params": {"min": 3}}}}},
                         "b": {}}},
             guards={"atLeast": lambda context, params: context["n"] >= params["min"]})
    assert can(s, "GO") is True
