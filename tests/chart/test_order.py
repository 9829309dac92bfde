"""Microstep order: exits (deepest first; exit actions then stop invokes), transition actions,
entries (document order; entry actions then invokes), then done events."""
from chart_helpers import Trace, kind, of_kind, pure, run, run_calls

from jr2ray.chart import assign, create_machine, from_callback, initial_transition, log, raise_, send_to, transition


def _nested(t):
    return {"initial": "a", **t.entry_exit("root"), "states": {
        "a": {**t.entry_exit("a"), "initial": "a1", "states": {
            "a1": {**t.entry_exit("a1"), "initial": "a11", "states": {"a11": t.entry_exit("a11")}}},
            "on": {"GO": {"target": "b", "actions": t.act("transition")}}},
        "b": {**t.entry_exit("b"), "initial": "b1", "states": {
            "b1": {**t.entry_exit("b1"), "initial": "b11", "states": {"b11": t.entry_exit("b11")}}}}}}


def test_initial_entry_in_document_order():
    t = Trace()
    _, _, eff = pure(_nested(t))
    run_calls(eff)
    assert t == ["enter:root", "enter:a", "enter:a1", "enter:a11"]


def test_exit_deepest_first_then_transition_then_entry():
    t = Trace()
    m = create_machine(_nested(t))
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "GO")
    run_calls(eff)
    assert t == ["exit:a11", "exit:a1", "exit:a", "transition", "enter:b", "enter:b1", "enter:b11"]


def _invoking(t):
    return {"id": "m", "initial": "p", "states": {
        "p": {"exit": t.act("exit p"), "entry": t.act("enter p"), "invoke": {"src": "cb", "id": "pInv"},
              "initial": "c", "states": {"c": {"exit": t.act("exit c"), "entry": t.act("enter c"),
                                               "invoke": {"src": "cb", "id": "cInv"}}},
              "on": {"OUT": {"target": "q", "actions": t.act("transition")}}},
        "q": {"entry": t.act("enter q"), "invoke": {"src": "cb", "id": "qInv"}}}}


def _labels(eff, t):
    out = []
    for e in eff:
        k = kind(e)
        if k == "CallAction":
            before = len(t)
            e.fn(**(e.kwargs or {}))
            out.extend(t[before:])
        elif k == "StartChild":
            out.append(f"start {e.id}")
        elif k == "StopChild":
            out.append(f"stop {e.id}")
    return out


def test_entry_actions_precede_invokes_in_document_order():
    t = Trace()
    m = create_machine(_invoking(t), actors={"cb": from_callback(lambda: None)})
    _, eff = initial_transition(m)
    assert _labels(eff, t) == ["enter p", "start pInv", "enter c", "start cInv"]


def test_exit_actions_then_stop_invokes_deepest_first():
    t = Trace()
    m = create_machine(_invoking(t), actors={"cb": from_callback(lambda: None)})
    s, _ = initial_transition(m)
    t.clear()
    s, eff = transition(m, s, "OUT")
    assert _labels(eff, t) == ["exit c", "stop cInv", "exit p", "stop pInv", "transition", "enter q", "start qInv"]


