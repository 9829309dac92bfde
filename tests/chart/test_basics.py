"""Basic shape of snapshots, events, targets and the pure transition function."""
import copy

from chart_helpers import pure, run

from jr2ray.chart import Event, assign, create_machine, initial_transition, transition

LIGHT = {
    "id": "light",
    "initial": "green",
    "context": {"n": 0},
    "states": {
        "green": {"on": {"TIMER": "yellow"}},
        "yellow": {"on": {"TIMER": "red"}},
        "red": {"on": {"TIMER": "green"}},
    },
}


def test_initial_value_is_the_initial_child():
    _, s, _ = pure(LIGHT)
    assert s.value == "green"
    assert s.status == "active"
    assert s.context == {"n": 0}


def test_string_dict_and_event_object_are_all_accepted():
    m = create_machine(LIGHT)
    s, _ = initial_transition(m)
    s1, _ = transition(m, s, "TIMER")
    s2, _ = transition(m, s1, {"type": "TIMER"})
    s3, _ = transition(m, s2, Event("TIMER"))
    assert (s1.value, s2.value, s3.value) == ("yellow", "red", "green")


def test_unknown_event_changes_nothing_and_yields_no_effects():
    m = create_machine(LIGHT)
    s, _ = initial_transition(m)
    s2, eff = transition(m, s, "NOPE")
    assert s2.value == "green"
    assert s2.context == {"n": 0}
    assert list(eff) == []


def test_transition_does_not_mutate_the_given_snapshot():
    m = create_machine({
        "initial": "a", "context": {"items": [1], "n": 0},
        "states": {"a": {"on": {"GO": {"target": "b", "actions": assign(n=lambda context: context["n"] + 1)}}},
                   "b": {}},
    })
    s, _ = initial_transition(m)
    before_json = copy.deepcopy(s.to_json())
    s2, _ = transition(m, s, "GO")
    assert s.value == "a" and s.context["n"] == 0
    assert s.to_json() == before_json
    assert s2.value == "b" and s2.context["n"] == 1


def test_nested_value_is_a_dict_and_matches_accepts_paths_and_dicts():
    _, s, _ = pure({
        "id": "m", "initial": "a",
        "states": {"a": {"initial": "b", "states": {"b": {"initial": "c", "states": {"c": {}}}}}, "z": {}},
    })
    assert s.value == {"a": {"b": "c"}}
    assert s.matches("a")
    assert s.matches("a.b")
    assert s.matches("a.b.c")
    assert s.matches({"a": "b"})
    assert s.matches({"a": {"b": "c"}})
    assert not s.matches("z")
    assert not s.matches("a.c")


def test_parallel_value_lists_every_region():
    _, s, _ = pure({
        "type": "parallel",
        "states": {
            "left": {"initial": "l1", "states": {"l1": {}, "l2": {}}},
            "right": {"initial": "r1", "states": {"r1": {}, "r2": {}}},
            "flat": {},
        },
    })
    assert s.value == {"left": "l1", "right": "r1", "flat": {}}
    assert s.matches({"left": "l1", "right": "r1"})


def test_active_paths_include_the_atomic_state_path():
    _, s, _ = pure({"id": "m", "initial": "a", "states": {"a": {"initial": "b", "states": {"b": {}}}}})
    assert "m.a.b" in s.active_paths
    assert all(not p.endswith(".z") for p in s.active_paths)


def test_tags_of_active_states():
    _, s, _ = pure({
        "initial": "a",
        "states": {"a": {"tags": ["busy"], "initial": "x", "states": {"x": {"tags": ["inner"]}}, "on": {"GO": "b"}},
                   "b": {"tags": ["idle"]}},
    })
    assert s.has_tag("busy") and s.has_tag("inner")
    assert not s.has_tag("idle")


