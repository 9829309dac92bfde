"""Internal (default) vs reentering transitions."""
from chart_helpers import Trace, pure, run_calls

from jr2ray.chart import assign, create_machine, initial_transition, transition


def _foo(t, on):
    return {"initial": "foo", "states": {"foo": {
        **t.entry_exit("foo"), "initial": "left", "on": on,
        "states": {"left": {**t.entry_exit("left"), "on": {"NEXT": "right"}}, "right": t.entry_exit("right")}}}}


def _step(config, events_before, event):
    m = create_machine(config)
    s, _ = initial_transition(m)
    for e in events_before:
        s, _ = transition(m, s, e)
    s, eff = transition(m, s, event)
    return s, eff


def test_parent_enters_child_without_reentering_itself():
    t = Trace()
    s, eff = _step(_foo(t, {"RIGHT": ".right"}), [], "RIGHT")
    run_calls(eff)
    assert s.value == {"foo": "right"}
    assert t == ["exit:left", "enter:right"]


def test_reenter_true_exits_and_reenters_source():
    t = Trace()
    s, eff = _step(_foo(t, {"RIGHT": {"target": ".right", "reenter": True}}), [], "RIGHT")
    run_calls(eff)
    assert s.value == {"foo": "right"}
    assert t == ["exit:left", "exit:foo", "enter:foo", "enter:right"]


def test_explicit_reentering_self_transition_resets_to_initial():
    t = Trace()
    s, eff = _step(_foo(t, {"RESET": {"target": "foo", "reenter": True}}), ["NEXT"], "RESET")
    run_calls(eff)
    assert s.value == {"foo": "left"}
    assert t == ["exit:right", "exit:foo", "enter:foo", "enter:left"]


def test_reentering_self_transition_to_sibling_descendant_path():
    t = Trace()
    s, eff = _step(_foo(t, {"TO_RIGHT": {"target": "foo.right", "reenter": True}}), [], "TO_RIGHT")
    run_calls(eff)
    assert s.value == {"foo": "right"}
    assert t == ["exit:left", "exit:foo", "enter:foo", "enter:right"]


def test_non_reentering_self_target_resets_children_only():
    t = Trace()
    s, eff = _step(_foo(t, {"RESET": "foo"}), ["NEXT"], "RESET")
    run_calls(eff)
    assert s.value == {"foo": "left"}
    assert t == ["exit:right", "enter:left"]


def test_atomic_self_transition_without_reenter_runs_no_entry_exit():
    t = Trace()
    m = create_machine({"initial": "a", "states": {"a": {**t.entry_exit("a"), "on": {"SELF": "a"}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "SELF")
    run_calls(eff)
    assert s.value == "a"
    assert t == []


def test_atomic_self_transition_with_reenter_runs_exit_then_entry():
    t = Trace()
    m = create_machine({"initial": "a",
                        "states": {"a": {**t.entry_exit("a"), "on": {"SELF": {"target": "a", "reenter": True}}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "SELF")
    run_calls(eff)
    assert t == ["exit:a", "enter:a"]


def test_listen_to_events_declared_on_parent_and_keep_child_on_targetless():
    _, s, _ = pure({"initial": "foo", "context": {"n": 0}, "states": {"foo": {
        "initial": "left", "on": {"BUMP": {"actions": assign(n=lambda context: context["n"] + 1)}},
        "states": {"left": {"on": {"NEXT": "right"}}, "right": {}}}}}, ["NEXT", "BUMP"])
    assert s.value == {"foo": "right"} and s.context["n"] == 1


def test_targetless_in_conditional_array():
    _, s, _ = pure({"initial": "foo", "context": {"n": 0}, "states": {"foo": {
        "on": {"E": [{"guard": lambda: False, "target": "bar"},
                     {"actions": assign(n=lambda context: context["n"] + 1)}]}}, "bar": {}}}, ["E"])
    assert s.value == "foo" and s.context["n"] == 1


def test_targetless_transition_does_not_exit_or_enter():
    t = Trace()
    m = create_machine({"initial": "foo", "states": {"foo": {**t.entry_exit("foo"), "initial": "a",
                                                              "on": {"E": {"actions": t.act("act")}},
                                                              "states": {"a": t.entry_exit("a")}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    run_calls(eff)
    assert t == ["act"]


def test_internal_transition_reenters_proper_descendants():
    _, s, _ = pure({"initial": "a1", "context": {"src": 0, "direct": 0, "deep": 0}, "states": {"a1": {
        "initial": "a11", "entry": assign(src=lambda context: context["src"] + 1),
        "on": {"REENTER": ".a11.a111"},
        "states": {"a11": {"initial": "a111", "entry": assign(direct=lambda context: context["direct"] + 1),
                           "states": {"a111": {"entry": assign(deep=lambda context: context["deep"] + 1)}}}}}}},
        ["REENTER"])
    assert s.context == {"src": 1, "direct": 2, "deep": 2}


def test_internal_transition_exits_proper_descendants():
    _, s, _ = pure({"initial": "a1", "context": {"src": 0, "direct": 0, "deep": 0}, "states": {"a1": {
        "initial": "a11", "exit": assign(src=lambda context: context["src"] + 1),
        "on": {"REENTER": ".a11.a111"},
        "states": {"a11": {"initial": "a111", "exit": assign(direct=lambda context: context["direct"] + 1),
                           "states": {"a111": {"exit": assign(deep=lambda context: context["deep"] + 1)}}}}}}},
        ["REENTER"])
    assert s.context == {"src": 0, "direct": 1, "deep": 1}


def test_sibling_transition_exits_and_enters_siblings_only():
    t = Trace()
    s, eff = _step(_foo(t, {}), [], "NEXT")
    run_calls(eff)
    assert s.value == {"foo": "right"}
    assert t == ["exit:left", "enter:right"]


def test_root_reenter_by_id_with_reenter_true():
    t = Trace()
    m = create_machine({"id": "r", "initial": "a", **t.entry_exit("root"),
                        "on": {"RESTART": {"target": "#r", "reenter": True}},
                        "states": {"a": {**t.entry_exit("a"), "on": {"N": "b"}}, "b": t.entry_exit("b")}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "N")
    s, eff = transition(m, s, "RESTART")
    run_calls(eff)
    assert s.value == "a"
    assert t == ["exit:b", "exit:root", "enter:root", "enter:a"]
