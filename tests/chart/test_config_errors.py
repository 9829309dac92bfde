"""ChartConfigError at create_machine, naming the state path and the offending name."""
import pytest

from jr2ray.chart import ChartConfigError, create_machine, from_promise, initial_transition, transition


def _err(config, **opts):
    with pytest.raises(ChartConfigError) as ei:
        create_machine(config, **opts)
    return str(ei.value)


def test_unknown_target_names_state_and_target():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"initial": "x", "states": {
        "x": {"on": {"GO": "nowhere"}}}}}})
    assert "a.x" in msg and "nowhere" in msg


def test_unknown_id_target():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "#ghost"}}}})
    assert "ghost" in msg and "a" in msg


def test_unknown_child_target():
    msg = _err({"id": "m", "initial": "p", "states": {"p": {"initial": "c", "on": {"GO": ".missing"},
                                                           "states": {"c": {}}}}})
    assert "missing" in msg and "p" in msg


def test_compound_without_initial():
    msg = _err({"id": "m", "initial": "outer", "states": {"outer": {"states": {"one": {}, "two": {}}}}})
    assert "outer" in msg


def test_initial_naming_no_child():
    msg = _err({"id": "m", "initial": "outer", "states": {"outer": {"initial": "zzz", "states": {"one": {}}}}})
    assert "outer" in msg and "zzz" in msg


def test_root_initial_naming_no_child():
    msg = _err({"id": "m", "initial": "nope", "states": {"a": {}}})
    assert "nope" in msg


def test_non_callable_guard():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"target": "b", "guard": 42}}}, "b": {}}})
    assert "m.a" in msg or "a" in msg


def test_non_callable_action():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"entry": [42]}}})
    assert "a" in msg


def test_guard_with_unknown_parameter_name():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"initial": "in", "states": {
        "in": {"on": {"GO": {"target": "out", "guard": lambda ctx: True}}}, "out": {}}}}})
    assert "a.in" in msg and "ctx" in msg


def test_action_with_unknown_parameter_name():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"entry": lambda state: None}}})
    assert "state" in msg and "a" in msg


def test_assign_callable_with_unknown_parameter_name():
    from jr2ray.chart import assign
    msg = _err({"id": "m", "initial": "a",
                "states": {"b": {}, "a": {"on": {"E": {"actions": assign(x=lambda ev: 1)}}}}})
    assert "ev" in msg


def test_context_callable_with_unknown_parameter():
    msg = _err({"id": "m", "initial": "a", "context": lambda inp: {}, "states": {"a": {}}})
    assert "inp" in msg


def test_unknown_named_guard():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"target": "b", "guard": "notThere"}}},
                                                    "b": {}}})
    assert "notThere" in msg and "a" in msg


def test_unknown_named_action():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"entry": "mystery"}}})
    assert "mystery" in msg


def test_unknown_actor_src():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"invoke": {"src": "phantom", "id": "p"}}}})
    assert "phantom" in msg and "a" in msg


def test_unknown_named_delay():
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"after": {"someDelay": "b"}}, "b": {}}})
    assert "someDelay" in msg


def test_unknown_target_inside_parallel_region():
    msg = _err({"id": "m", "type": "parallel", "states": {"r": {"initial": "x", "states": {
        "x": {"always": "y"}}}}})
    assert "r.x" in msg and "y" in msg


def test_valid_machine_with_all_injectable_names_builds():
    create_machine({"id": "m", "initial": "a", "context": lambda input: {},
                    "states": {"a": {"on": {"E": {"guard": lambda context, event, params, chain, input: True,
                                                   "target": "a"}}}}})


def test_valid_machine_with_actor_builds():
    async def f():
        return 1

    m = create_machine({"id": "m", "initial": "a", "states": {"a": {"invoke": {"src": "f", "id": "f"}}}},
                       actors={"f": from_promise(f)})
    assert m is not None


def test_several_targets_outside_different_regions_of_one_parallel_state():
    # Two children of the compound root, and a state with its own descendant: each would enter an invalid
    # configuration (xstate accepts both and then reports two children of one compound state as active).
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"target": ["#m.b", "#m.c"]}}},
                                                       "b": {}, "c": {}}})
    assert "m.a on 'GO'" in msg and "m.b" in msg and "m.c" in msg
    msg = _err({"id": "m", "initial": "p", "states": {"p": {"type": "parallel", "states": {
        "r1": {"initial": "x", "states": {"x": {"on": {"GO": {"target": ["#m.p.r1", "#m.p.r1.x"]}}}}},
        "r2": {}}}}})
    assert "m.p.r1.x on 'GO'" in msg


def test_several_targets_in_different_regions_load():
    m = create_machine({"id": "m", "initial": "a", "states": {
        "a": {"on": {"GO": {"target": ["#m.p.r1.y", "#m.p.r2.w"]}}},
        "p": {"type": "parallel", "states": {
            "r1": {"initial": "x", "states": {"x": {}, "y": {}}},
            "r2": {"initial": "v", "states": {"v": {}, "w": {}}}}}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "GO")
    assert s.value == {"p": {"r1": "y", "r2": "w"}}


def test_the_same_target_twice_loads_and_is_entered_once():
    t = []
    m = create_machine({"id": "m", "initial": "a", "states": {
        "a": {"on": {"GO": {"target": ["b", "b"]}}}, "b": {"entry": lambda: t.append("b")}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "GO")
    for e in eff:
        if type(e).__name__ == "CallAction":
            e.fn()
    assert s.value == "b" and t == ["b"]


def test_a_misspelt_state_transition_or_invoke_key_is_refused_naming_where_and_the_key():
    assert _err({"id": "m", "initial": "a", "states": {"a": {"onn": {}}}}) == "m.a: unknown state key(s) ['onn']"
    assert _err({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": {"taget": "a"}}}}}) == \
        "m.a on 'GO': unknown transition key(s) ['taget']"
    msg = _err({"id": "m", "initial": "a", "states": {"a": {"invoke": {"src": "w", "ondone": "a"}}}},
               actors={"w": from_promise(lambda: None)})
    assert msg.endswith("unknown invoke key(s) ['ondone']") and "a" in msg
