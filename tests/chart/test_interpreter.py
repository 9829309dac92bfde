"""The asyncio Interpreter: run-to-completion, children lifecycle, timers, logs, stop."""
import asyncio

from chart_helpers import Trace, run

from jr2ray.chart import (
    Interpreter,
    ManualClock,
    assign,
    cancel,
    create_machine,
    from_callback,
    from_promise,
    log,
    raise_,
    send_parent,
    send_to,
)


async def test_logs_collect_log_values_in_order():
    actor, _ = run({"initial": "a", "context": {"n": 2}, "states": {"a": {
        "entry": log("entered"), "on": {"E": {"actions": [log(lambda context: context["n"] * 10), log("last")]}}}}})
    actor.send("E")
    assert actor.logs == ["entered", 20, "last"]


async def test_input_reaches_context():
    actor, _ = run({"initial": "a", "context": lambda input: {"who": input["who"]}, "states": {"a": {}}},
                   input={"who": "bo"})
    assert actor.snapshot.context == {"who": "bo"}


async def test_wait_for_done_and_output():
    async def compute(input):
        await asyncio.sleep(0)
        return input * 2

    actor, _ = run({"initial": "work", "context": {}, "states": {
        "work": {"invoke": {"src": "c", "id": "c", "input": 21,
                            "onDone": {"target": "end", "actions": assign(r=lambda event: event.output)}}},
        "end": {"type": "final"}}, "output": lambda context: context["r"]}, actors={"c": from_promise(compute)})
    snap = await actor.wait_for(lambda s: s.status == "done", timeout=5)
    assert snap.output == 42
    assert actor.snapshot.output == 42


async def test_events_after_done_are_ignored():
    actor, _ = run({"initial": "a", "context": {"n": 0},
                    "on": {"BUMP": {"actions": assign(n=lambda context: context["n"] + 1)}},
                    "states": {"a": {"on": {"END": "z"}}, "z": {"type": "final"}}})
    actor.send("END")
    actor.send("BUMP")
    assert actor.snapshot.status == "done" and actor.snapshot.context["n"] == 0


