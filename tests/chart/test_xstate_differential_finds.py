"""Charts the differential tier (tests/xstate) found jr2ray and xstate 5.33 disagreeing on, shrunk by hand.

Each expected outcome is what real xstate 5.33.3 gives for the same chart (createActor, one send per event).
"""
from chart_helpers import run_calls
from jr2ray.chart import assign, create_machine, initial_transition, transition


def _replay(config, events):
    m = create_machine(config)
    s, eff = initial_transition(m)
    run_calls(eff)
    out = [s]
    for ev in events:
        s, eff = transition(m, s, ev)
        run_calls(eff)
        out.append(s)
    return out


def test_a_region_exited_and_entered_again_keeps_its_place_in_the_entry_order():
    """`d`'s always exits and enters `d.f` again: the set of active nodes is unchanged, so xstate keeps the old
    order and `d` (entered first) still goes before `h` in the next eventless round."""
    seen = []

    def note(context):
        seen.append(("d", context["v"]))

    cfg = {"id": "m", "initial": "c", "context": {"v": 0}, "states": {"c": {"type": "parallel", "states": {
        "d": {"initial": "f", "always": {"target": ".f", "actions": note}, "states": {"f": {}}},
        "h": {"initial": "k", "states": {"k": {"always": {
            "guard": lambda context: context["v"] < 3, "actions": assign(v=lambda context: context["v"] + 1)}}}},
    }}}}
    snaps = _replay(cfg, [])
    assert snaps[0].context == {"v": 3}
    assert seen == [("d", 0), ("d", 1), ("d", 2), ("d", 3)]


def test_entry_order_still_moves_when_the_set_of_active_nodes_changes():
    """Leaving `x` for `y` changes the set, so `y` goes last in the entry order (r2's always runs first)."""
    seen = []
    inc = assign(n=lambda context: context["n"] + 1)
    once = {"guard": lambda context: context["n"] == 1}

    def tag(name):
        def act():
            seen.append(name)
        return act

    cfg = {"id": "m", "initial": "p", "context": {"n": 0}, "states": {"p": {"type": "parallel", "states": {
        "r1": {"initial": "x", "states": {
            "x": {"on": {"X": "y"}}, "y": {"always": {**once, "actions": [tag("y"), inc]}}}},
        "r2": {"on": {"X": {"actions": inc}}, "always": {**once, "actions": [tag("r2"), inc]}}}}}}
    _replay(cfg, ["X"])
    assert seen == ["r2", "y"]
