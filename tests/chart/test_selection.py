"""Transition selection: `{}` shadowing, wildcards, exact-before-wildcard, bubbling."""
from chart_helpers import Trace, executable, pure, run_calls

from jr2ray.chart import assign, create_machine, initial_transition, transition


def test_empty_transition_shadows_ancestor():
    _, s, _ = pure({"initial": "p", "states": {"p": {"on": {"E": "q"}, "initial": "c", "states": {
        "c": {"on": {"E": {}}}}}, "q": {}}}, ["E"])
    assert s.value == {"p": "c"}


def test_without_shadow_ancestor_handles_event():
    _, s, _ = pure({"initial": "p", "states": {"p": {"on": {"E": "q"}, "initial": "c", "states": {
        "c": {}}}, "q": {}}}, ["E"])
    assert s.value == "q"


def test_empty_transition_shadow_produces_no_effects():
    m = create_machine({"initial": "p", "states": {"p": {"on": {"E": {"target": "q", "actions": lambda: None}},
                                                         "initial": "c", "states": {"c": {"on": {"E": {}}}}}, "q": {}}})
    s, _ = initial_transition(m)
    s2, eff = transition(m, s, "E")
    assert s2.value == {"p": "c"} and executable(eff) == []


def test_shadow_only_applies_below_it():
    _, s, _ = pure({"initial": "p", "states": {"p": {"on": {"E": "q"}, "initial": "c", "states": {
        "c": {"on": {"E": {}, "GO": "d"}}, "d": {}}}, "q": {}}}, ["GO", "E"])
    assert s.value == "q"


def test_failed_guard_does_not_shadow():
    _, s, _ = pure({"initial": "p", "states": {"p": {"on": {"E": "q"}, "initial": "c", "states": {
        "c": {"on": {"E": {"target": "d", "guard": lambda: False}}}, "d": {}}}, "q": {}}}, ["E"])
    assert s.value == "q"


def test_wildcard_catches_any_event():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"*": "b"}}, "b": {}}}, ["WHATEVER"])
    assert s.value == "b"


def test_exact_match_beats_wildcard_in_same_state():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"*": "wild", "E": "exact"}}, "wild": {}, "exact": {}}},
                   ["E"])
    assert s.value == "exact"


def test_wildcard_used_when_exact_guard_fails():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"E": {"target": "exact", "guard": lambda: False},
                                                             "*": "wild"}}, "wild": {}, "exact": {}}}, ["E"])
    assert s.value == "wild"


def test_prefix_wildcard_matches_dotted_descendants():
    m = create_machine({"initial": "a", "states": {"a": {"on": {"foo.*": "b"}}, "b": {}}})
    s, _ = initial_transition(m)
    assert transition(m, s, "foo.bar")[0].value == "b"
    assert transition(m, s, "foo.bar.baz")[0].value == "b"
    assert transition(m, s, "food.bar")[0].value == "a"
    assert transition(m, s, "bar.foo")[0].value == "a"


def test_more_specific_wildcard_first():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"*": "any", "foo.*": "foo", "foo.bar.*": "foobar"}},
                                                "any": {}, "foo": {}, "foobar": {}}}, ["foo.bar.baz"])
    assert s.value == "foobar"


def test_child_wildcard_beats_parent_exact():
    _, s, _ = pure({"initial": "p", "states": {"p": {"on": {"E": "parent"}, "initial": "c", "states": {
        "c": {"on": {"*": "#child_wild"}}, "w": {"id": "child_wild"}}}, "parent": {}}}, ["E"])
    assert s.value == {"p": "w"}


def test_wildcard_receives_the_event():
    _, s, _ = pure({"initial": "a", "context": {}, "states": {"a": {"on": {
        "*": {"actions": assign(last=lambda event: event.type)}}}}}, ["HELLO"])
    assert s.context["last"] == "HELLO"


def test_event_bubbles_to_nearest_ancestor_with_handler():
    _, s, _ = pure({"initial": "p", "states": {
        "p": {"on": {"E": "outer"}, "initial": "q", "states": {
            "q": {"on": {"E": ".r"}, "initial": "a", "states": {"a": {}, "r": {}}}}},
        "outer": {}}}, ["E"])
    assert s.value == {"p": {"q": "r"}}


def test_list_of_transitions_first_passing_only_actions_taken():
    t = Trace()
    m = create_machine({"initial": "a", "states": {"a": {"on": {"E": [
        {"guard": lambda: False, "actions": t.act("first")},
        {"actions": t.act("second")},
        {"actions": t.act("third")}]}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    run_calls(eff)
    assert t == ["second"]


def test_empty_transition_in_parallel_region_shadows_the_parallel_state():
    # xstate walks the state value: region a returns its forbidden `{}`, so p's own E is never consulted, and the
    # region b that has no E does not reach p either.
    _, s, _ = pure({"id": "m", "initial": "p", "context": {"n": 0}, "states": {"p": {
        "type": "parallel", "on": {"E": {"actions": assign(n=lambda context: context["n"] + 1)}}, "states": {
            "a": {"on": {"E": {}}}, "b": {}}}}}, ["E"])
    assert s.context["n"] == 0
    assert s.can("E") is False
