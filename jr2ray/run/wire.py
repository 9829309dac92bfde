"""A call on a hosted run as one Ray call with one argument and one answer, each a pickled `bytes`.

Why: Ray serializes every argument of a call on its own, and an answer that is not a plain value (a pydantic
`Receipt`, a `Carried`) through its cloudpickle path. Measured on the 2-core box against a bare async actor's ping
(no argument, `None` back), a call with a pick's five arguments took 0.36 ms more, the same packed into one `bytes`
0.17 ms; answering a `Receipt` took 0.17 ms more than answering its pickle. A pick on a live run is one such call, so
those fractions of a millisecond are a good part of what it costs above a ping.

`RunHost.wire` serves it (the same `RunHost.call`, its arguments and answer packed here); the driver's handles and
watches call their run's host only through `send` and `call` below. An error the call raises still comes back as
Ray's own (`RayTaskError`), as from `RunHost.call`.
"""

from __future__ import annotations

import pickle
from typing import Any

from ray import cloudpickle

PROTOCOL = 5
_DEFAULTS = (True, False, None)  # `RunHost.call`'s forward, standing and carry


def pack(value: Any) -> bytes:
    """`value` pickled, by cloudpickle (as Ray would have) when the standard pickler cannot, or when it named
    something of the sender's `__main__`: a class or function of a driver's script is pickled by name, and the host
    has no such script to find it in. cloudpickle sends those by value."""
    try:
        blob = pickle.dumps(value, protocol=PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError):
        return cloudpickle.dumps(value, protocol=PROTOCOL)
    return cloudpickle.dumps(value, protocol=PROTOCOL) if b"__main__" in blob else blob


def unpack(blob: bytes) -> Any:
    return pickle.loads(blob)


def send(host: Any, run_id: str, method: str, args: list[Any], forward: bool = True,
         standing: bool | str = False, carry: list[list[Any]] | None = None) -> Any:
    """`RunHost.call(run_id, method, args, forward, standing, carry)` sent packed (the arguments after `args` only
    as far as one is not its default): the Ray object ref of its packed answer (`unpack` it)."""
    parts: tuple[Any, ...] = (run_id, method, args, forward, standing, carry)
    given = len(parts)
    while given > 3 and parts[given - 1] == _DEFAULTS[given - 4]:
        given -= 1
    return host.wire.remote(pack(parts[:given]))


async def answer(ref: Any) -> Any:
    """The unpacked answer of a call `send` sent (it was sent then, not when this is awaited)."""
    return unpack(await ref)


async def call(host: Any, run_id: str, method: str, args: list[Any], forward: bool = True,
               standing: bool | str = False, carry: list[list[Any]] | None = None) -> Any:
    """`send`, awaited and unpacked."""
    return await answer(send(host, run_id, method, args, forward, standing, carry))
