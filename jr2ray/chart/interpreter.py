"""The asyncio actor that runs a Machine: run-to-completion event processing, children, timers, custom actions.

It keeps the pure algorithm pure: after each macrostep it reconciles the live children and timers against the
snapshot, so a restored snapshot and a fresh one are started the same way.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .algorithm import fire_timer, initial_transition_traced, transition_traced
from .effects import ChildRecord
from .errors import ChartConfigError, ChartError
from .event import Event
from .nodes import Machine
from .snapshot import Snapshot, restore

_LOGIC_NAMES = frozenset({"input", "send_back", "receive", "self", "signal", "emit"})


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """Injectable time: the wall clock in production, a ManualClock in tests."""

    def now_ms(self) -> float: ...

    def call_at(self, deadline_ms: float, cb: Callable[[], None]) -> TimerHandle: ...


class WallClock:
    def now_ms(self) -> float:
        return time.time() * 1000.0

    def call_at(self, deadline_ms: float, cb: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        return loop.call_later(max(0.0, (deadline_ms - self.now_ms()) / 1000.0), cb)


class _ManualHandle:
    __slots__ = ("deadline", "cb", "cancelled", "order")

    def __init__(self, deadline: float, cb: Callable[[], None], order: int) -> None:
        self.deadline = deadline
        self.cb = cb
        self.cancelled = False
        self.order = order

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when told to; `advance` fires due timers in deadline order, synchronously."""

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = float(start_ms)
        self._handles: list[_ManualHandle] = []
        self._n = 0

    def now_ms(self) -> float:
        return self._now

    def call_at(self, deadline_ms: float, cb: Callable[[], None]) -> TimerHandle:
        self._n += 1
        h = _ManualHandle(float(deadline_ms), cb, self._n)
        self._handles.append(h)
        return h

    def pending(self) -> int:
        return sum(1 for h in self._handles if not h.cancelled)

    def advance(self, ms: float) -> None:
        target = self._now + float(ms)
        while True:
            due = [h for h in self._handles if not h.cancelled and h.deadline <= target]
            if not due:
                break
            h = min(due, key=lambda x: (x.deadline, x.order))
            self._handles.remove(h)
            self._now = max(self._now, h.deadline)
            h.cb()
        self._handles = [h for h in self._handles if not h.cancelled]
        self._now = target


def _logic_names(fn: Callable[..., Any], what: str) -> tuple[str, ...]:
    names = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
            continue
        if p.name not in _LOGIC_NAMES:
            if p.default is not inspect.Parameter.empty:
                continue
            raise ChartConfigError(f"{what} {getattr(fn, '__name__', fn)!r} takes {p.name!r}; "
                                   f"it may take only {sorted(_LOGIC_NAMES)}")
        names.append(p.name)
    return tuple(names)


@dataclass(frozen=True)
class PromiseLogic:
    """An async function child: its return is the done output, its raise is the error."""

    fn: Callable[..., Awaitable[Any]]
    names: tuple[str, ...]


@dataclass(frozen=True)
class CallbackLogic:
    """A callback child: gets `send_back` and `receive`, may return a cleanup run when it stops."""

    fn: Callable[..., Any]
    names: tuple[str, ...]


def from_promise(fn: Callable[..., Awaitable[Any]]) -> PromiseLogic:
    return PromiseLogic(fn, _logic_names(fn, "from_promise"))


def from_callback(fn: Callable[..., Any]) -> CallbackLogic:
    return CallbackLogic(fn, _logic_names(fn, "from_callback"))


