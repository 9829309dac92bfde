"""Stand-ins for Ray actor methods, for testing actor classes in-process (no Ray) in the unit tier."""

from __future__ import annotations

import asyncio
from typing import Any


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
