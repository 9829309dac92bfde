"""The calls on a run are declared once (`jr2ray.run.calls`): the Run actor, the host's dispatch, both driver handles
and LocalRun offer exactly those, and the API's face on a virtual run takes no other name."""

from __future__ import annotations

import inspect

import pytest

from jr2ray.run.actor import RunActor
from jr2ray.run.calls import DRIVER_CALLS, RUN_CALLS, check_call
from jr2ray.run.handles import ActorRunHandle, VirtualActorRef
from jr2ray.run.host_calls import ENGINE_CALLS
from jr2ray.run.local import LocalRun
from jr2ray.run.virtual import VirtualRunHandle

HOST_ONLY = {"watch"}  # the host's long call under until_turn/until_gate/finished
ACTOR_EXTRAS = {"node"}  # diagnostics of the one-actor-per-run mode


def _public(cls: type) -> set[str]:
    return {n for n, _ in inspect.getmembers(cls, callable) if not n.startswith("_")}


def test_the_run_actor_offers_exactly_the_declared_calls() -> None:
    actor = RunActor.__ray_metadata__.modified_class  # type: ignore[attr-defined]
    assert _public(actor) - ACTOR_EXTRAS == set(RUN_CALLS) - HOST_ONLY


def test_the_host_serves_every_declared_call_and_no_other() -> None:
    assert set(ENGINE_CALLS) | HOST_ONLY == set(RUN_CALLS)


@pytest.mark.parametrize("handle", [ActorRunHandle, VirtualRunHandle])
def test_a_driver_handle_offers_each_driver_call_sync_and_async(handle: type) -> None:
    names = _public(handle)
    missing = {c for c in DRIVER_CALLS if c not in names or f"{c}_async" not in names}
    assert not missing, f"{handle.__name__} lacks {sorted(missing)}"


def test_local_run_offers_each_driver_call() -> None:
    assert DRIVER_CALLS <= _public(LocalRun)


def test_the_api_face_takes_no_undeclared_name() -> None:
    ref = VirtualActorRef("run-1", registry=None)
    assert callable(ref.status.remote)
    with pytest.raises(AttributeError):
        ref.statsu  # noqa: B018 - a typo must not reach a run
    with pytest.raises(ValueError, match="unknown run call 'statsu'"):
        check_call("statsu")
