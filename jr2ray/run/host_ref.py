"""A host's handle as the registry answers it: the host's actor id beside Ray's serialized handle, so a process that
was named that host before gets the same handle again instead of having Ray build another.

Why: a pooled host serves many runs (30 hosts for 10,000 at a Gate), and every answer that names one (an
activation, a wake on the long poll, a watch) carried a full `ActorHandle`. Ray builds a new handle at each
unpickling, its method table included. py-spy on the driver during 10,000 wakes (N=10,000, 2 cores) found a fifth of
the time it held the GIL spent in `ActorHandle._deserialization_helper`, on the thread that also unpickles every
answer; at N=1,000 the driver unpickled 2,030 handles in 1,000 wakes.

Hosts are detached actors (`pool.py`): their lifetime does not hang on who holds a handle, so an answer may name one
out of band, as Ray's own `ActorHandle.__reduce__` does, without the registry (the handle's owner) tracking each
receiver as a borrower.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.actor import ActorHandle

CACHE_MAX = 4096  # hosts named in one process's life before its caches start afresh (a pool restarts hosts rarely)

_sent: dict[bytes, SharedHost] = {}  # the registry's side: actor id -> what it answers for that host
_here: dict[bytes, Any] = {}  # a receiving process's side: actor id -> the one handle on that host built here
_under: list[Any] = [None]  # the Ray connection `_here`'s handles were built under


class SharedHost:
    """What an answer carries for a host: unpickled, it is the receiving process's own handle on that host."""

    __slots__ = ("key", "state", "weak")

    def __init__(self, key: bytes, state: bytes, weak: bool) -> None:
        self.key, self.state, self.weak = key, state, weak

    def __reduce__(self) -> tuple[Any, tuple[bytes, bytes, bool]]:
        return _handle, (self.key, self.state, self.weak)


def _handle(key: bytes, state: bytes, weak: bool) -> Any:
    """Runs where an answer is unpickled (a Ray thread): the cached handle, else one built from `state`. A process
    that connected to Ray again (`ray.shutdown`, then `ray.init`) starts afresh: a handle from the old connection
    is not registered with the new one."""
    core = getattr(ray._private.worker.global_worker, "core_worker", None)
    if core is not _under[0] or len(_here) >= CACHE_MAX:
        _here.clear()
        _under[0] = core
    got = _here.get(key)
    if got is None:
        got = _here[key] = ActorHandle._deserialization_helper(state, weak, None)
    return got


def shared(host: Any) -> Any:
    """`host` as an answer should carry it: an actor handle becomes a `SharedHost` (its state serialized once per
    host in this process); anything else (None, a test's stand-in) is returned as it is."""
    if not isinstance(host, ActorHandle):
        return host
    key = host._actor_id.binary()
    got = _sent.get(key)
    if got is None:
        if len(_sent) >= CACHE_MAX:
            _sent.clear()
        state, _ref, weak = host._serialization_helper()
        got = _sent[key] = SharedHost(key, state, weak)
    return got


def shared_first(answer: list[Any]) -> list[Any]:
    """A registry answer whose first item is a host (`[host]`, `[host, first write's answer]`, or `[]`)."""
    return [shared(answer[0]), *answer[1:]] if answer else answer
