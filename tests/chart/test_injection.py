"""Callables get only the keyword parameters they name (context, event, input, chain, params)."""
from chart_helpers import pure, run

from jr2ray.chart import assign, create_machine, from_callback, initial_transition, transition


def test_lambda_without_parameters_works_as_guard():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"E": {"target": "b", "guard": lambda: True}}}, "b": {}}},
                   ["E"])
    assert s.value == "b"


def test_guard_without_event_parameter_gets_only_context():
    seen = []

    def g2(context):
        seen.append(("ctx-only", sorted(context)))
        return True

    _, s, _ = pure({"initial": "a", "context": {"k": 1}, "states": {"a": {"on": {"E": {"target": "b", "guard": g2}}},
                                                                   "b": {}}}, [{"type": "E", "secret": 1}])
    assert s.value == "b"
    assert seen == [("ctx-only", ["k"])]


def test_guard_naming_event_gets_event_but_not_context():
    calls = []

    def g(event):
        calls.append(event.type)
        return True

    _, s, _ = pure({"initial": "a", "context": {"k": 1}, "states": {"a": {"on": {"E": {"target": "b", "guard": g}}},
                                                                   "b": {}}}, ["E"])
    assert calls == ["E"]


def test_parameter_order_does_not_matter():
    _, s, _ = pure({"initial": "a", "context": {"k": 2}, "states": {"a": {"on": {"E": {
        "target": "b", "guard": lambda event, context: event.v == context["k"]}}}, "b": {}}}, [{"type": "E", "v": 2}])
    assert s.value == "b"


def test_input_is_injectable_into_context_and_invoke_input():
    seen = []

    def cb(input):
        seen.append(input)

    m = create_machine({"initial": "a", "context": lambda input: {"who": input["who"]},
                        "states": {"a": {"invoke": {"src": "cb", "id": "c",
                                                    "input": lambda context: {"greet": context["who"]}}}}},
                       actors={"cb": from_callback(cb)})
    s, eff = initial_transition(m, input={"who": "ann"})
    assert s.context == {"who": "ann"}
    start = [e for e in eff if type(e).__name__ == "StartChild"][0]
    assert start.input == {"greet": "ann"}


def test_params_injected_into_named_action():
    seen = []
    m = create_machine({"initial": "a",
                        "states": {"a": {"on": {"E": {"actions": {"type": "rec", "params": {"x": 3}}}}}}},
                       actions={"rec": lambda params: seen.append(params)})
    s, _ = initial_transition(m)
    s, eff = transition(m, s, "E")
    for e in eff:
        if type(e).__name__ == "CallAction":
            e.fn(**e.kwargs)
    assert seen == [{"x": 3}]


def test_output_callable_without_parameters():
    _, s, _ = pure({"initial": "a", "states": {"a": {"on": {"E": "b"}}, "b": {"type": "final"}},
                    "output": lambda: {"fixed": True}}, ["E"])
    assert s.output == {"fixed": True}


def test_delay_callable_with_event():
    m = create_machine({"id": "m", "initial": "a", "states": {"a": {"on": {"GO": "b"}},
                                                           "b": {"after": {"d": "c"}}, "c": {}}},
                       delays={"d": lambda event: event.ms})
    s, _ = initial_transition(m, now_ms=0)
    s, _ = transition(m, s, {"type": "GO", "ms": 300}, now_ms=100)
    rec = next(iter(s.timers.values()))
    assert rec.deadline_ms == 400


async def test_custom_action_with_event_and_context():
    seen = []
    actor, _ = run({"initial": "a", "context": {"n": 5}, "states": {"a": {"on": {"E": {
        "actions": lambda context, event: seen.append((context["n"], event.type, event.p))}}}}})
    actor.send({"type": "E", "p": "x"})
    assert seen == [(5, "E", "x")]


def test_assign_callable_taking_no_parameters():
    _, s, _ = pure({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {"E": {
        "actions": assign(n=lambda: 9)}}}}}, ["E"])
    assert s.context["n"] == 9
