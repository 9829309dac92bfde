"""Delayed (`after`) transitions, driven by a ManualClock."""
from chart_helpers import Trace, of_kind, run

from jr2ray.chart import assign, cancel, create_machine, initial_transition, raise_, transition

LIGHT = {
    "id": "light", "initial": "green",
    "states": {
        "green": {"after": {1000: "yellow"}},
        "yellow": {"after": {1000: "red"}},
        "red": {"after": {1000: "green"}},
    },
}


async def test_transitions_after_the_delay_and_not_before():
    actor, clock = run(LIGHT)
    clock.advance(999)
    assert actor.snapshot.value == "green"
    clock.advance(1)
    assert actor.snapshot.value == "yellow"
    clock.advance(1000)
    assert actor.snapshot.value == "red"


async def test_one_big_advance_fires_timers_in_sequence():
    actor, clock = run(LIGHT)
    clock.advance(2500)
    assert actor.snapshot.value == "red"


async def test_leaving_the_state_cancels_its_timer():
    actor, clock = run({"initial": "a", "states": {
        "a": {"after": {500: "timedout"}, "on": {"GO": "b"}}, "b": {"on": {"BACK": "a"}}, "timedout": {}}})
    clock.advance(300)
    actor.send("GO")
    clock.advance(1000)
    assert actor.snapshot.value == "b"
    assert actor.snapshot.timers == {}


async def test_reentering_restarts_the_delay():
    actor, clock = run({"initial": "a", "states": {
        "a": {"after": {500: "timedout"}, "on": {"POKE": {"target": "a", "reenter": True}}}, "timedout": {}}})
    clock.advance(400)
    actor.send("POKE")
    clock.advance(400)
    assert actor.snapshot.value == "a"
    clock.advance(100)
    assert actor.snapshot.value == "timedout"


async def test_delay_from_nested_initial_state():
    actor, clock = run({"initial": "outer", "states": {
        "outer": {"initial": "inner", "states": {"inner": {"after": {100: "#done"}}}},
        "end": {"id": "done"}}})
    clock.advance(100)
    assert actor.snapshot.value == "end"


async def test_delayed_child_target_does_not_reenter_parent():
    t = Trace()
    actor, clock = run({"initial": "p", "states": {
        "p": {**t.entry_exit("p"), "initial": "one", "after": {10: ".two"},
              "states": {"one": t.entry_exit("one"), "two": t.entry_exit("two")}}}})
    t.clear()
    clock.advance(10)
    assert actor.snapshot.value == {"p": "two"}
    assert t == ["exit:one", "enter:two"]


async def test_guarded_delayed_transitions_pick_by_guard():
    actor, clock = run({"initial": "wait", "context": {"n": 2}, "states": {
        "wait": {"after": {100: [{"target": "few", "guard": lambda context: context["n"] < 2}, {"target": "many"}]}},
        "few": {}, "many": {}}})
    clock.advance(100)
    assert actor.snapshot.value == "many"


async def test_two_delays_on_one_state_shortest_first():
    actor, clock = run({"initial": "a", "context": {"hits": []}, "states": {"a": {"after": {
        50: {"actions": assign(hits=lambda context: context["hits"] + ["50"])},
        200: "b"}}, "b": {}}})
    clock.advance(60)
    assert actor.snapshot.value == "a" and actor.snapshot.context["hits"] == ["50"]
    clock.advance(200)
    assert actor.snapshot.value == "b"


async def test_named_delay():
    actor, clock = run({"initial": "a", "states": {"a": {"after": {"short": "b"}}, "b": {}}}, delays={"short": 30})
    clock.advance(29)
    assert actor.snapshot.value == "a"
    clock.advance(1)
    assert actor.snapshot.value == "b"


async def test_delay_callable_reads_context():
    actor, clock = run({"initial": "a", "context": {"wait": 250}, "states": {"a": {"after": {"dyn": "b"}}, "b": {}}},
                       delays={"dyn": lambda context: context["wait"]})
    clock.advance(249)
    assert actor.snapshot.value == "a"
    clock.advance(1)
    assert actor.snapshot.value == "b"


def test_entry_schedules_a_timer_effect_and_persists_it():
    m = create_machine({"id": "m", "initial": "a", "states": {"a": {"after": {1000: "b"}}, "b": {}}})
    s, eff = initial_transition(m, now_ms=5000)
    sched = of_kind(eff, "ScheduleTimer")
    assert len(sched) == 1
    assert sched[0].timer.deadline_ms == 6000
    assert len(s.timers) == 1
    rec = next(iter(s.timers.values()))
    assert rec.deadline_ms == 6000


def test_after_event_name_and_exit_cancels_timer():
    m = create_machine({"id": "m", "initial": "a", "states": {"a": {"after": {1000: "b"}, "on": {"X": "c"}},
                                                           "b": {}, "c": {}}})
    s, _ = initial_transition(m, now_ms=0)
    rec = next(iter(s.timers.values()))
    ev_type = rec.event["type"] if isinstance(rec.event, dict) else rec.event.type
    assert ev_type == "xstate.after.1000.m.a"
    s2, eff = transition(m, s, ev_type)
    assert s2.value == "b" and s2.timers == {}
    s3, eff3 = transition(m, s, "X")
    assert s3.value == "c" and s3.timers == {}
    assert len(of_kind(eff3, "CancelTimer")) == 1


async def test_delayed_raise_and_cancel():
    actor, clock = run({"initial": "a", "states": {
        "a": {"entry": raise_({"type": "PING"}, delay=100, id="ping"),
              "on": {"PING": "pinged", "STOP": {"actions": cancel("ping")}}},
        "pinged": {}}})
    actor.send("STOP")
    clock.advance(500)
    assert actor.snapshot.value == "a"


async def test_delayed_raise_fires_when_not_cancelled():
    actor, clock = run({"initial": "a", "states": {
        "a": {"entry": raise_({"type": "PING"}, delay=100, id="ping"), "on": {"PING": "pinged"}},
        "pinged": {}}})
    clock.advance(99)
    assert actor.snapshot.value == "a"
    clock.advance(1)
    assert actor.snapshot.value == "pinged"


async def test_timer_fires_for_parallel_region_only_while_active():
    actor, clock = run({"type": "parallel", "states": {
        "r1": {"initial": "a", "states": {"a": {"after": {100: "b"}, "on": {"LEAVE": "c"}}, "b": {}, "c": {}}},
        "r2": {"initial": "x", "states": {"x": {"after": {200: "y"}}, "y": {}}}}})
    actor.send("LEAVE")
    clock.advance(250)
    assert actor.snapshot.value == {"r1": "c", "r2": "y"}