def test_mixed_custom_and_builtin_actions_keep_definition_order():
    t = Trace()
    m = create_machine({"initial": "a", "states": {"a": {"on": {"E": {"actions": [
        t.act("one"), log("two"), t.act("three")]}}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    kinds = [kind(e) for e in eff if kind(e) in ("CallAction", "LogEffect")]
    assert kinds == ["CallAction", "LogEffect", "CallAction"]
    assert of_kind(eff, "LogEffect")[0].value == "two"


async def test_interpreter_runs_custom_actions_in_order():
    t = Trace()
    actor, _ = run(_nested(t))
    assert t == ["enter:root", "enter:a", "enter:a1", "enter:a11"]
    t.clear()
    actor.send("GO")
    assert t == ["exit:a11", "exit:a1", "exit:a", "transition", "enter:b", "enter:b1", "enter:b11"]


async def test_raised_event_transition_actions_get_raised_event():
    seen = []
    actor, _ = run({"initial": "a", "states": {"a": {"on": {
        "E": {"actions": raise_({"type": "RAISED", "k": 1})},
        "RAISED": {"target": "b", "actions": lambda event: seen.append((event.type, event.k))}}}, "b": {}}})
    actor.send("E")
    assert actor.snapshot.value == "b"
    assert seen == [("RAISED", 1)]


def test_raised_event_builtin_actions_get_raised_event():
    _, s, _ = pure({"initial": "a", "context": {}, "states": {"a": {"on": {
        "E": {"actions": raise_({"type": "RAISED", "k": 2})},
        "RAISED": {"actions": assign(k=lambda event: event.k)}}}}}, ["E"])
    assert s.context["k"] == 2


def test_done_event_after_entries_of_same_microstep():
    t = Trace()
    m = create_machine({"initial": "p", "states": {
        "p": {"initial": "x", "onDone": {"target": "q", "actions": t.act("onDone")},
              "states": {"x": {"on": {"FIN": "f"}}, "f": {"type": "final", "entry": t.act("enter f")}}},
        "q": {"entry": t.act("enter q")}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "FIN")
    run_calls(eff)
    assert s.value == "q"
    assert t == ["enter f", "onDone", "enter q"]


def test_parallel_entry_and_exit_order_with_actions():
    t = Trace()
    m = create_machine({"initial": "p", "states": {
        "p": {"type": "parallel", **t.entry_exit("p"),
              "on": {"OUT": {"target": "q", "actions": t.act("T")}}, "states": {
            "r1": {**t.entry_exit("r1"), "initial": "x", "states": {"x": t.entry_exit("r1.x")}},
            "r2": {**t.entry_exit("r2"), "initial": "y", "states": {"y": t.entry_exit("r2.y")}}}},
        "q": t.entry_exit("q")}})
    s, eff = initial_transition(m)
    run_calls(eff)
    assert t == ["enter:p", "enter:r1", "enter:r1.x", "enter:r2", "enter:r2.y"]
    t.clear()
    s, eff = transition(m, s, "OUT")
    run_calls(eff)
    assert t == ["exit:r2.y", "exit:r2", "exit:r1.x", "exit:r1", "exit:p", "T", "enter:q"]


def test_send_to_effect_follows_action_order():
    t = Trace()
    m = create_machine({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"}, "on": {"E": {"actions": [
        t.act("before"), send_to("c", {"type": "HELLO"}), t.act("after")]}}}}},
        actors={"cb": from_callback(lambda: None)})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    kinds = [kind(e) for e in eff if kind(e) in ("CallAction", "SendTo")]
    assert kinds == ["CallAction", "SendTo", "CallAction"]
    st = of_kind(eff, "SendTo")[0]
    ev = st.event
    assert (ev["type"] if isinstance(ev, dict) else ev.type) == "HELLO"
    assert st.target == "c"


def test_call_action_effect_carries_declared_kwargs_only():
    m = create_machine({"initial": "a", "context": {"n": 1}, "states": {"a": {"on": {"E": {"actions": [
        lambda context: None, lambda: None, lambda event, context: None]}}}}})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    calls = of_kind(eff, "CallAction")
    assert [sorted((c.kwargs or {}).keys()) for c in calls] == [["context"], [], ["context", "event"]]


def test_named_custom_action_effect_has_its_name():
    m = create_machine({"initial": "a", "states": {"a": {"on": {"E": {"actions": "track"}}}}},
                       actions={"track": lambda: None})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    calls = of_kind(eff, "CallAction")
    assert len(calls) == 1 and calls[0].name == "track"


def test_reentering_transition_order_including_invokes():
    t = Trace()
    m = create_machine({"initial": "a", "states": {"a": {
        "entry": t.act("enter a"), "exit": t.act("exit a"), "invoke": {"src": "cb", "id": "inv"},
        "on": {"AGAIN": {"target": "a", "reenter": True, "actions": t.act("T")}}}}},
        actors={"cb": from_callback(lambda: None)})
    s, _ = initial_transition(m)
    t.clear()
    s, eff = transition(m, s, "AGAIN")
    assert _labels(eff, t) == ["exit a", "stop inv", "T", "enter a", "start inv"]


async def test_actions_of_always_chain_and_entries_interleave_in_interpreter():
    t = Trace()
    actor, _ = run({"initial": "a", "states": {
        "a": {"on": {"GO": {"target": "b", "actions": t.act("go")}}, "exit": t.act("exit a")},
        "b": {"entry": t.act("enter b"), "exit": t.act("exit b"),
              "always": {"target": "c", "actions": t.act("always")}},
        "c": {"entry": t.act("enter c")}}})
    actor.send("GO")
    assert t == ["exit a", "go", "enter b", "exit b", "always", "enter c"]
