"""assign(): shallow merge, ordering, visibility to later actions."""
from chart_helpers import pure, run

from jr2ray.chart import assign, create_machine, initial_transition, log, raise_, transition

BASE = {"count": 0, "foo": "bar", "nested": {"a": 1, "b": 2}}


def _counter(actions, event="E", ctx=None):
    return pure({"initial": "a", "context": dict(ctx or BASE), "states": {"a": {"on": {"E": {"actions": actions}}}}},
                [event])[1]


def test_property_assign_with_callable():
    assert _counter(assign(count=lambda context: context["count"] + 1)).context["count"] == 1


def test_property_assign_with_static_value():
    s = _counter(assign(count=5, foo="baz"))
    assert s.context["count"] == 5 and s.context["foo"] == "baz"


def test_assign_with_function_returning_dict():
    s = _counter(assign(lambda context: {"count": context["count"] + 10}))
    assert s.context["count"] == 10 and s.context["foo"] == "bar"


def test_assign_is_a_shallow_merge():
    s = _counter(assign(nested={"a": 9}))
    assert s.context["nested"] == {"a": 9}
    assert s.context["foo"] == "bar" and s.context["count"] == 0


def test_later_assign_sees_earlier_assign_in_same_list():
    s = _counter([assign(count=lambda context: context["count"] + 1),
                  assign(count=lambda context: context["count"] * 10),
                  assign(foo=lambda context: f"count={context['count']}")])
    assert s.context["count"] == 10
    assert s.context["foo"] == "count=10"


def test_assign_multiple_properties_mixed():
    s = _counter(assign(count=lambda context: context["count"] + 2, foo="static"))
    assert s.context["count"] == 2 and s.context["foo"] == "static"


def test_assign_new_key_and_none_value():
    s = _counter(assign(extra=None, newkey=1))
    assert "extra" in s.context and s.context["extra"] is None and s.context["newkey"] == 1


def test_assign_from_event():
    s = pure({"initial": "a", "context": {"v": 0}, "states": {"a": {"on": {
        "SET": {"actions": assign(v=lambda event: event.value)}}}}}, [{"type": "SET", "value": 99}])[1]
    assert s.context["v"] == 99


def test_context_kept_after_unhandled_event():
    m = create_machine({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {
        "INC": {"actions": assign(n=lambda context: context["n"] + 1)}}}}})
    s, _ = initial_transition(m)
    s, _ = transition(m, s, "INC")
    s, _ = transition(m, s, "UNKNOWN")
    assert s.context == {"n": 1}


def test_assign_with_params_from_named_action():
    s = pure({"initial": "a", "context": {"n": 1}, "states": {"a": {"on": {
        "E": {"actions": {"type": "addBy", "params": {"by": 4}}}}}}}, ["E"],
        actions={"addBy": assign(n=lambda context, params: context["n"] + params["by"])})[1]
    assert s.context["n"] == 5


def test_exit_transition_entry_assign_order():
    s = pure({"initial": "a", "context": {"trail": []}, "states": {
        "a": {"exit": assign(trail=lambda context: context["trail"] + ["exit a"]),
              "on": {"GO": {"target": "b",
                            "actions": assign(trail=lambda context: context["trail"] + ["transition"])}}},
        "b": {"entry": assign(trail=lambda context: context["trail"] + ["enter b"])}}}, ["GO"])[1]
    assert s.context["trail"] == ["exit a", "transition", "enter b"]


def test_initial_entry_assign_applied_in_initial_transition():
    _, s, _ = pure({"initial": "a", "context": {"n": 0}, "states": {"a": {"entry": assign(n=3)}}})
    assert s.context["n"] == 3


async def test_custom_action_between_assigns_sees_intermediate_context():
    seen = []
    actor, _ = run({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {"E": {"actions": [
        assign(n=1), lambda context: seen.append(context["n"]), assign(n=2),
        lambda context: seen.append(context["n"])]}}}}})
    actor.send("E")
    assert seen == [1, 2]
    assert actor.snapshot.context["n"] == 2


async def test_initial_custom_action_sees_only_preceding_assign():
    seen = []
    actor, _ = run({"initial": "a", "context": {"n": 0}, "states": {"a": {"entry": [
        assign(n=1), lambda context: seen.append(context["n"]), assign(n=2)]}}})
    assert seen == [1]
    assert actor.snapshot.context["n"] == 2


async def test_log_sees_context_at_its_position():
    actor, _ = run({"initial": "a", "context": {"n": 0}, "states": {"a": {"on": {"E": {"actions": [
        log(lambda context: f"before {context['n']}"), assign(n=7), log(lambda context: f"after {context['n']}")]}}}}})
    actor.send("E")
    assert actor.logs[-2:] == ["before 0", "after 7"]


def test_raised_event_payload_from_assigned_context():
    s = pure({"initial": "a", "context": {"n": 0, "got": None}, "states": {"a": {"on": {
        "E": {"actions": [assign(n=5), raise_(lambda context: {"type": "R", "v": context["n"]})]},
        "R": {"actions": assign(got=lambda event: event.v)}}}}}, ["E"])[1]
    assert s.context["got"] == 5


def test_context_from_input_then_assign():
    _, s, _ = pure({"initial": "a", "context": lambda input: {"n": input["start"]}, "states": {"a": {"on": {
        "E": {"actions": assign(n=lambda context: context["n"] + 1)}}}}}, ["E", "E"], input={"start": 10})
    assert s.context["n"] == 12
