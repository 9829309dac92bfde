"""Stand-ins for Ray actor methods, for testing actor classes in-process (no Ray) in the unit tier."""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jr2ray.run import host as hostmod
from jr2ray.run import wire

HostClass: Any = hostmod.HostSlot  # a pooled host process holds one or more (`RunHost` routes to them)


class Remote:
    """A Ray method stand-in: `.remote(...)` returns an awaitable with `answer`, as an ObjectRef is inside an async
    actor, and records the call's arguments."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.calls: list[tuple[Any, ...]] = []

    def remote(self, *args: Any) -> asyncio.Future[Any]:
        self.calls.append(args)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_result(self.answer)
        return fut


class Wired:
    """A stand-in host's `wire` over its stand-in `call`, as `RunHost.wire` is over `RunHost.call`: the packed
    arguments unpacked for it, its answer packed. Set it on a stand-in host as `host.wire = Wired(host)`."""

    def __init__(self, host: Any) -> None:
        self.host = host

    def remote(self, blob: bytes) -> _PackedRef:
        return _PackedRef(self.host.call.remote(*wire.unpack(blob)))


class _PackedRef:
    """The stand-in call's ref with its answer packed: awaitable, and `.future()` when the call's ref has one."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def __await__(self) -> Any:
        return self._packed().__await__()

    async def _packed(self) -> bytes:
        return wire.pack(await self.ref)

    def future(self) -> concurrent.futures.Future[bytes]:
        inner, out = self.ref.future(), concurrent.futures.Future()

        def done(f: concurrent.futures.Future[Any]) -> None:
            if f.cancelled():
                out.cancel()
            elif (exc := f.exception()) is not None:
                out.set_exception(exc)
            else:
                out.set_result(wire.pack(f.result()))
        inner.add_done_callback(done)
        return out


class _NextActivation:
    """The registry's `next_activation`: a future per parked pick, resolved when the test wakes the run."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[Any]] = {}

    def remote(self, run_id: str) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[run_id] = fut
        return fut


class _FakeRegistry:
    def __init__(self) -> None:
        self.deactivate = Remote(False)  # the test detaches by hand
        self.idle_now = Remote(None)
        self.next_activation = _NextActivation()


def host_in_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """A RunHost's logic in this process (no Ray): a store under `tmp_path`, and a stand-in registry."""
    ctx = SimpleNamespace(get_actor_id=lambda: "actor-1", was_current_actor_reconstructed=False,
                          get_node_id=lambda: "node-1")
    monkeypatch.setattr(hostmod.ray, "get_runtime_context", lambda: ctx)
    h = HostClass(idle_s=0.0, store=str(tmp_path / "runs"), registry="test-registry")
    h._registry = _FakeRegistry()
    return h
