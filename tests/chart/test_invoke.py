"""Invoked children: promises, callbacks and child machines."""
import asyncio

from chart_helpers import Trace, of_kind, run

from jr2ray.chart import (
    assign,
    create_machine,
    from_callback,
    from_promise,
    initial_transition,
    raise_,
    send_parent,
    send_to,
    transition,
)


async def _ok(input):
    return {"echo": input}


async def _fail():
    raise ValueError("kaput")


def _fetch_chart(**extra):
    return {"id": "m", "initial": "loading", "context": {"q": "hi"}, "states": {
        "loading": {"invoke": {"src": "fetch", "id": "fetcher", "input": lambda context: {"q": context["q"]},
                               "onDone": {"target": "ok", "actions": assign(res=lambda event: event.output,
                                                                            evtype=lambda event: event.type)},
                               "onError": {"target": "bad", "actions": assign(err=lambda event: str(event.error),
                                                                              evtype=lambda event: event.type)}}},
        "ok": {}, "bad": {}}, **extra}


async def test_promise_resolves_through_ondone_with_output():
    actor, _ = run(_fetch_chart(), actors={"fetch": from_promise(_ok)})
    await actor.settled()
    assert actor.snapshot.value == "ok"
    assert actor.snapshot.context["res"] == {"echo": {"q": "hi"}}


async def test_done_actor_event_name():
    actor, _ = run(_fetch_chart(), actors={"fetch": from_promise(_ok)})
    await actor.settled()
    assert actor.snapshot.context["evtype"] == "xstate.done.actor.fetcher"


async def test_promise_rejection_goes_to_onerror_with_error():
    actor, _ = run(_fetch_chart(), actors={"fetch": from_promise(_fail)})
    await actor.settled()
    assert actor.snapshot.value == "bad"
    assert "kaput" in actor.snapshot.context["err"]
    assert actor.snapshot.context["evtype"] == "xstate.error.actor.fetcher"


async def test_unhandled_promise_error_puts_machine_in_error_status():
    actor, _ = run({"initial": "a", "states": {"a": {"invoke": {"src": "fail", "id": "f"}}}},
                   actors={"fail": from_promise(_fail)})
    await actor.settled()
    assert actor.snapshot.status == "error"
    assert actor.snapshot.error is not None


async def test_promise_with_no_parameters():
    async def no_args():
        return 7

    actor, _ = run({"initial": "a", "context": {}, "states": {
        "a": {"invoke": {"src": "p", "id": "p",
                         "onDone": {"target": "b", "actions": assign(v=lambda event: event.output)}}},
        "b": {}}}, actors={"p": from_promise(no_args)})
    await actor.settled()
    assert actor.snapshot.value == "b" and actor.snapshot.context["v"] == 7


async def test_promise_in_nested_state_done_handled_by_invoking_state():
    actor, _ = run({"initial": "outer", "states": {
        "outer": {"initial": "inner", "states": {
            "inner": {"invoke": {"src": "fetch", "id": "f", "onDone": "finished"}},
            "finished": {}}}}}, actors={"fetch": from_promise(_ok)})
    await actor.settled()
    assert actor.snapshot.value == {"outer": "finished"}


async def test_promise_cancelled_when_state_exits_and_ondone_ignored():
    gate = asyncio.Event()
    cancelled = []

    async def slow():
        try:
            await gate.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return 1

    actor, _ = run({"initial": "a", "states": {
        "a": {"invoke": {"src": "slow", "id": "s", "onDone": "done_a"}, "on": {"LEAVE": "b"}},
        "b": {}, "done_a": {}}}, actors={"slow": from_promise(slow)})
    await asyncio.sleep(0)
    actor.send("LEAVE")
    gate.set()
    await actor.settled()
    await asyncio.sleep(0.01)
    assert actor.snapshot.value == "b"
    assert cancelled == [True]


