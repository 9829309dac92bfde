"""Stand-ins for Ray actor methods, for testing actor classes in-process (no Ray) in the unit tier."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from jr2ray.run import host as hostmod

HostClass: Any = hostmod.RunHost.__ray_metadata__.modified_class.__mro__[1]  # the class under @ray.remote


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
