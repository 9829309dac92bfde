"""A run's actor-like face made from the API's cache of hosts alone (`VirtualActorRef(remembered=True)`): a read
that finds that host gone or holding another run says so (`StaleHost`) and wakes nothing, so the caller reads the
parked run from the store; without the cache, the same read asks the registry (which wakes a parked run)."""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable
from typing import Any

import pytest
import ray
from ray_stand_ins import Wired

from jr2ray.run.handles import StaleHost, VirtualActorRef
from jr2ray.run.models import NotHere


class _Method:
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def remote(self, *args: Any) -> Any:
        return self.fn(*args)


class _Host:
    _actor_id = types.SimpleNamespace(hex=lambda: "a1")

    def __init__(self, answer: Callable[[], Any]) -> None:
        async def call(*_: Any) -> Any:
            return answer()
        self.call = _Method(call)
        self.wire = Wired(self)


def _gone() -> Any:
    raise ray.exceptions.RayActorError()


class _Registry:
    def __init__(self) -> None:
        self.activated = 0

        async def host_died(*_: Any) -> None:
            return None

        async def activate(*_: Any) -> list[Any]:
            self.activated += 1
            return [_Host(lambda: "read from the run's new host")]
        self.host_died, self.activate = _Method(host_died), _Method(activate)


@pytest.mark.parametrize("answer", [_gone, lambda: NotHere(run_id="run-1")], ids=["host gone", "run let go"])
def test_a_remembered_host_that_lost_the_run_says_so_and_wakes_nothing(answer: Callable[[], Any]) -> None:
    registry = _Registry()
    hosts = {"run-1": _Host(answer)}
    ref = VirtualActorRef("run-1", registry, hosts, remembered=True)
    with pytest.raises(StaleHost):
        asyncio.run(ref.invoke("surface", ["run-1.t1"]))
    assert registry.activated == 0 and "run-1" not in hosts

    fresh = VirtualActorRef("run-1", registry, {"run-1": _Host(answer)})  # not from the cache alone: asks anew
    assert asyncio.run(fresh.invoke("surface", ["run-1.t1"])) == "read from the run's new host"
    assert registry.activated == 1
