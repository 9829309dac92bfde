"""Eventless (`always`) transitions."""
from chart_helpers import Trace, pure, run

from jr2ray.chart import assign, create_machine, initial_transition, raise_, state_in, transition


def _chooser(ctx):
    return {
        "initial": "start", "context": ctx,
        "states": {
            "start": {"on": {"GO": "decide"}},
            "decide": {"always": [
                {"target": "low", "guard": lambda context: context["v"] < 10},
                {"target": "mid", "guard": lambda context: context["v"] < 100},
                {"target": "high"},
            ]},
            "low": {}, "mid": {}, "high": {},
        },
    }


def test_first_passing_candidate_is_taken():
    assert pure(_chooser({"v": 1}), ["GO"])[1].value == "low"


def test_second_candidate_when_first_fails():
    assert pure(_chooser({"v": 50}), ["GO"])[1].value == "mid"


def test_unguarded_fallback_when_no_guard_passes():
    assert pure(_chooser({"v": 500}), ["GO"])[1].value == "high"


def test_initial_state_with_always_resolves_in_initial_transition():
    _, s, _ = pure({"initial": "a", "states": {"a": {"always": "b"}, "b": {"always": "c"}, "c": {}}})
    assert s.value == "c"


def test_always_chain_runs_in_one_send():
    _, s, _ = pure({"initial": "idle", "states": {
        "idle": {"on": {"GO": "a"}}, "a": {"always": "b"}, "b": {"always": "c"}, "c": {}}}, ["GO"])
    assert s.value == "c"


def test_actions_of_all_steps_are_collected_in_order():
    t = Trace()
    _, s, eff = pure({"initial": "idle", "states": {
        "idle": {"on": {"GO": {"target": "a", "actions": t.act("go")}}},
        "a": {"entry": t.act("enter a"), "always": {"target": "b", "actions": t.act("always a")}},
        "b": {"entry": t.act("enter b")}}}, ["GO"])
    from chart_helpers import run_calls
    run_calls(eff)
    assert s.value == "b"
    assert t == ["go", "enter a", "always a", "enter b"]


def test_targetless_always_with_assign_loops_until_guard_fails():
    _, s, _ = pure({"initial": "counting", "context": {"count": 0}, "states": {"counting": {"always": {
        "guard": lambda context: context["count"] < 5,
        "actions": assign(count=lambda context: context["count"] + 1)}}}})
    assert s.context["count"] == 5


def test_always_reacts_to_a_change_in_another_region():
    _, s, _ = pure({"id": "m", "type": "parallel", "states": {
        "a": {"initial": "a1", "states": {"a1": {"on": {"E": "a2"}}, "a2": {}}},
        "b": {"initial": "b1", "states": {
            "b1": {"always": {"target": "b2", "guard": state_in("#m.a.a2")}}, "b2": {}}}}}, ["E"])
    assert s.value == {"a": "a2", "b": "b2"}


def test_always_guard_sees_triggering_event():
    seen = []

    def g(event):
        seen.append(event.type)
        return event.type == "GO" and event.n == 7

    _, s, _ = pure({"initial": "idle", "states": {
        "idle": {"on": {"GO": "check"}},
        "check": {"always": {"target": "yes", "guard": g}}, "yes": {}}}, [{"type": "GO", "n": 7}])
    assert s.value == "yes"
    assert "GO" in seen


def test_always_actions_see_triggering_event():
    _, s, _ = pure({"initial": "idle", "context": {}, "states": {
        "idle": {"on": {"GO": "check"}},
        "check": {"always": {"target": "done", "actions": assign(got=lambda event: event.payload.get("v"))}},
        "done": {}}}, [{"type": "GO", "v": "x"}])
    assert s.context["got"] == "x"


def test_always_is_taken_before_raised_events():
    _, s, _ = pure({"initial": "a", "states": {
        "a": {"on": {"FOO": "b"}},
        "b": {"entry": raise_({"type": "BAR"}), "always": "c", "on": {"BAR": "wrong"}},
        "c": {"on": {"BAR": "right"}},
        "wrong": {}, "right": {}}}, ["FOO"])
    assert s.value == "right"


def test_wildcard_is_not_an_eventless_transition():
    _, s, _ = pure({"initial": "a", "states": {
        "a": {"on": {"GO": "b"}},
        "b": {"on": {"*": "wild"}, "always": {"target": "c", "guard": lambda: False}},
        "c": {}, "wild": {}}}, ["GO"])
    assert s.value == "b"


