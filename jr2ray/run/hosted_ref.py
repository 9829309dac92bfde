"""The handle a Harness gets on its run: the run's own actor, or, in a pooled host process that holds several runs,
that process with the run named (`RunOnHost`). Light on purpose: a Harness's launcher imports it in any process."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

IN_HOST = False  # set by `RunHost` in its process: its runs share one actor
HARNESS_CALLS = ("surface", "pick", "fault", "record_transcript", "transcript", "turn_waits", "record_telemetry")


@dataclass(frozen=True)
class _Method:
    host: Any
    run_id: str
    name: str

    def remote(self, *args: Any) -> Any:
        return self.host.run_call.remote(self.run_id, self.name, list(args))


@dataclass(frozen=True)
class RunOnHost:
    """A run held by a pooled host: `.pick.remote(...)` and the rest of a Harness's calls (`HARNESS_CALLS`), as on
    a run's own actor, each one call of the host's `run_call`. Picklable: it travels to the Harness actor."""

    host: Any
    run_id: str

    def __getattr__(self, name: str) -> _Method:
        if name not in HARNESS_CALLS:
            raise AttributeError(f"a Harness does not call {name!r} on its run")
        return _Method(self.host, self.run_id, name)


def run_handle(run_id: str) -> Any:
    """What a Harness started in this process calls its run through."""
    import ray

    me = ray.get_runtime_context().current_actor
    return RunOnHost(me, run_id) if IN_HOST else me


__all__ = ["HARNESS_CALLS", "IN_HOST", "RunOnHost", "run_handle"]
