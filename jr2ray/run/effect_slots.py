"""Effects in a Run: each is journaled as started before it runs and as finished after, so it runs at most once.

A restarted Run replays a finished Effect's recorded result; an interrupted Effect that is not idempotent is an
error, never a second run.
"""

from __future__ import annotations

import asyncio

from jr2ray.authoring import EffectSpec
from jr2ray.chart import ChildHandle

from . import tracing
from .config import home
from .effectors import EffectFailed, effector_for
from .engine_state import EngineState
from .store import LedgerKind


class EffectsMixin(EngineState):
    """The Effect half of RunEngine."""

    def _start_effect(self, handle: ChildHandle, spec: EffectSpec) -> None:
        key = f"{handle.id}#{handle.record.seq}"
        loop = asyncio.get_running_loop()
        if key in self._effects_finished:  # finished before a crash: replay the recorded result
            rec = self._effects_finished[key]
            if "error" in rec:
                loop.call_soon(handle.error, rec["error"])
            else:
                loop.call_soon(handle.done, rec.get("output"))
            return
        if key in self._effects_started and not spec.idempotent:
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} was interrupted and is not "
                                                     f"idempotent, so it is not run again"})
            return
        snap = self.interp.snapshot if self.interp and self.interp.snapshot else None
        try:
            effector = effector_for(spec)
            call = effector.resolve(spec, snap.context if snap else {}, handle.input,
                                    home() / "workspaces" / self.run_id)
        except Exception as exc:
            loop.call_soon(handle.error, {"message": f"effect {handle.id!r} could not be built: {exc}"})
            return
        self._effects_started.add(key)
        # Journaled before it runs: at most once (R4).
        self._stage(LedgerKind.EFFECT_STARTED, key, call)
        self._flush(None)
        span = tracing.effect_begin(self, handle.id, spec.kind)

        async def runner() -> None:
            try:
                output = await effector.run(call)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                detail = exc.detail if isinstance(exc, EffectFailed) else {}
                err = {"message": f"{type(exc).__name__}: {exc}", **detail}
                self._effects_finished[key] = {"error": err}
                self._stage(LedgerKind.EFFECT_FINISHED, key, {"error": err})
                self._flush(None)
                tracing.effect_end(span, err)
                handle.error(err)
                return
            self._effects_finished[key] = {"output": output}
            self._stage(LedgerKind.EFFECT_FINISHED, key, {"output": output})
            self._flush(None)
            tracing.effect_end(span)
            handle.done(output)

        task = loop.create_task(runner())
        handle.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
