"""Final states, xstate.done.state.* events and root output."""
from chart_helpers import Trace, pure, run, run_calls

from jr2ray.chart import assign, create_machine, initial_transition, transition


def test_reaching_top_level_final_sets_status_done():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}}}, ["END"])
    assert s.status == "done"
    assert s.value == "b"


def test_root_output_from_context():
    _, s, _ = pure({"initial": "a", "context": {"n": 3},
                    "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
                    "output": lambda context: {"total": context["n"] * 2}}, ["END"])
    assert s.output == {"total": 6}


def test_root_output_absent_while_active():
    _, s, _ = pure({"initial": "a", "context": {"n": 3},
                    "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
                    "output": lambda context: context["n"]})
    assert s.status == "active"
    assert s.output is None


def test_root_output_sees_context_from_final_state_entry():
    _, s, _ = pure({"initial": "a", "context": {"n": 0},
                    "states": {"a": {"on": {"END": "b"}},
                               "b": {"type": "final", "entry": assign(n=lambda context: context["n"] + 5)}},
                    "output": lambda context: context["n"]}, ["END"])
    assert s.output == 5


def test_root_output_event_is_done_state_of_the_reached_final_child():
    seen = []

    def out(event):
        seen.append(event.type)
        return "ok"

    _, s, _ = pure({"id": "m", "initial": "a", "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
                    "output": out}, ["END"])
    assert s.output == "ok"
    # xstate v5: the root output mapper gets the done event of the completing node (here the final child `b`)
    assert seen == ["xstate.done.state.m.b"]


def test_root_output_receives_the_final_child_output_in_its_done_event():
    _, s, _ = pure({"initial": "a", "context": {"v": 9},
                    "states": {"a": {"on": {"END": "b"}},
                               "b": {"type": "final", "output": lambda context: {"v": context["v"]}}},
                    "output": lambda event: {"wrapped": event.output}}, ["END"])
    assert s.status == "done"
    assert s.output == {"wrapped": {"v": 9}}


def test_no_root_output_means_output_is_none_even_with_final_child_output():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final", "output": 5}}},
                   ["END"])
    assert s.status == "done"
    assert s.output is None


def test_nested_final_output_uses_context_from_its_entry():
    _, s, _ = pure({"initial": "a", "context": {"count": 0, "got": None}, "states": {
        "a": {"initial": "a1", "states": {
            "a1": {"on": {"NEXT": "a2"}},
            "a2": {"type": "final", "entry": assign(count=1), "output": lambda context: context["count"]}},
            "onDone": {"actions": assign(got=lambda event: event.output)}}}}, ["NEXT"])
    assert s.context["got"] == 1


def test_compound_done_event_selects_ondone():
    _, s, _ = pure({"id": "m", "initial": "work", "states": {
        "work": {"initial": "step", "onDone": "after", "states": {
            "step": {"on": {"NEXT": "fin"}}, "fin": {"type": "final"}}},
        "after": {}}}, ["NEXT"])
    assert s.value == "after"
    assert s.status == "active"


def test_done_state_event_name_and_output():
    _, s, eff = pure({"id": "m", "initial": "work", "context": {}, "states": {
        "work": {"initial": "step", "states": {
            "step": {"on": {"NEXT": "fin"}}, "fin": {"type": "final", "output": {"answer": 42}}},
            "onDone": {"target": "after", "actions": assign(got=lambda event: (event.type, event.output))}},
        "after": {}}}, ["NEXT"])
    assert s.context["got"] == ("xstate.done.state.m.work", {"answer": 42})


