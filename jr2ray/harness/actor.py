"""`HarnessActor`: one Ray actor per Agent conversation (R1), a thin shell around a `Conversation`.

Ray is imported here and nowhere else in the Harness. The undecorated `HarnessActorImpl` is kept importable so the
unit tier can drive it without starting Ray.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, TypeVar

import ray
from ray.actor import ActorHandle

from jr2ray.harness.admission import Admission
from jr2ray.harness.port import RunPort
from jr2ray.harness.providers import ProviderConfig, ProviderRegistry
from jr2ray.harness.spec import Limits, TurnResult, TurnSpec
from jr2ray.harness.telemetry import RequestTelemetry
from jr2ray.harness.transcript import Message
from jr2ray.harness.turn import Conversation
from jr2ray.menu.models import Receipt, Surface
from jr2ray.run import telemetry as events
from jr2ray.run import tracing
from jr2ray.run.hosted_ref import RunOnHost
from jr2ray.run.models import Transcript, TranscriptEntry
from jr2ray.settings import load_settings

_M = TypeVar("_M", Surface, Receipt, Transcript)


class ActorPort:
    """A `RunPort` over a Run actor handle that exposes `surface(iid)`, `pick(iid, name, args)` and `fault(iid,
    reason)` as actor methods. A `TurnOver` raised in the Run arrives wrapped in a `RayTaskError`; the Harness
    recognises it through the cause chain."""

    def __init__(self, handle: ActorHandle[Any] | RunOnHost) -> None:
        self._handle = handle

    async def surface(self, iid: str) -> Surface:
        return _as(Surface, await self._handle.surface.remote(iid))

    async def pick(self, iid: str, name: str, args: dict[str, Any], delivery_id: str | None = None) -> Receipt:
        return _as(Receipt, await self._handle.pick.remote(iid, name, args, delivery_id))

    async def fault(self, iid: str, reason: str) -> None:
        await self._handle.fault.remote(iid, reason)

    async def record(self, iid: str, entry: TranscriptEntry) -> None:
        await self._handle.record_transcript.remote(iid, entry.model_dump())

    async def transcript(self, iid: str) -> Transcript:
        return _as(Transcript, await self._handle.transcript.remote(iid))

    async def waits(self, iid: str, key: str | None) -> None:
        await self._handle.turn_waits.remote(iid, key)


def _remote_admission(handle: Any) -> Admission | None:
    """The budget actor's handle as the Conversation's `Admission` port (checked first: an actor handle answers
    any attribute, so it would pass for the Protocol itself)."""
    if isinstance(handle, ActorHandle):
        from jr2ray.harness.budget_actor import RemoteAdmission

        return RemoteAdmission(handle)
    if handle is None or isinstance(handle, Admission):
        return handle
    raise TypeError(f"not a KV budget: {type(handle).__name__}")


def _as(model: type[_M], value: Any) -> _M:
    """Accept the boundary model itself or its plain dict (a Run may answer with either)."""
    return value if isinstance(value, model) else model.model_validate(value)


def as_port(handle: Any) -> RunPort:
    """A Run actor handle (or a pooled host's, with the run named) becomes an `ActorPort`; anything already
    speaking `RunPort` is used as is."""
    if isinstance(handle, ActorHandle | RunOnHost):
        return ActorPort(handle)
    if isinstance(handle, RunPort):
        return handle
    raise TypeError(f"not a RunPort or a Run actor handle: {type(handle).__name__}")


class HarnessActorImpl:
    """The actor's behaviour. One instance holds one Conversation, so `continue` spans Turns on the same actor."""

    def __init__(
        self,
        config: ProviderConfig | dict[str, Any] | None = None,
        limits: Limits | dict[str, Any] | None = None,
        telemetry_sink: Any = None,
        telemetry_method: str = "record_telemetry",
        events_on: bool = True,
        admission: Any = None,
        admission_growth: int = 512,
        admission_release_s: float = 1.0,
    ) -> None:
        """`admission` is the handle of the LLM app's KV budget actor (Turn admission), shared with the Harnesses of
        every other run; None: requests go out unasked."""
        # The actor's constructor is where its process starts: with no config given, its own settings, read once.
        provider_config = (ProviderConfig.model_validate(config) if config is not None
                           else ProviderConfig.from_settings(load_settings()))
        self._sink = telemetry_sink
        self._sink_method = telemetry_method
        self.conversation = Conversation(
            providers=ProviderRegistry(provider_config),
            limits=Limits.model_validate(limits) if limits is not None else None,
            on_telemetry=self._push if telemetry_sink is not None else None,
            admission=_remote_admission(admission),
            admission_growth=admission_growth,
            admission_release_s=admission_release_s,
        )
        events.setup_in_actor("harness", load_settings().home_dir(create=False), on=events_on)  # an entry point

    def _push(self, entry: RequestTelemetry) -> None:
        """Forward telemetry to the Run without waiting for it: a slow sink must not slow the Turn."""
        method: Any = getattr(self._sink, self._sink_method, None) if self._sink is not None else None
        if hasattr(method, "remote"):  # the run's actor, or its pooled host with the run named (`RunOnHost`)
            method.remote(entry)
        elif callable(self._sink):
            self._sink(entry)

    async def start_turn(self, spec: TurnSpec | dict[str, Any], port_handle: Any) -> TurnResult:
        """Run one Turn to its end and return how it ended."""
        turn_spec = spec if isinstance(spec, TurnSpec) else TurnSpec.model_validate(spec)
        events.log("harness.turn_started", run=turn_spec.run_id, iid=turn_spec.iid, seat=turn_spec.slot,
                   model=turn_spec.model)
        result = await self.conversation.run_turn(turn_spec, as_port(port_handle))
        events.log("harness.turn_ended", run=turn_spec.run_id, iid=turn_spec.iid, seat=turn_spec.slot,
                   **result.model_dump(mode="json"))
        return result

    async def abort(self) -> bool:
        """End the running Turn, if any, and return once it has ended (a due receipt or fault answer lands first)."""
        ended = self.conversation.abort()
        await self.conversation.stopped()
        if tracing.enabled():  # the launcher ends this process next: its model-request spans go out first
            await asyncio.to_thread(tracing.flush)
        return ended

    async def pid(self) -> int:
        """The worker's process id (the kill tests end it with `kill -9`)."""
        return os.getpid()

    async def telemetry(self) -> list[RequestTelemetry]:
        return list(self.conversation.telemetry)

    async def messages(self) -> list[Message]:
        """The transcript so far, for the Console and for debugging."""
        return list(self.conversation.messages)


HarnessActor = ray.remote(HarnessActorImpl)
