"""Guards: callables, named guards with params, combinators, state_in, errors."""
import pytest
from chart_helpers import pure

from jr2ray.chart import (
    GuardError,
    and_,
    assign,
    can,
    create_machine,
    initial_transition,
    not_,
    or_,
    state_in,
    transition,
)


def _door(guard, ctx=None, **opts):
    m = create_machine({"id": "door", "initial": "closed", "context": ctx or {"locked": False, "level": 1},
                        "states": {"closed": {"on": {"OPEN": {"target": "opened", "guard": guard}}}, "opened": {}}},
                       **opts)
    s, _ = initial_transition(m)
    return m, s


def _opens(guard, event="OPEN", **kw):
    m, s = _door(guard, **kw)
    return transition(m, s, event)[0].value == "opened"


def test_callable_guard_on_context():
    assert _opens(lambda context: not context["locked"])
    assert not _opens(lambda context: context["locked"])


def test_callable_guard_on_event_payload():
    assert _opens(lambda event: event.code == 7, event={"type": "OPEN", "code": 7})
    assert not _opens(lambda event: event.code == 7, event={"type": "OPEN", "code": 8})


def test_no_candidate_passes_nothing_happens():
    _, s, _ = pure({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {"E": [
        {"target": "b", "guard": lambda: False}, {"target": "c", "guard": lambda: False}]}}, "b": {}, "c": {}}}, ["E"])
    assert s.value == "a"


def test_string_named_guard():
    assert _opens("isUnlocked", guards={"isUnlocked": lambda context: not context["locked"]})
    assert not _opens("isLocked", guards={"isLocked": lambda context: context["locked"]})


def test_named_guard_object_with_params():
    g = {"isLevel": lambda context, params: context["level"] >= params["min"]}
    assert _opens({"type": "isLevel", "params": {"min": 1}}, guards=g)
    assert not _opens({"type": "isLevel", "params": {"min": 2}}, guards=g)


def test_string_named_guard_gets_no_params():
    seen = []

    def g(params):
        seen.append(params)
        return True

    assert _opens("g", guards={"g": g})
    assert seen in ([None], [{}])


def test_not_with_callable():
    assert _opens(not_(lambda context: context["locked"]))
    assert not _opens(not_(lambda: True))


def test_not_with_named_guard():
    assert not _opens(not_("isUnlocked"), guards={"isUnlocked": lambda context: not context["locked"]})


def test_not_with_named_guard_object_params():
    g = {"atLeast": lambda context, params: context["level"] >= params["n"]}
    assert _opens(not_({"type": "atLeast", "params": {"n": 5}}), guards=g)


def test_and_requires_all():
    assert _opens(and_([lambda: True, lambda context: context["level"] == 1]))
    assert not _opens(and_([lambda: True, lambda: False]))


def test_or_requires_any():
    assert _opens(or_([lambda: False, lambda: True]))
    assert not _opens(or_([lambda: False, lambda: False]))


def test_nested_combinators_with_names():
    guards = {"yes": lambda: True, "no": lambda: False}
    assert _opens(and_(["yes", or_(["no", not_("no")])]), guards=guards)
    assert not _opens(or_([and_(["yes", "no"]), not_("yes")]), guards=guards)


def test_combinator_with_param_guard_objects():
    guards = {"eq": lambda context, params: context["level"] == params["v"]}
    assert _opens(or_([{"type": "eq", "params": {"v": 9}}, {"type": "eq", "params": {"v": 1}}]), guards=guards)
    assert not _opens(and_([{"type": "eq", "params": {"v": 9}}, {"type": "eq", "params": {"v": 1}}]), guards=guards)


def test_state_in_by_id_and_by_path():
    cfg = {"id": "m", "type": "parallel", "states": {
        "light": {"initial": "red", "states": {"red": {"id": "red", "on": {"GREEN": "green"}}, "green": {}}},
        "walk": {"initial": "stop", "states": {"stop": {"on": {
            "TRY_ID": {"target": "go", "guard": state_in("#red")},
            "TRY_PATH": {"target": "go", "guard": state_in("light.green")}}}, "go": {}}}}}
    m = create_machine(cfg)
    s0, _ = initial_transition(m)
    assert transition(m, s0, "TRY_ID")[0].value["walk"] == "go"
    assert transition(m, s0, "TRY_PATH")[0].value["walk"] == "stop"
    s1, _ = transition(m, s0, "GREEN")
    assert transition(m, s1, "TRY_ID")[0].value["walk"] == "stop"
    assert transition(m, s1, "TRY_PATH")[0].value["walk"] == "go"


