"""Macrostep: always loops, then raised internal events, until stable; then the next external event."""
from chart_helpers import Trace, pure, run

from jr2ray.chart import Interpreter, ManualClock, assign, create_machine, initial_transition, raise_, transition


def test_raised_event_processed_within_the_same_transition_call():
    m = create_machine({"initial": "a", "states": {
        "a": {"on": {"E": {"target": "b", "actions": raise_({"type": "NEXT"})}}},
        "b": {"on": {"NEXT": "c"}}, "c": {}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "E")
    assert s.value == "c"


def test_raised_events_are_fifo():
    _, s, _ = pure({"initial": "a", "context": {"seen": []}, "states": {"a": {"on": {
        "E": {"actions": [raise_({"type": "ONE"}), raise_({"type": "TWO"}), raise_({"type": "THREE"})]},
        "ONE": {"actions": assign(seen=lambda context: context["seen"] + ["one"])},
        "TWO": {"actions": assign(seen=lambda context: context["seen"] + ["two"])},
        "THREE": {"actions": assign(seen=lambda context: context["seen"] + ["three"])}}}}}, ["E"])
    assert s.context["seen"] == ["one", "two", "three"]


def test_raised_events_chain_through_states():
    _, s, _ = pure({"initial": "a", "states": {
        "a": {"on": {"E": {"target": "b", "actions": [raise_({"type": "X"}), raise_({"type": "Y"})]}}},
        "b": {"on": {"X": "c"}}, "c": {"on": {"Y": "d"}}, "d": {}}}, ["E"])
    assert s.value == "d"


def test_always_runs_between_raised_events():
    _, s, _ = pure({"initial": "a", "context": {"trail": []}, "states": {
        "a": {"on": {"E": {"target": "b", "actions": raise_({"type": "R"})}}},
        "b": {"always": {"target": "c", "actions": assign(trail=lambda context: context["trail"] + ["always"])},
              "on": {"R": {"target": "wrong"}}},
        "c": {"on": {"R": {"target": "d", "actions": assign(trail=lambda context: context["trail"] + ["R"])}}},
        "d": {}, "wrong": {}}}, ["E"])
    assert s.value == "d"
    assert s.context["trail"] == ["always", "R"]


def test_initial_macrostep_processes_entry_raise():
    _, s, _ = pure({"initial": "a", "states": {"a": {"entry": raise_({"type": "GO"}), "on": {"GO": "b"}}, "b": {}}})
    assert s.value == "b"


def test_raise_with_callable_event():
    _, s, _ = pure({"initial": "a", "context": {"target": "b"}, "states": {
        "a": {"on": {"E": {"actions": raise_(lambda context: {"type": "TO_" + context["target"].upper()})},
                     "TO_B": "b"}}, "b": {}}}, ["E"])
    assert s.value == "b"


def test_unhandled_raised_event_is_dropped():
    _, s, _ = pure({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {
        "E": {"actions": [raise_({"type": "NOBODY"}), assign(n=1)]}}}}}, ["E"])
    assert s.value == "a" and s.context["n"] == 1


async def test_raised_event_handled_before_next_external_event():
    actor, _ = run({"initial": "a", "context": {"trail": []}, "states": {"a": {"on": {
        "E": {"actions": raise_({"type": "R"})},
        "R": {"actions": assign(trail=lambda context: context["trail"] + ["R"])},
        "F": {"actions": assign(trail=lambda context: context["trail"] + ["F"])}}}}})
    actor.send("E")
    actor.send("F")
    assert actor.snapshot.context["trail"] == ["R", "F"]


async def test_event_sent_from_custom_action_is_queued_after_macrostep():
    clock = ManualClock(start_ms=0)
    holder = {}
    t = Trace()

    def resend():
        t.append("custom")
        holder["actor"].send("SECOND")
        t.append("custom returned")

    m = create_machine({"initial": "a", "states": {
        "a": {"on": {"FIRST": {"target": "b", "actions": resend}}},
        "b": {"entry": t.act("enter b"), "on": {"SECOND": {"target": "c", "actions": t.act("second")}}},
        "c": {}}})
    actor = Interpreter(m, clock=clock)
    holder["actor"] = actor
    seen = []
    actor.subscribe(lambda snap: seen.append(snap.value))
    actor.start()
    actor.send("FIRST")
    await actor.settled()
    assert actor.snapshot.value == "c"
    assert t.index("custom returned") < t.index("second")
    assert seen[-2:] == ["b", "c"]


async def test_subscribers_called_once_per_macrostep():
    seen = []
    actor, _ = run({"initial": "a", "states": {"a": {"on": {"E": "b"}}, "b": {"always": "c"},
                                                "c": {"entry": raise_({"type": "R"}), "on": {"R": "d"}}, "d": {}}})
    actor.subscribe(lambda snap: seen.append(snap.value))
    actor.send("E")
    assert seen == ["d"]


async def test_delayed_raise_is_not_processed_in_same_macrostep():
    actor, clock = run({"initial": "a", "states": {"a": {"on": {
        "E": {"actions": raise_({"type": "LATER"}, delay=10)}, "LATER": "b"}}, "b": {}}})
    actor.send("E")
    assert actor.snapshot.value == "a"
    clock.advance(10)
    assert actor.snapshot.value == "b"


def test_always_loop_sees_assigns_of_previous_iterations():
    _, s, _ = pure({"initial": "a", "context": {"n": 0, "log": []}, "states": {"a": {
        "on": {"START": "count"}}, "count": {"always": [
            {"target": "done", "guard": lambda context: context["n"] >= 3},
            {"actions": assign(n=lambda context: context["n"] + 1,
                               log=lambda context: context["log"] + [context["n"]])}]},
        "done": {}}}, ["START"])
    assert s.value == "done"
    assert s.context["log"] == [0, 1, 2]
