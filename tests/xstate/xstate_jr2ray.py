"""jr2ray's side of the differential tier: a spec (xstate_spec) as a jr2ray config, run through the pure
`initial_transition` / `transition` / `fire_timer` / `can`, with jr2ray's ManualClock holding the timers.

Each step yields the same record runner.mjs prints for xstate: value, context, status, output, the action trace
and `can()` for every probe (never on a snapshot that is not active: a documented difference).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import jr2ray.chart.algorithm as algorithm
from jr2ray.chart import (CallAction, CancelTimer, ChartError, Event, ManualClock, ScheduleTimer, and_, assign, can,
                          cancel, create_machine, fire_timer, from_promise, initial_transition, not_, or_, raise_,
                          state_in, transition)
from jr2ray.chart.snapshot import Snapshot

MAX_MICROSTEPS = 100  # the same bound runner.mjs gives xstate (maxIterations): a loop is an error on both sides


def _show(event: Any) -> str:
    for key in ("k", "output", "error"):
        v = event.get(key)
        if v is not None:
            return str(v)
    return "-"


def _ev_k(event: Any) -> int:
    k = event.get("k")
    return k if isinstance(k, int) and not isinstance(k, bool) else 0


def _guard(g: list[Any]) -> Any:
    op = g[0]
    if op == "ge":
        key, k = g[1], g[2]
        return lambda context: context[key] >= k
    if op == "lt":
        key, k = g[1], g[2]
        return lambda context: context[key] < k
    if op == "ev":
        v = g[1]
        return lambda event: event.get("k") == v
    if op == "in":
        return state_in(g[1])
    if op == "not":
        return not_(_guard(g[1]))
    if op == "and":
        return and_([_guard(x) for x in g[1]])
    if op == "or":
        return or_([_guard(x) for x in g[1]])
    raise ValueError(f"unknown guard {g!r}")


def _expr(e: list[Any]) -> Callable[[Any, Any], Any]:
    if e[0] == "add":
        key, c = e[1], e[2]
        return lambda context, event: context[key] + c
    if e[0] == "ev":
        return lambda context, event: _ev_k(event)
    if e[0] == "const":
        c = e[1]
        return lambda context, event: c
    raise ValueError(f"unknown expr {e!r}")


def _prop(f: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    return lambda context, event: f(context, event)


def _whole(parts: list[tuple[str, Callable[[Any, Any], Any]]]) -> Callable[..., Any]:
    return lambda context, event: {k: f(context, event) for k, f in parts}


def _trace(tag: str, sink: list[str]) -> Callable[..., None]:
    def trace(context: Any, event: Any) -> None:
        sink.append(f"{tag}|{context['n']}|{context['m']}|{context['v']}|{event.type}|{_show(event)}")

    return trace


def _event(etype: str, k: Any) -> dict[str, Any]:
    return {"type": etype} if k is None else {"type": etype, "k": k}


def _action(a: list[Any], sink: list[str]) -> Any:
    op = a[0]
    if op == "trace":
        return _trace(a[1], sink)
    if op == "asg":
        parts = [(k, _expr(e)) for k, e in a[2]]
        if a[1] == "obj":
            return assign({k: _prop(f) for k, f in parts})
        return assign(_whole(parts))
    if op == "raise":
        return raise_(_event(a[1], a[2]))
    if op == "draise":
        return raise_(_event(a[1], a[2]), delay=a[3], id=a[4])
    if op == "cancel":
        return cancel(a[1])
    raise ValueError(f"unknown action {a!r}")


def _transitions(ts: list[dict[str, Any]], sink: list[str]) -> list[dict[str, Any]]:
    out = []
    for t in ts:
        cfg: dict[str, Any] = {}
        if t.get("target") is not None:
            cfg["target"] = list(t["target"])
        if t.get("guard"):
            cfg["guard"] = _guard(t["guard"])
        if t.get("actions"):
            cfg["actions"] = [_action(a, sink) for a in t["actions"]]
        if t.get("reenter"):
            cfg["reenter"] = True
        out.append(cfg)
    return out


def _value_fn(spec: list[Any]) -> Any:
    if spec[0] == "ctx":
        key = spec[1]
        return lambda context: context[key]
    return spec[1]


def _state(n: dict[str, Any], sink: list[str]) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    if n.get("id"):
        cfg["id"] = n["id"]
    if n["type"] == "history":
        cfg.update(type="history", history=n["history"])
        if n.get("target"):
            cfg["target"] = list(n["target"])
        return cfg
    if n["type"] in ("parallel", "final"):
        cfg["type"] = n["type"]
    if n.get("initial"):
        cfg["initial"] = n["initial"]
    if n.get("states"):
        cfg["states"] = {c["key"]: _state(c, sink) for c in n["states"]}
    for key in ("entry", "exit"):
        if n.get(key):
            cfg[key] = [_action(a, sink) for a in n[key]]
    if n.get("on"):
        cfg["on"] = {d: _transitions(ts, sink) for d, ts in n["on"]}
    if n.get("always"):
        cfg["always"] = _transitions(n["always"], sink)
    if n.get("after"):
        cfg["after"] = {d: _transitions(ts, sink) for d, ts in n["after"]}
    if n.get("onDone"):
        cfg["onDone"] = _transitions(n["onDone"], sink)
    inv = n.get("invoke")
    if inv:
        icfg: dict[str, Any] = {"src": "p", "input": _value_fn(inv["input"])}
        if inv.get("id"):
            icfg["id"] = inv["id"]
        for key in ("onDone", "onError"):
            if inv.get(key):
                icfg[key] = _transitions(inv[key], sink)
        cfg["invoke"] = icfg
    if n.get("output"):
        cfg["output"] = _value_fn(n["output"])
    return cfg


async def _never(input: Any) -> Any:  # never started: the tier delivers promise outcomes itself
    raise AssertionError("not run")


def to_config(spec: dict[str, Any], sink: list[str]) -> dict[str, Any]:
    """The jr2ray config (inline functions) with the same meaning as runner.mjs's xstate config."""
    cfg = _state(spec["root"], sink)
    cfg["id"] = spec["id"]
    cfg["context"] = dict(spec["context"])
    if spec.get("output"):
        cfg["output"] = lambda context, event: {"n": context["n"], "o": event.get("output")}
    return cfg


