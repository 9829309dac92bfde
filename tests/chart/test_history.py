"""History states: shallow, deep, default targets."""
from chart_helpers import Trace, run_calls

from jr2ray.chart import create_machine, initial_transition, transition


def _walk(config, events):
    m = create_machine(config)
    s, _ = initial_transition(m)
    for e in events:
        s, _ = transition(m, s, e)
    return s


def _power(hist):
    return {"id": "power", "initial": "on", "states": {
        "on": {"initial": "first", "states": {
            "first": {"on": {"SWITCH": "second"}},
            "second": {"on": {"SWITCH": "third"}},
            "third": {},
            "hist": hist}, "on": {"POWER": "off", "H_POWER": "off"}},
        "off": {"on": {"POWER": "on", "H_POWER": "on.hist"}}}}


def test_shallow_history_explicit_type():
    s = _walk(_power({"type": "history", "history": "shallow"}), ["SWITCH", "POWER", "H_POWER"])
    assert s.value == {"on": "second"}


def test_history_without_explicit_kind_is_shallow():
    s = _walk(_power({"type": "history"}), ["SWITCH", "POWER", "H_POWER"])
    assert s.value == {"on": "second"}


def test_plain_target_ignores_history():
    s = _walk(_power({"type": "history"}), ["SWITCH", "POWER", "POWER"])
    assert s.value == {"on": "first"}


def test_history_without_visit_goes_to_initial():
    s = _walk({"initial": "off", "states": {
        "on": {"initial": "first", "states": {"first": {}, "second": {}, "hist": {"type": "history"}}},
        "off": {"on": {"H_POWER": "on.hist"}}}}, ["H_POWER"])
    assert s.value == {"on": "first"}


def test_history_default_target_when_never_visited():
    s = _walk({"initial": "off", "states": {
        "on": {"initial": "first", "states": {"first": {}, "second": {},
                                              "hist": {"type": "history", "target": "second"}}},
        "off": {"on": {"H_POWER": "on.hist"}}}}, ["H_POWER"])
    assert s.value == {"on": "second"}


def test_history_remembers_after_transient_transition():
    s = _walk({"initial": "idle", "states": {
        "idle": {"on": {"GO": "work"}},
        "work": {"initial": "start", "states": {
            "start": {"always": "middle"}, "middle": {"on": {"END": "end"}}, "end": {},
            "hist": {"type": "history"}}, "on": {"LEAVE": "away"}},
        "away": {"on": {"BACK": "work.hist"}}}}, ["GO", "LEAVE", "BACK"])
    assert s.value == {"work": "middle"}


def test_reentering_transition_to_history_restores_stored_state():
    s = _walk({"initial": "a", "states": {"a": {"initial": "a1", "states": {
        "a1": {"on": {"NEXT": "a2"}}, "a2": {}, "h": {"type": "history"}},
        "on": {"REENTER": {"target": ".h", "reenter": True}}}}}, ["NEXT", "REENTER"])
    assert s.value == {"a": "a2"}


DEEP = {"id": "m", "initial": "on", "states": {
    "off": {"on": {"SHALLOW": "on.shallowH", "DEEP": "on.deepH"}},
    "on": {"initial": "first", "on": {"POWER": "off"}, "states": {
        "first": {"on": {"SWITCH": "second"}},
        "second": {"initial": "A", "states": {
            "A": {"on": {"INNER": "B"}},
            "B": {"initial": "P", "states": {"P": {"on": {"INNER": "Q"}}, "Q": {}}}}},
        "shallowH": {"type": "history", "history": "shallow"},
        "deepH": {"type": "history", "history": "deep"}}}}}


def test_shallow_history_restores_only_first_level():
    s = _walk(DEEP, ["SWITCH", "INNER", "INNER", "POWER", "SHALLOW"])
    assert s.value == {"on": {"second": "A"}}


def test_deep_history_restores_full_configuration():
    s = _walk(DEEP, ["SWITCH", "INNER", "INNER", "POWER", "DEEP"])
    assert s.value == {"on": {"second": {"B": "Q"}}}


def test_deep_history_at_intermediate_depth():
    s = _walk(DEEP, ["SWITCH", "INNER", "POWER", "DEEP"])
    assert s.value == {"on": {"second": {"B": "P"}}}


PAR = {"initial": "on", "states": {
    "off": {"on": {"DEEP": "on.deepH", "SHALLOW": "on.shallowH", "PLAIN": "on"}},
    "on": {"type": "parallel", "on": {"POWER": "off"}, "states": {
        "A": {"initial": "a1", "states": {"a1": {"on": {"NA": "a2"}}, "a2": {"initial": "x", "states": {
            "x": {"on": {"NX": "y"}}, "y": {}}}}},
        "B": {"initial": "b1", "states": {"b1": {"on": {"NB": "b2"}}, "b2": {}}},
        "shallowH": {"type": "history", "history": "shallow"},
        "deepH": {"type": "history", "history": "deep"}}}}}


def test_deep_history_in_parallel_restores_every_region():
    s = _walk(PAR, ["NA", "NX", "NB", "POWER", "DEEP"])
    assert s.value == {"on": {"A": {"a2": "y"}, "B": "b2"}}


