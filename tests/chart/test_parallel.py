"""Parallel states: regions, document order, conflict resolution."""
from chart_helpers import Trace, pure, run, run_calls

from jr2ray.chart import assign, create_machine, initial_transition, raise_, transition

WORD = {
    "id": "word", "type": "parallel", "states": {
        "bold": {"initial": "off", "states": {"on": {"on": {"TOGGLE_BOLD": "off"}},
                                              "off": {"on": {"TOGGLE_BOLD": "on"}}}},
        "underline": {"initial": "off", "states": {"on": {"on": {"TOGGLE_UNDERLINE": "off"}},
                                                   "off": {"on": {"TOGGLE_UNDERLINE": "on"}}}},
        "list": {"initial": "none", "states": {
            "none": {"on": {"BULLETS": "bullets", "NUMBERS": "numbers"}},
            "bullets": {"on": {"NONE": "none", "NUMBERS": "numbers"}},
            "numbers": {"on": {"BULLETS": "bullets", "NONE": "none"}}}},
    },
    "on": {"RESET": "#word"},
}


def test_initial_parallel_value():
    _, s, _ = pure(WORD)
    assert s.value == {"bold": "off", "underline": "off", "list": "none"}


def test_each_region_moves_independently():
    _, s, _ = pure(WORD, ["TOGGLE_BOLD", "NUMBERS"])
    assert s.value == {"bold": "on", "underline": "off", "list": "numbers"}


def test_event_in_one_region_leaves_others():
    m = create_machine(WORD)
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "TOGGLE_UNDERLINE")
    s, _ = transition(m, s, "BULLETS")
    s, _ = transition(m, s, "TOGGLE_UNDERLINE")
    assert s.value == {"bold": "off", "underline": "off", "list": "bullets"}


def test_reset_to_root_id_reenters_initial_configuration():
    _, s, _ = pure(WORD, ["TOGGLE_BOLD", "BULLETS", "RESET"])
    assert s.value == {"bold": "off", "underline": "off", "list": "none"}


def test_simultaneous_transitions_in_two_regions():
    _, s, _ = pure({"type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {}}},
        "b": {"initial": "b1", "states": {"b1": {"on": {"E": "b2"}}, "b2": {}}}}}, ["E"])
    assert s.value == {"a": "a2", "b": "b2"}


def test_region_actions_run_in_document_order():
    t = Trace()
    _, s, eff = pure({"type": "parallel", "states": {
        "first": {"initial": "x", "states": {"x": {"on": {"E": {"target": "y", "actions": t.act("first")}}}, "y": {}}},
        "second": {"initial": "x",
                   "states": {"x": {"on": {"E": {"target": "y", "actions": t.act("second")}}}, "y": {}}},
        "third": {"initial": "x", "states": {"x": {"on": {"E": {"actions": t.act("third")}}}}}}}, ["E"])
    run_calls(eff)
    assert t == ["first", "second", "third"]


def test_entry_in_document_order_on_start():
    t = Trace()
    _, _, eff = pure({"type": "parallel", "states": {
        "a": {"entry": t.act("a"), "initial": "a1", "states": {"a1": {"entry": t.act("a1")}}},
        "b": {"entry": t.act("b"), "initial": "b1", "states": {"b1": {"entry": t.act("b1")}}}}})
    run_calls(eff)
    assert t == ["a", "a1", "b", "b1"]


def test_descendant_source_preempts_ancestor_source():
    # region a's atomic state handles E; the parallel state itself also handles E (reached from region b).
    _, s, _ = pure({"id": "m", "initial": "p", "states": {
        "p": {"type": "parallel", "on": {"E": "#m.out"}, "states": {
            "a": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {}}},
            "b": {"initial": "b1", "states": {"b1": {}}}}},
        "out": {}}}, ["E"])
    assert s.value == {"p": {"a": "a2", "b": "b1"}}


def test_descendant_source_preempts_even_when_later_in_document_order():
    _, s, _ = pure({"id": "m", "initial": "p", "states": {
        "p": {"type": "parallel", "on": {"E": "#m.out"}, "states": {
            "a": {"initial": "a1", "states": {"a1": {}}},
            "b": {"initial": "b1", "states": {"b1": {"on": {"E": "b2"}}, "b2": {}}}}},
        "out": {}}}, ["E"])
    assert s.value == {"p": {"a": "a1", "b": "b2"}}


def test_conflicting_region_transitions_earlier_in_document_order_wins():
    t = Trace()
    _, s, eff = pure({"id": "m", "initial": "p", "states": {
        "p": {"type": "parallel", "states": {
            "a": {"initial": "a1", "states": {"a1": {"on": {"E": {"target": "#m.x", "actions": t.act("a")}}}}},
            "b": {"initial": "b1", "states": {"b1": {"on": {"E": {"target": "#m.y", "actions": t.act("b")}}}}}}},
        "x": {}, "y": {}}}, ["E"])
    run_calls(eff)
    assert s.value == "x"
    assert t == ["a"]


def test_targetless_transitions_in_regions_do_not_conflict():
    _, s, _ = pure({"type": "parallel", "context": {"a": 0, "b": 0}, "states": {
        "ra": {"on": {"E": {"actions": assign(a=lambda context: context["a"] + 1)}}},
        "rb": {"on": {"E": {"actions": assign(b=lambda context: context["b"] + 1)}}}}}, ["E"])
    assert s.context == {"a": 1, "b": 1}


