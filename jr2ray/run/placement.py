"""Where a run's actors may go, from the store that holds its journal.

- SQLite (`store.shared` is False): the journals are files on the head's disk, so every actor that opens them (Run,
  virtual host, registry, timer service) and the run's Harness actors are pinned to the head node through its
  built-in node resource. Adding machines adds model throughput, not run capacity.
- PostgreSQL (shared): Run and virtual host actors, and their Harness actors, go to any node with CPU (Ray's SPREAD
  strategy over nodes offering a sliver of CPU). When that node dies, Ray restarts them elsewhere and they resume
  from the database. Only the registry and the timer service (and the API) are found by name.

`JR2RAY_RUN_PLACEMENT` overrides the choice: `head` pins runs to the head even on PostgreSQL; `spread` with a
SQLite store is refused (its files would not be on the node that opens them).
"""

from __future__ import annotations

from typing import Any, Literal

HEAD_RESOURCE = "node:__internal_head__"  # Ray gives the head node this resource (quantity 1)
PIN = 0.001  # how much of it one actor asks for: any number of actors fit
RUN_CPU = 0.0001  # what a spread run asks for: "a node with CPU"; 10,000 runs fit on one core's worth
Mode = Literal["head", "spread"]

_here: Mode = "head"  # what this process's run actor chose, for the Harness actors it starts


class PlacementError(ValueError):
    """A placement the store cannot serve."""


def mode_for(shared: bool, placement: str = "auto") -> Mode:
    """`auto` spreads runs over the cluster exactly when the store is shared (PostgreSQL)."""
    if placement not in ("auto", "head", "spread"):
        raise PlacementError(f"run placement {placement!r} is not one of auto, head, spread")
    if placement == "spread" and not shared:
        raise PlacementError("run placement 'spread' needs a shared store (postgresql://...): SQLite journals "
                             "are files on the head's disk")
    if placement == "auto":
        return "spread" if shared else "head"
    return "head" if placement == "head" else "spread"


def options(mode: Mode) -> dict[str, Any]:
    """Ray actor options for a run's actor (or its Harness) placed by `mode`."""
    if mode == "head":
        return {"num_cpus": 0, "resources": {HEAD_RESOURCE: PIN}}
    return {"num_cpus": RUN_CPU, "scheduling_strategy": "SPREAD"}


def service_options(shared: bool) -> dict[str, Any]:
    """The registry and the timer service: on the head with SQLite (they open the files); anywhere otherwise."""
    return {"num_cpus": 0} if shared else {"num_cpus": 0, "resources": {HEAD_RESOURCE: PIN}}


def describe(mode: Mode) -> str:
    """One line for `up`: where runs go, and why."""
    if mode == "head":
        return ("runs: on the head node only (the SQLite store's journals are files on its disk; "
                "use --store postgresql://... to place runs on any node)")
    return "runs: on any node with CPU (the PostgreSQL store is shared; a dead node's runs resume elsewhere)"


def set_here(mode: Mode) -> None:
    """Remember this process's run placement (a Run or host actor calls it when it opens its store)."""
    global _here
    _here = mode


def here() -> dict[str, Any]:
    """Options for actors a run starts (its Harness): the same placement as the run's."""
    return options(_here)