def test_always_on_root():
    _, s, _ = pure({"initial": "a", "context": {"n": 0},
                    "always": {"target": ".done", "guard": lambda context: context["n"] >= 2},
                    "on": {"INC": {"actions": assign(n=lambda context: context["n"] + 1)}},
                    "states": {"a": {}, "done": {}}}, ["INC", "INC"])
    assert s.value == "done"


def test_always_taken_even_without_any_other_transitions():
    _, s, _ = pure({"initial": "a", "states": {"a": {"always": "b"}, "b": {}}})
    assert s.value == "b"


def test_fallback_target_inside_compound_does_not_loop():
    _, s, _ = pure({"initial": "idle", "states": {
        "idle": {"on": {"go": "active"}},
        "active": {"initial": "a", "states": {"a": {}, "b": {}},
                   "always": [{"guard": lambda: False, "target": ".a"}, {"target": ".b"}]}}}, ["go"])
    assert s.value == {"active": "b"}


def test_guarded_target_inside_compound_does_not_loop():
    _, s, _ = pure({"initial": "idle", "states": {
        "idle": {"on": {"go": "active"}},
        "active": {"initial": "b", "states": {"a": {}, "b": {}},
                   "always": [{"guard": lambda: True, "target": ".a"}, {"target": ".b"}]}}}, ["go"])
    assert s.value == {"active": "a"}


async def test_fire_and_forget_always_that_does_not_change_state_runs_once():
    t = Trace()
    actor, _ = run({"initial": "idle", "states": {
        "idle": {"on": {"go": "active"}},
        "active": {"initial": "a", "states": {"a": {}},
                   "always": {"target": ".a", "actions": t.act("always")}}}})
    actor.send("go")
    assert actor.snapshot.value == {"active": "a"}
    assert t == ["always"]


async def test_always_rechecked_after_raised_event_even_without_state_change():
    t = Trace()
    actor, _ = run({"always": {"actions": t.act("always")},
                    "on": {"EV": {"actions": raise_({"type": "RAISED"})},
                           "RAISED": {"actions": t.act("raised")}}})
    t.clear()
    actor.send("EV")
    assert t == ["always", "raised", "always"]


def test_guard_with_interim_context_from_always_assign():
    m = create_machine({"initial": "a", "context": {"n": 0}, "states": {
        "a": {"on": {"GO": {"target": "b", "actions": assign(n=10)}}},
        "b": {"always": [{"target": "big", "guard": lambda context: context["n"] > 5}, {"target": "small"}]},
        "big": {}, "small": {}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "GO")
    assert s.value == "big" and s.context["n"] == 10


def test_eventless_transitions_of_two_regions_taken_in_same_microstep():
    _, s, _ = pure({"type": "parallel", "context": {"log": []}, "states": {
        "A": {"initial": "A1", "states": {
            "A1": {"on": {"E": "A2"}},
            "A2": {"always": {"target": "A3", "actions": assign(log=lambda context: context["log"] + ["A"])}},
            "A3": {}}},
        "B": {"initial": "B1", "states": {
            "B1": {"on": {"E": "B2"}},
            "B2": {"always": {"target": "B3", "actions": assign(log=lambda context: context["log"] + ["B"])}},
            "B3": {}}}}}, ["E"])
    assert s.value == {"A": "A3", "B": "B3"}
    assert s.context["log"] == ["A", "B"]


def test_always_chained_through_state_in_across_regions():
    _, s, _ = pure({"id": "m", "type": "parallel", "states": {
        "A": {"initial": "A1", "states": {"A1": {"on": {"E": "A2"}}, "A2": {"always": "A3"}, "A3": {}}},
        "B": {"initial": "B1", "states": {
            "B1": {"always": {"target": "B2", "guard": state_in("#m.A.A3")}}, "B2": {}}}}}, ["E"])
    assert s.value == {"A": "A3", "B": "B2"}


def test_all_internal_events_processed_one_after_another():
    _, s, _ = pure({"type": "parallel", "states": {
        "X": {"initial": "x1", "states": {
            "x1": {"on": {"E": {"target": "x2", "actions": [raise_({"type": "P"}), raise_({"type": "Q"})]}}},
            "x2": {"on": {"Q": "x3"}}, "x3": {}}},
        "Y": {"initial": "y1", "states": {"y1": {"on": {"P": "y2"}}, "y2": {"on": {"Q": "y3"}}, "y3": {}}}}}, ["E"])
    assert s.value == {"X": "x3", "Y": "y3"}
