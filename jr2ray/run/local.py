"""LocalRun (R2): the same engine in-process, without Ray, for unit tests and notebooks."""

from __future__ import annotations

import os
import uuid
from typing import Any

from jr2ray.authoring import Jr2Machine
from jr2ray.chart import Clock
from jr2ray.menu import Receipt, Surface
from jr2ray.settings import Settings, load_settings

from .engine import RunEngine, TurnLauncher
from .models import GateView, RunStatus, SendResult
from .store import JournalStore


class LocalRun:
    """Drive a Workflow in this process. Construct it inside a running event loop (it starts at once)."""

    def __init__(self, machine: Jr2Machine, input: Any = None, *, run_id: str | None = None,
                 store: JournalStore | None = None, launcher: TurnLauncher | None = None, clock: Clock | None = None,
                 settings: Settings | None = None) -> None:
        """`settings`: the in-process driver's (where its Effects and Turns work); read now when not given."""
        self.id = run_id or uuid.uuid4().hex[:12]
        self.machine = machine
        settings = settings or load_settings()
        if store is not None:
            self.engine = RunEngine.from_store(machine, self.id, input, store, create=True, launcher=launcher,
                                               clock=clock, settings=settings)
        else:
            self.engine = RunEngine(machine, self.id, input, launcher=launcher, clock=clock, settings=settings)
        bind = getattr(launcher, "bind", None)
        if callable(bind):  # an in-process launcher needs the engine to build its port
            bind(self.engine)
        self.engine.start()

    def surface(self, address: str) -> Surface:
        return self.engine.surface(address)

    async def pick(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> Receipt:
        return await self.engine.pick(address, name, args or {}, delivery_id)

    def gates(self) -> list[GateView]:
        return self.engine.gates()

    def send(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
             delivery_id: str | None = None) -> SendResult:
        return self.engine.send(gate_id, name, args or {}, delivery_id)

    def fault(self, address: str, reason: str) -> None:
        self.engine.fault(address, reason)

    def status(self) -> RunStatus:
        return self.engine.status()

    @property
    def value(self) -> Any:
        return self.engine.snapshot.value

    @property
    def context(self) -> dict[str, Any]:
        return self.engine.snapshot.context

    @property
    def output(self) -> Any:
        return self.engine.snapshot.output

    def cancel(self) -> RunStatus:
        return self.engine.cancel()

    def stop(self) -> RunStatus:
        return self.engine.stop()

    async def wait(self, timeout: float | None = None) -> RunStatus:
        return await self.engine.wait(timeout)

    def telemetry(self) -> list[dict[str, Any]]:
        return self.engine.telemetry()

    def ready(self) -> RunStatus:
        return self.engine.status()

    def history(self, since: int = 0) -> list[dict[str, Any]]:
        return self.engine.feed(since)

    def pid(self) -> int:
        return os.getpid()

    def record_telemetry(self, row: dict[str, Any]) -> None:
        self.engine.record_telemetry(dict(row))
