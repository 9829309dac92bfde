"""Every call a driver makes on a client or a run handle that may wait (on Ray, on the store) has an async twin,
`<name>_async`, so an asyncio driver never blocks its loop by reaching for the sync one. A new sync call without
a twin fails here, unless it is listed below with why it goes without one."""

from __future__ import annotations

import inspect

import pytest

from jr2ray.run.client import Client
from jr2ray.run.handles import ActorRunHandle
from jr2ray.run.virtual import VirtualRunHandle

NO_WAIT = {  # sync and without a twin, each with why
    "Client": {"handle": "builds a handle; the registry's actor handle in it is looked up once per Ray session",
               "menu_of": "a seat's Menu, cached; a miss reads the store, from the parked-run reads' own threads",
               "events": "already an async iterator",
               "registry": "the registry's actor handle: a Ray lookup once per Ray session, then kept"},
    "VirtualRunHandle": {"landed": "the handle's own callback when a write's answer lands",
                         "standings": "already an async iterator"},
    "ActorRunHandle": {},
}


@pytest.mark.parametrize("cls", [Client, VirtualRunHandle, ActorRunHandle], ids=lambda c: c.__name__)
def test_every_call_that_may_wait_has_an_async_twin(cls: type) -> None:
    names = {n for n, _ in inspect.getmembers(cls) if not n.startswith("_")}
    sync = {n for n in names if callable(getattr(cls, n)) and not isinstance(inspect.getattr_static(cls, n), type)
            and not n.endswith("_async") and not inspect.iscoroutinefunction(getattr(cls, n))}
    missing = sorted(n for n in sync - set(NO_WAIT[cls.__name__]) if f"{n}_async" not in names)
    assert missing == [], f"{cls.__name__}: no async twin for {missing}"
    twins = [n for n in sync if f"{n}_async" in names]
    assert twins  # the check looked at real calls (pick_async and send_async give an awaitable PendingPick)


def test_the_list_of_calls_without_a_twin_names_only_real_calls() -> None:
    for cls in (Client, VirtualRunHandle, ActorRunHandle):
        assert all(callable(getattr(cls, n, None)) for n in NO_WAIT[cls.__name__]), cls.__name__
