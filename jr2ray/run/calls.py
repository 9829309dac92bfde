"""The calls on a run, declared once.

A run is reached four ways: its own `RunActor` (one actor per run), a pooled `RunHost` (a virtual run), a driver's
handle and an in-process `LocalRun`. Each of them offers exactly these calls; the host dispatches by this table, an
API ref accepts no other name, and a test holds the four to it. `write`: the call changes the run, so an answer lost
in transit is never sent again blindly (D12). `parked`: a parked run answers it from the store, without waking.
`driver`: a driver's handle (and `LocalRun`) offers it; the others are a Harness's calls on its run, and `watch` is
the host's long call under `until_turn`, `until_gate` and `finished`.
"""

from __future__ import annotations

from typing import NamedTuple


class RunCall(NamedTuple):
    name: str
    write: bool
    parked: bool
    driver: bool = True


RUN_CALLS: dict[str, RunCall] = {c.name: c for c in (
    RunCall("ready", write=False, parked=False),
    RunCall("status", write=False, parked=True),
    RunCall("gates", write=False, parked=True),
    RunCall("surface", write=False, parked=True),  # its first read of a restarted Turn takes the notices: see host
    RunCall("history", write=False, parked=True),
    RunCall("telemetry", write=False, parked=True),
    RunCall("transcript", write=False, parked=False, driver=False),
    RunCall("pid", write=False, parked=False),
    RunCall("wait", write=False, parked=False),
    RunCall("watch", write=False, parked=False, driver=False),
    RunCall("pick", write=True, parked=False),
    RunCall("send", write=True, parked=False),
    RunCall("cancel", write=True, parked=False),
    RunCall("stop", write=True, parked=False),
    RunCall("fault", write=True, parked=False, driver=False),
    RunCall("record_telemetry", write=True, parked=False),
    RunCall("record_transcript", write=True, parked=False, driver=False),
    RunCall("turn_waits", write=True, parked=False, driver=False),  # a Harness Turn waits for KV room (may park)
)}

DRIVER_CALLS = frozenset(c.name for c in RUN_CALLS.values() if c.driver)
READS = frozenset(c.name for c in RUN_CALLS.values() if not c.write)  # safe to send again after a lost answer


def check_call(name: str) -> RunCall:
    """The declared call `name`; ValueError for any other (a typo must not reach a run)."""
    got = RUN_CALLS.get(name)
    if got is None:
        raise ValueError(f"unknown run call {name!r}; a run takes {', '.join(sorted(RUN_CALLS))}")
    return got