def test_state_in_inside_not():
    _, s, _ = pure({"id": "m", "type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {}, "a2": {}}},
        "b": {"initial": "b1", "states": {"b1": {"on": {"E": {"target": "b2", "guard": not_(state_in("#m.a.a2"))}}},
                                          "b2": {}}}}}, ["E"])
    assert s.value == {"a": "a1", "b": "b2"}


def test_guard_checked_with_interim_context_of_same_step():
    # assign on the event transition happens before the always guard is checked
    _, s, _ = pure({"initial": "a", "context": {"ok": False}, "states": {
        "a": {"on": {"E": {"target": "b", "actions": assign(ok=True)}}},
        "b": {"always": {"target": "c", "guard": lambda context: context["ok"]}}, "c": {}}}, ["E"])
    assert s.value == "c"


def test_raising_guard_raises_guard_error_naming_guard_event_and_state():
    def exploding(context):
        raise KeyError("missing")

    m = create_machine({"id": "m", "initial": "a", "states": {"a": {"initial": "inner", "states": {
        "inner": {"on": {"POKE": {"target": "out", "guard": "isThere"}}}, "out": {}}}}},
        guards={"isThere": exploding})
    s, _ = initial_transition(m)
    with pytest.raises(GuardError) as ei:
        transition(m, s, "POKE")
    msg = str(ei.value)
    assert "isThere" in msg
    assert "POKE" in msg
    assert "a.inner" in msg


def test_raising_inline_guard_names_event_and_state():
    def inline_guard():
        raise ValueError("x")

    m = create_machine({"id": "m", "initial": "s1",
                        "states": {"s1": {"on": {"EVT": {"target": "s2", "guard": inline_guard}}}, "s2": {}}})
    s, _ = initial_transition(m)
    with pytest.raises(GuardError) as ei:
        transition(m, s, "EVT")
    assert "EVT" in str(ei.value) and "s1" in str(ei.value)


def test_guard_error_leaves_snapshot_untouched():
    m = create_machine({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {
        "E": {"target": "b", "guard": lambda: 1 / 0}}}, "b": {}}})
    s, _ = initial_transition(m)
    with pytest.raises(GuardError):
        transition(m, s, "E")
    assert s.value == "a" and s.context == {"n": 0}


def test_guard_receives_params_and_context_together():
    seen = {}

    def g(context, params):
        seen.update(ctx=dict(context), params=params)
        return True

    assert _opens({"type": "g", "params": {"p": 1}}, guards={"g": g})
    assert seen["params"] == {"p": 1} and seen["ctx"]["level"] == 1


def test_first_passing_guard_wins_among_candidates_in_list():
    _, s, _ = pure({"initial": "a", "context": {"n": 3}, "states": {"a": {"on": {"E": [
        {"target": "small", "guard": lambda context: context["n"] < 2},
        {"target": "medium", "guard": lambda context: context["n"] < 5},
        {"target": "large"}]}}, "small": {}, "medium": {}, "large": {}}}, ["E"])
    assert s.value == "medium"


def test_failed_guard_in_child_falls_through_to_parent():
    _, s, _ = pure({"initial": "p", "states": {"p": {"initial": "c", "on": {"E": "other"}, "states": {
        "c": {"on": {"E": {"target": "c2", "guard": lambda: False}}}, "c2": {}}}, "other": {}}}, ["E"])
    assert s.value == "other"


def test_guard_sees_dict_event_as_event_object():
    seen = []

    def g(event):
        seen.append((event.type, event.x))
        return True

    assert _opens(g, event={"type": "OPEN", "x": 5})
    assert seen == [("OPEN", 5)]


def test_can_and_transition_agree_with_guards():
    m, s = _door(lambda context: context["level"] > 0)
    assert can(s, "OPEN") is True
    m2, s2 = _door(lambda context: context["level"] > 5)
    assert can(s2, "OPEN") is False
