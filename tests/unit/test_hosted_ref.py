"""A Harness's handle on a run held by a pooled host of several runs (`RunOnHost`): each call names its run."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from jr2ray.run.calls import RUN_CALLS
from jr2ray.run.hosted_ref import HARNESS_CALLS, RunOnHost


class _Host:
    """A host handle stand-in: `run_call.remote(...)` records what it was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []
        self.run_call = self

    def remote(self, *args: Any) -> str:
        self.sent.append(args)
        return "ref"


def test_each_harness_call_goes_to_the_host_with_the_run_named() -> None:
    host = _Host()
    run = RunOnHost(host, "run-7")
    assert run.pick.remote("writer", "ask", {"question": "q"}, "d-1") == "ref"
    run.record_telemetry.remote({"tokens": 3})
    assert host.sent == [("run-7", "pick", ["writer", "ask", {"question": "q"}, "d-1"]),
                         ("run-7", "record_telemetry", [{"tokens": 3}])]


def test_a_name_a_harness_does_not_call_is_refused_and_every_one_it_does_is_a_declared_call() -> None:
    run = RunOnHost(_Host(), "run-7")
    with pytest.raises(AttributeError, match="cancel"):
        run.cancel  # noqa: B018 - the attribute access is the call under test
    assert set(HARNESS_CALLS) <= set(RUN_CALLS)


def test_it_travels_to_a_harness_actor_whole() -> None:
    got = pickle.loads(pickle.dumps(RunOnHost("a host handle", "run-7")))
    assert got == RunOnHost("a host handle", "run-7")