def test_transition_to_relative_substate_in_region():
    _, s, _ = pure({"type": "parallel", "states": {
        "edit": {"initial": "idle", "states": {
            "idle": {"on": {"START": "busy"}},
            "busy": {"initial": "one", "states": {"one": {"on": {"NEXT": "two"}}, "two": {}}}}},
        "other": {}}}, ["START", "NEXT"])
    assert s.value == {"edit": {"busy": "two"}, "other": {}}


def test_raised_event_in_one_region_handled_by_another():
    _, s, _ = pure({"type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {"on": {"GO": {"target": "a2", "actions": raise_({"type": "PING"})}}},
                                          "a2": {}}},
        "b": {"initial": "b1", "states": {"b1": {"on": {"PING": "b2"}}, "b2": {}}}}}, ["GO"])
    assert s.value == {"a": "a2", "b": "b2"}


def test_region_can_target_orthogonal_region_by_ids():
    _, s, _ = pure({"type": "parallel", "states": {
        "pages": {"initial": "about", "states": {"about": {"id": "about"}, "dash": {"id": "dash"}}},
        "menu": {"initial": "closed", "states": {
            "closed": {"id": "closed", "on": {"toggle": "#opened"}},
            "opened": {"id": "opened", "on": {"toggle": "#closed", "goDash": {"target": ["#dash", "#opened"]}}}}}}},
        ["toggle", "goDash"])
    assert s.matches({"menu": "opened", "pages": "dash"})


def test_reentering_state_inside_region_runs_entry_each_time():
    _, s, _ = pure({"type": "parallel", "context": {"log": []}, "states": {
        "foo": {"initial": "bar", "states": {
            "bar": {"on": {"GOTO_BAZ": "baz"}},
            "baz": {"entry": assign(log=lambda context: context["log"] + ["baz"]),
                    "on": {"GOTO_BAZ": {"target": "baz", "reenter": True}}}}},
        "other": {}}}, ["GOTO_BAZ", "GOTO_BAZ"])
    assert s.context["log"] == ["baz", "baz"]


async def test_cross_region_transition_reenters_both_regions():
    t = Trace()
    actor, _ = run({"type": "parallel", "states": {
        "op": {**t.entry_exit("op"), "initial": "waiting", "states": {
            "waiting": {**t.entry_exit("op.waiting"), "on": {"TOGGLE": "#demo"}}, "fetching": {}}},
        "mode": {**t.entry_exit("mode"), "initial": "normal", "states": {
            "normal": t.entry_exit("mode.normal"), "demo": {"id": "demo", **t.entry_exit("mode.demo")}}}}})
    t.clear()
    actor.send("TOGGLE")
    assert actor.snapshot.value == {"op": "waiting", "mode": "demo"}
    assert t == ["exit:mode.normal", "exit:mode", "exit:op.waiting", "exit:op",
                 "enter:op", "enter:op.waiting", "enter:mode", "enter:mode.demo"]


async def test_targetless_transition_on_parallel_state_enters_and_exits_nothing():
    t = Trace()
    actor, _ = run({"type": "parallel", "on": {"EV": {"actions": t.act("act")}}, "states": {
        "first": {**t.entry_exit("first"), "initial": "d", "states": {"d": t.entry_exit("first.d"), "e": {}}},
        "second": t.entry_exit("second")}})
    t.clear()
    actor.send("EV")
    assert t == ["act"]


def test_nested_parallel_value():
    _, s, _ = pure({"initial": "p", "states": {"p": {"type": "parallel", "states": {
        "x": {"type": "parallel", "states": {"x1": {"initial": "a", "states": {"a": {}}}, "x2": {}}},
        "y": {"initial": "b", "states": {"b": {}}}}}}})
    assert s.value == {"p": {"x": {"x1": "a", "x2": {}}, "y": "b"}}


def test_transition_within_nested_parallel():
    _, s, _ = pure({"initial": "p", "states": {"p": {"type": "parallel", "states": {
        "x": {"type": "parallel", "states": {"x1": {"initial": "a", "states": {"a": {"on": {"E": "b"}}, "b": {}}}}},
        "y": {"initial": "c", "states": {"c": {"on": {"E": "d"}}, "d": {}}}}}}}, ["E"])
    assert s.value == {"p": {"x": {"x1": "b"}, "y": "d"}}


def test_transition_out_of_parallel_exits_all_regions_in_reverse_order():
    t = Trace()
    m = create_machine({"initial": "p", "states": {
        "p": {"type": "parallel", **t.entry_exit("p"), "on": {"OUT": "q"}, "states": {
            "a": t.entry_exit("a"), "b": t.entry_exit("b")}},
        "q": t.entry_exit("q")}})
    s0, _ = initial_transition(m)
    s1, eff = transition(m, s0, "OUT")
    run_calls(eff)
    assert s1.value == "q"
    assert t == ["exit:b", "exit:a", "exit:p", "enter:q"]


def test_ancestor_transition_reached_from_two_regions_is_taken_once():
    _, s, _ = pure({"initial": "p", "context": {"n": 0}, "states": {"p": {
        "type": "parallel", "on": {"E": {"actions": assign(n=lambda context: context["n"] + 1)}}, "states": {
            "a": {"initial": "a1", "states": {"a1": {}}}, "b": {"initial": "b1", "states": {"b1": {}}}}}}}, ["E"])
    assert s.context["n"] == 1


def test_ancestor_targeted_transition_from_two_regions_exits_once():
    t = Trace()
    m = create_machine({"initial": "p", "states": {
        "p": {"type": "parallel", "exit": t.act("exit p"), "on": {"OUT": "q"}, "states": {"a": {}, "b": {}}},
        "q": {"entry": t.act("enter q")}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "OUT")
    run_calls(eff)
    assert s.value == "q"
    assert t == ["exit p", "enter q"]