async def test_callback_send_back_drives_parent():
    def cb(send_back):
        send_back({"type": "PING"})

    actor, _ = run({"initial": "a",
                    "states": {"a": {"invoke": {"src": "cb", "id": "c"}, "on": {"PING": "b"}}, "b": {}}},
                   actors={"cb": from_callback(cb)})
    await actor.settled()
    assert actor.snapshot.value == "b"


async def test_callback_receives_input():
    seen = []

    def cb(input):
        seen.append(input)

    actor, _ = run({"initial": "a", "context": {"k": 3},
                    "states": {"a": {"invoke": {"src": "cb", "id": "c",
                                                "input": lambda context: {"k": context["k"]}}}}},
                   actors={"cb": from_callback(cb)})
    await actor.settled()
    assert seen == [{"k": 3}]


async def test_callback_cleanup_runs_when_state_exits():
    t = Trace()

    def cb():
        t.append("start")
        return t.act("cleanup")

    actor, _ = run({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"}, "on": {"GO": "b"}}, "b": {}}},
                   actors={"cb": from_callback(cb)})
    await actor.settled()
    assert t == ["start"]
    actor.send("GO")
    await actor.settled()
    assert t == ["start", "cleanup"]


async def test_send_to_reaches_callback_receive_and_reply_comes_back():
    def cb(send_back, receive):
        receive(lambda event: send_back({"type": "PONG", "n": event.n + 1}))

    actor, _ = run({"initial": "a", "context": {}, "states": {"a": {
        "invoke": {"src": "cb", "id": "c"},
        "on": {"PING": {"actions": send_to("c", lambda context, event: {"type": "PING", "n": event.n})},
               "PONG": {"target": "b", "actions": assign(n=lambda event: event.n)}}}, "b": {}}},
        actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send({"type": "PING", "n": 41})
    await actor.settled()
    assert actor.snapshot.value == "b"
    assert actor.snapshot.context["n"] == 42


async def test_callback_that_raises_goes_to_onerror():
    def cb():
        raise RuntimeError("callback broke")

    actor, _ = run({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c", "onError": "failed"}},
                                                "failed": {}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    assert actor.snapshot.value == "failed"


async def test_reentering_invoking_state_restarts_callback():
    t = Trace()

    def cb():
        t.append("start")
        return t.act("stop")

    actor, _ = run({"initial": "a", "states": {"a": {"invoke": {"src": "cb", "id": "c"},
                                                      "on": {"AGAIN": {"target": "a", "reenter": True}}}}},
                   actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("AGAIN")
    await actor.settled()
    assert t == ["start", "stop", "start"]


async def test_targetless_transition_does_not_restart_invoke():
    t = Trace()

    def cb():
        t.append("start")

    actor, _ = run({"initial": "a", "context": {"n": 0}, "states": {"a": {
        "invoke": {"src": "cb", "id": "c"},
        "on": {"BUMP": {"actions": assign(n=lambda context: context["n"] + 1)}}}}},
        actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("BUMP")
    await actor.settled()
    assert t == ["start"]


async def test_child_not_started_when_state_left_in_same_macrostep():
    t = Trace()

    def cb():
        t.append("start")

    actor, _ = run({"initial": "idle", "states": {
        "idle": {"on": {"GO": "passing"}},
        "passing": {"invoke": {"src": "cb", "id": "c"}, "always": "after"},
        "after": {}}}, actors={"cb": from_callback(cb)})
    actor.send("GO")
    await actor.settled()
    assert actor.snapshot.value == "after"
    assert t == []
    assert actor.snapshot.children == {}


async def test_invokes_in_parallel_regions_all_start():
    started = []

    def make(name):
        def cb():
            started.append(name)
        return from_callback(cb)

    actor, _ = run({"type": "parallel", "states": {
        "r1": {"invoke": {"src": "one", "id": "one"}},
        "r2": {"invoke": {"src": "two", "id": "two"}}}}, actors={"one": make("one"), "two": make("two")})
    await actor.settled()
    assert sorted(started) == ["one", "two"]
    assert set(actor.snapshot.children) == {"one", "two"}


async def test_invoke_input_sees_context_from_entry_of_same_state():
    seen = []

    def cb(input):
        seen.append(input)

    actor, _ = run({"initial": "a", "context": {"v": 0}, "states": {"a": {
        "entry": assign(v=5), "invoke": {"src": "cb", "id": "c", "input": lambda context: context["v"]}}}},
        actors={"cb": from_callback(cb)})
    await actor.settled()
    assert seen == [5]


async def test_event_sent_by_entry_action_reaches_child_invoked_in_same_state():
    got = []

    def cb(receive):
        receive(lambda event: got.append(event.type))

    actor, _ = run({"initial": "a", "states": {"a": {
        "entry": send_to("c", {"type": "HELLO"}), "invoke": {"src": "cb", "id": "c"}}}},
        actors={"cb": from_callback(cb)})
    await actor.settled()
    assert got == ["HELLO"]


CHILD = {
    "id": "child", "initial": "working", "context": lambda input: {"seed": input["seed"]},
    "states": {
        "working": {"entry": send_parent({"type": "CHILD_HELLO"}),
                    "on": {"FINISH": "finished",
                           "ASK": {"actions": send_parent(lambda context: {"type": "ANSWER", "v": context["seed"]})}}},
        "finished": {"type": "final"}},
    "output": lambda context: {"result": context["seed"] * 10},
}


def _parent(child_machine, **extra):
    return {"initial": "running", "context": {"hello": 0}, "states": {
        "running": {"invoke": {"src": "kid", "id": "kid", "input": {"seed": 4},
                               "onDone": {"target": "done", "actions": assign(out=lambda event: event.output,
                                                                              evt=lambda event: event.type)}},
                    "on": {"CHILD_HELLO": {"actions": assign(hello=lambda context: context["hello"] + 1)},
                           "FINISH_KID": {"actions": send_to("kid", {"type": "FINISH"})},
                           "ASK_KID": {"actions": send_to("kid", {"type": "ASK"})},
                           "ANSWER": {"actions": assign(answer=lambda event: event.v)},
                           "LEAVE": "left"}},
        "done": {}, "left": {}}, **extra}


async def test_child_machine_send_parent_reaches_parent():
    actor, _ = run(_parent(None), actors={"kid": create_machine(CHILD)})
    await actor.settled()
    assert actor.snapshot.context["hello"] == 1
    assert actor.snapshot.value == "running"


async def test_child_machine_done_output_goes_to_ondone():
    actor, _ = run(_parent(None), actors={"kid": create_machine(CHILD)})
    await actor.settled()
    actor.send("FINISH_KID")
    await actor.settled()
    assert actor.snapshot.value == "done"
    assert actor.snapshot.context["out"] == {"result": 40}
    assert actor.snapshot.context["evt"] == "xstate.done.actor.kid"


async def test_child_machine_answers_through_send_parent():
    actor, _ = run(_parent(None), actors={"kid": create_machine(CHILD)})
    await actor.settled()
    actor.send("ASK_KID")
    await actor.settled()
    assert actor.snapshot.context["answer"] == 4


async def test_child_machine_that_finishes_immediately():
    kid = create_machine({"initial": "f", "states": {"f": {"type": "final"}}, "output": lambda: "instant"})
    actor, _ = run({"initial": "a", "context": {}, "states": {
        "a": {"invoke": {"src": "kid", "id": "k",
                         "onDone": {"target": "b", "actions": assign(o=lambda event: event.output)}}},
        "b": {}}}, actors={"kid": kid})
    await actor.settled()
    assert actor.snapshot.value == "b" and actor.snapshot.context["o"] == "instant"


async def test_child_machine_stopped_when_invoking_state_exits():
    t = Trace()
    kid = create_machine({"initial": "w", "exit": [t.act("kid-root-exit")],
                          "states": {"w": {"on": {"FINISH": "f"}}, "f": {"type": "final"}}})
    actor, _ = run({"initial": "a", "states": {
        "a": {"invoke": {"src": "kid", "id": "k", "onDone": "wrong"},
              "on": {"LEAVE": "b", "POKE": {"actions": send_to("k", {"type": "FINISH"})}}},
        "b": {"on": {"POKE": {"actions": send_to("k", {"type": "FINISH"})}}}, "wrong": {}}},
        actors={"kid": kid})
    await actor.settled()
    assert "k" in actor.snapshot.children
    actor.send("LEAVE")
    await actor.settled()
    assert "k" not in actor.snapshot.children
    assert actor.snapshot.value == "b"


async def test_child_record_holds_src_input_and_state():
    actor, _ = run(_parent(None), actors={"kid": create_machine(CHILD)})
    await actor.settled()
    rec = actor.snapshot.children["kid"]
    assert rec.id == "kid" and rec.src == "kid" and rec.input == {"seed": 4}
    assert rec.state.endswith("running")
    assert rec.status == "active"


def test_start_child_effect_in_pure_transition():
    m = create_machine({"id": "m", "initial": "a", "context": {"x": 1}, "states": {
        "a": {"on": {"GO": "b"}},
        "b": {"invoke": {"src": "cb", "id": "c", "input": lambda context: {"x": context["x"]}}, "on": {"BACK": "a"}}}},
        actors={"cb": from_callback(lambda: None)})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "GO")
    starts = of_kind(eff, "StartChild")
    assert len(starts) == 1
    assert starts[0].id == "c" and starts[0].src == "cb" and starts[0].input == {"x": 1}
    assert starts[0].state in ("m.b", "b")
    assert "c" in s.children
    s, eff = transition(m, s, "BACK")
    stops = of_kind(eff, "StopChild")
    assert [st.id for st in stops] == ["c"]
    assert "c" not in s.children


def test_unhandled_error_event_sets_error_status_purely():
    m = create_machine({"initial": "a", "states": {"a": {"invoke": {"src": "p", "id": "p"}}}},
                       actors={"p": from_promise(_fail)})
    s, _ = initial_transition(m)
    s2, _ = transition(m, s, {"type": "xstate.error.actor.p", "error": "boom"})
    assert s2.status == "error"
    assert s2.error is not None


def test_done_actor_event_only_handled_by_its_invoking_state():
    m = create_machine({"type": "parallel", "states": {
        "r1": {"initial": "a", "states": {"a": {"invoke": {"src": "p", "id": "one", "onDone": "b"}}, "b": {}}},
        "r2": {"initial": "a", "states": {"a": {"invoke": {"src": "p", "id": "two", "onDone": "b"}}, "b": {}}}}},
        actors={"p": from_promise(_ok)})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, {"type": "xstate.done.actor.two", "output": 1})
    assert s.value == {"r1": "a", "r2": "b"}


async def test_root_invoke_stopped_when_machine_completes():
    t = Trace()

    def cb():
        return t.act("cleanup")

    actor, _ = run({"initial": "a", "invoke": {"src": "cb", "id": "c"},
                    "states": {"a": {"on": {"END": "z"}}, "z": {"type": "final"}}}, actors={"cb": from_callback(cb)})
    await actor.settled()
    actor.send("END")
    await actor.settled()
    assert actor.snapshot.status == "done"
    assert t == ["cleanup"]


async def test_error_actor_event_with_raise_from_parent_is_handled_by_onerror():
    actor, _ = run({"initial": "a", "context": {}, "states": {"a": {
        "invoke": {"src": "cb", "id": "c", "onError": {"target": "b", "actions": assign(e=lambda event: event.error)}},
        "on": {"FAKE": {"actions": raise_({"type": "xstate.error.actor.c", "error": "synthetic"})}}}, "b": {}}},
        actors={"cb": from_callback(lambda: None)})
    actor.send("FAKE")
    await actor.settled()
    assert actor.snapshot.value == "b"
    assert actor.snapshot.context["e"] == "synthetic"
