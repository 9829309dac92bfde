"""Effects in a Run: each is journaled as started before it runs and as finished after, so it runs at most once.

A restarted Run replays a finished Effect's recorded result; an interrupted Effect that is not idempotent is an
error, never a second run.
"""

from __future__ import annotations

import asyncio
from typing import Any

from jr2ray.authoring import EffectSpec
from jr2ray.chart import ChildHandle

from . import telemetry, tracing
from .effectors import EffectFailed, effector_for
from .engine_state import RunState
from .journal_writer import JournalWriter
from .store import LedgerKind


class Effects:
    """The run's Effect slots: what started and finished (from the journal, then as they run) and the tasks that
    run them now. Writes go through the run's writer."""

    def __init__(self, state: RunState, writer: JournalWriter) -> None:
        self.state = state
        self.writer = writer
        self.started: set[str] = set()
        self.finished: dict[str, dict[str, Any]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()

    def start(self, handle: ChildHandle, spec: EffectSpec) -> None:
        key = f"{handle.id}#{handle.record.seq}"
        loop = asyncio.get_running_loop()
        if key in self.finished:  # finished before a crash: replay the recorded result
            rec = self.finished[key]
            telemetry.effect_finished(self.state, handle.id, spec.kind, "replayed")
            if "error" in rec:
                loop.call_soon(handle.error, rec["error"])
            else:
                loop.call_soon(handle.done, rec.get("output"))
            return
        if key in self.started and not spec.idempotent:
            telemetry.effect_finished(self.state, handle.id, spec.kind, "interrupted")
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} was interrupted and is not "
                                                     f"idempotent, so it is not run again"})
            return
        interp = self.state.interp
        snap = interp.snapshot if interp and interp.snapshot else None
        try:
            effector = effector_for(spec)
            call = effector.resolve(spec, snap.context if snap else {}, handle.input,
                                    self.state.settings.home_dir() / "workspaces" / self.state.run_id)
        except Exception as exc:
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} could not be built: {exc}"})
            return
        self.started.add(key)
        # Journaled before it runs: at most once (R4).
        self.writer.stage(LedgerKind.EFFECT_STARTED, key, call)
        self.writer.flush(None)
        since = telemetry.effect_started(self.state, handle.id, spec.kind)
        span = tracing.effect_begin(self.state, handle.id, spec.kind)

        async def runner() -> None:
            try:
                output = await effector.run(call, self.state.settings)
            except asyncio.CancelledError:
                telemetry.effect_finished(self.state, handle.id, spec.kind, "cancelled", since)
                raise
            except Exception as exc:
                detail = exc.detail if isinstance(exc, EffectFailed) else {}
                err = {"message": f"{type(exc).__name__}: {exc}", **detail}
                telemetry.effect_finished(self.state, handle.id, spec.kind, "error", since, err)
                self._finish(key, {"error": err})
                tracing.effect_end(span, err)
                handle.error(err)
                return
            telemetry.effect_finished(self.state, handle.id, spec.kind, "ok", since)
            self._finish(key, {"output": output})
            tracing.effect_end(span)
            handle.done(output)

        task = loop.create_task(runner())
        handle.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _finish(self, key: str, record: dict[str, Any]) -> None:
        self.finished[key] = record
        self.writer.stage(LedgerKind.EFFECT_FINISHED, key, record)
        self.writer.flush(None)