def test_parallel_done_when_all_regions_final():
    m = create_machine({"id": "m", "initial": "p", "states": {
        "p": {"type": "parallel", "onDone": "bar", "states": {
            "first": {"initial": "a", "states": {"a": {"on": {"N1": "b"}}, "b": {"type": "final"}}},
            "second": {"initial": "a", "states": {"a": {"on": {"N2": "b"}}, "b": {"type": "final"}}}}},
        "bar": {}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "N1")
    assert s.value == {"p": {"first": "b", "second": "a"}}
    s, _ = transition(m, s, "N2")
    assert s.value == "bar"


def test_parallel_done_event_name():
    _, s, _ = pure({"id": "m", "initial": "p", "context": {}, "states": {
        "p": {"type": "parallel",
              "onDone": {"target": "bar", "actions": assign(ev=lambda event: event.type)},
              "states": {
                  "first": {"initial": "a", "states": {"a": {"on": {"N": "b"}}, "b": {"type": "final"}}},
                  "second": {"initial": "a", "states": {"a": {"on": {"N": "b"}}, "b": {"type": "final"}}}}},
        "bar": {}}}, ["N"])
    assert s.value == "bar"
    assert s.context["ev"] == "xstate.done.state.m.p"


def test_parallel_done_only_once_when_regions_finish_together():
    _, s, _ = pure({"id": "m", "initial": "p", "context": {"dones": 0}, "states": {
        "p": {"type": "parallel",
              "onDone": {"actions": assign(dones=lambda context: context["dones"] + 1)},
              "states": {
                  "first": {"initial": "a", "states": {"a": {"on": {"N": "b"}}, "b": {"type": "final"}}},
                  "second": {"initial": "a", "states": {"a": {"on": {"N": "b"}}, "b": {"type": "final"}}}}}}},
        ["N"])
    assert s.context["dones"] == 1


def test_parallel_not_done_when_only_some_regions_final():
    _, s, _ = pure({"type": "parallel", "states": {
        "A": {"initial": "A1", "states": {"A1": {"type": "final"}}},
        "B": {"initial": "B1", "states": {"B1": {}, "B2": {"type": "final"}}}}})
    assert s.status == "active"


def test_parallel_not_done_with_direct_final_region():
    _, s, _ = pure({"type": "parallel", "states": {
        "A": {"type": "final"},
        "B": {"initial": "B1", "states": {"B1": {"on": {"F": "B2"}}, "B2": {"type": "final"}}}}})
    assert s.status == "active"


def test_parallel_root_done_when_last_region_finishes():
    _, s, _ = pure({"type": "parallel", "states": {
        "A": {"type": "final"},
        "B": {"initial": "B1", "states": {"B1": {"on": {"F": "B2"}}, "B2": {"type": "final"}}}},
        "output": lambda: "finished"}, ["F"])
    assert s.status == "done"
    assert s.output == "finished"


def test_nested_parallel_done_propagates_to_outer_parallel():
    _, s, _ = pure({"id": "m", "initial": "outer", "states": {
        "outer": {"type": "parallel", "onDone": "finished", "states": {
            "inner": {"type": "parallel", "states": {
                "x": {"initial": "x1", "states": {"x1": {"on": {"GO": "x2"}}, "x2": {"type": "final"}}},
                "y": {"initial": "y1", "states": {"y1": {"on": {"GO": "y2"}}, "y2": {"type": "final"}}}}},
            "z": {"initial": "z1", "states": {"z1": {"on": {"GO": "z2"}}, "z2": {"type": "final"}}}}},
        "finished": {"type": "final"}}}, ["GO"])
    assert s.value == "finished"
    assert s.status == "done"


def test_outer_parallel_ondone_gets_its_own_event():
    _, s, _ = pure({"id": "m", "initial": "outer", "context": {"evs": []}, "states": {
        "outer": {"type": "parallel",
                  "onDone": {"target": "finished",
                             "actions": assign(evs=lambda context, event: context["evs"] + [event.type])},
                  "states": {
                      "inner": {"type": "parallel",
                                "onDone": {"actions": assign(evs=lambda context, event: context["evs"] + [event.type])},
                                "states": {"x": {"initial": "x1", "states": {"x1": {"on": {"GO": "x2"}},
                                                                                "x2": {"type": "final"}}}}}}},
        "finished": {}}}, ["GO"])
    assert s.value == "finished"
    assert s.context["evs"] == ["xstate.done.state.m.outer.inner", "xstate.done.state.m.outer"]


def test_machine_does_not_complete_when_parallel_inside_compound_completes():
    _, s, _ = pure({"initial": "c", "states": {"c": {"initial": "p", "states": {
        "p": {"type": "parallel", "states": {"r": {"initial": "f", "states": {"f": {"type": "final"}}}}}}}}})
    assert s.status == "active"


def test_final_child_entry_runs_before_parent_done_actions():
    t = Trace()
    _, s, eff = pure({"initial": "foo", "states": {"foo": {
        "initial": "bar", "onDone": {"actions": t.act("fooDone")},
        "states": {
            "bar": {"initial": "baz", "onDone": "barFinal",
                    "states": {"baz": {"type": "final", "entry": t.act("baz")}}},
            "barFinal": {"type": "final", "entry": t.act("barFinal")}}}}})
    run_calls(eff)
    assert t == ["baz", "barFinal", "fooDone"]


def test_ondone_not_selected_when_root_is_done():
    t = Trace()
    _, s, eff = pure({"initial": "a", "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
                      "onDone": {"actions": t.act("rootOnDone")}}, ["END"])
    run_calls(eff)
    assert s.status == "done"
    assert t == []


def test_root_output_computed_once():
    calls = []

    def out(context):
        calls.append(1)
        return 1

    _, s, _ = pure({"type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {"type": "final"}}},
        "b": {"initial": "b1", "states": {"b1": {"on": {"E": "b2"}}, "b2": {"type": "final"}}}},
        "output": out}, ["E"])
    assert s.status == "done" and len(calls) == 1


def test_final_child_of_parallel_output_not_resolved():
    calls = []
    _, s, _ = pure({"initial": "A", "states": {"A": {"type": "parallel", "states": {
        "B": {"type": "final", "output": lambda: calls.append(1) or 1},
        "C": {"initial": "C1", "states": {"C1": {}}}}}}})
    assert calls == []


async def test_exit_actions_run_when_machine_completes():
    t = Trace()
    actor, _ = run({"initial": "a", **t.entry_exit("root"), "states": {
        "a": {**t.entry_exit("a"), "on": {"EV": "b"}}, "b": {**t.entry_exit("b"), "type": "final"}}})
    t.clear()
    actor.send("EV")
    assert actor.snapshot.status == "done"
    assert t == ["exit:a", "enter:b", "exit:b", "exit:root"]


async def test_exit_actions_in_reverse_document_order_on_parallel_completion():
    t = Trace()
    actor, _ = run({"type": "parallel", **t.entry_exit("root"), "states": {
        "a": {**t.entry_exit("a"), "initial": "a1", "states": {
            "a1": {**t.entry_exit("a1"), "on": {"EV2": "a2"}}, "a2": {**t.entry_exit("a2"), "type": "final"}}},
        "b": {**t.entry_exit("b"), "initial": "b1", "states": {
            "b1": {**t.entry_exit("b1"), "on": {"EV1": "b2"}}, "b2": {**t.entry_exit("b2"), "type": "final"}}}}})
    actor.send("EV1")
    t.clear()
    actor.send("EV2")
    assert t == ["exit:a1", "enter:a2", "exit:b2", "exit:b", "exit:a2", "exit:a", "exit:root"]


def test_done_status_and_output_survive_to_json_restore():
    from jr2ray.chart import restore
    m, s, _ = pure({"initial": "a", "context": {"x": 1}, "states": {"a": {"on": {"END": "b"}}, "b": {"type": "final"}},
                    "output": lambda context: {"x": context["x"]}}, ["END"])
    r = restore(m, s.to_json())
    assert r.status == "done" and r.output == {"x": 1}


def test_root_that_is_itself_final_is_done_at_once():
    _, s, _ = pure({"id": "m", "type": "final", "output": lambda event: event.type})
    assert s.status == "done"
    assert s.output == "xstate.done.state.m"


def test_parallel_root_output_gets_done_event_of_the_root():
    _, s, _ = pure({"id": "m", "type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {"type": "final"}}},
        "b": {"initial": "b1", "states": {"b1": {"on": {"E": "b2"}}, "b2": {"type": "final"}}}},
        "output": lambda event: event.type}, ["E"])
    assert s.status == "done"
    assert s.output == "xstate.done.state.m"
