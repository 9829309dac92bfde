"""Built-in actions. Each resolves inside a pure transition: it may change the Work's context or queue effects.

As xstate's built-in actions do, each kind carries its own two halves: `resolve` here, and `execute` on the effect
it queues (`effects.py`), which the actor runs after the macrostep. Neither half is chosen by a switch on the kind.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .callables import Bound, bind, describe
from .effects import CallAction, CancelTimer, LogEffect, ScheduleTimer, SendParent, SendTo, TimerRecord
from .errors import ActionError, ChartConfigError
from .event import Event
from .work import Work


class Action:
    """Base of all actions. `prepare` binds user callables once at load; `resolve` runs in a transition, and the
    effects it queues execute themselves after the macrostep."""

    name = "action"

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        return self

    def resolve(self, work: Work, params: Any = None) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


def _value(v: Any, work: Work, params: Any) -> Any:
    return v(work.scope(params)) if isinstance(v, Bound) else v


def _bind_value(v: Any, where: str, what: str) -> Any:
    return bind(v, where, what) if callable(v) and not isinstance(v, (Event, type)) else v


def _to_event(v: Any) -> Event:
    return Event.from_any(v)


class CustomAction(Action):
    """A user function: deferred, run by the actor after the macrostep with the scope it saw here."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.bound: Bound | None = None
        self.name = describe(fn)

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        out = CustomAction(self.fn)
        out.bound = bind(self.fn, where, "action")
        return out

    def resolve(self, work: Work, params: Any = None) -> None:
        assert self.bound is not None
        scope = work.scope(params)
        kwargs = {n: scope.get(n) for n in self.bound.names}
        if self.bound.takes_all:
            kwargs = dict(scope)
        work.effects.append(CallAction(self.fn, kwargs, self.name))


class Assign(Action):
    """Shallow-merge into the context; later actions in the same list see the result."""

    name = "assign"

    def __init__(self, values: Mapping[str, Any] | Callable[..., Any] | None = None, **kw: Any) -> None:
        if values is not None and kw:
            raise ChartConfigError("assign takes a mapping/callable or keywords, not both")
        self.values: Any = values if values is not None else kw

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        if callable(self.values) and not isinstance(self.values, Mapping):
            return Assign(bind(self.values, where, "assign"))
        if not isinstance(self.values, Mapping):
            raise ChartConfigError(f"{where}: assign needs a mapping or a callable, got {self.values!r}")
        return Assign({k: _bind_value(v, where, f"assign of {k!r}") for k, v in self.values.items()})

    def resolve(self, work: Work, params: Any = None) -> None:
        try:
            if isinstance(self.values, Bound):
                updates = self.values(work.scope(params))
                if not isinstance(updates, Mapping):
                    raise ActionError(f"assign {self.values.label} must return a mapping, got {updates!r}")
            else:
                scope = work.scope(params)
                updates = {k: (v(scope) if isinstance(v, Bound) else v) for k, v in self.values.items()}
        except ActionError:
            raise
        except Exception as exc:
            raise ActionError(f"assign in state {work.owner!r} on event {work.event.type!r} raised: {exc!r}") from exc
        work.context = {**work.context, **updates}


def _delay_ms(delay: Any, work: Work, params: Any, named: Mapping[str, Any]) -> float:
    d = delay
    if isinstance(d, str):
        d = named[d]
    if isinstance(d, Bound):
        d = d(work.scope(params))
    return float(d)


class _Delayed(Action):
    def __init__(self, event: Any, delay: Any = None, id: str | None = None) -> None:
        self.event = event
        self.delay = delay
        self.id = id
        self.named: Mapping[str, Any] = {}

    def _prepared(self, where: str, named_delays: Mapping[str, Any]) -> dict[str, Any]:
        delay = self.delay
        if isinstance(delay, str) and delay not in named_delays:
            raise ChartConfigError(f"{where}: unknown delay {delay!r}")
        if isinstance(delay, str):
            nd = named_delays[delay]
            delay = bind(nd, where, f"delay {self.delay!r}") if callable(nd) else nd
        elif callable(delay):
            delay = bind(delay, where, "delay")
        ev = self.event
        if callable(ev) and not isinstance(ev, (Event, Mapping, str)):
            ev = bind(ev, where, f"{self.name} event")
        return {"event": ev, "delay": delay, "id": self.id}