def test_tags_change_with_state():
    m = create_machine({"initial": "a", "states": {"a": {"tags": ["busy"], "on": {"GO": "b"}},
                                                   "b": {"tags": ["idle"]}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "GO")
    assert s.has_tag("idle") and not s.has_tag("busy")


def test_context_callable_receives_input():
    _, s, _ = pure({"initial": "a", "context": lambda input: {"x": input["x"] * 2}, "states": {"a": {}}},
                   input={"x": 21})
    assert s.context == {"x": 42}


def test_child_target_with_leading_dot():
    _, s, _ = pure({"initial": "p", "states": {"p": {"initial": "a", "on": {"GO": ".b"},
                                                     "states": {"a": {}, "b": {}}}}}, ["GO"])
    assert s.value == {"p": "b"}


def test_descendant_target_with_leading_dot():
    _, s, _ = pure({
        "initial": "p",
        "states": {"p": {"initial": "a", "on": {"GO": ".b.y"},
                         "states": {"a": {}, "b": {"initial": "x", "states": {"x": {}, "y": {}}}}}},
    }, ["GO"])
    assert s.value == {"p": {"b": "y"}}


def test_target_by_id():
    _, s, _ = pure({
        "id": "m", "initial": "a",
        "states": {"a": {"initial": "a1", "states": {"a1": {"on": {"GO": "#deep"}}}},
                   "b": {"initial": "b1", "states": {"b1": {}, "b2": {"id": "deep"}}}},
    }, ["GO"])
    assert s.value == {"b": "b2"}


def test_sibling_descendant_target():
    _, s, _ = pure({
        "initial": "a",
        "states": {"a": {"on": {"GO": "b.b2"}}, "b": {"initial": "b1", "states": {"b1": {}, "b2": {}}}},
    }, ["GO"])
    assert s.value == {"b": "b2"}


def test_root_transition_applies_from_any_descendant():
    _, s, _ = pure({
        "initial": "a", "on": {"RESET": ".z"},
        "states": {"a": {"initial": "a1", "states": {"a1": {}}}, "z": {}},
    }, ["RESET"])
    assert s.value == "z"


def test_event_payload_reads_as_attribute_and_item():
    _, s, _ = pure({
        "initial": "a", "context": {},
        "states": {"a": {"on": {"SET": {"actions": assign(x=lambda event: event.x, y=lambda event: event["y"])}}}},
    }, [{"type": "SET", "x": 1, "y": 2}])
    assert s.context == {"x": 1, "y": 2}


def test_event_from_any():
    e1 = Event.from_any("GO")
    e2 = Event.from_any({"type": "GO", "a": 1})
    assert e1.type == "GO"
    assert e2.type == "GO" and e2.a == 1 and e2["a"] == 1 and e2.payload == {"a": 1}


def test_event_sender_is_kept():
    _, s, _ = pure({
        "initial": "a", "context": {},
        "states": {"a": {"on": {"E": {"actions": assign(who=lambda event: event.sender)}}}},
    }, [Event("E", {"q": 1}, sender={"party": "gate", "id": "g"})])
    assert s.context["who"] == {"party": "gate", "id": "g"}


def test_machine_methods_match_module_functions():
    m = create_machine(LIGHT)
    s1, _ = m.initial_transition()
    s2, _ = initial_transition(m)
    assert s1.value == s2.value
    assert m.transition(s1, "TIMER")[0].value == transition(m, s2, "TIMER")[0].value == "yellow"


def test_event_on_a_done_snapshot_changes_nothing():
    m = create_machine({"initial": "a", "context": {"n": 0},
                        "on": {"BUMP": {"actions": assign(n=lambda context: context["n"] + 1)}},
                        "states": {"a": {"on": {"FIN": "end"}}, "end": {"type": "final"}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "FIN")
    assert s.status == "done"
    s2, eff = transition(m, s, "BUMP")
    assert s2.status == "done" and s2.context["n"] == 0 and list(eff) == []


async def test_interpreter_snapshot_and_subscribe():
    seen = []
    actor, _ = run(LIGHT)
    actor.subscribe(lambda snap: seen.append(snap.value))
    actor.send({"type": "TIMER"})
    actor.send("TIMER")
    assert actor.snapshot.value == "red"
    assert seen[-2:] == ["yellow", "red"]
    actor.stop()