async def test_stop_runs_callback_cleanup():
    t = Trace()

    def cb():
        t.append("start")
        return t.act("cleanup")

    actor, _ = run({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"}}}},
                   actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.stop()
    await asyncio.sleep(0)
    assert t == ["start", "cleanup"]


async def test_stopped_actor_ignores_events():
    actor, _ = run({"initial": "a", "states": {"a": {"on": {"E": "b"}}, "b": {}}})
    actor.stop()
    actor.send("E")
    assert actor.snapshot.value == "a"


async def test_stop_cancels_timers():
    actor, clock = run({"initial": "a", "states": {"a": {"after": {100: "b"}}, "b": {}}})
    actor.stop()
    clock.advance(1000)
    assert actor.snapshot.value == "a"


async def test_send_back_after_state_exit_is_ignored():
    holder = {}

    def cb(send_back):
        holder["send_back"] = send_back

    actor, _ = run({"initial": "a", "states": {
        "a": {"invoke": {"src": "cb", "id": "c"}, "on": {"LEAVE": "b"}},
        "b": {"on": {"LATE": "wrong"}}, "wrong": {}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("LEAVE")
    holder["send_back"]({"type": "LATE"})
    await actor.settled()
    assert actor.snapshot.value == "b"


async def test_delayed_send_to_child_and_cancel():
    got = []

    def cb(receive):
        receive(lambda event: got.append(event.type))

    actor, clock = run({"initial": "a", "states": {"a": {
        "invoke": {"src": "cb", "id": "c"},
        "on": {"SCHEDULE": {"actions": [send_to("c", {"type": "ONE"}, delay=50, id="one"),
                                        send_to("c", {"type": "TWO"}, delay=60, id="two")]},
               "DROP": {"actions": cancel("one")}}}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("SCHEDULE")
    actor.send("DROP")
    clock.advance(100)
    await actor.settled()
    assert got == ["TWO"]


async def test_child_final_entry_send_parent_arrives_before_done_actor_event():
    kid = create_machine({"initial": "w", "states": {
        "w": {"on": {"FIN": "f"}},
        "f": {"type": "final", "entry": send_parent({"type": "LAST_WORD"})}}})
    actor, _ = run({"initial": "a", "context": {"trail": []}, "states": {"a": {
        "invoke": {"src": "kid", "id": "k", "onDone": {"target": "b", "actions": assign(
            trail=lambda context: context["trail"] + ["done"])}},
        "on": {"LAST_WORD": {"actions": assign(trail=lambda context: context["trail"] + ["last word"])},
               "FINISH": {"actions": send_to("k", {"type": "FIN"})}}}, "b": {}}}, actors={"kid": kid})
    await actor.settled()
    actor.send("FINISH")
    await actor.settled()
    assert actor.snapshot.value == "b"
    assert actor.snapshot.context["trail"] == ["last word", "done"]


async def test_child_machine_error_propagates_as_error_event():
    async def bad():
        raise RuntimeError("inner failure")

    kid = create_machine({"initial": "w", "states": {"w": {"invoke": {"src": "bad", "id": "bad"}}}},
                         actors={"bad": from_promise(bad)})
    actor, _ = run({"initial": "a", "context": {}, "states": {
        "a": {"invoke": {"src": "kid", "id": "k", "onError": {"target": "failed", "actions": assign(
            e=lambda event: event.type)}}},
        "failed": {}}}, actors={"kid": kid})
    await actor.settled()
    await actor.wait_for(lambda s: s.value == "failed", timeout=5)
    assert actor.snapshot.context["e"] == "xstate.error.actor.k"


async def test_not_started_when_left_in_subsequent_microstep_via_raise():
    t = Trace()

    def cb():
        t.append("start")

    actor, _ = run({"initial": "idle", "states": {
        "idle": {"on": {"GO": {"target": "busy", "actions": raise_({"type": "AWAY"})}}},
        "busy": {"invoke": {"src": "cb", "id": "c"}, "on": {"AWAY": "elsewhere"}},
        "elsewhere": {}}}, actors={"cb": from_callback(cb)})
    actor.send("GO")
    await actor.settled()
    assert actor.snapshot.value == "elsewhere"
    assert t == []


async def test_other_child_started_when_first_is_stopped_in_subsequent_microstep():
    t = Trace()

    def make(label):
        def cb():
            t.append(label)
        return from_callback(cb)

    actor, _ = run({"initial": "idle", "states": {
        "idle": {"on": {"GO": "one"}},
        "one": {"invoke": {"src": "first", "id": "first"}, "always": "two"},
        "two": {"invoke": {"src": "second", "id": "second"}}}},
        actors={"first": make("first"), "second": make("second")})
    actor.send("GO")
    await actor.settled()
    assert t == ["second"]
    assert set(actor.snapshot.children) == {"second"}


async def test_reentering_invoking_state_within_one_macrostep_starts_child_once():
    t = Trace()

    def cb():
        t.append("start")
        return t.act("stop")

    actor, _ = run({"initial": "a", "states": {
        "a": {"invoke": {"src": "cb", "id": "c"}, "on": {"BOUNCE": "bridge"}},
        "bridge": {"always": "a"}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("BOUNCE")
    await actor.settled()
    assert actor.snapshot.value == "a"
    assert t == ["start", "stop", "start"]


async def test_subscriber_sees_timer_driven_change():
    seen = []
    actor, clock = run({"initial": "a", "states": {"a": {"after": {10: "b"}}, "b": {}}})
    actor.subscribe(lambda snap: seen.append(snap.value))
    clock.advance(10)
    assert seen and seen[-1] == "b"


async def test_transition_action_runs_before_entry_action():
    t = Trace()
    actor, _ = run({"initial": "a", "states": {"a": {"on": {"E": {"target": "b", "actions": t.act("first")}}},
                                                "b": {"entry": t.act("enter b")}}})
    actor.send("E")
    assert t == ["first", "enter b"]
    assert actor.snapshot.value == "b"


async def test_root_invoke_runs_for_whole_machine():
    t = Trace()

    def cb(send_back):
        t.append("root child")
        send_back({"type": "FROM_ROOT_CHILD"})

    actor, _ = run({"initial": "a", "invoke": {"src": "cb", "id": "rootchild"},
                    "states": {"a": {"on": {"FROM_ROOT_CHILD": "b"}}, "b": {}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    assert actor.snapshot.value == "b"
    assert t == ["root child"]


async def test_interpreter_restored_from_error_snapshot_stays_error():
    from jr2ray.chart import initial_transition, restore, transition
    m = create_machine({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"}}}},
                       actors={"cb": from_callback(lambda: None)})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, {"type": "xstate.error.actor.c", "error": "bad"})
    assert s.status == "error"
    actor = Interpreter(m, snapshot=restore(m, s.to_json()), clock=ManualClock())
    actor.start()
    assert actor.snapshot.status == "error"
    assert actor.snapshot.error == "bad"