class ChildHandle:
    """What a running child may do to its parent. Custom starters (the Run's gates, effects, agents) get one."""

    def __init__(self, parent: Interpreter, record: ChildRecord) -> None:
        self.parent = parent
        self.record = record
        self.id = record.id
        self.src = record.src
        self.input = record.input
        self.stopped = False
        self.finished = False
        self._on_stop: list[Callable[[], None]] = []
        self._on_receive: list[Callable[[Event], None]] = []
        self.child: Interpreter | None = None
        self.task: asyncio.Task[Any] | None = None

    def done(self, output: Any = None) -> None:
        if self.stopped or self.finished:
            return
        self.finished = True
        self.parent._child_finished(self)
        self.parent.send(Event(f"xstate.done.actor.{self.id}", {"output": output}))

    def error(self, error: Any) -> None:
        if self.stopped or self.finished:
            return
        self.finished = True
        self.parent._child_finished(self)
        err = error if isinstance(error, (str, int, float, dict, list, type(None))) else \
            {"name": type(error).__name__, "message": str(error)}
        self.parent.send(Event(f"xstate.error.actor.{self.id}", {"error": err}))

    def send_parent(self, event: Event | Mapping[str, Any] | str) -> None:
        if not self.stopped:
            self.parent.send(event)

    def on_stop(self, cb: Callable[[], None]) -> None:
        self._on_stop.append(cb)

    def on_receive(self, cb: Callable[[Event], None]) -> None:
        self._on_receive.append(cb)

    def receive(self, event: Event) -> None:
        if self.child is not None:
            self.child.send(event)
        for cb in list(self._on_receive):
            cb(event)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.task is not None and not self.task.done():
            self.task.cancel()
        if self.child is not None:
            self.child.stop()
        for cb in reversed(self._on_stop):
            cb()


Starter = Callable[[ChildHandle, Any], bool]
CommitHook = Callable[[Snapshot, list[Any]], None]