class Raise(_Delayed):
    """Queue an internal event (processed in this macrostep), or a delayed one (a persisted timer)."""

    name = "raise"

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        p = self._prepared(where, named_delays)
        return Raise(p["event"], p["delay"], p["id"])

    def resolve(self, work: Work, params: Any = None) -> None:
        ev = _to_event(_value(self.event, work, params))
        if self.delay is None:
            work.internal_queue.append(ev)
            return
        ms = _delay_ms(self.delay, work, params, {})
        tid = self.id or f"raise.{ev.type}.{work.next_seq()}"
        rec = TimerRecord(tid, ev.to_json(), work.now_ms + ms, "self", work.owner)
        work.timers = {**work.timers, tid: rec}
        work.effects.append(ScheduleTimer(rec))


class SendToAction(_Delayed):
    """Send an event to a child actor by id (a callback's `receive`, or a child machine)."""

    name = "send_to"

    def __init__(self, target: Any, event: Any, delay: Any = None, id: str | None = None) -> None:
        super().__init__(event, delay, id)
        self.target = target

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        p = self._prepared(where, named_delays)
        target = bind(self.target, where, "send_to target") if callable(self.target) else self.target
        return SendToAction(target, p["event"], p["delay"], p["id"])

    def resolve(self, work: Work, params: Any = None) -> None:
        target = str(_value(self.target, work, params))
        ev = _to_event(_value(self.event, work, params))
        if self.delay is None:
            work.effects.append(SendTo(target, ev))
            return
        ms = _delay_ms(self.delay, work, params, {})
        tid = self.id or f"send.{target}.{ev.type}.{work.next_seq()}"
        rec = TimerRecord(tid, ev.to_json(), work.now_ms + ms, target, work.owner)
        work.timers = {**work.timers, tid: rec}
        work.effects.append(ScheduleTimer(rec))


class SendParentAction(Action):
    name = "send_parent"

    def __init__(self, event: Any) -> None:
        self.event = event

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        ev = self.event
        if callable(ev) and not isinstance(ev, (Event, Mapping, str)):
            ev = bind(ev, where, "send_parent event")
        return SendParentAction(ev)

    def resolve(self, work: Work, params: Any = None) -> None:
        work.effects.append(SendParent(_to_event(_value(self.event, work, params))))


class CancelAction(Action):
    name = "cancel"

    def __init__(self, id: Any) -> None:
        self.id = id

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        return CancelAction(bind(self.id, where, "cancel id") if callable(self.id) else self.id)

    def resolve(self, work: Work, params: Any = None) -> None:
        tid = str(_value(self.id, work, params))
        if tid in work.timers:
            work.timers = {k: v for k, v in work.timers.items() if k != tid}
        work.effects.append(CancelTimer(tid))


class LogAction(Action):
    name = "log"

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def prepare(self, where: str, named_delays: Mapping[str, Any]) -> Action:
        return LogAction(bind(self.value, where, "log") if callable(self.value) else self.value)

    def resolve(self, work: Work, params: Any = None) -> None:
        v = _value(self.value, work, params)
        work.effects.append(LogEffect(v if v is not None else {"context": work.context, "event": work.event}))


class NamedAction(Action):
    """An action named in the config (`"track"` or `{"type": "track", "params": {...}}`), set up in `actions=`."""

    def __init__(self, impl: Action, params: Any, name: str) -> None:
        self.impl = impl
        self.params = params
        self.name = name

    def resolve(self, work: Work, params: Any = None) -> None:
        p = self.params
        if isinstance(p, Bound):
            p = p(work.scope(None))
        self.impl.resolve(work, p)


def assign(values: Mapping[str, Any] | Callable[..., Any] | None = None, **kw: Any) -> Assign:
    return Assign(values, **kw)


def raise_(event: Any, delay: Any = None, id: str | None = None) -> Raise:
    return Raise(event, delay, id)


def send_to(target: Any, event: Any, delay: Any = None, id: str | None = None) -> SendToAction:
    return SendToAction(target, event, delay, id)


def send_parent(event: Any) -> SendParentAction:
    return SendParentAction(event)


def cancel(id: Any) -> CancelAction:
    return CancelAction(id)


def log(value: Any = None) -> LogAction:
    return LogAction(value)
