"""RunActor (R1): one Ray actor per run, named `run:<id>` in namespace `jr2ray`, restarted by Ray on death.

A restarted actor rebuilds its engine from the journal, so no pick, gate event or effect is lost or applied twice.
Methods are async: an outstanding pick waits for Rest without blocking the run's other calls.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from typing import Any

import ray

from jr2ray.authoring import Jr2Machine
from jr2ray.menu import Receipt, Surface
from jr2ray.settings import load_settings

from . import telemetry, tracing
from .catalog import load_workflow
from .engine import RunEngine, TurnLauncher
from .loops import running_loop
from .models import GateView, RunStatus, SendResult, Transcript, lifecycle
from .placement import Mode, set_here
from .store import open_store

NAMESPACE = "jr2ray"
EXIT_GRACE_S = 5.0  # a finished run's actor answers the calls in flight, then exits; its journal stays readable
DEFAULT_LAUNCHER = "jr2ray.harness.launcher:RayTurnLauncher"


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
_NEVER_JOURNALED = ("JR2RAY_STORE",)  # the store is given to the actor by name; its URL may hold a password


def journaled_env(env: dict[str, str] | None) -> dict[str, str]:
    """The part of a run's env that may be written to its journal (for a resume): no keys, tokens or secrets."""
    return {k: v for k, v in (env or {}).items()
            if not any(w in k.upper() for w in _SECRET_WORDS) and k not in _NEVER_JOURNALED}


def actor_name(run_id: str) -> str:
    return f"run:{run_id}"


def load_launcher(spec: str | None, run_id: str) -> TurnLauncher | None:
    """A TurnLauncher named by import path: the Harness layer plugs in here without the Run importing it."""
    if not spec:
        return None
    module_name, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(module_name), attr)
    return factory(run_id=run_id, namespace=NAMESPACE)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class RunActor:
    def __init__(self, run_id: str, workflow: str | Jr2Machine, input: Any, store: str,
                 launcher: str | None = DEFAULT_LAUNCHER, env: dict[str, str] | None = None,
                 resume: bool = False, placement: Mode = "head") -> None:
        """`store` names the journal store (a directory or a postgresql:// URL), never a path only one node sees
        unless the store is SQLite, whose runs are pinned to that node; `placement` is where its Harnesses go."""
        for k, v in (env or {}).items():
            os.environ[k] = v
        self.run_id = run_id
        self.machine = load_workflow(workflow) if isinstance(workflow, str) else workflow
        self.workflow_name = workflow if isinstance(workflow, str) else self.machine.id
        self.input = input
        self.settings = load_settings()  # read once, its env applied: its store, Effects and Turns use them
        self.store = open_store(store, self.settings)
        set_here(placement)
        self.launcher_spec = launcher
        self.origin = {"env": journaled_env(env), "launcher": launcher}
        # Only the very first start of a run may create its journal. A restart by Ray, or a resume after `up`,
        # finds the journal or reports the run lost: it never starts over from the input.
        self.may_create = not resume and not ray.get_runtime_context().was_current_actor_reconstructed
        self.engine: RunEngine | None = None
        self._events: asyncio.Queue[Any] | None = None
        telemetry.setup("run", self.settings.home_dir(create=False), on=self.settings.telemetry)
        loop = running_loop()  # start (or restore) at once, so timers and effects resume without waiting for a call
        if loop is not None:
            loop.call_soon(self._ensure)

    def _ensure(self) -> RunEngine:
        if self.engine is None:
            self.engine = RunEngine.from_store(self.machine, self.run_id, self.input, self.store,
                                               create=self.may_create,
                                               launcher=load_launcher(self.launcher_spec, self.run_id),
                                               workflow_name=self.workflow_name, origin=self.origin,
                                               settings=self.settings)
            if self.engine.journal is not None:  # this incarnation's write lease: an older one still alive (a
                # node that lost touch and came back) is fenced from its next commit on, and stops
                self.engine.journal.claim(f"{ray.get_runtime_context().get_node_id()[:12]}:{os.getpid()}")
            self.engine.start()
            self._exiting = asyncio.get_running_loop().create_task(self._exit_when_finished(self.engine))
        return self.engine

    async def _exit_when_finished(self, engine: RunEngine) -> None:
        """A done, failed or cancelled run holds no process: after a short grace the actor ends itself (no restart)."""
        await engine.wait()
        if lifecycle(engine.status_name()) != "finished":
            return
        await asyncio.sleep(EXIT_GRACE_S)
        ray.get_runtime_context().current_actor.__ray_terminate__.remote()

    async def ready(self) -> RunStatus:
        return self._ensure().status()

    async def surface(self, address: str) -> Surface:
        return self._ensure().surface(address)

    async def pick(self, address: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None) -> Receipt:
        eng = self._ensure()
        return await telemetry.picked(eng, address, name, eng.pick(address, name, args or {}, delivery_id))

    async def fault(self, address: str, reason: str) -> None:
        self._ensure().fault(address, reason)

    async def record_transcript(self, address: str, entry: dict[str, Any]) -> None:
        """Journal messages a Turn's Harness sent or received (a TranscriptEntry's dict)."""
        self._ensure().record_transcript(address, entry)

    async def transcript(self, address: str) -> Transcript:
        """The Turn's conversation as journaled, for a Harness that (re)starts it."""
        return self._ensure().transcript(address)

    async def turn_waits(self, address: str, key: str | None) -> None:
        """A Turn's Harness waits for Turn admission (None: it was let in). A run on its own actor never parks."""
        self._ensure().turn_waits(address, key)

    async def gates(self) -> list[GateView]:
        return self._ensure().gates()

    async def send(self, gate_id: str, name: str, args: dict[str, Any] | None = None,
                   delivery_id: str | None = None, traceparent: str | None = None) -> SendResult:
        eng = self._ensure()
        with tracing.caller(traceparent):
            return telemetry.gate_event(eng, gate_id, name, lambda: eng.send(gate_id, name, args or {}, delivery_id))

    async def status(self) -> RunStatus:
        return self._ensure().status()

    async def cancel(self) -> RunStatus:
        return self._ensure().cancel()

    async def stop(self) -> RunStatus:
        return self._ensure().stop()

    async def wait(self, timeout: float | None = None) -> RunStatus:
        return await self._ensure().wait(timeout)

    async def telemetry(self) -> list[dict[str, Any]]:
        return self._ensure().telemetry()

    async def record_telemetry(self, row: Any) -> None:
        """Telemetry pushed by this run's Harnesses (H12): a RequestTelemetry model or its dict."""
        self._ensure().record_telemetry(row.model_dump(mode="json") if hasattr(row, "model_dump") else dict(row))

    async def history(self, since: int = 0) -> list[dict[str, Any]]:
        """Feed events numbered from `since` on; each carries its number `seq`, which stays put when old ones are
        trimmed and across restarts (the journal keeps them)."""
        return self._ensure().feed(since)

    async def pid(self) -> int:
        return os.getpid()

    async def node(self) -> str:
        """The id of the Ray node this incarnation runs on (placement tests, `jr2ray status`)."""
        return ray.get_runtime_context().get_node_id()