class Interpreter:
    """Runs one Machine. Events are processed one at a time; events sent meanwhile wait their turn."""

    def __init__(self, machine: Machine, input: Any = None, *, clock: Clock | None = None,
                 snapshot: Snapshot | None = None, parent: Interpreter | None = None, id: str = "root",
                 starter: Starter | None = None,
                 extras: Callable[[Event | None], Mapping[str, Any]] | None = None) -> None:
        self.machine = machine
        self.input = input
        self.clock: Clock = clock or (parent.clock if parent else WallClock())
        self.parent = parent
        self.id = id
        self.starter: Starter | None = starter or (parent.starter if parent else None)
        self._extras = extras
        self._restored = snapshot
        self.snapshot: Snapshot | None = None
        self._queue: deque[Event] = deque()
        self._processing = False
        self._live: dict[str, ChildHandle] = {}
        self._finished_seqs: set[tuple[str, int]] = set()
        self._timer_handles: dict[str, tuple[float, TimerHandle]] = {}
        self._subscribers: list[Callable[[Snapshot], None]] = []
        self._commit_hooks: list[CommitHook] = []
        self._ignored_hooks: list[Callable[[Snapshot, Event], None]] = []
        self.last_took: list[Any] = []
        self.last_event: Event | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.logs: list[Any] = []
        self.started = False
        self._notified_parent = False

    # ---- observation -----------------------------------------------------------------------------------------
    def subscribe(self, cb: Callable[[Snapshot], None]) -> Callable[[], None]:
        self._subscribers.append(cb)
        return lambda: self._subscribers.remove(cb) if cb in self._subscribers else None

    def on_commit(self, hook: CommitHook) -> None:
        """Called after every macrostep with the new snapshot and its effects, before any effect runs."""
        self._commit_hooks.append(hook)

    def quiet(self, snap: Snapshot, effects: list[Any]) -> bool:
        """Will committing `snap` with `effects` reach nothing outside this interpreter: no action called, no event
        sent, no child started or stopped, the machine still running? (Timers are only scheduled here; they fire
        later, from the loop.) A commit hook may then persist this macrostep with what the same call writes next."""
        if snap.status != "active" or any(getattr(e, "reaches_out", False) for e in effects):
            return False
        wanted = {cid: rec.seq for cid, rec in snap.children.items() if rec.status == "active"}
        if any(wanted.get(cid) != h.record.seq for cid, h in self._live.items()):
            return False
        return all(cid in self._live or (cid, seq) in self._finished_seqs for cid, seq in wanted.items())

    def on_ignored(self, hook: Callable[[Snapshot, Event], None]) -> None:
        """Called when an event changed nothing (no transition selected)."""
        self._ignored_hooks.append(hook)

    def extras(self, event: Event | None = None) -> dict[str, Any]:
        """Extra names for user callables (the Run's `chain`), computed for the event about to be processed."""
        return dict(self._extras(event)) if self._extras else {}

    # ---- lifecycle -------------------------------------------------------------------------------------------
    def start(self) -> Interpreter:
        if self.started:
            return self
        self.started = True
        self._processing = True
        try:
            self._start_commit()
        finally:
            self._processing = False
        self._drain()
        return self

    def _start_commit(self) -> None:
        if self._restored is not None:
            self._commit(self._restored, [], [])
        else:
            try:
                snap, effects, took = initial_transition_traced(self.machine, self.input, self.clock.now_ms(),
                                                                self.extras())
            except ChartError as exc:
                snap, effects, took = Snapshot(self.machine, frozenset(), {}, "error", None, str(exc)), [], []
            self._commit(snap, effects, took)

    def stop(self) -> None:
        for h in list(self._live.values()):
            h.stop()
        self._live.clear()
        for _, th in self._timer_handles.values():
            th.cancel()
        self._timer_handles.clear()
        if self.snapshot is not None and self.snapshot.status == "active":
            self.snapshot = self.snapshot.with_(status="stopped")
            for cb in list(self._subscribers):
                cb(self.snapshot)

    # ---- events ----------------------------------------------------------------------------------------------
    def send(self, event: Event | Mapping[str, Any] | str) -> None:
        self._queue.append(Event.from_any(event))
        if self.started:
            self._drain()

    def _drain(self) -> None:
        if self._processing:
            return
        self._processing = True
        try:
            while self._queue:
                ev = self._queue.popleft()
                snap = self.snapshot
                if snap is None or snap.status != "active":
                    continue
                try:
                    nxt, effects, took = transition_traced(self.machine, snap, ev, self.clock.now_ms(),
                                                           self.extras(ev))
                except ChartError as exc:
                    nxt, effects, took = snap.with_(status="error", error=str(exc)), [], []
                if nxt is snap and not effects:
                    for hook in list(self._ignored_hooks):
                        hook(snap, ev)
                    continue
                self._commit(nxt, effects, took, ev)
        finally:
            self._processing = False

    def _fire(self, timer_id: str) -> None:
        self._timer_handles.pop(timer_id, None)
        snap = self.snapshot
        if snap is None or snap.status != "active" or timer_id not in snap.timers:
            return
        if self._processing:
            # Fired from inside a macrostep (ManualClock.advance in an action): run it after.
            rec = snap.timers[timer_id]
            self._queue.append(Event.from_any(rec.event))
            return
        self._processing = True
        try:
            rec = snap.timers[timer_id]
            try:
                nxt, effects, took = fire_timer(self.machine, snap, timer_id, self.clock.now_ms(),
                                                self.extras(Event.from_any(rec.event)))
            except ChartError as exc:
                nxt, effects, took = snap.with_(status="error", error=str(exc)), [], []
            self._commit(nxt, effects, took, Event.from_any(rec.event))
        finally:
            self._processing = False
        self._drain()

    # ---- commit ----------------------------------------------------------------------------------------------
    def _commit(self, snap: Snapshot, effects: list[Any], took: list[Any] | None = None,
                event: Event | None = None) -> None:
        self.snapshot = snap
        self.last_took = took or []
        self.last_event = event
        for hook in list(self._commit_hooks):
            hook(snap, effects)
        self._reconcile_children(snap)
        for eff in effects:
            self._run_effect(eff)
        self._reconcile_timers(snap)
        if snap.status != "active":
            for h in list(self._live.values()):
                h.stop()
            self._live.clear()
            self._notify_parent(snap)
        for cb in list(self._subscribers):
            cb(self.snapshot if self.snapshot is not None else snap)

    def _run_effect(self, eff: Any) -> None:
        """Execute one effect through its own `execute`; effects without one are not the actor's to run (timers
        and children are reconciled from the snapshot, a Run reads its answers in its commit hook)."""
        execute = getattr(eff, "execute", None)
        if execute is not None:
            execute(self)

    # ---- what an executed effect may do (effects.EffectActor) --------------------------------------------------
    def action_failed(self, name: str, exc: Exception) -> None:
        """A custom action raised: the actor fails, like xstate's."""
        if self.snapshot is not None and self.snapshot.status == "active":
            self.snapshot = self.snapshot.with_(status="error", error=f"action {name} raised: {exc!r}")

    def record_log(self, value: Any) -> None:
        self.logs.append(value)

    def deliver_to_child(self, target: str, event: Event) -> None:
        h = self._live.get(target)
        if h is not None:
            h.receive(event)

    def deliver_to_parent(self, event: Event) -> None:
        if self.parent is not None:
            self.parent.send(event)

    def _notify_parent(self, snap: Snapshot) -> None:
        if self.parent is None or self._notified_parent:
            return
        self._notified_parent = True
        handle = self.parent._live.get(self.id)
        if handle is None:
            return
        if snap.status == "done":
            handle.done(snap.output)
        elif snap.status == "error":
            handle.error(snap.error)

    def _child_finished(self, handle: ChildHandle) -> None:
        self._finished_seqs.add((handle.id, handle.record.seq))
        if self._live.get(handle.id) is handle:
            del self._live[handle.id]

    def _reconcile_children(self, snap: Snapshot) -> None:
        wanted = {cid: rec for cid, rec in snap.children.items() if rec.status == "active"} \
            if snap.status == "active" else {}
        for cid, h in list(self._live.items()):
            rec = wanted.get(cid)
            if rec is None or rec.seq != h.record.seq:
                del self._live[cid]
                h.stop()
        for cid, rec in wanted.items():
            if cid in self._live or (cid, rec.seq) in self._finished_seqs:
                continue
            self._start_child(rec)

    def _start_child(self, rec: ChildRecord) -> None:
        logic = self.machine.actors.get(rec.src)
        handle = ChildHandle(self, rec)
        self._live[rec.id] = handle
        if self.starter is not None and self.starter(handle, logic):
            return
        if isinstance(logic, PromiseLogic):
            kwargs = {n: v for n, v in (("input", rec.input), ("self", handle)) if n in logic.names}

            async def runner() -> None:
                try:
                    out = await logic.fn(**kwargs)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    handle.error(exc)
                    return
                handle.done(out)

            task = asyncio.get_running_loop().create_task(runner())
            handle.task = task
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif isinstance(logic, CallbackLogic):
            def receive(cb: Callable[[Event], None]) -> None:
                handle.on_receive(cb)

            avail = {"input": rec.input, "send_back": handle.send_parent, "receive": receive, "self": handle}
            try:
                cleanup = logic.fn(**{n: avail[n] for n in logic.names if n in avail})
            except Exception as exc:
                handle.error(exc)
                return
            if callable(cleanup):
                handle.on_stop(cleanup)
        elif isinstance(logic, Machine):
            restored = restore(logic, rec.snapshot) if rec.snapshot else None
            child = Interpreter(logic, rec.input, parent=self, id=rec.id, snapshot=restored)
            handle.child = child
            child.start()
        else:
            handle.error(f"no way to start src {rec.src!r}")

    def _reconcile_timers(self, snap: Snapshot) -> None:
        wanted = snap.timers if snap.status == "active" else {}
        for tid, (deadline, th) in list(self._timer_handles.items()):
            rec = wanted.get(tid)
            if rec is None or rec.deadline_ms != deadline:
                th.cancel()
                del self._timer_handles[tid]
        for tid, rec in wanted.items():
            if tid not in self._timer_handles:
                th = self.clock.call_at(rec.deadline_ms, functools.partial(self._fire, tid))
                self._timer_handles[tid] = (rec.deadline_ms, th)

    # ---- persistence and waiting -----------------------------------------------------------------------------
    def persisted(self) -> dict[str, Any]:
        """The snapshot's JSON with each live child machine's own snapshot inside its record."""
        assert self.snapshot is not None
        data = self.snapshot.to_json()
        for cid, h in self._live.items():
            if h.child is not None and h.child.snapshot is not None and cid in data["children"]:
                data["children"][cid]["snapshot"] = h.child.persisted()
        return data

    async def settled(self, timeout: float = 10.0) -> None:
        """Wait until no child task is pending (promises included, in child machines too)."""
        deadline = time.monotonic() + timeout
        while True:
            await asyncio.sleep(0)
            tasks = self._all_tasks()
            if not tasks:
                await asyncio.sleep(0)
                if not self._all_tasks():
                    return
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("children still running")
            await asyncio.wait(tasks, timeout=remaining)

    def _all_tasks(self) -> set[asyncio.Task[Any]]:
        out = {t for t in self._tasks if not t.done()}
        for h in self._live.values():
            if h.child is not None:
                out |= h.child._all_tasks()
        return out

    async def wait_for(self, pred: Callable[[Snapshot], bool], timeout: float = 10.0) -> Snapshot:
        if self.snapshot is not None and pred(self.snapshot):
            return self.snapshot
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Snapshot] = loop.create_future()

        def check(s: Snapshot) -> None:
            if not fut.done() and pred(s):
                fut.set_result(s)

        unsub = self.subscribe(check)
        try:
            return await asyncio.wait_for(fut, timeout)
        finally:
            unsub()