@contextlib.contextmanager
def _bounded() -> Iterator[None]:
    saved = algorithm.MAX_MICROSTEPS
    algorithm.MAX_MICROSTEPS = MAX_MICROSTEPS
    try:
        yield
    finally:
        algorithm.MAX_MICROSTEPS = saved


class Run:
    """One case through jr2ray. Timers live on a ManualClock, scheduled in the order the effects ask."""

    def __init__(self, case: dict[str, Any]) -> None:
        self.sink: list[str] = []
        self.machine = create_machine(to_config(case["chart"], self.sink), actors={"p": from_promise(_never)})
        self.probes = [Event.from_any(dict(p)) for p in case["probes"]]
        self.clock = ManualClock()
        self.handles: dict[str, Any] = {}
        self.snap: Snapshot | None = None
        self.failed = False

    def _apply(self, snap: Snapshot, effects: list[Any]) -> None:
        for eff in effects:
            if isinstance(eff, CallAction):
                eff.fn(**eff.kwargs)
            elif isinstance(eff, ScheduleTimer):
                tid = eff.timer.id
                old = self.handles.pop(tid, None)
                if old is not None:
                    old.cancel()
                self.handles[tid] = self.clock.call_at(eff.timer.deadline_ms, lambda tid=tid: self._fire(tid))
            elif isinstance(eff, CancelTimer):
                h = self.handles.pop(eff.id, None)
                if h is not None:
                    h.cancel()
        self.snap = snap
        for tid in [t for t in self.handles if t not in snap.timers]:
            self.handles.pop(tid).cancel()

    def _guarded(self, fn: Callable[[], tuple[Snapshot, list[Any]]]) -> None:
        if self.failed:
            return
        try:
            with _bounded():
                snap, effects = fn()
        except ChartError:
            self.failed = True
            return
        self._apply(snap, effects)

    def _fire(self, tid: str) -> None:
        self.handles.pop(tid, None)
        snap = self.snap
        if snap is None or self.failed or snap.status != "active":
            return
        self._guarded(lambda: fire_timer(self.machine, snap, tid, self.clock.now_ms())[:2])

    def start(self) -> dict[str, Any]:
        self._guarded(lambda: initial_transition(self.machine, None, now_ms=self.clock.now_ms()))
        return self.record()

    def step(self, step: list[Any]) -> dict[str, Any]:
        snap = self.snap
        assert snap is not None
        if step[0] == "send":
            self._guarded(lambda: transition(self.machine, snap, dict(step[1]), now_ms=self.clock.now_ms()))
        elif step[0] == "advance":
            self.clock.advance(step[1])
        else:
            rec = snap.children.get(step[1])
            if rec is not None and rec.status == "active":
                out = rec.input * 10 + step[2]
                ev = Event(f"xstate.done.actor.{step[1]}", {"output": out}) if step[0] == "resolve" else \
                    Event(f"xstate.error.actor.{step[1]}", {"error": out})
                self._guarded(lambda: transition(self.machine, snap, ev, now_ms=self.clock.now_ms()))
        return self.record()

    def record(self) -> dict[str, Any]:
        trace = self.sink[:]
        self.sink.clear()
        s = self.snap
        if self.failed or s is None or s.status == "error":
            return {"status": "error"}
        assert set(self.handles) == set(s.timers), "the clock's timers and the snapshot's disagree"
        rec = {"value": s.value, "context": s.context, "status": s.status, "output": s.output, "trace": trace,
               "can": [can(s, p) for p in self.probes] if s.status == "active" else None}
        return json.loads(json.dumps(rec))


def run_case(case: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step's record, stopping after the first snapshot that is not active (as runner.mjs does)."""
    run = Run(case)
    out = [run.start()]
    for step in case["steps"]:
        if out[-1]["status"] != "active":
            break
        out.append(run.step(step))
    return out
