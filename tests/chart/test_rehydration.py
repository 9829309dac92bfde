"""to_json -> restore round trips, including timers and children."""
import json

from chart_helpers import Trace

from jr2ray.chart import (
    Interpreter,
    ManualClock,
    assign,
    can,
    create_machine,
    from_callback,
    initial_transition,
    restore,
    transition,
)

FLOW = {"id": "flow", "initial": "a", "context": {"n": 0}, "states": {
    "a": {"tags": ["start"], "on": {"NEXT": "b", "INC": {"actions": assign(n=lambda context: context["n"] + 1)}}},
    "b": {"initial": "b1", "states": {"b1": {"on": {"NEXT": "b2"}}, "b2": {"on": {"NEXT": "#flow.c"}}}},
    "c": {"type": "final"}}, "output": lambda context: context["n"]}


def test_to_json_is_plain_json():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    data = s.to_json()
    assert json.loads(json.dumps(data)) == data


def test_restore_round_trips_value_context_status():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    for e in ["INC", "INC", "NEXT", "NEXT"]:
        s, _ = transition(m, s, e)
    r = restore(m, json.loads(json.dumps(s.to_json())))
    assert r.value == s.value == {"b": "b2"}
    assert r.context == s.context == {"n": 2}
    assert r.status == "active"


def test_restored_snapshot_behaves_the_same():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "NEXT")
    r = restore(m, s.to_json())
    for e in ["NEXT", "NEXT"]:
        s, _ = transition(m, s, e)
        r, _ = transition(m, r, e)
        assert r.value == s.value and r.context == s.context
    assert r.status == s.status == "done"
    assert r.output == s.output == 0


def test_has_tag_and_can_immediately_after_restore():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    r = restore(m, s.to_json())
    assert r.has_tag("start")
    assert can(r, "NEXT") is True
    assert can(r, "NOPE") is False


def test_restore_then_to_json_is_identity():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "NEXT")
    data = s.to_json()
    assert restore(m, data).to_json() == data


def test_done_snapshot_restores_done():
    m = create_machine(FLOW)
    s, _ = initial_transition(m)
    for e in ["INC", "NEXT", "NEXT", "NEXT"]:
        s, _ = transition(m, s, e)
    r = restore(m, s.to_json())
    assert r.status == "done" and r.output == 1


async def test_restoring_does_not_replay_entry_actions():
    t = Trace()
    cfg = {"initial": "a", "states": {"a": {"entry": t.act("enter a"), "on": {"GO": "b"}},
                                     "b": {"entry": t.act("enter b")}}}
    m = create_machine(cfg)
    s, _ = initial_transition(m)
    actor = Interpreter(m, snapshot=restore(m, s.to_json()), clock=ManualClock())
    actor.start()
    assert t == []
    actor.send("GO")
    assert t == ["enter b"]


async def test_timer_persisted_and_fires_after_restore():
    m = create_machine({"id": "m", "initial": "wait", "states": {"wait": {"after": {1000: "late"}}, "late": {}}})
    clock = ManualClock(start_ms=0)
    a1 = Interpreter(m, clock=clock)
    a1.start()
    clock.advance(400)
    data = a1.snapshot.to_json()
    a1.stop()
    clock2 = ManualClock(start_ms=400)
    a2 = Interpreter(m, snapshot=restore(m, data), clock=clock2)
    a2.start()
    assert a2.snapshot.value == "wait"
    clock2.advance(599)
    assert a2.snapshot.value == "wait"
    clock2.advance(1)
    assert a2.snapshot.value == "late"


async def test_timer_past_deadline_fires_at_once_on_restore():
    m = create_machine({"id": "m", "initial": "wait", "states": {"wait": {"after": {1000: "late"}}, "late": {}}})
    s, _ = initial_transition(m, now_ms=0)
    data = s.to_json()
    clock = ManualClock(start_ms=5000)
    actor = Interpreter(m, snapshot=restore(m, data), clock=clock)
    actor.start()
    await actor.settled()
    clock.advance(0)
    assert actor.snapshot.value == "late"


def test_timers_round_trip_in_json():
    m = create_machine({"id": "m", "initial": "wait", "states": {"wait": {"after": {250: "late"}}, "late": {}}})
    s, _ = initial_transition(m, now_ms=1000)
    r = restore(m, s.to_json())
    assert [t.deadline_ms for t in r.timers.values()] == [1250]
    ev = next(iter(r.timers.values())).event
    assert (ev["type"] if isinstance(ev, dict) else ev.type) == "xstate.after.250.m.wait"


async def test_active_child_restarted_with_persisted_input():
    starts = []

    def cb(input):
        starts.append(input)

    m = create_machine({"initial": "a", "context": {"k": 1}, "states": {"a": {
        "invoke": {"src": "cb", "id": "c", "input": lambda context: {"k": context["k"]}},
        "on": {"BUMP": {"actions": assign(k=lambda context: context["k"] + 1)}}}}},
        actors={"cb": from_callback(cb)})
    a1 = Interpreter(m, clock=ManualClock())
    a1.start()
    await a1.settled()
    a1.send("BUMP")
    assert a1.snapshot.children["c"].input == {"k": 1}
    data = a1.snapshot.to_json()
    a1.stop()
    a2 = Interpreter(m, snapshot=restore(m, data), clock=ManualClock())
    a2.start()
    await a2.settled()
    assert starts == [{"k": 1}, {"k": 1}]
    assert a2.snapshot.children["c"].input == {"k": 1}


async def test_restored_child_still_delivers_events():
    def cb(send_back, receive):
        receive(lambda event: send_back({"type": "ECHO"}))

    from jr2ray.chart import send_to
    m = create_machine({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"},
                                                          "on": {"PING": {"actions": send_to("c", {"type": "X"})},
                                                                 "ECHO": "b"}}, "b": {}}},
                       actors={"cb": from_callback(cb)})
    s, _ = initial_transition(m)
    actor = Interpreter(m, snapshot=restore(m, s.to_json()), clock=ManualClock())
    actor.start()
    await actor.settled()
    actor.send("PING")
    await actor.settled()
    assert actor.snapshot.value == "b"


async def test_interpreter_snapshot_round_trip_mid_run():
    m = create_machine(FLOW)
    a1 = Interpreter(m, clock=ManualClock())
    a1.start()
    a1.send("INC")
    a1.send("NEXT")
    data = a1.snapshot.to_json()
    a2 = Interpreter(m, snapshot=restore(m, data), clock=ManualClock())
    a2.start()
    a2.send("NEXT")
    a2.send("NEXT")
    assert a2.snapshot.status == "done" and a2.snapshot.output == 1


def test_restore_preserves_parallel_value():
    m = create_machine({"type": "parallel", "states": {
        "x": {"initial": "x1", "states": {"x1": {"on": {"E": "x2"}}, "x2": {}}},
        "y": {"initial": "y1", "states": {"y1": {"on": {"F": "y2"}}, "y2": {}}}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "E")
    r = restore(m, s.to_json())
    assert r.value == {"x": "x2", "y": "y1"}
    r, _ = transition(m, r, "F")
    assert r.value == {"x": "x2", "y": "y2"}