def test_shallow_history_in_parallel_reenters_regions_from_their_initial_children():
    s = _walk(PAR, ["NA", "NX", "NB", "POWER", "SHALLOW"])
    # shallow history of a parallel state remembers only the regions; each is entered at its initial state
    assert s.value == {"on": {"A": "a1", "B": "b1"}}


def test_plain_transition_into_parallel_uses_initials():
    s = _walk(PAR, ["NA", "NB", "POWER", "PLAIN"])
    assert s.value == {"on": {"A": "a1", "B": "b1"}}


def test_history_target_enters_parent_entry_actions():
    t = Trace()
    m = create_machine({"initial": "off", "states": {
        "on": {"entry": t.act("enter on"), "initial": "first", "states": {
            "first": {"entry": t.act("enter first")}, "second": {"entry": t.act("enter second")},
            "hist": {"type": "history", "target": "second"}}},
        "off": {"on": {"H": "on.hist"}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "H")
    run_calls(eff)
    assert t == ["enter on", "enter second"]


def test_history_recorded_in_snapshot_and_survives_restore():
    from jr2ray.chart import restore
    m = create_machine(_power({"type": "history"}))
    s, _ = initial_transition(m)
    for e in ["SWITCH", "SWITCH", "POWER"]:
        s, _ = transition(m, s, e)
    assert s.history
    r = restore(m, s.to_json())
    r2, _ = transition(m, r, "H_POWER")
    assert r2.value == {"on": "third"}


def test_multistage_history():
    s = _walk({"initial": "running", "states": {
        "running": {"initial": "s1", "on": {"PAUSE": "paused"}, "states": {
            "s1": {"on": {"N": "s2"}}, "s2": {"on": {"N": "s3"}}, "s3": {}, "h": {"type": "history"}}},
        "paused": {"on": {"RESUME": "running.h"}}}}, ["N", "PAUSE", "RESUME", "N", "PAUSE", "RESUME"])
    assert s.value == {"running": "s3"}


def _door(t):
    return {"initial": "closed", "states": {
        "closed": {"id": "closed", **t.entry_exit("closed"), "on": {"CLICK": "open.hist"}},
        "open": {**t.entry_exit("open"), "on": {"CLICK": "closed"}, "initial": "first", "states": {
            "hist": {"type": "history"},
            "first": {**t.entry_exit("open.first"), "on": {"NEXT": "second"}},
            "second": {**t.entry_exit("open.second"), "on": {"CLOSE": "#closed"}}}}}}


def test_history_default_entry_enters_only_inside_the_domain():
    t = Trace()
    m = create_machine(_door(t))
    s, _ = initial_transition(m)
    t.clear()
    s, eff = transition(m, s, "CLICK")
    run_calls(eff)
    assert s.value == {"open": "first"}
    assert t == ["exit:closed", "enter:open", "enter:open.first"]


def test_history_restore_enters_only_inside_the_domain():
    t = Trace()
    m = create_machine(_door(t))
    s, _ = initial_transition(m)
    for e in ["CLICK", "NEXT", "CLOSE"]:
        s, _ = transition(m, s, e)
    t.clear()
    s, eff = transition(m, s, "CLICK")
    run_calls(eff)
    assert s.value == {"open": "second"}
    assert t == ["exit:closed", "enter:open", "enter:open.second"]


def test_multiple_history_targets_in_parallel_regions():
    s = _walk({"initial": "off", "states": {
        "off": {"on": {"SWITCH": "on", "BOTH": {"target": ["on.A.hist", "on.K.hist"]}}},
        "on": {"type": "parallel", "on": {"POWER": "off"}, "states": {
            "A": {"initial": "B", "states": {
                "B": {"on": {"INNER_A": "C"}},
                "C": {"initial": "D", "states": {"D": {"on": {"INNER_A": "E"}}, "E": {}}},
                "hist": {"type": "history"}}},
            "K": {"initial": "L", "states": {
                "L": {"on": {"INNER_K": "M"}},
                "M": {"initial": "N", "states": {"N": {"on": {"INNER_K": "O"}}, "O": {}}},
                "hist": {"type": "history"}}}}}}},
        ["SWITCH", "INNER_A", "INNER_A", "INNER_K", "INNER_K", "POWER", "BOTH"])
    assert s.value == {"on": {"A": {"C": "D"}, "K": {"M": "N"}}}


def test_internal_transition_to_history_of_never_exited_state_uses_initial():
    s = _walk({"initial": "first", "states": {
        "first": {"on": {"NEXT": "second.other"}},
        "second": {"initial": "nested", "on": {"NEXT": ".hist"}, "states": {
            "nested": {}, "other": {}, "hist": {"type": "history"}}}}}, ["NEXT", "NEXT"])
    assert s.value == {"second": "nested"}


def test_deep_history_default_target_nested():
    s = _walk({"initial": "off", "states": {
        "off": {"on": {"ON": "on.h"}},
        "on": {"initial": "a", "states": {
            "a": {},
            "b": {"initial": "b1", "states": {"b1": {}, "b2": {}}},
            "h": {"type": "history", "history": "deep", "target": "b.b2"}}}}}, ["ON"])
    assert s.value == {"on": {"b": "b2"}}
